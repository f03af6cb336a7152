"""Seeded fuzz cases: a well-formed op-suite case of one table entry, then edge mutations.

A case is a pure function of ``(seed, entry key, k)``, id ``s<seed>-<entry key>-<k>`` (e.g.
``s1-Softmax-13-4``): the ``k``-th case of that table entry for that seed, whatever else the table
holds, so adding an op never renames another op's cases. It takes one of the op suite's own cases
for the entry as a base (``op_harness.build_cases``: valid dtypes, shapes, host-known inputs and
opset) and applies a few mutations drawn from ``np.random.default_rng((S, crc32(key), k))``.
A run of ``K`` rounds is cases ``0..K-1`` of every entry (``tasks``), round by round:

- ``attr``: an attribute the entry declares set to an edge (axis at -rank/rank, huge and
  negative ints, every enum value the schema lists, NaN/inf floats, lists too long or empty);
- ``host``: an element of a host-known input (axes, starts/ends/steps, k, pads, repeats,
  shapes, scales) set to an edge;
- ``shape``: a zero-size dim (possibly with another dim past 2^31), a size-1 axis, a new leading
  1, 0-d inputs, or a broadcasting pair;
- ``values``: NaN/inf/-0.0/denormals/float16 max, integer extremes, out-of-range indices,
  zero divisors;
- ``chain``: a Relu/Neg/Identity/Cast/Transpose before or after the op, and sometimes the op
  again after it;
- ``fed_constants``: host-known inputs as graph inputs instead of initializers;
- ``symbolic``: symbolic dims, with the session re-run at two more shapes.

The model and feeds are built by the op suite's ``build_model`` (bfloat16 Casts, transposed
layouts), then rewritten for chains, fed constants and symbolic dims.
"""

from __future__ import annotations

import dataclasses
import re
import zlib
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from op_harness import DYNAMIC, OP_NODE, Case, build_cases, build_model, domain_of, make_inputs
from op_specs import gen
from op_table import FLOATS, INTS, Entry, load_table

from . import edges

HUGE_DIM = 2**31 + 7  # one past MLX's int32 dims; only ever next to a zero-size dim
MUTATIONS = ("attr", "host", "shape", "values", "chain", "fed_constants", "symbolic")


@dataclass
class FuzzCase:
    id: str
    seed: int
    k: int  # the entry's k-th case for this seed
    entry: Entry
    base: Case  # the op suite's case after attribute/host-input mutations
    mutations: list[str]
    model: onnx.ModelProto
    feeds: list[dict[str, np.ndarray]]  # one per distinct input set
    op_inputs: list[dict[str, np.ndarray]]  # op-level inputs per set (numpy reference)
    outputs: list[tuple[str, str]]  # (graph output, dtype whose tolerance applies)
    order: list[int]  # feed index of each MLX run
    chained: bool = False
    exact: bool = False
    tolerance_scale: float = 1.0
    notes: list[str] = field(default_factory=list)

    @property
    def op(self) -> str:
        return self.entry.key

    def describe(self) -> str:
        shapes = "; ".join(", ".join(f"{k}{tuple(np.shape(v))}" for k, v in f.items()) for f in self.feeds)
        return (f"{self.id}: {self.entry.key} (base {self.base.id}, opset {self.base.opset or 'contrib'}) "
                f"mutations [{'; '.join(self.mutations) or 'none'}] feeds [{shapes}] runs {self.order}")


def case_id(seed: int, key: str, k: int) -> str:
    return f"s{seed}-{key}-{k}"


def parse_case_id(text: str) -> tuple[int, str, int]:
    """``s<seed>-<entry key>-<k>`` -> (seed, key, k); the key may itself hold dashes."""
    m = re.fullmatch(r"s(\d+)-(.+)-(\d+)", text.strip())
    if not m:
        raise ValueError(f"not a fuzz case id (s<seed>-<entry key>-<k>, e.g. s1-Softmax-13-4): {text!r}")
    return int(m.group(1)), m.group(2), int(m.group(3))


