# The two commands a new user runs: `make demo` and `make test`. Everything else they call.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON := .venv/bin/python
CARGO_FLAGS := --locked --release
LIBRARY := $(abspath target/release/libonnxruntime_mlx_ep.$(if $(filter Darwin,$(shell uname -s)),dylib,so))
export ORT_MLX_EP_LIBRARY := $(LIBRARY)
# Prints each phase's wall time ("[time] build: 312.4 s"), so a CI log shows where time goes.
TIMED = bash scripts/timed.sh

.PHONY: setup build lint test test-rust test-python demo demo-model bench bench-ep bench-overhead bench-matmul bench-quantized bench-attention bench-paged bench-first-run bench-llm profile-decode bench-compiled real-models leaks stress fuzz docs conformance conformance-update clean

## Install the pinned toolchain pieces (idempotent): .venv, ORT headers, mlx-c sources, apt deps.
setup:
	@$(TIMED) setup bash scripts/setup.sh

## Build the plugin library (target/release/libonnxruntime_mlx_ep.so).
build: setup
	$(TIMED) build cargo build $(CARGO_FLAGS) -p onnxruntime-ep-mlx

## Formatting, clippy and the API docs' links, warnings as errors.
lint: setup
	cargo fmt --all --check
	$(TIMED) clippy cargo clippy $(CARGO_FLAGS) --all-targets -- -D warnings
	$(TIMED) rustdoc env RUSTDOCFLAGS="-D warnings" cargo doc $(CARGO_FLAGS) --workspace --no-deps

# CUDA's NVRTC in .venv (x86-64 Linux, scripts/setup.sh): the kernels' tests compile every CUDA
# source they emulate with it. Expanded when the recipe runs, after setup.
TEST_NVRTC = $(firstword $(wildcard $(CURDIR)/.venv/lib/python3*/site-packages/nvidia/cu13/lib/libnvrtc.so.13))

test-rust: setup
	@[ -n "$(TEST_NVRTC)" ] || [ "$$(uname -sm)" != "Linux x86_64" ] || { echo "no NVRTC in .venv: run make setup"; exit 1; }
	$(TIMED) rust-tests env ONNXRUNTIME_EP_MLX_TEST_NVRTC=$(TEST_NVRTC) cargo test $(CARGO_FLAGS) --workspace

test-python: build
	$(TIMED) pytest $(PYTHON) -m pytest -q --durations=15 tests

## Everything CI runs.
test: lint test-rust test-python

## Build, then run the bundled model through the EP: what ran where, the difference from
## ORT's CPU EP, and the speed of each.
demo: build demo-model
	PYTHONPATH=python $(PYTHON) -m onnxruntime_ep_mlx explain models/demo.onnx
	PYTHONPATH=python $(PYTHON) -m onnxruntime_ep_mlx run models/demo.onnx --dim batch=64

demo-model: setup
	$(PYTHON) scripts/make_demo_model.py

## Whole models (MLP, transformer encoder layers): ORT CPU EP, MLX EP eager and compiled, and
## the same computation written directly in MLX. Add a model with ARGS="--model path.onnx".
bench: build
	$(PYTHON) scripts/bench_models.py $(ARGS)

## Real public models from PyPI packages (tests/models/sources.py): claim rate, max |MLX - CPU|,
## median latency MLX EP vs ORT's CPU EP.
real-models: build
	$(PYTHON) scripts/real_models.py $(ARGS)

## The EP vs ORT's CPU EP on a 1-node graph and a 50-op elementwise chain (1M elements).
bench-ep: build
	$(PYTHON) scripts/bench_ep.py

## Where a small model's run goes beyond direct MLX's (meant for the GPU): the EP bound and
## unbound, ORT's CPU EP, direct MLX with and without one more primitive. ARGS="--model mlp".
bench-overhead: build
	$(PYTHON) scripts/bench_overhead.py $(ARGS)

