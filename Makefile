# Mailvet — common tasks. `make run` starts the whole system; `make test` runs every test.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)

# Tools the build and tests need, pinned and installed into a project-local, git-ignored folder.
TOOLS := $(CURDIR)/.tools/bin
STATICCHECK_VERSION := v0.8.2
# Stripe's API mock, for the billing tests (internal/testkit/stripetest starts it).
STRIPE_MOCK_VERSION := v0.203.0
# The NATS server the cluster fault test (test/cluster) runs three of: the version go.mod embeds.
NATS_SERVER_VERSION := v2.15.2

GO_TEST_FLAGS ?= -race -count=1 -timeout 20m

.PHONY: all build run demo test test-go test-ts check-devdb cluster-test chromium lint fmt bench bench-postfix load migrate tools clean data release release-check

# Runs a command with DATABASE_URL set: the caller's, the default server when it answers, else a
# private cluster in .data/pg started for the command and stopped after it (docs/operations.md,
# "A private Postgres for development").
DEVDB := $(CURDIR)/scripts/devdb.sh exec

all: build

build:
	go build -o bin/ ./cmd/...

## run: the whole system in one process (embedded NATS unless NATS_URL is set, in-process workers)
run: build
	$(DEVDB) ./bin/api -dev

## demo: `make run` in the demo world: the embedded mail simulator (internal/mailsim) answers the
## verifier's DNS and SMTP, so the demo addresses it prints show every outcome without the internet
demo: build
	$(DEVDB) ./bin/api -dev -demo

## test: every test, against the real Postgres (DATABASE_URL) and embedded NATS servers
test: tools chromium
	$(DEVDB) $(MAKE) --no-print-directory test-go test-ts
	$(MAKE) --no-print-directory release-check

test-go:
	$(DEVDB) env PATH="$(TOOLS):$$PATH" go test $(GO_TEST_FLAGS) ./...

## check-devdb: `make demo` with no Postgres answering starts on a private cluster, answers, and
## stops it (scripts/devdb-check.sh; .ci/run runs it). About a minute at most after the build.
check-devdb:
	scripts/devdb-check.sh

## cluster-test: the long form of the cluster fault test (docs/reliability.md, "Cluster fault test"):
## the real binaries and a 3-node NATS cluster on loopback, processes killed with SIGKILL and
## restarted one at a time under load; `make test` runs its short form. Under 3 minutes.
cluster-test: tools
	$(DEVDB) env PATH="$(TOOLS):$$PATH" MAILVET_CLUSTER_TEST=long go test -race -count=1 -timeout 15m -run '^TestCluster$$' -v ./test/cluster

## test-ts: the TypeScript client (clients/typescript): npm ci when node_modules is missing or the
## lockfile changed, build with tsc, then node's test runner (its integration test builds and
## starts a real bin/api -dev -demo on a fresh database; about 40-90 s, most of it one rate-limit window)
TS_CLIENT := clients/typescript
test-ts: $(TS_CLIENT)/node_modules/.package-lock.json
	cd $(TS_CLIENT) && node_modules/.bin/tsc -p tsconfig.json && $(DEVDB) node --test test/*.test.mjs

# npm ci writes node_modules/.package-lock.json, so a newer lockfile or package.json reinstalls.
$(TS_CLIENT)/node_modules/.package-lock.json: $(TS_CLIENT)/package-lock.json $(TS_CLIENT)/package.json
	cd $(TS_CLIENT) && npm ci --no-audit --no-fund
	@touch $@

## release: what a self-hosting customer installs, in dist/ (docs/clients.md, "Installing"): the
## TypeScript client's npm tarball (npm pack: mailvet-client-VERSION.tgz) and the mailvet CLI for
## linux and darwin on amd64 and arm64 (mailvet-VERSION-OS-ARCH, static), with SHA256SUMS.
## VERSION is the clients' version (client.Version, package.json's version; release-check
## checks that they agree).
RELEASE_VERSION := $(shell sed -n 's/^const Version = "\(.*\)"$$/\1/p' client/client.go)
RELEASE_PLATFORMS := linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
release: $(TS_CLIENT)/node_modules/.package-lock.json
	rm -rf dist && mkdir -p dist
	cd $(TS_CLIENT) && npm pack --silent --pack-destination ../../dist >/dev/null
	@set -e; for p in $(RELEASE_PLATFORMS); do \
		echo "go build mailvet for $$p"; \
		CGO_ENABLED=0 GOOS=$${p%/*} GOARCH=$${p#*/} go build -trimpath -ldflags=-s \
			-o dist/mailvet-$(RELEASE_VERSION)-$${p%/*}-$${p#*/} ./cmd/mailvet; \
	done
	cd dist && sha256sum * > SHA256SUMS
	@echo "dist/:"; ls -l dist

## release-check: `make release`, then what it made installs as docs/clients.md says: the tarball
## into a scratch npm project (offline) where it imports, the checksums, the linux CLI runs
## --version, and the Go client builds in a scratch module through a replace of a clone
## (scripts/release-check.sh; `make test` runs it). About a minute with Go's build cache warm.
release-check: release
	scripts/release-check.sh

lint: $(TOOLS)/staticcheck
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	$(TOOLS)/staticcheck ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

## bench: every Go benchmark (results go to BENCHMARKS.md by hand, with the command)
bench:
	go test -run='^$$' -bench=. -benchmem ./...

## bench-postfix: TestPostfixVerdicts and BenchmarkOraclePostfix against a real Postfix with its stock limits
## (scripts/postfix-bench.sh: as root, installs Debian's postfix when missing and runs a private
## instance on 127.0.0.253:2525 for the run's length). COUNT=n runs it n times (default 3)
bench-postfix:
	scripts/postfix-bench.sh

## load: the load script (cmd/loadtest, not part of `make test`): one API replica in-process on a
## fresh database, 50 clients on loopback against locally decided and fleet-probed addresses and a
## bare Echo handler, admission window 0 vs grouped; checks the metering. LOAD_FLAGS=-h lists options
load:
	go run ./cmd/loadtest $(LOAD_FLAGS)

migrate:
	go run ./cmd/api migrate

## data: regenerate the embedded data sets (disposable domains, role names, free providers, common
## passwords, the mailcheck golden file) from the npm packages pinned in data/package-lock.json
data:
	npm ci --ignore-scripts --no-audit --no-fund --prefix data
	node data/export.js
	go run ./internal/verify/disposable/gen
	go run ./internal/verify/signals/gen
	go run ./internal/passwords/gen
	node data/mailcheck-golden.js

tools: $(TOOLS)/.stripe-mock-$(STRIPE_MOCK_VERSION) $(TOOLS)/.nats-server-$(NATS_SERVER_VERSION)

## chromium: Debian's Chromium for the dashboard's browser tests (cmd/api, docs/dashboard.md),
## installed with apt-get when missing; without root it only says so, and the tests skip (fail under CI)
chromium:
	@command -v chromium >/dev/null || { if [ "$$(id -u)" = 0 ]; then apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
		else echo "chromium is missing: apt-get install chromium (as root) to run the dashboard's browser tests"; fi; }

# The stamp names the version, so changing STRIPE_MOCK_VERSION reinstalls.
$(TOOLS)/.stripe-mock-$(STRIPE_MOCK_VERSION):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) go install github.com/stripe/stripe-mock@$(STRIPE_MOCK_VERSION)
	@touch $@

$(TOOLS)/.nats-server-$(NATS_SERVER_VERSION):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) go install github.com/nats-io/nats-server/v2@$(NATS_SERVER_VERSION)
	@touch $@

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

clean:
	rm -rf bin dist .tools .data
