#!/usr/bin/env bash
# Runs golangci-lint, at the version pinned in hack/tools/lint/go.mod, with
# .golangci.yml. The binary is built from the Go module proxy into a cache
# folder (keyed by the tools module's go.mod and go.sum and the Go version)
# on the first run, about a minute and a half on a cold 2-core machine; a
# second run builds nothing. Arguments go to `golangci-lint run`;
# hack/lint.sh --build only builds it.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
tools="${root}/hack/tools/lint"
cache="${HUB_NODE_METADATA_CACHE:-${root}/.cache}"

version="$(awk '$1 == "require" && $2 == "github.com/golangci/golangci-lint/v2" {print $3}' "${tools}/go.mod" | head -1)"
key="$( (cat "${tools}/go.mod" "${tools}/go.sum"; go version) | sha256sum | cut -c1-12)"
bin="${cache}/lint/golangci-lint-${version}_${key}"

if [[ ! -x "${bin}" ]]; then
  echo "lint: building golangci-lint ${version} (about a minute and a half on a cold machine)" >&2
  mkdir -p "${cache}/lint"
  tmp="$(mktemp "${cache}/lint/tmp.XXXXXX")"
  trap 'rm -f "${tmp}"' EXIT
  (cd "${tools}" && go build -trimpath -o "${tmp}" github.com/golangci/golangci-lint/v2/cmd/golangci-lint)
  mv "${tmp}" "${bin}"
  trap - EXIT
fi
if [[ "${1:-}" == --build ]]; then exit 0; fi
cd "${root}"
exec "${bin}" run "$@"
