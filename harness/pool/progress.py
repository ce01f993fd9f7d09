"""Progress of a long stage: done / total, what is running, and an estimate of the time left.

A stage of 880 tiny artifacts takes seconds and a stage of 8 real transformers
takes minutes; the same lines serve both. :class:`Progress` appends
``[k/N, ETA m:ss]`` to each line it is given and, while tasks run, says
which and for how long (``running: bert.dynamo.op18 (45 s)``). Rate-limited
lines (:meth:`Progress.tick`) print at most every ``every`` seconds, and the
last one always.

The estimate weighs each task by its *kind* (the case, for the export): the
artifacts of one model take about as long as each other, and a real model
takes a hundred times a gotcha. Standard library only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable
from typing import Any


def clock(seconds: float) -> str:
    """``75`` → ``1:15``; ``3725`` → ``1:02:05``."""
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Done / total with an estimate of the time left, for a stage of ``total`` tasks."""

    def __init__(self, stage: str, total: int, echo: Callable[[str], Any], *, workers: int = 1, every: float = 5.0) -> None:
        self.stage, self.total, self.echo = stage, total, echo
        self.workers = max(1, workers)
        self.every = every
        self.started = time.monotonic()
        self.count = 0
        self.seconds: dict[Hashable, list[float]] = {}
        self.pending: dict[Hashable, int] = {}
        self.last = 0.0

    def expect(self, kinds: Iterable[Hashable]) -> None:
        """The kinds of the tasks to come, one per task (so the estimate knows how many of each are left)."""
        for kind in kinds:
            self.pending[kind] = self.pending.get(kind, 0) + 1

    def eta(self) -> str:
        left = self.total - self.count
        if not left:
            return f"{clock(time.monotonic() - self.started)} in all"
        if not self.count:
            return "ETA ?"
        overall = (time.monotonic() - self.started) / self.count  # wall seconds per task so far
        busy = [s for spent in self.seconds.values() for s in spent]
        mean = sum(busy) / len(busy) if busy else 0.0
        work = 0.0
        for kind, n in self.pending.items():
            spent = self.seconds.get(kind)
            work += n * (sum(spent) / len(spent) if spent else mean)
        unknown = left - sum(self.pending.values())
        estimate = work / self.workers + max(0, unknown) * overall if self.pending else left * overall
        return f"ETA {clock(estimate)}"

    def done(self, line: str, *, kind: Hashable = None, seconds: float | None = None) -> None:
        """One task finished: print ``line`` with the count and the estimate."""
        self._count(kind, seconds)
        self.echo(f"{line}  [{self.count}/{self.total}, {self.eta()}]")
        self.last = time.monotonic()

    def tick(self, line: str, *, kind: Hashable = None, seconds: float | None = None) -> None:
        """Like :meth:`done`, but printed only every ``every`` seconds (and for the last task)."""
        if self.count + 1 >= self.total or time.monotonic() - self.last >= self.every:
            self.done(line, kind=kind, seconds=seconds)
        else:
            self._count(kind, seconds)

    def _count(self, kind: Hashable, seconds: float | None) -> None:
        self.count += 1
        if kind is None:
            return
        if seconds is not None:
            self.seconds.setdefault(kind, []).append(seconds)
        if self.pending.get(kind):
            self.pending[kind] -= 1

    def running(self, tasks: Iterable[tuple[str, float]]) -> None:
        """A heartbeat: what runs now and for how long."""
        shown = ", ".join(f"{name} ({clock(seconds)})" for name, seconds in tasks)
        if shown:
            self.echo(f"{self.stage}: running {shown}  [{self.count}/{self.total} done, {self.eta()}]")
