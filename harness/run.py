"""Run stage (runtime environment): artifacts × one runtime × providers → shard.

Runs in an environment holding one pinned onnxruntime, numpy and the harness
(``--no-deps``); never torch. Reads ``build/manifest.json`` and the artifacts
the export stage wrote; writes ``build/shards/<runtime-id>-<provider>.jsonl``.

Guarantees kept here:

- One bad cell never takes down the run: artifacts run in worker processes
  (:mod:`harness.workers`) that stream a cell per probe; a worker that dies is
  ``crash`` with its signal, one that hangs past ``[run] timeout`` is
  ``timeout``, each charged to the probe it was running; the probes after it
  run in a fresh worker.
- A broken environment (the runtime does not import) is one ``env-error``
  record for the runtime × provider, with the import error and the fix, not a
  crashed session and not one identical failure per cell.
- Nothing is lost: each cell is appended as it arrives (and fsynced at least
  every half second); a rerun keeps every cell whose content address
  (:func:`harness.cache.cell_key`) is unchanged and whose line passes its
  checksum, and runs only the missing probes; the shard is rewritten
  atomically at the end, one line per cell, and stamped for :mod:`harness.plan`.
- Latency is measured after the correctness phase, serially, with a fixed
  thread count, so no two timed sessions share the CPU.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from harness import cache, frontier, shards
from harness.errors import HarnessError
from harness.export import DATA, MANIFEST
from harness.matrix import PROVIDERS, Matrix, Runtime, split_column
from harness.progress import Progress
from harness.records import CellRecord, ExportRecord, Latency, Stage, Status, first_line, runtime_wide
from harness.workers import MemoryGate, Outcome, describe_exit, run_tasks

# The backend module per runtime package: it runs the cells (``run_artifact``, ``measure_latency``) and
# says what the environment holds (``environment``) and why a provider column cannot run (``provider_problem``).
BACKENDS = {
    "onnxruntime": "harness.backends.onnxruntime",
    "onnxruntime-gpu": "harness.backends.onnxruntime",
    "tensorrt": "harness.backends.tensorrt",
}


def _env_probe(module: str) -> str:
    """One child imports the runtime and answers for the CPU provider too (it loads no library of its own)."""
    cpu = "provider_problem('cpu')" if module.endswith(".onnxruntime") else "None"
    return (
        f"import json; from {module} import environment, provider_problem; "
        f"print(json.dumps({{'env': environment(), 'cpu': {cpu}}}))"
    )


def shard_path(out: Path, runtime: Runtime, provider: str) -> Path:
    return out / "shards" / f"{runtime.id}-{provider}.jsonl"


def read_shard(path: Path) -> dict[str, CellRecord]:
    """Cells of a shard by key (a later line for the same key wins); a damaged line is left out."""
    return _read_shard(path)[0]


def _read_shard(path: Path) -> tuple[dict[str, CellRecord], int]:
    """The cells, and how many lines are damaged (cut short by a kill, not UTF-8, a wrong checksum,
    not a cell): :func:`harness.shards.read`; a missing shard has none."""
    if not path.exists():
        return {}, 0
    return shards.read(path)


def write_shard(path: Path, cells: Iterable[CellRecord]) -> None:
    """Rewrite a shard atomically, sorted by key, each line sealed with its checksum."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for cell in sorted(cells, key=lambda c: c.key):
            f.write(cache.seal(cell.to_dict()) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class _Appender:
    """Append-only writes, each line handed to the kernel at once (a killed run loses at most the
    line being written) and forced to disk at least every ``sync`` seconds and at the end (what a
    power cut could take)."""

    def __init__(self, path: Path, sync: float = 0.5) -> None:
        self.f = open(path, "a", encoding="utf-8")  # noqa: SIM115 (held open across appends)
        self.sync, self.synced = sync, time.monotonic()

    def add(self, cells: Iterable[CellRecord]) -> None:
        for cell in cells:
            self.f.write(cache.seal(cell.to_dict()) + "\n")
        self.f.flush()
        if time.monotonic() - self.synced >= self.sync:
            os.fsync(self.f.fileno())
            self.synced = time.monotonic()

    def close(self) -> None:
        self.f.flush()
        os.fsync(self.f.fileno())
        self.f.close()


def probe_environment(module: str = BACKENDS["onnxruntime"]) -> tuple[dict[str, str] | None, str, str | None]:
    """Import the runtime in a child process: (environment, '', why the CPU provider cannot run or None)
    or (None, what went wrong, None).

    The message's first line is the diagnosis; the child's stderr follows it.
    """
    proc = subprocess.run([sys.executable, "-c", _env_probe(module)], capture_output=True, text=True, timeout=300)
    numpy_abi = "_ARRAY_API" in proc.stderr or "numpy.core.multiarray failed to import" in proc.stderr
    # onnxruntime 1.15 beside numpy 2 imports "fine" (exit status 0, the error only printed) and then
    # crashes on every run: an import that complains about numpy's ABI is a broken env either way.
    if proc.returncode == 0 and not numpy_abi:
        found = json.loads(proc.stdout.strip().splitlines()[-1])
        return found["env"], "", found["cpu"]
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.match(r"^\w+(Error|Exception)\b", ln)]
    what = " / ".join(dict.fromkeys(errors)) or (lines[-1] if lines else f"exit status {proc.returncode}")
    line = f"{module.rsplit('.', 1)[-1]} fails to import: {what}"
    if numpy_abi:
        line += ' (built for numpy 1.x: add constraints = ["numpy<2"] to its [[runtimes]] entry)'
    return None, line + "\n" + proc.stderr[-4000:], None


