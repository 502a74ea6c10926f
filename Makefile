# hcpbot — see README.md. Only Go is needed; the test control plane is built
# from module source on first use and cached per user (hack/testenv/build.sh).

GO        ?= go
BIN       ?= bin/hcpbot
# The release this tree builds (internal/version/RELEASE): the version
# stamped into the binary and the image tag configs/deploy pins. Bump it
# there; a test fails if the kustomizations' image tags differ.
RELEASE   := $(shell cat internal/version/RELEASE)
VERSION   ?= $(RELEASE)
COMMIT    ?= $(shell git rev-parse --short HEAD 2>/dev/null)
LDFLAGS   := -s -w -X github.com/hcpbot/hcpbot/internal/version.Version=$(VERSION) -X github.com/hcpbot/hcpbot/internal/version.Commit=$(COMMIT)
# The race detector needs cgo; use it wherever a C compiler is present.
RACE      ?= $(shell [ "$$($(GO) env CGO_ENABLED)" = 1 ] && command -v "$$($(GO) env CC)" >/dev/null 2>&1 && echo -race)
TESTFLAGS ?=
TIMEOUT   ?= 60m
IMAGE     ?= ghcr.io/hcpbot/hcpbot:$(VERSION)

.PHONY: all build test test-short vet testenv demo bench fuzz fuzz-short chaos image clean

all: build

## build: the release binary. -tags nodemo leaves the demo out (it needs
## a checkout to build its control plane); `make demo` builds its own.
build:
	CGO_ENABLED=0 $(GO) build -tags nodemo -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/hcpbot

## vet: gofmt and go vet must be clean.
vet:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

## testenv: build (once) the kube-apiserver + etcd used by the tests and the demo.
testenv:
	@bash hack/testenv/build.sh

## test: every test, unit and integration (real kube-apiserver, embedded NATS, Slack recorder).
test: vet
	@assets=$$(bash hack/testenv/build.sh) && \
	  HCPBOT_TESTENV_ASSETS=$$assets $(GO) test $(RACE) -timeout $(TIMEOUT) -count=1 $(TESTFLAGS) ./...

## test-short: unit tests only (no control plane).
test-short:
	$(GO) test $(RACE) -short -count=1 $(TESTFLAGS) ./...

## demo: agent + bot as `hcpbot all` runs them, on a local control plane,
## with a console in place of Slack (README "What make demo shows").
## DEMOFLAGS=--script plays it unattended.
DEMO_BIN  ?= bin/hcpbot-demo
DEMOFLAGS ?=
demo:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(DEMO_BIN) ./cmd/hcpbot
	@assets=$$(bash hack/testenv/build.sh) && HCPBOT_TESTENV_ASSETS=$$assets $(DEMO_BIN) demo $(DEMOFLAGS)

## bench: the benchmarks of docs/performance.md (B1–B8) on the real parts;
## results in bench/out/results.json with CPU and heap profiles beside it,
## then a table. BENCH=B2 runs one. No race detector: it would be measured.
BENCH      ?= .
BENCH_OUT  ?= bench/out
bench:
	@mkdir -p $(BENCH_OUT)
	@assets=$$(bash hack/testenv/build.sh) && \
	  HCPBOT_TESTENV_ASSETS=$$assets HCPBOT_BENCH_OUT=$(abspath $(BENCH_OUT)) HCPBOT_BENCH_COMMIT=$(COMMIT) \
	  $(GO) test -run '^$$' -bench '$(BENCH)' -benchtime 1x -count 1 -timeout 40m $(TESTFLAGS) ./bench
	@$(GO) run ./bench/benchtable $(BENCH_OUT)/results.json

## fuzz: run every fuzz target for FUZZTIME each (corpora live in testdata/fuzz).
FUZZTIME ?= 30s
FUZZ_TARGETS = ./event:FuzzDecode ./event:FuzzSplitAgrees ./noproxy:FuzzParse ./noproxy:FuzzDecide ./noproxy:FuzzMerge ./noproxy:FuzzLint \
	./redact:FuzzRedactNoPassword ./bot/chatops:FuzzParse ./bot/chatops:FuzzAuthenticate ./configs:FuzzParse
fuzz:
	@GO=$(GO) FUZZTIME=$(FUZZTIME) bash hack/fuzz.sh $(FUZZ_TARGETS)

## fuzz-short: every fuzz target briefly (10s each), for CI.
fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=10s

## chaos: the fault and abuse suite (tests named TestChaos*) in its long
## variants, then a table of every case with its figures. Each case appends
## one JSON line to CHAOS_REPORT (internal/testenv/chaosreport); make test
## runs the same tests in their short variants.
CHAOS_PKGS   ?= ./bus ./watchers ./bot ./bot/notify ./bot/chatops ./cmd/hcpbot
CHAOS_REPORT ?= bench/out/chaos.jsonl
chaos:
	@mkdir -p $(dir $(CHAOS_REPORT)) && rm -f $(CHAOS_REPORT)
	@assets=$$(bash hack/testenv/build.sh) && \
	  HCPBOT_TESTENV_ASSETS=$$assets HCPBOT_CHAOS_LONG=1 HCPBOT_CHAOS_REPORT=$(abspath $(CHAOS_REPORT)) \
	  $(GO) test $(RACE) -timeout $(TIMEOUT) -count=1 -run '^TestChaos' $(TESTFLAGS) $(CHAOS_PKGS); \
	  status=$$?; echo; echo "chaos report ($(CHAOS_REPORT)):"; \
	  $(GO) run ./internal/testenv/chaosreport/cmd/chaostable $(CHAOS_REPORT) || status=1; \
	  exit $$status

## image: the container image (needs a Docker engine).
image:
	docker build --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE) .

clean:
	rm -rf bin bench/out
