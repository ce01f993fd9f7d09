"""Run stage (runtime environment): artifacts × one runtime × providers → shard.

Runs in an environment holding one pinned onnxruntime, numpy and the harness
(``--no-deps``); never torch. Reads ``build/manifest.json`` and the artifacts
the export stage wrote; writes ``build/shards/<runtime-id>-<provider>.jsonl``.

Guarantees kept here:

- One bad cell never takes down the run: artifacts run in worker processes
  (:mod:`harness.workers`); a worker that dies is ``crash`` with its signal,
  one that hangs is ``timeout``.
- A broken environment (the runtime does not import) is ``env-error`` for its
  cells, with the import error, not a crashed session.
- Nothing is lost: records are appended and flushed as they arrive; a rerun
  keeps the cells whose artifact (sha256) and probes are unchanged and redoes
  the rest; the shard is rewritten atomically at the end, one line per cell.
- Latency is measured after the correctness phase, serially, with a fixed
  thread count, so no two timed sessions share the CPU.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from harness.errors import HarnessError
from harness.export import MANIFEST
from harness.matrix import Matrix, Runtime
from harness.records import CellRecord, ExportRecord, Latency, Stage, Status, first_line
from harness.workers import run_tasks

_ENV_PROBE = "import json; from harness.backends.onnxruntime import environment; print(json.dumps(environment()))"


def shard_path(out: Path, runtime: Runtime, provider: str) -> Path:
    return out / "shards" / f"{runtime.id}-{provider}.jsonl"


def read_shard(path: Path) -> dict[str, CellRecord]:
    """Cells of a shard by key; a later line for the same key wins; a torn last line is ignored."""
    cells: dict[str, CellRecord] = {}
    if not path.exists():
        return cells
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            cell = CellRecord.from_dict(json.loads(line))
        except (ValueError, KeyError, TypeError):
            continue  # a line cut short by a kill
        cells[cell.key] = cell
    return cells


def write_shard(path: Path, cells: Iterable[CellRecord]) -> None:
    """Rewrite a shard atomically, sorted by key."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for cell in sorted(cells, key=lambda c: c.key):
            f.write(json.dumps(cell.to_dict(), sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class _Appender:
    """Append-only, flushed writes: a kill loses at most the line being written."""

    def __init__(self, path: Path) -> None:
        self.f = open(path, "a", encoding="utf-8")  # noqa: SIM115 (held open across appends)

    def add(self, cells: Iterable[CellRecord]) -> None:
        for cell in cells:
            self.f.write(json.dumps(cell.to_dict(), sort_keys=True) + "\n")
        self.f.flush()
        os.fsync(self.f.fileno())

    def close(self) -> None:
        self.f.close()


def probe_environment() -> tuple[dict[str, str] | None, str]:
    """Import the runtime in a child process: (environment, '') or (None, what went wrong).

    The message's first line is the diagnosis; the child's stderr follows it.
    """
    proc = subprocess.run([sys.executable, "-c", _ENV_PROBE], capture_output=True, text=True, timeout=300)
    if proc.returncode == 0:
        return json.loads(proc.stdout.strip().splitlines()[-1]), ""
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.match(r"^\w+(Error|Exception)\b", ln)]
    what = " / ".join(dict.fromkeys(errors)) or (lines[-1] if lines else f"exit status {proc.returncode}")
    line = f"onnxruntime fails to import: {what}"
    if "_ARRAY_API" in proc.stderr or "numpy.core.multiarray failed to import" in proc.stderr:
        line += ' (built for numpy 1.x: add constraints = ["numpy<2"] to its [[runtimes]] entry)'
    return None, line + "\n" + proc.stderr[-4000:]


def load_artifacts(out: Path) -> list[ExportRecord]:
    manifest = out / MANIFEST
    if not manifest.exists():
        raise HarnessError(f"{manifest}: no export found; run `nox -s export` (or `harness export`) first")
    ids = json.loads(manifest.read_text())["artifacts"]
    records = []
    for art_id in ids:
        path = out / "artifacts" / art_id / "export.json"
        if not path.exists():
            raise HarnessError(f"{path}: missing although the manifest lists it; rerun the export")
        records.append(ExportRecord.from_dict(json.loads(path.read_text())))
    return records


def _cell_env(env: dict[str, str] | None, rec: ExportRecord) -> dict[str, str]:
    """The runtime env as measured here, plus the versions the artifact was exported with."""
    exported = {k: v for k, v in rec.versions.items() if k in ("torch", "onnx", "onnxscript")}
    return {**exported, **(env or {})}


def _static_cells(rec: ExportRecord, base: CellRecord) -> list[CellRecord]:
    """Cells decided without running anything: the export failed or does not apply."""
    status = Status.SKIPPED if rec.error_class == "Skipped" else Status.EXPORT_FAIL
    return rec.each_probe(
        base, status=status, stage=Stage.EXPORT, error_class=rec.error_class, error_line=rec.error_line, error=rec.error
    )


def run_runtime(
    matrix: Matrix,
    runtime: Runtime,
    providers: Iterable[str],
    out: Path,
    *,
    force: bool = False,
    latency: bool = True,
    echo: Callable[[str], Any] = print,
) -> list[CellRecord]:
    """Run every artifact of the last export on ``runtime`` for each provider."""
    artifacts = load_artifacts(out)
    (out / "shards").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    env, import_error = probe_environment()
    if env is not None and env.get("onnxruntime") != runtime.version:
        import_error = f"environment has onnxruntime {env.get('onnxruntime')}, expected {runtime.version}"
        env = None
    all_cells: list[CellRecord] = []
    for provider in providers:
        path = shard_path(out, runtime, provider)
        existing = {} if force else read_shard(path)
        cells: dict[str, CellRecord] = {}
        tasks: list[dict[str, Any]] = []
        by_dir: dict[str, ExportRecord] = {}
        for rec in artifacts:
            base = rec.cell(runtime.pin, provider, _cell_env(env, rec))
            if env is None:
                new = rec.each_probe(
                    base,
                    status=Status.ENV_ERROR,
                    error_class="EnvironmentError",
                    error_line=first_line(import_error),
                    error=import_error,
                )
            elif not rec.ok:
                new = _static_cells(rec, base)
            else:
                old = [existing.get(base.replace(probe=p).key) for p in rec.probes]
                if all(c is not None and c.inputs == rec.digest and c.status is not Status.ENV_ERROR for c in old):
                    new = [c for c in old if c is not None]
                else:
                    art_dir = str(out / "artifacts" / rec.key.id)
                    by_dir[art_dir] = rec
                    tasks.append({"dir": art_dir, "provider": provider, "runtime": runtime.pin, "env": base.env, "threads": 1})
                    continue
            for c in new:
                cells[c.key] = c
        redo = len(tasks)
        echo(
            f"run {runtime.pin} {provider}: {len(artifacts)} artifacts, {redo} to run, "
            f"{len(artifacts) - redo} decided or reused" + ("" if env else f" (env-error: {first_line(import_error)})")
        )
        # Start the shard afresh with what is kept, then append as results arrive.
        write_shard(path, cells.values())
        appender = _Appender(path)
        try:
            t0 = time.perf_counter()
            for outcome in run_tasks(
                "harness.backends.onnxruntime:run_artifact",
                tasks,
                workers=matrix.run.worker_count,
                timeout=matrix.run.timeout,
                init="harness.backends.onnxruntime:init_worker",
                log=str(out / "logs" / f"{runtime.id}.log"),
            ):
                rec = by_dir[outcome.task["dir"]]
                if outcome.kind == "ok":
                    new = [CellRecord.from_dict(d) for d in outcome.value]
                else:
                    new = _worker_failure(rec, outcome.task, outcome.kind, outcome.value, outcome.seconds)
                for c in new:
                    cells[c.key] = c
                appender.add(new)
            if redo:
                echo(f"  correctness: {redo} artifacts in {time.perf_counter() - t0:.1f}s")
            if latency and env is not None:
                timed = _latency_phase(matrix, out, provider, cells, runtime, echo)
                appender.add(timed)
                for c in timed:
                    cells[c.key] = c
        finally:
            appender.close()
        write_shard(path, cells.values())
        all_cells.extend(cells.values())
    return all_cells


def _worker_failure(rec: ExportRecord, task: dict[str, Any], kind: str, value: Any, seconds: float) -> list[CellRecord]:
    status = {"crash": Status.CRASH, "timeout": Status.TIMEOUT}.get(kind)
    if status is None:  # the backend raised: a harness bug, kept visible in the table
        cls, msg, tb = value
        status, line, full = Status.CRASH, f"harness error {cls}: {first_line(msg)}", tb
    else:
        line = full = str(value)
    base = rec.cell(task["runtime"], task["provider"], task["env"])
    return rec.each_probe(
        base, status=status, stage=Stage.RUN, error_class=kind.capitalize(), error_line=line, error=full, seconds=seconds
    )


def _latency_phase(
    matrix: Matrix, out: Path, provider: str, cells: dict[str, CellRecord], runtime: Runtime, echo: Callable[[str], Any]
) -> list[CellRecord]:
    """Serial timing of the ``example`` probe of every passing artifact that has none yet."""
    todo = {c.artifact.id: c for c in cells.values() if c.probe == "example" and c.status is Status.PASS and c.latency is None}
    if not todo:
        return []
    lat = {
        "threads": matrix.latency.threads,
        "warmup": matrix.latency.warmup,
        "min_runs": matrix.latency.min_runs,
        "max_runs": matrix.latency.max_runs,
        "budget_seconds": matrix.latency.budget_seconds,
    }
    tasks = [{"dir": str(out / "artifacts" / art_id), "provider": provider, "latency": lat} for art_id in todo]
    timed = []
    t0 = time.perf_counter()
    for outcome in run_tasks(
        "harness.backends.onnxruntime:measure_latency",
        tasks,
        workers=1,
        timeout=matrix.run.timeout,
        init="harness.backends.onnxruntime:init_worker",
        log=str(out / "logs" / f"{runtime.id}.log"),
    ):
        if outcome.kind == "ok":
            art_id = Path(outcome.task["dir"]).name
            timed.append(todo[art_id].replace(latency=Latency.from_dict(outcome.value), stage=Stage.LATENCY))
    echo(f"  latency: {len(timed)} artifacts in {time.perf_counter() - t0:.1f}s (serial, {lat['threads']} thread)")
    return timed
