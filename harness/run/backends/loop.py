"""The one probe loop every backend runs under: each probe's feeds, run, comparison with torch and verdict.

Done here once for every backend (:mod:`harness.run.backends.contract`): feeds from ``reference.npz``, the
comparison with torch's outputs (:mod:`harness.numeric.compare`), the first output that differs, the status of
every exception (in exactly one place: :func:`_failed`), a provider that fell back as ``unavailable``, and the
events a worker streams while it goes (:mod:`harness.run.backends.messages`).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.config import runtimes
from harness.core.records import CellRecord, ExportRecord, Outcome, Stage, first_line
from harness.numeric import localize
from harness.numeric.compare import compare, describe
from harness.run.backends.contract import Backend, Session
from harness.run.backends.messages import Cell, CellTask, Event, Loaded, Localizing, Retry, Timing
from harness.store import layout


def run_probes(be: Backend, task: CellTask) -> Iterator[Event]:
    """The probes of one artifact on one column, on the worker's backend ``be`` (a generator).

    Yields :class:`Loaded` once the session exists, a :class:`Cell` for each probe in ``task.probes``
    order, and, before a backend's extra sessions that localize a mismatch, :class:`Localizing`: whatever
    kills the worker from then on costs the localization, not the cell.
    """
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
        ended = Outcome.PROVIDER_REFUSED if pattern and re.search(pattern, str(exc)) else Outcome.LOAD_ERROR
        if ended is Outcome.LOAD_ERROR and not task.fresh_after and be.internal(exc):
            yield Retry(f"its session failed to load in a worker that ran others first ({first_line(str(exc))[:160]})")
            return
        for cell in rec.each_probe(base, probes):
            yield Cell(_failed(be, cell, exc, t0, ended))
        return
    seconds = time.perf_counter() - t0
    base = base.replace(providers_used=tuple(session.providers_used), **session.facts)
    if (line := be.fell_back(session, task.column)) is not None:
        for cell in rec.each_probe(base, probes, **Outcome.PROVIDER_FELL_BACK.fields()):
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
            yield Cell(_failed(be, cell, exc, t1, Outcome.RUN_ERROR))
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
                fell = {**Outcome.PROVIDER_TOOK_NO_NODE.fields(), "error_line": line, "error": line}
                for rest in rec.each_probe(base.replace(stage=Stage.RUN), probes[i:]):
                    yield Cell(rest.replace(**fell))
                break
        if error is not None or outs is None:
            yield Cell(_failed(be, cell, error or RuntimeError("no outputs"), t1, Outcome.RUN_ERROR))
            continue
        if (lost := _keep(task, probe, outs)) is not None:
            base = base.noted(lost)
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
            **Outcome.MISMATCH.fields(),
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


def _keep(task: CellTask, probe: str, outs: Sequence[Any]) -> str | None:
    """Keep a probe's outputs where the task asks (a platform column: the spread across platforms), never at the
    verdict's cost: what went wrong, as a note, or None."""
    if not task.outputs or probe not in task.keys:
        return None
    try:
        layout.keep_outputs(Path(task.outputs), task.keys[probe], outs)
    except (OSError, ValueError, TypeError) as exc:
        return f"its outputs were not kept for the spread across platforms ({type(exc).__name__}: {first_line(str(exc))})"
    return None


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


def _failed(be: Backend, cell: CellRecord, exc: BaseException, started: float, ended: Outcome) -> CellRecord:
    """The one place an exception becomes a cell: its status and class (:meth:`Outcome.fields`), line and message."""
    msg = str(exc)
    return cell.replace(
        **ended.fields(exc),
        error_line=be.describe_error(msg),
        error=msg[:20000],
        seconds=time.perf_counter() - started,
    )
