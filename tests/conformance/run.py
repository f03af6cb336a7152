"""ONNX's own backend tests through ONNX Runtime with MLXExecutionProvider first, case by case.

    .venv/bin/python tests/conformance/run.py            # run, print totals and what changed
    .venv/bin/python tests/conformance/run.py --update   # ... and rewrite the manifest + docs/CONFORMANCE.md
    .venv/bin/python tests/conformance/run.py -k test_relu -v   # a few cases, one line each

Every case of ``onnx.backend.test.loader.load_model_tests(kind="node")`` (built in memory by
onnx), plus the on-disk ``simple``, ``pytorch-converted`` and ``pytorch-operator`` models, runs
twice: on ORT's CPU EP alone, then with the MLX EP first. Each ends in one class:

- ``mlx``: passed, every kernel ORT ran was on MLX;
- ``partial``: passed, some kernels on MLX, some on ORT's CPU EP;
- ``cpu``: passed, nothing on MLX;
- ``fail``: with the MLX EP first, an error or an answer outside the case's rtol/atol, while
  ORT's CPU EP alone passes (or MLX changed ORT's answer);
- ``unsupported-by-ort``: ORT's CPU EP alone cannot load or run it, or gets it wrong itself;
- ``unfeedable``: an input or output ORT's Python binding cannot hold.

Where nodes ran comes from ORT's profile of the run (kernels per provider); the EP's claim report
(``ONNXRUNTIME_EP_MLX_EXPLAIN``) gives the reason for every declined node. Cases run in worker processes (``--jobs``, default 2); a
case that kills its worker is recorded as ``fail`` and the worker restarts after it.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import selectors
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MANIFEST = HERE / "manifest.tsv"
DOC = REPO / "docs" / "CONFORMANCE.md"
REGENERATE = ".venv/bin/python tests/conformance/run.py --update"

if str(REPO / "python") not in sys.path:
    sys.path.insert(0, str(REPO / "python"))

CLASSES = ("mlx", "partial", "cpu", "fail", "unsupported-by-ort", "unfeedable")
# Higher is better; the two "cannot run it at all" classes are outside the order.
RANK = {"fail": 0, "cpu": 1, "partial": 2, "mlx": 3}
KINDS = ("node", "simple", "pytorch-converted", "pytorch-operator")
# Cases whose outcome depends on the host rather than on ORT or the EP: recorded, not run.
NOT_RUN = {
    "StringNormalizer": "not run: ORT's StringNormalizer needs the host's en_US.UTF-8 locale, so the outcome depends on the machine",
}
# Why a case whose nodes never reached the EP ran without it.
FOLDED_BY_ORT = "ORT's optimizer folded every node into constants before partitioning: no node reached any EP"

# Cases held to a wider rtol than their own, each for a reason shown in docs/CONFORMANCE.md and
# checked by tests/conformance/test_precision.py. Only where the MLX EP's answer is provably no
# worse than the stored expected output (which numpy computed at float16 precision).
WIDENED_RTOL = {
    "test_attention_4d_causal_fp16_expanded": (
        2e-3,
        "two float16 steps: the expected output comes from numpy's float16 MatMul, which rounds as it "
        "accumulates; MLX accumulates in float32 and lands closer to the float64 value of the same "
        "graph (max error 3.96e-4 against the reference's 4.91e-4)",
    ),
}
CASE_TIMEOUT_S = float(os.environ.get("MLX_CONFORMANCE_CASE_TIMEOUT_S", "120"))  # per case; twice that to build the cases
REASON_CHARS = 400


@dataclass
class Result:
    case: str  # node cases by name, the others as "<kind>/<name>"
    op: str  # the op under test ("Softmax", "Softmax (expanded)", "pytorch-converted model")
    cls: str
    reason: str = ""  # one line: why unsupported/unfeedable/fail
    mlx_nodes: int = 0  # nodes the EP claimed (its explain records)
    cpu_nodes: int = 0  # nodes the EP declined
    mlx_kernels: int = 0  # kernels ORT's profiler saw run on MLX (fused subgraphs)
    cpu_kernels: int = 0  # ... and on ORT's CPU EP
    declines: dict[str, list[str]] = field(default_factory=dict)  # reason -> ops declined for it
    dtypes: list[str] = field(default_factory=list)  # input dtypes, for the fail list
    seconds: float = 0.0


def one_line(text, limit: int | None = None) -> str:
    """``text`` on one line, ORT's error decoration (code prefix, source path, C++ signature)
    dropped, at most ``limit`` (default REASON_CHARS) characters."""
    limit = limit or REASON_CHARS
    text = re.sub(r"\[ONNXRuntimeError\] : \d+ : (\w+) : ", r"\1: ", str(text))
    text = re.sub(r"/\S+?\.(?:cc|cpp|h|hpp):\d+ (?:[\w:~<>]+\([^()]*\)(?: const)? )?", "", text)
    text = re.sub(r"(?:virtual )?(?:[\w:]+ )?onnxruntime::[\w:~<>]+\([^()]*\)(?: const)? ", "", text)
    # ORT's model checker repeats the node's whole signature before the error itself.
    text = re.sub(r'In Node, \("([^"]*)", (\w+), "([^"]*)", -?\d+\) : \(.*?\) -> \(.*?\) , Error ', r'In node "\1" (\2): ', text)
    text = re.sub(r"(MLXExecutionProvider_)\d{6,}(_)", r"\1<hash>\2", text)  # ORT's graph hash in fused names
    # The EP's run-time errors: drop the fused node's names, MLX's source location, the advice.
    text = re.sub(r"Non-zero status code returned while running MLXExecutionProvider_\S+ node\. Name:'[^']*' Status Message: (MLXExecutionProvider: )?(MLXExecutionProvider_\S+: )?", "", text)
    text = re.sub(r" at /\S+:\d+\.?", "", text)
    text = re.sub(r"\s*Set ONNXRUNTIME_EP_MLX_DISABLE=1 .*?report the model\.?", "", text)
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


# ----------------------------------------------------------------------------------------------
# Worker side: build the cases, run them, print one JSON line per case.


def _case_key(case) -> str:
    return case.name if case.kind == "node" else f"{case.kind}/{case.name}"


def _qualified(node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"


def load_cases(kinds):
    """The backend test cases of ``kinds``, each with ``model`` and ``data_sets`` filled in."""
    import warnings

    import onnx
    from onnx.backend.test import loader

    cases = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference implementations overflow on purpose
        for kind in kinds:
            if kind == "node":
                cases += loader.load_model_tests(kind="node")
                continue
            for case in sorted(loader.load_model_tests(kind=kind), key=lambda c: c.name):
                if case.model_dir is None:  # downloadable models: not here
                    continue
                model = onnx.load(os.path.join(case.model_dir, "model.onnx"))
                data_sets = []
                for data_dir in sorted(Path(case.model_dir).glob("test_data_set_*")):
                    ins = [_load_pb(data_dir / f"input_{i}.pb", model.graph.input[i].type) for i in range(len(list(data_dir.glob("input_*.pb"))))]
                    outs = [_load_pb(data_dir / f"output_{i}.pb", model.graph.output[i].type) for i in range(len(list(data_dir.glob("output_*.pb"))))]
                    data_sets.append((ins, outs))
                case.model, case.data_sets = model, data_sets
                cases.append(case)
    return cases


def _load_pb(path: Path, type_proto):
    import onnx
    from onnx import numpy_helper

    data = path.read_bytes()
    which = type_proto.WhichOneof("value")
    if which == "sequence_type":
        proto = onnx.SequenceProto()
        proto.ParseFromString(data)
        return numpy_helper.to_list(proto)
    if which == "optional_type":
        proto = onnx.OptionalProto()
        proto.ParseFromString(data)
        return numpy_helper.to_optional(proto)
    proto = onnx.TensorProto()
    proto.ParseFromString(data)
    return numpy_helper.to_array(proto)


def _op_under_test(case, single_node_ops: dict[str, str]) -> str:
    nodes = case.model.graph.node
    if case.kind != "node":
        return f"{case.kind} model"
    if "_expanded" in case.name:
        base = case.name.split("_expanded")[0]
        return f"{single_node_ops.get(base, base)} (expanded)"
    if len(nodes) == 1:
        return _qualified(nodes[0])
    return "+".join(sorted({_qualified(n) for n in nodes}))


def _name_nodes(graph, prefix: str = "n") -> None:
    """Give every node a unique name, subgraphs' too (most test nodes have none), so that the EP's
    claim records and error messages say which node they mean."""
    for index, node in enumerate(graph.node):
        node.name = f"{prefix}{index}_{node.op_type}"
        for attribute in node.attribute:
            if attribute.g.node:
                _name_nodes(attribute.g, f"{node.name}/{attribute.name}/")
            for sub_index, subgraph in enumerate(attribute.graphs):
                _name_nodes(subgraph, f"{node.name}/{attribute.name}{sub_index}/")


# ONNX element types numpy has no dtype for: fed and read back as raw bytes through OrtValues.
_RAW_TYPES = {16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26}  # bf16, float8s, (u)int4, float4, e8m0, (u)int2
_NATIVE_KINDS = "biufcOUS?"


class Unfeedable(Exception):
    pass


def _is_native(array) -> bool:
    import numpy as np

    return isinstance(array, np.ndarray) and array.dtype.kind in _NATIVE_KINDS and array.dtype.type.__module__ == "numpy"


def _normalize(value):
    """Data-set entries as numpy values: TensorProto → array, numpy scalar → 0-d array."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value


