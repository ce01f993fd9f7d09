"""Latency: the timing protocol (:func:`time_runs`) on the session's timed call of one artifact's ``example`` probe."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from harness.config import runtimes
from harness.core.records import Latency
from harness.run.backends.contract import Backend
from harness.run.backends.loop import feeds_for
from harness.run.backends.messages import LatencyTask, Timed
from harness.store import layout


def measure_latency(be: Backend, task: LatencyTask) -> Timed:
    """Serial latency of the ``example`` probe of one artifact, on the worker's backend ``be``."""
    art = Path(task.dir)
    lat = task.latency
    rec = layout.read_record(art)
    ref = np.load(art / layout.REFERENCE)
    t0 = time.perf_counter()
    session = be.load(art, rec, ref, task.column, task.options, lat["threads"], placement=False)
    if (line := be.fell_back(session, task.column)) is not None:  # never time a fallback as the provider's latency
        raise RuntimeError(line)
    feeds, _ = feeds_for(session.inputs(), ref, "example")
    device = runtimes.provider(task.column).binds_to if lat.get("iobinding", True) else ""
    call = session.timed_call(feeds, device)
    session_ms = (time.perf_counter() - t0) * 1e3
    t1 = time.perf_counter()
    sample, runs, stable, warm = time_runs(call, lat)
    ms = np.array(sample) * 1e3
    latency = Latency(
        median_ms=float(np.median(ms)),
        p90_ms=float(np.percentile(ms, 90)),
        runs=runs,
        warmup=warm,
        threads=lat["threads"],
        session_ms=session_ms,
        stable=stable,
        copies="device" if device else "host",
    )
    return Timed(latency, session_ms / 1e3 + time.perf_counter() - t1)


MIN_TIMED = 3
"""Timed runs a latency has at the least, whatever the budget: fewer would give no median and no p90."""


def time_runs(call: Callable[[], Any], lat: Mapping[str, Any]) -> tuple[list[float], int, bool, int]:
    """The latency protocol: ``warmup`` untimed calls, then timed calls in windows of ``min_runs``, until a
    window's median is within ``stability`` of the previous window's (or ``max_runs`` or ``budget_seconds``
    stops it).

    ``budget_seconds`` bounds the whole of it, warm-up included, for any model: warm-up stops once half
    the budget is spent (after one run at least), and timing stops as soon as the budget is spent and
    :data:`MIN_TIMED` runs are in, even inside a window. A real transformer whose one run takes 1.5 s
    then costs a few runs, not ``warmup + 2 * min_runs`` of them; a small model, whose windows settle
    long before the budget, is timed as it always was.

    Returns the sample the figures come from (the last two windows: the settled state, not the first
    runs after warm-up), the number of timed runs, whether the median settled, and the warm-up runs made.
    """
    perf = time.perf_counter
    start = perf()
    budget = lat["budget_seconds"]
    warm = 0
    for _ in range(lat["warmup"]):
        call()
        warm += 1
        if perf() - start > budget / 2:
            break
    deadline = start + budget
    window = lat["min_runs"]
    times: list[float] = []
    previous: float | None = None
    stable = False
    spent = False
    while not spent and len(times) + window <= lat["max_runs"]:
        for _ in range(window):
            t = perf()
            call()
            done = perf()
            times.append(done - t)
            if done > deadline and len(times) >= MIN_TIMED and len(times) % window:
                spent = True  # the budget is gone in the middle of a window: stop here
                break
        else:
            median = float(np.median(times[-window:]))
            if previous is not None and abs(median - previous) <= lat["stability"] * previous:
                stable = True
                break
            previous = median
            spent = perf() > deadline and len(times) >= MIN_TIMED
    return times[-2 * window :], len(times), stable, warm
