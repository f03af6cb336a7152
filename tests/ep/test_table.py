"""The op table compiled into the cdylib is the whole table: `inventory` registrations in an
rlib can be dropped by the linker. docs/COVERAGE.md is generated from the table as op-specs'
own tests see it (and checked for staleness there), so the two must list the same entries."""

import ctypes
import json
import os
import re
from pathlib import Path

from onnxruntime_ep_mlx import library_path

COVERAGE = Path(__file__).resolve().parents[2] / "docs" / "COVERAGE.md"


def library_table():
    lib = ctypes.CDLL(library_path(), mode=os.RTLD_LOCAL)
    lib.OrtMlxEp_OpTableJson.restype = ctypes.c_char_p
    return json.loads(lib.OrtMlxEp_OpTableJson().decode())


def opsets(entry):
    since, until = entry["since"], entry["until"]
    if until is None:
        return f"{since}+"
    return f"{since}" if since == until else f"{since}–{until}"


def test_library_table_equals_the_generated_coverage():
    from_library = {(e["domain"] or "ai.onnx", e["op"], opsets(e)) for e in library_table()}
    # Entry rows: a domain, then an op name (the per-domain summary rows hold counts there).
    rows = re.findall(r"^\| (ai\.onnx(?:\.ml)?|com\.microsoft) \| ([A-Za-z]\w*) \| ([^|]+) \|", COVERAGE.read_text(), re.M)
    from_docs = {(domain, op, span.strip()) for domain, op, span in rows}
    assert len(from_docs) >= 80
    assert from_library == from_docs, (from_library ^ from_docs)


def test_table_json_describes_every_entry():
    for entry in library_table():
        assert entry["outputs"] and entry["types"] and entry["doc"], entry
        for port in entry["inputs"] + entry["outputs"]:
            assert port["type_var"] in entry["types"], entry