def _dtype_name(value) -> str:
    if isinstance(value, list):
        return "seq(" + ",".join(sorted({_dtype_name(v) for v in value})) + ")"
    if value is None:
        return "none"
    return value.dtype.name if hasattr(value, "dtype") else type(value).__name__


class Runner:
    """Runs cases in this process."""

    def __init__(self, explain_path: Path):
        import onnxruntime as ort

        import onnxruntime_ep_mlx as mlx_ep

        self.ort = ort
        self.mlx_ep = mlx_ep
        mlx_ep.register_execution_provider_library()
        self.explain_path = explain_path
        self.stderr_path = explain_path.with_name("stderr.txt")
        C = ort.capi._pybind_state
        self.C = C
        self.device = C.OrtDevice(C.OrtDevice.cpu(), C.OrtDevice.default_memory(), 0)

    def options(self, profile: bool = False):
        so = self.ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        if profile:
            so.enable_profiling = True
            so.profile_file_prefix = str(self.explain_path.with_name("profile"))
        return so

    # -- feeding ---------------------------------------------------------------------------
    def _raw_ortvalue(self, array, elem_type: int):
        from onnx import numpy_helper

        proto = numpy_helper.from_array(array)
        if proto.data_type != elem_type:
            raise Unfeedable(f"input of {array.dtype} for an ONNX type {elem_type} tensor")
        try:
            value = self.C.OrtValue.ortvalue_from_shape_and_onnx_type(list(array.shape), elem_type, self.device)
        except Exception as error:  # noqa: BLE001
            raise Unfeedable(f"ORT's Python binding cannot make a {array.dtype} tensor: {one_line(error, 120)}") from error
        raw = proto.raw_data
        if len(raw) != value.tensor_size_in_bytes():
            raise Unfeedable(f"{array.dtype}: {len(raw)} bytes for a {value.tensor_size_in_bytes()}-byte tensor")
        if raw:
            ctypes.memmove(value.data_ptr(), raw, len(raw))
        return value

    def _read_raw(self, value):
        import onnx
        from onnx import numpy_helper

        if not value.is_tensor():
            raise Unfeedable("a non-tensor output of a raw-typed graph, which the binding cannot read back")
        type_name = value.data_type()  # "tensor(bfloat16)"
        if type_name not in _ONNX_TYPE_BY_ORT_NAME:
            return value.numpy()
        # numpy() refuses bf16 and hands float8 back as uint8: read the bytes instead.
        proto = onnx.TensorProto()
        proto.data_type = _ONNX_TYPE_BY_ORT_NAME[type_name]
        proto.dims.extend(value.shape())
        size = value.tensor_size_in_bytes()
        proto.raw_data = bytes((ctypes.c_uint8 * size).from_address(value.data_ptr())) if size else b""
        return numpy_helper.to_array(proto)

    def feeds(self, model, inputs):
        """(feeds, raw): raw feeds are OrtValues for run_with_ort_values."""
        graph_inputs = [i for i in model.graph.input]
        if len(inputs) > len(graph_inputs):
            raise Unfeedable(f"{len(inputs)} inputs for {len(graph_inputs)} graph inputs")
        raw_outputs = any(o.type.tensor_type.elem_type in _RAW_TYPES for o in model.graph.output if o.type.HasField("tensor_type"))
        values = {graph_inputs[i].name: value for i, value in enumerate(inputs)}
        raw = raw_outputs or any(not _is_native(v) for v in values.values() if v is not None and not isinstance(v, list))
        for name, value in values.items():
            if value is None:
                raise Unfeedable(f"input {name!r} is an absent optional, which the binding cannot feed")
            if isinstance(value, list) and raw:
                raise Unfeedable(f"input {name!r} is a sequence in a graph with bf16/float8/int4-class tensors")
        if not raw:
            return values, False
        fed = {}
        for graph_input in graph_inputs[: len(inputs)]:
            value = values[graph_input.name]
            elem_type = graph_input.type.tensor_type.elem_type
            if _is_native(value) and elem_type not in _RAW_TYPES:
                fed[graph_input.name] = self.ort.OrtValue.ortvalue_from_numpy(value)._ortvalue
            else:
                fed[graph_input.name] = self._raw_ortvalue(value, elem_type)
        return fed, True

    def session(self, model_bytes, providers, profile: bool = False):
        session = self.ort.InferenceSession(model_bytes, self.options(profile), providers=providers, enable_fallback=0)
        if providers[0] != "CPUExecutionProvider" and session.get_providers()[0] != providers[0]:
            raise SystemExit(f"ORT did not attach {providers[0]} (got {session.get_providers()}): is the library built?")
        return session

    def run(self, session, feeds, raw: bool):
        if not raw:
            return session.run(None, feeds)
        names = [o.name for o in session.get_outputs()]
        values = session._sess.run_with_ort_values(feeds, names, self.C.RunOptions())
        return [self._read_raw(values[i]) for i in range(len(names))]

    # -- one case --------------------------------------------------------------------------
    def case(self, case, op: str) -> Result:
        from onnxruntime_ep_mlx.explain import read_explain_records
        from onnxruntime_ep_mlx.profiling import node_providers

        start = time.perf_counter()
        result = Result(case=_case_key(case), op=op, cls="fail")
        model = case.model
        host_dependent = [NOT_RUN[n.op_type] for n in model.graph.node if n.op_type in NOT_RUN]
        if host_dependent:
            result.cls, result.reason = "unsupported-by-ort", host_dependent[0]
            return result
        _name_nodes(model.graph)
        model_bytes = model.SerializeToString()
        data_sets = [([_normalize(v) for v in ins], [_normalize(v) for v in outs]) for ins, outs in case.data_sets]
        result.dtypes = sorted({_dtype_name(v) for ins, _ in data_sets for v in ins})
        mlx_rtol = max(case.rtol, WIDENED_RTOL.get(result.case, (case.rtol, ""))[0])

        def finish(cls, reason=""):
            result.cls, result.reason = cls, one_line(reason)
            result.seconds = time.perf_counter() - start
            return result

        # 1. ORT's CPU EP alone.
        cpu_error = cpu_mismatch = None
        cpu_outputs = []
        try:
            session = self.session(model_bytes, ["CPUExecutionProvider"])
            for inputs, expected in data_sets:
                feeds, raw = self.feeds(model, inputs)
                outputs = self.run(session, feeds, raw)
                cpu_outputs.append(outputs)
                cpu_mismatch = cpu_mismatch or compare(outputs, expected, case.rtol, case.atol)
        except Unfeedable as error:
            return finish("unfeedable", str(error))
        except Exception as error:  # noqa: BLE001
            cpu_error = one_line(error)

        # 2. MLX EP first, with its claim report (reasons) and ORT's profile (where kernels ran:
        # the claim report cannot tell which of several GetCapability passes stood). ORT's error
        # log is read too, since ORT only logs a failed GetCapability and carries on without us.
        self.explain_path.unlink(missing_ok=True)
        os.environ["ONNXRUNTIME_EP_MLX_EXPLAIN"] = str(self.explain_path)
        mlx_error = mlx_mismatch = None
        mlx_outputs = []
        session = None
        with _captured_stderr(self.stderr_path) as log:
            try:
                session = self.session(model_bytes, self.mlx_ep.providers(), profile=True)
                os.environ.pop("ONNXRUNTIME_EP_MLX_EXPLAIN", None)
                for inputs, expected in data_sets:
                    feeds, raw = self.feeds(model, inputs)
                    outputs = self.run(session, feeds, raw)
                    mlx_outputs.append(outputs)
                    mlx_mismatch = mlx_mismatch or compare(outputs, expected, mlx_rtol, case.atol)
            except Unfeedable as error:
                return finish("unfeedable", str(error))
            except Exception as error:  # noqa: BLE001
                mlx_error = one_line(error)
            finally:
                os.environ.pop("ONNXRUNTIME_EP_MLX_EXPLAIN", None)
                if session is not None:
                    profile = Path(session.end_profiling())
                    kernels = Counter(k.provider for k in node_providers(profile))
                    profile.unlink()
                    result.mlx_kernels = kernels.pop(self.mlx_ep.EP_NAME, 0)
                    result.cpu_kernels = sum(kernels.values())
        ep_errors = re.findall(r"OrtEp::\w+\(\) for MLXExecutionProvider failed with error: (.*)", re.sub(r"\x1b\[[0-9;]*m", "", log.text))
        if ep_errors and mlx_error is None:
            mlx_error = one_line("ORT logged an EP error and ran on without the EP: " + ep_errors[0])

        # ORT may call GetCapability again on the partitioned graph, which then holds the EP's own
        # fused nodes (domain MLXExecutionProvider): those ran on MLX, not on the CPU EP.
        records = [r for r in read_explain_records(self.explain_path) if r.domain != self.mlx_ep.EP_NAME]
        result.mlx_nodes = sum(1 for r in records if r.claimed)
        result.cpu_nodes = sum(1 for r in records if not r.claimed)
        declines: dict[str, set[str]] = defaultdict(set)
        for record in records:
            if not record.claimed:
                declines[record.reason or "(no reason given)"].add(record.qualified_op)
        if not records and not result.mlx_kernels:
            # The EP was never asked about a node: ORT's optimizer had folded them all (a Shape of
            # a statically shaped input, an EyeLike of one) before partitioning.
            declines[FOLDED_BY_ORT].add(result.op)
        result.declines = {reason: sorted(ops) for reason, ops in sorted(declines.items())}

        if mlx_error is None and mlx_mismatch is None:
            if not result.mlx_kernels:
                return finish("cpu")
            return finish("partial" if result.cpu_kernels else "mlx")
        if cpu_error is not None:
            return finish("unsupported-by-ort", cpu_error)
        if cpu_mismatch is not None:
            # ORT's CPU EP is wrong by itself; did the MLX EP at least give ORT's answer?
            if mlx_error is None and result.mlx_kernels:
                same = all(compare(m, c, case.rtol, case.atol) is None for m, c in zip(mlx_outputs, cpu_outputs))
                expected_sets = [expected for _, expected in data_sets]
                mlx_off, cpu_off = worst_error(mlx_outputs, expected_sets), worst_error(cpu_outputs, expected_sets)
                if same:
                    verdict = "MLX EP agrees with it"
                elif mlx_off < cpu_off:
                    # Neither meets the case's tolerance; the MLX EP misses it by less.
                    verdict = f"MLX EP is closer to the reference: max abs diff {_g(mlx_off)}, ORT's {_g(cpu_off)}"
                else:
                    return finish("fail", f"{mlx_mismatch} (ORT's CPU EP is also off the reference: {cpu_mismatch})")
                return finish("unsupported-by-ort", f"ORT's CPU EP differs from the reference ({verdict}): {cpu_mismatch}")
            return finish("unsupported-by-ort", f"ORT's CPU EP differs from the reference: {cpu_mismatch}")
        return finish("fail", mlx_error if mlx_error is not None else mlx_mismatch)


