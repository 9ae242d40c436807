# mcpbus — run and test. See README.md.
GO      ?= go
MODULES := ./libs/... ./services/config/... ./services/credential/... ./services/gateway/... ./services/registry/... ./services/runner/... ./tools/mcpbus/... ./tests/...
BIN     := bin

.PHONY: run build test vet fmt npm-deps bench fuzz clean vaultdev

## run: build and start everything in one process (mcpbus up) with the example servers;
## override with ARGS="--config my-servers.yaml"
ARGS ?= --config examples/servers.yaml
run: build
	$(BIN)/mcpbus up $(ARGS)

## build: the mcpbus binary and the per-service binaries into bin/
build:
	$(GO) build -o $(BIN)/mcpbus ./tools/mcpbus
	$(GO) build -o $(BIN)/mcpbus-runner ./services/runner/cmd/runner
	$(GO) build -o $(BIN)/mcpbus-config ./services/config/cmd/config
	$(GO) build -o $(BIN)/mcpbus-credential ./services/credential/cmd/credential
	$(GO) build -o $(BIN)/mcpbus-registry ./services/registry/cmd/registry

## vaultdev: a real in-process Vault for tests and local development (own module, outside
## go.work; see tools/vaultdev/README.md)
vaultdev:
	GOWORK=off $(GO) build -C tools/vaultdev -o ../../$(BIN)/vaultdev .

## test: vet, then every test of every module (installs the pinned npm MCP servers first)
test: npm-deps vet
	$(GO) test -count=1 -timeout 20m $(MODULES)

vet:
	@out=$$(gofmt -l libs services tools tests); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(MODULES)
	cd tools/vaultdev && GOWORK=off $(GO) vet ./...

fmt:
	gofmt -w libs services tools tests

## npm-deps: the published MCP servers and NATS client the tests run (pinned in tests/npm)
npm-deps: tests/npm/node_modules/.installed
tests/npm/node_modules/.installed: tests/npm/package.json tests/npm/package-lock.json
	npm ci --prefix tests/npm --no-audit --no-fund
	touch $@

## bench: the benchmarks of docs/benchmarks.md
bench: npm-deps
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./tests/bench/

## fuzz: each fuzz target for FUZZTIME (default 10s)
FUZZTIME ?= 10s
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

clean:
	rm -rf $(BIN)
