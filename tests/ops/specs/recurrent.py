"""Recurrent ops (op-specs/src/recurrent/): RNN, GRU, LSTM.

The reference is a plain loop over batch entries and steps, per ONNX's equations, with the
details ORT's CPU EP settles: steps at and past an entry's sequence length give zeros in Y and
leave its state alone (a reverse pass starts at the entry's own last step); a zero length gives
zero Y_h/Y_c; clip bounds the gate pre-activations only; input_forget couples f = 1 - i.
ORT's kernels are the oracle at the float edges too: GRU and LSTM clamp every gate input to
[-clip, clip] (float32's max without clip) and, in a node with a bias, turn NaN into +clip
(RNN clamps only with clip, and keeps NaN);
their HardSigmoid gives 0 for NaN, and so does Relu applied to a state (LSTM's h, RNN's f; a gate's
Relu keeps NaN); their Softplus is float32's log(1 + e^x).
ORT's CPU EP rejects layout 1 (batch first), so those cases compare with this reference."""

from __future__ import annotations

import numpy as np

from op_specs import SPECS, OpSpec, Variant, _f32, _rep, _sigmoid
from op_table import np_dtype


_RNN_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_RNN_DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
# name -> (function of (x, alpha, beta), alpha default or None when unused, beta default or None)
_RNN_ACTS = {
    "Relu": (lambda x, a, b: np.maximum(x, 0.0), None, None),
    "Tanh": (lambda x, a, b: np.tanh(x), None, None),
    "Sigmoid": (lambda x, a, b: _sigmoid(x), None, None),
    "Softsign": (lambda x, a, b: x / (1.0 + np.abs(x)), None, None),
    "Softplus": (lambda x, a, b: np.log(np.float32(1) + np.exp(np.asarray(x, np.float32))), None, None),
    "Affine": (lambda x, a, b: a * x + b, 1.0, 0.0),
    "LeakyRelu": (lambda x, a, b: np.where(x >= 0, x, a * x), 0.01, None),
    "ThresholdedRelu": (lambda x, a, b: np.where(x > a, x, 0.0), 1.0, None),
    "ScaledTanh": (lambda x, a, b: a * np.tanh(b * x), 1.0, 1.0),
    "HardSigmoid": (lambda x, a, b: np.where(a * x + b > 0, np.minimum(a * x + b, 1.0), 0.0), 0.2, 0.5),
    "Elu": (lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0.0))), 1.0, None),
}


def _rnn_activations(op, directions, a):
    """One function per activation slot; alpha/beta consumed in order by the activations that
    take them (ONNX's words), ONNX's defaults past the end of the lists."""
    names = list(a.get("activations", _RNN_DEFAULT_ACTS[op] * directions))
    if op == "RNN" and directions == 1:
        names = names[:1]
    alphas, betas = [_f32(v) for v in a.get("activation_alpha", [])], [_f32(v) for v in a.get("activation_beta", [])]
    funcs = []
    for name in names:
        f, alpha_default, beta_default = _RNN_ACTS[name]
        alpha = (alphas.pop(0) if alphas else alpha_default) if alpha_default is not None else 0.0
        beta = (betas.pop(0) if betas else beta_default) if beta_default is not None else 0.0
        func = lambda x, f=f, al=alpha, be=beta: f(x, al, be)  # noqa: E731
        func.name = name
        funcs.append(func)
    return funcs


def _on_state(act, v):
    """An activation applied to a state (LSTM's h, RNN's f): Relu is `x > 0 ? x : 0` there."""
    return np.where(v > 0, v, 0.0) if act.name == "Relu" else act(v)


def _gate_clip(op, bound, has_bias):
    """The gate inputs' bound as ORT's kernels apply it (see the module's docstring)."""
    if op == "RNN":
        if bound is None:
            return lambda v: v
        return lambda v: np.clip(v, -_f32(bound), _f32(bound))
    b = _f32(bound) if bound is not None else float(np.finfo(np.float32).max)
    if has_bias:
        return lambda v: np.where(np.isnan(v), b, np.clip(v, -b, b))
    return lambda v: np.clip(v, -b, b)


