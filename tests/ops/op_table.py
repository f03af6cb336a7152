"""The op table under test: read from the built library (``OrtMlxEp_OpTableJson``) when it
exports it, else parsed from ``docs/COVERAGE.md`` (ports then come from ONNX's schemas).

Also the dtype vocabulary shared by the harness: ONNX type names (``float``, ``bfloat16``, ...)
to ``TensorProto`` codes and numpy dtypes.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import ml_dtypes
import numpy as np
from onnx import TensorProto, defs

REPO = Path(__file__).resolve().parents[2]
COVERAGE_MD = REPO / "docs" / "COVERAGE.md"
_LIBRARY_NAME = "libonnxruntime_mlx_ep.dylib" if sys.platform == "darwin" else "libonnxruntime_mlx_ep.so"

# ONNX type name -> (TensorProto code, numpy dtype). bfloat16 is carried as ml_dtypes.bfloat16
# inside the harness, but fed to and read from ORT as float32 (see op_harness).
DTYPES: dict[str, tuple[int, np.dtype]] = {
    "float": (TensorProto.FLOAT, np.dtype(np.float32)),
    "uint8": (TensorProto.UINT8, np.dtype(np.uint8)),
    "int8": (TensorProto.INT8, np.dtype(np.int8)),
    "uint16": (TensorProto.UINT16, np.dtype(np.uint16)),
    "int16": (TensorProto.INT16, np.dtype(np.int16)),
    "int32": (TensorProto.INT32, np.dtype(np.int32)),
    "int64": (TensorProto.INT64, np.dtype(np.int64)),
    "bool": (TensorProto.BOOL, np.dtype(np.bool_)),
    "float16": (TensorProto.FLOAT16, np.dtype(np.float16)),
    "double": (TensorProto.DOUBLE, np.dtype(np.float64)),
    "uint32": (TensorProto.UINT32, np.dtype(np.uint32)),
    "uint64": (TensorProto.UINT64, np.dtype(np.uint64)),
    "bfloat16": (TensorProto.BFLOAT16, np.dtype(ml_dtypes.bfloat16)),
    # Narrow types: ORT's Python binding can neither feed nor fetch them; the harness crosses
    # the boundary through QuantizeLinear/DequantizeLinear helpers (see op_harness).
    "int4": (TensorProto.INT4, np.dtype(ml_dtypes.int4)),
    "uint4": (TensorProto.UINT4, np.dtype(ml_dtypes.uint4)),
    "float8e4m3fn": (TensorProto.FLOAT8E4M3FN, np.dtype(ml_dtypes.float8_e4m3fn)),
    "float8e4m3fnuz": (TensorProto.FLOAT8E4M3FNUZ, np.dtype(ml_dtypes.float8_e4m3fnuz)),
    "float8e5m2": (TensorProto.FLOAT8E5M2, np.dtype(ml_dtypes.float8_e5m2)),
    "float8e5m2fnuz": (TensorProto.FLOAT8E5M2FNUZ, np.dtype(ml_dtypes.float8_e5m2fnuz)),
}
FLOATS = ("float", "float16", "bfloat16", "double")
SIGNED_INTS = ("int8", "int16", "int32", "int64")
UNSIGNED_INTS = ("uint8", "uint16", "uint32", "uint64")
INTS = SIGNED_INTS + UNSIGNED_INTS
FLOAT8S = ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz")
NARROW = ("int4", "uint4") + FLOAT8S

# COVERAGE.md short names -> ONNX type names.
SHORT = {
    "f32": "float", "u8": "uint8", "i8": "int8", "u16": "uint16", "i16": "int16", "i32": "int32",
    "i64": "int64", "bool": "bool", "f16": "float16", "f64": "double", "u32": "uint32",
    "u64": "uint64", "bf16": "bfloat16", "i4": "int4", "u4": "uint4", "f8e4m3fn": "float8e4m3fn",
    "f8e4m3fnuz": "float8e4m3fnuz", "f8e5m2": "float8e5m2", "f8e5m2fnuz": "float8e5m2fnuz",
}


def tensor_type(name: str) -> int:
    return DTYPES[name][0]


def np_dtype(name: str) -> np.dtype:
    return DTYPES[name][1]


def type_str(name: str) -> str:
    """The ONNX schema spelling, ``tensor(float)``."""
    return f"tensor({name})"


@dataclass(frozen=True)
class Port:
    name: str
    type_var: str
    kind: str  # "required" | "optional" | "variadic"
    sequence: bool = False  # a sequence of tensors of type_var
    optional_value: bool = False  # an optional tensor of type_var


@dataclass(frozen=True)
class Attr:
    name: str
    kind: str  # "int" | "float" | "string" | "ints" | "floats" | "strings" | "tensor" | "graph"
    required: bool
    default: str | None


@dataclass
class Entry:
    domain: str  # "" or "com.microsoft"
    op: str
    since: int
    until: int | None
    family: str
    doc: str
    types: dict[str, list[str]]
    inputs: list[Port]
    outputs: list[Port]
    attributes: list[Attr]
    shape: str
    source: str = "json"
    extra: dict = field(default_factory=dict)
    # The Rust file declaring the entry, from the repo root ("op-specs/src/pool.rs"): the JSON's
    # "source" key when the library exports it, else found in op-specs/src (`declaring_file`).
    declared_in: str | None = None

    @property
    def key(self) -> str:
        """``Add-7``, ``com.microsoft.Gelu-1``, ``Softmax-1..12``."""
        dom = f"{self.domain}." if self.domain else ""
        rng = f"{self.since}..{self.until}" if self.until is not None else f"{self.since}"
        return f"{dom}{self.op}-{rng}"

    def attribute(self, name: str) -> Attr | None:
        return next((a for a in self.attributes if a.name == name), None)


# --------------------------------------------------------------------------------------------
# The library


def library_path() -> Path | None:
    """``ORT_MLX_EP_LIBRARY`` when set, else the workspace's release build (None if absent)."""
    override = os.environ.get("ORT_MLX_EP_LIBRARY")
    candidate = Path(override) if override else REPO / "target" / "release" / _LIBRARY_NAME
    return candidate if candidate.is_file() else None


