"""Tasks that fail for real, for the isolation tests."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from harness.records import ExportRecord, Stage


def init_worker() -> None:
    """As the onnxruntime backend's: these tasks run in the same kind of worker."""
    from harness.backends.onnxruntime import init_worker as init

    init()


def act(task: str) -> int:
    if task == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if task == "abort":
        os.abort()
    if task == "hang":
        time.sleep(600)
    if task == "raise":
        raise ValueError("asked to raise")
    return int(task.split(":")[1])


def pid(task: int) -> int:
    return os.getpid()


def stream(task: str) -> Iterator[int]:
    """Yield 1, 2, ... for each step of ``task`` ("1,2,segv,4"): a fault part-way through a stream."""
    for step in task.split(","):
        if step.isdigit():
            yield int(step)
        else:
            act(step)


def slow_stream(steps: int) -> Iterator[int]:
    for i in range(steps):
        time.sleep(0.6)
        yield i


def report_pid(path: str) -> None:
    """Write this worker's pid, then hang."""
    with open(path + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(path + ".tmp", path)
    time.sleep(600)


def cells_then_die(task: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A backend that streams a pass for every probe of its artifact, then dies on its way out (as a
    provider's teardown can)."""
    rec = ExportRecord.from_dict(json.loads((Path(task["dir"]) / "export.json").read_text()))
    yield {"event": "loaded"}
    base = rec.cell(task["runtime"], task["provider"], task["env"], stage=Stage.COMPARE)
    for cell in rec.each_probe(base, task["probes"]):
        yield {"cell": cell.to_dict()}
    os.kill(os.getpid(), signal.SIGSEGV)


def phases(plan: str) -> Iterator[dict[str, Any]]:
    """``"2:0.5,1:3"``: phases that each announce their budget (seconds) then sleep: an export, say, whose
    reference pass needs more time than its exporter did."""
    for step in plan.split(","):
        budget, sleep = (float(x) for x in step.split(":"))
        yield {"phase": step, "budget": budget}
        time.sleep(sleep)


def hold(task: str) -> str:
    """Sleep a little and say when this task ran: for the memory gate's test."""
    started = time.monotonic()
    time.sleep(0.4)
    return f"{task}:{started:.3f}:{time.monotonic():.3f}"


def tqdm_lock(task: int) -> int:
    """Make a multiprocessing lock, as tqdm does inside a dynamo export: a process that exits as it should
    unlinks its semaphore."""
    import multiprocessing

    _LOCKS.append(multiprocessing.RLock())  # the default context, as tqdm makes it; kept, as tqdm keeps it
    return task


_LOCKS: list[Any] = []
