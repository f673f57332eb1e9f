#!/usr/bin/env bash
# Builds machine-api-operator's nodelink-controller (the real peer that
# copies Machine labels and taints onto Nodes) from the Go module proxy, into
# a cache folder beside the control plane, keyed by the tools module's go.mod
# and go.sum and the Go version. A second run builds nothing.
#
# Prints the binary's path on stdout; progress goes to stderr.
# hack/nodelink.sh --cached prints it only if it is built (exit 1 if not).
set -euo pipefail
if [[ "${1:-}" == --cached ]]; then export CACHED_ONLY=1; fi

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "${root}/hack/lib/cached-build.sh"
tools="${root}/hack/tools/nodelink"
version="$(awk '$1 == "github.com/openshift/machine-api-operator" {print $2} $1 == "require" && $2 == "github.com/openshift/machine-api-operator" {print $3}' "${tools}/go.mod" | head -1)"
cached_build nodelink "${tools}" "mao-${version}" nodelink-controller github.com/openshift/machine-api-operator/cmd/nodelink-controller
