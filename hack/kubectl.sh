#!/usr/bin/env bash
# Builds kubectl from the Go module proxy at the newest control plane's
# Kubernetes version (hack/tools/kubectl), into a cache folder beside the
# control plane, keyed by the tools module's go.mod and go.sum and the Go
# version. A second run builds nothing. The tests run it as users do:
# int/conditions_test.go runs README's `kubectl wait` recipe with it.
#
# hack/kubectl.sh 1.29 builds the kubectl of an older minor
# (hack/tools/kubectl-1.29): SREs run the kubectl of their own OpenShift
# minor, so the recipe runs with the oldest supported one too.
#
# Prints the binary's path on stdout; progress goes to stderr.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "${root}/hack/lib/cached-build.sh"
tools="${root}/hack/tools/kubectl${1:+-$1}"
if [[ ! -f "${tools}/go.mod" ]]; then
  echo "kubectl: no tools module for Kubernetes $1 (${tools}); hack/controlplane-module.sh --kubectl writes one" >&2
  exit 2
fi
version="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "${tools}/go.mod")"
# The version kubectl prints, as Kubernetes' own build sets it.
release="${version#v}"
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=${version} -X ${pkg}.gitMajor=${release%%.*} -X ${pkg}.gitMinor=$(echo "${release}" | cut -d. -f2) -X ${pkg}.gitTreeState=clean"
done
cached_build kubectl "${tools}" "kubectl-${version}" kubectl k8s.io/kubernetes/cmd/kubectl -ldflags "${ldflags}"