def _rnn_cell(op, acts, a, x, h, c, w, r, wb, rb, p, has_bias):
    """One step of one batch entry: the new hidden and cell states."""
    hidden = a["hidden_size"]
    clip = _gate_clip(op, a.get("clip"), has_bias)
    gate = lambda k, extra=0.0: x @ w[k * hidden:(k + 1) * hidden].T + wb[k * hidden:(k + 1) * hidden] + extra  # noqa: E731
    rec = lambda k, state: state @ r[k * hidden:(k + 1) * hidden].T + rb[k * hidden:(k + 1) * hidden]  # noqa: E731
    if op == "RNN":
        return _on_state(acts[0], clip(gate(0) + rec(0, h))), c
    if op == "GRU":
        f, g = acts
        z = f(clip(gate(0) + rec(0, h)))
        reset = f(clip(gate(1) + rec(1, h)))
        if a.get("linear_before_reset", 0):
            candidate = g(clip(gate(2) + reset * rec(2, h)))
        else:
            candidate = g(clip(gate(2) + rec(2, reset * h)))
        return (1.0 - z) * candidate + z * h, c
    f, g, hact = acts
    pi, po, pf = (p[:hidden], p[hidden:2 * hidden], p[2 * hidden:]) if p is not None else (0.0, 0.0, 0.0)
    i = f(clip(gate(0) + rec(0, h) + pi * c))
    forget = 1.0 - i if a.get("input_forget", 0) else f(clip(gate(2) + rec(2, h) + pf * c))
    cell = forget * c + i * g(clip(gate(3) + rec(3, h)))
    o = f(clip(gate(1) + rec(1, h) + po * cell))
    return o * _on_state(hact, cell), cell


def _recurrent(op):
    def ref(xs, a):
        get = lambda i: xs[i] if len(xs) > i else None  # noqa: E731
        x, w, r, b, lens, h0 = xs[0], xs[1], xs[2], get(3), get(4), get(5)
        c0, p = (get(6), get(7)) if op == "LSTM" else (None, None)
        batch_first = a.get("layout", 0) == 1
        if batch_first:
            x = x.transpose(1, 0, 2)
            h0 = None if h0 is None else h0.transpose(1, 0, 2)
            c0 = None if c0 is None else c0.transpose(1, 0, 2)
        steps, batch, hidden = x.shape[0], x.shape[1], a["hidden_size"]
        reverse = {"forward": [False], "reverse": [True], "bidirectional": [False, True]}[a.get("direction", "forward")]
        acts = _rnn_activations(op, len(reverse), a)
        per, width = len(_RNN_DEFAULT_ACTS[op]), _RNN_GATES[op] * hidden
        y = np.zeros((steps, len(reverse), batch, hidden))
        y_h, y_c = np.zeros((len(reverse), batch, hidden)), np.zeros((len(reverse), batch, hidden))
        for d, backwards in enumerate(reverse):
            bias = b[d] if b is not None else np.zeros(2 * width)
            for n in range(batch):
                h = h0[d, n] if h0 is not None else np.zeros(hidden)
                c = c0[d, n] if c0 is not None else np.zeros(hidden)
                length = int(lens[n]) if lens is not None else steps
                for t in (range(length - 1, -1, -1) if backwards else range(length)):
                    h, c = _rnn_cell(op, acts[d * per:(d + 1) * per], a, x[t, n], h, c, w[d], r[d],
                                     bias[:width], bias[width:], None if p is None else p[d], b is not None)
                    y[t, d, n] = h
                if length > 0:
                    y_h[d, n], y_c[d, n] = h, c
        if batch_first:
            y, y_h, y_c = y.transpose(2, 0, 1, 3), y_h.transpose(1, 0, 2), y_c.transpose(1, 0, 2)
        return [y, y_h, y_c]  # the harness keeps the outputs the node has and asks for

    return ref


