# toolmesh — build, generate, lint, test, demo.
# Tools are pinned here and installed with `go install` into the git-ignored .tmp/bin;
# none of them is a dependency of the main module.

SHELL := /usr/bin/env bash -o pipefail
.DEFAULT_GOAL := test

TMP := $(abspath .tmp)
BIN := $(TMP)/bin
export PATH := $(BIN):$(PATH)
export GOBIN := $(BIN)

BUF_VERSION := v1.75.0
PROTOC_GEN_GO_VERSION := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2
GOLANGCI_LINT_VERSION := v2.15.0
KUSTOMIZE_VERSION := v5.7.1
KUBECONFORM_VERSION := v0.8.0

# go test settings sized for a 2-core machine; every package gets a deadline.
GO_TEST_FLAGS ?= -race -p 2 -timeout 15m -count=1

# The MCP project's reference server, pinned; installed with npm into .tmp/npm. Where
# Node.js is missing it comes from Debian's packages (as root, or through sudo).
MCP_EVERYTHING_VERSION := 2026.8.31
MCP_EVERYTHING := $(TMP)/npm/node_modules/.bin/mcp-server-everything

$(MCP_EVERYTHING): $(TMP)/versions/server-everything-v$(MCP_EVERYTHING_VERSION)
	$(ensure_npm)
	npm install --silent --no-audit --no-fund --prefix $(TMP)/npm @modelcontextprotocol/server-everything@$(MCP_EVERYTHING_VERSION)
	@touch $@

# The MCP Inspector, pinned: its CLI signs in to the MCP endpoint through the OAuth flow in
# an end-to-end test (TestMCPInspectorSignsIn).
MCP_INSPECTOR_VERSION := 2.12.0
MCP_INSPECTOR := $(TMP)/npm-inspector/node_modules/.bin/mcp-inspector

$(MCP_INSPECTOR): $(TMP)/versions/inspector-v$(MCP_INSPECTOR_VERSION)
	$(ensure_npm)
	npm install --silent --no-audit --no-fund --prefix $(TMP)/npm-inspector @modelcontextprotocol/inspector@$(MCP_INSPECTOR_VERSION)
	@touch $@

# The official MCP conformance suite, pinned; installed with npm into .tmp/npm. Its
# server scenarios run against the orchestrator's MCP endpoint (test/e2e). It needs
# Node.js 22 or later, which Debian's nodejs may not be: Node.js from the npm registry's
# node-linux-<arch> package, pinned, in .tmp/npm-node.
MCP_CONFORMANCE_VERSION := 0.1.16
MCP_CONFORMANCE := $(TMP)/npm/node_modules/@modelcontextprotocol/conformance/dist/index.js
NODE22_VERSION := 22.23.5
NODE22_ARCH := $(if $(filter aarch64 arm64,$(shell uname -m)),arm64,x64)
NODE22 := $(TMP)/npm-node/node_modules/node-linux-$(NODE22_ARCH)/bin/node

$(MCP_CONFORMANCE): $(TMP)/versions/conformance-v$(MCP_CONFORMANCE_VERSION)
	$(ensure_npm)
	npm install --silent --no-audit --no-fund --prefix $(TMP)/npm @modelcontextprotocol/conformance@$(MCP_CONFORMANCE_VERSION)
	@touch $@

$(NODE22): $(TMP)/versions/node22-v$(NODE22_VERSION)
	$(ensure_npm)
	npm install --silent --no-audit --no-fund --prefix $(TMP)/npm-node node-linux-$(NODE22_ARCH)@$(NODE22_VERSION)
	@touch $@

