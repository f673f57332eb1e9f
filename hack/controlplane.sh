#!/usr/bin/env bash
# Builds a test control plane (kube-apiserver and etcd) from source through
# the Go module proxy, into a cache folder keyed by every input that decides
# the binaries: the tools modules' go.mod and go.sum, etcd's main, and the Go
# version. A second run with the same inputs builds nothing.
#
#   hack/controlplane.sh             the newest Kubernetes (hack/tools/controlplane)
#   hack/controlplane.sh 1.29        Kubernetes 1.29 (hack/tools/controlplane-1.29)
#   hack/controlplane.sh --versions  every minor it can build, oldest first
#
# Prints the folder on stdout, laid out as envtest expects it, so:
#   export KUBEBUILDER_ASSETS="$(hack/controlplane.sh)"
# Every version's folder has its own kube-apiserver and the one etcd (3.6,
# built once from hack/tools/controlplane): etcd's API is the same for every
# kube-apiserver from 1.29 on, so the fleet runs one etcd for mixed versions.
# Progress goes to stderr.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
shared="${root}/hack/tools/controlplane"
cache="${HUB_NODE_METADATA_CACHE:-${root}/.cache}"

# The required version, in a require block or on a require line of its own.
k8s_version_of() { awk '$1 == "require" {$1 = ""; $0 = $0} $1 == "k8s.io/kubernetes" {print $2}' "$1/go.mod"; }
newest="$(k8s_version_of "${shared}")" # v1.36.3
newest_minor="$(echo "${newest#v}" | cut -d. -f1,2)"

versions() {
  {
    echo "${newest_minor}"
    for d in "${root}"/hack/tools/controlplane-*/; do
      if [[ -f "${d}go.mod" ]]; then basename "${d}" | sed 's/^controlplane-//'; fi
    done
  } | sort -u -V
}

want="${1:-}"
want="${want#v}"
case "${want}" in
  --versions) versions; exit 0 ;;
  "" | "${newest_minor}") tools="${shared}" ;;
  -*) echo "usage: $0 [MINOR | --versions]" >&2; exit 2 ;;
  *)
    tools="${root}/hack/tools/controlplane-${want}"
    if [[ ! -f "${tools}/go.mod" ]]; then
      echo "control plane: no tools module for Kubernetes ${want} (hack/tools/controlplane-${want}); versions: $(versions | tr '\n' ' ')" >&2
      exit 2
    fi
    ;;
esac

# Serialises builds of one folder, so that two runs (parallel make targets,
# two shells) do not build the same binary twice; flock(1) is Linux's, and
# without it runs are only unserialised, not wrong (the folder moves in whole).
lock() {
  mkdir -p "${cache}/controlplane"
  if command -v flock >/dev/null 2>&1; then
    eval "exec $1>\"${cache}/controlplane/.lock-$2\""
    flock "$1"
  fi
}

# Builds go to a temporary folder that moves into place whole.
tmp_dir() { mktemp -d "${cache}/controlplane/tmp.XXXXXX"; }

go_version="$(go version)"
etcd_version="$(awk '$1 == "go.etcd.io/etcd/server/v3" {print $2}' "${shared}/go.mod")"
etcd_key="$( (cat "${shared}/go.mod" "${shared}/go.sum" "${shared}/etcd/main.go"; echo "${go_version}") | sha256sum | cut -c1-12)"
etcd_name="etcd-${etcd_version}_${etcd_key}"
etcd_dir="${cache}/controlplane/${etcd_name}"

k8s_version="$(k8s_version_of "${tools}")"
if [[ -z "${k8s_version}" || -z "${etcd_version}" ]]; then
  echo "control plane: no k8s.io/kubernetes or etcd version in ${tools}/go.mod or ${shared}/go.mod" >&2
  exit 1
fi
# recipe names how kube-apiserver is built: a change to the build below that
# changes the binary changes it, and so the folder.
recipe="kube-apiserver with release version ldflags"
if [[ "${tools}" == "${shared}" ]]; then
  key="$( (cat "${shared}/go.mod" "${shared}/go.sum" "${shared}/etcd/main.go"; echo "${go_version}"; echo "${recipe}") | sha256sum | cut -c1-12)"
else
  key="$( (cat "${tools}/go.mod" "${tools}/go.sum" "${shared}/go.mod" "${shared}/go.sum" "${shared}/etcd/main.go"; echo "${go_version}"; echo "${recipe}") | sha256sum | cut -c1-12)"
fi
dir="${cache}/controlplane/k8s-${k8s_version}_etcd-${etcd_version}_${key}"

if [[ -x "${dir}/kube-apiserver" && -x "${dir}/etcd" ]]; then
  echo "control plane: cached in ${dir}" >&2
  echo "${dir}"
  exit 0
fi

lock 8 "k8s-${k8s_version}"
if [[ -x "${dir}/kube-apiserver" && -x "${dir}/etcd" ]]; then
  echo "control plane: built meanwhile in ${dir}" >&2
  echo "${dir}"
  exit 0
fi

lock 9 etcd
if [[ ! -x "${etcd_dir}/etcd" ]]; then
  tmp="$(tmp_dir)"
  trap 'rm -rf "${tmp}"' EXIT
  # A cache from before etcd had its own folder holds the same binary in the
  # newest's folder (same key).
  old="${cache}/controlplane/k8s-${newest}_etcd-${etcd_version}_${etcd_key}/etcd"
  if [[ -x "${old}" && ! -L "${old}" ]]; then
    cp "${old}" "${tmp}/etcd"
  else
    echo "control plane: building etcd ${etcd_version}" >&2
    start=$(date +%s)
    (cd "${shared}" && go build -trimpath -o "${tmp}/etcd" ./etcd)
    echo "control plane: built etcd in $(( $(date +%s) - start ))s" >&2
  fi
  rm -rf "${etcd_dir}"
  mv "${tmp}" "${etcd_dir}"
  trap - EXIT
fi
flock -u 9 2>/dev/null || true

echo "control plane: building kube-apiserver ${k8s_version} (a few minutes on a cold machine)" >&2
tmp="$(tmp_dir)"
trap 'rm -rf "${tmp}"' EXIT
start=$(date +%s)
# A plain `go build` leaves kube-apiserver's version at v0.0.0-master, and
# /version would answer that: set what Kubernetes' own build sets
# (hack/lib/version.sh), from the module's tag, commit and commit time.
release="${k8s_version#v}"
commit="$(cd "${tools}" && go mod download -json "k8s.io/kubernetes@${k8s_version}" | sed -n 's/^[[:space:]]*"Hash": "\([0-9a-f]*\)".*/\1/p' | head -1)"
date="$(cd "${tools}" && go list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes)"
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X ${pkg}.gitVersion=${k8s_version} -X ${pkg}.gitMajor=${release%%.*} -X ${pkg}.gitMinor=$(echo "${release}" | cut -d. -f2)"
  ldflags+=" -X ${pkg}.gitTreeState=clean -X ${pkg}.buildDate=${date}${commit:+ -X ${pkg}.gitCommit=${commit}}"
done
(cd "${tools}" && go build -trimpath -ldflags "${ldflags}" -o "${tmp}/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver)
# Relative, so that the cache can move as a whole.
ln -s "../${etcd_name}/etcd" "${tmp}/etcd"
rm -rf "${dir}"
mv "${tmp}" "${dir}"
trap - EXIT
echo "control plane: built kube-apiserver ${k8s_version} in $(( $(date +%s) - start ))s into ${dir}" >&2
echo "${dir}"
