# hub-node-metadata: keep Hive MachinePool labels and taints true on every
# existing Machine and Node of the fleet, from the hub.
#
# `make help` lists the targets. The two that matter on a fresh machine:
#   make demo   the main job on a local hub and spokes
#   make test   every test (unit, fuzz, integration on real API servers)

SHELL := /usr/bin/env bash -o pipefail
GO ?= go
# An execution count, not a duration: with a wall-clock -fuzztime, Go 1.26's
# fuzz coordinator can fail a target with a bare "context deadline exceeded"
# at the deadline when its workers are starved of CPU (golang/go#75804, fixed
# in Go 1.27); it happened here once with 10s. 5000 runs take about 5 to 10 s
# per target on 2 cores.
FUZZTIME ?= 5000x
# Built once per version into .cache/ (gitignored); see hack/controlplane.sh.
ASSETS = $(shell hack/controlplane.sh)
# The spoke minors of README's test command's mixed fleet: the oldest
# supported, a middle one and the newest (hack/controlplane.sh --versions).
# `make test-versions SPOKE_VERSIONS="1.30 1.31"` runs the version tests on
# others; `hack/controlplane.sh --all` lists every minor it can build. The
# integration tests find each one's folder in KUBEBUILDER_ASSETS_<major>_<minor>
# (internal/localfleet.VersionAssetsEnv).
SPOKE_VERSIONS ?= $(shell hack/controlplane.sh --versions)
VERSION_ASSETS = SPOKE_VERSIONS="$(SPOKE_VERSIONS)" $(foreach v,$(SPOKE_VERSIONS),KUBEBUILDER_ASSETS_$(subst .,_,$(v))="$$(hack/controlplane.sh $(v))")
# The kubectls README's recipe is run with: the newest, and the oldest
# supported minor's (hack/kubectl.sh).
KUBECTLS = KUBECTL="$$(hack/kubectl.sh)" KUBECTL_1_29="$$(hack/kubectl.sh 1.29)"
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/openshift/hub-node-metadata/pkg/version.Version=$(VERSION) -X github.com/openshift/hub-node-metadata/pkg/version.Commit=$(COMMIT)
# How the shipped binary is built: without cgo (static; the net package's pure-Go
# resolver). int/binary_test.go's goBuild builds the binaries the tests run the same way.
GOBUILD = CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)'

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-14s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## Build bin/hub-controller (static, version from git).
	$(GOBUILD) -o bin/hub-controller ./cmd/hub-controller

.PHONY: controlplane
controlplane: ## Build etcd and kube-apiserver of every spoke version (SPOKE_VERSIONS) for tests into .cache/ (once per version).
	@for v in $(SPOKE_VERSIONS); do hack/controlplane.sh $$v || exit 1; done

.PHONY: nodelink
nodelink: ## Build machine-api's nodelink-controller for tests into .cache/ (once; hack/nodelink.sh).
	@hack/nodelink.sh >/dev/null

.PHONY: kubectl
kubectl: ## Build the kubectls README's recipe is tested with (the newest and 1.29) into .cache/ (once; hack/kubectl.sh).
	@hack/kubectl.sh >/dev/null && hack/kubectl.sh 1.29 >/dev/null

.PHONY: generate
generate: ## Regenerate config/crds from the pinned hive/apis and openshift/api.
	hack/gen-crds.sh

.PHONY: verify
verify: ## Fail if generated files are stale, code is unformatted, a go.mod is untidy, go vet or golangci-lint complains.
	hack/gen-crds.sh --verify
	@test -z "$$(gofmt -l cmd pkg internal int hack config)" || { echo "gofmt needed:"; gofmt -l cmd pkg internal int hack config; exit 1; }
	@# The control plane modules of minors README's test command does not run are left to
	@# `make test-versions-all` and `make test-beta`, which build them: tidying each would
	@# fetch that Kubernetes release's whole module graph.
	@for mod in . hack/tools/*/; do \
	  case "$$mod" in hack/tools/controlplane-*/) m="$${mod#hack/tools/controlplane-}"; \
	    case " $(SPOKE_VERSIONS) " in *" $${m%/} "*) ;; *) continue ;; esac ;; esac; \
	  (cd $$mod && $(GO) mod tidy -diff >/dev/null) || { echo "go mod tidy needed in $$mod:"; (cd $$mod && $(GO) mod tidy -diff); exit 1; }; \
	done
	$(GO) vet ./...
	hack/lint.sh ./...

