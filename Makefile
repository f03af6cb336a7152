# The two commands a new user runs: `make demo` and `make test`. Everything else they call.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON := .venv/bin/python
CARGO_FLAGS := --locked --release
LIBRARY := $(abspath target/release/libonnxruntime_mlx_ep.$(if $(filter Darwin,$(shell uname -s)),dylib,so))
export ORT_MLX_EP_LIBRARY := $(LIBRARY)

.PHONY: setup build lint test test-rust test-python demo bench-matmul docs clean

## Install the pinned toolchain pieces (idempotent): .venv, ORT headers, mlx-c sources, apt deps.
setup:
	@bash scripts/setup.sh

## Build the plugin library (target/release/libonnxruntime_mlx_ep.so).
build: setup
	cargo build $(CARGO_FLAGS) -p onnxruntime-ep-mlx

## Formatting and clippy, warnings as errors.
lint: setup
	cargo fmt --all --check
	cargo clippy $(CARGO_FLAGS) --all-targets -- -D warnings

test-rust: setup
	cargo test $(CARGO_FLAGS) --workspace

test-python: build
	$(PYTHON) -m pytest -q tests

## Everything CI runs.
test: lint test-rust test-python

## Build, then show MLX running through our library next to ORT's CPU EP.
demo: build
	$(PYTHON) scripts/bench_matmul.py

## f32 matmul 256x768x3072: MLX through our library vs ORT's CPU EP.
bench-matmul: build
	$(PYTHON) scripts/bench_matmul.py

clean:
	cargo clean

## Regenerate docs/COVERAGE.md (and its insta snapshot) from the op table.
docs: setup
	cargo run $(CARGO_FLAGS) -q -p op-specs --bin gen-coverage
	INSTA_UPDATE=always cargo test $(CARGO_FLAGS) -q -p op-specs --test coverage_doc
