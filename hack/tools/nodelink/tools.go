//go:build tools

// Package tools pins machine-api-operator's nodelink-controller for
// hack/nodelink.sh.
package tools

import _ "github.com/openshift/machine-api-operator/cmd/nodelink-controller"
