"""Control flow (op-specs/src/control.rs): If, Loop, Scan. A one-node model cannot say what they
do (their bodies are graphs that read the enclosing scope), so they are tested end to end."""

from __future__ import annotations

from op_specs import SPECS, OpSpec

_WHERE = "tests/ep/test_control_flow.py"
SPECS[("", "If")] = OpSpec(
    ref=None,
    elsewhere=(_WHERE, "branches read values of the enclosing graph; both branches, nested Ifs, conditions from data "
                       "and shapes, declines; Silero VAD in tests/models"),
)
SPECS[("", "Loop")] = OpSpec(
    ref=None,
    elsewhere=(_WHERE, "for and while loops (conditions from data), zero and 150 trips, fed trip counts, scan outputs"),
)
SPECS[("", "Scan")] = OpSpec(
    ref=None,
    elsewhere=(_WHERE, "state and scan outputs, both input and output directions, output axes; Scan-8's batch axis and "
                       "sequence lengths"),
)
