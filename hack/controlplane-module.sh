#!/usr/bin/env bash
# Writes the tools module that hack/controlplane.sh builds a kube-apiserver
# from, for one Kubernetes release, and tidies it through the Go module proxy:
#
#   hack/controlplane-module.sh v1.35.4          hack/tools/controlplane-1.35
#   hack/controlplane-module.sh v1.37.2 newest   hack/tools/controlplane (the newest)
#   hack/controlplane-module.sh --kubectl v1.29.15         hack/tools/kubectl-1.29
#   hack/controlplane-module.sh --kubectl v1.37.2 newest   hack/tools/kubectl
#
# (--kubectl: the same for kubectl, which hack/kubectl.sh builds.)
# k8s.io/kubernetes replaces its staging modules (k8s.io/api and the rest) with
# folders of its own repository, which a module that requires it cannot see:
# the tools module replaces each with the release's published v0 tag instead.
# The go line is the release's own, so the binary keeps its GODEBUG defaults.
# A release that needs a newer Go than this machine's (1.38 needs 1.27) is
# written with a toolchain line naming GOTOOLCHAIN, which must be set, e.g.
#   GOTOOLCHAIN=go1.27.3 hack/controlplane-module.sh v1.38.0-beta.0
# and hack/controlplane.sh builds it with that toolchain, which the go command
# takes from the Go module proxy.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tool=controlplane cmd=kube-apiserver
if [[ "${1:-}" == --kubectl ]]; then
  tool=kubectl cmd=kubectl
  shift
fi
version="${1:?usage: $0 [--kubectl] vX.Y.Z [newest]}"
version="v${version#v}"
release="${version#v}"
minor="$(echo "${release}" | cut -d. -f1,2)"
if [[ "${2:-}" == newest ]]; then
  dir="${root}/hack/tools/${tool}"
  what="the newest released Kubernetes, ${minor}"
else
  dir="${root}/hack/tools/${tool}-${minor}"
  what="Kubernetes ${minor}"
fi
# v1.37.2 -> v0.37.2; v1.38.0-beta.0 -> v0.38.0-beta.0.
staging_version="v0.${release#*.}"

# go mod download of a release that needs a newer Go prints its files and
# exits 1 under GOTOOLCHAIN=local: the files are all this needs.
gomod="$( (go mod download -json "k8s.io/kubernetes@${version}" || true) | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')"
go_line="$(awk '$1 == "go" {print $2; exit}' "${gomod}")"
staging="$(awk '$2 == "=>" && $3 ~ /^\.\/staging\// {print $1}' "${gomod}")"

mkdir -p "${dir}"
{
  if [[ "${tool}" == kubectl ]]; then
    echo "// Tools module for the tests' kubectl of ${what}: built from"
    echo "// source through the Go module proxy, so that int/conditions_test.go runs"
    echo "// README's recipe with it. Written by hack/controlplane-module.sh."
  else
    echo "// Tools module for the test control plane of ${what}:"
    echo "// kube-apiserver built from source through the Go module proxy. Written by"
    echo "// hack/controlplane-module.sh; etcd comes from hack/tools/etcd (one for all)."
  fi
  echo "module github.com/openshift/hub-node-metadata/hack/tools/$(basename "${dir}")"
  echo
  echo "go ${go_line}"
  if [[ "${GOTOOLCHAIN:-local}" == go* ]]; then echo "toolchain ${GOTOOLCHAIN}"; fi
  echo
  echo "require k8s.io/kubernetes ${version}"
  echo
  echo "replace ("
  for m in ${staging}; do echo "	${m} => ${m} ${staging_version}"; done
  echo ")"
} >"${dir}/go.mod"
cat >"${dir}/tools.go" <<'GO'
//go:build tools

// Package tools pins the command this module builds.
package tools

import (
	_ "k8s.io/kubernetes/cmd/CMD"
)
GO
sed -i "s|cmd/CMD|cmd/${cmd}|" "${dir}/tools.go"
rm -f "${dir}/go.sum"
(cd "${dir}" && go mod tidy)
echo "${dir}"
