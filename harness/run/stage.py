"""Run stage (runtime environment): artifacts × one runtime × its columns → one shard per column.

Runs in an environment holding one pinned runtime package, numpy and the harness (``--no-deps``); never
torch. Reads the export's files through :mod:`harness.store.layout`; writes
``build/shards/<runtime-id>-<column>.jsonl``. Which backend runs the cells, and how a column is set up, is
the registry's (:mod:`harness.config.runtimes`); the cells themselves are the backend contract's
(:mod:`harness.run.backends.loop`) and come back through :mod:`harness.run._dispatch`. Per column, top to bottom:

1. :func:`_column_record`: a broken environment, or a column that cannot run here, is one runtime-wide
   record (``env-error``, ``unavailable``) with the reason and the fix, sealed, never one failure per cell;
2. :meth:`_Column.plan`: every cell whose content address (:func:`harness.store.cache.cell_key`) is unchanged,
   whose line passes its checksum, that its shard's seal vouches for (:func:`harness.store.layout.resume`: a shard
   changed after it was sealed is redone whole) and that does not depend on the machine is kept; the rest
   become tasks;
3. :meth:`_Column.correctness`: the tasks in worker processes, each cell appended as it arrives and
   checkpointed in the shard's open seal (fsynced at least every half second): a worker that dies or hangs
   costs the probe it was on;
4. :meth:`_Column.latency`: serially, with a fixed thread count, so no two timed sessions share the CPU;
5. :meth:`_Column.seal`: the shard rewritten atomically, one line per cell, and sealed for the report and
   :mod:`harness.store.plan` (never where an artifact's files changed since the export).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.config import platforms
from harness.config.matrix import Matrix, Runtime
from harness.config.runtimes import provider
from harness.core.errors import HarnessError
from harness.core.records import CellRecord, ExportRecord, Outcome, Stage, Status, fallback_note, first_line, runtime_wide
from harness.pool.progress import Progress
from harness.run import _dispatch as dispatch
from harness.run import envprobe
from harness.run.backends.messages import CellTask, LatencyTask, ReferenceSource
from harness.store import cache, frontier, layout, stamps

# Depend on this machine, not on the artifact: never reused by a rerun.
# A timeout may be the machine's load, not the artifact: run again next time, like these two.
_NOT_REUSED = (Status.ENV_ERROR, Status.UNAVAILABLE, Status.TIMEOUT)
# A large model's node values recorded on demand could not be had on this machine: another may have them.
_NOT_RECORDED = "comparison: not recorded"


def run_runtime(
    matrix: Matrix,
    runtime: Runtime,
    columns: Iterable[str],
    out: Path,
    *,
    force: bool = False,
    latency: bool = True,
    unmeasured: str = "",
    how: str = "native",
    cannot: str = "",
    echo: Callable[[str], Any] = print,
) -> list[CellRecord]:
    """Run every artifact of the last export on ``runtime`` for each column; return the shards' cells. ``unmeasured``:
    why this runtime cannot run here at all (the Python it runs on is missing): each column is one runtime-wide
    ``env-error`` record saying so, and its frontier is recorded as not measured, for that reason. ``how``: how this
    process runs (``native``, or ``emulated: qemu-user …`` under a launcher, :mod:`harness.config.launchers`): an
    emulated column publishes verdicts and differences, never latency (the emulator's speed is not the CPU's), and
    measures no frontier (what a runtime loads is the runtime's, measured natively). ``cannot``: why the platform
    ``columns`` name cannot run on this machine (no emulator has AVX-512; qemu-user missing): each is one runtime-wide
    ``unavailable`` record saying so; the runtime itself runs here (its frontier is measured).

    Raises:
        HarnessError: an artifact's files changed since the export wrote them (after every other cell ran).
    """
    artifacts = layout.load_artifacts(out)
    (out / layout.SHARDS).mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    if unmeasured:
        env, import_error, cpu_problem = None, unmeasured, None
    else:
        env, import_error, cpu_problem = envprobe.environment(out, force, runtime.kind.backend)
    if env is not None and (wrong := envprobe.wrong_environment(env, runtime)):
        import_error, env = wrong, None
    damaged = layout.damaged(out, artifacts) if env is not None else {}
    for art_id, why in list(damaged.items())[:3]:
        echo(f"run {runtime.pin}: {art_id}: {why}: its cells are not run or reused")
    all_cells: list[CellRecord] = []
    emulated = how != "native"
    for column in columns:
        col_env = _column_env(env, column, how)
        wide: CellRecord | None
        if cannot:  # the platform cannot run here: nothing of this machine's CPU is its, and nothing is checked against it
            bare = {k: v for k, v in (env or {}).items() if k not in _HOST_FACTS}
            wide = runtime_wide(runtime.pin, column, bare, **Outcome.PROVIDER_UNAVAILABLE.fields(), error_line=cannot)
            wide = wide.replace(error=cannot)
        else:
            wide = _column_record(runtime, column, col_env, import_error, cpu_problem)
        if wide is not None:
            all_cells.append(_seal_wide(out, runtime, column, wide, echo))
            continue
        assert col_env is not None
        run = _Column(matrix, runtime, column, out, artifacts, col_env, damaged, echo)
        all_cells.extend(run.go(force=force, latency=latency and not emulated, timed=not emulated))
    if not emulated:
        frontier.measure_if_stale(out, runtime, force=force, unmeasured=unmeasured, echo=echo)
    if damaged:
        art_id, why = next(iter(damaged.items()))
        raise HarnessError(
            f"run {runtime.pin}: {len(damaged)} artifact(s) changed since the export wrote them ({art_id}: {why}); "
            "their cells were not run: run the export again (`nox -s matrix` does), then this run"
        )
    return all_cells


_HOST_FACTS = ("isa", "isa_features", "machine", "cpu", "how")
"""What the probe says of the CPU its process ran on: not a fact of a platform column this machine cannot run."""


def _column_env(env: dict[str, str] | None, column: str, how: str) -> dict[str, str] | None:
    """The environment a column's cells record: a platform column (``cpu@aarch64``) adds how it ran and keeps the
    instruction sets its process saw (its proof); the plain columns keep only the level (``isa``)."""
    if env is None:
        return None
    if platforms.of(column):
        if how != "native":  # /proc/cpuinfo under qemu-user is the host's: the model is the emulated one
            return {**env, "how": how, "cpu": f"{how.rpartition('-cpu ')[2]} (emulated on {env.get('cpu', 'this host')})"}
        return {**env, "how": how}
    return {k: v for k, v in env.items() if k != "isa_features"}


def _column_record(
    runtime: Runtime, column: str, env: dict[str, str] | None, import_error: str, cpu_problem: str | None
) -> CellRecord | None:
    """The one record standing for a whole column that cannot run here (None: it can); a platform column whose
    process saw another CPU than the one it names is one ``env-error``: never published as that platform."""
    wrong = None
    if env is not None and (named := platforms.of(column)):
        features = dict.fromkeys(env.get("isa_features", "").split(), True)
        wrong = platforms.contradiction(named, features, env.get("machine", ""))
    if wrong is not None:
        fix = "; its launcher runs another CPU than it names (harness/config/launchers.py): not published as " + named
        wide = runtime_wide(runtime.pin, column, env or {}, **Outcome.NO_ENVIRONMENT.fields(), error_line=wrong + fix)
    elif env is None:
        wide = runtime_wide(
            runtime.pin,
            column,
            {},
            **Outcome.NO_ENVIRONMENT.fields(),
            error_line=first_line(import_error),
            error=import_error,
        )
    elif problem := (cpu_problem if column.partition("@")[0] == "cpu" else envprobe.probe_column(column, runtime)):
        wide = runtime_wide(runtime.pin, column, env, **Outcome.PROVIDER_UNAVAILABLE.fields(), error_line=problem)
    else:
        return None
    return wide.replace(error=wide.error or wide.error_line)


def _seal_wide(out: Path, runtime: Runtime, column: str, wide: CellRecord, echo: Callable[[str], Any]) -> CellRecord:
    echo(f"run {runtime.pin} {column}: {wide.status.value}: {wide.error_line}")
    path = layout.shard_path(out, runtime, column)
    layout.write_shard(path, [wide])
    # Sealed (the report may publish it), but never up to date: it depends on this machine, checked every run.
    layout.seal(path, {"redo": f"{wide.status.value} here: checked again every run", "env": cache.environment()})
    return wide


class _Column:
    """One column's run: what to keep, what to run, the shard it appends to and seals."""

    def __init__(
        self,
        matrix: Matrix,
        runtime: Runtime,
        column: str,
        out: Path,
        artifacts: list[ExportRecord],
        env: dict[str, str],
        damaged: Mapping[str, str],
        echo: Callable[[str], Any],
    ) -> None:
        self.matrix, self.runtime, self.column, self.out = matrix, runtime, column, out
        self.artifacts, self.env, self.damaged, self.echo = artifacts, env, damaged, echo
        self.path = layout.shard_path(out, runtime, column)
        self.log = out / "logs" / f"{runtime.id}.log"
        self.records = {r.key.id: r for r in artifacts}
        self.options = _options(matrix, runtime, column, out)
        manifest = cache.read_json(out / layout.MANIFEST) or {}
        # Where a worker has the node values of a large model's mismatching probe recorded on demand.
        self.reference = ReferenceSource(
            manifest.get("reference_python"), str(out / "cache" / "reference"), matrix.export.reference_timeout
        )
        self.cells: dict[str, CellRecord] = {}
        self.kept: list[CellRecord] = []
        """Cells of artifacts this export does not hold, or whose files changed: left in the shard as they are."""
        self.keys: dict[str, str] = {}
        """Cell key → content address, for every probe of an exported artifact."""
        self.stats = dispatch.Stats()
        self.timed = True

    def go(self, *, force: bool, latency: bool, timed: bool = True) -> list[CellRecord]:
        """``timed``: whether this column's passing examples get a latency at all (an emulated one: never)."""
        self.timed = timed
        t_start = time.perf_counter()
        tasks = self.plan(force)
        self.layout_shard()
        appender = layout.Appender(self.path)
        cut_short = False
        try:
            self.correctness(tasks, appender)
            if latency:
                cut_short = self.latency(appender)
        finally:
            appender.close()
        layout.write_shard(self.path, [*self.cells.values(), *self.kept], appender.lines)
        self.stats.cells, self.stats.wall = len(self.cells), time.perf_counter() - t_start
        if not self.damaged:  # else not sealed: the report refuses a shard that lacks these artifacts' cells
            self.seal(latency, cut_short)
        if cut_short:  # sealed (whole, untimed where it stopped), then the interruption goes on
            raise KeyboardInterrupt
        return list(self.cells.values())

    def plan(self, force: bool) -> list[CellTask]:
        """Keep what is reusable, decide what the export decided, and make a task of each artifact's rest."""
        existing, corrupt, distrust = ({}, 0, None) if force else layout.resume(self.path)
        if distrust is not None:  # a seal that vouches for none of it: every line of it is evidence of nothing
            self.echo(f"run {self.runtime.pin} {self.column}: {distrust}: none of its cells is reused, every cell runs again")
        if corrupt:
            what = f"{corrupt} line(s) of {self.path} fail their checksum: those cells run again"
            self.echo(f"run {self.runtime.pin} {self.column}: {what}")
        # Cells of artifacts this export does not hold (another profile's opsets, a --cases subset) stay in the shard
        # for the next run that holds them again; the report reads only the export's artifacts.
        self.kept = [c for c in existing.values() if not c.runtime_wide and c.artifact.id not in self.records]
        # What the environment really holds (versions, platform, CPU, GPU) decides a verdict and a latency as much as
        # the pin does: a recreated environment or another machine measures again.
        settings = {**stamps.run_settings(self.matrix, self.column, self.runtime), "env": self.env}
        code = stamps.run_code(self.runtime)
        tasks, partial = [], 0
        for rec in self.artifacts:
            base = rec.cell(self.runtime.pin, self.column, _cell_env(self.env, rec))
            if rec.ok and rec.key.id in self.damaged:
                # Files that are no longer the export's: no cell is computed from them or reused for them (the cells
                # already in the shard stay for a rerun on the repaired files, which checks them again).
                self.kept.extend(c for c in existing.values() if not c.runtime_wide and c.artifact.id == rec.key.id)
                continue
            if not rec.ok:
                self.cells.update((c.key, c) for c in _static_cells(rec, base))
                continue
            todo = []
            for p in rec.probes:
                where = base.replace(probe=p).key
                self.keys[where] = cache.cell_key(rec.digest, self.runtime.gpu_install, self.column, p, settings, code)
                old = existing.get(where)
                if old is not None and reusable(old, self.keys[where]):
                    self.cells[old.key] = old
                else:
                    todo.append(p)
            if todo:
                partial += len(todo) < len(rec.probes)
                tasks.append(self.task(rec, base, todo))
        self.stats = dispatch.Stats(reused=len(self.cells), corrupt=corrupt, ran=sum(len(t.probes) for t in tasks))
        self.echo(
            f"run {self.runtime.pin} {self.column}: {len(self.artifacts)} artifacts, {len(tasks)} to run"
            + (f" ({partial} only in part: their other probes are kept)" if partial else "")
            + f", {len(self.artifacts) - len(tasks)} decided or reused"
        )
        return tasks

    def task(self, rec: ExportRecord, base: CellRecord, probes: list[str]) -> CellTask:
        return CellTask(
            dir=str(layout.artifact_dir(self.out, rec.key.id)),
            runtime=self.runtime.pin,
            column=self.column,
            backend=self.runtime.kind.backend,
            env=base.env,
            options=self.options,
            probes=tuple(probes),
            keys={p: self.keys[base.replace(probe=p).key] for p in probes},
            reference=self.reference,
            # kept for the spread across platforms and, of a transformed file, for its drift from torch's fp32 outputs
            outputs=str(self.out / layout.OUTPUTS) if platforms.of(self.column) or rec.transform else "",
        )

    def layout_shard(self) -> None:
        """Start the shard afresh with what is kept, under an open seal (:func:`harness.store.layout.checkpoint`)."""
        layout.write_shard(self.path, [*self.cells.values(), *self.kept])

    def correctness(self, tasks: list[CellTask], appender: layout.Appender) -> None:
        t0 = time.perf_counter()
        workers = self.matrix.run.workers_for(provider(self.column))
        progress = Progress(f"run {self.runtime.pin} {self.column}", len(tasks), self.echo, workers=workers)
        progress.expect(self.records[Path(t.dir).name].case for t in tasks)
        timeout = self.matrix.run.timeout
        for cell in dispatch.correctness(
            tasks, self.records, workers=workers, timeout=timeout, log=self.log, stats=self.stats, progress=progress
        ):
            cell = captured(cell, self.records.get(cell.artifact.id))
            self.cells[cell.key] = cell
            appender.add([cell])
        self.stats.correctness_wall = time.perf_counter() - t0
        if tasks:
            self.echo(f"  correctness: {len(tasks)} artifacts in {self.stats.correctness_wall:.1f}s")

    def latency(self, appender: layout.Appender) -> bool:
        """Time the ``example`` probe of every passing artifact that has no latency yet; True when SIGTERM or
        Ctrl-C cut it short (every verdict is in already)."""
        todo = {c.artifact.id: c for c in self.cells.values() if _untimed(c)}
        if not todo:
            return False
        lat = dataclasses.asdict(self.matrix.latency)
        backend = self.runtime.kind.backend
        tasks = [LatencyTask(str(layout.artifact_dir(self.out, a)), self.column, backend, lat, self.options) for a in todo]
        t0, timed = time.perf_counter(), 0
        try:
            for cell in dispatch.latency(tasks, todo, timeout=self.matrix.run.timeout, log=self.log, stats=self.stats):
                self.cells[cell.key] = cell
                appender.add([cell])  # as it arrives: a kill loses no timing already taken
                timed += 1
        except KeyboardInterrupt:
            return True
        finally:
            self.stats.latency_wall = time.perf_counter() - t0
        self.echo(f"  latency: {timed} artifacts in {self.stats.latency_wall:.1f}s (serial, {lat['threads']} thread)")
        return False

    def seal(self, latency: bool, cut_short: bool) -> None:
        """Sealed: this run ended and wrote every cell of the export (the report publishes only sealed shards).
        Up to date (the plan skips the session next time) only when a rerun would find nothing to do."""
        redo = None if latency or not self.timed else "its last run skipped the latency phase (--no-latency)"
        if cut_short:
            redo = "its last run's latency phase was cut short (SIGTERM or Ctrl-C)"
        if redo is None and not finished(self.cells.values(), self.keys, timed=self.timed):
            redo = "its last run left cells to do again (a timeout, a localization cut short)"
        artifacts = ((r.key.id, r.cache_key, r.digest) for r in self.artifacts)
        inputs = stamps.shard_inputs(artifacts, self.matrix, self.runtime, self.column)
        layout.seal(self.path, {"inputs": inputs, "redo": redo, "env": cache.environment(), "stats": self.stats.to_dict()})


def _options(matrix: Matrix, runtime: Runtime, column: str, out: Path) -> dict[str, Any]:
    """What the backend is handed for a column: matrix.toml's options, and where a provider that builds engines
    keeps them (by artifact, version, GPU and precision: see the backends)."""
    options = matrix.options(column, runtime.kind)
    if provider(column).engine_cache:
        options["engine_cache"] = str(out / "cache" / "trt-engines" / runtime.id / column)
    return options


def _cell_env(env: Mapping[str, str], rec: ExportRecord) -> dict[str, str]:
    """The runtime env as measured here, plus the versions the artifact was exported with."""
    exported = {k: v for k, v in rec.versions.items() if k in ("torch", "onnx", "onnxscript")}
    return {**exported, **env}


def captured(cell: CellRecord, rec: ExportRecord | None) -> CellRecord:
    """A cell of a dynamo export that torch did not capture with ``torch.export`` (:attr:`ExportRecord.fell_back`):
    a pass is :attr:`Status.FALLBACK`, never a dynamo pass, and every verdict says what captured the graph."""
    if rec is None or not rec.fell_back or cell.runtime_wide:
        return cell
    if cell.status is Status.PASS:
        cell = cell.replace(status=Outcome.CAPTURE_FALLBACK.status)
    return cell.noted(fallback_note(rec))


def _static_cells(rec: ExportRecord, base: CellRecord) -> list[CellRecord]:
    """Cells decided without running anything: the export failed, ran out of its time (``timeout``, the
    phase and the key to raise in the line), or does not apply."""
    fields = {"error_class": rec.error_class, "error_line": rec.error_line, "error": rec.error}
    return rec.each_probe(base, status=rec.outcome.status, stage=Stage.EXPORT, **fields)


def reusable(old: CellRecord | None, key: str) -> bool:
    """A finished cell with the same content address, decided by the artifact: not a harness bug, not what this
    machine decides (but a provider that took no node of the graph: its version and the artifact decide that), and
    not a mismatch whose localization a killed run left undone (or a fault cut short, or the reference values a
    large model needs could not be recorded here)."""
    if old is None or old.cache_key != key or old.error_class == Outcome.HARNESS_ERROR.error_class:
        return False
    if old.status in _NOT_REUSED and old.error_class != Outcome.PROVIDER_TOOK_NO_NODE.error_class:
        return False
    note = old.note or ""
    localized = old.optimizer is not None and dispatch.CUT_SHORT not in note and _NOT_RECORDED not in note
    return old.status is not Status.MISMATCH or localized


def finished(cells: Iterable[CellRecord], keys: Mapping[str, str], *, timed: bool = True) -> bool:
    """Whether a rerun would find nothing to do: every cell of an exported artifact (those ``keys``
    holds) reusable, every passing example timed (where the column is ``timed``). Only then is the shard stamped up
    to date (and ``nox -s matrix`` skips its session)."""
    for c in cells:
        if c.key not in keys:
            continue  # decided by the export alone (failed, skipped)
        if not reusable(c, keys[c.key]):
            return False
        if timed and _untimed(c):
            return False
    return True


def _untimed(c: CellRecord) -> bool:
    """A passing ``example`` probe without its latency: what the latency phase times."""
    return c.probe == "example" and c.status is Status.PASS and c.latency is None
