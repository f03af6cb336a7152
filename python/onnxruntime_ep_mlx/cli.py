"""``python -m onnxruntime_ep_mlx {info,run,explain,compile,generate}``: check, compare and explain the
MLX EP on a model, compile a model for it (EPContext nodes), or generate text with an LLM folder
through onnxruntime-genai.

Exit status: 0 fine; 1 the MLX session did not put MLXExecutionProvider first (ORT silently
falls back to CPU otherwise); 2 the library could not be loaded or registered, or the model
could not be run; 3 an output differs from the CPU EP's by more than --atol.
"""

from __future__ import annotations

import argparse
import gc
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import numpy as np
import onnx
import onnxruntime as ort

from .compare import compare_outputs
from .explain import explain_to, format_explanation, read_explain_records
from .feeds import make_feeds, parse_dims
from .library import library_path
from .profiling import by_provider, node_providers
from .registration import EP_NAME, register_execution_provider_library, version
from .sessions import OPTIMIZATION_LEVELS, cpu_session, median_run_ms, mlx_session, nodes_per_provider
from .tables import format_table, shorten

EXIT_NOT_MLX = 1
EXIT_SETUP = 2
EXIT_MISMATCH = 3

T = TypeVar("T")


class CommandError(Exception):
    """A failure the user can act on: printed without a traceback, with its exit status."""

    def __init__(self, message: str, status: int = EXIT_SETUP) -> None:
        super().__init__(message)
        self.status = status


def _register() -> None:
    try:
        register_execution_provider_library()
    except Exception as error:  # noqa: BLE001 - ORT raises plain RuntimeErrors/Fail for load errors
        raise CommandError(f"cannot register the MLX EP library: {error}") from error


def _or_fail(what: str, action: Callable[[], T]) -> T:
    """ORT's own message, without a Python traceback through our code."""
    try:
        return action()
    except Exception as error:  # noqa: BLE001 - ORT raises several unrelated exception types
        raise CommandError(f"cannot {what}: {error}") from error


def _parse_options(assignments: Sequence[str]) -> dict[str, str]:
    options = {}
    for assignment in assignments:
        key, separator, value = assignment.partition("=")
        if not separator or not key:
            raise CommandError(f"--ep-option expects KEY=VALUE, got {assignment!r}")
        options[key] = value
    return options


def _describe(node_arg: ort.NodeArg, fed: np.ndarray) -> str:
    """``x float[batch, 4096] = [8, 4096]``: declared type and shape, then what was fed."""
    dims = ", ".join("?" if d is None else str(d) for d in node_arg.shape)
    declared = f"{node_arg.name} {node_arg.type.removeprefix('tensor(').removesuffix(')')}[{dims}]"
    return f"{declared} = {list(fed.shape)}"


# ---------------------------------------------------------------------------------------- info


def _mlx_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("mlx")
    except metadata.PackageNotFoundError:
        return "not installed as a Python package (the library links the MLX it was built with)"


def cmd_info(args: argparse.Namespace) -> int:
    print(f"onnxruntime   {ort.__version__}")
    print(f"mlx           {_mlx_version()}")
    try:
        print(f"library       {library_path()}")
    except FileNotFoundError as error:
        raise CommandError(str(error)) from error
    try:
        register_execution_provider_library()
        status, source = 0, "reported by the EP factory"
    except Exception as error:  # noqa: BLE001
        print(f"registration  FAILED: {error}")
        status, source = EXIT_SETUP, "from Cargo.toml: the library did not register"
    print(f"version       {version()}  ({source})")
    print("EP devices")
    rows = [
        (device.ep_name, device.ep_vendor, device.device.type.name, device.device.vendor,
         ", ".join(f"{k}={v}" for k, v in sorted(device.ep_metadata.items())))
        for device in ort.get_ep_devices()
    ]
    print(format_table(["ep", "vendor", "device", "device vendor", "metadata"], rows))
    return status


# ----------------------------------------------------------------------------------------- run


