//go:build tools

// Package tools pins the commands and API packages this module uses.
//
// prometheus-operator is here for the ServiceMonitor and PrometheusRule CRDs
// its module ships (example/prometheus-operator-crd), which hack/gen-crds.sh
// copies into config/crds/monitoring; importing one small package keeps the
// requirement in go.mod through `go mod tidy`.
package tools

import (
	_ "github.com/openshift/hive/apis/hive/v1"
	_ "github.com/prometheus-operator/prometheus-operator/pkg/versionutil"
	_ "sigs.k8s.io/controller-tools/cmd/controller-gen"
)
