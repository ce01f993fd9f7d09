"""The spec stage: the ONNX specification's answer on every artifact of the last export, cached per artifact.

For each artifact that has a file: its fact from the cache (``build/cache/spec/<key>.json``, :mod:`harness.store.spec`)
or, where there is none, judged in a worker (:func:`harness.spec._evaluate.evaluate`) within a budget per artifact;
then ``build/spec.json`` written whole, then its stamp. A worker that runs out of the budget or dies costs that
artifact's answer (said as the reason), never the stage. Runs in its own environment: the export's onnx pin and
numpy.
"""

from __future__ import annotations

import importlib.metadata
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.core.errors import HarnessError
from harness.core.records import ExportRecord, first_line
from harness.pool.workers import run_tasks
from harness.store import cache, layout, spec


def judge_all(
    out: Path,
    *,
    workers: int = 0,
    force: bool = False,
    echo: Callable[[str], None] = print,
    onnx_pin: str | None = None,
) -> dict[str, Any]:
    """Every artifact's fact; ``build/spec.json`` and its stamp written. ``workers`` 0: one per CPU core.
    ``onnx_pin``: the onnx release matrix.toml pins for the export (the plan compares the stamp with it).

    Raises:
        HarnessError: no export in ``out`` (or its manifest or stamp damaged), or this environment's onnx is not
            ``onnx_pin``.
    """
    records = layout.load_artifacts(out)
    stamp = cache.read_json(out / layout.EXPORT_STAMP)
    artifacts = stamp.get("artifacts") if isinstance(stamp, dict) else None
    if not isinstance(artifacts, dict):
        raise HarnessError(f"{out / layout.EXPORT_STAMP}: missing or damaged; run the export first (`nox -s matrix`)")
    version = importlib.metadata.version("onnx")
    if onnx_pin is not None and version != onnx_pin:
        raise HarnessError(
            f"spec: this environment holds onnx {version}, matrix.toml pins {onnx_pin} for the export; "
            "run it with `nox -s spec`, whose environment holds the pin"
        )
    code = spec.spec_code()
    facts: dict[str, dict[str, Any]] = {}
    todo: dict[str, tuple[ExportRecord, str]] = {}
    for rec in records:
        if not rec.ok:
            continue
        key = spec.key(rec.digest, version, code)
        cached = None if force else cache.read_json(spec.cache_path(out, key))
        if isinstance(cached, dict) and spec.well_formed(cached) and cached.get("digest") == rec.digest:
            facts[rec.key.id] = cached
        elif (why := _too_large(out, rec)) is not None:
            facts[rec.key.id] = _store(out, key, _unanswered(rec, version, why))
        else:
            todo[rec.key.id] = (rec, key)
    t0 = time.perf_counter()
    if todo:
        echo(f"spec: judging {len(todo)} artifact(s) with onnx {version} ({len(facts)} from the cache)")
    tasks = [(str(layout.artifact_dir(out, i)), _probes(r), r.tolerance) for i, (r, _) in todo.items()]
    by_folder = {t[0]: i for t, i in zip(tasks, todo, strict=True)}
    n = workers or os.cpu_count() or 1
    for outcome in run_tasks(
        "harness.spec._evaluate:evaluate",
        tasks,
        workers=n,
        timeout=spec.BUDGET_SECONDS,
        init="harness.spec._evaluate:warm",
    ):
        art_id = by_folder[outcome.task[0]]
        rec, key = todo[art_id]
        if outcome.kind == "ok":
            facts[art_id] = _store(out, key, {**outcome.value, "digest": rec.digest, "onnx": version})
            continue
        # Out of budget, a worker's death or an error of the harness: that artifact's answer is lost, said as such.
        # What depends on this machine and its load is never cached: the next run of the stage tries again.
        if outcome.kind == "timeout":
            why = f"the reference evaluator took over {spec.BUDGET_SECONDS:g} s (the budget)"
        elif isinstance(outcome.value, tuple):  # an error: (type, message, traceback); the traceback is not said
            why = f"the spec stage's worker failed: {outcome.value[0]}: {first_line(str(outcome.value[1]))}"
        else:
            why = f"the spec stage's worker failed: {first_line(str(outcome.value))}"
        facts[art_id] = _unanswered(rec, version, why)
    spec.write(
        out,
        {"onnx": version, "budget_seconds": spec.BUDGET_SECONDS, "artifacts": facts},
        spec.inputs(artifacts, version),
    )
    if todo:
        echo(f"spec: {len(todo)} judged in {time.perf_counter() - t0:.1f}s → {spec.facts_path(out)}")
    return facts


def _probes(rec: ExportRecord) -> tuple[str, ...]:
    """The probes torch ran (those it could not are skipped cells: nothing to compare with)."""
    return tuple(p for p in rec.probes if p not in rec.probe_errors)


def _too_large(out: Path, rec: ExportRecord) -> str | None:
    folder = layout.artifact_dir(out, rec.key.id)
    size = sum((folder / n).stat().st_size for n in (layout.MODEL, layout.DATA) if (folder / n).is_file())
    if size > spec.MAX_MODEL_MIB * 2**20:
        return f"not evaluated: its files are {size / 2**20:.0f} MiB, over the {spec.MAX_MODEL_MIB:g} MiB the evaluator is given"
    return None


def _unanswered(rec: ExportRecord, version: str, why: str) -> dict[str, Any]:
    return {"digest": rec.digest, "onnx": version, "checker": None, "probes": {}, "unanswered": why}


def _store(out: Path, key: str, fact: dict[str, Any]) -> dict[str, Any]:
    path = spec.cache_path(out, key)
    path.parent.mkdir(parents=True, exist_ok=True)
    cache.write_json(path, fact)
    return fact
