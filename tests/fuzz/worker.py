"""The worker process: registers the EP once, then runs the cases its parent sends.

Commands arrive on stdin as JSON lines (``{"seed": S, "key": "Softmax-13", "k": 4}``); messages go out as JSON
lines on a pipe of their own (``--fd``), because ORT and MLX write to stdout/stderr from C and
would corrupt a protocol sharing those. Before each phase of a case the worker says which one it
is entering, so when it dies the parent knows where.

``{"crash": "segv"|"abort"|"hang"}`` commands exist for the fuzzer's own tests.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from .classify import CATEGORIES

EXPLAIN_ENV = "ONNXRUNTIME_EP_MLX_EXPLAIN"


def main(fd: int) -> int:
    out = os.fdopen(fd, "w", buffering=1)

    def send(**msg):
        out.write(json.dumps(msg) + "\n")
        out.flush()

    import onnxruntime as ort

    ort.set_default_logger_severity(3)
    import onnxruntime_ep_mlx as mlx_ep

    mlx_ep.register_execution_provider_library()
    from .execute import run_case, worker_env_summary
    from .generate import bases, case_id, make_case

    bases()  # the op suite's cases, built once per worker
    explain = Path(os.environ[EXPLAIN_ENV])
    send(type="ready", pid=os.getpid(), env=worker_env_summary())

    for line in sys.stdin:
        cmd = json.loads(line)
        if "crash" in cmd:
            _crash(cmd["crash"])
            continue
        seed, key, k = int(cmd["seed"]), str(cmd["key"]), int(cmd["k"])

        def phase(name, **info):
            send(type="phase", phase=name, **info)

        if cmd.get("cpu_probe"):
            from .execute import cpu_probe

            cpu_probe(make_case(seed, key, k), phase)
            send(type="result", id=case_id(seed, key, k), op=key, category="both_failed", detail="probe survived")
            continue
        try:
            fc = make_case(seed, key, k)
            result = run_case(fc, explain, phase)
        except Exception as err:  # the fuzzer's own bug: reported, never hidden
            result = {"id": case_id(seed, key, k), "op": key, "category": "fuzzer_error",
                      "detail": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-2000:]}
        assert result["category"] in CATEGORIES, result
        send(type="result", **result)
    return 0


def _crash(kind: str) -> None:
    if kind == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif kind == "abort":
        os.abort()
    elif kind == "hang":
        time.sleep(3600)
