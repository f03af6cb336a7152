"""Problem cases of the pytest slice that are known and not fixed yet, each with its reason.

``test_fuzz_slice`` fails on any problem not listed here, on a listed case that no longer has a
problem (the entry is stale: delete it), and on any death or hang whatever is listed: crashing the
host is never a known problem. Keep this list short and shrinking; every entry names the issue
or the reason it stays.
"""

from __future__ import annotations

_NAN_ORDER = "NaN through TopK: ORT's order is its selection algorithm's, not a function of the input"
_REFERENCE = ("checked against the numpy reference (ORT's CPU EP has no kernel for this op or dtype), which "
              "evaluates in float64 what the op computes in float32/float16 at extreme magnitudes")
_I32_DIMS = ("a zero-size input with a symbolic dim >= 2^31 known only at run time: MLX's dims are 32-bit "
             "and the EP core has no host path for empty results yet (issue 13)")
_POOL_PADS = ("pads >= kernel: ORT refuses the model at load; the EP still pools it because the op suite "
              "checks such dilated cases against numpy (issue 13: decline and move those cases)")

# case id -> (category, why it is still open)
KNOWN: dict[str, tuple[str, str]] = {
    "s20261201-2016": ("cpu_only_error", _POOL_PADS),
    "s20261201-2492": ("cpu_only_error", _POOL_PADS),
    "s20261201-716": ("cpu_only_error", "ORT's CPU EP aborts (SIGABRT) on this LSTM: no answer to match"),
    "s20261201-1634": ("cpu_only_error", "Resize-19 linear mode with scales ORT's ScalesValidation "
                                         "refuses at run time: the claim does not decline them yet"),
    "s20261201-1477": ("lost_fallback", _I32_DIMS),
    "s20261201-103": ("lost_fallback", _I32_DIMS),
    "s20261201-1388": ("wrong", "OneHot with NaN/fractional float indices on a dtype ORT has no kernel for: "
                                "the numpy reference differs from what ORT's kernels do, which the EP follows"),
    "s20261201-541": ("wrong", "ReduceLogSum of a row of signed zeros and denormals: ORT gives NaN, the EP "
                               "-inf; the summation order decides the sign of the near-zero sum"),
    "s20261201-1261": ("wrong", _REFERENCE),
    "s20261201-203": ("wrong", _NAN_ORDER),
    "s20261201-782": ("wrong", _NAN_ORDER),
    "s20261201-1617": ("wrong", _NAN_ORDER),
    "s20261201-2195": ("wrong", _REFERENCE),
    "s20261201-963": ("wrong", _REFERENCE),
    "s20261201-2314": ("wrong", _REFERENCE),
    "s20261201-133": ("wrong", _REFERENCE),
    "s20261201-326": ("wrong", _REFERENCE),
    "s20261201-1098": ("wrong", _REFERENCE),
}
