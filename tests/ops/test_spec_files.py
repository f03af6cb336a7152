"""The specs sit beside the ops: `tests/ops/specs/<path>.py` for `op-specs/src/<path>.rs`, same
names, same folders. A family folder (`op-specs/src/<family>/`) may keep its specs in one
`specs/<family>.py` or in one file per Rust file; `mod.rs` counts as the folder itself.

Where an entry is declared comes from the table (the JSON's "source") or, when the library does
not say, from the declarations in op-specs/src (`op_table.declaring_file`)."""

from __future__ import annotations

from pathlib import PurePosixPath

from op_specs import SPECS, SPECS_DIR, spec_files
from op_table import NOT_FAMILIES, OP_SPECS_SRC, REPO, declaring_file, load_table

TABLE = load_table()


def _spec_parts(path) -> tuple[str, ...]:
    """``specs/attention/gqa.py`` -> ("attention", "gqa")."""
    return path.resolve().relative_to(SPECS_DIR).with_suffix("").parts


def _rust_parts(source: str) -> tuple[str, ...] | None:
    """A declaring file, as the table or the fallback names it, relative to op-specs/src without
    `.rs` (a folder's mod.rs is the folder): "op-specs/src/attention/gqa.rs" -> ("attention",
    "gqa"). None when it is no .rs file under op-specs/src."""
    path = PurePosixPath(source.replace("\\", "/"))
    parts = path.parts
    src = OP_SPECS_SRC.relative_to(REPO).parts
    for i in range(len(parts) - len(src) + 1):
        if parts[i: i + len(src)] == src:
            parts = parts[i + len(src):]
            break
    else:
        if parts[:1] != ("src",):
            return None
        parts = parts[1:]
    if not parts or not parts[-1].endswith(".rs") or _machinery(parts):
        return None
    parts = parts[:-1] + (parts[-1][: -len(".rs")],)
    return parts[:-1] if parts[-1] == "mod" else parts


def _machinery(parts) -> bool:
    """op-specs/src's files that declare no ops (the table machinery, lib.rs, the generator)."""
    return parts[0] in NOT_FAMILIES or f"{parts[0]}.rs" in NOT_FAMILIES


def _rel(path) -> str:
    path = path.resolve()
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _spec_modules():
    return sorted(p for p in SPECS_DIR.rglob("*.py") if p.name != "__init__.py")


def test_every_spec_file_has_a_rust_family_file():
    """specs/<path>.py needs op-specs/src/<path>.rs, or the family folder op-specs/src/<path>/."""
    orphans = []
    for path in _spec_modules():
        parts = _spec_parts(path)
        rust = OP_SPECS_SRC.joinpath(*parts)
        is_family = not _machinery(parts) and parts[-1] != "mod" and (
            rust.with_suffix(".rs").is_file() or (rust.is_dir() and any(rust.rglob("*.rs"))))
        if not is_family:
            orphans.append(f"{_rel(path)}: no {_rel(rust)}.rs (or family folder)")
    assert not orphans, "spec files without a same-named Rust family file:\n  " + "\n  ".join(orphans)


def test_every_spec_sits_beside_its_op():
    """An entry's spec is registered by the spec file named as the Rust file declaring the entry
    (or, for a family folder, by the folder's one file)."""
    problems = []
    for e in TABLE.entries:
        source = declaring_file(e)
        rust = _rust_parts(source) if source else None
        if rust is None:
            said = f"the table says {source!r}" if source else "no single file of op-specs/src declares it"
            problems.append(f"{e.key}: cannot tell which op family declares it ({said})")
            continue
        files = spec_files((e.domain, e.op))
        if not files:
            continue  # test_ops.py::test_every_entry_has_a_spec reports it
        # The file itself, or an enclosing family folder kept as one file.
        allowed = {rust[:k] for k in range(1, len(rust) + 1)}
        if len(files) > 1 or not files[0].resolve().is_relative_to(SPECS_DIR) or _spec_parts(files[0]) not in allowed:
            problems.append(f"{e.key} (declared in {source}): its spec is registered in "
                            f"{', '.join(_rel(f) for f in files)}; "
                            f"it belongs in tests/ops/specs/{'/'.join(rust)}.py only")
    assert not problems, "specs not beside their ops:\n  " + "\n  ".join(sorted(set(problems)))


def test_every_spec_has_an_entry():
    """A spec whose op left the table is dead weight (or a typo in its key)."""
    ops = {(e.domain, e.op) for e in TABLE.entries}
    stale = [f"{d or 'ai.onnx'}.{op} ({', '.join(_rel(f) for f in spec_files((d, op)))})"
             for d, op in SPECS if (d, op) not in ops]
    assert not stale, f"specs for ops the table does not have: {stale}"
