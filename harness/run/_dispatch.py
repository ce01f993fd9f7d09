"""The run stage's side of its workers: tasks out, cells back.

:func:`correctness` hands :class:`~harness.run.backends.messages.CellTask` s to worker processes
(:mod:`harness.pool.workers`) and turns what they stream into cells. A worker that dies or hangs costs the
probe it was on: ``crash`` (with its signal) or ``timeout`` for that probe, and the probes after it run
again in a fresh worker. Before the session exists a death belongs to session creation, which every probe
shares; during a mismatch's localization it costs only the localization. :func:`latency` times the
``example`` probe of every passing artifact, serially, one worker.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.core.records import CellRecord, ExportRecord, Outcome, Stage, first_line
from harness.pool.progress import Progress
from harness.pool.workers import MemoryGate, TaskResult, run_tasks
from harness.run.backends.messages import Cell, CellTask, LatencyTask, Loaded, Localizing, Retry, Timed, Timing
from harness.store import layout

CUT_SHORT = "localizing this mismatch was cut short"
FRESH = "a worker died here first"
ENTRY = "harness.run.backends.entry"


@dataclasses.dataclass
class Stats:
    """Where a column's time went, for the benchmark: the floor (session creation and inference measured
    inside the workers) against the wall time of the stage."""

    cells: int = 0
    reused: int = 0
    corrupt: int = 0
    ran: int = 0
    """Cells that ran this time."""
    session: float = 0.0
    """Seconds creating the correctness sessions."""
    inference: float = 0.0
    """Seconds inside ``session.run`` for the correctness probes."""
    localize: float = 0.0
    """Seconds localizing mismatches (extra sessions and runs)."""
    latency: float = 0.0
    """Seconds creating the latency sessions and inside their timed and warm-up runs."""
    correctness_wall: float = 0.0
    latency_wall: float = 0.0
    wall: float = 0.0

    @property
    def floor(self) -> float:
        return self.session + self.inference + self.localize + self.latency

    def to_dict(self) -> dict[str, Any]:
        return {
            **{k: round(v, 4) if isinstance(v, float) else v for k, v in dataclasses.asdict(self).items()},
            "floor": round(self.floor, 4),
        }


@dataclasses.dataclass
class _State:
    """What the run stage knows of one task from what its worker streamed so far."""

    probes: list[str]
    loaded: bool = False
    done: set[str] = dataclasses.field(default_factory=set)
    localizing: str | None = None
    """The probe whose mismatch is being localized (its cell is already in)."""
    retry: str = ""
    """Why its probes run again in a worker of their own (:class:`harness.run.backends.messages.Retry`)."""

    @property
    def left(self) -> list[str]:
        return [p for p in self.probes if p not in self.done]


class _Round:
    """One pass of the tasks through the workers: the cells they stream, the probes left for the next pass."""

    def __init__(self, records: Mapping[str, ExportRecord], stats: Stats, cells: dict[str, CellRecord]) -> None:
        self.records, self.stats, self.cells = records, stats, cells
        self.states: dict[int, _State] = {}
        self.again: list[CellTask] = []

    def record(self, task: CellTask) -> ExportRecord:
        return self.records[Path(task.dir).name]

    def item(self, task: CellTask, event: Any) -> CellRecord | None:
        """What a worker streamed: a cell (returned, with its content address), or an event."""
        state = self.states[id(task)]
        if isinstance(event, Cell):
            cell = event.cell.replace(cache_key=task.keys.get(event.cell.probe))
            if task.fresh_after:
                cell = cell.noted(f"{task.fresh_after}; a fresh worker ran it")
            self.cells[cell.key] = cell
            state.done.add(cell.probe)
            state.localizing = None
            return cell
        if isinstance(event, Loaded):
            state.loaded = True
            self.stats.session += event.seconds
        elif isinstance(event, Timing):
            self.stats.inference += event.inference
            self.stats.localize += event.localize
        elif isinstance(event, Localizing):
            state.localizing = event.probe
        elif isinstance(event, Retry):
            state.retry = event.reason
        return None

    def ended(self, task: CellTask, outcome: TaskResult) -> tuple[list[CellRecord], CellTask | None]:
        """A task ended: the cells its ending decides, and the task of its probes left to run again (None: it is
        finished)."""
        state = self.states[id(task)]
        if outcome.kind == "ok" and not state.left:
            return [], None
        if outcome.kind == "crash" and not task.fresh_after and state.left and state.localizing is None:
            # Not charged yet: the probes left run again in a worker of their own, and only a death there is theirs.
            where = "while creating the session" if not state.loaded else f"while running probe {state.left[0]}"
            state.retry = f"{FRESH} ({outcome.value} {where})"
        if state.retry and not task.fresh_after and state.left:
            self.again.append(dataclasses.replace(task, probes=tuple(state.left), fresh_after=state.retry))
            return [], self.again[-1]
        failed, rest = charge(self.record(task), task, outcome, state, self.cells)
        failed = [c.replace(cache_key=task.keys.get(c.probe)) for c in failed]
        for cell in failed:
            self.cells[cell.key] = cell
        if not rest:
            return failed, None
        self.again.append(dataclasses.replace(task, probes=tuple(rest)))
        return failed, self.again[-1]


def correctness(
    tasks: list[CellTask],
    records: Mapping[str, ExportRecord],
    *,
    workers: int,
    timeout: float,
    log: Path,
    stats: Stats,
    progress: Progress | None = None,
) -> Iterator[CellRecord]:
    """Run the tasks in worker processes; yield each cell as it arrives.

    Workers are sized by memory as well as cores (:class:`harness.pool.workers.MemoryGate`, from each model's
    size); ``progress`` hears of each artifact as it is done. A task whose worker died (outside a localization)
    runs its probes left again in a worker of its own before the death is charged to it: a cell is not red for
    what earlier sessions in its worker did.
    """
    cells: dict[str, CellRecord] = {}
    gate = MemoryGate(session_mib)
    started: dict[int, float] = {}  # when each task was first handed to a worker (its first outcome says how long ago)
    while tasks:
        rnd = _Round(records, stats, cells)
        rnd.states = {id(t): _State(list(t.probes)) for t in tasks}
        for outcome in _pooled_then_alone(
            "run_cells",
            [t for t in tasks if not t.fresh_after],
            [t for t in tasks if t.fresh_after],
            workers=workers,
            timeout=timeout,
            log=str(log),
            admit=gate.admit,
            heartbeat=(30.0, _beat(progress)) if progress is not None else None,
        ):
            task = outcome.task
            started.setdefault(id(task), time.monotonic() - outcome.seconds)
            if outcome.kind == "item":
                cell = rnd.item(task, outcome.value)
                if cell is not None:
                    yield cell
                continue
            failed, rest = rnd.ended(task, outcome)
            yield from failed
            if rest is not None:
                started[id(rest)] = started[id(task)]
            elif progress is not None:
                _tick(progress, rnd.record(task), task, cells, time.monotonic() - started[id(task)])
        tasks = rnd.again


def _beat(progress: Progress) -> Callable[[list[tuple[Any, float]]], None]:
    return lambda running: progress.running((Path(t.dir).name, s) for t, s in running)


def _tick(progress: Progress, rec: ExportRecord, task: CellTask, cells: Mapping[str, CellRecord], took: float) -> None:
    base = rec.cell(task.runtime, task.column, {})
    mine = [cells[k] for k in (base.replace(probe=p).key for p in rec.probes) if k in cells]
    counts = ", ".join(f"{s} {n}" for s, n in sorted(Counter(c.status.value for c in mine).items()))
    progress.tick(f"  {rec.key.id}: {counts} ({took:.1f}s)", kind=rec.case, seconds=took)


def session_mib(task: CellTask) -> float:
    """What a worker running an artifact is expected to hold (MiB): the runtime keeps the model's weights
    (and the proto it read them from while it builds the session), numpy the probes; ~200 MiB for itself."""
    art = Path(task.dir)
    size = sum(f.stat().st_size for f in (art / layout.MODEL, art / layout.DATA) if f.is_file())
    return 200.0 + 3 * size / 2**20


def charge(
    rec: ExportRecord, task: CellTask, outcome: TaskResult, state: _State, cells: Mapping[str, CellRecord]
) -> tuple[list[CellRecord], list[str]]:
    """A worker ended a task early: the cells that failure decides, and the probes to run again."""
    base = rec.cell(task.runtime, task.column, dict(task.env), stage=Stage.RUN)
    left = state.left
    if outcome.kind in ("crash", "timeout"):
        ended = Outcome.WORKER_CRASH if outcome.kind == "crash" else Outcome.WORKER_TIMEOUT
        line = str(outcome.value)
    else:  # the backend raised, or returned without every cell: a harness bug, kept visible in the table
        if outcome.kind == "error":
            cls, msg, tb = outcome.value
            line, full = f"harness error {cls}: {first_line(msg)}", tb
        else:
            line = full = f"harness error: the backend returned without cells for {', '.join(left)}"
        return rec.each_probe(base, left, **Outcome.HARNESS_ERROR.fields(), error_line=line, error=full), []
    if not left:  # every cell is in: the worker died on its way out (a provider's teardown, say)
        return [], []
    if state.localizing is not None:  # the cell is in; only its localization is lost
        cell = cells[base.replace(probe=state.localizing).key]
        return [cell.noted(f"{CUT_SHORT}: {line}")], left
    if not state.loaded:  # died creating the session: every probe shares it
        line = f"{line} while creating the session"
        return rec.each_probe(base, left, **ended.fields(), stage=Stage.LOAD, error_line=line), []
    probe, rest = left[0], left[1:]
    line = f"{line} while running this probe"
    cell = base.replace(probe=probe, **ended.fields(), error_line=line, error=line, seconds=outcome.seconds)
    return [cell], rest


def latency(
    tasks: list[LatencyTask], todo: Mapping[str, CellRecord], *, timeout: float, log: Path, stats: Stats
) -> Iterator[CellRecord]:
    """Serial timing of each task's ``example`` probe (``todo``: its passing cell, by artifact id); each timed
    cell is yielded as soon as it is measured. A task whose worker died is timed again in a worker of its own (its
    death may be the sessions before it); one that fails there, or raises, leaves its cell untimed."""
    crashed: list[LatencyTask] = []
    for outcome in _pooled_then_alone("measure_latency", tasks, crashed, workers=1, timeout=timeout, log=str(log)):
        if outcome.kind == "ok" and isinstance(outcome.value, Timed):
            stats.latency += outcome.value.busy_seconds
            yield todo[Path(outcome.task.dir).name].replace(latency=outcome.value.latency, stage=Stage.LATENCY)
        elif outcome.kind == "crash" and outcome.task not in crashed:  # its first death: timed again, alone
            crashed.append(outcome.task)


def _pooled_then_alone(
    function: str, pooled: Sequence[CellTask | LatencyTask], alone: Sequence[CellTask | LatencyTask], **options: Any
) -> Iterator[TaskResult]:
    """:func:`harness.pool.workers.run_tasks` of the contract's ``function`` over ``pooled`` (workers that take task after
    task), then over ``alone`` (a fresh process each: tasks whose worker died, which may be what earlier sessions in
    it left). ``alone`` is read once ``pooled`` is done: tasks added to it meanwhile run too."""
    for group, fresh in ((pooled, False), (alone, True)):
        if group:
            init, initargs = f"{ENTRY}:init_worker", (group[0].backend,)
            yield from run_tasks(f"{ENTRY}:{function}", list(group), init=init, initargs=initargs, fresh=fresh, **options)
