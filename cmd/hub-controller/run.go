package main

import (
	"flag"
	"fmt"
	"os"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/openshift/hub-node-metadata/pkg/fleet"
	"github.com/openshift/hub-node-metadata/pkg/remote"
	"github.com/openshift/hub-node-metadata/pkg/version"
)

// controllerFlags registers the controller's flags on fs.
func controllerFlags(fs *flag.FlagSet, mc *fleet.ManagerConfig, o *fleet.Options) {
	fs.StringVar(&mc.MetricsAddr, "metrics-bind-address", ":8080", "address of the metrics endpoint (0 disables it)")
	fs.StringVar(&mc.ProbeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz (0 disables it)")
	fs.BoolVar(&mc.LeaderElection, "leader-elect", false, "elect a leader per shard with a Lease; only the leader connects to spokes and writes")
	fs.StringVar(&mc.LeaderElectionNS, "leader-elect-namespace", "", "namespace of the Lease (default: the pod's namespace)")
	fs.DurationVar(&mc.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "leader election lease duration")
	fs.DurationVar(&mc.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "leader election renew deadline")
	fs.DurationVar(&mc.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "leader election retry period")

	fs.IntVar(&o.MaxConcurrentClusters, "max-concurrent-clusters", 20, "clusters synced at once")
	fs.IntVar(&o.WritesPerCluster, "writes-per-cluster", 8, "writes in flight per cluster")
	fs.BoolVar(&o.DryRun, "dry-run", false, "observe and report drift; write nothing to spokes")
	fs.DurationVar(&o.ResyncPeriod, "resync-period", 10*time.Minute, "safety-net resync of every cluster (jittered ±10%)")
	fs.DurationVar(&o.SyncTimeout, "sync-timeout", 2*time.Minute, "upper bound of one cluster's sync")
	fs.IntVar(&o.ShardCount, "shard-count", 1, "number of shards clusters are split into")
	fs.IntVar(&o.ShardIndex, "shard-index", 0, "this replica's shard, 0..shard-count-1")
	fs.IntVar(&o.ContestedThreshold, "contested-threshold", 5, "patches of one object within --contested-window that mark it contested (-1 disables)")
	fs.DurationVar(&o.ContestedWindow, "contested-window", 10*time.Minute, "window of contest detection, and how long a contested object is left alone")
	remoteFlags(fs, o)
}

func remoteFlags(fs *flag.FlagSet, o *fleet.Options) {
	fs.Func("hub-qps", "queries per second to the hub API server (default 50)", func(s string) error {
		_, err := fmt.Sscan(s, &hubQPS)
		return err
	})
	fs.IntVar(&hubBurst, "hub-burst", 100, "burst to the hub API server")
	fs.Func("spoke-qps", fmt.Sprintf("queries per second per spoke (default %d)", remote.DefaultQPS), func(s string) error {
		var v float64
		_, err := fmt.Sscan(s, &v)
		o.Remote.QPS = float32(v)
		return err
	})
	fs.IntVar(&o.Remote.Burst, "spoke-burst", remote.DefaultBurst, "burst per spoke")
	fs.IntVar(&o.Remote.MaxConcurrentConnects, "spoke-max-concurrent-connects", remote.DefaultMaxConcurrentConnects, "spoke connection attempts (Secret read, probe, first lists) in flight across the fleet")
	fs.DurationVar(&o.Remote.RequestTimeout, "spoke-request-timeout", 10*time.Second, "timeout of every spoke request")
	fs.DurationVar(&o.Remote.ConnectTimeout, "spoke-connect-timeout", 30*time.Second, "timeout of connecting to a spoke, cache sync included")
	fs.DurationVar(&o.Remote.ProbeInterval, "spoke-probe-interval", 10*time.Second, "health probe period of a connected spoke")
	fs.IntVar(&o.Remote.ProbeFailureThreshold, "spoke-probe-failures", 5, "consecutive probe failures before a spoke is disconnected")
	fs.DurationVar(&o.Remote.BackoffCap, "spoke-backoff-cap", 5*time.Minute, "longest wait between reconnect attempts")
	fs.DurationVar(&o.Remote.SecretRecheckInterval, "spoke-secret-recheck", time.Minute, "how long a healthy connection is trusted before its kubeconfig Secret is read again (a 401 re-reads it at once)")
}

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "hub kubeconfig (default: in-cluster, or $KUBECONFIG)")
	var mc fleet.ManagerConfig
	var o fleet.Options
	controllerFlags(fs, &mc, &o)
	zo := zap.Options{}
	zo.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo)))
	log := ctrl.Log.WithName("hub-controller")
	cfg, err := hubConfig(*kubeconfig)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	// Spoke audit logs name the replica that sent each request.
	o.Remote.UserAgent = fmt.Sprintf("hub-node-metadata/%s (%s; pid %d)", version.Version, host, os.Getpid())
	mgr, _, err := fleet.NewManager(cfg, mc, o)
	if err != nil {
		return err
	}
	log.Info("starting", "version", version.Version, "commit", version.Commit, "dryRun", o.DryRun, "shard", fmt.Sprintf("%d/%d", o.ShardIndex, max(o.ShardCount, 1)))
	return mgr.Start(ctrl.SetupSignalHandler())
}

// Hub client rate limits (client-go's own default, 5/10, is far too low for
// a hub with thousands of clusters).
var (
	hubQPS   float32 = 50
	hubBurst         = 100
)

func hubConfig(path string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if path == "" {
		cfg, err = ctrl.GetConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
	}
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = hubQPS, hubBurst
	return cfg, nil
}