def cmd_run(args: argparse.Namespace) -> int:
    model = onnx.load(str(args.model), load_external_data=False)
    ep_options = _parse_options(args.ep_option)
    if args.trace is not None:
        ep_options["trace"] = str(args.trace)
    try:
        dims = parse_dims(args.dim)
    except ValueError as error:
        raise CommandError(str(error)) from error
    _register()

    cpu = _or_fail("create the CPU session", lambda: cpu_session(args.model, args.optimization))
    feeds = make_feeds(cpu.get_inputs(), dims, args.seed, args.inputs)
    with tempfile.TemporaryDirectory(prefix="ort-mlx-profile-") as profile_dir:
        mlx = _or_fail(
            "create the MLX session",
            lambda: mlx_session(args.model, ep_options, args.optimization, Path(profile_dir) / "mlx"),
        )
        session_providers = mlx.get_providers()
        if not session_providers or session_providers[0] != EP_NAME:
            raise CommandError(
                f"the MLX session's providers are {session_providers}: {EP_NAME} is not first, so ORT would "
                "run everything on CPU. Is the library registered and does it report that EP name?",
                EXIT_NOT_MLX,
            )
        # The first run is eager and profiled (placement); the second traces and compiles the
        # subgraphs (ONNXRUNTIME_EP_MLX_COMPILE_AFTER=1); both are timed apart from warm runs.
        first_ms, mlx_outputs = _timed(lambda: _or_fail("run the MLX session", lambda: mlx.run(None, feeds)))
        placements = node_providers(mlx.end_profiling())
        compile_ms, _ = _timed(lambda: _or_fail("run the MLX session", lambda: mlx.run(None, feeds)))
    cpu_outputs = _or_fail("run the CPU session", lambda: cpu.run(None, feeds))

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), "?")
    print(f"model      {args.model}  ({len(model.graph.node)} nodes, opset {opset})")
    print(f"inputs     {'; '.join(_describe(node_arg, feeds[node_arg.name]) for node_arg in cpu.get_inputs())}")
    print(f"providers  {', '.join(session_providers)}")

    print("\nwhere nodes ran (ORT profile of one run; a fused MLX cluster is one kernel)")
    assigned = nodes_per_provider(mlx)
    rows = []
    for provider, kernels in by_provider(placements).items():
        graph_nodes = str(assigned.get(provider, "?"))
        names = [f"{k.node} ({k.op})" for k in kernels] if provider != EP_NAME else [k.node for k in kernels]
        rows.append((provider, f"{len(kernels)} kernel(s)", graph_nodes, shorten(names, 1000 if args.verbose else 4)))
    print(format_table(["provider", "kernels", "nodes assigned", "names"], rows))
    if EP_NAME not in {placement.provider for placement in placements}:
        print(f"  warning: no node ran on {EP_NAME}; `explain` tells why")

    options = ", ".join(f"{k}={v}" for k, v in ep_options.items() if k != "trace")
    print(f"\noutputs: max |MLX - CPU|{f' (EP options: {options})' if options else ''}")
    differences = compare_outputs([o.name for o in cpu.get_outputs()], cpu_outputs, mlx_outputs)
    print(format_table(
        ["output", "shape", "dtype", "max abs diff", "of max |CPU|", ""],
        [(d.name, list(d.shape), d.dtype, f"{d.max_abs_diff:.3g}", f"{d.relative:.2g}", d.note) for d in differences],
    ))

    cpu.run(None, feeds)  # the CPU session's own warm-up
    mlx_ms = median_run_ms(mlx, feeds, args.runs)
    cpu_ms = median_run_ms(cpu, feeds, args.runs)
    device = mlx_device()
    print(f"\nlatency on MLX's {device.upper()} backend: median of {args.runs} warm runs (after the first two)")
    print(format_table(["session", "ms"], [
        ("MLX first: first run (eager, profiled)", f"{first_ms:.3f}"),
        ("MLX first: second run (trace + compile)", f"{compile_ms:.3f}"),
        ("MLX first: warm", f"{mlx_ms:.3f}"),
        ("CPU only: warm", f"{cpu_ms:.3f}"),
    ]))
    print(speed_sentence(device, mlx_ms, cpu_ms))
    if args.trace is not None:
        del mlx  # the EP writes its trace when the session ends
        gc.collect()
        print(f"\ntrace of the MLX session: {args.trace} (open it in ui.perfetto.dev)")

    if args.atol is not None:
        failing = [d.name for d in differences if not d.max_abs_diff <= args.atol and not d.note.startswith("not a tensor")]
        if failing:
            print(f"\nFAIL: {', '.join(failing)} differ by more than --atol {args.atol}")
            return EXIT_MISMATCH
    return 0


