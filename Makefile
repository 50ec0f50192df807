# Palisade — every target does its own set-up on a fresh machine with Go installed.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# Built tools and the real control plane are cached outside the checkout, keyed by version,
# so that a fresh clone on the same machine reuses them.
PALISADE_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/palisade
CACHE := $(PALISADE_CACHE)
export PALISADE_CACHE
K8S_VERSION ?= v1.37.0
ETCD_VERSION ?= v3.6.5
CONTROLLER_GEN_VERSION ?= v0.23.0
CONTROLLER_GEN := $(CACHE)/tools/controller-gen-$(CONTROLLER_GEN_VERSION)/controller-gen
export PALISADE_TESTBED_BIN := $(CACHE)/testbed-kubernetes-$(K8S_VERSION)-etcd-$(ETCD_VERSION)/bin
DEB_PACKAGES := openipmi ipmitool containerd runc busybox-static iproute2 nftables containernetworking-plugins util-linux
TEST_TIMEOUT ?= 60m
# make test runs its chaos seeds and regressions this many at once (each its own control plane,
# machines and LAN): 2 took 646 s for the 9 runs here, against about 1180 s one after the other.
TEST_CHAOS_PARALLEL ?= 2
# make test runs every fuzz target this long after the tests; make fuzz runs them FUZZTIME each.
TEST_FUZZTIME ?= 3s
FUZZTIME ?= 60s
# make chaos: how many seeded runs, from which seed, how many at once; VANILLA=1 switches Palisade off;
# SELF_FENCE=1 runs the agents with --self-fence-after and a policy that starts with SelfFence;
# LEADER=1 runs only seeds that draw a leader fault (the first RUNS of them from SEED on);
# REGRESSION=<name> runs one of the hand-written regressions (test/chaos Regressions) instead.
RUNS ?= 200
SEED ?= 1
PARALLEL ?= 1
VANILLA ?= 0
SELF_FENCE ?= 0
LEADER ?= 0
REGRESSION ?=
# make images: the images' tag and version label, the time of every file in them, the licenses label.
VERSION ?= $(shell git describe --tags --always --dirty)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct)
LICENSES ?=

.PHONY: help
help: ## Show the targets.
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build palisade-controller, palisade-agent (with palisade-executor beside it) and palisade into bin/, with kubectl-palisade (the kubectl plugin) and kubectl_complete-palisade linked to palisade.
	go build -o bin/ ./cmd/...
	ln -sf palisade bin/kubectl-palisade
	ln -sf palisade bin/kubectl_complete-palisade

.PHONY: test
test: deps testbed ## Unit and integration tests against the real control plane and ipmi_sim.
	@log=$$(mktemp -t palisade-test.XXXXXX.log); rc=0; \
	{ PALISADE_CHAOS_PARALLEL=$(TEST_CHAOS_PARALLEL) go test -count=1 -p 1 -timeout $(TEST_TIMEOUT) ./... && FUZZTIME=$(TEST_FUZZTIME) bash test/bin/fuzz.sh; } 2>&1 | tee "$$log" || rc=$$?; \
	if [ $$rc -ne 0 ]; then \
	  echo; echo "=== make test failed; the failing tests and their messages (whole output: $$log):"; \
	  grep -E -- '^ *--- FAIL|^ +[A-Za-z0-9_]+_test\.go:[0-9]+: |^(FAIL|panic:)' "$$log" | tail -n 100; \
	fi; exit $$rc

.PHONY: fuzz
fuzz: ## Run every fuzz target (func Fuzz… in a _test.go file) for FUZZTIME each (default 60s).
	FUZZTIME=$(FUZZTIME) bash test/bin/fuzz.sh

.PHONY: test-e2e
test-e2e: deps testbed ## Only the end-to-end fencing tests.
	go test -count=1 -timeout $(TEST_TIMEOUT) -v ./test/e2e/...

.PHONY: bench
bench: deps testbed ## Agent cost, detection latency, then failover: Palisade versus vanilla Kubernetes (prints BENCH lines).
	go test -count=1 -run '^$$' -bench . -benchtime 1x ./cmd/palisade-agent/ ./detectors/classify/ ./detectors/observe/ ./fencing/ | tee $(CACHE)/bench.log
	go test -count=1 -timeout 80m -run '^$$' -bench . -benchtime 1x ./test/bench/ | tee -a $(CACHE)/bench.log
	@echo; grep '^BENCH' $(CACHE)/bench.log

