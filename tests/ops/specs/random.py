"""Random generators (op-specs/src/random.rs). MLX cannot repeat ORT's random stream, so no
case can compare values with ORT's CPU EP: tests/ep/test_random.py tests the distributions,
shapes, types and the seed contract."""

from __future__ import annotations

from op_specs import SPECS, OpSpec

_WHY = "MLX cannot repeat ORT's random stream; distributions, shapes, types and seeds are tested instead"
for _op in ["RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli", "Multinomial"]:
    SPECS[("", _op)] = OpSpec(ref=None, elsewhere=("tests/ep/test_random.py", _WHY))
