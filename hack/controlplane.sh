#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver and etcd) from source through
# the Go module proxy, into a cache folder keyed by every input that decides
# the binaries: the tools module's go.mod and go.sum, etcd's main, and the Go
# version. A second run with the same inputs builds nothing.
#
# Prints the folder on stdout, laid out as envtest expects it, so:
#   export KUBEBUILDER_ASSETS="$(hack/controlplane.sh)"
# Progress goes to stderr.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="${root}/hack/tools/controlplane"
cache="${HUB_NODE_METADATA_CACHE:-${root}/.cache}"

k8s_version="$(awk '$1 == "k8s.io/kubernetes" {print $2}' "${tools}/go.mod")"
etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2}' "${tools}/go.mod")"
key="$( (cat "${tools}/go.mod" "${tools}/go.sum" "${tools}/etcd/main.go"; go version) | sha256sum | cut -c1-12)"
dir="${cache}/controlplane/k8s-${k8s_version}_etcd-${etcd_version}_${key}"

if [[ -x "${dir}/kube-apiserver" && -x "${dir}/etcd" ]]; then
  echo "control plane: cached in ${dir}" >&2
  echo "${dir}"
  exit 0
fi

echo "control plane: building kube-apiserver ${k8s_version} and etcd ${etcd_version} (a few minutes on a cold machine)" >&2
tmp="$(mktemp -d "${cache}/controlplane.tmp.XXXXXX" 2>/dev/null || { mkdir -p "${cache}"; mktemp -d "${cache}/controlplane.tmp.XXXXXX"; })"
trap 'rm -rf "${tmp}"' EXIT
start=$(date +%s)
(
  cd "${tools}"
  go build -trimpath -o "${tmp}/etcd" ./etcd
  go build -trimpath -o "${tmp}/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
)
mkdir -p "$(dirname "${dir}")"
rm -rf "${dir}"
mv "${tmp}" "${dir}"
trap - EXIT
echo "control plane: built in $(( $(date +%s) - start ))s into ${dir}" >&2
echo "${dir}"