.PHONY: test-unit
test-unit: ## Unit tests (no API servers).
	$(GO) test -count=1 $$($(GO) list ./... | grep -v '/int$$')

FUZZ_PKGS = $$(grep -rlE '^func Fuzz[A-Za-z0-9_]*\(' --include='*_test.go' pkg | xargs -n1 dirname | sort -u)

.PHONY: fuzz-build
fuzz-build: ## Compile one fuzzing test binary per package into .cache/fuzz.
	@# The first alone (on a cold machine it compiles the instrumented packages they all
	@# share), then the rest side by side (go test -fuzz takes one package; a link runs
	@# mostly on one core).
	@mkdir -p .cache/fuzz
	@link() { $(GO) test -c -fuzz=. -ldflags='-s -w' -o $(CURDIR)/.cache/fuzz/$$(echo $$1 | tr / _).test ./$$1; }; \
	set -- $(FUZZ_PKGS); link $$1 || exit 1; shift; \
	pids=; for pkg; do link $$pkg & pids="$$pids $$!"; done; \
	rc=0; for pid in $$pids; do wait $$pid || rc=1; done; exit $$rc

# `make test` builds everything the tests run first (test-prereqs), then runs
# them with BUILT=1: fuzz and test-int then run the binaries test-prereqs linked
# instead of linking each again. The test binaries are linked without debug
# information (-s -w, as `go test` links the ones it runs): with it, a link took
# four times the CPU.
BUILT ?=

