"""The backend contract, and the one probe loop every backend runs under.

Polygraphy's runners are the model: a public call that checks its inputs, a small implementation per
backend, and runners that never compare. Here a :class:`Backend` knows its runtime (what the environment
holds, why a column cannot run, how to load an artifact into a :class:`Session`, how to localize a
mismatch) and a :class:`Session` runs feeds and makes the timed call; this module does everything else,
once, for every backend:

- the cell verdict of every probe: feeds from ``reference.npz``, the comparison with torch's outputs
  (:mod:`harness.numeric.compare`), the first output that differs, the status of every exception (in exactly one
  place: :func:`_failed`), a provider that fell back as ``unavailable``;
- the events a worker streams to the run stage (:class:`Loaded`, :class:`Cell`, :class:`Localizing`,
  :class:`Timing`), so a worker that dies or hangs on one probe costs that probe alone;
- the latency protocol (:func:`time_runs`) on the session's timed call.

Tasks and events cross processes as frozen dataclasses (:class:`CellTask`, :class:`LatencyTask`).

The run stage's workers import this module and one backend; the parent imports neither runtime:
:func:`probe` answers for the environment and a column in a child process of its own.
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
import json
import re
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from harness.build import layout
from harness.config import runtimes
from harness.core.records import CellRecord, ExportRecord, Latency, Stage, Status, error_line, first_line
from harness.numeric import localize
from harness.numeric.compare import compare, describe


@dataclasses.dataclass(frozen=True)
class ReferenceSource:
    """Where a worker has the node values of a large model's mismatching probe recorded on demand."""

    python: str | None
    """The export environment's interpreter (it holds the reference runtime)."""
    cache: str
    timeout: float


@dataclasses.dataclass(frozen=True)
class CellTask:
    """The probes of one artifact on one column: what the run stage hands a worker."""

    dir: str
    runtime: str
    """The pin (``onnxruntime==1.20.1``)."""
    column: str
    """``cpu``, ``cuda``, ``tensorrt-fp16``..."""
    backend: str
    """``module:Class`` of the :class:`Backend` (:attr:`harness.config.runtimes.Kind.backend`)."""
    env: Mapping[str, str]
    options: Mapping[str, Any]
    probes: tuple[str, ...]
    keys: Mapping[str, str]
    """Each probe's content address (:func:`harness.build.cache.cell_key`), for the run stage."""
    threads: int = 1
    reference: ReferenceSource | None = None
    fresh_after: str = ""
    """Why these probes run in a worker of their own: the death of the worker that ran them first (its line).
    A crash can be a provider's state from earlier sessions in that worker, not this artifact's doing."""


@dataclasses.dataclass(frozen=True)
class LatencyTask:
    """Serial timing of one artifact's ``example`` probe on one column."""

    dir: str
    column: str
    backend: str
    latency: Mapping[str, Any]
    """``[latency]`` as a mapping (:class:`harness.config.matrix.LatencySettings`)."""
    options: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Loaded:
    """The session exists (a death from now on belongs to a probe)."""

    seconds: float


@dataclasses.dataclass(frozen=True)
class Cell:
    cell: CellRecord


@dataclasses.dataclass(frozen=True)
class Localizing:
    """Extra sessions for the mismatch of ``probe`` start: a death from now on costs its localization only."""

    probe: str


@dataclasses.dataclass(frozen=True)
class Retry:
    """The session failed to load with the runtime's own internal fault (:meth:`Backend.internal`) in a worker that
    may have run other sessions: the run stage runs the task again in a worker of its own before charging it."""

    reason: str


@dataclasses.dataclass(frozen=True)
class Timing:
    inference: float
    localize: float


Event = Loaded | Cell | Localizing | Retry | Timing

TOOK_NO_NODE = "ProviderTookNoNode"
"""The error class of a cell whose session held the column's provider but placed none of the graph's nodes on it:
``unavailable`` as a fallback is, but decided by the artifact and the provider's version, not by the machine."""


@dataclasses.dataclass(frozen=True)
class Timed:
    """A latency, and the seconds the worker was busy making it (for the benchmark)."""

    latency: Latency
    busy_seconds: float


class Session(Protocol):
    """An artifact loaded for one column."""

    @property
    def providers_used(self) -> tuple[str, ...]:
        """What really runs it (``session.get_providers()``)."""

    @property
    def facts(self) -> Mapping[str, Any]:
        """Fields of every cell it runs, beyond the verdict (native TensorRT: ``engine``, the engine's record)."""

    def inputs(self) -> list[str]: ...

    def outputs(self) -> list[str]:
        """Output names in the ONNX graph's order (the order of torch's outputs)."""

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]: ...

    def placement(self) -> dict[str, int]:
        """Nodes per execution provider, asked once after the first run ({} where nothing says)."""

    def timed_call(self, feeds: Mapping[str, np.ndarray], device: str) -> Callable[[], Any]:
        """The unit a latency times: ``device`` empty, a run with host arrays (copies included); else a run whose
        inputs and outputs stay on that device (``cuda``), returning once the outputs are ready."""


