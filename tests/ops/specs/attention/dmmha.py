"""com.microsoft DecoderMaskedMultiHeadAttention: its tests live in tests/ep/test_dmmha.py."""

from op_specs import SPECS, OpSpec

SPECS[("com.microsoft", "DecoderMaskedMultiHeadAttention")] = OpSpec(
    ref=None,
    elsewhere=("tests/ep/test_dmmha.py",
               "decode steps over a shared past buffer with past_sequence_length, beam search through "
               "cache_indirection and cross attention need inputs that agree across steps"),
)
