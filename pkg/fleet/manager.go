package fleet

import (
	"fmt"
	"math"
	"net"
	"strings"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// ManagerConfig is the process-level configuration of the hub manager. A zero
// field is not set: it takes a default, derived from the fields that are set
// where it depends on them, so that a setting of one never conflicts with the
// default of another (see addresses and timings).
type ManagerConfig struct {
	// MetricsAddr and ProbeAddr are the addresses of the metrics endpoint and
	// of /healthz and /readyz; "0" disables one. Unset, they are :8080 and
	// :8081, or each other's when the other takes its port.
	MetricsAddr, ProbeAddr string
	LeaderElection         bool
	LeaderElectionNS       string
	// LeaseDuration, RenewDeadline and RetryPeriod time leader election; unset
	// ones derive from those set (timings).
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// HeapReleaseInterval is how often freed heap is looked at, to be returned
	// to the OS once the process has gone quiet (heapReleaser); 0 never.
	HeapReleaseInterval time.Duration
	// StandbyWarmAfter: a standby connects the shard's clusters once the
	// leader has left the Lease unrenewed this long (standbyWarmer); 0 (or
	// less) never; nil derives it from the Lease timings (timings).
	StandbyWarmAfter *time.Duration
}

// MemoryLimitRatio is the share of the container's memory limit that the Go
// runtime takes as its soft limit (SetMemoryLimit). The rest is for what the
// soft limit does not count: the binary's text and data, thread stacks
// outside the heap, and the garbage the GC has not yet returned.
//
// Not lower: at 75% the 2,000 simulated clusters of make bench sat at the soft
// limit (764 MiB RSS, 393 MiB live), and with 100 Nodes in each cache (about
// 600 MiB live) the GC ran so often that 41 of 2,000 clusters were still not
// InSync after 6 minutes; at 90% all were, in 264 to 304 s, with RSS peaking
// below 1,024 MiB.
const MemoryLimitRatio = 0.9

// SetMemoryLimit sets the Go runtime's soft memory limit to MemoryLimitRatio
// of the memory limit of the process's cgroup (a container's
// resources.limits.memory), read by automemlimit (cgroup v1 and v2), so the
// GC works harder before the kernel would kill the pod. A GOMEMLIMIT in the
// environment wins; AUTOMEMLIMIT=off turns it off. Without a cgroup limit it
// sets no limit. It returns the limit set, in bytes (math.MaxInt64 for none).
func SetMemoryLimit() (int64, error) {
	return memlimit.Set(memlimit.WithRatio(MemoryLimitRatio), memlimit.WithProvider(memlimit.FromCgroup))
}

// NewManager builds the hub manager with the controller's cache and client
// restrictions and leader election per shard, and sets the fleet controller
// up in it. It is the one setup path: cmd/hub-controller and the int suites
// both call it.
func NewManager(cfg *rest.Config, mc ManagerConfig, opts Options) (manager.Manager, *Reconciler, error) {
	st, err := settle(mc, opts)
	if err != nil {
		return nil, nil, err
	}
	opts, le, metricsAddr, probeAddr := st.opts, st.election, st.metricsAddr, st.probeAddr
	mo := ctrl.Options{
		Scheme:                        Scheme(),
		Cache:                         CacheOptions(),
		Client:                        ClientOptions(),
		Metrics:                       metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:        probeAddr,
		LeaderElection:                mc.LeaderElection,
		LeaderElectionID:              opts.LeaderElectionID(),
		LeaderElectionNamespace:       mc.LeaderElectionNS,
		LeaderElectionReleaseOnCancel: true,
	}
	var lease *leaseObserver
	recorders := &lateRecorders{}
	if mc.LeaderElection {
		mo.LeaseDuration, mo.RenewDeadline, mo.RetryPeriod = &le.Lease, &le.Renew, &le.Retry
		if lease, err = newObservedLock(cfg, mc.LeaderElectionNS, le.Renew, opts.LeaderElectionID(), recorders, opts.Clock.Now); err != nil {
			return nil, nil, err
		}
		// Writes are fenced: a replica writes to a spoke or the hub only while
		// its Lease is its own by its own clock (fence.go). The lock keeps the
		// config it was made with, so the Lease's own writes are not fenced.
		lease.fence = newFence(le.Renew)
		opts.WriteFence = lease.fence.check
		mo.LeaderElectionResourceLockInterface = lease
		cfg = rest.CopyConfig(cfg)
		cfg.Wrap(writesFenced(lease.fence.check))
	}
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		return nil, nil, err
	}
	recorders.set(mgr)
	if mc.LeaderElection {
		log := mgr.GetLogger().WithName("leader-election")
		log.Info("leader election", "leaseDuration", le.Lease.String(), "renewDeadline", le.Renew.String(), "retryPeriod", le.Retry.String(), "standbyWarmAfter", le.WarmAfter.String())
		if le.WarmOff != "" {
			log.Info(le.WarmOff)
		}
	}
	if probeAddr != "0" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return nil, nil, err
		}
		if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
			return nil, nil, err
		}
	}
	if mc.HeapReleaseInterval > 0 {
		if err := mgr.Add(newHeapReleaser(mc.HeapReleaseInterval, mgr.GetLogger().WithName("heap"), register(metrics.Registry, newHeapReleases()))); err != nil {
			return nil, nil, err
		}
	}
	r, err := Setup(mgr, opts)
	if err != nil {
		return nil, nil, err
	}
	if lease != nil && le.WarmAfter > 0 {
		w := &standbyWarmer{lease: lease, after: le.WarmAfter, elected: mgr.Elected(), hub: mgr.GetCache(), spokes: r.Spokes,
			inShard: opts.InShard, workers: opts.MaxConcurrentClusters, log: mgr.GetLogger().WithName("standby"),
			warmups: register(metrics.Registry, newStandbyWarmups()), now: opts.Clock.Now}
		lease.acquired = w.endWarming
		if err := mgr.Add(w); err != nil {
			return nil, nil, err
		}
	}
	return mgr, r, nil
}

