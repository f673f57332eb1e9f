//go:build tools

// Package tools pins the command this module builds.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubectl"
)