def _environment(out: Path, force: bool, module: str = BACKENDS["onnxruntime"]) -> tuple[dict[str, str] | None, str, str | None]:
    """:func:`probe_environment`, remembered per environment and machine: the same packages on the
    same host import the same way, so a rerun starts no child for it. A failed import is never
    remembered; GPU providers are checked every time (a driver can come and go)."""
    ident = cache.environment()
    if ident["listing"] is None:
        return probe_environment(module)
    nvidia = Path("/proc/driver/nvidia/version")
    key = cache.digest(module, ident["listing"], platform.node(), nvidia.read_text() if nvidia.is_file() else None)
    path = out / "cache" / "envs" / f"{key[:32]}.json"
    hit = None if force else cache.read_json(path)
    if isinstance(hit, dict) and hit.get("key") == key:
        return hit["env"], "", hit["cpu"]
    env, error, cpu = probe_environment(module)
    if env is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        cache.write_json(path, {"key": key, "env": env, "cpu": cpu})
    return env, error, cpu


_PROVIDER_PROBE = (
    "import json, sys, importlib; print(json.dumps(importlib.import_module(sys.argv[1]).provider_problem(sys.argv[2])))"
)


def probe_provider(provider: str, module: str = BACKENDS["onnxruntime"]) -> str | None:
    """Why the ``provider`` column cannot run in this environment (one line), or None; checked in a
    child process, because loading a GPU provider's libraries can kill the process that loads them."""
    ep = PROVIDERS[split_column(provider)[0]] if module.endswith(".onnxruntime") else f"TensorRT ({provider})"
    try:
        cmd = [sys.executable, "-c", _PROVIDER_PROBE, module, provider]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return f"{ep}: checking whether it loads took over 300 s"
    if proc.returncode != 0:
        how = describe_exit(proc.returncode) if proc.returncode < 0 else f"exit status {proc.returncode}"
        tail = (proc.stderr.strip().splitlines() or [""])[-1]
        return f"{ep}: checking whether it loads crashed ({how})" + (f": {tail}" if tail else "")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return str(found) if found else None