# npm where it is missing: Debian's nodejs and npm (as root, or through sudo).
define ensure_npm
	@if ! command -v npm >/dev/null; then \
		echo "npm not found: installing Debian's nodejs and npm"; \
		if [ "$$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi; \
		$$sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends nodejs npm; \
	fi
endef

# The console's JavaScript is checked by TypeScript (strict, over JSDoc types; pinned,
# from npm) and tested by Node's own test runner: no build step, nothing generated.
TYPESCRIPT_VERSION := 5.9.3
TSC := $(TMP)/npm-ts/node_modules/.bin/tsc
$(TSC): $(TMP)/versions/typescript-$(TYPESCRIPT_VERSION)
	$(ensure_npm)
	npm install --silent --no-audit --no-fund --prefix $(TMP)/npm-ts typescript@$(TYPESCRIPT_VERSION)
	@touch $@

.PHONY: test-console
test-console: $(TSC) ## The console's JavaScript: type check (tsc, strict) and its unit tests (node --test).
	$(TSC) -p internal/console/jsconfig.json
	node --test internal/console/

# The TypeScript SDK: its dependencies from npm at the versions package-lock.json pins
# (npm ci), built and type-checked with its own tsc, tested with Node's test runner.
TS_SDK := sdk/typescript
TS_SDK_DEPS := $(TS_SDK)/node_modules/.package-lock.json
$(TS_SDK_DEPS): $(TS_SDK)/package.json $(TS_SDK)/package-lock.json
	$(ensure_npm)
	cd $(TS_SDK) && npm ci --silent --no-audit --no-fund
	@touch $@

.PHONY: sdk-build
sdk-build: $(TS_SDK_DEPS) $(PY_STAMP) ## Build what the conformance suite runs of the SDKs (the TypeScript SDK's dist/).
	cd $(TS_SDK) && npm run --silent build

.PHONY: test-sdk-typescript
test-sdk-typescript: $(TS_SDK_DEPS) ## The TypeScript SDK: type check (tsc, strict), build, unit tests (node --test).
	cd $(TS_SDK) && npm run --silent lint && npm test --silent

# Chromium for the console's browser test (chromedp drives it) and curl for the HTTP
# API's: Debian's packages where they are missing (as root, or through sudo).
BROWSER_STAMP := $(TMP)/versions/chromium
$(BROWSER_STAMP):
	@if ! command -v chromium >/dev/null || ! command -v curl >/dev/null; then \
		echo "chromium or curl not found: installing Debian's chromium and curl"; \
		if [ "$$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi; \
		$$sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends chromium curl fonts-dejavu-core; \
	fi
	@mkdir -p $(TMP)/versions && touch $@

# The Python SDK runs on Debian's grpcio and protobuf and is type-checked by Debian's
# mypy: installed where missing (as root, or through sudo).
PY_STAMP := $(TMP)/versions/python3-grpcio
$(PY_STAMP):
	@if ! /usr/bin/python3 -c 'import grpc, google.protobuf' 2>/dev/null || ! /usr/bin/python3 -m mypy --version >/dev/null 2>&1; then \
		echo "Python's grpcio, protobuf or mypy not found: installing Debian's python3-grpcio, python3-protobuf and python3-mypy"; \
		if [ "$$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi; \
		$$sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends python3 python3-grpcio python3-protobuf python3-mypy; \
	fi
	@mkdir -p $(TMP)/versions && touch $@

.PHONY: test-sdk-python
test-sdk-python: $(PY_STAMP) ## The Python SDK's unit tests (unittest) and type check (mypy --strict).
	cd sdk/python && PYTHONPATH=src python3 -m unittest discover -s tests
	cd sdk/python && /usr/bin/python3 -m mypy

# PostgreSQL's server programs, for the journal's tests: each test starts a private
# server on a temporary directory and port, never the machine's own. Where they are
# missing they come from Debian's packages (as root, or through sudo).
PG_STAMP := $(TMP)/versions/postgresql

$(PG_STAMP):
	@if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then \
		echo "PostgreSQL not found: installing Debian's postgresql"; \
		if [ "$$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi; \
		$$sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends postgresql; \
	fi
	@mkdir -p $(TMP)/versions && touch $@

# The network-namespace tests make namespaces with ip (iproute2); they skip, saying why,
# where namespaces cannot be made (no root or CAP_NET_ADMIN).
IPROUTE_STAMP := $(TMP)/versions/iproute2
$(IPROUTE_STAMP):
	@if ! command -v ip >/dev/null || ! command -v nsenter >/dev/null; then \
		echo "ip or nsenter not found: installing Debian's iproute2 and util-linux"; \
		if [ "$$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi; \
		$$sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends iproute2 util-linux || \
			echo "could not install iproute2: the network-namespace tests will skip"; \
	fi
	@mkdir -p $(TMP)/versions && touch $@

.PHONY: netns
netns: build $(IPROUTE_STAMP) ## The tool-type scaling test across network namespaces (root): writes bench/results/netns-scaling.md.
	TOOLMESH_BIN=$(abspath bin) TOOLMESH_NETNS_REPORT=$(abspath bench/results) go test -count=1 -timeout 10m -run TestToolTypeScaling -v ./test/netns

# The kustomize trees: the base and every overlay, rendered into bin/k8s and validated
# by kubeconform against the schemas vendored in deploy/k8s/schemas (no network;
# deploy/k8s/tools/cmd/schemagen writes them).
K8S_TREES := base overlays/dev overlays/prod overlays/prod-keda

.PHONY: k8s
k8s: $(BIN)/kustomize $(BIN)/kubeconform ## Render the kustomize base and overlays into bin/k8s and validate them with kubeconform (vendored schemas, strict).
	cd deploy/k8s/tools && go vet ./... && go test -count=1 ./...
	@mkdir -p bin/k8s
	@set -e; for t in $(K8S_TREES); do out=bin/k8s/$$(echo $$t | tr / -).yaml; \
		kustomize build deploy/k8s/$$t > $$out; \
		echo "$$t → $$out"; \
		kubeconform -strict -summary -schema-location 'deploy/k8s/schemas/{{.ResourceKind}}{{.KindSuffix}}.json' $$out; done

.PHONY: k8s-schemas
k8s-schemas: ## Regenerate deploy/k8s/schemas from the Kubernetes OpenAPI document and the CRDs (Go module proxy).
	cd deploy/k8s/tools && go run ./cmd/schemagen -out ../schemas

# The images trust the CA bundle of Debian's ca-certificates (HTTPS to model providers).
CA_BUNDLE := /etc/ssl/certs/ca-certificates.crt
$(CA_BUNDLE):
	@echo "$(CA_BUNDLE) not found: installing Debian's ca-certificates"
	@if [ "$$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi; \
		$$sudo apt-get update -q && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends ca-certificates

.PHONY: images
images: $(CA_BUNDLE) ## Build the orchestrator, toolworker and toolmesh images without a container daemon: bin/images/oci (OCI layout) and bin/images/<name>.tar; IMAGE_VERSION=dev tags them for the dev overlay (default: git describe).
	cd deploy/images && go run . -out $(abspath bin/images) $(if $(IMAGE_VERSION),-version $(IMAGE_VERSION))

.PHONY: test-images
test-images: images $(CA_BUNDLE) ## The image builder's own tests (it builds the images and checks what a runtime would run).
	cd deploy/images && go vet ./... && go test -count=1 -timeout 20m ./...

.PHONY: test
test: checkgenerate lint test-console test-sdk-typescript test-sdk-python unit test-mcp-everything fuzz-short k8s test-images ## Everything CI runs: generated code, linters, all tests, a short fuzz of each target, the manifests, the images.

.PHONY: unit
unit: build $(MCP_EVERYTHING) $(MCP_INSPECTOR) $(MCP_CONFORMANCE) $(NODE22) $(PG_STAMP) $(IPROUTE_STAMP) $(BROWSER_STAMP) $(BIN)/kustomize sdk-build ## Run all Go tests (end-to-end tests use the binaries in bin/; the conformance suite every SDK).
	@mkdir -p $(TMP)/reports && rm -f $(TMP)/reports/netns-scaling.md
	TOOLMESH_BIN=$(abspath bin) TOOLMESH_MCP_EVERYTHING=$(MCP_EVERYTHING) TOOLMESH_KUSTOMIZE=$(BIN)/kustomize \
		TOOLMESH_MCP_INSPECTOR=$(MCP_INSPECTOR) TOOLMESH_MCP_CONFORMANCE=$(MCP_CONFORMANCE) TOOLMESH_NODE=$(NODE22) \
		TOOLMESH_CHROMIUM=$$(command -v chromium) TOOLMESH_BROWSER_ARTIFACTS=$(abspath $(TMP)/reports/console) \
		TOOLMESH_CONFORMANCE=typescript,python \
		TOOLMESH_NETNS_REPORT=$(abspath $(TMP)/reports) go test $(GO_TEST_FLAGS) ./...
	@# Without -race, which grows every frame: a waiting run's stack.
	go test -count=1 -timeout 5m -run TestWaitingRunsKeepSmallStacks ./pkg/orchestrator
	@if [ -f $(TMP)/reports/netns-scaling.md ]; then cat $(TMP)/reports/netns-scaling.md; else echo "test/netns skipped: no figures (it needs root for network namespaces)"; fi

.PHONY: test-mcp-conformance
test-mcp-conformance: build $(MCP_CONFORMANCE) $(NODE22) ## The official MCP conformance suite's server scenarios against the orchestrator's MCP endpoint: the go-sdk's fixture behind it as an MCP group, then a worker group's tools.
	TOOLMESH_BIN=$(abspath bin) TOOLMESH_MCP_CONFORMANCE=$(MCP_CONFORMANCE) TOOLMESH_NODE=$(NODE22) \
		go test -count=1 -timeout 10m -run TestMCPConformance -v ./test/e2e

.PHONY: test-mcp-everything
test-mcp-everything: $(MCP_EVERYTHING) ## MCP groups against @modelcontextprotocol/server-everything (stdio and streamable HTTP).
	TOOLMESH_MCP_EVERYTHING=$(MCP_EVERYTHING) go test -race -tags everything -timeout 5m -count=1 -run TestEverything ./internal/mcp

# The fuzz targets, as package:target: hostile input from models (arguments), workers
# (registrations, schemas), clients (the context codec) and MCP servers (results).
FUZZ_TARGETS = ./pkg/schema:FuzzValidate ./pkg/schema:FuzzFastPathAgreesWithGeneric ./pkg/schema:FuzzFromJSON \
	./internal/ctxcodec:FuzzCodec ./internal/router:FuzzRegistration ./internal/mcp:FuzzResultOf ./pkg/tool:FuzzFlatAgreesWithJSON \
	./internal/ctxconv:FuzzCredentialKey
FUZZTIME ?= 30m

# Go before 1.27 may fail a target as -fuzztime runs out with a bare "context deadline
# exceeded", its coordinator racing its own deadline (go.dev/issue/75804): such a run,
# which wrote no failing input, is tried once more; any other failure fails at once.
.PHONY: fuzz
fuzz: ## Fuzz every target for FUZZTIME (default 30m each); a failure leaves its input under the package's testdata/fuzz.
	@mkdir -p $(TMP); set -e; for t in $(FUZZ_TARGETS); do pkg=$${t%%:*}; name=$${t##*:}; \
		for try in 1 2; do \
			echo "fuzz $$name ($$pkg) for $(FUZZTIME)"; \
			if go test -run='^$$' -fuzz="^$$name$$" -fuzztime=$(FUZZTIME) -parallel=2 $$pkg 2>&1 | tee $(TMP)/fuzz.log; then break; fi; \
			if [ $$try = 1 ] && grep -q 'context deadline exceeded' $(TMP)/fuzz.log && ! grep -q 'Failing input written to' $(TMP)/fuzz.log; then \
				echo "fuzz $$name: the fuzzing engine's deadline race, no failing input: once more"; continue; fi; \
			exit 1; \
		done; done

.PHONY: fuzz-short
fuzz-short: ## Fuzz every target for 10s (part of make test).
	$(MAKE) fuzz FUZZTIME=10s

.PHONY: build
build: ## Build the binaries into bin/ (the example programs too).
	go build -o bin/ ./cmd/... ./examples/...

.PHONY: demo
demo: build ## Start an orchestrator and three workers on loopback and run a prompt through them.
	./bin/toolmesh-demo

.PHONY: certs
certs: build ## Write a development CA, mutual-TLS certificates and a bearer-token signing key to certs/ and print how to use them.
	./bin/toolmesh certs -dir certs -workers math,text,payments

.PHONY: vet
vet: ## gofmt, go vet, go mod tidy check.
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	go mod tidy -diff

.PHONY: lint-proto
lint-proto: $(BIN)/buf ## buf lint and buf format.
	buf lint
	buf format -d --exit-code

.PHONY: lint
lint: vet lint-proto breaking $(BIN)/golangci-lint ## All linters, golangci-lint included.
	golangci-lint run ./...

# The contract is frozen: every change must be compatible with main's, for generated code
# as for the wire (buf.yaml's breaking rules). On main itself this compares main with main.
.PHONY: breaking
breaking: $(BIN)/buf ## buf breaking against the main branch.
	@if git rev-parse -q --verify refs/heads/main >/dev/null; then buf breaking --against '.git#branch=main'; \
	elif git rev-parse -q --verify refs/remotes/origin/main >/dev/null; then buf breaking --against '.git#ref=refs/remotes/origin/main'; \
	else echo "breaking: no main branch to compare with"; exit 1; fi

# What is generated from proto/ and checked in: the Go stubs, the TypeScript SDK's
# messages, and the Python SDK's descriptor sets (its messages are built from them at run
# time) and test vectors.
GENERATED := pkg/toolpb sdk/typescript/src/gen sdk/python/src/toolmesh/toolmesh.binpb sdk/python/src/toolmesh/extras.binpb \
	sdk/python/tests/testdata/vectors.json sdk/python/src/toolmesh/_goprint.py

.PHONY: generate
generate: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(PY_STAMP) $(TS_SDK_DEPS) ## Regenerate pkg/toolpb and the SDKs' generated files from proto/.
	buf generate
	buf build --exclude-source-info -o sdk/python/src/toolmesh/toolmesh.binpb
	buf build sdk/proto --exclude-source-info -o sdk/python/src/toolmesh/extras.binpb
	go run ./sdk/python/tests/testdata/govectors | python3 sdk/python/tests/testdata/update_vectors.py
	buf generate --template $(TS_SDK)/buf.gen.yaml

.PHONY: checkgenerate
checkgenerate: generate ## Fail when generated code differs from what is committed.
	@if [ -n "$$(git status --porcelain -- $(GENERATED))" ]; then \
		echo "generated files are out of date: run make generate and commit"; git status --porcelain -- $(GENERATED); git diff --stat -- $(GENERATED); exit 1; fi


.PHONY: tools
tools: $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/golangci-lint $(BIN)/kustomize $(BIN)/kubeconform ## Install the pinned tools.

# Each tool is keyed by a stamp holding its version, so changing a version reinstalls it.
$(BIN)/buf: $(TMP)/versions/buf-$(BUF_VERSION)
	go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
$(BIN)/protoc-gen-go: $(TMP)/versions/protoc-gen-go-$(PROTOC_GEN_GO_VERSION)
	go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
$(BIN)/protoc-gen-go-grpc: $(TMP)/versions/protoc-gen-go-grpc-$(PROTOC_GEN_GO_GRPC_VERSION)
	go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
$(BIN)/golangci-lint: $(TMP)/versions/golangci-lint-$(GOLANGCI_LINT_VERSION)
	go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
$(BIN)/kustomize: $(TMP)/versions/kustomize-$(KUSTOMIZE_VERSION)
	go install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
$(BIN)/kubeconform: $(TMP)/versions/kubeconform-$(KUBECONFORM_VERSION)
	go install github.com/yannh/kubeconform/cmd/kubeconform@$(KUBECONFORM_VERSION)

$(TMP)/versions/%:
	@rm -f $(TMP)/versions/$(firstword $(subst -v, ,$*))-v*
	@mkdir -p $(TMP)/versions && touch $@

.PHONY: clean
clean: ## Remove build output and installed tools.
	rm -rf bin .tmp

.PHONY: help
help: ## List targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

.PHONY: bench
bench: build bench-peers $(MCP_EVERYTHING) ## Benchmark harness, a few minutes: writes bench/results/latest.md and latest.json.
	TOOLMESH_BIN=$(abspath bin) TOOLMESH_MCP_EVERYTHING=$(MCP_EVERYTHING) go run ./bench/cmd/benchrun -out bench/results

.PHONY: soak
soak: build $(PG_STAMP) ## The chaos soak for SOAK_DURATION (default 10m), 10^5 calls of four tenants under worker kills, crash cycles, the orchestrator killed at every journal failpoint three times over: bench/results/soak-latest.md, .json, isolation-latest.md.
	TOOLMESH_BIN=$(abspath bin) TOOLMESH_SOAK_DURATION=$(or $(SOAK_DURATION),10m) TOOLMESH_SOAK_REPORT=$(abspath bench/results) \
		go test -count=1 -timeout 60m -run TestSoak -v ./test/soak
	TOOLMESH_BIN=$(abspath bin) TOOLMESH_ISOLATION_CALLS=100000 TOOLMESH_SOAK_REPORT=$(abspath bench/results) \
		go test -count=1 -timeout 30m -run TestTenantIsolationUnderFaults -v ./test/e2e
	TOOLMESH_CRASH_CYCLES=100 go test -count=1 -timeout 30m -run 'Crash|TestPostgres' ./internal/runlog
	TOOLMESH_BIN=$(abspath bin) TOOLMESH_CRASH_SOAK=1 go test -count=1 -timeout 30m -run TestCrashAtEveryFailpoint -v ./test/crash

.PHONY: bench-peers
bench-peers: ## The benchmark's peer programs: raw gRPC, MCP SDK, flood, toolmesh's loop, and eino's (bench/peers/eino, a module of its own).
	go build -o bin/ ./bench/cmd/rawadd ./bench/cmd/mcpadd ./bench/cmd/flood ./bench/cmd/looppeer
	cd bench/peers/eino && go build -o $(abspath bin)/einoloop .

.PHONY: bench-quick
bench-quick: build bench-peers $(MCP_EVERYTHING) ## The benchmark harness in its quick configuration, under a minute.
	TOOLMESH_BIN=$(abspath bin) TOOLMESH_MCP_EVERYTHING=$(MCP_EVERYTHING) go run ./bench/cmd/benchrun -quick -out bench/results

# The packages with testing.B benchmarks in their tests.
MICROBENCH_PKGS = $(sort $(dir $(shell grep -rl --include='*_test.go' --exclude-dir=.tmp --exclude-dir=.git '^func Benchmark' .)))
# Packages run one at a time so that they do not share the cores; e.g. MICROBENCH_FLAGS='-benchtime 100x' for a quick check.
MICROBENCH_FLAGS ?= -benchtime 1s

.PHONY: microbench
microbench: ## The testing.B micro-benchmarks beside the code (schema validation, context codec, replica choice, facades), under a minute.
	go test -p 1 -run '^$$' -bench . -benchmem $(MICROBENCH_FLAGS) $(MICROBENCH_PKGS)