# --------------------------------------------------------------------------------------------
# The table and the op suite's cases


@lru_cache(maxsize=1)
def entries() -> tuple[Entry, ...]:
    return tuple(sorted(load_table().entries, key=lambda e: e.key))


@lru_cache(maxsize=1)
def bases() -> dict[str, list[Case]]:
    """Runnable op-suite cases per entry key, in a fixed order."""
    out: dict[str, list[Case]] = {e.key: [] for e in entries()}
    for c in build_cases(list(entries())):
        if not c.skip:
            out[c.entry.key].append(c)
    for v in out.values():
        v.sort(key=lambda c: c.id)
    return out


def entry_by_key(key: str) -> Entry:
    for e in entries():
        if e.key == key:
            return e
    raise LookupError(f"no op-table entry {key!r} (the table has {len(entries())}; keys like 'Softmax-13')")


def case_rng(seed: int, key: str, k: int, *extra: int) -> np.random.Generator:
    """The case's own stream: a function of (seed, key, k) only (crc32, not Python's salted hash)."""
    return np.random.default_rng([seed, zlib.crc32(key.encode()), k, *extra])


@lru_cache(maxsize=1)
def unfuzzed() -> dict[str, str]:
    """Entries the fuzzer cannot start from, with the op suite's reason: every one of their op-suite
    cases is skipped there (tested in a file of its own, e.g. PagedAttention's consistent caches)."""
    out = {}
    for c in build_cases(list(entries())):
        if c.skip and not bases()[c.entry.key]:
            out.setdefault(c.entry.key, c.skip)
    return out


def tasks(seed: int, rounds: int, start: int = 0, op: str | None = None) -> list[tuple[int, str, int]]:
    """Cases ``start..start+rounds-1`` of every entry (whose key matches the regex ``op``) that has
    an op-suite case to start from, round by round: (seed, key, k) triples."""
    pattern = re.compile(op) if op else None
    keys = [e.key for e in entries() if bases()[e.key] and (pattern is None or pattern.search(e.key))]
    return [(seed, key, k) for k in range(start, start + rounds) for key in keys]


# --------------------------------------------------------------------------------------------
# Case construction


def make_case(seed: int, key: str, k: int) -> FuzzCase:
    entry = entry_by_key(key)
    pool = bases()[entry.key]
    if not pool:
        raise LookupError(f"{entry.key}: the op suite has no runnable case to start from")
    rng = case_rng(seed, key, k)
    base = pool[int(rng.integers(len(pool)))]
    try:
        return _make(seed, k, entry, base, rng, _choose_mutations(rng, base))
    except (ValueError, TypeError, IndexError, KeyError, MemoryError, ArithmeticError) as err:
        # A mutation the op suite's model building cannot express (a transposed 0-d input, an
        # attribute list ONNX cannot type, an attribute its constants divide by, as
        # MatMulNBits' bits=0): the same base with value edges only, still seeded.
        fc = _make(seed, k, entry, base, case_rng(seed, key, k, 1), {"values"})
        fc.mutations.insert(0, f"(generator fell back to values only: {type(err).__name__}: {str(err)[:80]})")
        return fc


