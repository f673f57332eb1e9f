#!/usr/bin/env bash
# Builds machine-api-operator's nodelink-controller (the real peer that
# copies Machine labels and taints onto Nodes) from the Go module proxy, into
# a cache folder beside the control plane, keyed by the tools module's go.mod
# and go.sum and the Go version. A second run builds nothing.
#
# Prints the binary's path on stdout; progress goes to stderr.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="${root}/hack/tools/nodelink"
cache="${HUB_NODE_METADATA_CACHE:-${root}/.cache}"

version="$(awk '$1 == "github.com/openshift/machine-api-operator" {print $2} $1 == "require" && $2 == "github.com/openshift/machine-api-operator" {print $3}' "${tools}/go.mod" | head -1)"
key="$( (cat "${tools}/go.mod" "${tools}/go.sum"; go version) | sha256sum | cut -c1-12)"
dir="${cache}/nodelink/mao-${version}_${key}"

if [[ -x "${dir}/nodelink-controller" ]]; then
  echo "nodelink: cached in ${dir}" >&2
  echo "${dir}/nodelink-controller"
  exit 0
fi

echo "nodelink: building machine-api-operator ${version} cmd/nodelink-controller (about a minute on a cold machine)" >&2
mkdir -p "${cache}/nodelink"
tmp="$(mktemp -d "${cache}/nodelink/tmp.XXXXXX")"
trap 'rm -rf "${tmp}"' EXIT
start=$(date +%s)
(cd "${tools}" && go build -trimpath -o "${tmp}/nodelink-controller" github.com/openshift/machine-api-operator/cmd/nodelink-controller)
rm -rf "${dir}"
mv "${tmp}" "${dir}"
trap - EXIT
echo "nodelink: built in $(( $(date +%s) - start ))s into ${dir}" >&2
echo "${dir}/nodelink-controller"