def _rnn_lengths(dtype, shape, rng, dtypes):
    """Mixed sequence lengths, a full one (4, the shortest seq_length of the cases) and 0 among them."""
    pattern = [4, 0, 2, 1, 3]
    return np.array([pattern[i % len(pattern)] for i in range(shape[0])], dtype=np_dtype(dtype))


def _rnn_inputs(op):
    return ["X", "W", "R", "B", "sequence_lens", "initial_h"] + (["initial_c", "P"] if op == "LSTM" else [])


def _rnn_shapes(op, present=None, directions=1, steps=4, batch=3, inputs=3, hidden=5, batch_first=False):
    """Fed input shapes (X, W, R, then the present optional inputs, in port order)."""
    width = _RNN_GATES[op] * hidden
    state = [batch, directions, hidden] if batch_first else [directions, batch, hidden]
    shapes = {"X": [batch, steps, inputs] if batch_first else [steps, batch, inputs],
              "W": [directions, width, inputs], "R": [directions, width, hidden], "B": [directions, 2 * width],
              "sequence_lens": [batch], "initial_h": state, "initial_c": state, "P": [directions, 3 * hidden]}
    return [shapes[n] for n in _rnn_inputs(op) if n in ("X", "W", "R") or present is None or n in present]


def _rnn_variant(op, name, attrs=None, present=None, outputs=None, min_opset=0, **shape):
    attrs = dict({"hidden_size": 5}, **(attrs or {}))
    directions = 2 if attrs.get("direction") == "bidirectional" else 1
    shapes = _rnn_shapes(op, present, directions, batch_first=attrs.get("layout") == 1, **shape)
    return _rep(Variant(name, attrs, present=present, outputs=outputs, shapes=shapes, min_opset=min_opset))


def _rnn_spec(op, extra):
    bidi = {"direction": "bidirectional"}
    no_lens = tuple(n for n in _rnn_inputs(op)[3:] if n != "sequence_lens")
    variants = [
        Variant(attrs={"hidden_size": 5}),  # forward, every optional input, every output
        _rnn_variant(op, "reverse", {"direction": "reverse"}),
        _rnn_variant(op, "bidirectional", bidi),
        _rnn_variant(op, "bidirectional_no_lens", bidi, present=no_lens),
        _rnn_variant(op, "bidirectional_no_optional_inputs", bidi, present=()),
        _rnn_variant(op, "reverse_no_bias", {"direction": "reverse"}, present=tuple(n for n in _rnn_inputs(op)[3:] if n != "B")),
        _rnn_variant(op, "only_Y_h", bidi, outputs=("Y_h",)),
        _rnn_variant(op, "only_Y", {"direction": "reverse"}, outputs=("Y",)),
        _rnn_variant(op, "clip", dict(bidi, clip=0.7)),
        _rnn_variant(op, "layout1", dict(bidi, layout=1), min_opset=14),
        _rnn_variant(op, "layout1_forward_no_lens", {"layout": 1}, present=no_lens, min_opset=14),
        _rnn_variant(op, "long_wide", {"direction": "reverse"}, steps=9, batch=5, inputs=7, hidden=5),
    ] + [_rnn_variant(op, name, attrs, **kw) for name, attrs, kw in extra]
    default_shapes = _rnn_shapes(op)
    return OpSpec(
        ref=_recurrent(op),
        # Steps compound float32 rounding: ORT's own float32 answer is 1.2e-5 (relative) off the
        # float64 reference on the Affine/LeakyRelu LSTM case.
        tolerance_scale=4.0,
        domains={"W": "unit", "R": "unit", "B": "unit", "P": "unit", "sequence_lens": _rnn_lengths},
        scheme={"basic": default_shapes,
                # seq_length and batch change between runs (a shape-keyed retrace each time).
                "dynamic": [default_shapes, _rnn_shapes(op, steps=6, batch=2), _rnn_shapes(op, steps=5, batch=4)]},
        variants=variants,
    )


