#!/usr/bin/env bash
# Makes Prometheus and promtool (and, with --with-chromium, Chromium) available
# for int/prometheus_test.go and hack/screenshot.sh, and prints their absolute
# paths on stdout, one per line, in this order:
#   prometheus
#   promtool
#   chromium        (only with --with-chromium)
#
# Binaries already on PATH are used as they are. Otherwise the Debian packages
# are installed with apt-get: `prometheus` (ships both prometheus and promtool;
# bookworm has 2.42) and `chromium`. That needs root (or password-less sudo)
# and a Debian mirror. Running it again installs nothing.
#
# Quiet: nothing on stderr when nothing is installed; one line per install;
# apt's output only when it fails (exit status non-zero).
set -euo pipefail

with_chromium=false
for arg in "$@"; do
  case "${arg}" in
    --with-chromium) with_chromium=true ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "hack/prometheus.sh: unknown argument ${arg}" >&2; exit 2 ;;
  esac
done

# Debian installs prometheus and promtool into /usr/bin, chromium too; look
# there as well in case PATH is minimal.
PATH="${PATH}:/usr/bin:/usr/sbin"

missing_packages() {
  local pkgs=()
  if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
    pkgs+=(prometheus)
  fi
  if ${with_chromium} && ! command -v chromium >/dev/null 2>&1; then
    pkgs+=(chromium)
  fi
  echo "${pkgs[@]:-}"
}

pkgs="$(missing_packages)"
if [[ -n "${pkgs}" ]]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "hack/prometheus.sh: ${pkgs} not on PATH and no apt-get to install them (install Prometheus ${pkgs/prometheus/and promtool} yourself)" >&2
    exit 1
  fi
  sudo=()
  if [[ "$(id -u)" != 0 ]]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      echo "hack/prometheus.sh: ${pkgs} not on PATH; installing the Debian packages needs root (or password-less sudo)" >&2
      exit 1
    fi
  fi
  log="$(mktemp "${TMPDIR:-/tmp}/hack-prometheus.XXXXXX.log")"
  # The prometheus package would start its service from its postinst; a
  # policy-rc.d that says "no" (status 101) keeps the install from leaving a
  # daemon on :9090. Added only when there is none, removed afterwards.
  policy=/usr/sbin/policy-rc.d
  added_policy=false
  cleanup() {
    if ${added_policy}; then "${sudo[@]}" rm -f "${policy}"; fi
    rm -f "${log}"
  }
  trap cleanup EXIT
  if [[ ! -e "${policy}" ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "${policy}" >/dev/null
    "${sudo[@]}" chmod 0755 "${policy}"
    added_policy=true
  fi
  echo "hack/prometheus.sh: installing Debian package(s): ${pkgs}" >&2
  start=$(date +%s)
  # shellcheck disable=SC2086 # pkgs is a list of package names
  if ! { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q &&
         "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends ${pkgs}; } >"${log}" 2>&1; then
    echo "hack/prometheus.sh: apt-get failed; its output:" >&2
    cat "${log}" >&2
    exit 1
  fi
  echo "hack/prometheus.sh: installed ${pkgs} in $(( $(date +%s) - start ))s" >&2
  pkgs="$(missing_packages)"
  if [[ -n "${pkgs}" ]]; then
    echo "hack/prometheus.sh: apt-get installed ${pkgs} but the binaries are still not on PATH" >&2
    exit 1
  fi
fi

command -v prometheus
command -v promtool
if ${with_chromium}; then
  command -v chromium
fi