class _captured_stderr:  # noqa: N801 - a context manager, read like a function
    """Send file descriptor 2 (where ORT and the EP log) to ``path`` for the duration;
    ``.text`` holds what was written."""

    def __init__(self, path: Path):
        self.path, self.text = path, ""

    def __enter__(self):
        sys.stderr.flush()
        self.saved = os.dup(2)
        self.file = open(self.path, "w+b")  # noqa: SIM115
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        self.file.seek(0)
        data = self.file.read()
        self.file.close()
        self.text = data.decode(errors="replace")
        if data:
            os.write(2, data)  # still in the worker's log
        return False


_ONNX_TYPE_BY_ORT_NAME: dict[str, int] = {}


def _init_type_names():
    from onnx import TensorProto

    names = {
        "bfloat16": TensorProto.BFLOAT16,
        "float8e4m3fn": TensorProto.FLOAT8E4M3FN,
        "float8e4m3fnuz": TensorProto.FLOAT8E4M3FNUZ,
        "float8e5m2": TensorProto.FLOAT8E5M2,
        "float8e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ,
        "uint4": TensorProto.UINT4,
        "int4": TensorProto.INT4,
        "float4e2m1": TensorProto.FLOAT4E2M1,
    }
    for optional in ("FLOAT8E8M0", "UINT2", "INT2"):
        if hasattr(TensorProto, optional):
            names[optional.lower()] = getattr(TensorProto, optional)
    _ONNX_TYPE_BY_ORT_NAME.update({f"tensor({k})": v for k, v in names.items()})


