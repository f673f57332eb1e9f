package main

import (
	"context"

	"k8s.io/client-go/rest"

	"github.com/openshift/hub-node-metadata/pkg/localfleet"
)

// controllerIdentity returns the hub config the demo's controller runs with.
func controllerIdentity(ctx context.Context, f *localfleet.Fleet) (*rest.Config, error) {
	return f.Hub.Config, nil
}

func printDrift(ctx context.Context, f *localfleet.Fleet) error { return nil }