SIZES ?= 500,1000,2000,5000

.PHONY: bench-scale
bench-scale: deps testbed ## The controller's cost at SIZES simulated nodes (30 pods, an agent each): RSS, CPU, API rate, heartbeat p99, rack release.
	PALISADE_SCALE_SIZES=$(SIZES) PALISADE_SCALE_CONTROLLER_ARGS="$(CONTROLLER_ARGS)" PALISADE_SCALE_PEAK_PROFILE=$(PEAK_PROFILE) PALISADE_SCALE_PROFILES=$(CACHE) go test -count=1 -timeout 3h -v -run '^$$' -bench . -benchtime 1x ./test/bench/scale/ | tee $(CACHE)/bench-scale.log
	@echo; grep '^BENCH' $(CACHE)/bench-scale.log

.PHONY: chaos
chaos: deps testbed ## Seeded faults on real machines, judged by the independent checker: make chaos RUNS=200 [SEED=1] [PARALLEL=1] [VANILLA=1] [SELF_FENCE=1] [LEADER=1], or make chaos REGRESSION=<name>
	@set +e; PALISADE_CHAOS_RUNS=$(RUNS) PALISADE_CHAOS_SEED=$(SEED) PALISADE_CHAOS_VANILLA=$(VANILLA) PALISADE_CHAOS_PARALLEL=$(PARALLEL) PALISADE_CHAOS_REGRESSION=$(REGRESSION) PALISADE_CHAOS_SELF_FENCE=$(SELF_FENCE) PALISADE_CHAOS_LEADER=$(LEADER) \
	  go test -count=1 -timeout 0 -parallel $(PARALLEL) -v -run '^TestChaos$$' ./test/chaos/ 2>&1 | tee $(CACHE)/chaos.log | \
	  grep -E '^(=== RUN|--- |BENCH)|chaos_test.go|VIOLATION|replay:' ; \
	  rc=$${PIPESTATUS[0]}; echo; grep '^BENCH chaos' $(CACHE)/chaos.log | tail -1; exit $$rc

.PHONY: demo
demo: deps testbed ## Cut a real machine's power (real kubelet, containerd, palisade-agent) and watch Palisade fence it and move its database pod. Needs root.
	@set -o pipefail; go test -count=1 -timeout 10m -v -run '^TestDemo$$' ./test/demo/ | sed -E 's/^ +[a-z_]+\.go:[0-9]+: //'

.PHONY: demo-simulated
demo-simulated: deps testbed ## The demo on simulated nodes (no machines, no root).
	go run ./test/cmd/palisade-demo

.PHONY: images
images: ## Build the palisade-controller and palisade-agent images into bin/images/ (docker-archive tarballs for ctr images import or docker load, SPDX SBOMs beside them), reproducibly, without a registry or a daemon; Debian packages cached in $(CACHE)/images.
	go run ./cmd/palisade-images -version $(VERSION) -revision $$(git rev-parse HEAD) -source-date-epoch $(SOURCE_DATE_EPOCH) -licenses '$(LICENSES)' -cache $(CACHE)/images -out bin/images

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Regenerate deepcopy code and CRDs from config/v1alpha1.
	$(CONTROLLER_GEN) object paths=./config/...
	$(CONTROLLER_GEN) crd paths=./config/... output:crd:artifacts:config=charts/palisade/files/crds

.PHONY: verify
verify: generate ## Fail when generated files are stale or the code is not formatted and vetted.
	git diff --exit-code -- config charts
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	go vet ./...

.PHONY: lint
lint: ## gofmt and go vet.
	test -z "$$(gofmt -l $$(git ls-files '*.go'))"
	go vet ./...

.PHONY: testbed
testbed: ## Build etcd and the Kubernetes control plane from the module proxy (cached, ~10 min once).
	K8S_VERSION=$(K8S_VERSION) ETCD_VERSION=$(ETCD_VERSION) PALISADE_CACHE=$(CACHE) bash test/bin/build-testbed.sh

.PHONY: deps
deps: ## Install the Debian packages the test bed needs (ipmi_sim, ipmitool) when missing.
	@missing=""; for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(CONTROLLER_GEN):
	GOBIN=$(dir $(CONTROLLER_GEN)) go install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_GEN_VERSION)