def _make(seed: int, k: int, entry: Entry, base: Case, rng, chosen: set[str]) -> FuzzCase:
    notes: list[str] = []
    case = base
    if "attr" in chosen:
        case = _mutate_attrs(rng, case, notes)
    if "host" in chosen:
        case = _mutate_host(rng, case, notes)

    sets = [make_inputs(case, i) for i in range(len(case.shape_sets()))]
    if "shape" in chosen and len(sets) == 1:
        sets[0] = _mutate_shape(rng, case, sets[0], notes)
    if "symbolic" in chosen and len(sets) == 1:
        sets += _more_shapes(rng, case, sets[0], notes)
    if "values" in chosen:
        sets = [_mutate_values(case_rng(seed, entry.key, k, 2, j), case, s, notes if j == 0 else None)
                for j, s in enumerate(sets)]

    built = [build_model(case, s) for s in sets]
    model, outs = built[0][0], list(built[0][2])
    feeds = [b[1] for b in built]
    symbolic = len(sets) > 1 or case.layout == DYNAMIC

    chained = False
    if "chain" in chosen:
        chained = _chain(rng, case, model, feeds, outs, notes)
    if "fed_constants" in chosen:
        _feed_constants(model, feeds, notes)
    if symbolic:
        _symbolic_dims(model)
        if case.layout != DYNAMIC and len(sets) == 1:
            notes.append("symbolic dims")

    order = [0, 0, 0] if len(feeds) == 1 else [k for i in range(len(feeds)) for k in (i, i)] + [0]
    return FuzzCase(
        id=case_id(seed, entry.key, k), seed=seed, k=k, entry=entry, base=case, mutations=notes,
        model=model, feeds=feeds, op_inputs=sets, outputs=outs, order=order, chained=chained,
        exact=case.spec.exact, tolerance_scale=case.spec.tolerance_scale * (4.0 if chained else 1.0),
    )


def _choose_mutations(rng, base: Case) -> set[str]:
    has_consts = any(v is not None for v in base.constants().values())
    odds = {"attr": 0.35 if base.entry.attributes else 0.0, "host": 0.4 if has_consts else 0.0,
            "shape": 0.3, "values": 0.5, "chain": 0.25, "fed_constants": 0.15 if has_consts else 0.0,
            "symbolic": 0.2}
    chosen = {m for m in MUTATIONS if rng.random() < odds[m]}
    if not chosen & {"attr", "host", "shape", "values"}:
        chosen.add("values")
    return chosen


def _first_rank(case: Case) -> int:
    shapes = case.shapes() or []
    return len(shapes[0]) if shapes else 2


def _mutate_attrs(rng, case: Case, notes: list[str]) -> Case:
    attrs = case.attrs
    rank = _first_rank(case)
    candidates = [a for a in case.entry.attributes if a.kind in ("int", "ints", "float", "floats", "string", "strings")]
    if not candidates:
        return case
    for _ in range(1 + int(rng.random() < 0.3)):
        a = candidates[int(rng.integers(len(candidates)))]
        if a.name in attrs and rng.random() < 0.1 and not a.required:
            del attrs[a.name]
            notes.append(f"attr {a.name} removed")
            continue
        cur = attrs.get(a.name)
        if a.kind == "int":
            v = edges.attr_int(rng, a.name, rank, cur)
        elif a.kind == "ints":
            v = edges.attr_ints(rng, a.name, rank, cur)
        elif a.kind == "float":
            v = edges.attr_float(rng)
        elif a.kind == "floats":
            v = edges.attr_floats(rng, cur)
        else:
            opset = case.opset or 1
            values = edges.enum_values(case.entry.domain, case.entry.op, opset, a.name, a.default)
            if a.kind == "string":
                if a.name == "equation":  # Einsum: a wrong, empty or spaced equation
                    values = [cur or "", "", "ij->ji", " ab , bc -> ac ", "...i->i", "a->aa"]
                v = values[int(rng.integers(len(values)))]
            else:
                v = list(cur) if cur else ["Sigmoid", "Tanh", "Tanh"]
                v[int(rng.integers(len(v)))] = values[int(rng.integers(len(values)))]
        attrs[a.name] = v
        notes.append(f"attr {a.name}={v!r}")
    variant = dataclasses.replace(case.variant, attrs=attrs)
    return dataclasses.replace(case, variant=variant)