def compare(outputs, expected, rtol: float, atol: float) -> str | None:
    """None when ``outputs`` match ``expected`` the way ONNX's backend runner checks them
    (count, shape, dtype, then np.testing.assert_allclose with NaNs equal); else one line."""
    import numpy as np

    if len(outputs) != len(expected):
        return f"{len(outputs)} outputs, expected {len(expected)}"
    for index, (got, want) in enumerate(zip(outputs, expected)):
        where = f"output {index}"
        if isinstance(want, list) or isinstance(got, list):
            if not (isinstance(want, list) and isinstance(got, list)):
                return f"{where}: got {type(got).__name__}, expected {type(want).__name__}"
            if len(got) != len(want):
                return f"{where}: sequence of {len(got)}, expected {len(want)}"
            problem = compare(got, want, rtol, atol)
            if problem:
                return f"{where} (sequence): {problem}"
            continue
        if want is None or got is None:
            if want is not None or got is not None:
                return f"{where}: got {type(got).__name__}, expected {type(want).__name__}"
            continue
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape:
            return f"{where}: shape {got.shape}, expected {want.shape}"
        if want.dtype == object or got.dtype == object:
            if not np.array_equal(got, want):
                return f"{where}: strings differ"
            continue
        if got.dtype != want.dtype:
            return f"{where}: dtype {got.dtype}, expected {want.dtype}"
        out_rtol = rtol
        if got.dtype.name == "bfloat16":
            out_rtol = max(rtol, 2**-6)  # two bf16 ULPs, as ONNX's runner
        if not _is_native(got) or got.dtype == np.bool_:
            got, want = got.astype(np.float64), want.astype(np.float64)
        with np.errstate(all="ignore"):
            close = np.isclose(got, want, rtol=out_rtol, atol=atol, equal_nan=True)
        if not close.all():
            bad = ~close
            g = got.astype(np.float64)
            w = want.astype(np.float64)
            with np.errstate(all="ignore"):
                diff = np.abs(g - w)
            diff[~bad] = 0
            diff = np.where(np.isnan(diff), np.inf, diff)
            worst = np.unravel_index(int(np.argmax(diff)), diff.shape) if diff.size else ()
            return (
                f"{where} ({got.dtype}): {int(bad.sum())}/{bad.size} elements differ, max abs diff "
                f"{_g(diff[worst])} at {tuple(int(i) for i in worst)}: got {_g(g[worst])}, expected {_g(w[worst])}"
            )
    return None


