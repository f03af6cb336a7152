"""Sequences (op-specs/src/sequence.rs). A sequence cannot cross a fused node's edge (ORT passes
tensors), so a one-node model of a sequence op has no MLX case: they are tested end to end, in
graphs that turn tensors into sequences and back."""

from __future__ import annotations

from op_specs import SPECS, OpSpec

_WHY = ("a sequence cannot be a fused node's input or output; tested in graphs from tensors to tensors, against "
        "ORT's CPU EP, with positions from constants and from data, negative and out of range")
for _op in ["SequenceEmpty", "SequenceConstruct", "SequenceInsert", "SequenceAt", "SequenceErase", "SequenceLength",
            "SplitToSequence", "ConcatFromSequence"]:
    SPECS[("", _op)] = OpSpec(ref=None, elsewhere=("tests/ep/test_sequences.py", _WHY))