def _mutate_host(rng, case: Case, notes: list[str]) -> Case:
    consts = case.constants()
    present = [k for k, v in consts.items() if v is not None and np.asarray(v).size > 0]
    if not present:
        return case
    name = present[int(rng.integers(len(present)))]
    arr = np.array(consts[name], copy=True)
    flat = arr.reshape(-1)
    i = int(rng.integers(flat.size))
    rank = _first_rank(case)
    if arr.dtype.kind in "iu":
        v = edges.host_int(rng, case.entry.op, name, rank, int(flat[i]))
        info = np.iinfo(arr.dtype)
        v = min(max(v, int(info.min)), int(info.max))
    elif arr.dtype.kind == "f":
        v = edges.host_float(rng)
    else:
        return case
    flat[i] = v
    consts[name] = arr
    notes.append(f"host {name}[{i}]={v!r} -> {arr.tolist()}")
    variant = dataclasses.replace(case.variant, constants=consts)
    return dataclasses.replace(case, variant=variant)


def _regen(rng, case: Case, port, shape) -> np.ndarray:
    dtype = case.dtypes[port.type_var]
    if int(np.prod(shape, dtype=np.float64)) > 2**22:
        raise MemoryError(f"refusing to generate {port.name}{tuple(shape)}")
    try:
        return gen(domain_of(case, port.name), dtype, shape, rng, case.dtypes)
    except (ValueError, AssertionError):  # an op-specific domain that needs its own shapes
        # (distinct indices, MultiHeadAttention's [batch] mask lengths)
        return gen("any", dtype, shape, rng, case.dtypes)


def _aligned_peers(inputs: dict, shapes: dict, first: str, axis: int) -> list[str]:
    """Inputs whose dim (aligned from the right, as broadcasting aligns) at ``first``'s ``axis``
    has the same size, so a change there keeps them compatible."""
    r = len(shapes[first])
    size = shapes[first][axis]
    from_right = r - axis
    out = []
    for n, s in shapes.items():
        if len(s) >= from_right and s[len(s) - from_right] == size and (size != 1 or n == first):
            out.append(n)
    return out


def _mutate_shape(rng, case: Case, inputs: dict, notes: list[str]) -> dict:
    ports = dict(case.present())
    if not ports:
        return inputs
    shapes = {n: list(np.shape(inputs[n])) for n in ports}
    first = next(iter(ports))
    r = len(shapes[first])
    kinds = ["prepend_one"] + ([] if case.layout == "transposed" else ["scalar"])
    if r >= 1:
        kinds += ["zero_dim", "one_dim", "zero_dim"]
    if r >= 2:
        kinds += ["zero_huge", "zero_huge"]
    if len(ports) > 1:
        kinds += ["broadcast_one"]
    kind = kinds[int(rng.integers(len(kinds)))]
    new = {n: list(s) for n, s in shapes.items()}
    if kind in ("zero_dim", "one_dim", "zero_huge"):
        # zero_huge: the zero outside the huge dim, so CPU kernels looping over outer dims stop
        # at once instead of spinning 2^31 times over nothing.
        axis = int(rng.integers(r - 1 if kind == "zero_huge" else r))
        for n in _aligned_peers(inputs, shapes, first, axis):
            new[n][len(new[n]) - (r - axis)] = 0 if kind != "one_dim" else 1
        if kind == "zero_huge":
            other = axis + 1 + int(rng.integers(r - 1 - axis))
            for n in _aligned_peers(inputs, shapes, first, other):
                # Only beside the zero: a huge dim of a non-empty tensor would allocate gigabytes.
                if 0 in new[n]:
                    new[n][len(new[n]) - (r - other)] = HUGE_DIM
    elif kind == "prepend_one":
        for n, s in shapes.items():
            if len(s) == r:
                new[n] = [1] + s
    elif kind == "scalar":
        for n, s in shapes.items():
            if s == shapes[first]:
                new[n] = []
    else:  # broadcast_one: a second input gets a size-1 axis
        others = [n for n in ports if n != first and shapes[n]]
        if others:
            n = others[int(rng.integers(len(others)))]
            new[n][int(rng.integers(len(new[n])))] = 1
    out = dict(inputs)
    for n in ports:
        if new[n] != shapes[n]:
            out[n] = _regen(rng, case, ports[n], new[n])
    notes.append(f"shape {kind}: " + ", ".join(f"{n}{tuple(new[n])}" for n in ports))
    return out