_LIB_CACHE: dict[str, object] = {}


def _load(path: Path):
    key = str(path)
    if key not in _LIB_CACHE:
        try:
            _LIB_CACHE[key] = ctypes.CDLL(key, mode=os.RTLD_LOCAL)
        except OSError as e:  # pragma: no cover - reported by the caller
            _LIB_CACHE[key] = e
    return _LIB_CACHE[key]


def library_exports(path: Path | None, *names: str) -> dict[str, bool]:
    """Which of ``names`` the library exports (all False when it is missing or unloadable)."""
    if path is None:
        return {n: False for n in names}
    lib = _load(path)
    if isinstance(lib, OSError):
        return {n: False for n in names}
    out = {}
    for n in names:
        try:
            getattr(lib, n)
            out[n] = True
        except AttributeError:
            out[n] = False
    return out


def table_json_from_library(path: Path) -> list[dict]:
    lib = _load(path)
    if isinstance(lib, OSError):
        raise lib
    fn = lib.OrtMlxEp_OpTableJson
    fn.restype = ctypes.c_char_p
    fn.argtypes = []
    return json.loads(fn().decode())


def entries_from_json(rows: list[dict]) -> list[Entry]:
    return [segment for row in rows for segment in opset_segments(row)]


def opset_segments(row: dict) -> list[dict]:
    """One declaration row split where its interface changes: where an input appears or an
    attribute became one (a port's ``since``), where an input turns optional, and where a dtype
    gate opens or closes. Each segment is tested as
    an entry of its own (keyed by its opsets, as the rows were before they merged), with the
    inputs and dtypes of its opsets; attribute gates need no split (a case's opset is the lowest
    whose schema takes its attributes)."""
    since, until = int(row["since"]), row.get("until")
    cuts = {int(p.get("since", 0)) for p in row["inputs"]}
    cuts |= {int(p["required_until"]) + 1 for p in row["inputs"] if p.get("required_until") is not None}
    for gates in row.get("type_gates", {}).values():
        for g in gates:
            cuts.add(int(g["since"]))
            if g.get("until") is not None:
                cuts.add(int(g["until"]) + 1)
    starts = sorted(c for c in cuts if since < c and (until is None or c <= until))
    bounds = list(zip([since] + starts, [s - 1 for s in starts] + [until]))
    if len(bounds) == 1:
        return [_entry(row, since, until)]
    return [_entry(row, lo, hi) for lo, hi in bounds]


