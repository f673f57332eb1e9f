// Package crds embeds the CustomResourceDefinitions the local fleet installs:
// Hive's ClusterDeployment and MachinePool on the hub (generated from the
// pinned hive/apis by `make generate`), and machine-api's Machine and
// MachineSet on the spokes (as shipped by the pinned openshift/api module).
// `make verify` fails when the committed files are stale.
package crds

import "embed"

// Hive holds hive/*.yaml: the hub's CRDs.
//
//go:embed hive/*.yaml
var Hive embed.FS

// Machine holds machine/*.yaml: the spokes' CRDs.
//
//go:embed machine/*.yaml
var Machine embed.FS

// Hub holds hub/*.yaml: this project's own CRDs, installed on the hub.
//
//go:embed hub/*.yaml
var Hub embed.FS
