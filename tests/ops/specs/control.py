"""Control flow (op-specs/src/control.rs): If. A one-node model cannot say what an If does (its
branches are graphs that read the enclosing scope), so it is tested end to end instead."""

from __future__ import annotations

from op_specs import SPECS, OpSpec

SPECS[("", "If")] = OpSpec(
    ref=None,
    elsewhere=("tests/ep/test_control_flow.py",
               "branches read values of the enclosing graph; both branches, nested Ifs, conditions from data and "
               "shapes, declines; Silero VAD in tests/models"),
)
