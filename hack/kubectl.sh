#!/usr/bin/env bash
# Builds kubectl from the Go module proxy at the newest control plane's
# Kubernetes version (hack/tools/kubectl), into a cache folder beside the
# control plane, keyed by the tools module's go.mod and go.sum and the Go
# version. A second run builds nothing. The tests run it as users do:
# int/conditions_test.go runs README's `kubectl wait` recipe with it.
#
# Prints the binary's path on stdout; progress goes to stderr.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="${root}/hack/tools/kubectl"
cache="${HUB_NODE_METADATA_CACHE:-${root}/.cache}"

version="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "${tools}/go.mod")"
key="$( (cat "${tools}/go.mod" "${tools}/go.sum"; go version) | sha256sum | cut -c1-12)"
dir="${cache}/kubectl/kubectl-${version}_${key}"

if [[ -x "${dir}/kubectl" ]]; then
  echo "kubectl: cached in ${dir}" >&2
  echo "${dir}/kubectl"
  exit 0
fi

echo "kubectl: building kubectl ${version} (about a minute on a cold machine)" >&2
mkdir -p "${cache}/kubectl"
tmp="$(mktemp -d "${cache}/kubectl/tmp.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT
start=$(date +%s)
# The version kubectl prints, as Kubernetes' own build sets it.
release="${version#v}"
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=${version} -X ${pkg}.gitMajor=${release%%.*} -X ${pkg}.gitMinor=$(echo "${release}" | cut -d. -f2) -X ${pkg}.gitTreeState=clean"
done
(cd "${tools}" && go build -trimpath -ldflags "${ldflags}" -o "${tmp}/kubectl" k8s.io/kubernetes/cmd/kubectl)
rm -rf "${dir}"
mv "${tmp}" "${dir}"
trap - EXIT
echo "kubectl: built in $(( $(date +%s) - start ))s into ${dir}" >&2
echo "${dir}/kubectl"
