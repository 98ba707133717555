# strata — see README.md.
#
#   make demo     build and run the main job end to end on a generated project
#   make test     unit tests, brief fuzzing, integration tests as root and as an
#                 unprivileged user (the rootless path is the main path)
#   make bench    benchmarks against the peers, side by side (see docs/bench.md)
#   make bench-push  only its push/pull rows (BENCH_ONLY=push make bench)
#   make fuzz     longer fuzzing of every decoder
#   make crash    500 SIGKILLs at random instants, fsck after each
#   make cover    coverage per package: unit tests + both integration passes, merged
#   make lint     gofmt, go vet, staticcheck, the package graph (golangci-lint's
#                 depguard, .golangci.yml; scripts/depgraph.sh for what it links)
#   make deps     install what a fresh Debian machine lacks (as root), or print how
#   make man      bin/man/man1/strata.1, from the command tree

SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
# The shared corpus (a git repo + a real node_modules, ~510 MB) is cached
# outside the repository, where an unprivileged test user can read it.
STRATA_CACHE ?= /var/tmp/strata-cache
STRATA_CORPUS ?= $(STRATA_CACHE)/corpus
STRATA_IMAGES ?= $(STRATA_CACHE)/images
# ../shared/corpus is the shared original; integration/corpus is a copy for
# clones that do not sit beside it.
CORPUS_BUILD ?= $(firstword $(wildcard $(CURDIR)/../shared/corpus/build.sh) $(CURDIR)/integration/corpus/build.sh)
# The unprivileged user for the rootless pass when make test runs as root.
STRATA_TEST_USER ?= $(shell id -u strata-test >/dev/null 2>&1 && echo strata-test || echo nobody)
# golangci-lint, pinned: installed once by `make lint` (with the go tool
# alone) into the cache, outside the repository.
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT_DIR ?= $(STRATA_CACHE)/bin/golangci-lint-$(GOLANGCI_LINT_VERSION)
GOLANGCI_LINT := $(GOLANGCI_LINT_DIR)/golangci-lint
FUZZTIME ?= 3s
LONGFUZZTIME ?= 2m
# urfave_cli_no_docs drops the man-page generator (and its markdown parser's
# package init, ~0.5 ms of every strata call).
BUILD_TAGS := urfave_cli_no_docs
GOFLAGS_BUILD := -trimpath -tags $(BUILD_TAGS)
# On linux/amd64 the front's ELF entry is cmd/strata/entry_linux_amd64.s:
# it hands every command line the front cannot serve to strata-core
# before the Go runtime starts (docs/hotpath.md, "Part 4"). Elsewhere the
# Go front decides alone, as a `go install` build does.
FRONT_ENTRY := $(if $(filter linux/amd64,$(shell $(GO) env GOOS)/$(shell $(GO) env GOARCH)),-E main.entry)
# `strata version` reports the commit it was built from.
STRATA_COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null)

export STRATA_CORPUS STRATA_CACHE STRATA_IMAGES

.PHONY: all build test unit fuzz-short fuzz integration integration-root integration-user python-test mcp-inspector \
        bench bench-push demo deps lint corpus images clean crash powerloss cover man

all: build

# Every binary is built without cgo (static, no libseccomp at run time):
# the seccomp programs are compiled once by libseccomp at `go generate`
# time and embedded (seccomp/programs_gen.go, docs/sandbox.md).
build:
	@mkdir -p $(BIN)
	# The front without DWARF (-w; symbols and tracebacks stay): 3.7 MB
	# instead of 5.2 (docs/hotpath.md).
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -ldflags "-w $(FRONT_ENTRY)" -o $(BIN)/strata ./cmd/strata
	# strata-core without go-git and go-containerregistry (strata_lean): it
	# hands import --git/--image, export-git, push and pull to strata-full,
	# the same CLI with them (docs/hotpath.md).
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -tags $(BUILD_TAGS),strata_lean -ldflags "-X github.com/stratafs/strata.commit=$(STRATA_COMMIT)" -o $(BIN)/strata-core ./cmd/strata-core
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -ldflags "-X github.com/stratafs/strata.commit=$(STRATA_COMMIT)" -o $(BIN)/strata-full ./cmd/strata-core
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $(BIN)/strata-init ./cmd/strata-init
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -ldflags "-X github.com/stratafs/strata.commit=$(STRATA_COMMIT)" -o $(BIN)/strata-mcp ./cmd/strata-mcp

deps:
	@bash scripts/deps.sh

# The corpus comes before every test that reads it (unit tests of snapshot
# and worktree import it too): on a fresh machine it is built first.
test: build corpus unit fuzz-short integration python-test

unit: corpus images
	$(GO) vet ./...
	$(GO) test -count=1 ./...

