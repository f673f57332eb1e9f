package fleet

import (
	"fmt"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// ManagerConfig is the process-level configuration of the hub manager.
type ManagerConfig struct {
	MetricsAddr, ProbeAddr string
	LeaderElection         bool
	LeaderElectionNS       string
	LeaseDuration          time.Duration
	RenewDeadline          time.Duration
	RetryPeriod            time.Duration
	// HeapReleaseInterval is how often freed heap is looked at, to be returned
	// to the OS once the process has gone quiet (heapReleaser); 0 never.
	HeapReleaseInterval time.Duration
	// StandbyWarmAfter: a standby connects the shard's clusters once the
	// leader has left the Lease unrenewed this long (standbyWarmer); 0 never.
	StandbyWarmAfter time.Duration
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
	opts = opts.WithDefaults()
	mo := ctrl.Options{
		Scheme:                        Scheme(),
		Cache:                         CacheOptions(),
		Client:                        ClientOptions(),
		Metrics:                       metricsserver.Options{BindAddress: mc.MetricsAddr},
		HealthProbeBindAddress:        mc.ProbeAddr,
		LeaderElection:                mc.LeaderElection,
		LeaderElectionID:              opts.LeaderElectionID(),
		LeaderElectionNamespace:       mc.LeaderElectionNS,
		LeaderElectionReleaseOnCancel: true,
	}
	if mc.LeaseDuration > 0 {
		mo.LeaseDuration = &mc.LeaseDuration
	}
	if mc.RenewDeadline > 0 {
		mo.RenewDeadline = &mc.RenewDeadline
	}
	if mc.RetryPeriod > 0 {
		mo.RetryPeriod = &mc.RetryPeriod
	}
	var lease *leaseObserver
	recorders := &lateRecorders{}
	if mc.LeaderElection && mc.StandbyWarmAfter > 0 {
		if err := mc.checkStandbyWarmAfter(); err != nil {
			return nil, nil, err
		}
		var err error
		if lease, err = newObservedLock(cfg, mc, opts.LeaderElectionID(), recorders); err != nil {
			return nil, nil, err
		}
		mo.LeaderElectionResourceLockInterface = lease
	}
	mgr, err := ctrl.NewManager(cfg, mo)
	if err != nil {
		return nil, nil, err
	}
	recorders.set(mgr)
	if mc.ProbeAddr != "" && mc.ProbeAddr != "0" {
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
	if lease != nil {
		w := &standbyWarmer{lease: lease, after: mc.StandbyWarmAfter, elected: mgr.Elected(), hub: mgr.GetCache(), spokes: r.Spokes,
			inShard: opts.InShard, workers: opts.MaxConcurrentClusters, log: mgr.GetLogger().WithName("standby"),
			warmups: register(metrics.Registry, newStandbyWarmups()), now: time.Now}
		lease.acquired = w.endWarming
		if err := mgr.Add(w); err != nil {
			return nil, nil, err
		}
	}
	return mgr, r, nil
}

// checkStandbyWarmAfter refuses a StandbyWarmAfter that would warm while a
// leader renews, even late (it renews every RetryPeriod, and a renewal that
// timed out, after RenewDeadline/2, is tried again RetryPeriod later), or
// never before the Lease expires anyway.
func (mc ManagerConfig) checkStandbyWarmAfter() error {
	retry, renew, lease := mc.RetryPeriod, mc.RenewDeadline, mc.LeaseDuration
	if retry <= 0 {
		retry = defaultRetryPeriod
	}
	if renew <= 0 {
		renew = defaultRenewDeadline
	}
	if lease <= 0 {
		lease = defaultLeaseDuration
	}
	if late := retry + renew/2; mc.StandbyWarmAfter <= late || mc.StandbyWarmAfter >= lease {
		return fmt.Errorf("--standby-warm-after=%s: must be above the retry period plus half the renew deadline (%s) and below the lease duration (%s), or 0 (never)", mc.StandbyWarmAfter, late, lease)
	}
	return nil
}
