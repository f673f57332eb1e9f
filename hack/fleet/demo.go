package main

import (
	"context"
	"fmt"

	"github.com/openshift/hub-node-metadata/pkg/localfleet"
)

func runDemo(ctx context.Context, f *localfleet.Fleet) error {
	fmt.Println("\n(the controller is not wired into the demo yet)")
	return nil
}