def _more_shapes(rng, case: Case, inputs: dict, notes: list[str]) -> list[dict]:
    """One or two more input sets for the same symbolic-dim session: one axis resized."""
    ports = dict(case.present())
    if not ports:
        return []
    shapes = {n: list(np.shape(inputs[n])) for n in ports}
    first = next(iter(ports))
    r = len(shapes[first])
    if r == 0 or max(max(s, default=0) for s in shapes.values()) > 64:
        return []
    sets = []
    for _ in range(1 + int(rng.random() < 0.5)):
        axis = int(rng.integers(r))
        size = shapes[first][axis]
        pool = [v for v in (1, size + 1, 2 * size + 1, 0) if v != size and v <= 64]
        new_size = pool[int(rng.integers(len(pool)))]
        out = dict(inputs)
        for n in _aligned_peers(inputs, shapes, first, axis):
            s = list(shapes[n])
            s[len(s) - (r - axis)] = new_size
            out[n] = _regen(rng, case, ports[n], s)
        sets.append(out)
        notes.append(f"symbolic re-run: axis {axis} of {first} {size}->{new_size}")
    return sets


def _mutate_values(rng, case: Case, inputs: dict, notes: list[str] | None) -> dict:
    ports = dict(case.present())
    names = [n for n in ports if np.size(inputs[n])]
    if not names:
        return inputs
    picked = [n for n in names if rng.random() < 0.6] or [names[int(rng.integers(len(names)))]]
    out = dict(inputs)
    for n in picked:
        port = ports[n]
        dtype = case.dtypes[port.type_var]
        x = inputs[n]
        if dtype in INTS and port.name in edges.INDEX_PORTS:
            out[n], what = edges.out_of_range_indices(rng, dtype, x), "out-of-range indices"
        elif dtype in INTS and case.entry.op in ("Div", "Mod") and port.name == "B":
            out[n], what = edges.zero_divisors(rng, dtype, x), "zero divisors"
        elif dtype in INTS and (case.entry.op, port.name) in edges.SIZE_PORTS:
            continue
        elif dtype in FLOATS:
            frac = [0.1, 0.3, 1.0][int(rng.integers(3))]
            mixing = edges.is_mixing(case.entry.family, case.entry.op)
            out[n] = edges.float_values(rng, dtype, x, frac, mixing)
            what = f"{'quiet' if mixing else 'special'} floats {frac:.0%}"
        elif dtype in INTS:
            out[n], what = edges.int_values(rng, dtype, x, 0.3), "integer extremes"
        elif dtype == "bool":
            out[n], what = np.full_like(x, bool(rng.integers(2))), "all one bool"
        else:
            continue
        if notes is not None:
            notes.append(f"values {n}: {what}")
    return out


# --------------------------------------------------------------------------------------------
# Model rewrites


_TYPE_NAME = {v: k for k, v in {
    "float": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "double": TensorProto.DOUBLE,
    "bfloat16": TensorProto.BFLOAT16, "int8": TensorProto.INT8, "int16": TensorProto.INT16,
    "int32": TensorProto.INT32, "int64": TensorProto.INT64, "uint8": TensorProto.UINT8,
    "uint16": TensorProto.UINT16, "uint32": TensorProto.UINT32, "uint64": TensorProto.UINT64,
    "bool": TensorProto.BOOL}.items()}


def _connectors(elem: int, opset: int) -> list[str]:
    """Ops that take and return ``elem`` at ``opset`` (plus Cast, which returns float)."""
    t = _TYPE_NAME.get(elem, "")
    out = ["Identity", "Transpose", "Cast"]
    if t in ("float", "float16", "double") or (opset >= 14 and t in ("int8", "int16", "int32", "int64", "bfloat16")):
        out.append("Relu")
    if t in ("float", "float16", "double", "int8", "int16", "int32", "int64") or (opset >= 13 and t == "bfloat16"):
        out.append("Neg")
    return out


