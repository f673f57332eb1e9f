package main

import (
	"flag"
	"fmt"
	"math"
	"os"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/openshift/hub-node-metadata/pkg/fleet"
	"github.com/openshift/hub-node-metadata/pkg/version"
)

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "hub kubeconfig (default: in-cluster, or $KUBECONFIG)")
	var rc fleet.RunConfig
	rc.BindFlags(fs)
	zo := zap.Options{}
	zo.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo)))
	log := ctrl.Log.WithName("hub-controller")
	memLimit, err := fleet.SetMemoryLimit()
	if err != nil {
		log.Error(err, "cannot read the container's memory limit; running without a soft memory limit")
	}
	cfg, err := hubConfig(*kubeconfig, &rc)
	if err != nil {
		return err
	}
	o := &rc.Options
	host, _ := os.Hostname()
	// Spoke audit logs name the replica that sent each request.
	o.Remote.UserAgent = fmt.Sprintf("hub-node-metadata/%s (%s; pid %d)", version.Version, host, os.Getpid())
	mgr, _, err := fleet.NewManager(cfg, rc.Manager, *o)
	if err != nil {
		return err
	}
	log.Info("starting", "version", version.Version, "commit", version.Commit, "dryRun", o.DryRun, "shard", fmt.Sprintf("%d/%d", o.ShardIndex, max(o.ShardCount, 1)),
		"goMemLimit", softLimit(memLimit))
	return mgr.Start(ctrl.SetupSignalHandler())
}

func hubConfig(path string, rc *fleet.RunConfig) (*rest.Config, error) {
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
	rc.ApplyHub(cfg)
	return cfg, nil
}

// softLimit says the soft memory limit for the start-up log.
func softLimit(bytes int64) string {
	if bytes <= 0 || bytes == math.MaxInt64 {
		return "none"
	}
	return fmt.Sprintf("%d MiB", bytes>>20)
}