def _timed(call):
    start = time.perf_counter()
    result = call()
    return (time.perf_counter() - start) * 1e3, result


def mlx_device() -> str:
    """The MLX device the EP runs on ("cpu" or "gpu"), as its EP device reports it."""
    for device in ort.get_ep_devices():
        if device.ep_name == EP_NAME:
            return device.ep_metadata.get("mlx_device", "unknown")
    return "unknown"


def speed_sentence(device: str, mlx_ms: float, cpu_ms: float) -> str:
    """One sentence a newcomer reads in one go: both times, and which way the ratio points."""
    times = f"MLX ({device}) took {mlx_ms:.3g} ms, ORT's CPU EP {cpu_ms:.3g} ms"
    if mlx_ms <= cpu_ms:
        return f"{times}: {cpu_ms / mlx_ms:.1f}x faster here."
    sentence = f"{times}: {mlx_ms / cpu_ms:.1f}x slower here"
    if device == "cpu":
        sentence += ("; on the CPU backend MLX is for development (Apple Silicon and NVIDIA GPUs are "
                     "where it is fast): see docs/PERFORMANCE.md for GPU figures")
    return sentence + "."


# ------------------------------------------------------------------------------------- explain


def cmd_explain(args: argparse.Namespace) -> int:
    model = onnx.load(str(args.model), load_external_data=False)
    ep_options = _parse_options(args.ep_option)
    with tempfile.TemporaryDirectory(prefix="ort-mlx-explain-") as directory:
        explain_file = Path(directory) / "explain.jsonl"
        # Set before the library is registered too, in case the EP reads it when it loads.
        with explain_to(explain_file):
            _register()
            try:
                mlx_session(args.model, ep_options, args.optimization)
            except Exception as error:  # noqa: BLE001 - the records written so far still explain
                print(f"note: session creation failed after partitioning: {error}", file=sys.stderr)
        records = read_explain_records(explain_file)
    if not records:
        raise CommandError(
            f"the EP wrote no explain records (it should append JSON lines to $ONNXRUNTIME_EP_MLX_EXPLAIN "
            f"during GetCapability); is {library_path()} a build that supports it?"
        )
    print(f"model  {args.model}  ({len(model.graph.node)} nodes)\n")
    print(format_explanation(records, [node.name for node in model.graph.node]))
    return 0


# --------------------------------------------------------------------------------------- compile


def cmd_compile(args: argparse.Namespace) -> int:
    from . import compiled

    _register()
    ep_options = _parse_options(args.ep_option)
    output = args.output or args.model.with_name(args.model.stem + "_mlx_ctx.onnx")
    _or_fail("compile the model", lambda: compiled.compile_model(
        args.model, output, ep_options, args.optimization, args.external_data))
    contexts = compiled.context_nodes(output)
    left = len(onnx.load(str(output), load_external_data=False).graph.node) - len(contexts)
    print(f"wrote {output}: {len(contexts)} EPContext node(s) of {EP_NAME}, {left} node(s) left to ORT")
    if args.repeats:
        # One session of each first: MLX's own start-up is not what a compiled model saves.
        for model in (args.model, output):
            _or_fail(f"create a session over {model}", lambda: mlx_session(model, ep_options, args.optimization))
        source_ms, compiled_ms = (
            compiled.session_creation_ms(model, ep_options, args.optimization, args.repeats)
            for model in (args.model, output)
        )
        print(f"session creation (median of {args.repeats}): {source_ms:.1f} ms from the source, "
              f"{compiled_ms:.1f} ms compiled ({source_ms / compiled_ms:.1f}x)")
    return 0


# -------------------------------------------------------------------------------------- generate


