"""The parent side: long-lived worker processes, each running one case at a time.

A worker that dies (signal, abort, exit) or overruns its case's time or memory budget is
reported against the case it was running, in the phase it last announced, and replaced; the
run goes on. No address-space limit is set on workers (RLIMIT_AS breaks MLX's CUDA allocator):
the memory watchdog reads their resident size instead.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from . import REPO
from .classify import classify_lost_worker

STARTUP_TIMEOUT_S = 180.0
RSS_LIMIT_BYTES = int(os.environ.get("FUZZ_WORKER_RSS_LIMIT_GB", "6")) * 2**30


@dataclass
class Task:
    seed: int
    key: str  # the op-table entry
    k: int  # its k-th case for this seed
    crash: str | None = None  # the fuzzer's own tests: make the worker die this way
    # Set on a probe: the death of this case with the MLX EP, to report unless ORT's CPU EP
    # alone dies on the model too.
    death: dict | None = None

    @property
    def id(self) -> str:
        return f"s{self.seed}-{self.key}-{self.k}"

    def command(self) -> dict:
        if self.crash:
            return {"crash": self.crash}
        return {"seed": self.seed, "key": self.key, "k": self.k, "cpu_probe": self.death is not None}


class Worker:
    def __init__(self, slot: int, workdir: Path, generation: int):
        self.slot = slot
        read_fd, write_fd = os.pipe()
        self.log_path = workdir / f"worker{slot}.{generation}.log"
        self.log = open(self.log_path, "wb")
        # A worker per core: BLAS thread pools that busy-wait would fight the other workers.
        env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", **os.environ,
               "ONNXRUNTIME_EP_MLX_EXPLAIN": str(workdir / f"claims{slot}.jsonl")}
        self.proc = subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-m", "tests.fuzz", "worker", "--fd", str(write_fd)],
            cwd=REPO, stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, pass_fds=(write_fd,), env=env)
        os.close(write_fd)
        self.fd = read_fd
        self.buffer = b""
        self.ready = False
        self.started = time.monotonic()
        self.task: Task | None = None
        self.deadline = 0.0
        self.phase: str | None = None
        self.phase_info: dict = {}
        self.log_offset = 0

    def assign(self, task: Task, timeout: float) -> None:
        self.task, self.phase, self.phase_info = task, None, {}
        self.deadline = time.monotonic() + timeout
        self.log_offset = self.log_path.stat().st_size
        self.proc.stdin.write((json.dumps(task.command()) + "\n").encode())
        self.proc.stdin.flush()

    def messages(self) -> list[dict] | None:
        """Complete messages read now; None at end of file (the worker is gone)."""
        chunk = os.read(self.fd, 1 << 16)
        if not chunk:
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def rss(self) -> int:
        try:
            with open(f"/proc/{self.proc.pid}/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            return 0

    def log_tail(self, lines: int = 4) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        kept = [ln for ln in text.splitlines() if ln.strip()]
        return " | ".join(kept[-lines:])[-600:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()
        os.close(self.fd)
        self.log.close()


def _death_reason(rc: int | None) -> str:
    if rc is None:
        return "died"
    if rc < 0:
        try:
            return f"died with {signal.Signals(-rc).name}"
        except ValueError:
            return f"died with signal {-rc}"
    return f"exited with status {rc}"


def run_tasks(tasks: Iterable[Task], workers: int, timeout: float, on_result: Callable[[dict], None],
              op_of: Callable[[Task], str] = lambda t: t.key, workdir: Path | None = None) -> None:
    pending = deque(tasks)
    own_dir = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="mlx-fuzz-")) if own_dir else workdir
    sel = selectors.DefaultSelector()
    generation = 0
    pool: list[Worker] = []

    def spawn(slot: int) -> Worker:
        nonlocal generation
        generation += 1
        w = Worker(slot, workdir, generation)
        sel.register(w.fd, selectors.EVENT_READ, w)
        return w

    def lost(w: Worker, kind: str, why: str) -> None:
        task = w.task
        sel.unregister(w.fd)
        w.kill() if kind == "hang" else w.proc.wait()
        if not w.ready:
            tail = w.log_tail(20)
            w.close()
            raise RuntimeError(f"fuzz worker {why} during start-up: {tail}")
        if kind == "death":
            why = _death_reason(w.proc.returncode)
        if task is not None and task.death is not None:
            # The probe died too: ORT's CPU EP alone cannot load or run this model.
            on_result({**task.death, "category": "both_failed",
                       "detail": f"ORT's CPU EP alone {why} on this model too; with the MLX EP: {task.death['detail']}"})
        elif task is not None:
            category, detail = classify_lost_worker(kind, w.phase, w.phase_info.get("claimed"),
                                                    w.phase_info.get("mlx_error"), why)
            record = {"id": task.id, "op": op_of(task), "category": category, "detail": detail,
                      "claimed": w.phase_info.get("claimed"), "log_tail": w.log_tail()}
            if kind == "death" and w.phase in ("mlx_session", "mlx_run") and task.crash is None:
                # Whose crash? The same model on ORT's CPU EP alone, in a fresh worker, decides.
                pending.appendleft(Task(task.seed, task.key, task.k, death=record))
            else:
                on_result(record)
        w.close()
        pool[pool.index(w)] = spawn(w.slot)

    pool.extend(spawn(i) for i in range(max(1, min(workers, len(pending) or 1))))
    try:
        while pending or any(w.task is not None for w in pool):
            for w in pool:
                if w.ready and w.task is None and pending:
                    w.assign(pending.popleft(), timeout)
            for key, _ in sel.select(timeout=0.25):
                w = key.data
                msgs = w.messages()
                if msgs is None:
                    lost(w, "death", "died")
                    continue
                for m in msgs:
                    if m["type"] == "ready":
                        w.ready = True
                    elif m["type"] == "phase":
                        w.phase = m["phase"]
                        w.phase_info.update({k: v for k, v in m.items() if k not in ("type", "phase")})
                    elif m["type"] == "result":
                        m.pop("type")
                        task, w.task = w.task, None
                        # A probe that survived: the death was the MLX EP's.
                        on_result(task.death if task is not None and task.death is not None else m)
            now = time.monotonic()
            for w in list(pool):
                if not w.ready and now - w.started > STARTUP_TIMEOUT_S:
                    lost(w, "hang", "did not start")
                elif w.task is not None and now > w.deadline:
                    lost(w, "hang", f"timed out after {timeout:g} s")
                elif w.task is not None and w.rss() > RSS_LIMIT_BYTES:
                    lost(w, "hang", f"went over {RSS_LIMIT_BYTES / 2**30:g} GiB resident")
    finally:
        for w in pool:
            try:
                sel.unregister(w.fd)
            except (KeyError, ValueError):
                pass
            w.close()
        sel.close()
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)
