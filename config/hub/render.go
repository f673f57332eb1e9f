// Package hub renders the hub manifests in this folder with kustomize's
// library (krusty), so neither kubectl nor the kustomize binary is needed:
// `make render` prints them, and int/manifests_test.go applies every rendered
// object to a real API server as a server-side dry run.
//
// The folder holds the base (base/, which pulls in manager/, dashboards/ and
// ../crds/hub) and the overlays under overlays/.
package hub

import (
	"fmt"
	"path/filepath"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Kustomizations lists the deployable kustomizations, relative to this
// folder: the base, then every overlay.
var Kustomizations = []string{
	"base",
	filepath.Join("overlays", "osd-hive-shard"),
}

// Render builds the kustomization in dir from disk and returns the rendered
// objects as one multi-document YAML stream.
func Render(dir string) ([]byte, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	return out, nil
}
