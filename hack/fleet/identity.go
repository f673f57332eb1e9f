package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"

	hub "github.com/openshift/hub-node-metadata/config/hub"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
	"github.com/openshift/hub-node-metadata/pkg/fleet"
)

// controllerIdentity installs config/hub's ServiceAccount and RBAC on the
// local hub and returns a config that acts as that ServiceAccount: the
// demo's controller has exactly the rights a deployed one has.
func controllerIdentity(ctx context.Context, f *localfleet.Fleet) (*rest.Config, error) {
	rendered, err := hub.Render(filepath.Join("config", "hub", "base"))
	if err != nil {
		return nil, err
	}
	user, err := f.InstallControllerIdentity(ctx, rendered)
	if err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(f.Hub.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return cfg, nil
}

// printDrift prints what `hub-controller drift --kubeconfig <hub>` prints.
func printDrift(ctx context.Context, f *localfleet.Fleet) error {
	rows, err := fleet.DriftReport(ctx, f.Hub.Client, f.Hub.Client, fleet.Options{}, 10)
	if err != nil {
		return err
	}
	fmt.Printf("$ hub-controller drift --kubeconfig %s\n", f.Hub.KubeconfigPath)
	return fleet.WriteDrift(os.Stdout, rows, "table")
}
