package main

import (
	"context"
	"flag"
	"os"
	"time"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/openshift/hub-node-metadata/pkg/fleet"
)

// drift prints a one-shot, read-only report of drift across the fleet.
func drift(args []string) error {
	fs := flag.NewFlagSet("drift", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "hub kubeconfig (default: in-cluster, or $KUBECONFIG)")
	output := fs.String("o", "table", "output: table or json")
	concurrency := fs.Int("concurrency", 10, "spokes read at once")
	timeout := fs.Duration("timeout", 5*time.Minute, "upper bound of the whole report")
	onlyDrifted := fs.Bool("only-drifted", false, "list only pools that are not InSync")
	failOnDrift := fs.Bool("fail-on-drift", false, "exit 3 when any pool is not InSync")
	var rc fleet.RunConfig
	rc.BindHubFlags(fs)
	o := &rc.Options
	fleet.BindRemoteFlags(fs, &o.Remote)
	fleet.BindShardFlags(fs, o)
	if err := fs.Parse(args); err != nil {
		return err
	}
	// The report says every spoke's error in its rows; the connection
	// manager's own log lines would only repeat them (and controller-runtime
	// prints a stack dump if no logger is set within 30 s).
	ctrl.SetLogger(logr.Discard())
	cfg, err := hubConfig(*kubeconfig, &rc)
	if err != nil {
		return err
	}
	hub, err := client.New(cfg, client.Options{Scheme: fleet.Scheme()})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	rows, err := fleet.DriftReport(ctx, hub, hub, *o, *concurrency)
	if err != nil {
		return err
	}
	if *onlyDrifted {
		kept := rows[:0]
		for _, r := range rows {
			if r.State != "InSync" {
				kept = append(kept, r)
			}
		}
		rows = kept
	}
	if err := fleet.WriteDrift(os.Stdout, rows, *output); err != nil {
		return err
	}
	if *failOnDrift {
		for _, r := range rows {
			if r.State != "InSync" {
				os.Exit(3)
			}
		}
	}
	return nil
}
