//go:build tools

// Package tools pins the commands and API packages this module uses.
package tools

import (
	_ "github.com/openshift/hive/apis/hive/v1"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
