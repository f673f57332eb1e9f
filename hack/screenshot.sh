#!/usr/bin/env bash
# Captures docs/drift-panel.png for the README: the dashboard's drift panel
# query ("Drifted objects: top 20 cluster/pool") graphed in Prometheus's own
# web UI by headless Chromium, while int/prometheus_test.go runs its scenario
# on the local fleet (the dry-run controller leaves 4 objects drifted on two
# clusters; the real controller then fixes them and the lines drop to 0).
#
#   hack/screenshot.sh [out.png]     (default docs/drift-panel.png)
#
# Needs what `make test-int` needs, plus Chromium (hack/prometheus.sh
# --with-chromium installs Debian's package when it is not on PATH).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:-docs/drift-panel.png}"
case "${out}" in /*) ;; *) out="${PWD}/${out}" ;; esac
cd "${root}"
KUBEBUILDER_ASSETS="$(hack/controlplane.sh)"
export KUBEBUILDER_ASSETS
HUB_NODE_METADATA_SCREENSHOT="${out}" go test ./int/ -run '^TestPrometheusRulesAndDashboard$' -count=1 -timeout 10m -v |
  grep -E '^(=== RUN|--- |PASS|FAIL|ok )|screenshot|chromium' || true
test -s "${out}" && echo "${out}"