def worst_error(output_sets, expected_sets) -> float:
    """The largest absolute difference of any numeric output from its expected value (inf for a
    NaN where a number is expected, or for outputs that cannot be compared)."""
    import numpy as np

    worst = 0.0
    for outputs, expected in zip(output_sets, expected_sets):
        for got, want in zip(outputs, expected):
            got, want = np.asarray(got), np.asarray(want)
            if got.shape != want.shape or got.dtype == object or want.dtype == object:
                return float("inf")
            with np.errstate(all="ignore"):
                diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            both_nan = np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64))
            diff = np.where(both_nan, 0.0, np.where(np.isnan(diff), np.inf, diff))
            worst = max(worst, float(diff.max()) if diff.size else 0.0)
    return worst


def _g(value) -> str:
    return f"{float(value):.4g}"


def worker_main(args) -> int:
    """Run this worker's share of the cases, one JSON line per case on the original stdout;
    ``{"start": case}`` before each, so that the parent knows which case killed us."""
    result_fd = os.dup(1)
    os.dup2(2, 1)  # anything else printed (ORT, the EP) goes to stderr, not into the protocol
    out = os.fdopen(result_fd, "w", buffering=1)
    _init_type_names()
    cases = load_cases(args.kinds.split(","))
    single = {c.name: _qualified(c.model.graph.node[0]) for c in cases if c.kind == "node" and len(c.model.graph.node) == 1}
    chosen = [c for c in cases if _selected(_case_key(c), args.k)]
    shard, shards = (int(x) for x in args.shard.split("/"))
    chosen = sorted(chosen, key=_case_key)[shard::shards]
    if args.after:
        keys = [_case_key(c) for c in chosen]
        chosen = chosen[keys.index(args.after) + 1 :] if args.after in keys else chosen
    out.write(json.dumps({"plan": [_case_key(c) for c in chosen]}) + "\n")
    with tempfile.TemporaryDirectory(prefix="mlx-conformance-") as tmp:
        runner = Runner(Path(tmp) / "explain.jsonl")
        crash_in = os.environ.get("MLX_CONFORMANCE_CRASH_IN")  # for the harness's own tests
        for case in chosen:
            out.write(json.dumps({"start": _case_key(case), "op": _op_under_test(case, single)}) + "\n")
            if crash_in == _case_key(case):
                os.abort()
            if os.environ.get("MLX_CONFORMANCE_HANG_IN") == _case_key(case):
                time.sleep(1e6)
            try:
                result = runner.case(case, _op_under_test(case, single))
            except SystemExit as fatal:  # the EP is not there at all: no point going on
                out.write(json.dumps({"fatal": str(fatal)}) + "\n")
                return 3
            except Exception as error:  # noqa: BLE001 - the harness itself: still one line
                result = Result(case=_case_key(case), op=_op_under_test(case, single), cls="fail", reason=one_line(f"harness error: {error!r} {traceback.format_exc(limit=2)}"))
            out.write(json.dumps({"result": asdict(result)}) + "\n")
    return 0


def _selected(key: str, patterns) -> bool:
    return not patterns or any(p in key for p in patterns)


# ----------------------------------------------------------------------------------------------
# Parent side: workers, crashes, manifest, doc.


class _Worker:
    def __init__(self, shard: str, args, after: str | None, log_dir: Path):
        self.shard, self.args = shard, args
        self.log = open(log_dir / f"worker-{shard.replace('/', '-')}-{time.monotonic_ns()}.log", "w+b")  # noqa: SIM115
        command = [sys.executable, str(Path(__file__).resolve()), "--worker", "--shard", shard, "--kinds", args.kinds]
        for pattern in args.k or ():
            command += ["-k", pattern]
        if after:
            command += ["--after", after]
        env = dict(os.environ)
        # One BLAS thread: the same summation order (so the same answers) on any number of cores.
        env["OPENBLAS_NUM_THREADS"] = "1"
        env["OMP_NUM_THREADS"] = "1"
        env.pop("ONNXRUNTIME_EP_MLX_EXPLAIN", None)
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self.log, env=env, cwd=REPO)
        self.buffer = b""
        self.current: str | None = None
        self.current_op = "?"
        self.timed_out = False
        self.last_progress = time.monotonic()
        self.plan: list[str] | None = None

    def stderr_tail(self, lines: int = 3) -> str:
        self.log.flush()
        self.log.seek(0)
        text = self.log.read().decode(errors="replace").strip().splitlines()
        return " | ".join(text[-lines:])


