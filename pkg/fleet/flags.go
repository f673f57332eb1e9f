package fleet

import (
	"flag"
	"fmt"
	"time"

	"k8s.io/client-go/rest"

	"github.com/openshift/hub-node-metadata/pkg/remote"
)

// Defaults of `hub-controller run`'s flags that are not Options defaults.
const (
	// DefaultHubQPS and DefaultHubBurst limit the hub client. client-go's own
	// default (5/10) is far too low for a hub with thousands of clusters: a
	// restart reads one kubeconfig Secret per cluster, so 2,000 clusters need
	// 2,000 GETs, 20 s at 100 QPS (see docs/benchmarks.md, "Restart").
	DefaultHubQPS   = 100
	DefaultHubBurst = 200
)

// RunConfig is everything `hub-controller run` takes from its flags. The
// benchmark's controller binds the same flags, so it runs what ships.
type RunConfig struct {
	Manager  ManagerConfig
	Options  Options
	HubQPS   float32
	HubBurst int
}

// BindFlags registers the controller's flags on fs. A flag whose default
// depends on other flags is left zero unless set, and NewManager derives it
// from those set (ManagerConfig.timings and addresses, Options.WithDefaults),
// so that its default never conflicts with a setting of another flag.
func (c *RunConfig) BindFlags(fs *flag.FlagSet) {
	mc, o := &c.Manager, &c.Options
	fs.StringVar(&mc.MetricsAddr, "metrics-bind-address", "", "address of the metrics endpoint, 0 disables it (default "+DefaultMetricsAddr+", or "+DefaultProbeAddr+" if --health-probe-bind-address takes port 8080)")
	fs.StringVar(&mc.ProbeAddr, "health-probe-bind-address", "", "address of /healthz and /readyz, 0 disables it (default "+DefaultProbeAddr+", or "+DefaultMetricsAddr+" if --metrics-bind-address takes port 8081)")
	fs.BoolVar(&mc.LeaderElection, "leader-elect", false, "elect a leader per shard with a Lease; only the leader writes, and a standby connects to spokes only while a dead leader's Lease runs out (--standby-warm-after)")
	fs.StringVar(&mc.LeaderElectionNS, "leader-elect-namespace", "", "namespace of the Lease (default: the pod's namespace)")
	fs.DurationVar(&mc.LeaseDuration, "leader-elect-lease-duration", 0, "leader election lease duration (default 15s, or 1.5 times the renew deadline if longer)")
	fs.DurationVar(&mc.RenewDeadline, "leader-elect-renew-deadline", 0, "leader election renew deadline, below the lease duration (default 10s, or 2/3 of the lease duration if shorter)")
	fs.DurationVar(&mc.RetryPeriod, "leader-elect-retry-period", 0, "leader election retry period, below the renew deadline divided by 1.2 (default 2s, or 1/5 of the renew deadline if shorter)")
	fs.Func("standby-warm-after", "with --leader-elect: a standby connects the shard's clusters (reads only) once the leader has left the Lease unrenewed for this `duration`, so that a failover does not wait for the Lease to expire before connecting; above the retry period plus half the renew deadline, below the lease duration; 0 never (default 8s, or half a retry period above the retry period plus half the renew deadline if 8s does not fit the Lease timings)", func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		mc.StandbyWarmAfter = &d
		return nil
	})
	fs.DurationVar(&mc.HeapReleaseInterval, "heap-release-interval", DefaultHeapReleaseInterval, "how often to look for freed heap to return to the OS once the process has gone quiet after a burst of work (0 never)")

	fs.IntVar(&o.MaxConcurrentClusters, "max-concurrent-clusters", DefaultMaxConcurrentClusters, "clusters synced at once")
	fs.IntVar(&o.WritesPerCluster, "writes-per-cluster", DefaultWritesPerCluster, "writes in flight per cluster")
	fs.BoolVar(&o.DryRun, "dry-run", false, "observe and report drift; write nothing to spokes")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", DefaultResyncPeriod, "safety-net resync of every cluster (jittered ±10%)")
	fs.DurationVar(&o.SyncTimeout, "sync-timeout", DefaultSyncTimeout, "upper bound of one cluster's sync")
	BindShardFlags(fs, o)
	fs.IntVar(&o.ContestedThreshold, "contested-threshold", DefaultContestedThreshold, "patches of one object within --contested-window that mark it contested (-1 disables)")
	fs.DurationVar(&o.ContestedWindow, "contested-window", DefaultContestedWindow, "window of contest detection, and how long a contested object is left alone")
	fs.DurationVar(&o.RetryBase, "retry-base", 0, fmt.Sprintf("retry of a cluster whose writes partly failed transiently (timeouts, 5xx, 429), and first retry of one whose spoke could not be read, doubling per failed retry (default %s, or --retry-cap if shorter)", DefaultRetryBase))
	fs.DurationVar(&o.RetryCap, "retry-cap", 0, fmt.Sprintf("longest wait between retries of a cluster whose spoke cannot be read (or whose writes keep failing, with --outage-probe-interval negative), not below --retry-base (default %s, or --retry-base if longer)", DefaultRetryCap))
	fs.DurationVar(&o.OutageProbeInterval, "outage-probe-interval", 0, fmt.Sprintf("while every write to a cluster fails transiently (a webhook down, an API server answering writes with 5xx), one object is written per interval until one goes through, then the rest at once; negative: retry with the backoff instead (default %s, kept within --retry-base..--retry-cap)", DefaultOutageProbeInterval))
	fs.DurationVar(&o.DeniedRetry, "denied-retry", DefaultDeniedRetry, "how long a Machine or Node whose patch was denied (admission webhook, 400/403/422) is left alone before it is tried again")
	fs.DurationVar(&o.NodeSettle, "node-settle", DefaultNodeSettle, "how long a Node changed back right after a write (nodelink copying from a Machine it has not seen updated) is left for nodelink to catch up before it is written again")
	c.BindHubFlags(fs)
	BindRemoteFlags(fs, &o.Remote)
}

