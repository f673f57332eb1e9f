package main

import (
	"context"
	"fmt"
	"os"

	"k8s.io/client-go/rest"

	"github.com/openshift/hub-node-metadata/pkg/fleet"
	"github.com/openshift/hub-node-metadata/pkg/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/remote"
)

// controllerIdentity returns the hub config the demo's controller runs with.
func controllerIdentity(ctx context.Context, f *localfleet.Fleet) (*rest.Config, error) {
	return f.Hub.Config, nil
}

// printDrift prints what `hub-controller drift --kubeconfig <hub>` prints.
func printDrift(ctx context.Context, f *localfleet.Fleet) error {
	rows, err := fleet.DriftReport(ctx, f.Hub.Client, f.Hub.Client, remote.Options{}, 10)
	if err != nil {
		return err
	}
	fmt.Printf("$ hub-controller drift --kubeconfig %s\n", f.Hub.KubeconfigPath)
	return fleet.WriteDrift(os.Stdout, rows, "table")
}