def run_all(kinds=KINDS, jobs: int = 2, patterns=None, verbose: bool = False) -> dict[str, Result]:
    """Every case, in ``jobs`` worker processes; keyed by case."""
    args = argparse.Namespace(kinds=",".join(kinds), k=patterns)
    results: dict[str, Result] = {}
    planned: set[str] = set()
    selector = selectors.DefaultSelector()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mlx-conformance-logs-") as logs:
        log_dir = Path(logs)

        everyone: list[_Worker] = []

        def spawn(shard, after=None):
            worker = _Worker(shard, args, after, log_dir)
            everyone.append(worker)
            selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
            return worker

        workers = [spawn(f"{i}/{jobs}") for i in range(jobs)]
        try:
            while workers:
                for key, _ in selector.select(timeout=5.0):
                    worker = key.data
                    chunk = os.read(worker.process.stdout.fileno(), 1 << 16)
                    if chunk:
                        worker.buffer += chunk
                        *lines, worker.buffer = worker.buffer.split(b"\n")
                        for line in lines:
                            message = json.loads(line)
                            worker.last_progress = time.monotonic()
                            if "plan" in message:
                                if worker.plan is None and not planned.intersection(message["plan"]):
                                    planned.update(message["plan"])
                                worker.plan = message["plan"]
                            elif "fatal" in message:
                                raise RuntimeError(message["fatal"])
                            elif "start" in message:
                                worker.current = message["start"]
                                worker.current_op = message["op"]
                            else:
                                result = Result(**message["result"])
                                results[result.case] = result
                                worker.current = None
                                if verbose:
                                    print(f"{result.cls:18} {result.case}  {result.reason}", flush=True)
                        continue
                    # EOF: the worker finished or died.
                    selector.unregister(worker.process.stdout)
                    code = worker.process.wait()
                    workers.remove(worker)
                    why = "timed out" if worker.timed_out else f"signal {-code}" if code < 0 else f"exit status {code}"
                    if worker.current is not None:
                        reason = f"the process died ({why})" + (f": {worker.stderr_tail()}" if worker.stderr_tail() else "")
                        results[worker.current] = Result(case=worker.current, op=worker.current_op, cls="fail", reason=one_line(reason))
                        workers.append(spawn(worker.shard, after=worker.current))
                    elif code != 0:
                        done = [case for case in worker.plan or () if case in results]
                        if worker.plan is None or not done:
                            raise RuntimeError(f"conformance worker {worker.shard} failed ({why}): {worker.stderr_tail(20)}")
                        if len(done) < len(worker.plan):  # died between two cases: go on after the last one
                            workers.append(spawn(worker.shard, after=done[-1]))
                        print(f"warning: conformance worker {worker.shard} died between cases ({why}): {worker.stderr_tail()}", file=sys.stderr)
                for worker in list(workers):
                    limit = CASE_TIMEOUT_S if worker.current else CASE_TIMEOUT_S * 2
                    if time.monotonic() - worker.last_progress > limit:
                        worker.timed_out = True
                        worker.process.kill()  # the loop above sees EOF and records the case
                        worker.last_progress = time.monotonic()
        finally:  # on any error, leave no worker behind
            for worker in everyone:
                if worker.process.poll() is None:
                    worker.process.kill()
                    worker.process.wait()
                worker.process.stdout.close()
                worker.log.close()
            selector.close()
    missing = planned - results.keys()
    if missing:
        raise RuntimeError(f"no result for {len(missing)} case(s): {sorted(missing)[:10]}")
    if verbose:
        print(f"{len(results)} cases in {time.monotonic() - started:.1f} s", flush=True)
    return dict(sorted(results.items()))


# -- manifest --------------------------------------------------------------------------------

MANIFEST_HEADER = (
    "# ONNX backend tests through ORT with MLXExecutionProvider first: one case per line.\n"
    f"# Generated by `{REGENERATE}`; tests/conformance/test_conformance.py fails when a case's class changes.\n"
    "# case\tclass\top\treason (unsupported-by-ort, unfeedable, fail)\n"
)


def write_manifest(results: dict[str, Result], path: Path = MANIFEST) -> None:
    lines = [MANIFEST_HEADER]
    for key, result in sorted(results.items()):
        reason = result.reason if result.cls in ("fail", "unsupported-by-ort", "unfeedable") else ""
        lines.append(f"{key}\t{result.cls}\t{result.op}\t{reason.replace(chr(9), ' ')}".rstrip("\t") + "\n")
    path.write_text("".join(lines), encoding="utf-8")


def read_manifest(path: Path = MANIFEST) -> dict[str, tuple[str, str, str]]:
    """case → (class, op, reason)."""
    entries = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line or line.startswith("#"):
            continue
        case, cls, op, *rest = line.split("\t") + [""] * 2
        entries[case] = (cls, op, rest[0] if rest else "")
    return entries