# Every Fuzz target, briefly. `make fuzz` runs them longer.
fuzz-short:
	@FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh

fuzz:
	@FUZZTIME=$(LONGFUZZTIME) bash scripts/fuzz.sh

corpus:
	@if [ ! -d "$(STRATA_CORPUS)/node_modules" ]; then \
	  echo "building the shared corpus into $(STRATA_CORPUS) (1-3 minutes, once)"; \
	  mkdir -p "$(dir $(STRATA_CORPUS))"; rm -rf "$(STRATA_CORPUS).tmp"; \
	  bash "$(CORPUS_BUILD)" "$(STRATA_CORPUS).tmp" >/dev/null && mv "$(STRATA_CORPUS).tmp" "$(STRATA_CORPUS)"; \
	  chmod -R a+rX "$(STRATA_CACHE)"; \
	fi

# The container images the image tests import (scripts/images.sh: a
# Debian minbase root by mmdebstrap, layered by scripts/mkimages), cached
# in $(STRATA_CACHE)/images keyed by the scripts' hash; built as root.
images:
	@STRATA_CACHE=$(STRATA_CACHE) bash scripts/images.sh

# The integration tests run against the real kernel twice: as root, and as
# an unprivileged user (STRATA_TEST_USER when make runs as root; yourself
# otherwise, in which case the root pass is skipped with a notice).
integration: build corpus images mcp-inspector
	@STRATA_TEST_USER=$(STRATA_TEST_USER) bash scripts/integration.sh

# The MCP Inspector (npm), the third-party MCP client of TestMCPInspector,
# cached under $(STRATA_CACHE) like the corpus.
mcp-inspector:
	@STRATA_CACHE=$(STRATA_CACHE) bash scripts/mcp-inspector.sh

# The Python SDK's pytest suite against the real binary, rootless (as
# STRATA_TEST_USER when make runs as root).
python-test: build
	@STRATA_TEST_USER=$(STRATA_TEST_USER) bash scripts/pytest.sh

# The crash harness at length: 500 SIGKILLs at random instants during
# import, commit, promote and gc (and import --image, up to 50 kills), with fsck and acknowledged-commit checks
# after each (make test runs 40).
crash: build
	@STRATA_CRASH_KILLS=$${STRATA_CRASH_KILLS:-500} IT_ARGS="-test.run ^(TestCrash|TestImageCrash)$$ -test.v" IT_TIMEOUT=60m \
	  STRATA_TEST_USER=$(STRATA_TEST_USER) bash scripts/integration.sh

# The power-loss harness at length: 320 crash points (the Nth filesystem
# operation) during import, commit, promote, branch and gc with the store on
# lazyfs, a FUSE filesystem that drops what was not fsynced; fsck and the
# acknowledged commits checked after each remount (make test runs 40). Root
# pass only: /dev/fuse is root's.
powerloss: build
	@STRATA_POWERLOSS_TRIALS=$${STRATA_POWERLOSS_TRIALS:-320} IT_ARGS="-test.run ^TestPowerLoss$$ -test.v" IT_TIMEOUT=60m \
	  STRATA_TEST_USER=$(STRATA_TEST_USER) bash scripts/integration.sh

# Coverage of every package from the unit tests and both integration passes
# (instrumented binaries, go build -cover), merged into one table.
cover: build corpus
	@STRATA_TEST_USER=$(STRATA_TEST_USER) bash scripts/cover.sh

bench: build corpus
	@bash scripts/bench.sh

# The push/pull rows alone (the bench's push scenario).
bench-push: build corpus
	@BENCH_ONLY=push bash scripts/bench.sh

demo: build
	@bash scripts/demo.sh

# The package graph of DESIGN.md: depguard's rules (.golangci.yml, each
# with its reason) for what each package imports; scripts/depgraph.sh for
# what the hot path links, transitively, which depguard cannot see.
lint: $(GOLANGCI_LINT)
	@test -z "$$(gofmt -l . | tee /dev/stderr)" || { echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...
	@if command -v staticcheck >/dev/null; then staticcheck ./...; else echo "staticcheck not installed: go install honnef.co/go/tools/cmd/staticcheck@latest"; fi
	$(GOLANGCI_LINT) run ./...
	@bash scripts/depgraph.sh

$(GOLANGCI_LINT):
	@mkdir -p $(GOLANGCI_LINT_DIR)
	GOBIN=$(GOLANGCI_LINT_DIR) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

clean:
	rm -rf $(BIN)

# strata(1), generated from the command tree by a build that carries
# urfave/cli's docs support (the installed binary does not: see GOFLAGS_BUILD).
man:
	@mkdir -p $(BIN)/man/man1
	$(GO) run -trimpath ./cmd/strata-core __man > $(BIN)/man/man1/strata.1
	@echo "man -l $(BIN)/man/man1/strata.1"