def _kind_at(port: dict, version: int) -> str:
    """A port's kind at ``version``: an optional input that was required up to an opset is
    required there."""
    until = port.get("required_until")
    return "required" if until is not None and version <= int(until) else port["kind"]


def _gate_covers(gate: dict, version: int) -> bool:
    return int(gate["since"]) <= version and (gate.get("until") is None or version <= int(gate["until"]))


def _entry(row: dict, since: int, until: int | None) -> Entry:
    types = {k: list(v) for k, v in row["types"].items()}
    for var, gates in row.get("type_gates", {}).items():
        closed = {t for g in gates if not _gate_covers(g, since) for t in g["types"]}
        opened = {t for g in gates if _gate_covers(g, since) for t in g["types"]}
        types[var] = [t for t in types[var] if t not in closed or t in opened]
    entry = _entry_of(row, since, until, types)
    # A type variable of slots the segment does not have yet (Pad-2's axes type) would only
    # multiply its cases.
    used = {p.type_var for p in entry.inputs + entry.outputs}
    entry.types = {k: v for k, v in entry.types.items() if k in used}
    return entry


def _entry_of(r: dict, since: int, until: int | None, types: dict[str, list[str]]) -> Entry:
    def exists(a: dict) -> bool:  # somewhere in the segment's opsets
        return ((a.get("until") is None or int(a["until"]) >= since)
                and (until is None or int(a.get("since", 0)) <= int(until)))

    return Entry(
            domain=r["domain"],
            op=r["op"],
            since=since,
            until=None if until is None else int(until),
            family=r.get("family", ""),
            doc=r.get("doc", ""),
            types=types,
            inputs=[Port(p["name"], p["type_var"], _kind_at(p, since), p.get("sequence", False), p.get("optional_value", False))
                    for p in r["inputs"]
                    if int(p.get("since", 0)) <= since],
            outputs=[Port(p["name"], p["type_var"], p["kind"], p.get("sequence", False), p.get("optional_value", False))
                     for p in r["outputs"]],
            attributes=[
                Attr(a["name"], a["kind"], bool(a.get("required", False)), a.get("default"))
                for a in r.get("attributes", []) if exists(a)
            ],
            shape=r.get("shape", ""),
            source="json",
            declared_in=r.get("source"),
        )


# --------------------------------------------------------------------------------------------
# Where an entry is declared

OP_SPECS_SRC = REPO / "op-specs" / "src"
# Not op families: the table machinery, the crate root, the coverage generator.
NOT_FAMILIES = ("table", "bin", "lib.rs")
_FN_START = re.compile(r"\n\s*(pub(\([^)]*\))?\s+)?fn\s")
_DECLARATIONS: dict[tuple[str, str], list[str]] | None = None


def family_files() -> list[Path]:
    """The Rust files that declare ops: every .rs under op-specs/src but the machinery."""
    return sorted(p for p in OP_SPECS_SRC.rglob("*.rs") if p.relative_to(OP_SPECS_SRC).parts[0] not in NOT_FAMILIES)


def _declarations() -> dict[tuple[str, str], list[str]]:
    """(domain, op) -> the files declaring it, read from the source: `#[onnx_op(... op = "Op" ...)]`
    (its `domain = "..."` in the same attribute), and the family macros' `name = "Op" since ...` /
    `name, name = "Op" over ...` lines (ai.onnx)."""
    global _DECLARATIONS
    if _DECLARATIONS is None:
        found: dict[tuple[str, str], list[str]] = {}
        for path in family_files():
            text = path.read_text()
            rel = str(path.relative_to(REPO))
            for m in re.finditer(r'\bop\s*=\s*"(\w+)"', text):
                # Only inside an `#[onnx_op(...)]` attribute: between it and its function.
                start = text.rfind("#[onnx_op(", 0, m.start())
                end = _FN_START.search(text, start) if start >= 0 else None
                if start < 0 or (end is not None and end.start() < m.start()):
                    continue
                block = text[start: end.start() if end else len(text)]
                dom = re.search(r'\bdomain\s*=\s*"([^"]*)"', block)
                found.setdefault((dom.group(1) if dom else "", m.group(1)), []).append(rel)
            for m in re.finditer(r'=\s*"(\w+)"\s+(?:since|over)\b', text):
                found.setdefault(("", m.group(1)), []).append(rel)
        _DECLARATIONS = {k: sorted(set(v)) for k, v in found.items()}
    return _DECLARATIONS