def changes(manifest: dict[str, tuple[str, str, str]], results: dict[str, Result]) -> dict[str, list[str]]:
    """{"worse": [...], "better": [...], "changed": [...], "new": [...], "gone": [...]}, lines."""
    out: dict[str, list[str]] = {"worse": [], "better": [], "changed": [], "new": [], "gone": []}
    for case, result in results.items():
        if case not in manifest:
            out["new"].append(f"{case}: {result.cls} {result.reason}".rstrip())
            continue
        before = manifest[case][0]
        now = result.cls
        if before == now:
            continue
        line = f"{case} ({result.op}): {before} → {now}" + (f": {result.reason}" if result.reason else "")
        if now == "fail" or (before in RANK and now in RANK and RANK[now] < RANK[before]):
            out["worse"].append(line)
        elif before in RANK and now in RANK:
            out["better"].append(line)
        else:
            out["changed"].append(line)
    out["gone"] = [f"{case}: was {manifest[case][0]}" for case in manifest if case not in results]
    return {k: v for k, v in out.items() if v}


def describe_changes(found: dict[str, list[str]]) -> str:
    titles = {
        "worse": "got worse (a regression in the EP, or a claim that is wrong)",
        "better": "got better (update the manifest so that it stays true)",
        "changed": "changed class",
        "new": "not in the manifest",
        "gone": "in the manifest but not run",
    }
    lines = []
    for kind, entries in found.items():
        lines.append(f"{len(entries)} case(s) {titles[kind]}:")
        lines += [f"  {entry}" for entry in entries]
    lines.append(f"If the new classes are right, regenerate the manifest and docs/CONFORMANCE.md: {REGENERATE}")
    return "\n".join(lines)


# -- the document ----------------------------------------------------------------------------

MEANING = {
    "mlx": "passed; every kernel ORT ran was on MLX",
    "partial": "passed; some kernels on MLX, the rest on ORT's CPU EP",
    "cpu": "passed; nothing on MLX (the EP declined every node, or ORT folded them all away first)",
    "fail": "wrong answer or error with the MLX EP first, where ORT's CPU EP alone passes",
    "unsupported-by-ort": "ORT's CPU EP alone cannot load or run it, or misses the reference itself",
    "unfeedable": "an input or output ORT's Python binding cannot hold",
}


def _md(text: str) -> str:
    return str(text).replace("|", "\\|")


def _ort_reason_group(reason: str) -> str:
    """Unsupported-by-ORT reasons without the case-specific parts, for grouping."""
    patterns = [
        (r"Unsupported model IR version: (\d+)", r"Unsupported model IR version: \1"),
        (r"(Opset \d+ is under development).*", r"\1"),
        (r"Could not find an implementation for (\S+\(\d+\)) node", r"no CPU kernel: \1"),
        (r"Failed to find kernel for (\S+\(\d+\))", r"no CPU kernel: \1"),
        (r"(Unrecognized attribute: \w+ for operator \w+)", r"ORT's schema: \1"),
        (r"(\S+ is not a registered function/op)", r"\1"),
        (r"(ORT's CPU EP differs from the reference).*", r"\1"),
        (r"Non-zero status code returned while running (\w+) node\. Name:'[^']*' Status Message: (.{0,100})", r"\1 at run time: \2"),
        (r"^(not run: .*)", r"\1"),
        (r"^(.{0,120}).*", r"\1"),
    ]
    for pattern, replacement in patterns:
        match = re.search(pattern, reason)
        if match:
            return match.expand(replacement)
    return reason