SPECS[("", "RNN")] = _rnn_spec("RNN", [
    ("relu", {"activations": ["Relu"]}, {}),
    ("leaky_relu_alpha", {"activations": ["LeakyRelu"], "activation_alpha": [0.3]}, {}),
    ("hard_sigmoid_both_directions", {"direction": "bidirectional", "activations": ["HardSigmoid", "HardSigmoid"],
                                      "activation_alpha": [0.4, 0.3], "activation_beta": [0.45, 0.6]}, {}),
    ("affine_scaled_tanh", {"direction": "bidirectional", "activations": ["Affine", "ScaledTanh"],
                            "activation_alpha": [0.8, 1.3], "activation_beta": [0.1, 0.7]}, {}),
    ("elu_thresholded_relu", {"direction": "bidirectional", "activations": ["Elu", "ThresholdedRelu"],
                              "activation_alpha": [0.6, 0.2]}, {}),
    ("softsign_softplus", {"direction": "bidirectional", "activations": ["Softsign", "Softplus"]}, {}),
    # Only direction 0's activation takes a beta: ORT's beta[direction] and ONNX's in-order
    # consumption both give it beta[0].
    ("affine_leaky_relu_one_beta", {"direction": "bidirectional", "activations": ["Affine", "LeakyRelu"],
                                    "activation_alpha": [0.5, 0.2], "activation_beta": [0.25]}, {}),
])
SPECS[("", "GRU")] = _rnn_spec("GRU", [
    ("linear_before_reset", {"direction": "bidirectional", "linear_before_reset": 1}, {}),
    ("linear_before_reset_no_bias", {"linear_before_reset": 1}, {"present": ("sequence_lens", "initial_h")}),
    ("hard_sigmoid_elu", {"activations": ["HardSigmoid", "Elu"], "activation_alpha": [0.3, 0.8], "activation_beta": [0.4]}, {}),
    ("defaults_past_the_lists", {"direction": "bidirectional", "activations": ["LeakyRelu", "Softsign", "HardSigmoid", "Elu"],
                                 "activation_alpha": [0.2]}, {}),
    ("affine_thresholded_relu", {"activations": ["Affine", "ThresholdedRelu"], "activation_alpha": [0.4, 0.1],
                                 "activation_beta": [0.3]}, {}),
    ("scaled_tanh_relu_softplus", {"direction": "bidirectional", "activations": ["ScaledTanh", "Relu", "Sigmoid", "Softplus"],
                                   "activation_alpha": [0.9], "activation_beta": [1.2]}, {}),
])
SPECS[("", "LSTM")] = _rnn_spec("LSTM", [
    ("no_peepholes", {"direction": "bidirectional"}, {"present": ("B", "sequence_lens", "initial_h", "initial_c")}),
    ("initial_h_only", {}, {"present": ("B", "initial_h")}),
    ("input_forget", {"direction": "bidirectional", "input_forget": 1}, {}),
    ("only_Y_c", {"direction": "bidirectional"}, {"outputs": ("Y_c",)}),
    ("Y_and_Y_c", {"direction": "reverse"}, {"outputs": ("Y", "Y_c")}),
    ("clip_peepholes", {"direction": "reverse", "clip": 0.4}, {}),
    ("hard_sigmoid_softsign_softplus", {"activations": ["HardSigmoid", "Softsign", "Softplus"],
                                        "activation_alpha": [0.3], "activation_beta": [0.55]}, {}),
    ("affine_relu_scaled_tanh", {"direction": "bidirectional",
                                 "activations": ["Affine", "Relu", "ScaledTanh", "LeakyRelu", "ThresholdedRelu", "Elu"],
                                 # Affine gates near 0.5: a well-conditioned cell state.
                                 "activation_alpha": [0.15, 0.9, 0.2, 0.1, 0.7], "activation_beta": [0.5, 1.1]}, {}),
])