def _model_opset(model) -> int:
    return next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


def _chain(rng, case: Case, model, feeds: list[dict], outs: list, notes: list[str]) -> bool:
    g = model.graph
    opset = _model_opset(model)
    op_node = next(n for n in g.node if n.name == OP_NODE)
    inputs = {i.name: i for i in g.input}
    changed = False

    # Before: a connector between the first fed input and the op.
    x = op_node.input[0] if op_node.input else ""
    if x in inputs and rng.random() < 0.5:
        vi = inputs[x]
        elem = vi.type.tensor_type.elem_type
        kinds = [k for k in _connectors(elem, opset) if k != "Cast"]
        kind = kinds[int(rng.integers(len(kinds)))]
        pre = f"{x}_pre"
        vi.name = pre
        attrs = {}
        if kind == "Transpose":
            for f in feeds:
                f[pre] = np.array(np.transpose(f.pop(x)), order="C")
            dims = list(vi.type.tensor_type.shape.dim)[::-1]
            copies = [onnx.TensorShapeProto.Dimension() for _ in dims]
            for c, d in zip(copies, dims):
                c.CopyFrom(d)
            del vi.type.tensor_type.shape.dim[:]
            vi.type.tensor_type.shape.dim.extend(copies)
        else:
            for f in feeds:
                f[pre] = f.pop(x)
        g.node.insert(0, helper.make_node(kind, [pre], [x], name="fz_pre", **attrs))
        notes.append(f"chain: {kind} -> op")
        changed = True

    # After: a connector on the first output, then (sometimes) the op again.
    out0 = g.output[0]
    elem = out0.type.tensor_type.elem_type
    kinds = _connectors(elem, opset)
    kind = kinds[int(rng.integers(len(kinds)))]
    if changed and rng.random() < 0.5:
        return changed
    post = f"{out0.name}_post"
    attrs = {"to": TensorProto.FLOAT} if kind == "Cast" else {}
    g.node.append(helper.make_node(kind, [out0.name], [post], name="fz_post", **attrs))
    new_elem = TensorProto.FLOAT if kind == "Cast" else elem
    final = post
    again = (kind != "Cast" and op_node.output and op_node.output[0] == out0.name
             and op_node.input and _input_elem(g, op_node.input[0]) == elem and rng.random() < 0.6)
    if again:
        second = onnx.NodeProto()
        second.CopyFrom(op_node)
        second.name = "fz_again"
        second.input[0] = post
        for i, o in enumerate(second.output):
            if o:
                second.output[i] = f"{o}_again"
        g.node.append(second)
        final = second.output[0]
    g.output.remove(out0)
    g.output.insert(0, helper.make_tensor_value_info(final, new_elem, None))
    outs[0] = (final, outs[0][1])
    notes.append(f"chain: op -> {kind}" + (" -> op" if again else ""))
    return True


def _input_elem(g, name: str) -> int | None:
    for i in g.input:
        if i.name == name:
            return i.type.tensor_type.elem_type
    for n in g.node:
        if name in n.output and n.name == "fz_pre":
            return _input_elem(g, n.input[0])
    return None


def _feed_constants(model, feeds: list[dict], notes: list[str]) -> None:
    """Initializers the op reads become graph inputs, fed the same values on every run."""
    g = model.graph
    used = {i for n in g.node for i in n.input}
    moved = [t for t in g.initializer if t.name in used]
    for t in moved:
        arr = numpy_helper.to_array(t)
        g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(arr.shape)))
        for f in feeds:
            f[t.name] = arr
        g.initializer.remove(t)
    if moved:
        notes.append("fed constants: " + ", ".join(t.name for t in moved))


def _symbolic_dims(model) -> None:
    for vi in model.graph.input:
        for i, d in enumerate(vi.type.tensor_type.shape.dim):
            d.Clear()
            d.dim_param = f"{vi.name}_d{i}"