class Backend(abc.ABC):
    """One runtime's implementation of the contract. An instance is made per worker (and per probe child);
    making one imports nothing: :meth:`init_worker` imports the runtime."""

    localizes = False
    """It can localize a mismatch beyond the first differing output (:meth:`localize`)."""

    @abc.abstractmethod
    def environment(self) -> dict[str, str]:
        """What the environment holds: ``package``, the version under its kind's ``version_key``, python,
        numpy, platform, CPU, GPU. Called in a child process; must not fail where the runtime is absent
        and its kind is ``bare``."""

    @abc.abstractmethod
    def problem(self, column: str) -> str | None:
        """Why ``column`` cannot run here, in one line (None: nothing stops it). Called in a child process:
        loading a GPU provider's libraries can kill the process that loads them."""

    @abc.abstractmethod
    def init_worker(self) -> None:
        """Import the runtime, once per worker."""

    @abc.abstractmethod
    def load(
        self, art: Path, rec: ExportRecord, ref: Any, column: str, options: Mapping[str, Any], threads: int, *, placement: bool
    ) -> Session:
        """The artifact's session for ``column`` (``placement``: make :meth:`Session.placement` answer)."""

    def fell_back(self, session: Session, column: str, placement: Mapping[str, int] | None = None) -> str | None:
        """Why the session is not the column's, having silently fallen back (one line), or None: at load, and again
        once its first run has placed the nodes (``placement``: a session can hold the provider and hand it none)."""
        return None

    def describe_error(self, message: str) -> str:
        """An error's line for the table (the same refusal reads the same on every machine)."""
        return error_line(message)

    def internal(self, exc: Exception) -> bool:
        """Whether a session-creation error is the runtime's own internal fault rather than its refusal of the model:
        such a fault can be what earlier sessions left in the worker, so it is charged only once it repeats in a
        worker of its own. None is, by default."""
        return False

    def localize(self, art: Path, rec: ExportRecord, cell: CellRecord, feeds: Mapping[str, np.ndarray], want: list[np.ndarray],
                 task: CellTask, reuse: dict[str, Any]) -> CellRecord:  # fmt: skip
        """Where a mismatch starts, beyond its first differing output (``reuse`` keeps extra sessions per artifact)."""
        return cell


def backend(ref: str) -> Backend:
    """The backend ``module:Class`` names (:attr:`harness.config.runtimes.Kind.backend`)."""
    module, _, name = ref.partition(":")
    made = getattr(importlib.import_module(module), name)()
    assert isinstance(made, Backend)
    return made


# The worker side ----------------------------------------------------------------------------------------

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
    """Worker entry (a generator): the probes of one artifact on one column.

    Yields :class:`Loaded` once the session exists, a :class:`Cell` for each probe in ``task.probes``
    order, and, before a backend's extra sessions that localize a mismatch, :class:`Localizing`: whatever
    kills the worker from then on costs the localization, not the cell.
    """
    be = _worker()
    art = Path(task.dir)
    rec = layout.read_record(art)
    probes = [p for p in rec.probes if p in task.probes]
    base = rec.cell(task.runtime, task.column, dict(task.env), stage=Stage.LOAD)
    ref = np.load(art / layout.REFERENCE)
    t0 = time.perf_counter()
    try:
        session = be.load(art, rec, ref, task.column, task.options, task.threads, placement=True)
    except Exception as exc:
        pattern = runtimes.provider(task.column).unavailable
        status = Status.UNAVAILABLE if pattern and re.search(pattern, str(exc)) else Status.LOAD_FAIL
        if status is Status.LOAD_FAIL and not task.fresh_after and be.internal(exc):
            yield Retry(f"its session failed to load in a worker that ran others first ({first_line(str(exc))[:160]})")
            return
        for cell in rec.each_probe(base, probes):
            yield Cell(_failed(be, cell, exc, t0, status))
        return
    seconds = time.perf_counter() - t0
    base = base.replace(providers_used=tuple(session.providers_used), **session.facts)
    if (line := be.fell_back(session, task.column)) is not None:
        for cell in rec.each_probe(base, probes, status=Status.UNAVAILABLE, error_class="ProviderFellBack"):
            yield Cell(cell.replace(error_line=line, error=line))
        return
    yield Loaded(seconds)
    yield from _probes(be, art, rec, ref, session, base, probes, task)