// BindHubFlags registers the hub client's rate limit flags.
func (c *RunConfig) BindHubFlags(fs *flag.FlagSet) {
	c.HubQPS, c.HubBurst = DefaultHubQPS, DefaultHubBurst
	fs.Func("hub-qps", fmt.Sprintf("queries per second to the hub API server (default %d)", DefaultHubQPS), func(s string) error {
		_, err := fmt.Sscan(s, &c.HubQPS)
		return err
	})
	fs.IntVar(&c.HubBurst, "hub-burst", DefaultHubBurst, "burst to the hub API server")
}

// ApplyHub sets the hub client's rate limits on cfg.
func (c *RunConfig) ApplyHub(cfg *rest.Config) {
	cfg.QPS, cfg.Burst = c.HubQPS, c.HubBurst
}

// BindRemoteFlags registers the spoke connection flags.
// BindShardFlags registers --shard-count and --shard-index, which both the
// controller and the drift report take.
func BindShardFlags(fs *flag.FlagSet, o *Options) {
	fs.IntVar(&o.ShardCount, "shard-count", 1, "number of shards clusters are split into")
	fs.IntVar(&o.ShardIndex, "shard-index", 0, "this replica's shard, 0..shard-count-1")
}

func BindRemoteFlags(fs *flag.FlagSet, o *remote.Options) {
	o.QPS = remote.DefaultQPS
	fs.Func("spoke-qps", fmt.Sprintf("queries per second per spoke (default %d)", remote.DefaultQPS), func(s string) error {
		var v float64
		_, err := fmt.Sscan(s, &v)
		o.QPS = float32(v)
		return err
	})
	fs.IntVar(&o.Burst, "spoke-burst", remote.DefaultBurst, "burst per spoke")
	fs.IntVar(&o.MaxConcurrentConnects, "spoke-max-concurrent-connects", remote.DefaultMaxConcurrentConnects, "spoke connection attempts (Secret read, probe, first lists) in flight across the fleet")
	fs.DurationVar(&o.RequestTimeout, "spoke-request-timeout", remote.DefaultRequestTimeout, "timeout of every spoke request")
	fs.DurationVar(&o.ConnectTimeout, "spoke-connect-timeout", remote.DefaultConnectTimeout, "timeout of connecting to a spoke, cache sync included")
	fs.DurationVar(&o.ProbeTimeout, "spoke-probe-timeout", remote.DefaultProbeTimeout, "timeout of a health probe (GET /version); a spoke is probed only after a request or watch failed at the transport")
	fs.DurationVar(&o.ProbeInterval, "spoke-probe-interval", remote.DefaultProbeInterval, "spacing of the probes of a spoke under suspicion (with --spoke-probe-failures above 1), and how long a connection must stay up to count as stable")
	fs.IntVar(&o.ProbeFailureThreshold, "spoke-probe-failures", remote.DefaultProbeFailureThreshold, "consecutive failed probes (after a transport failure) before a spoke is disconnected")
	fs.DurationVar(&o.SecretRecheckInterval, "spoke-secret-recheck", time.Minute, "without the Secret watch only (hub-controller drift): how long a healthy connection is trusted before its kubeconfig Secret is read again")
	fs.DurationVar(&o.BackoffCap, "spoke-backoff-cap", remote.DefaultBackoffCap, fmt.Sprintf("longest wait between reconnect attempts (the first waits %s, or this if shorter)", remote.DefaultBackoffBase))
}
