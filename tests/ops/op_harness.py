"""One-node models for op-table entries, run with the MLX EP first and compared with ORT's CPU EP
(or a numpy reference where the CPU EP has no kernel).

A case is (entry, dtype per type variable, attribute/input variant, layout). Its model is the
node under test (``op_under_test``) plus helpers: ``Cast`` float32 <-> bfloat16 around bfloat16
ports (Python cannot feed or fetch bfloat16; the EP claims these Casts too), ``QuantizeLinear``
(scale 1, saturate 0) before and ``DequantizeLinear`` (scale 1) after int4/uint4/float8 ports
(exact for values of the type; the EP claims them too) and, for the
``transposed`` layout, ``cpu_transpose_in``/``cpu_transpose_out``: the op reads a transposed
(strided, once the EP claims Transpose) input and its output is transposed back. These helpers
may run on either EP; every other node must run on MLX.

Self-check mode (``ORT_MLX_OPS_SELFCHECK=1``): the "MLX" session is CPU-only, so the suite
checks its own model building, input generation and profiling parser, and every numpy
reference is compared with ORT's CPU EP wherever both exist.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import helper, numpy_helper

from op_specs import OpSpec, Variant, gen, round_to, spec_for
from op_table import FLOAT8S, FLOATS, INTS, NARROW, Entry, np_dtype, tensor_type, type_str

EP = "MLXExecutionProvider"
CPU = "CPUExecutionProvider"
ORT_MAX_OPSET = 26  # ORT 1.31.1 loads ai.onnx opsets up to 26
CONTRIB_DEFAULT_OPSET = 17  # default-domain opset of com.microsoft models (helper Casts)
IR_VERSION = 10  # ORT 1.31.1 rejects IR 14, which onnx 1.23 writes by default
OP_NODE = "op_under_test"
CPU_HELPER_PREFIX = "cpu_"

SELFCHECK = os.environ.get("ORT_MLX_OPS_SELFCHECK", "") not in ("", "0")

# (rtol, atol) per output dtype for ops that are not correctly rounded.
TOLERANCE = {"float": (1e-5, 1e-6), "float16": (2e-3, 1e-3), "bfloat16": (2e-2, 1e-2), "double": (1e-12, 1e-14)}

# --------------------------------------------------------------------------------------------
# Shapes per layout. Each scheme maps a layout to a function of the present input instances
# [(instance name, port)] returning one shape per instance, or None when the layout does not
# apply to the scheme.

NO_FUSE_ENV = "ONNXRUNTIME_EP_MLX_NO_FUSE"
BASIC = "basic"
DYNAMIC = "dynamic"  # symbolic dims; runs of different shapes through one session
LAYOUTS = ("broadcast", "broadcast2", "scalar", "scalar_mix", "empty", "transposed", DYNAMIC)
BROADCASTING = ("broadcast", "broadcast2", "scalar_mix", "empty")  # inputs of different shapes


def _nary(layout, inst):
    n = len(inst)
    if n == 1:
        return _unary(layout, inst)
    table = {
        BASIC: [[3, 4]] * n,
        "broadcast": [[[2, 3, 4], [3, 1], [4]][i % 3] for i in range(n)],
        "broadcast2": [[[3, 1], [1, 4], [1]][i % 3] for i in range(n)],
        "scalar": [[]] * n,
        "scalar_mix": [[2, 3]] + [[]] * (n - 1),
        "empty": [[0, 3]] + [[3]] * (n - 1),
        "transposed": [[3, 4]] * n,
    }
    return table.get(layout)


def _unary(layout, inst):
    table = {BASIC: [[2, 3, 4]], "scalar": [[]], "empty": [[0, 3]], "transposed": [[3, 4]]}
    return table.get(layout)


def _prelu(layout, inst):
    table = {
        BASIC: [[3, 4], [3, 4]],
        "broadcast": [[2, 3, 4], [3, 1]],
        "broadcast2": [[2, 3, 4], [4]],
        "scalar": [[], []],
        "scalar_mix": [[2, 3], []],
        "empty": [[0, 3], [3]],
        "transposed": [[3, 4], [3, 4]],
    }
    return table.get(layout)


def _clip(layout, inst):
    first = _unary(layout, inst[:1])
    return None if first is None else first + [[]] * (len(inst) - 1)


def _softmax(layout, inst):
    return {BASIC: [[2, 3, 4]], "empty": [[0, 3]], "transposed": [[3, 4]]}.get(layout)


def _bias(layout, inst):
    x = {BASIC: [2, 3, 4], "empty": [0, 3, 4], "transposed": [2, 3, 4]}.get(layout)
    if x is None:
        return None
    return [[4] if name in ("bias", "B") else x for name, _ in inst]


def _castlike(layout, inst):
    first = _unary(layout, inst[:1])
    return None if first is None else first + [[] if layout == "scalar" else [1]]


def _dynamic_sets(scheme, inst):
    """Shape sets of the ``dynamic`` layout: one rank per input, different sizes per run."""
    n = len(inst)
    unary = [[[2, 3, 4]], [[1, 5, 2]], [[4, 1, 3]]]
    if scheme == "unary" or (scheme == "nary" and n == 1):
        return unary
    if scheme == "nary":
        return [[[3, 4]] * n, [[2, 5]] * n, [[[4, 1], [1, 6], [4, 6]][i % 3] for i in range(n)]]
    if scheme == "prelu":
        return [[[3, 4], [3, 4]], [[2, 5], [2, 5]], [[4, 6], [1, 6]]]
    if scheme == "clip":
        return [u + [[]] * (n - 1) for u in unary]
    if scheme == "softmax":
        return [[[2, 3, 4]], [[3, 2, 5]], [[1, 1, 3]]]
    if scheme == "bias":
        return [[[c] if name in ("bias", "B") else x + [c] for name, _ in inst]
                for x, c in (([2, 3], 4), ([1, 5], 4), ([3, 2], 6))]
    if scheme == "castlike":
        return [u + [[1]] for u in unary]
    return None


SCHEMES = {"nary": _nary, "unary": _unary, "prelu": _prelu, "clip": _clip, "softmax": _softmax,
           "bias": _bias, "castlike": _castlike}


# --------------------------------------------------------------------------------------------
# Cases


@dataclass
class Case:
    entry: Entry
    spec: OpSpec
    dtypes: dict[str, str]
    variant: Variant
    layout: str = BASIC
    opset: int | None = None  # ai.onnx opset of the model (None for com.microsoft)
    id: str = ""
    skip: str | None = None
    data: dict[str, np.ndarray] | None = None  # fixed inputs by instance name (edge tests)
    oracle: str = "auto"  # "auto": ORT CPU, numpy where it has no kernel; "numpy": numpy only
    expect_provider: str = EP  # where the op node must run (CPU for decline tests)
    # Whether the compiled runs let MLX fuse kernels. Every case runs compiled; fusion (which
    # on the CPU backend C++-compiles each new kernel at first use, ~10 min for the whole
    # suite on a cold machine) is kept for a representative slice: see build_cases.
    fused: bool = False

    @property
    def attrs(self) -> dict:
        return self.variant.attrs_for(self.dtypes)

    def constants(self) -> dict[str, np.ndarray | None]:
        """Host-known inputs (initializers) by port name; None: the optional input is absent."""
        out = {}
        for src in (self.spec.constants, self.variant.constants):
            for k, v in src.items():
                out[k] = v(self) if callable(v) else v
        return out

    def instances(self) -> list[tuple[str | None, object]]:
        """Input instances in port order: (name or None when an optional input is absent, port)."""
        consts = self.constants()
        out = []
        for p in self.entry.inputs:
            if p.kind == "variadic":
                out += [(f"{p.name}_{i}", p) for i in range(self.variant.n_variadic)]
            elif p.name in consts:
                out.append((p.name if consts[p.name] is not None else None, p))
            elif p.kind == "optional":
                present = self.variant.present is None or p.name in self.variant.present
                out.append((p.name if present else None, p))
            else:
                out.append((p.name, p))
        return out

    def output_instances(self) -> list[tuple[str, object]]:
        out = []
        for p in self.entry.outputs:
            name = re.sub(r"\W", "", p.name)
            if p.kind == "optional" and self.variant.outputs is not None and p.name not in self.variant.outputs:
                continue
            if p.kind == "variadic":
                out += [(f"{name}_{i}", p) for i in range(self.variant.n_outputs)]
            else:
                out.append((name, p))
        return out

    def output_slots(self) -> list[str | None]:
        """The node's output names in slot order: None for an absent optional output that a
        later present one follows (RNN's Y_h without Y), trailing absent ones dropped."""
        produced = {name for name, _ in self.output_instances()}
        out: list[str | None] = []
        for p in self.entry.outputs:
            name = re.sub(r"\W", "", p.name)
            if p.kind == "variadic":
                out += [f"{name}_{i}" for i in range(self.variant.n_outputs)]
            else:
                out.append(name if name in produced else None)
        while out and out[-1] is None:
            out.pop()
        return out

    def present(self):
        """The fed (graph-input) instances."""
        consts = self.constants()
        return [(n, p) for n, p in self.instances() if n is not None and n not in consts]

    def shapes(self) -> list[list[int]] | None:
        sets = self.shape_sets()
        return sets[0] if sets else None

    def shape_sets(self) -> list[list[list[int]]] | None:
        """One list of input shapes per distinct feed (several for the dynamic layout)."""
        if self.data is not None:
            return [[list(np.shape(self.data[n])) for n, _ in self.present()]]
        if self.layout == BASIC and self.variant.shapes is not None:
            return [self.variant.shapes]
        scheme = self.spec.scheme
        if isinstance(scheme, dict):
            table = scheme.get(self.layout)
            if table is None:
                return None
            return table if self.layout == DYNAMIC else [table]
        if self.layout == DYNAMIC:
            return _dynamic_sets(scheme, self.present())
        shapes = SCHEMES[scheme](self.layout, self.present())
        return None if shapes is None else [shapes]


def _combo_id(d: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in d.items())


_SCHEMAS: dict[tuple[str, str], list] = {}


def _schema(op, version, domain=""):
    """ORT's own schema of ``op`` in effect at opset ``version`` (what ORT validates models
    against; it also knows the com.microsoft ops), or None."""
    if not _SCHEMAS:
        from onnxruntime.capi import onnxruntime_pybind11_state as C

        for s in C.get_all_operator_schema():
            _SCHEMAS.setdefault((s.domain, s.name), []).append(s)
        for v in _SCHEMAS.values():
            v.sort(key=lambda s: s.since_version)
    found = [s for s in _SCHEMAS.get((domain, op), []) if s.since_version <= version]
    return found[-1] if found else None


def _node_types_ok(schema, in_types, out_types, attrs) -> bool:
    if schema is None:
        return False
    constraints = {tc.type_param_str: set(tc.allowed_type_strs) for tc in schema.type_constraints}
    bound: dict[str, str] = {}

    def ok(formals, types):
        for i, t in enumerate(types):
            if t is None:
                continue
            if not formals:
                return False
            if i >= len(formals) and formals[-1].option.name != "Variadic":
                return False
            f = formals[min(i, len(formals) - 1)]
            if type_str(t) not in constraints.get(f.typeStr, {f.typeStr}):
                return False
            # Ports sharing a type variable take one type.
            if f.typeStr in constraints and bound.setdefault(f.typeStr, t) != t:
                return False
        return True

    return ok(schema.inputs, in_types) and ok(schema.outputs, out_types) and all(a in schema.attributes for a in attrs)


def model_types_ok(case: Case, version: int) -> bool:
    """Whether ORT's schemas at ``version`` accept every node of the case's model."""
    e = case.entry
    in_types = [case.dtypes[p.type_var] if n is not None else None for n, p in case.instances()]
    out_types = [case.dtypes[p.type_var] for _, p in case.output_instances()]
    op_version = version if e.domain == "" else 1
    if not _node_types_ok(_schema(e.op, op_version, e.domain), in_types, out_types, case.attrs):
        return False
    used = {t for t in in_types + out_types if t is not None}
    if "bfloat16" in used and not _node_types_ok(_schema("Cast", version), ["float"], ["bfloat16"], {"to": 0}):
        return False
    return True


def choose_opset(case: Case, latest=False) -> int | None:
    e = case.entry
    if e.domain != "":
        return None if model_types_ok(case, CONTRIB_DEFAULT_OPSET) else -1
    top = min(e.until if e.until is not None else ORT_MAX_OPSET, ORT_MAX_OPSET)
    low = max(e.since, case.variant.min_opset)
    if case.variant.max_opset is not None:
        top = min(top, case.variant.max_opset)
    if case.layout in BROADCASTING and len(case.present()) > 1:
        low = max(low, case.spec.broadcast_since)
    versions = range(top, low - 1, -1) if latest else range(low, top + 1)
    return next((v for v in versions if model_types_ok(case, v)), -1)


def _rep_combo(entry: Entry, spec: OpSpec, prefer_int=False) -> dict[str, str] | None:
    combos = _combos(entry, spec)
    if not combos:
        return None

    def score(c):
        # Only the type variables the entry lets vary say what the case is about (an index
        # variable fixed to int64 does not make a float case an integer one).
        vals = [v for name, v in c.items() if len(entry.types[name]) > 1] or list(c.values())
        if prefer_int:
            return (0 if any(v in INTS for v in vals) else 1, 0 if "int32" in vals else 1)
        return (sum(v != "float" and v != "bool" for v in vals),)

    best = min(combos, key=score)
    varying = [v for name, v in best.items() if len(entry.types[name]) > 1] or list(best.values())
    if prefer_int and not any(v in INTS for v in varying):
        return None
    return best


def _combos(entry: Entry, spec: OpSpec) -> list[dict[str, str]]:
    names = list(entry.types)
    out = []
    for values in itertools.product(*(entry.types[n] for n in names)):
        d = dict(zip(names, values))
        if spec.combos is None or spec.combos(d):
            out.append(d)
    return out


def _finish(case: Case, latest=False) -> Case:
    shapes = case.shapes()
    if shapes is None:
        case.skip = f"layout {case.layout} does not apply to scheme {case.spec.scheme}"
    v = choose_opset(case, latest=latest)
    if v == -1:
        rng = f"{case.entry.since}..{min(case.entry.until or ORT_MAX_OPSET, ORT_MAX_OPSET)}"
        case.skip = (case.skip or "") + (
            f"untestable through ORT: no ONNX opset in {rng} accepts {case.entry.op} with "
            f"{_combo_id(case.dtypes)} and attributes {sorted(case.attrs)} (the model would be invalid)"
        )
    else:
        case.opset = v
    return case


def _generic_spec(entry: Entry) -> OpSpec:
    """For entries the suite has no spec for: generic inputs, ORT CPU as the only oracle."""
    single = sum(1 for p in entry.inputs) == 1
    return OpSpec(ref=None, scheme="unary" if single else "nary")


def build_cases(entries: list[Entry]) -> list[Case]:
    cases: list[Case] = []
    for e in entries:
        spec = spec_for(e) or _generic_spec(e)
        if spec.elsewhere is not None:
            path, why = spec.elsewhere
            if not (Path(__file__).resolve().parents[2] / path).is_file():
                raise FileNotFoundError(f"{e.key}: its tests are said to be in {path}, which does not exist")
            case = Case(e, spec, {}, spec.variants[0], id=f"{e.key}:elsewhere")
            case.skip = f"tested in {path}: {why}"
            cases.append(case)
            continue
        combos = _combos(e, spec)
        rep = _rep_combo(e, spec)
        seen = set()

        def add(case: Case, latest=False):
            case = _finish(case, latest)
            # The fused slice: the entry's representative dtypes, its default variant, plain and
            # dynamic shapes (the dynamic layout replays shapeless closures at new shapes).
            case.fused = (rep is not None and case.dtypes == dict(rep) and case.variant is spec.variants[0]
                          and case.layout in (BASIC, DYNAMIC))
            base = f"{e.key}:{_combo_id(case.dtypes)}:{case.variant.name}:{case.layout}"
            case.id = base + (f"@opset{case.opset}" if latest else "")
            if case.id not in seen:
                seen.add(case.id)
                cases.append(case)

        known = {a.name for a in e.attributes}
        for variant in spec.variants:
            # A variant setting an attribute this entry does not have belongs to another opset
            # range of the op (Shape-15's start/end, Reshape-14's allowzero).
            if rep and not set(variant.attrs_for(rep)) <= known:
                continue
            # A variant that only older opsets accept (GridSample's `bilinear` before 20).
            if variant.max_opset is not None and variant.max_opset < e.since:
                continue
            for combo in combos if variant.sweep else ([rep] if rep else []):
                if variant.when is None or variant.when(combo):
                    add(Case(e, spec, dict(combo), variant))
        default = spec.variants[0]
        reps = [c for c in (rep, _rep_combo(e, spec, prefer_int=True)) if c]
        for combo in reps:
            if default.when is not None and not default.when(combo):
                continue
            for layout in LAYOUTS:
                case = Case(e, spec, dict(combo), default, layout)
                if case.shapes() is not None:
                    add(case)
        # The newest opset the entry covers, when its schema differs from the oldest one's.
        if rep and e.domain == "" and (default.when is None or default.when(rep)):
            first = choose_opset(Case(e, spec, dict(rep), default))
            last = choose_opset(Case(e, spec, dict(rep), default), latest=True)
            if first not in (None, -1) and last not in (None, -1):
                if _schema(e.op, first).since_version != _schema(e.op, last).since_version:
                    add(Case(e, spec, dict(rep), default), latest=True)
    return cases


# --------------------------------------------------------------------------------------------
# Models and data


def _seed(case_id: str) -> int:
    return zlib.crc32(case_id.encode())


def domain_of(case: Case, port_name: str):
    for src in (case.variant.domains, case.spec.domains):
        if port_name in src:
            return src[port_name]
        if "*" in src:
            return src["*"]
    return "any"


def make_inputs(case: Case, set_index: int = 0) -> dict[str, np.ndarray]:
    """Op-level inputs by instance name, in the op's dtypes (bfloat16 as ml_dtypes.bfloat16)."""
    rng = np.random.default_rng(_seed(f"{case.id}#{set_index}"))
    out = {}
    for (name, port), shape in zip(case.present(), case.shape_sets()[set_index]):
        dtype = case.dtypes[port.type_var]
        if case.data is not None and name in case.data:
            out[name] = round_to(case.data[name], dtype)
        else:
            out[name] = gen(domain_of(case, port.name), dtype, shape, rng, case.dtypes)
    return out


def fetch_form(x: np.ndarray, dtype: str) -> np.ndarray:
    """How a ``dtype`` tensor crosses the Python boundary (bfloat16 and the narrow types as
    float32)."""
    x = np.asarray(x)
    return x.astype(np.float32) if dtype == "bfloat16" or dtype in NARROW else x


def _wire(dtype: str) -> str:
    """The type a ``dtype`` port is fed or fetched as."""
    return "float" if dtype == "bfloat16" or dtype in NARROW else dtype


def _unit_params(name: str, dtype: str | None = None) -> list:
    """Scale 1 (and a zero point 0 of ``dtype``, which sets QuantizeLinear's output type)."""
    params = [numpy_helper.from_array(np.array(1.0, np.float32), f"{name}_one")]
    if dtype is not None:
        params.append(numpy_helper.from_array(np.zeros((), np_dtype(dtype)), f"{name}_zero"))
    return params


def build_model(case: Case, inputs: dict[str, np.ndarray]):
    """The model, its feeds, and [(output name, logical dtype)]."""
    e = case.entry
    nodes, graph_inputs, feeds, initializers = [], [], {}, []
    op_inputs = []
    transposed = case.layout == "transposed"
    first_done = False
    consts = case.constants()
    for name, port in case.instances():
        if name is None:
            op_inputs.append("")
            continue
        dtype = case.dtypes[port.type_var]
        if name in consts:
            initializers.append(numpy_helper.from_array(np.asarray(consts[name]).astype(np_dtype(dtype)), name))
            op_inputs.append(name)
            continue
        data = inputs[name]
        cur = name
        wire_dtype = _wire(dtype)
        if dtype == "bfloat16":
            nodes.append(helper.make_node("Cast", [f"{name}_f32"], [cur], to=tensor_type("bfloat16"), name=f"mlx_cast_in_{name}"))
            cur = f"{name}_f32"
        elif dtype in NARROW:
            saturate = {"saturate": 0} if dtype in FLOAT8S else {}
            nodes.append(helper.make_node("QuantizeLinear", [f"{name}_f32", f"{name}_one", f"{name}_zero"], [cur],
                                          name=f"mlx_q_in_{name}", **saturate))
            initializers += _unit_params(name, dtype)
            cur = f"{name}_f32"
        feed = fetch_form(data, dtype)
        if transposed and not first_done:
            perm = list(range(feed.ndim))[::-1]
            nodes.append(helper.make_node("Transpose", [f"{cur}_t"], [cur], perm=perm, name=f"{CPU_HELPER_PREFIX}transpose_in"))
            cur = f"{cur}_t"
            feed = feed.transpose(perm)
        first_done = True
        feeds[cur] = np.array(feed, order="C", copy=True)  # (ascontiguousarray makes 0-d 1-d)
        dims = [f"{cur}_d{i}" for i in range(feed.ndim)] if case.layout == DYNAMIC else list(feed.shape)
        graph_inputs.append(helper.make_tensor_value_info(cur, tensor_type(wire_dtype), dims))
        op_inputs.append(name)
    while op_inputs and op_inputs[-1] == "":
        op_inputs.pop()

    op_outputs = ["" if oname is None else f"out_{oname}" for oname in case.output_slots()]
    graph_outputs, outs = [], []
    for i, (oname, port) in enumerate(case.output_instances()):
        dtype = case.dtypes[port.type_var]
        cur = f"out_{oname}"
        if dtype == "bfloat16":
            nodes.append(helper.make_node("Cast", [cur], [f"{cur}_f32"], to=tensor_type("float"), name=f"mlx_cast_out_{oname}"))
            cur = f"{cur}_f32"
        elif dtype in NARROW:
            nodes.append(helper.make_node("DequantizeLinear", [cur, f"{cur}_one"], [f"{cur}_f32"], name=f"mlx_dq_out_{oname}"))
            initializers += _unit_params(cur)
            cur = f"{cur}_f32"
        if transposed and i == 0:
            nodes.append(helper.make_node("Transpose", [cur], [f"{cur}_t"], name=f"{CPU_HELPER_PREFIX}transpose_out"))
            cur = f"{cur}_t"
        graph_outputs.append(helper.make_tensor_value_info(cur, tensor_type(_wire(dtype)), None))
        outs.append((cur, dtype))

    op_node = helper.make_node(e.op, op_inputs, op_outputs, name=OP_NODE, domain=e.domain, **case.attrs)
    graph = helper.make_graph(nodes + [op_node], re.sub(r"\W", "_", case.id)[:80], graph_inputs, graph_outputs,
                              initializer=initializers)
    if e.domain == "":
        imports = [helper.make_opsetid("", case.opset)]
    else:
        imports = [helper.make_opsetid("", CONTRIB_DEFAULT_OPSET), helper.make_opsetid(e.domain, 1)]
    model = helper.make_model(graph, opset_imports=imports, ir_version=IR_VERSION)
    return _topo_sorted(model), feeds, outs


def _topo_sorted(model):
    """Nodes in dependency order (the Cast/Transpose helpers may chain)."""
    produced = {i.name for i in model.graph.input} | {i.name for i in model.graph.initializer}
    pending, ordered = list(model.graph.node), []
    while pending:
        for n in pending:
            if all(i == "" or i in produced for i in n.input):
                ordered.append(n)
                produced.update(n.output)
                pending.remove(n)
                break
        else:
            raise ValueError("cycle in test model")
    del model.graph.node[:]
    model.graph.node.extend(ordered)
    return model


def reference(case: Case, inputs: dict[str, np.ndarray]) -> list[np.ndarray] | None:
    """numpy reference outputs in fetch form (None when the spec has none)."""
    if case.spec.ref is None:
        return None
    xs = []
    consts = case.constants()
    for name, port in case.instances():
        if name is None:
            xs.append(None)
            continue
        dtype = case.dtypes[port.type_var]
        # A constant as the model's initializer holds it (an int64 value in an int32 port wraps).
        x = np.asarray(consts[name]).astype(np_dtype(dtype)) if name in consts else np.asarray(inputs[name])
        xs.append(x.astype(np.float64) if dtype in FLOATS else x)
    # Trailing absent optionals are dropped, as in the node.
    while xs and xs[-1] is None:
        xs.pop()
    with np.errstate(all="ignore"):
        # `_n_outputs`: how many outputs the node has (Split's equal parts).
        res = case.spec.ref(xs, dict(case.attrs, _n_outputs=len(case.output_instances()), _opset=case.opset))
    res = res if isinstance(res, (list, tuple)) else [res]
    produced = {port.name for _, port in case.output_instances()}
    variadic = any(p.kind == "variadic" for p in case.entry.outputs)
    if not variadic and len(res) > len(case.entry.outputs):  # a newer opset's reference, with more outputs
        res = res[: len(case.entry.outputs)]
    if not variadic and len(res) == len(case.entry.outputs) and len(res) != len(produced):
        # A reference of every output: keep the ones the node produces.
        res = [r for r, port in zip(res, case.entry.outputs) if port.name in produced]
    out = []
    if len(res) != len(case.output_instances()):
        raise ValueError(f"reference gave {len(res)} outputs for {len(case.output_instances())}")
    for i, (r, (_, port)) in enumerate(zip(res, case.output_instances())):
        dtype = case.dtypes[port.type_var]
        with np.errstate(all="ignore"):
            r = fetch_form(round_to(np.asarray(r), dtype), dtype)
        if case.layout == "transposed" and i == 0:
            r = np.array(r.transpose(list(range(r.ndim))[::-1]), order="C")
        out.append(r)
    return out


# --------------------------------------------------------------------------------------------
# Sessions


def _session(model_bytes: bytes, providers, profile_prefix: str | None = None):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    if profile_prefix:
        so.enable_profiling = True
        so.profile_file_prefix = profile_prefix
    return ort.InferenceSession(model_bytes, so, providers=providers)


def is_not_implemented(err: Exception) -> bool:
    s = str(err)
    return "NOT_IMPLEMENTED" in s or "Could not find an implementation" in s or type(err).__name__ == "NotImplemented"


def kernel_events(profile_path: str) -> list[dict]:
    with open(profile_path) as f:
        events = json.load(f)
    return [e for e in events if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time")]


def profile_problems(events: list[dict], expect_provider: str, runs: int) -> list[str]:
    """Why the profile does not show the op node run by ``expect_provider`` (empty: it does)."""
    problems = []
    if expect_provider == EP:
        mlx = [e for e in events if e.get("args", {}).get("provider") == EP]
        strays = [e for e in events if e.get("args", {}).get("provider") != EP and not e["name"].startswith(CPU_HELPER_PREFIX)]
        if len(mlx) < runs:
            problems.append(f"profiling shows {len(mlx)} {EP} kernel event(s) for {runs} run(s)")
        if strays:
            problems.append("nodes ran outside MLX: " + ", ".join(
                f"{e['name']} on {e.get('args', {}).get('provider')} ({e.get('args', {}).get('op_name')})" for e in strays))
    else:
        # ORT may rewrite what runs on its CPU EP (CastLike is inlined into a Cast; a lossless
        # Cast pair is merged): require only that every kernel ran there.
        wrong = [e for e in events if e.get("args", {}).get("provider") != expect_provider]
        if len(events) < runs or wrong:
            problems.append(f"expected every kernel on {expect_provider}, profiling shows "
                            + (", ".join(f"{e['name']} on {e.get('args', {}).get('provider')}" for e in events) or "no kernels"))
        if expect_provider == CPU and not any(e["name"] == f"{OP_NODE}_kernel_time" for e in events) and not SELFCHECK:
            problems.append(f"{OP_NODE} did not run on {CPU}")
    return problems


# --------------------------------------------------------------------------------------------
# Comparison


def _describe_inputs(inputs: dict[str, np.ndarray], out_shape, index) -> str:
    parts = []
    for name, x in inputs.items():
        x = np.asarray(x)
        try:
            b = np.broadcast_to(x, out_shape)
            parts.append(f"{name}={b[index].item()!r}")
        except ValueError:
            parts.append(f"{name}(shape {x.shape})")
    return ", ".join(parts)


def compare(actual, expected, dtype: str, exact: bool, inputs: dict, label: str, scale: float = 1.0) -> str | None:
    """None when ``actual`` matches ``expected`` (fetch forms), else a precise description."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    if actual.dtype != expected.dtype:
        return f"{label}: dtype {actual.dtype}, expected {expected.dtype}"
    if actual.shape != expected.shape:
        return f"{label}: shape {actual.shape}, expected {expected.shape}"
    if actual.size == 0:
        return None
    is_float = expected.dtype.kind == "f"
    if not is_float or exact or dtype not in TOLERANCE:
        bad = ~((actual == expected) | (np.isnan(actual) & np.isnan(expected))) if is_float else actual != expected
        tol = "exact"
    else:
        rtol, atol = (t * scale for t in TOLERANCE[dtype])
        a64, e64 = actual.astype(np.float64), expected.astype(np.float64)
        finite = np.isfinite(e64)
        with np.errstate(all="ignore"):
            close = np.abs(a64 - e64) <= atol + rtol * np.abs(e64)
        same_special = (np.isnan(a64) & np.isnan(e64)) | (~finite & (a64 == e64))
        bad = ~np.where(finite, close & np.isfinite(a64), same_special)
        tol = f"rtol={rtol:g} atol={atol:g}"
    if not bad.any():
        return None
    idx = tuple(int(i) for i in np.argwhere(bad)[0])
    with np.errstate(all="ignore"):
        diff = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
        diff_bad = np.where(bad, np.nan_to_num(diff, nan=np.inf), -1)
    worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(diff_bad)), actual.shape)) if actual.ndim else ()
    msg = (f"{label}: {int(bad.sum())}/{bad.size} elements differ ({tol}); "
           f"max |diff| {float(diff_bad.max()):.6g} at {worst}: got {actual[worst].item()!r}, expected {expected[worst].item()!r}"
           f" [inputs there: {_describe_inputs(inputs, actual.shape, worst)}]; first at {idx}")
    if actual.size <= 24:
        msg += f"\n    got      {actual.tolist()}\n    expected {expected.tolist()}"
        msg += "".join(f"\n    {k} = {np.asarray(v).tolist()}" for k, v in inputs.items())
    return msg


# --------------------------------------------------------------------------------------------
# Running a case


@dataclass
class Outcome:
    oracle: str  # "cpu" | "numpy"
    problems: list[str] = field(default_factory=list)
    skipped: str | None = None


class Runner:
    """Runs cases: MLX-first sessions (or CPU-only in self-check mode) against the oracle."""

    runs = 3  # eager, then (ONNXRUNTIME_EP_MLX_COMPILE_AFTER=1) compiled, then the compiled replay

    def __init__(self, profile_dir: Path, selfcheck: bool = SELFCHECK, explain: Path | None = None):
        self.profile_dir = Path(profile_dir)
        self.selfcheck = selfcheck
        self.explain = Path(explain) if explain else None  # the EP's claim report (JSON lines)
        self._n = 0

    def _claim_report(self, offset: int) -> list[dict]:
        """The EP's claim decisions written since ``offset`` of the report file."""
        if self.explain is None or not self.explain.exists():
            return []
        with open(self.explain) as f:
            f.seek(offset)
            lines = f.read().splitlines()
        out = []
        for line in lines:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
        return out

    def _report_offset(self) -> int:
        return self.explain.stat().st_size if self.explain is not None and self.explain.exists() else 0

    def providers(self):
        return [CPU] if self.selfcheck else [EP, CPU]

    def check(self, case: Case) -> Outcome:
        # The EP reads the fusion setting at a session's first run; other suites keep theirs.
        previous = os.environ.get(NO_FUSE_ENV)
        os.environ[NO_FUSE_ENV] = "0" if case.fused else "1"
        try:
            return self._check(case)
        finally:
            if previous is None:
                os.environ.pop(NO_FUSE_ENV, None)
            else:
                os.environ[NO_FUSE_ENV] = previous

    def _check(self, case: Case) -> Outcome:
        sets = [make_inputs(case, i) for i in range(len(case.shape_sets()))]
        built = [build_model(case, inputs) for inputs in sets]
        model, outs = built[0][0], built[0][2]
        feeds = [b[1] for b in built]
        data = model.SerializeToString()
        out = Outcome(oracle="cpu")
        refs = [reference(case, inputs) for inputs in sets]
        exact = case.spec.exact

        # Oracle: one CPU session, run on every feed.
        expected, cpu_err = None, None
        if case.oracle == "auto":
            try:
                cpu = _session(data, [CPU])
                expected = [cpu.run(None, f) for f in feeds]
            except Exception as err:
                # No kernel (NOT_IMPLEMENTED), or ORT fails to rewrite a node it has no kernel
                # for (inlining a function body such as Clip's for bfloat16, or inserting
                # float16 -> float Casts at new opsets): numpy is the oracle.
                cpu_err = str(err).splitlines()[0][:300]
                if not is_not_implemented(err):
                    cpu_err = "ORT CPU could not load the model: " + cpu_err
        if expected is None:
            if refs[0] is None:
                out.problems.append(f"no oracle: ORT CPU has no kernel ({cpu_err}) and the spec has no numpy reference")
                return out
            expected, out.oracle = refs, "numpy"
        elif self.selfcheck and refs[0] is not None:
            # Validate the numpy reference against ORT's CPU EP.
            for k, (inputs, ref, cpu_out) in enumerate(zip(sets, refs, expected)):
                for (name, dtype), r, c in zip(outs, ref, cpu_out):
                    p = compare(r, c, dtype, exact, inputs, f"feed {k + 1}: numpy reference vs ORT CPU, output {name}", case.spec.tolerance_scale)
                    if p:
                        out.problems.append(p)

        if self.selfcheck and cpu_err is not None and case.expect_provider != CPU:
            out.skipped = f"self-check: ORT CPU has no kernel ({cpu_err}); the real run compares with numpy"
            return out

        # Under test: repeated runs of a feed exercise the EP's compiled path; the dynamic layout
        # then replays it on other shapes and comes back to the first.
        order = [0, 0, 1, 2, 2, 0][: 2 * len(sets)] if len(sets) > 1 else [0] * self.runs
        self._n += 1
        prefix = str(self.profile_dir / f"case{self._n}")
        offset = self._report_offset()
        try:
            sess = _session(data, self.providers(), profile_prefix=prefix)
        except Exception as err:
            out.problems.append(f"session creation failed: {type(err).__name__}: {err}")
            return out
        # ORT's Python binding otherwise re-creates a failed session on the CPU EP alone.
        sess.disable_fallback()
        declined = [d for d in self._claim_report(offset) if not d.get("claimed", True)]
        if not self.selfcheck and case.expect_provider == EP and sess.get_providers()[0] != EP:
            out.problems.append(f"session providers {sess.get_providers()}: {EP} is not first")
        results = []
        try:
            for k in order:
                results.append(sess.run(None, feeds[k]))
        except Exception as err:
            k = order[len(results)]
            shapes = {n: tuple(np.shape(v)) for n, v in feeds[k].items()}
            out.problems.append(f"run {len(results) + 1} (feed {k + 1}, shapes {shapes}) failed: {type(err).__name__}: {err}")
        path = sess.end_profiling()
        try:
            events = kernel_events(path)
        finally:
            try:
                os.remove(path)
            except OSError:
                pass
        expect = CPU if self.selfcheck else case.expect_provider
        placement = profile_problems(events, expect, len(results))
        if placement and declined:
            placement.append("the EP declined: " + "; ".join(
                f"'{d.get('node')}' ({d.get('op')}-{d.get('opset')}): {d.get('reason')}" for d in declined))
        out.problems += placement
        reported: dict[int, list[str]] = {}
        for r_i, (k, res) in enumerate(zip(order, results)):
            problems = []
            for (name, dtype), a, x in zip(outs, res, expected[k]):
                shapes = "" if len(sets) == 1 else f" (feed {k + 1})"
                p = compare(a, x, dtype, exact, sets[k], f"output {name} vs {out.oracle}{shapes}", case.spec.tolerance_scale)
                if p:
                    problems.append(p)
            if problems and reported.get(k) != problems:
                out.problems += [f"run {r_i + 1}, {p}" for p in problems]
            elif problems:
                out.problems.append(f"run {r_i + 1}: the same difference again")
            reported[k] = problems
        return out


def describe(case: Case) -> str:
    e = case.entry
    dom = e.domain or "ai.onnx"
    opset = f"opset {case.opset}" if case.opset else "com.microsoft 1"
    shapes = [f"{n}{tuple(s)}" for (n, _), s in zip(case.present(), case.shapes() or [])]
    return (f"{dom}.{e.op} (entry {e.key}, {opset}) dtypes {_combo_id(case.dtypes)}, variant "
            f"{case.variant.name} attrs {case.attrs}, layout {case.layout}, inputs {', '.join(shapes)}")