// settled is what a manager runs with: every unset setting derived from
// those set.
type settled struct {
	opts                   Options
	metricsAddr, probeAddr string
	election               electionTimings // zero without leader election
}

// settle derives what mc and opts leave unset, or refuses settings that
// cannot work together.
func settle(mc ManagerConfig, opts Options) (settled, error) {
	if err := opts.check(); err != nil {
		return settled{}, err
	}
	st := settled{opts: opts.WithDefaults()}
	var err error
	if st.metricsAddr, st.probeAddr, err = mc.addresses(); err != nil {
		return settled{}, err
	}
	if mc.LeaderElection {
		if st.election, err = mc.timings(); err != nil {
			return settled{}, err
		}
	}
	return st, nil
}

// Defaults of the bind addresses.
const (
	DefaultMetricsAddr = ":8080"
	DefaultProbeAddr   = ":8081"
)

// addresses returns the metrics and probe addresses. An unset one takes its
// default, or the other's default when the other was set to its port (a
// user who moves one endpoint onto the other's port means to swap them);
// two set to the same port are refused.
func (mc ManagerConfig) addresses() (metricsAddr, probeAddr string, err error) {
	metricsAddr, probeAddr = mc.MetricsAddr, mc.ProbeAddr
	switch {
	case metricsAddr == "" && probeAddr == "":
		return DefaultMetricsAddr, DefaultProbeAddr, nil
	case metricsAddr == "":
		metricsAddr = DefaultMetricsAddr
		if sameSocket(metricsAddr, probeAddr) {
			metricsAddr = DefaultProbeAddr
		}
	case probeAddr == "":
		probeAddr = DefaultProbeAddr
		if sameSocket(probeAddr, metricsAddr) {
			probeAddr = DefaultMetricsAddr
		}
	case sameSocket(metricsAddr, probeAddr):
		return "", "", fmt.Errorf("--metrics-bind-address=%s and --health-probe-bind-address=%s: both take the same port", metricsAddr, probeAddr)
	}
	return metricsAddr, probeAddr, nil
}