def cmd_generate(args: argparse.Namespace) -> int:
    from . import generation

    with tempfile.TemporaryDirectory(prefix="ort-mlx-generate-") as directory:
        explain_file = Path(directory) / "explain.jsonl"
        with explain_to(explain_file):
            model = _or_fail("load the model with onnxruntime-genai", lambda: generation.load_model(args.model_dir, not args.cpu))
        records = read_explain_records(explain_file) if explain_file.exists() else []
    tokenizer = generation.tokenizer(model)
    prompt = list(tokenizer.encode(args.prompt))
    stream = tokenizer.create_stream()
    print(args.prompt, end="", flush=True)
    result = _or_fail("generate", lambda: generation.generate(
        model, prompt, args.max_new_tokens, lambda token: print(stream.decode(token), end="", flush=True)))
    print("\n")
    where = "ORT's CPU EP only (--cpu)" if args.cpu else _placement(records)
    print(f"prompt {len(prompt)} tokens: prefill {result.prefill_ms:.1f} ms; {len(result.tokens)} new tokens, "
          f"decode {result.tokens_per_second:.1f} tokens/s")
    print(f"nodes: {where}")
    if args.tokens:
        print(f"tokens: {result.tokens}")
    return 0


def _placement(records) -> str:
    """Where the decoder's nodes went, from the EP's claim report (genai's ORT has no profile
    we can read here)."""
    claimed = sum(r.claimed for r in records)
    declined = [f"{r.qualified_op} ({r.reason})" for r in records if not r.claimed]
    summary = f"{claimed} of {len(records)} on {EP_NAME}"
    return summary + ("; on ORT's CPU EP: " + "; ".join(sorted(set(declined))) if declined else "")


# ---------------------------------------------------------------------------------------- main


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m onnxruntime_ep_mlx", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)

    info = commands.add_parser("info", help="library path, version, EP devices")
    info.set_defaults(handler=cmd_info)

    def session_arguments(command: argparse.ArgumentParser) -> None:
        command.add_argument("model", type=Path, help="ONNX model file")
        command.add_argument("--optimization", choices=list(OPTIMIZATION_LEVELS), default="all",
                             help="ORT graph optimisation level (default %(default)s)")
        command.add_argument("--ep-option", action="append", default=[], metavar="KEY=VALUE",
                             help="EP option (README: options), e.g. verbose=1; repeatable")

    run = commands.add_parser("run", help="run MLX-first and CPU-only sessions; compare outputs and latency")
    session_arguments(run)
    run.add_argument("--inputs", type=Path, help=".npz with arrays named after the model's inputs (others random)")
    run.add_argument("--runs", type=int, default=20, help="warm runs per session to time (default %(default)s)")
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default %(default)s)")
    run.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE",
                     help="value of a symbolic input dimension (default 1); repeatable")
    run.add_argument("--atol", type=float, help="exit 3 when an output differs by more than this")
    run.add_argument("-v", "--verbose", action="store_true", help="list every kernel, not a preview")
    run.add_argument("--trace", type=Path, metavar="FILE",
                     help="write a Chrome/Perfetto trace of the MLX session here (open in ui.perfetto.dev)")
    run.set_defaults(handler=cmd_run)

    explain = commands.add_parser("explain", help="per node: does the MLX EP claim it, and why not")
    session_arguments(explain)
    explain.set_defaults(handler=cmd_explain)

    compile_ = commands.add_parser("compile", help="write the model with the MLX partitions as EPContext nodes")
    session_arguments(compile_)
    compile_.add_argument("-o", "--output", type=Path, help="default: MODEL_mlx_ctx.onnx beside the model")
    compile_.add_argument("--external-data", type=Path, metavar="FILE",
                          help="write initializers of 1 KiB and more to this file (beside the output)")
    compile_.add_argument("--repeats", type=int, default=5,
                          help="time this many session creations of each model (0: none; default %(default)s)")
    compile_.set_defaults(handler=cmd_compile)

    generate = commands.add_parser("generate", help="greedy generation through onnxruntime-genai, MLX EP first")
    generate.add_argument("model_dir", type=Path, help="folder with genai_config.json (e.g. from scripts/make_decoder.py)")
    generate.add_argument("--prompt", required=True, help="text to continue")
    generate.add_argument("--max-new-tokens", type=int, default=32, help="default %(default)s")
    generate.add_argument("--cpu", action="store_true", help="ORT's CPU EP only, for comparison")
    generate.add_argument("--tokens", action="store_true", help="also print the new token ids")
    generate.set_defaults(handler=cmd_generate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "runs", 1) < 1:
        print("error: --runs must be at least 1", file=sys.stderr)
        return EXIT_SETUP
    try:
        return args.handler(args)
    except CommandError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.status
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_SETUP