## 10,000 seeded edge-case models (tests/fuzz) through the EP vs ORT's CPU EP, a worker per core;
## every problem case with its repro command. More: ARGS="--cases 50000 --seed 2 --json fuzz.json".
fuzz: build
	$(TIMED) fuzz $(PYTHON) -m tests.fuzz run --cases 10000 --seed 1 --workers $(shell getconf _NPROCESSORS_ONLN) $(ARGS)

## Threads for SECONDS (default 300): own sessions per thread at changing shapes, plus threads
## misusing a session another thread owns; no crash, no wrong answer.
stress: build
	$(PYTHON) tests/stress/threads.py $(or $(SECONDS),300) 8 2

## No definite leak through our library under valgrind, RSS flat over 500 session cycles.
leaks: build
	$(PYTHON) -m pytest -q -s tests/stress

## fp16 attention (GroupQueryAttention prefill 4x2048 / decode over 4k, Attention-23): MLX EP vs
## ORT's CPU EP vs direct mlx.core. ARGS="--quick" for small shapes.
bench-attention: build
	$(PYTHON) scripts/bench_attention.py $(ARGS)

## PagedAttention fp16 decode (batch 8 over 4k-token paged caches) and chunked prefill (2 x 512
## new tokens after 512 cached): the EP's paged kernels vs its composed path (gather + attention)
## vs direct mlx.core, ms and MLX peak memory, checked against numpy. ARGS="--quick": small shapes.
bench-paged: build
	$(PYTHON) scripts/bench_paged.py --case decode $(ARGS)
	$(PYTHON) scripts/bench_paged.py --case prefill $(ARGS)

## What a new process pays before a model runs warm (session, first run, compiled second run),
## with MLX's kernel caches empty and then as the first process left them. ARGS="--large" (GPU).
bench-first-run: build
	$(PYTHON) scripts/first_run.py $(ARGS)

## A ~1B int4 Llama-shaped decoder (scripts/make_decoder.py): prefill and decode through ORT
## sessions (MLX EP vs CPU EP) vs the same decoder in mlx.core, and genai's loop. ARGS="--quick".
bench-llm: build
	$(PYTHON) scripts/bench_llm.py $(ARGS)

## Where a decode step's time goes: the int4 decoder's steps through the EP (or --mode direct),
## ms a step and the EP's summary; --ncu: kernels a step under Nsight Compute (MLX's CUDA backend).
## ARGS="--layers 16 --ncu", or "--small" on the CPU backend.
profile-decode: build
	$(PYTHON) scripts/profile_decode.py $(ARGS)

## Session creation (and first run) from each real model's source vs from it compiled for the
## EP (EPContext nodes), plus an int4 decoder; outputs checked equal. ARGS="--repeats 5".
bench-compiled: build
	$(PYTHON) scripts/bench_compiled.py $(ARGS)

## f32 matmul 256x768x3072: MLX through our library vs ORT's CPU EP.
bench-matmul: build
	$(PYTHON) scripts/bench_matmul.py

## MatMulNBits int4 (block 32/128, accuracy_level 4/0, fp16/fp32) at 1x4096x4096 and 512x4096x4096:
## MLX EP vs direct mlx.core.quantized_matmul vs ORT's CPU EP; GB/s, max diff vs float64, memory.
## ARGS="--small" for a quick run, "--json out.json" for the figures.
bench-quantized: build
	$(PYTHON) scripts/bench_quantized.py $(ARGS)

clean:
	cargo clean

## ONNX's backend node tests through the EP, compared with tests/conformance/manifest.tsv.
conformance: build
	$(PYTHON) tests/conformance/run.py

## Rewrite the conformance manifest and docs/CONFORMANCE.md from a fresh run.
conformance-update: build
	$(PYTHON) tests/conformance/run.py --update

## Regenerate docs/COVERAGE.md from the op table (op-specs' coverage_doc test checks it).
docs: setup
	cargo run $(CARGO_FLAGS) -q -p op-specs --bin gen-coverage
