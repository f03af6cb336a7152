"""Comparisons (op-specs/src/compare.rs): Equal, Greater, GreaterOrEqual, Less, LessOrEqual."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _binary, _float_only

for _op, _f in (("Equal", np.equal), ("Greater", np.greater), ("GreaterOrEqual", np.greater_equal),
                ("Less", np.less), ("LessOrEqual", np.less_equal)):
    SPECS[("", _op)] = OpSpec(
        ref=_binary(_f), exact=True, domains={"*": "ties"},
        variants=[Variant(), Variant("special", when=_float_only, domains={"*": "special"})],
    )