def declaring_file(entry: Entry) -> str | None:
    """The Rust file declaring ``entry``, from the repo root: the table's own word when the
    library exports it, else the one file of op-specs/src whose declarations name the op (None
    when none or several do)."""
    if entry.declared_in:
        return entry.declared_in
    files = _declarations().get((entry.domain, entry.op), [])
    return files[0] if len(files) == 1 else None


# --------------------------------------------------------------------------------------------
# docs/COVERAGE.md (the fallback, and the cross-check of the library's own table)

# Ports of com.microsoft entries (no ONNX schema to read them from), as declared in
# op-specs/src/contrib.rs.
@dataclass
class _Formal:
    name: str
    type_str: str
    option: str  # "required", "optional", "variadic"


@dataclass
class _Schema:
    """The part of an op schema the table checks, from ONNX's registry or (for ops only ORT
    defines: com.microsoft, SimplifiedLayerNormalization) ORT's."""

    inputs: list
    outputs: list
    type_constraints: list
    attributes: dict  # name -> kind ("int", "float", ...)


_OPTION = {"Single": "required", "Optional": "optional", "Variadic": "variadic"}


def _schema(op: str, since: int, domain: str) -> _Schema:
    if defs.has(op, domain):
        schema = defs.get_schema(op, since, domain)
        type_of = lambda p: p.type_str  # noqa: E731
    else:
        from onnxruntime.capi import onnxruntime_pybind11_state as ort_c

        candidates = [s for s in ort_c.get_all_operator_schema() if s.name == op and s.domain == domain and s.since_version <= since]
        if not candidates:
            raise KeyError(f"no ONNX or ORT schema for {domain or 'ai.onnx'}.{op} at opset {since}")
        schema = max(candidates, key=lambda s: s.since_version)
        type_of = lambda p: p.typeStr  # noqa: E731
    formal = lambda p: _Formal(p.name, type_of(p), _OPTION[str(p.option).rsplit(".", 1)[-1]])  # noqa: E731
    kinds = {n: str(a.type).rsplit(".", 1)[-1].lower() for n, a in schema.attributes.items()}
    return _Schema([formal(p) for p in schema.inputs], [formal(p) for p in schema.outputs], list(schema.type_constraints), kinds)


def _schema_ports(op: str, since: int, types: dict[str, list[str]], domain: str = ""):
    schema = _schema(op, since, domain)
    schema_vars = [p.type_str for p in list(schema.inputs) + list(schema.outputs)]
    # Schema variables the table names differently (Identity's V, Slice's Tind), in order, get
    # the table's variables no schema port names.
    spare = [v for v in types if v not in schema_vars]
    renamed: dict[str, str] = {}

    def var(type_str_: str) -> str:
        if type_str_ in types:
            return type_str_
        # A fixed type (Reshape's shape: tensor(int64)): the table's variable of exactly it.
        m = re.fullmatch(r"tensor\((\w+)\)", type_str_)
        if m:
            exact = [v for v, names in types.items() if names == [m.group(1)]]
            if exact:
                return exact[-1]
            return type_str_
        if type_str_ not in renamed and spare:
            renamed[type_str_] = spare.pop(0)
        if type_str_ not in renamed:
            # No spare one (And's bool output T1 is the table's T): the variable of the same types.
            allowed = {t[7:-1] for tc in schema.type_constraints if tc.type_param_str == type_str_ for t in tc.allowed_type_strs}
            same = [v for v, names in types.items() if set(names) <= allowed]
            if same:
                renamed[type_str_] = same[0]
        return renamed.get(type_str_, type_str_)

    ins = [Port(p.name, var(p.type_str), p.option) for p in schema.inputs]
    outs = [Port(p.name.rstrip("."), var(p.type_str), p.option) for p in schema.outputs]
    return ins, outs, schema


