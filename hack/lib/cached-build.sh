# Sourced by hack/nodelink.sh and hack/kubectl.sh: builds a command from a
# tools module through the Go module proxy, once, into a cache folder keyed
# by the module's go.mod and go.sum and the Go version.
#
#   cached_build NAME TOOLS FOLDER BINARY PACKAGE [go build flags...]
#
# builds PACKAGE in the tools module TOOLS into
# ${HUB_NODE_METADATA_CACHE:-<repo>/.cache}/NAME/FOLDER_<key>/BINARY (a
# temporary folder moves into place whole) unless it is there already, and
# prints the binary's path on stdout; progress goes to stderr. With
# CACHED_ONLY=1 it builds nothing, and returns 1 when the binary is not there.

cached_build() {
  local name="$1" tools="$2" folder="$3" binary="$4" pkg="$5"
  shift 5
  local root cache key dir tmp start
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  cache="${HUB_NODE_METADATA_CACHE:-${root}/.cache}"
  key="$( (cat "${tools}/go.mod" "${tools}/go.sum"; go version) | sha256sum | cut -c1-12)"
  dir="${cache}/${name}/${folder}_${key}"
  if [[ -x "${dir}/${binary}" ]]; then
    echo "${name}: cached in ${dir}" >&2
    echo "${dir}/${binary}"
    return 0
  fi
  if [[ -n "${CACHED_ONLY:-}" ]]; then return 1; fi
  echo "${name}: building ${pkg} (about a minute on a cold machine)" >&2
  mkdir -p "${cache}/${name}"
  tmp="$(mktemp -d "${cache}/${name}/tmp.XXXXXX")"
  trap 'rm -rf "${tmp}"' EXIT
  start=$(date +%s)
  (cd "${tools}" && go build -trimpath "$@" -o "${tmp}/${binary}" "${pkg}")
  rm -rf "${dir}"
  mv "${tmp}" "${dir}"
  trap - EXIT
  echo "${name}: built in $(( $(date +%s) - start ))s into ${dir}" >&2
  echo "${dir}/${binary}"
}
