"""com.microsoft PackedMultiHeadAttention: its tests live in tests/ep/test_packed_mha.py."""

from op_specs import SPECS, OpSpec

SPECS[("com.microsoft", "PackedMultiHeadAttention")] = OpSpec(
    ref=None,
    elsewhere=("tests/ep/test_packed_mha.py",
               "ORT has no CPU kernel (numpy reference), and packed batches need cumulative lengths "
               "and token offsets that agree with each other"),
)