def _probes(
    be: Backend, art: Path, rec: ExportRecord, ref: Any, session: Session, base: CellRecord, probes: Sequence[str], task: CellTask
) -> Iterator[Event]:
    """Each probe's verdict on a loaded session, then the worker's timing. (62 lines: the one loop the contract
    promises every backend, read top to bottom per probe: run, compare, the fallback and placement checks once,
    localize a mismatch, emit; split up, its per-probe state would travel between functions.)"""
    inference = localizing = 0.0
    placed = False
    reuse: dict[str, Any] = {}
    for i, probe in enumerate(probes):
        t1 = time.perf_counter()
        cell = base.replace(probe=probe, stage=Stage.RUN)
        try:
            feeds, ignored = feeds_for(session.inputs(), ref, probe)
        except KeyError as exc:  # the probe lacks a graph input: nothing ran
            yield Cell(_failed(be, cell, exc, t1, Status.RUN_FAIL))
            continue
        t_run = time.perf_counter()
        try:
            outs, error = session.run(feeds), None
        except Exception as exc:
            outs, error = None, exc
        inference += time.perf_counter() - t_run
        if not placed:  # the first run places every node
            placed = True
            placement = session.placement()
            base = base.replace(placement=placement, note=_partly(placement, runtimes.provider(task.column).ep))
            cell = cell.replace(placement=base.placement, note=base.note)
            if (line := be.fell_back(session, task.column, base.placement)) is not None:
                fell = {"status": Status.UNAVAILABLE, "error_class": TOOK_NO_NODE, "error_line": line, "error": line}
                for rest in rec.each_probe(base.replace(stage=Stage.RUN), probes[i:]):
                    yield Cell(rest.replace(**fell))
                break
        if error is not None or outs is None:
            yield Cell(_failed(be, cell, error or RuntimeError("no outputs"), t1, Status.RUN_FAIL))
            continue
        want = layout.probe_outputs(ref, probe)
        ok, stats = compare(want, outs, **rec.tolerance)
        frozen = f"probe input(s) {', '.join(ignored)} are not graph inputs: the export froze them" if ignored else None
        note = "; ".join(n for n in (base.note, frozen) if n) or None
        cell = cell.replace(stage=Stage.COMPARE, diff=stats, note=note, seconds=time.perf_counter() - t1)
        if ok:
            yield Cell(cell)
            continue
        line = describe(stats)
        found = localize.first_output_mismatch(_nodes(art), session.outputs(), outs, want, **rec.tolerance)
        cell = cell.replace(
            status=Status.MISMATCH,
            error_class="Mismatch",
            error_line=line,
            error=line,
            localization=found or "every output is within tolerance on its own",
        )
        yield Cell(cell)
        if not be.localizes:
            continue
        yield Localizing(probe)
        t_localize = time.perf_counter()
        try:
            cell = be.localize(art, rec, cell, feeds, want, task, reuse)
        except Exception as exc:  # a harness bug here costs the localization, never the probes after it
            cell = cell.noted(f"localizing this mismatch failed: {type(exc).__name__}: {first_line(str(exc))}")
        localizing += time.perf_counter() - t_localize
        yield Cell(cell)
    yield Timing(inference, localizing)


def _partly(placement: Mapping[str, int], ep: str) -> str | None:
    """A note for a session whose column's provider took only part of the graph: how many of its nodes each provider
    ran (a provider's fused subgraph is one node), or None."""
    if ep not in placement or len(placement) < 2:
        return None
    said = ", ".join(f"{p} {n}" for p, n in sorted(placement.items(), key=lambda kv: (kv[0] != ep, kv[0])))
    return f"partly placed: {said} of the session's {sum(placement.values())} nodes (a fused subgraph counts as one)"


def feeds_for(inputs: Sequence[str], ref: Any, probe: str) -> tuple[dict[str, np.ndarray], list[str]]:
    """The session's inputs from a probe, and the probe inputs the session does not take (frozen by the export).

    Raises:
        KeyError: an input the probe gives no value.
    """
    given = layout.probe_inputs(ref, probe)
    missing = [n for n in inputs if n not in given]
    if missing:
        raise KeyError(f"graph input {missing[0]!r} has no value in probe {probe!r} (probe has {sorted(given)})")
    return {n: given[n] for n in inputs}, [n for n in given if n not in inputs]


def _nodes(art: Path) -> list[dict[str, Any]]:
    path = art / layout.NODES
    return json.loads(path.read_text()) if path.exists() else []


def _failed(be: Backend, cell: CellRecord, exc: BaseException, started: float, status: Status) -> CellRecord:
    """The one place an exception becomes a cell: its status, class, line and message."""
    msg = str(exc)
    return cell.replace(
        status=status,
        error_class=type(exc).__name__,
        error_line=be.describe_error(msg),
        error=msg[:20000],
        seconds=time.perf_counter() - started,
    )


def measure_latency(task: LatencyTask) -> Timed:
    """Worker entry: serial latency of the ``example`` probe of one artifact."""
    be = _worker()
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


# The environment, asked in a child process ----------------------------------------------------------------


def probe_main(argv: Sequence[str] | None = None) -> None:
    """``python -c 'from harness.run.backends.base import probe_main; probe_main()' <backend> env|column <column>``:
    print the backend's environment (with the CPU column's problem) or one column's problem as JSON."""
    ref, what, *rest = list(sys.argv[1:] if argv is None else argv)
    be = backend(ref)
    if what == "env":
        cpu = be.problem("cpu") if "cpu" in _columns_of(ref) else None
        print(json.dumps({"env": be.environment(), "cpu": cpu}))
    else:
        print(json.dumps(be.problem(rest[0])))


def _columns_of(ref: str) -> set[str]:
    return {c for k in runtimes.KINDS if k.backend == ref for c in k.columns()}
