"""com.microsoft PagedAttention: its tests live in tests/ep/test_paged_attention.py."""

from op_specs import SPECS, OpSpec

SPECS[("com.microsoft", "PagedAttention")] = OpSpec(
    ref=None,
    elsewhere=("tests/ep/test_paged_attention.py",
               "ORT has no CPU kernel (numpy reference), and packed batches need cumulative lengths, "
               "past lengths and block tables that agree with each other and the caches"),
)