// sameSocket says whether listening on a and b would clash: the same port
// (not 0, which picks a free one) on the same host, or on every interface.
func sameSocket(a, b string) bool {
	if a == "0" || b == "0" {
		return false
	}
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false
	}
	anyHost := func(h string) bool { return h == "" || h == "0.0.0.0" || h == "::" }
	return ha == hb || anyHost(ha) || anyHost(hb)
}

// controller-runtime's leader election defaults, which client-go's own
// components use too.
const (
	defaultLeaseDuration = 15 * time.Second
	defaultRenewDeadline = 10 * time.Second
	defaultRetryPeriod   = 2 * time.Second
)

// The flags that time leader election, as errors name them.
const (
	flagLease = "--leader-elect-lease-duration"
	flagRenew = "--leader-elect-renew-deadline"
	flagRetry = "--leader-elect-retry-period"
	flagWarm  = "--standby-warm-after"
)

// electionTimings are the leader election durations a manager runs with.
type electionTimings struct {
	Lease, Renew, Retry time.Duration
	// WarmAfter is the standby's warm-up delay; 0: no warm-up.
	WarmAfter time.Duration
	// WarmOff says why there is no warm-up, when the configuration did not
	// turn it off.
	WarmOff string
}

// timings derives the unset leader election durations from those set. They
// must satisfy client-go's leader election, which refuses a lease duration
// not above the renew deadline, or a renew deadline not above JitterFactor
// (1.2) retry periods, and the standby's warm-up, which must come after the
// leader could still renew, even late (a leader renews every retry period,
// and one whose renewal timed out, after half the renew deadline, tries
// again a retry period later), and before the Lease expires anyway:
//
//	lease > renew > 1.2 retry;  retry + renew/2 < warm-after < lease
//
// An unset duration takes its default if that fits those set, or else their
// proportions in the defaults (15 s, 10 s, 2 s and 8 s: renew deadline 2/3
// of the lease duration, retry period 1/5 of the renew deadline, warm-up
// half a retry period after retry + renew/2), or, when those conflict, the
// middle of what fits. So a default never refuses a setting: only set values
// that cannot work together are refused, and a warm-up that was not set and
// fits nowhere is turned off (WarmOff says why).
func (mc ManagerConfig) timings() (electionTimings, error) {
	lease, renew, retry := mc.LeaseDuration, mc.RenewDeadline, mc.RetryPeriod
	setLease, setRenew, setRetry := lease > 0, renew > 0, retry > 0
	warm := time.Duration(-1) // unset
	if mc.StandbyWarmAfter != nil {
		warm = max(*mc.StandbyWarmAfter, 0)
	}
	setWarm := warm > 0 // a warm-up the others must fit

	switch {
	case setLease && setRenew && renew >= lease:
		return electionTimings{}, fmt.Errorf("%s=%s must be below %s=%s", flagRenew, renew, flagLease, lease)
	case setRenew && setRetry && renew <= jittered(retry):
		return electionTimings{}, fmt.Errorf("%s=%s must be above %s=%s times %v (client-go's leader election needs it)", flagRenew, renew, flagRetry, retry, leaderelection.JitterFactor)
	case setWarm && setLease && warm >= lease:
		return electionTimings{}, fmt.Errorf("%s=%s must be below %s=%s, or 0 (never)", flagWarm, warm, flagLease, lease)
	case setWarm && setRenew && setRetry && warm <= retry+renew/2:
		return electionTimings{}, fmt.Errorf("%s=%s must be above %s=%s plus half %s=%s (%s), or 0 (never)", flagWarm, warm, flagRetry, retry, flagRenew, renew, retry+renew/2)
	case setWarm && setRenew && warm <= renew/2:
		return electionTimings{}, fmt.Errorf("%s=%s must be above the retry period plus half %s=%s, or 0 (never)", flagWarm, warm, flagRenew, renew)
	}

	if !setRenew {
		d, lo, hi := defaultRenewDeadline, time.Duration(0), time.Duration(math.MaxInt64)
		hiFlags := ""
		if setLease {
			d, hi, hiFlags = min(d, lease*2/3), lease, flagLease
		}
		if setWarm && setRetry {
			d = min(d, 2*warm-3*retry)
			if h := 2 * (warm - retry); h < hi {
				hi, hiFlags = h, flagWarm
			}
		} else if setWarm {
			d, hi = min(d, warm*5/4), min(hi, 2*warm)
		}
		if setRetry {
			d, lo = max(d, 5*retry), jittered(retry)
		}
		if d <= lo || d >= hi {
			if hi-lo < 2 {
				switch {
				case hiFlags == flagWarm:
					return electionTimings{}, fmt.Errorf("%s=%s must be above %s=%s plus half the renew deadline, which must be above %v times the retry period, or 0 (never)", flagWarm, warm, flagRetry, retry, leaderelection.JitterFactor)
				case setRetry:
					return electionTimings{}, fmt.Errorf("%s=%s leaves no renew deadline below %s=%s and above %v times the retry period (client-go's leader election needs one)", flagRetry, retry, flagLease, lease, leaderelection.JitterFactor)
				}
				return electionTimings{}, fmt.Errorf("%s cannot work", mc.timingFlags())
			}
			d = lo + (hi-lo)/2
		}
		renew = tidy(d, lo, hi)
	}
	if !setRetry {
		r, hi := min(defaultRetryPeriod, renew/5), renew*5/6
		if setWarm {
			r, hi = min(r, (warm-renew/2)*2/3), min(hi, warm-renew/2)
		}
		if r <= 0 || r >= hi {
			r = hi / 2
		}
		retry = tidy(r, 0, hi)
	}
	if !setLease {
		l := max(defaultLeaseDuration, renew*3/2)
		if setWarm {
			l = max(l, warm*15/8)
		}
		lease = tidy(l, max(renew, warm), math.MaxInt64)
	}

	t := electionTimings{Lease: lease, Renew: renew, Retry: retry, WarmAfter: max(warm, 0)}
	late := retry + renew/2
	if warm < 0 {
		switch {
		case late < DefaultStandbyWarmAfter && DefaultStandbyWarmAfter < lease:
			t.WarmAfter = DefaultStandbyWarmAfter
		case late < lease-1:
			t.WarmAfter = tidy(min(late+retry/2, late+(lease-late)/2), late, lease)
		default:
			t.WarmOff = fmt.Sprintf("no standby warm-up: it must start after the retry period plus half the renew deadline (%s), which leaves no time before the lease duration (%s) runs out", late, lease)
		}
	}
	// What client-go checks, and the warm-up's window: an error here is a
	// derivation's bug, named with every duration.
	if lease <= renew || renew <= jittered(retry) || retry <= 0 || t.WarmAfter > 0 && (t.WarmAfter <= late || t.WarmAfter >= lease) {
		return electionTimings{}, fmt.Errorf("leader election: lease duration %s, renew deadline %s, retry period %s and standby warm-up after %s (from %s) cannot work",
			lease, renew, retry, t.WarmAfter, mc.timingFlags())
	}
	return t, nil
}

// timingFlags lists the leader election durations set, as their flags.
func (mc ManagerConfig) timingFlags() string {
	var set []string
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{flagLease, mc.LeaseDuration}, {flagRenew, mc.RenewDeadline}, {flagRetry, mc.RetryPeriod}} {
		if f.d > 0 {
			set = append(set, fmt.Sprintf("%s=%s", f.name, f.d))
		}
	}
	if mc.StandbyWarmAfter != nil {
		set = append(set, fmt.Sprintf("%s=%s", flagWarm, *mc.StandbyWarmAfter))
	}
	if len(set) == 0 {
		return "the defaults"
	}
	return strings.Join(set, " ")
}

// jittered is the longest wait of client-go's leader election for a retry
// period: a renew deadline must be above it.
func jittered(retry time.Duration) time.Duration {
	return time.Duration(leaderelection.JitterFactor * float64(retry))
}

// tidy rounds a derived duration to the millisecond, for logs and people,
// unless that takes it out of (lo, hi).
func tidy(d, lo, hi time.Duration) time.Duration {
	if r := d.Round(time.Millisecond); r > lo && r < hi {
		return r
	}
	return d
}
