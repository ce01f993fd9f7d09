"""Tasks that fail for real, for the isolation tests."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

from harness.run.backends.onnxruntime import OnnxRuntime


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


class DiesOnItsWayOut(OnnxRuntime):
    """The onnxruntime backend, whose sessions kill their worker when they are let go, after the last probe
    (as a provider's teardown can)."""

    def load(self, *args: Any, **kwargs: Any) -> Any:
        return _Dying(super().load(*args, **kwargs))


class DiesAfterItsFirstSession(OnnxRuntime):
    """The onnxruntime backend, whose worker dies (SIGSEGV) creating any session after its first: a crash that is
    the worker's history, not the artifact's (as OpenVINO 1.23.0's was, now and then)."""

    made = 0

    def load(self, *args: Any, **kwargs: Any) -> Any:
        if DiesAfterItsFirstSession.made:
            os.kill(os.getpid(), signal.SIGSEGV)
        DiesAfterItsFirstSession.made += 1
        return super().load(*args, **kwargs)


def _internal_fault() -> Exception:
    """onnxruntime's own exception type and wording for an internal fault at session creation, as OpenVINO 1.23.0
    raised it now and then after other sessions in the same process (no model makes this CPU build do it)."""
    from onnxruntime.capi.onnxruntime_pybind11_state import RuntimeException

    return RuntimeException(
        "[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : Exception during initialization: node_index < nodes_.size() was "
        "false. Validating no unexpected access using an invalid node_index. Got:94613214551904 Max:3"
    )


class FaultsAfterItsFirstSession(OnnxRuntime):
    """The onnxruntime backend, whose sessions after its first in a worker fail with the runtime's internal fault: the
    worker's history, not the artifact's."""

    made = 0

    def load(self, *args: Any, **kwargs: Any) -> Any:
        if FaultsAfterItsFirstSession.made:
            raise _internal_fault()
        FaultsAfterItsFirstSession.made += 1
        return super().load(*args, **kwargs)


class AlwaysFaults(OnnxRuntime):
    """The onnxruntime backend, whose every session fails with the runtime's internal fault: the artifact's own."""

    def load(self, *args: Any, **kwargs: Any) -> Any:
        raise _internal_fault()


class _Dying:
    def __init__(self, session: Any) -> None:
        self.session = session

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    def __del__(self) -> None:
        print("dying on the way out", file=sys.stderr, flush=True)  # the worker's log: the test checks it happened
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