def render_doc(results: dict[str, Result], kinds=KINDS) -> str:
    import onnx
    import onnxruntime as ort

    totals = Counter(r.cls for r in results.values())
    by_kind = Counter(("node" if "/" not in key else key.split("/")[0]) for key in results)
    out = [
        "# ONNX backend conformance",
        "",
        f"Generated by `{REGENERATE}` (tests/conformance/run.py); `tests/conformance/test_conformance.py` "
        "runs every case again and fails when a case's class differs from `tests/conformance/manifest.tsv` "
        "or when this file is stale.",
        "",
        f"ONNX's own backend tests (onnx {onnx.__version__}: "
        + ", ".join(f"{by_kind[k]} `{k}`" for k in kinds if by_kind[k])
        + f" cases) through ONNX Runtime {ort.__version__}, each run on ORT's CPU EP alone and then with "
        "`MLXExecutionProvider` first, compared with the case's expected outputs at its own rtol/atol "
        "(`np.testing.assert_allclose` semantics, NaNs equal; shape and dtype must match). Where nodes ran "
        "comes from ORT's profile of the run (kernels per provider; nodes ORT optimised away are not there), "
        "why the EP declined a node from its claim report (`ONNXRUNTIME_EP_MLX_EXPLAIN`). bf16, float8, (u)int4 and float4 tensors are fed and read back as raw "
        "bytes through OrtValues.",
        "",
        "## Totals",
        "",
        "| class | cases | meaning |",
        "|---|---:|---|",
    ]
    out += [f"| {cls} | {totals[cls]} | {MEANING[cls]} |" for cls in CLASSES]
    out += [f"| **all** | **{len(results)}** | |", ""]

    fails = [r for r in results.values() if r.cls == "fail"]
    out += ["## Failures", ""]
    if fails:
        out += [
            "ORT's CPU EP alone passes these; with the MLX EP first they error or miss the reference. Bugs in "
            "the op table or the EP (or claims to narrow) until fixed.",
            "",
            "| case | op | input dtypes | nodes claimed/declined | error or difference |",
            "|---|---|---|---|---|",
        ]
        out += [f"| {r.case} | {_md(r.op)} | {', '.join(r.dtypes)} | {r.mlx_nodes}/{r.cpu_nodes} | {_md(r.reason)} |" for r in fails]
    else:
        out.append("None.")
    out.append("")
    widened = [(key, rtol, why) for key, (rtol, why) in sorted(WIDENED_RTOL.items()) if key in results]
    if widened:
        out += [
            "## Held to a wider tolerance",
            "",
            "Cases whose stored expected output is itself less precise than the MLX EP's answer; each is "
            "checked at this rtol instead of its own, and `tests/conformance/test_precision.py` proves the claim.",
            "",
            "| case | class | rtol | why |",
            "|---|---|---:|---|",
        ]
        out += [f"| {key} | {results[key].cls} | {rtol:g} | {_md(why)} |" for key, rtol, why in widened]
        out.append("")

    # Decline reasons, weighted by the passing cases they kept off MLX.
    cost: dict[str, set[str]] = defaultdict(set)
    ops_of: dict[str, Counter] = defaultdict(Counter)  # reason -> op -> cases
    for r in results.values():
        if r.cls in ("partial", "cpu"):
            for reason, ops in r.declines.items():
                cost[reason].add(r.case)
                ops_of[reason].update(ops)
    ranked = sorted(cost.items(), key=lambda item: (-len(item[1]), item[0]))
    out += [
        "## Why nodes stayed on ORT's CPU EP",
        "",
        "The EP's decline reasons over the `partial` and `cpu` cases: how many cases each reason kept (partly) "
        "off MLX, and the ops it was given for (with their number of cases, most first).",
        "",
        "| cases | reason | ops |",
        "|---:|---|---|",
    ]
    for reason, cases in ranked[:40]:
        ops = sorted(ops_of[reason].items(), key=lambda item: (-item[1], item[0]))
        limit = 40 if len(ops) > 12 else 12
        shown = ", ".join(f"{op} ({n})" for op, n in ops[:limit]) + (f" and {len(ops) - limit} more" if len(ops) > limit else "")
        out.append(f"| {len(cases)} | {_md(one_line(reason, 160))} | {_md(shown)} |")
    if len(ranked) > 40:
        out.append(f"| {sum(len(c) for _, c in ranked[40:])} | ({len(ranked) - 40} more reasons) | |")
    out.append("")

    kept = sorted((r for r in results.values() if r.cls in ("partial", "cpu")), key=lambda r: r.case)
    out += [
        "## Every case on ORT's CPU EP",
        "",
        "Each `partial` and `cpu` case with the reasons the EP gave for the nodes it declined.",
        "",
        "| case | class | why |",
        "|---|---|---|",
    ]
    for r in kept:
        why = "; ".join(sorted(r.declines)) or "no decline reported"
        out.append(f"| {r.case} | {r.cls} | {_md(one_line(why, 300))} |")
    out.append("")

    groups: dict[str, list[str]] = defaultdict(list)
    for r in results.values():
        if r.cls == "unsupported-by-ort":
            groups[_ort_reason_group(r.reason)].append(r.case)
    out += ["## Cases ORT's CPU EP cannot run", "", "| cases | reason (grouped; each case's own is in the manifest) |", "|---:|---|"]
    out += [f"| {len(cases)} | {_md(reason)} |" for reason, cases in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))]
    out.append("")
    unfeedable = Counter(r.reason for r in results.values() if r.cls == "unfeedable")
    if unfeedable:
        out += ["## Unfeedable cases", "", "| cases | reason |", "|---:|---|"]
        out += [f"| {n} | {_md(reason)} |" for reason, n in sorted(unfeedable.items(), key=lambda item: (-item[1], item[0]))]
        out.append("")

    per_op: dict[str, Counter] = defaultdict(Counter)
    for r in results.values():
        per_op[r.op][r.cls] += 1
    out += [
        "## Per op",
        "",
        "The op under test (expanded cases run the op's function body; non-node kinds are whole models).",
        "",
        "| op | cases | mlx | partial | cpu | fail | unsupported-by-ort | unfeedable |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for op in sorted(per_op, key=lambda o: (o.endswith(" model"), o.lower())):
        c = per_op[op]
        cells = [str(c[cls]) if c[cls] else "" for cls in CLASSES]
        out.append(f"| {_md(op)} | {sum(c.values())} | " + " | ".join(cells) + " |")
    out.append("")
    return "\n".join(out)


# ----------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help="rewrite tests/conformance/manifest.tsv and docs/CONFORMANCE.md")
    parser.add_argument("--jobs", "-j", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated (default {','.join(KINDS)})")
    parser.add_argument("-k", action="append", help="only cases whose name contains this (repeatable; not with --update)")
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per case as it finishes")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--shard", default="0/1", help=argparse.SUPPRESS)
    parser.add_argument("--after", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args)
    if args.update and args.k:
        parser.error("--update rewrites the whole manifest: run without -k")

    started = time.monotonic()
    kinds = tuple(args.kinds.split(","))
    results = run_all(kinds, jobs=args.jobs, patterns=args.k, verbose=args.verbose)
    elapsed = time.monotonic() - started
    totals = Counter(r.cls for r in results.values())
    print(f"{len(results)} cases in {elapsed:.1f} s: " + ", ".join(f"{cls} {totals[cls]}" for cls in CLASSES))
    for r in results.values():
        if r.cls == "fail":
            print(f"  FAIL {r.case} [{r.op}; {', '.join(r.dtypes)}; nodes claimed/declined {r.mlx_nodes}/{r.cpu_nodes}]: {r.reason}")
    if args.update:
        write_manifest(results)
        DOC.write_text(render_doc(results, kinds), encoding="utf-8")
        print(f"wrote {MANIFEST.relative_to(REPO)} and {DOC.relative_to(REPO)}")
        return 0
    if MANIFEST.exists():
        manifest = read_manifest()
        if args.k:
            manifest = {case: entry for case, entry in manifest.items() if case in results}
        found = changes(manifest, results)
        if found:
            print(describe_changes(found))
            return 1
        print("no change against the manifest")
    return 0


if __name__ == "__main__":
    sys.exit(main())
