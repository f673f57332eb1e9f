#!/usr/bin/env bash
# Builds a test control plane (kube-apiserver and etcd) from source through
# the Go module proxy, into a cache folder keyed by every input that decides
# the binaries: the tools modules' go.mod and go.sum, etcd's main, and the Go
# version. A second run with the same inputs builds nothing.
#
#   hack/controlplane.sh             the newest Kubernetes (hack/tools/controlplane)
#   hack/controlplane.sh 1.29        Kubernetes 1.29 (hack/tools/controlplane-1.29)
#   hack/controlplane.sh --versions  the spoke minors of README's test command
#                                    ($SPOKE_VERSIONS, else the oldest supported,
#                                    a middle one and the newest), oldest first
#   hack/controlplane.sh --all       every released minor it can build, oldest first
#   hack/controlplane.sh --beta      every pre-release minor it can build
#   hack/controlplane.sh --cached 1.29  the folder if it is built, else exit 1
#                                    (builds nothing)
#
# Prints the folder on stdout, laid out as envtest expects it, so:
#   export KUBEBUILDER_ASSETS="$(hack/controlplane.sh)"
# Every version's folder has its own kube-apiserver and the one etcd (3.6,
# built once from hack/tools/etcd): etcd's API is the same for every
# kube-apiserver from 1.29 on, so the fleet runs one etcd for mixed versions.
# hack/controlplane-module.sh writes a version's tools module.
# Progress goes to stderr.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
shared="${root}/hack/tools/controlplane"
etcd_tools="${root}/hack/tools/etcd"
cache="${HUB_NODE_METADATA_CACHE:-${root}/.cache}"

# The required version, in a require block or on a require line of its own.
k8s_version_of() { awk '$1 == "require" {$1 = ""; $0 = $0} $1 == "k8s.io/kubernetes" {print $2}' "$1/go.mod"; }
newest="$(k8s_version_of "${shared}")" # v1.37.2
newest_minor="$(echo "${newest#v}" | cut -d. -f1,2)"

# The minors of the tools modules whose Kubernetes version is a release
# (released) or a pre-release such as v1.38.0-beta.0 (beta).
minors() {
  local kind="$1"
  {
    if [[ "${kind}" == released ]]; then echo "${newest_minor}"; fi
    for d in "${root}"/hack/tools/controlplane-*/; do
      [[ -f "${d}go.mod" ]] || continue
      v="$(k8s_version_of "${d%/}")"
      case "${kind}:${v}" in
        released:*-*) ;;
        released:*) basename "${d}" | sed 's/^controlplane-//' ;;
        beta:*-*) basename "${d}" | sed 's/^controlplane-//' ;;
      esac
    done
  } | sort -u -V
}

# README's test command runs one spoke of each of these in one fleet: the
# oldest supported (4.16 EUS), a minor in the middle of what OSD runs (4.20),
# and the newest released. SPOKE_VERSIONS="1.30 1.37" runs others.
test_versions() {
  if [[ -n "${SPOKE_VERSIONS:-}" ]]; then
    echo "${SPOKE_VERSIONS}" | tr ', ' '\n\n' | sed '/^$/d'
  else
    printf '%s\n' 1.29 1.33 "${newest_minor}"
  fi
}

versions() { { minors released; minors beta; } | sort -u -V; }

only_cached=""
if [[ "${1:-}" == --cached ]]; then
  only_cached=1
  shift
fi
want="${1:-}"
want="${want#v}"
case "${want}" in
  --versions) test_versions; exit 0 ;;
  --all) minors released; exit 0 ;;
  --beta) minors beta; exit 0 ;;
  "" | "${newest_minor}") tools="${shared}" ;;
  -*) echo "usage: $0 [[--cached] MINOR | --versions | --all | --beta]" >&2; exit 2 ;;
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
etcd_version="$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" {print $3}' "${etcd_tools}/go.mod")"
etcd_key="$( (cat "${etcd_tools}/go.mod" "${etcd_tools}/go.sum" "${etcd_tools}/main.go"; echo "${go_version}") | sha256sum | cut -c1-12)"
etcd_name="etcd-${etcd_version}_${etcd_key}"
etcd_dir="${cache}/controlplane/${etcd_name}"

k8s_version="$(k8s_version_of "${tools}")"
if [[ -z "${k8s_version}" || -z "${etcd_version}" ]]; then
  echo "control plane: no k8s.io/kubernetes or etcd version in ${tools}/go.mod or ${etcd_tools}/go.mod" >&2
  exit 1
fi
# recipe names how kube-apiserver is built: a change to the build below that
# changes the binary changes it, and so the folder.
recipe="kube-apiserver with release version ldflags"
key="$( (cat "${tools}/go.mod" "${tools}/go.sum"; echo "${etcd_key}"; echo "${go_version}"; echo "${recipe}") | sha256sum | cut -c1-12)"
dir="${cache}/controlplane/k8s-${k8s_version}_etcd-${etcd_version}_${key}"

if [[ -x "${dir}/kube-apiserver" && -x "${dir}/etcd" ]]; then
  echo "control plane: cached in ${dir}" >&2
  echo "${dir}"
  exit 0
fi
if [[ -n "${only_cached}" ]]; then exit 1; fi

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
  echo "control plane: building etcd ${etcd_version}" >&2
  start=$(date +%s)
  (cd "${etcd_tools}" && go build -trimpath -o "${tmp}/etcd" .)
  echo "control plane: built etcd in $(( $(date +%s) - start ))s" >&2
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
# A release that needs a newer Go than this machine's names it in a toolchain
# line (hack/controlplane-module.sh), which the go command then takes from the
# Go module proxy; the machine's own GOTOOLCHAIN=local would refuse it.
toolchain="$(awk '$1 == "toolchain" {print $2}' "${tools}/go.mod")"
if [[ -n "${toolchain}" ]]; then export GOTOOLCHAIN="${toolchain}"; fi
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
