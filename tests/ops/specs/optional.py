"""Optional tensors (op-specs/src/optional.rs): an optional cannot cross a fused node's edge, so
they are tested end to end, in graphs from tensors to tensors."""

from __future__ import annotations

from op_specs import SPECS, OpSpec

for _op in ["Optional", "OptionalHasElement", "OptionalGetElement"]:
    SPECS[("", _op)] = OpSpec(ref=None, elsewhere=("tests/ep/test_sequences.py",
                                                   "an optional cannot be a fused node's input or output"))