def load_artifacts(out: Path) -> list[ExportRecord]:
    manifest = out / MANIFEST
    if not manifest.exists():
        raise HarnessError(f"{manifest}: no export found; run `nox -s export` (or `harness export`) first")
    again = "rerun the export (`nox -s matrix -- --force`, or delete it and run `nox -s matrix`)"
    data = cache.read_json(manifest)  # None when it is not UTF-8 JSON
    ids = data.get("artifacts") if isinstance(data, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise HarnessError(f"{manifest}: damaged (not the manifest the export writes); {again}")
    records = []
    for art_id in ids:
        path = out / "artifacts" / art_id / "export.json"
        if not path.exists():
            raise HarnessError(f"{path}: missing although the manifest lists it; rerun the export")
        try:
            records.append(ExportRecord.from_dict(cache.read_json(path)))
        except (TypeError, ValueError, KeyError, AttributeError):
            raise HarnessError(f"{path}: damaged (not the record the export writes); {again}") from None
    return records


def _reference_source(matrix: Matrix, out: Path) -> dict[str, Any]:
    """Where a worker has the node values of a large model's mismatching probe recorded on demand: the
    export environment's interpreter (it holds the reference runtime), a cache under ``out``, a budget."""
    manifest = cache.read_json(out / MANIFEST) or {}
    return {
        "python": manifest.get("reference_python"),
        "cache": str(out / "cache" / "reference"),
        "timeout": matrix.export.reference_timeout,
    }


def _cell_env(env: dict[str, str] | None, rec: ExportRecord) -> dict[str, str]:
    """The runtime env as measured here, plus the versions the artifact was exported with."""
    exported = {k: v for k, v in rec.versions.items() if k in ("torch", "onnx", "onnxscript")}
    return {**exported, **(env or {})}


def _static_cells(rec: ExportRecord, base: CellRecord) -> list[CellRecord]:
    """Cells decided without running anything: the export failed, ran out of its time (``timeout``, the
    phase and the key to raise in the line), or does not apply."""
    status = {"Skipped": Status.SKIPPED, "ExporterTimeout": Status.TIMEOUT}.get(rec.error_class or "", Status.EXPORT_FAIL)
    return rec.each_probe(
        base, status=status, stage=Stage.EXPORT, error_class=rec.error_class, error_line=rec.error_line, error=rec.error
    )


# Depend on this machine, not on the artifact: never reused by a rerun.
# A timeout may be the machine's load, not the artifact: run again next time, like these two.
_NOT_REUSED = (Status.ENV_ERROR, Status.UNAVAILABLE, Status.TIMEOUT)
_CUT_SHORT = "localizing this mismatch was cut short"
# A large model's node values recorded on demand could not be had on this machine: another may have them.
_NOT_RECORDED = "comparison: not recorded"


def _reusable(old: CellRecord | None, key: str) -> bool:
    """A finished cell with the same content address, decided by the artifact: not a harness bug, and
    not a mismatch whose localization a killed run left undone (or a fault cut short, or the reference
    values a large model needs could not be recorded here)."""
    if old is None or old.cache_key != key or old.status in _NOT_REUSED or old.error_class == "HarnessError":
        return False
    note = old.note or ""
    localized = old.optimizer is not None and _CUT_SHORT not in note and _NOT_RECORDED not in note
    return old.status is not Status.MISMATCH or localized


def settings_of(matrix: Matrix, provider: str = "cpu", runtime: Runtime | None = None) -> dict[str, Any]:
    """The run settings a cell's verdict and timing depend on: a GPU column's provider options too."""
    settings: dict[str, Any] = {"timeout": matrix.run.timeout, "threads": 1, "latency": dataclasses.asdict(matrix.latency)}
    if provider != "cpu":
        settings["options"] = matrix.options(provider, native=runtime is not None and runtime.package == "tensorrt")
    return settings


def _options(matrix: Matrix, runtime: Runtime, provider: str, out: Path) -> dict[str, Any]:
    """What the backend is handed for a column: matrix.toml's options, and where TensorRT keeps its
    engines (by artifact, TensorRT version, GPU and precision: see the backends)."""
    options = dict(settings_of(matrix, provider, runtime).get("options", {}))
    if split_column(provider)[0] == "tensorrt":
        options["engine_cache"] = str(out / "cache" / "trt-engines" / runtime.id / provider)
    return options


def stamp_path(out: Path, runtime: Runtime, provider: str) -> Path:
    return out / "shards" / f"{runtime.id}-{provider}.stamp.json"


def stamp_inputs(artifacts: Iterable[tuple[str, str | None, str]], matrix: Matrix, runtime: Runtime, provider: str) -> str:
    """What a shard depends on: each artifact's ``(id, export key, digest)``, the runtime's requirements,
    the provider, the run settings and the code that runs cells. :mod:`harness.plan` computes it from
    the export's stamp; a shard whose stamp holds the same value has nothing left to run."""
    return cache.digest(
        sorted(artifacts),
        list(runtime.gpu_install),
        provider,
        settings_of(matrix, provider, runtime),
        cache.code_digest(cache.RUN_CODE),
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
    """Run every artifact of the last export on ``runtime`` for each provider; return the shard's cells.

    A rerun keeps every cell whose content address is unchanged (and which
    does not depend on the machine) and runs only the missing probes.
    """
    artifacts = load_artifacts(out)
    (out / "shards").mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    module = BACKENDS[runtime.package]
    env, import_error, cpu_problem = _environment(out, force, module)
    if env is not None and (wrong := _wrong_environment(env, runtime)):
        import_error, env = wrong, None
    all_cells: list[CellRecord] = []
    damaged = _damaged(out, artifacts) if env is not None else {}
    for art_id, why in list(damaged.items())[:3]:
        echo(f"run {runtime.pin}: {art_id}: {why}: its cells are not run or reused")
    for provider in providers:
        path = shard_path(out, runtime, provider)
        # A broken env, or a provider that cannot run here, is one record for the whole column.
        column: CellRecord | None = None
        if env is None:
            column = runtime_wide(
                runtime.pin,
                provider,
                {},
                status=Status.ENV_ERROR,
                error_class="EnvironmentError",
                error_line=first_line(import_error),
                error=import_error,
            )
        elif problem := (cpu_problem if provider == "cpu" else probe_provider(provider, module)):
            column = runtime_wide(
                runtime.pin, provider, env, status=Status.UNAVAILABLE, error_class="ProviderUnavailable", error_line=problem
            )
        if column is not None:
            column = column.replace(error=column.error or column.error_line)
            echo(f"run {runtime.pin} {provider}: {column.status.value}: {column.error_line}")
            stamp_path(out, runtime, provider).unlink(missing_ok=True)
            write_shard(path, [column])
            # Sealed (the report may publish it), but never up to date: it depends on this machine, checked every run.
            shards.seal(path, {"redo": f"{column.status.value} here: checked again every run", "env": cache.environment()})
            all_cells.append(column)
            continue
        t_start = time.perf_counter()
        existing, corrupt = ({}, 0) if force else _read_shard(path)
        # Cells of artifacts this export does not hold (another profile's opsets, a --cases subset) stay in
        # the shard for the next run that holds them again; the report reads only the export's artifacts.
        current = {r.key.id for r in artifacts}
        kept = [c for c in existing.values() if not c.runtime_wide and c.artifact.id not in current]
        if corrupt:
            echo(f"run {runtime.pin} {provider}: {corrupt} line(s) of {path} fail their checksum: those cells run again")
        # What the environment really holds (versions, platform, CPU, GPU) decides a verdict and a latency
        # as much as the pin does: a recreated environment or another machine measures again.
        settings = {**settings_of(matrix, provider, runtime), "env": env}
        options = _options(matrix, runtime, provider, out)
        reference = _reference_source(matrix, out)
        keys: dict[str, str] = {}  # cell key → content address, for every probe of an exported artifact
        cells: dict[str, CellRecord] = {}
        tasks: list[dict[str, Any]] = []
        partial = 0
        for rec in artifacts:
            base = rec.cell(runtime.pin, provider, _cell_env(env, rec))
            if rec.ok and rec.key.id in damaged:
                # Files that are no longer the export's: no cell is computed from them or reused for them (the
                # cells already in the shard stay for a rerun on the repaired files, which checks them again).
                kept.extend(c for c in existing.values() if not c.runtime_wide and c.artifact.id == rec.key.id)
                continue
            if not rec.ok:
                for c in _static_cells(rec, base):
                    cells[c.key] = c
                continue
            todo = []
            for p in rec.probes:
                where = base.replace(probe=p).key
                keys[where] = cache.cell_key(rec.digest, runtime.gpu_install, provider, p, settings)
                old = existing.get(where)
                if old is not None and _reusable(old, keys[where]):
                    cells[old.key] = old
                else:
                    todo.append(p)
            if todo:
                partial += len(todo) < len(rec.probes)
                tasks.append(
                    {
                        "dir": str(out / "artifacts" / rec.key.id),
                        "provider": provider,
                        "runtime": runtime.pin,
                        "env": base.env,
                        "threads": 1,
                        "options": options,
                        "probes": todo,
                        "keys": {p: keys[base.replace(probe=p).key] for p in todo},
                        "reference": reference,
                    }
                )
        echo(
            f"run {runtime.pin} {provider}: {len(artifacts)} artifacts, {len(tasks)} to run"
            + (f" ({partial} only in part: their other probes are kept)" if partial else "")
            + f", {len(artifacts) - len(tasks)} decided or reused"
        )
        # Start the shard afresh with what is kept, then append as results arrive.
        stamp_path(out, runtime, provider).unlink(missing_ok=True)  # the shard is about to change
        write_shard(path, [*cells.values(), *kept])
        appender = _Appender(path)
        cut_short = False
        stats = Stats(reused=len(cells), corrupt=corrupt, ran=sum(len(t["probes"]) for t in tasks))
        try:
            t0 = time.perf_counter()
            log = out / "logs" / f"{runtime.id}.log"
            records = {r.key.id: r for r in artifacts}
            workers = matrix.run.workers_for(provider)
            progress = Progress(f"run {runtime.pin} {provider}", len(tasks), echo, workers=workers)
            progress.expect(records[Path(t["dir"]).name].case for t in tasks)
            for cell in _correctness(matrix, tasks, records, log, stats, backend=module, workers=workers, progress=progress):
                cells[cell.key] = cell
                appender.add([cell])
            stats.correctness_wall = time.perf_counter() - t0
            if tasks:
                echo(f"  correctness: {len(tasks)} artifacts in {stats.correctness_wall:.1f}s")
            if latency:
                t0 = time.perf_counter()
                try:
                    for cell in _latency_phase(matrix, out, provider, cells, runtime, echo, stats, options=options):
                        cells[cell.key] = cell
                        appender.add([cell])  # as it arrives: a kill loses no timing already taken
                except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (a step's deadline): every verdict is in already
                    cut_short = True
                stats.latency_wall = time.perf_counter() - t0
        finally:
            appender.close()
        write_shard(path, [*cells.values(), *kept])
        stats.cells, stats.wall = len(cells), time.perf_counter() - t_start
        all_cells.extend(cells.values())
        if damaged:
            continue  # not sealed: the report refuses a shard that lacks these artifacts' cells
        # Sealed: this run ended and wrote every cell of the export (the report publishes only sealed shards).
        # Up to date (the plan skips the session next time) only when a rerun would find nothing to do.
        redo = None if latency else "its last run skipped the latency phase (--no-latency)"
        if cut_short:
            redo = "its last run's latency phase was cut short (SIGTERM or Ctrl-C)"
        if redo is None and not _finished(cells.values(), keys):
            redo = "its last run left cells to do again (a timeout, a localization cut short)"
        inputs = stamp_inputs(((r.key.id, r.cache_key, r.digest) for r in artifacts), matrix, runtime, provider)
        shards.seal(path, {"inputs": inputs, "redo": redo, "env": cache.environment(), "stats": stats.to_dict()})
        if cut_short:  # sealed (whole, untimed where it stopped), then the interruption goes on
            raise KeyboardInterrupt
    frontier.measure_if_stale(out, runtime, force=force, echo=echo)
    if damaged:
        art_id, why = next(iter(damaged.items()))
        raise HarnessError(
            f"run {runtime.pin}: {len(damaged)} artifact(s) changed since the export wrote them ({art_id}: {why}); "
            "their cells were not run: run the export again (`nox -s matrix` does), then this run"
        )
    return all_cells


def _damaged(out: Path, artifacts: Iterable[ExportRecord]) -> dict[str, str]:
    """Artifacts whose files are no longer those the export recorded (by SHA-256): id → what differs."""
    from harness import localize  # the names of the localization files (no heavy import)

    found = {}
    for rec in artifacts:
        if not rec.ok:
            continue
        folder = out / "artifacts" / rec.key.id
        checks = [("model.onnx", rec.sha256), ("reference.npz", rec.reference_sha256)]
        if rec.data_sha256:
            checks.append((DATA, rec.data_sha256))
        for name, want in checks:
            if want is None:
                continue
            try:
                have = cache.sha256_file(folder / name)
            except OSError:
                found[rec.key.id] = f"{name} is missing"
                break
            if have != want:
                found[rec.key.id] = f"{name} differs from its recorded hash"
                break
        else:
            if rec.intermediates_sha256 and _intermediates_sha256(folder, localize.FILES) != rec.intermediates_sha256:
                found[rec.key.id] = "its localization files differ from their recorded hash"
    return found


def _intermediates_sha256(folder: Path, names: Iterable[str]) -> str:
    """As the export records it (:func:`harness.export._reference`)."""
    h = hashlib.sha256()
    for name in names:
        try:
            h.update(cache.sha256_file(folder / name).encode())
        except FileNotFoundError:
            h.update(b"-")
    return h.hexdigest()


def _wrong_environment(env: Mapping[str, str], runtime: Runtime) -> str | None:
    """Why the environment is not the runtime's (another version, the CPU package for the GPU one),
    or None. The native TensorRT runtime may lack tensorrt entirely (no driver, nothing installed):
    its columns then say so as ``unavailable``."""
    if runtime.package == "tensorrt":
        have = env.get("tensorrt") or ""
        return None if have in ("", runtime.version) else f"environment has tensorrt {have}, expected {runtime.version}"
    if env.get("onnxruntime") != runtime.version:
        return f"environment has onnxruntime {env.get('onnxruntime')}, expected {runtime.version}"
    if env.get("package", runtime.package) != runtime.package:
        return f"environment has {env.get('package')} {runtime.version}, expected {runtime.package}; reinstall the session"
    return None


def _finished(cells: Iterable[CellRecord], keys: Mapping[str, str]) -> bool:
    """Whether a rerun would find nothing to do: every cell of an exported artifact (those ``keys``
    holds) reusable, every passing example timed. Only then is the shard stamped (and ``nox -s matrix``
    skips its session)."""
    for c in cells:
        if c.key not in keys:
            continue  # decided by the export alone (failed, skipped)
        if not _reusable(c, keys[c.key]):
            return False
        if c.probe == "example" and c.status is Status.PASS and c.latency is None:
            return False
    return True


@dataclasses.dataclass
class Stats:
    """Where a runtime's time went, for the benchmark: the floor (session creation and inference
    measured inside the workers) against the wall time of the stage."""

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
class _Progress:
    """What the run stage knows of one task from what its worker streamed so far."""

    probes: list[str]
    loaded: bool = False
    done: set[str] = dataclasses.field(default_factory=set)
    localizing: str | None = None
    """The probe whose mismatch is being localized (its cell is already in)."""

    @property
    def left(self) -> list[str]:
        return [p for p in self.probes if p not in self.done]


def _correctness(
    matrix: Matrix,
    tasks: list[dict[str, Any]],
    records: Mapping[str, ExportRecord],
    log: Path,
    stats: Stats | None = None,
    backend: str = BACKENDS["onnxruntime"],
    entry: str = "run_artifact",
    workers: int | None = None,
    progress: Progress | None = None,
) -> Iterator[CellRecord]:
    """Run the tasks in worker processes; yield each cell as it arrives.

    A worker's death or hang is charged to the probe it was on: ``crash``
    (with the signal) or ``timeout`` for that probe; the probes after it run
    again in a fresh worker, in the next round. Before the session exists
    (``loaded``) a death belongs to session creation, which every probe
    shares. During a mismatch's localization it costs only the localization:
    the mismatch stands, with a note.

    Workers are sized by memory as well as cores (:class:`harness.workers.MemoryGate`, from each model's
    size); ``progress`` hears of each artifact as it is done.
    """
    cells: dict[str, CellRecord] = {}
    gate = MemoryGate(_session_mib)
    started: dict[int, float] = {}  # when each task was handed to a worker (its first item says how long ago)

    def finished(task: dict[str, Any]) -> None:
        if progress is not None:
            rec = records[Path(task["dir"]).name]
            took = time.monotonic() - started.get(id(task), time.monotonic())
            base = rec.cell(task["runtime"], task["provider"], {})
            mine = [cells[k] for k in (base.replace(probe=p).key for p in rec.probes) if k in cells]
            counts = ", ".join(f"{s} {n}" for s, n in sorted(Counter(c.status.value for c in mine).items()))
            progress.tick(f"  {rec.key.id}: {counts} ({took:.1f}s)", kind=rec.case, seconds=took)

    def beat(running: list[tuple[Any, float]]) -> None:
        assert progress is not None
        progress.running((Path(t["dir"]).name, s) for t, s in running)

    while tasks:
        states = {id(t): _Progress(list(t["probes"])) for t in tasks}
        again: list[dict[str, Any]] = []
        for outcome in run_tasks(
            f"{backend}:{entry}",
            tasks,
            workers=workers or matrix.run.worker_count,
            timeout=matrix.run.timeout,
            init=f"{backend}:init_worker",
            log=str(log),
            admit=gate.admit,
            heartbeat=(30.0, beat) if progress is not None else None,
        ):
            task, state = outcome.task, states[id(outcome.task)]
            rec = records[Path(task["dir"]).name]
            started.setdefault(id(task), time.monotonic() - outcome.seconds)
            if outcome.kind == "item":
                item = outcome.value
                if "cell" in item:
                    cell = CellRecord.from_dict(item["cell"])
                    cell = cell.replace(cache_key=task.get("keys", {}).get(cell.probe))
                    cells[cell.key] = cell
                    state.done.add(cell.probe)
                    state.localizing = None
                    yield cell
                elif item.get("event") == "loaded":
                    state.loaded = True
                    if stats is not None:
                        stats.session += item.get("seconds", 0.0)
                elif item.get("event") == "timing" and stats is not None:
                    stats.inference += item["inference"]
                    stats.localize += item["localize"]
                elif item.get("event") == "localizing":
                    state.localizing = item["probe"]
                continue
            left = state.left
            if outcome.kind == "ok" and not left:
                finished(task)
                continue
            failed, rest = _charge(rec, task, outcome, state, cells)
            for cell in failed:
                cell = cell.replace(cache_key=task.get("keys", {}).get(cell.probe))
                cells[cell.key] = cell
                yield cell
            if rest:
                again.append({**task, "probes": rest})
                started[id(again[-1])] = started[id(task)]
            else:
                finished(task)
        tasks = again


def _session_mib(task: Mapping[str, Any]) -> float:
    """What a worker running an artifact is expected to hold (MiB): onnxruntime keeps the model's weights
    (and the proto it read them from while it builds the session), numpy the probes; ~200 MiB for itself."""
    art = Path(task["dir"])
    size = sum(f.stat().st_size for f in (art / "model.onnx", art / "model.onnx.data") if f.is_file())
    return 200.0 + 3 * size / 2**20


def _charge(
    rec: ExportRecord, task: dict[str, Any], outcome: Outcome, state: _Progress, cells: Mapping[str, CellRecord]
) -> tuple[list[CellRecord], list[str]]:
    """A worker ended a task early: the cells that failure decides, and the probes to run again."""
    base = rec.cell(task["runtime"], task["provider"], task["env"], stage=Stage.RUN)
    left = state.left
    if outcome.kind in ("crash", "timeout"):
        status = Status.CRASH if outcome.kind == "crash" else Status.TIMEOUT
        line = str(outcome.value)
    else:  # the backend raised, or returned without every cell: a harness bug, kept visible in the table
        status = Status.CRASH
        if outcome.kind == "error":
            cls, msg, tb = outcome.value
            line, full = f"harness error {cls}: {first_line(msg)}", tb
        else:
            line = full = f"harness error: the backend returned without cells for {', '.join(left)}"
        return rec.each_probe(base, left, status=status, error_class="HarnessError", error_line=line, error=full), []
    if not left:  # every cell is in: the worker died on its way out (a provider's teardown, say)
        return [], []
    if state.localizing is not None:  # the cell is in; only its localization is lost
        cell = cells[base.replace(probe=state.localizing).key]
        return [cell.noted(f"{_CUT_SHORT}: {line}")], left
    error_class = outcome.kind.capitalize()
    if not state.loaded:  # died creating the session: every probe shares it
        line = f"{line} while creating the session"
        return rec.each_probe(base, left, status=status, stage=Stage.LOAD, error_class=error_class, error_line=line), []
    probe, rest = left[0], left[1:]
    line = f"{line} while running this probe"
    cell = base.replace(probe=probe, status=status, error_class=error_class, error_line=line, error=line, seconds=outcome.seconds)
    return [cell], rest


def _latency_phase(
    matrix: Matrix,
    out: Path,
    provider: str,
    cells: dict[str, CellRecord],
    runtime: Runtime,
    echo: Callable[[str], Any],
    stats: Stats | None = None,
    *,
    options: Mapping[str, Any] | None = None,
) -> Iterator[CellRecord]:
    """Serial timing of the ``example`` probe of every passing artifact that has none yet; each timed
    cell is yielded as soon as it is measured."""
    todo = {c.artifact.id: c for c in cells.values() if c.probe == "example" and c.status is Status.PASS and c.latency is None}
    if not todo:
        return
    lat = dataclasses.asdict(matrix.latency)
    opts = dict(options or {})
    tasks = [{"dir": str(out / "artifacts" / art_id), "provider": provider, "latency": lat, "options": opts} for art_id in todo]
    timed = 0
    t0 = time.perf_counter()
    module = BACKENDS[runtime.package]
    for outcome in run_tasks(
        f"{module}:measure_latency",
        tasks,
        workers=1,
        timeout=matrix.run.timeout,
        init=f"{module}:init_worker",
        log=str(out / "logs" / f"{runtime.id}.log"),
    ):
        if outcome.kind == "ok":
            art_id = Path(outcome.task["dir"]).name
            timed += 1
            if stats is not None:
                stats.latency += outcome.value.get("busy_seconds", 0.0)
            yield todo[art_id].replace(latency=Latency.from_dict(outcome.value), stage=Stage.LATENCY)
    echo(f"  latency: {timed} artifacts in {time.perf_counter() - t0:.1f}s (serial, {lat['threads']} thread)")
