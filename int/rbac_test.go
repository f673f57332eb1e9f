package int_test

import (
	"context"
	"path/filepath"

	hub "github.com/openshift/hub-node-metadata/config/hub"
	"github.com/openshift/hub-node-metadata/internal/localfleet"
)

// installHubRBAC installs config/hub's ServiceAccount and RBAC (the base,
// rendered by kustomize) on the hub and returns the ServiceAccount's user
// name. The controller in these tests has nothing more.
func installHubRBAC(ctx context.Context, f *localfleet.Fleet) (string, error) {
	rendered, err := hub.Render(filepath.Join("..", "config", "hub", "base"))
	if err != nil {
		return "", err
	}
	return f.InstallControllerIdentity(ctx, rendered)
}
