"""What a case's outcome means: one category per case, and whether it is a problem.

The rules, in order (``claimed``: the EP took at least one node of the model):

- the worker died / timed out running it            -> ``death`` / ``hang``
- nothing claimed                                   -> ``both_failed`` if both sessions raise,
                                                       else ``declined`` (ORT's CPU ran it all)
- CPU raises, MLX raises                            -> ``both_failed``
- CPU raises (not for want of a kernel), MLX runs   -> ``cpu_only_error`` (e.g. out-of-range
                                                       indices answered with values)
- CPU has no kernel and no numpy reference applies  -> ``no_oracle``
- MLX raises where CPU succeeds                     -> ``lost_fallback`` (a claimed node fails;
                                                       ORT cannot hand it back to CPU)
- an output differs beyond the op suite's tolerance -> ``wrong`` (NaN positions must agree)
- otherwise                                         -> ``ok``, or ``declined`` when only helper
                                                       nodes (chain connectors) were claimed

A worker that dies after the MLX runs finished, while ORT's CPU EP runs the oracle (integer
division by zero traps there), is ORT's crash, not ours: ``cpu_only_error`` when the MLX session
returned values, ``both_failed`` when it raised too. A worker that dies while creating or running
the MLX session is followed by a probe: the same model on ORT's CPU EP alone, in a fresh worker.
If the probe dies too, the crash is ORT's (its shape inference or a CPU kernel the MLX session
also ran): ``both_failed``; if it survives, the case is a ``death``.
"""

from __future__ import annotations

PROBLEMS = ("death", "hang", "wrong", "lost_fallback", "cpu_only_error", "fuzzer_error")
FINE = ("ok", "declined", "both_failed", "no_oracle")
CATEGORIES = FINE + PROBLEMS


def is_problem(category: str) -> bool:
    return category in PROBLEMS


def classify(*, claimed: list[str], op_claimed: bool, mlx_error: str | None, cpu_error: str | None,
             cpu_missing_kernel: bool, has_oracle: bool, mismatch: str | None) -> tuple[str, str]:
    """(category, one-line detail) of a case that ran to the end in its worker."""
    if not claimed:
        if mlx_error and cpu_error:
            return "both_failed", f"nothing claimed; both raise: {cpu_error}"
        return "declined", "nothing claimed"
    if cpu_error and mlx_error:
        return "both_failed", f"CPU: {cpu_error} | MLX: {mlx_error}"
    if cpu_error and not cpu_missing_kernel:
        return "cpu_only_error", f"ORT CPU raises ({cpu_error}) but the MLX session returned values"
    if mlx_error:
        if not has_oracle:
            return "both_failed", f"CPU has no kernel ({cpu_error}); MLX: {mlx_error}"
        return "lost_fallback", mlx_error
    if not has_oracle:
        return "no_oracle", f"ORT CPU has no kernel and the op suite no reference: {cpu_error}"
    if mismatch:
        return "wrong", mismatch
    if not op_claimed:
        return "declined", "op declined; only helper nodes claimed: " + ", ".join(claimed)
    return "ok", ""


def classify_lost_worker(kind: str, phase: str | None, claimed: list[str] | None,
                         mlx_error: str | None, why: str) -> tuple[str, str]:
    """Category of a case whose worker died (``kind`` "death") or was killed (``kind`` "hang").

    ``phase`` is the last one the worker announced: "mlx_session" (creating the MLX session),
    "mlx_run" (running it; ``claimed`` known), "cpu" (the oracle; ``mlx_error`` known)."""
    if phase == "cpu":
        if mlx_error or not claimed:
            return "both_failed", f"ORT's CPU EP {why} on the oracle session; MLX: {mlx_error or 'nothing claimed'}"
        return "cpu_only_error", f"ORT's CPU EP {why} on this model, but the MLX session returned values"
    if phase == "mlx_run" and claimed == []:
        return "declined", f"nothing claimed; ORT's CPU EP {why} running it"
    where = {"mlx_session": "while creating the MLX session", "mlx_run": "while running the MLX session"}.get(phase or "", "before the case announced a phase")
    return kind, f"{why} {where}" + (f" (claimed: {', '.join(claimed)})" if claimed else "")