.PHONY: fuzz
fuzz: $(if $(BUILT),,fuzz-build) ## Run each fuzz target for FUZZTIME (default 5000 executions) over the committed corpora.
	@# One fuzzing test binary per package (in .cache/fuzz), run once per target: `go test -fuzz`
	@# would link it again for every target. Each run starts from the committed corpus alone, in
	@# a fresh cache folder: go test's own cache keeps every input it ever found interesting, and
	@# re-running them first grows each run's time without end. A failing input is written to
	@# the package's testdata/fuzz, as with go test.
	@for pkg in $(FUZZ_PKGS); do \
	  bin=$(CURDIR)/.cache/fuzz/$$(echo $$pkg | tr / _).test; \
	  cachedir=$$(mktemp -d); \
	  for target in $$(grep -hoE '^func (Fuzz[A-Za-z0-9_]+)' $$pkg/*_test.go | sed 's/func //' | sort -u); do \
	    echo "fuzz $$target in ./$$pkg for $(FUZZTIME)"; \
	    (cd $$pkg && $$bin -test.run='^$$' -test.fuzz="^$$target$$" -test.fuzztime=$(FUZZTIME) -test.fuzzcachedir=$$cachedir) || { rm -rf $$cachedir; exit 1; }; \
	  done; \
	  rm -rf $$cachedir; \
	done

# The integration tests run the binary `build` made, as it ships (without cgo),
# built outside any test's deadline; `go test ./int` alone builds it the same way.
#
# Integration tests run INT_PARALLEL at a time: each starts spokes of its own
# (most on one shared hub) and spends most of its time waiting on them and on
# timers, so 6 run at a time on 2 cores; 8 left the pacing tests' timers
# starved while the other parts of `make test` ran beside them (docs/tests.md).
INT_PARALLEL ?= 6

# The integration tests, compiled (int-build) and run as a binary: `go test`
# would link them again on every run.
INT_TEST = .cache/test/int.test

.PHONY: int-build
int-build: test-compile ## Compile the integration tests into .cache/test/int.test.
	@mkdir -p $(dir $(INT_TEST))
	$(GO) test -c -ldflags='-s -w' -o $(INT_TEST) ./int

.PHONY: test-int
test-int: $(if $(BUILT),,build controlplane nodelink kubectl int-build) ## Integration tests on real API servers (builds the binary, control planes, nodelink, kubectl and the tests first, outside any test's deadline), INT_PARALLEL (6) at a time.
	@# Beside them, the spoke cache's decoders on real API servers' answers (pkg/remote/spokecache;
	@# test-unit, which has no control plane, skips that test). The tests run the binary `build`
	@# made (HUB_NODE_METADATA_BINARY), as `go test` runs a test binary: in its package's folder.
	KUBEBUILDER_ASSETS="$(ASSETS)" $(VERSION_ASSETS) $(GO) test -count=1 -timeout 5m -run '^TestDecodersOnRealAnswers$$' ./pkg/remote/spokecache & answers=$$!; \
	start=$$(date +%s); \
	KUBEBUILDER_ASSETS="$(ASSETS)" $(VERSION_ASSETS) $(KUBECTLS) HUB_NODE_METADATA_BINARY="$(CURDIR)/bin/hub-controller" \
	  env -C int $(CURDIR)/$(INT_TEST) -test.count=1 -test.timeout=40m -test.parallel=$(INT_PARALLEL) -test.paniconexit0; rc=$$?; \
	if [ $$rc = 0 ]; then echo "ok  	./int	$$(( $$(date +%s) - start ))s"; else echo "FAIL	./int	$$(( $$(date +%s) - start ))s"; fi; \
	wait $$answers || rc=1; exit $$rc

# The robustness suite (int/robustness_test.go): SEEDS random seeds (or the
# comma-separated seeds of SEED, to replay them), DURATION of random traffic
# and faults each, every write checked against the model; the report goes to
# REPORT. README's test command runs one random seed of a minute.
SEEDS ?= 30
SEED ?=
DURATION ?= 3m
REPORT ?= docs/robustness.md
# Seeds run side by side: one takes about a third of a core.
PARALLEL ?= 3

.PHONY: robustness
robustness: build controlplane nodelink ## The robustness suite: SEEDS (30) random seeds of DURATION (3m) of traffic and faults, PARALLEL (3) at a time, or SEED=n,m to replay; writes REPORT (docs/robustness.md).
	KUBEBUILDER_ASSETS="$(ASSETS)" $(VERSION_ASSETS) ROBUSTNESS_RUNS="$(SEEDS)" ROBUSTNESS_SEEDS="$(SEED)" ROBUSTNESS_DURATION="$(DURATION)" ROBUSTNESS_REPORT="$(abspath $(REPORT))" \
	  $(GO) test -count=1 -timeout 24h -parallel $(PARALLEL) -run '^TestRobustness$$' -v ./int/

# The version tests: a hub of the newest Kubernetes and one spoke of each of
# SPOKE_VERSIONS in one fleet (int/versions_scenarios_test.go).
VERSION_TESTS = ^TestSpokeVersions

.PHONY: test-versions
test-versions: build controlplane ## The version tests on spokes of SPOKE_VERSIONS (default: README's test command's).
	KUBEBUILDER_ASSETS="$(ASSETS)" $(VERSION_ASSETS) $(GO) test -count=1 -timeout 30m -run '$(VERSION_TESTS)' ./int/

.PHONY: test-versions-all
test-versions-all: ## Release check: the version tests once with a spoke of every released minor from the oldest supported to the newest (hack/controlplane.sh --all; each built once).
	@$(MAKE) --no-print-directory test-versions SPOKE_VERSIONS="$$(hack/controlplane.sh --all | tr '\n' ' ')"

.PHONY: test-beta
test-beta: ## Early warning, not part of `make test`: the version tests with spokes of the next Kubernetes' pre-release (hack/controlplane.sh --beta: 1.38.0-beta.0).
	@$(MAKE) --no-print-directory test-versions SPOKE_VERSIONS="$$(hack/controlplane.sh --beta | tr '\n' ' ')"

.PHONY: test-prereqs
test-prereqs: ## What the tests run, built before any starts: the binary, control planes, nodelink, kubectl, golangci-lint, every package's tests, the fuzzing and integration test binaries.
	@# Side by side: none of these compiles a package another one does (the fuzzing binaries'
	@# are instrumented; int-build waits for test-compile), and a link runs mostly on one core.
	@$(MAKE) --no-print-directory -j4 --output-sync=target build controlplane nodelink kubectl lint-build fuzz-build int-build

.PHONY: lint-build
lint-build:
	@hack/lint.sh --build

.PHONY: test-compile
test-compile:
	@# Every package's tests, compiled without linking them (the build cache keeps what it
	@# compiles): `go test` then links and starts at once, instead of compiling beside the
	@# tests that already run.
	$(GO) list -export -test -deps ./... >/dev/null

.PHONY: test
test: ## Everything: verify, unit, fuzz, integration, at once (each one's output together, as it ends), once what they run is built.
	@# First what the tests run is built (test-prereqs): on a fresh machine that is most of the
	@# CPU, and built beside the integration tests it would starve their timers. Then
	@# the four run at once: each is CPU-bound and needs nothing of the others, and the
	@# integration tests leave the CPU part idle while their last tests wait on timers.
	@# Every fuzz target still runs its FUZZTIME executions; only the wall time is shared.
	@$(MAKE) --no-print-directory test-prereqs
	@$(MAKE) --no-print-directory -j4 --output-sync=target BUILT=1 verify test-unit fuzz test-int

# The spokes' Kubernetes minors in turn for `make fleet` and `make demo`, e.g.
# FLEET_VERSIONS=1.29,1.33,1.37 (each built once by hack/controlplane.sh);
# empty, every spoke of `make fleet` runs the newest. The demo's three spokes
# run one of README's test versions each (DEMO_VERSIONS), those already built:
# a first demo builds only the newest and says how to build the others.
FLEET_VERSIONS ?=
comma := ,
DEMO_VERSIONS ?= $(subst $() ,$(comma),$(strip $(SPOKE_VERSIONS)))

.PHONY: fleet
fleet: ## Start a local hub and 3 spokes with sample pools, for kubectl; Ctrl-C stops it (FLEET_VERSIONS: spoke versions).
	KUBEBUILDER_ASSETS="$(ASSETS)" $(GO) run ./hack/fleet -spokes 3 -spoke-versions "$(FLEET_VERSIONS)"

.PHONY: demo
demo: ## The main job: local hub and spokes (one of each tested Kubernetes version that is built), the controller, a pool change converging.
	KUBEBUILDER_ASSETS="$(ASSETS)" $(GO) run ./hack/fleet -spokes 3 -demo -spoke-versions "$(FLEET_VERSIONS)" -spoke-versions-if-built "$(DEMO_VERSIONS)"

# The image the Containerfile builds; `make image IMAGE=...` to push elsewhere.
IMAGE ?= quay.io/app-sre/hub-node-metadata:$(VERSION)

.PHONY: image
image: ## Build the image IMAGE (default quay.io/app-sre/hub-node-metadata:<version>) with podman, else buildah, else docker (exit 2 if none can build).
	@engine=""; why=""; \
	if ! command -v podman >/dev/null 2>&1; then why="podman not installed"; \
	elif podman info >/dev/null 2>&1; then engine="podman build"; else why="podman cannot run (podman info fails)"; fi; \
	if [ -z "$$engine" ]; then \
	  if ! command -v buildah >/dev/null 2>&1; then why="$$why, buildah not installed"; \
	  elif buildah info >/dev/null 2>&1; then engine="buildah bud"; else why="$$why, buildah cannot run (buildah info fails)"; fi; \
	fi; \
	if [ -z "$$engine" ]; then \
	  if ! command -v docker >/dev/null 2>&1; then why="$$why, docker not installed"; \
	  elif docker info >/dev/null 2>&1; then engine="docker build"; else why="$$why, docker has no daemon (docker info fails)"; fi; \
	fi; \
	if [ -z "$$engine" ]; then \
	  echo "make image: no container engine that can build is available here ($$why);" >&2; \
	  echo "the binary the image would contain is built by 'make build' and tested by 'make test'." >&2; \
	  exit 2; \
	fi; \
	echo "$$engine -t $(IMAGE)"; \
	$$engine -f Containerfile --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE) .

.PHONY: render
render: ## Print the rendered hub manifests (config/hub base and overlays) with krusty; no kubectl needed.
	@$(GO) run ./hack/render

.PHONY: prometheus
prometheus: ## Prove config/hub's alerts and dashboard: promtool check and unit tests, then every query on a live Prometheus scraping the controller on the local fleet.
	KUBEBUILDER_ASSETS="$(ASSETS)" $(GO) test -count=1 -timeout 10m -v -run '^TestPrometheusRulesAndDashboard$$' ./int/

BENCH_FLAGS ?=

# The bench binary also runs the controller it measures (its `controller`
# subcommand: the same manager as `hub-controller run`), so it is built as
# `make build` builds the shipped binary: without cgo, as a static binary.

.PHONY: bench
bench: ## Benchmarks on a local fleet (20 spokes × 50 Nodes, 50 real spokes, 2,000 simulated clusters, then again with 100 Nodes in each cache, then 2,000 connections to an event server at rising event rates (the capacity step); two hours or more on 2 cores; shorter: BENCH_FLAGS="-idle 1m -sim-steady 2m -max-real-spokes 0"): writes _out/bench/report.{md,json} and docs/benchmarks.md.
	@mkdir -p _out/bench
	$(GOBUILD) -o _out/bench/bench ./hack/bench
	KUBEBUILDER_ASSETS="$(ASSETS)" _out/bench/bench -command "make bench$(if $(BENCH_FLAGS), BENCH_FLAGS='$(BENCH_FLAGS)')" $(BENCH_FLAGS)