_GATE_LABEL = re.compile(r"\s*\((?:\d+\+|≤\d+|\d+–\d+|≤\d+, then an input|ignored)\)$")


def _ungated(text: str) -> str:
    """A COVERAGE.md name without its opset gate ("(12+)", "(≤8)", "(≤12, then an input)") or
    "(ignored)" label: ``ceil_mode=0 (10+)`` -> ``ceil_mode=0``."""
    text = text.strip()
    while (stripped := _GATE_LABEL.sub("", text)) != text:
        text = stripped
    return text


def declared_rows(lib: Path) -> list[Entry]:
    """The library's rows as declared (one per ``#[onnx_op]``, not split into segments): what
    COVERAGE.md lists."""
    return [_entry_of(r, int(r["since"]), r.get("until"), {k: list(v) for k, v in r["types"].items()})
            for r in table_json_from_library(lib)]


def parse_coverage(path: Path = COVERAGE_MD) -> list[Entry]:
    entries: list[Entry] = []
    family = ""
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            family = line[3:].strip()
            continue
        # Entry rows live under a family's heading (the summary tables above them count).
        if not family or not (line.startswith("| ai.onnx") or line.startswith("| com.microsoft")):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        domain, op, opsets, types_cell, attrs_cell, shape, declines = cells[:7]
        domain = "" if domain == "ai.onnx" else domain
        # "7+" (open), "7–8" (a range) or "10" (one opset: the doc writes since == until so).
        m = re.fullmatch(r"(\d+)(\+|[–-](\d+))?", opsets)
        if not m:
            raise ValueError(f"COVERAGE.md: bad opsets {opsets!r} in {line!r}")
        since = int(m.group(1))
        until = int(m.group(3)) if m.group(3) else (None if m.group(2) == "+" else since)
        types: dict[str, list[str]] = {}
        for part in types_cell.split(";"):
            var, names = part.split(":", 1)
            # "i8 (12+)": a dtype only some opsets of the row allow; the row's types are all of them.
            types[var.strip()] = [SHORT[_ungated(n)] for n in names.split(",")]
        attributes: list[Attr] = []
        if attrs_cell not in ("—", "-", ""):
            # ", " separates attributes, except inside a label ("(≤12, then an input)").
            for a in re.split(r", (?![^()]*\))", attrs_cell):
                a = _ungated(a)
                if a.endswith("(required)"):
                    attributes.append(Attr(a.split()[0], "", True, None))
                elif "=" not in a:  # optional, no default
                    attributes.append(Attr(a, "", False, None))
                else:
                    name, default = a.split("=", 1)
                    attributes.append(Attr(name, "", False, default))
        ins, outs, schema = _schema_ports(op, since, types, domain)
        attributes = [Attr(a.name, schema.attributes.get(a.name, "?"), a.required, a.default) for a in attributes]
        entries.append(
            Entry(domain, op, since, until, family, "", types, ins, outs, attributes, shape,
                  source="coverage", extra={"declines": declines})
        )
    if not entries:
        raise ValueError(f"no entries parsed from {path}")
    return entries


# --------------------------------------------------------------------------------------------


@dataclass
class TableInfo:
    entries: list[Entry]
    source: str  # "json" | "coverage"
    library: Path | None
    exports: dict[str, bool]
    json_error: str | None = None


_TABLE: TableInfo | None = None


def load_table() -> TableInfo:
    """The table, once per process: the library's JSON when exported, else COVERAGE.md."""
    global _TABLE
    if _TABLE is None:
        lib = library_path()
        exports = library_exports(lib, "CreateEpFactories", "OrtMlxEp_OpTableJson")
        error = None
        if exports["OrtMlxEp_OpTableJson"]:
            try:
                entries = entries_from_json(table_json_from_library(lib))
                _TABLE = TableInfo(entries, "json", lib, exports)
            except Exception as e:  # reported by test_table_json_is_readable
                error = f"{type(e).__name__}: {e}"
        if _TABLE is None:
            _TABLE = TableInfo(parse_coverage(), "coverage", lib, exports, error)
    return _TABLE
