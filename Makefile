# mcpbus — run and test. See README.md.
GO      ?= go
MODULES := ./libs/... ./services/chat/... ./services/config/... ./services/credential/... ./services/gateway/... ./services/registry/... ./services/runner/... ./tools/mcpbus/... ./tests/...
BIN     := bin
# The secrets scanner's vector sieve (libs/secretscan/sieve_simd.go) is written with Go's
# experimental simd/archsimd package, which this experiment turns on. Without it (a plain
# `go build`), or on a CPU without AVX-512, the scanner walks every byte instead: the same
# findings, 2-6x the CPU on large payloads (docs/benchmarks.md).
export GOEXPERIMENT ?= simd

.PHONY: run build test vet tidy tidy-check fmt npm-deps console bench fuzz clean vaultdev jaegerdev compose-check helm-check docs

## run: build and start everything in one process (mcpbus up) with the example servers;
## override with ARGS="--config my-servers.yaml"
ARGS ?= --config examples/servers.yaml
run: build
	$(BIN)/mcpbus up $(ARGS)

SERVICES := config credential gateway registry runner chat

## build: the mcpbus binary and one binary per service (each is `mcpbus serve <service>`) into bin/
build: console
	$(GO) build -o $(BIN)/mcpbus ./tools/mcpbus
	for s in $(SERVICES); do $(GO) build -o $(BIN)/mcpbus-$$s ./services/$$s/cmd/$$s || exit 1; done

## docs: the CLI reference docs/cli/ (one page per command, generated from the cobra tree;
## a test in tools/mcpbus/internal/cli fails when it is not current)
docs:
	$(GO) run ./tools/mcpbus/internal/gendocs docs/cli

## compose-check: docker-compose.yml, the override, the Dockerfile and vault-init checked with
## compose-go (seconds; no Docker engine needed). `go test ./tests/deploy/` also runs the deployment.
compose-check:
	$(GO) test -count=1 -short -run 'TestComposeFile|TestDockerServersOverride|TestImages|TestVaultInit' ./tests/deploy/

## helm-check: deploy/helm/mcpbus rendered with Helm's engine and decoded strictly into the
## Kubernetes API types (own module, outside go.work: ~4-6 min cold build, seconds warm)
helm-check:
	cd tests/helmchart && GOWORK=off $(GO) test -count=1 ./...

## vaultdev: a real in-process Vault for tests and local development (own module, outside
## go.work; see tools/vaultdev/README.md)
vaultdev:
	GOWORK=off $(GO) build -C tools/vaultdev -o ../../$(BIN)/vaultdev .

## jaegerdev: a real Jaeger v2 (bin/jaeger, traces in memory) for tests and local use (own
## module, outside go.work; run bin/jaeger --config tools/jaegerdev/config.yaml; see
## tools/jaegerdev/README.md)
jaegerdev:
	GOWORK=off $(GO) build -C tools/jaegerdev -o ../../$(BIN)/jaeger github.com/jaegertracing/jaeger/cmd/jaeger

## test: vet, then every test of every module under the race detector (installs the pinned
## npm MCP servers first, and builds the console so the binaries the tests build embed it)
# The npm install (network and disk) runs beside vet (CPU); vet comes after the console build,
# whose dist/ it reads (go:embed). The suites mostly wait (stacks starting, servers answering,
# bounds running out) and a running test binary holds one of go test's -p slots, as a compile
# does: -p $(TEST_P) keeps compiles and other suites going beside the slow ones on 2 cores, and
# as go test starts test binaries in the order it is given the packages, the slowest come
# first. -parallel 4: the t.Parallel tests of a package (go's default is GOMAXPROCS).
# -vet=off: vet ran go vet on every package already (go test's own vet is a subset of it).
# tests/cluster runs alone afterwards: its 3-node clusters (three nats-servers, runner processes)
# beside four -race suites loaded the 2 cores enough to make the others' timed steps flaky.
SLOW_TESTS := ./tests/gateway ./tests/console ./tests/e2e ./tests/security ./tests/split ./services/runner/runner
TEST_P     ?= 4
test: console
	$(MAKE) --no-print-directory -j2 npm-deps vet
	$(GO) test -race -count=1 -timeout 30m -p $(TEST_P) -parallel 4 -vet=off $(SLOW_TESTS) $$($(GO) list $(MODULES) | grep -v '/tests/cluster$$')
	$(GO) test -race -count=1 -timeout 10m -vet=off ./tests/cluster

## vet: gofmt, go vet, staticcheck (pinned) and tidy go.mod files (our modules; not the Vault and
## Jaeger wrappers, whose vet would compile those projects)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.6.1
vet: tidy-check
	@out=$$(gofmt -l libs services tools tests); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(MODULES)
	GOEXPERIMENT= $(GO) vet ./libs/secretscan/
	$(GO) run $(STATICCHECK) $(MODULES)
# tools/vaultdev and tools/jaegerdev are thin wrappers around Vault and Jaeger: vetting them
# compiles all of Vault (~30 min on a fresh 2-core machine); the tests build them once per
# machine (~/.cache/mcpbus) and gofmt covers their source.

## tidy-check: every module's go.mod and go.sum as `go mod tidy` leaves them
GOMODS := libs services/chat services/config services/credential services/gateway services/registry services/runner tools/mcpbus tests
tidy-check:
	@for m in $(GOMODS); do (cd $$m && $(GO) mod tidy -diff >/dev/null) || { echo "go.mod of $$m is not tidy: run make tidy"; exit 1; }; done

tidy:
	for m in $(GOMODS); do (cd $$m && $(GO) mod tidy) || exit 1; done

fmt:
	gofmt -w libs services tools tests

## npm-deps: the published MCP servers and NATS client the tests run (pinned in tests/npm)
npm-deps: tests/npm/node_modules/.installed
tests/npm/node_modules/.installed: tests/npm/package.json tests/npm/package-lock.json
	npm ci --prefix tests/npm --no-audit --no-fund
	touch $@

## console: the web console (services/gateway/console/web, an npm project) built into
## services/gateway/console/dist/, which the gateway embeds; skipped when nothing changed
## (npm ci only when package.json or package-lock.json changed, the build when any source did)
CONSOLE_WEB   := services/gateway/console/web
CONSOLE_DIST  := services/gateway/console/dist
CONSOLE_STAMP := $(CONSOLE_DIST)/.built
CONSOLE_DEPS  := $(CONSOLE_WEB)/node_modules/.installed
CONSOLE_SRCS  := $(shell find $(CONSOLE_WEB) -name node_modules -prune -o -type f -print 2>/dev/null)
console: $(CONSOLE_STAMP)
# A missing index.html (dist emptied by hand) rebuilds whatever the stamp says.
$(CONSOLE_STAMP): $(CONSOLE_DEPS) $(CONSOLE_SRCS) $(if $(wildcard $(CONSOLE_DIST)/index.html),,FORCE)
	npm run --prefix $(CONSOLE_WEB) build
	@test -f $(CONSOLE_DIST)/index.html || { echo "make console: the build wrote no $(CONSOLE_DIST)/index.html" >&2; exit 1; }
	touch $@
$(CONSOLE_DEPS): $(CONSOLE_WEB)/package.json $(CONSOLE_WEB)/package-lock.json
	npm ci --prefix $(CONSOLE_WEB) --no-audit --no-fund
	touch $@

.PHONY: FORCE
FORCE:

## bench: the benchmarks of docs/benchmarks.md
bench: npm-deps
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./tests/bench/

## fuzz: each fuzz target for FUZZTIME (default 10s)
FUZZTIME ?= 10s
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

clean:
	rm -rf $(BIN)
