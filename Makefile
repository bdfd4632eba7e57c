# Mailvet — common tasks. `make run` starts the whole system; `make test` runs every test.
SHELL := /bin/bash
export PATH := /usr/local/go/bin:$(PATH)

# Tools the build and tests need, pinned and installed into a project-local, git-ignored folder.
TOOLS := $(CURDIR)/.tools/bin
STATICCHECK_VERSION := v0.8.2
# Stripe's API mock, for the billing tests (internal/testkit/stripetest starts it).
STRIPE_MOCK_VERSION := v0.203.0

GO_TEST_FLAGS ?= -race -count=1 -timeout 20m

.PHONY: all build run demo test test-short lint fmt bench migrate tools clean data

all: build

build:
	go build -o bin/ ./cmd/...

## run: the whole system in one process (embedded NATS unless NATS_URL is set, in-process workers)
run: build
	./bin/api -dev

## demo: `make run` in the demo world: the embedded mail simulator (internal/mailsim) answers the
## verifier's DNS and SMTP, so the demo addresses it prints show every outcome without the internet
demo: build
	./bin/api -dev -demo

## test: every test, against the real Postgres (DATABASE_URL) and embedded NATS servers
test: tools
	PATH="$(TOOLS):$$PATH" go test $(GO_TEST_FLAGS) ./...

lint: $(TOOLS)/staticcheck
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	go vet ./...
	$(TOOLS)/staticcheck ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

## bench: every Go benchmark (results go to BENCHMARKS.md by hand, with the command)
bench:
	go test -run='^$$' -bench=. -benchmem ./...

migrate:
	go run ./cmd/api migrate

## data: regenerate the embedded data sets (disposable domains, role names, free providers, the
## mailcheck golden file) from the npm packages pinned in data/package-lock.json
data:
	npm ci --ignore-scripts --no-audit --no-fund --prefix data
	node data/export.js
	go run ./internal/verify/disposable/gen
	go run ./internal/verify/signals/gen
	node data/mailcheck-golden.js

tools: $(TOOLS)/.stripe-mock-$(STRIPE_MOCK_VERSION)

# The stamp names the version, so changing STRIPE_MOCK_VERSION reinstalls.
$(TOOLS)/.stripe-mock-$(STRIPE_MOCK_VERSION):
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) go install github.com/stripe/stripe-mock@$(STRIPE_MOCK_VERSION)
	@touch $@

$(TOOLS)/staticcheck:
	GOBIN=$(TOOLS) go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

clean:
	rm -rf bin .tools .data
