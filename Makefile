# The two commands a new user runs (see README.md):
#   make demo   start devcluster with example resources, until Ctrl-C
#   make test   install what is missing, then run every check and test
SHELL := /bin/bash
.DEFAULT_GOAL := help
NEXTEST_PROFILE ?= default
CARGO ?= cargo
# Tools scripts/ensure-deps.sh installs locally (helm).
export PATH := $(CURDIR)/.tools/bin:$(PATH)

.PHONY: help deps demo-deps test lint fmt build demo bench crds protobuf-table

help:
	@echo "make demo   - build and start devcluster with example resources (Ctrl-C stops it)"
	@echo "make test   - install missing tools, check formatting and lints, run every test"
	@echo "make bench  - run the benchmarks (results go to docs/benchmarks.md by hand)"

# Tools a fresh machine may lack. Idempotent: each is installed only when absent, and the script
# says what it installs before it does. `deps`: everything the tests run; `demo-deps`: only what
# the demo runs (no test-only tool, no apt-get unless PostgreSQL is missing).
deps:
	@scripts/ensure-deps.sh test

demo-deps:
	@scripts/ensure-deps.sh demo

build:
	$(CARGO) build --workspace --bins

fmt:
	$(CARGO) fmt --all

lint: deps
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test: deps lint
	$(CARGO) nextest run --workspace --profile $(NEXTEST_PROFILE)
	$(CARGO) test --workspace --doc

bench: deps
	$(CARGO) bench -p devcluster -p vesper-operator -p varroa-operator -p varroa-recorder

demo: demo-deps build
	@scripts/demo.sh

# Regenerate the checked-in CRDs from the Rust types (their drift tests fail until you do).
crds:
	UPDATE_CRDS=1 $(CARGO) test -p vesper-api --test crd checked_in
	UPDATE_CRDS=1 $(CARGO) test -p varroa-api --test crd checked_in

# Regenerate devcluster's protobuf table (crates/devcluster/src/protobuf/table.rs) from the crate
# versions its generator pins, fetched from crates.io (its drift test fails until you do).
protobuf-table:
	CARGO="$(CARGO)" crates/devcluster/tools/regen-protobuf-table.sh
