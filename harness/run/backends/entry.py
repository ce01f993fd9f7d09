"""The worker processes' entry points: one backend per worker, made once, running the probe loop and the latency.

:mod:`harness.run._dispatch` names these functions (``harness.run.backends.entry:run_cells``) for the worker pool.
"""

from __future__ import annotations

from collections.abc import Iterator

from harness.run.backends import latency, loop
from harness.run.backends.contract import Backend, backend
from harness.run.backends.messages import CellTask, Event, LatencyTask, Timed

_WORKER: Backend | None = None
"""The one backend of this worker process (its state: sessions, engines, loggers, lives in it)."""


def init_worker(ref: str) -> None:
    """Worker initializer: make the backend and import its runtime once."""
    global _WORKER
    _WORKER = backend(ref)
    _WORKER.init_worker()


def _worker() -> Backend:
    assert _WORKER is not None, "init_worker was not run in this worker"
    return _WORKER


def run_cells(task: CellTask) -> Iterator[Event]:
    """Worker entry (a generator): the probes of one artifact on one column (:func:`.loop.run_probes`)."""
    yield from loop.run_probes(_worker(), task)


def measure_latency(task: LatencyTask) -> Timed:
    """Worker entry: serial latency of the ``example`` probe of one artifact (:func:`.latency.measure_latency`)."""
    return latency.measure_latency(_worker(), task)
