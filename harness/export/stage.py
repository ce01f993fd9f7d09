"""Export stage (torch environment): every case × exporter × opset of a profile → artifacts.

Hands each artifact that the export store does not already hold to a fresh worker process
(:mod:`harness.export._exporters` does the export; :mod:`harness.pool.workers` gives it a clean process, so an exporter
that crashes or hangs costs its own artifact only), caches what it writes by content
(:class:`harness.store.cache.ExportStore`), links every artifact into ``build/artifacts/<id>/``, and writes the
manifest, the runtimes' frontier models and the stamp (:mod:`harness.store.layout`, :mod:`harness.store.stamps`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.cases import corpus as corpus_mod
from harness.cases.source import case_digest
from harness.config.matrix import Matrix, Profile
from harness.core.errors import HarnessError
from harness.core.records import ArtifactKey, ExportRecord, Outcome, first_line
from harness.export import _warm
from harness.export._exporters import (
    Exported,
    ExportItem,
    ExportTask,
    Phase,
    base_record,
    library_module,
    phase_words,
    user_error,
    versions,
)
from harness.pool.progress import Progress
from harness.pool.workers import MemoryGate, run_tasks
from harness.store import cache, frontier, layout, stamps
from harness.store import code as code_files

_PRELOAD_PROBE = """
import contextlib, io, sys, warnings
import torch, onnx, onnxscript
warnings.simplefilter("ignore")
before = set(sys.modules)
class Probe(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.lin = torch.nn.Conv2d(3, 4, 3), torch.nn.Linear(4, 2)
    def forward(self, x):
        return self.lin(torch.relu(self.conv(x)).mean((2, 3))).softmax(-1)
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    x = torch.randn(2, 3, 8, 8)
    for opset in (17, 18):
        torch.onnx.export(Probe().eval(), (x,), dynamo=True, opset_version=opset,
                          dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
    torch.onnx.export(Probe().eval(), (x,), io.BytesIO(), dynamo=False, opset_version=17)
print("\\n".join(sorted(set(sys.modules) - before)))
"""


class Preload:
    """What the export's fork server imports before it forks a process per artifact, remembered per
    environment (the same packages import the same modules, whatever ``--out`` is).

    - The modules a fresh export process would import lazily (about 800 for torch 2.13's dynamo
      exporter), found once by a probe export in a child process: a small dynamo export then takes
      about 1 s instead of 2 to 3 s.
    - Per case, the modules its last export imported that the server had not (a corpus of
      ``transformers`` models: ``transformers`` and its modeling modules, ~6 s each time otherwise):
      only the cases of the run at hand add theirs, so a run without them imports nothing of them.

    Importing a module changes no exported graph, so what is preloaded is not part of an export's key.
    Kept in the environment itself (``<prefix>/harness-preload.json``), or under ``--out`` where the
    environment is not writable.
    """

    def __init__(self, out: Path) -> None:
        listing = cache.environment()["listing"] or "unknown"
        own = Path(sys.prefix) / "harness-preload.json"
        self.path = own if os.access(sys.prefix, os.W_OK) else out / "cache" / "preload.json"
        data = cache.read_json(self.path)
        if not isinstance(data, dict) or data.get("environment") != listing or not _preload_shape(data):
            data = {"environment": listing, "probe": None, "cases": {}}
        self.data: dict[str, Any] = data

    def modules(self, cases: Sequence[str]) -> tuple[str, ...]:
        if self.data.get("probe") is None:
            proc = subprocess.run([sys.executable, "-c", _PRELOAD_PROBE], capture_output=True, text=True, timeout=600)
            self.data["probe"] = proc.stdout.split() if proc.returncode == 0 else []
            self.save()
        learned = [m for c in cases for m in self.data["cases"].get(c, ())]
        names = [n for n in (*self.data["probe"], *learned) if not n.startswith("__")]
        base = (
            "torch",
            "torch.onnx",
            "onnx",
            "onnxscript",
            "onnxruntime",
            "numpy",
            "harness.export._exporters",
            "harness.export.node_values",
        )
        return tuple(dict.fromkeys((*base, *names)))

    def learn(self, case: str, imported: Sequence[str]) -> None:
        """Remember what an export of ``case`` imported (top-level packages' modules, at most 4,000)."""
        known = set(self.data["cases"].get(case, ()))
        merged = sorted(known | set(imported))[:4000]
        if merged != sorted(known):
            self.data["cases"][case] = merged
            self.dirty = True

    def save(self) -> None:
        self.dirty = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            cache.write_json(self.path, self.data)
        except OSError:
            pass  # a cache: the next export probes again

    dirty = False


def _preload_shape(data: Mapping[str, Any]) -> bool:
    """Whether a remembered preload is as :class:`Preload` writes it (else it is probed again)."""
    probe, cases = data.get("probe"), data.get("cases")
    if probe is not None and not (isinstance(probe, list) and all(isinstance(m, str) for m in probe)):
        return False
    return isinstance(cases, dict) and all(isinstance(v, list) and all(isinstance(m, str) for m in v) for v in cases.values())


def _warm_server(tasks: Sequence[ExportTask], share: bool, echo: Any) -> tuple[str, ...]:
    """The preload that warms the fork server for this run's dynamo tasks (:mod:`harness.export._warm`), or none:
    sharing turned off, no dynamo task, or a torch without the private API it uses (said in one line)."""
    opsets = sorted({i.opset for t in tasks if t.exporter == "dynamo" for i in t.items})
    os.environ.pop(_warm.ENV, None)
    if not share or not opsets:
        return ()
    why = _warm.unavailable()
    if why is not None:
        echo(f"export: each dynamo export builds its own operator registry ({why}); the files are the same, only slower")
    os.environ[_warm.ENV] = ",".join(map(str, opsets))  # read by the fork server as it imports the module
    return ("harness.export._warm",)


def _one_process(echo: Any, pending: Mapping[tuple[str, str], Sequence[ExportItem]]) -> bool:
    """Whether each artifact must have a process of its own: this torch's shared exports are not proved identical to
    plain ones, or its exporter lacks the private API the sharing uses (:func:`harness.export._reuse.unavailable`,
    said in one line when a case has several artifacts to export)."""
    from harness.export import _reuse

    why = _reuse.unavailable()
    if why is not None and any(len(items) > 1 for items in pending.values()):
        echo(f"export: each artifact in a process of its own ({why}); the files are the same, only slower")
    return why is not None


def _doing(task: ExportTask, current: Mapping[ExportTask, ExportItem]) -> ArtifactKey:
    """The artifact a running task is on (its first until it says)."""
    return task.artifact(current.get(task, task.items[0]))


def _stderr(line: str) -> None:
    print(f"harness: error: {line}", file=sys.stderr)


def plan(registry: corpus_mod.Registry, profile: Profile) -> list[ArtifactKey]:
    """Every artifact the profile needs, in corpus order."""
    return [ArtifactKey(c.name, e, o) for c in registry for e, o in profile.exports()]


# Failures that depend on the machine or on luck (a crash, a hang): never cached, exported again next time.
_NOT_CACHED = frozenset({Outcome.EXPORT_CRASH, Outcome.EXPORT_TIMEOUT, Outcome.EXPORT_HARNESS_BUG})


def _cacheable(rec: ExportRecord) -> bool:
    """Whether the store may keep this export: not a crash or hang of the exporter, not the user's own
    code failing (a missing package or data file is fixed outside the case's source), not a reference
    pass that ran out of time."""
    timed_out = "not recorded" in (rec.reference_runtime or "")
    return rec.outcome not in _NOT_CACHED and not user_error(rec) and not timed_out


def export_all(
    matrix: Matrix,
    profile: Profile,
    corpus: Sequence[str],
    out: Path,
    *,
    root: Path,
    workers: int | None = None,
    cases: Sequence[str] | None = None,
    force: bool = False,
    share: bool = True,
    requirements: Sequence[str] = (),
    echo: Any = print,
    echo_error: Any = _stderr,
) -> tuple[list[ExportRecord], list[str]]:
    """Export every artifact of ``profile`` that the store does not already hold; write the manifest
    and the stamp; return the records and the corpus problems.

    An artifact is reused when its key (:func:`harness.store.cache.export_key`) has a whole entry in the
    store (every file's hash checked); ``force`` exports everything again. ``share`` lets the fork server do once
what every dynamo export would do alike (:mod:`harness.export._warm`; the same files, faster). ``requirements`` are what the
    environment was given beyond the pins (:func:`harness.cases.corpus.requirements_of`): part of every key.

    Raises:
        HarnessError: A corpus file failed to import (its cases cannot be exported, and a table without
            them would not say so), or ``cases`` names an unknown case.
    """
    t0 = time.perf_counter()
    held = versions()["torch"]
    if held.split("+")[0] != matrix.export.torch:  # an artifact is keyed by this environment: it must be the asked torch
        raise HarnessError(
            f"this environment holds torch {held}, the export asks for torch {matrix.export.torch}; run it in that "
            f"release's export environment (`nox -s matrix -- --profile {profile.name}`)"
        )
    for path in (out / layout.EXPORT_STAMP, out / layout.MANIFEST):
        cache.not_a_folder(path)  # one line now, not a traceback once every artifact is exported
    (out / layout.EXPORT_STAMP).unlink(missing_ok=True)  # until this export ends, no stage may count on the last one
    loaded = set(sys.modules)
    registry = corpus_mod.load(corpus, root)  # a bad case is one line; the other cases still export
    if registry.import_failures:
        (out / layout.MANIFEST).unlink(missing_ok=True)  # no stage may run on the last export's list as if it were this one
        lines = registry.import_failures
        raise HarnessError(lines[0] if len(lines) == 1 else f"{len(lines)} corpus files fail to import: " + "; ".join(lines))
    for problem in registry.problems:
        echo_error(problem)
    keys = plan(registry, profile)
    if cases is not None:  # names, or corpus files standing for their cases (a profile's `cases`)
        names, unknown = corpus_mod.selected(registry, cases, root)
        if unknown:
            raise HarnessError(f"--cases: no case named {', '.join(unknown)}; `harness list` shows the corpus")
        keys = [k for k in keys if k.case in names]
    job = _Job(matrix, registry, keys, out, requirements, echo)
    tasks = job.schedule(force, share)
    todo = sum(len(t.items) for t in tasks)
    echo(f"export: {len(keys)} artifacts, {len(keys) - todo} cached, {todo} to export")
    # What the corpus files imported when the parent loaded them is imported once by the fork server too.
    corpus_modules = tuple(sorted(m for m in set(sys.modules) - loaded if library_module(m)))
    job.run(tasks, workers or matrix.run.worker_count, list(corpus), root, corpus_modules, share=share)
    job.user_errors(echo_error)
    job.manifest(profile, _default_opsets(echo))  # every table says what its torch writes unasked
    done = [job.records[k.id] for k in keys]
    stamp = _Stamp(root, matrix, profile, corpus, cases, requirements)
    stamp.write(out, registry, done, job.watched, todo, time.perf_counter() - t0)
    return done, list(registry.problems)


class _Job:
    """One export's artifacts: their content addresses, the store that holds them, the records as they come."""

    def __init__(
        self,
        matrix: Matrix,
        registry: corpus_mod.Registry,
        keys: list[ArtifactKey],
        out: Path,
        requirements: Sequence[str],
        echo: Any,
    ) -> None:
        self.matrix, self.registry, self.keys = matrix, registry, keys
        self.out, self.requirements, self.echo = out, requirements, echo
        self.art_dir = out / layout.ARTIFACTS
        self.art_dir.mkdir(parents=True, exist_ok=True)
        (out / "logs").mkdir(exist_ok=True)
        self.store = cache.ExportStore(out / layout.STORE)
        self.settings = {**stamps.export_settings(matrix, requirements), "versions": versions()}
        key_settings = {k: v for k, v in self.settings.items() if k not in stamps.BUDGETS}
        # Every package of this environment, not only the pinned ones (the dynamo exporter runs onnx-ir, sympy, ...).
        key_settings["environment"] = cache.environment()["listing"]
        # The case's source: importing what its factories build (torch, in this environment) is part of it.
        self.watched: set[str] = set()
        self.sources = {name: case_digest(registry[name], self.watched) for name in dict.fromkeys(k.case for k in keys)}
        code = stamps.export_code()
        self.address = {k.id: cache.export_key(self.sources[k.case], k.id, k.exporter, k.opset, key_settings, code) for k in keys}
        self.records: dict[str, ExportRecord] = {}

    def schedule(self, force: bool, share: bool = True) -> list[ExportTask]:
        """Link every artifact the store holds whole; the others as tasks, one per case × exporter (each artifact
        a task of its own where ``share`` is off or this torch's sharing is not proved: :func:`_one_process`)."""
        pending: dict[tuple[str, str], list[ExportItem]] = {}
        for k in self.keys:
            why = "forced" if force else self.store.check(self.address[k.id])
            if why is None:
                self.store.link(self.address[k.id], self.art_dir / k.id)
                try:
                    self.records[k.id] = layout.read_record(self.art_dir / k.id)
                    continue
                except (OSError, ValueError, TypeError, KeyError, AttributeError):
                    why = f"{layout.RECORD} is not the record the export writes"
            if why not in ("forced", "not cached"):  # a damaged entry is said and redone, never used
                self.echo(f"export {k.id}: cache entry {why}: exporting again")
            tmp = self.store.begin(self.address[k.id])
            pending.setdefault((k.case, k.exporter), []).append(ExportItem(k.opset, str(tmp), self.address[k.id]))
        alone = not share or _one_process(self.echo, pending)
        tasks = []
        for (case, exporter), items in pending.items():
            budget = self.registry[case].export_timeout or self.matrix.export.timeout
            # A scripted model: torch.jit.script of the same module again in one process names the graph's nodes
            # without their module's scope (measured, torch 2.13: loop_scripted's '/fc/Gemm' became '/Gemm').
            groups = [[i] for i in items] if alone or self.registry[case].script else [items]
            tasks += [ExportTask(case, exporter, tuple(g), budget, share=len(g) > 1) for g in groups]
        return tasks

    def run(
        self, tasks: list[ExportTask], workers: int, corpus: list[str], root: Path, imported: tuple[str, ...], *, share: bool
    ) -> None:
        """Each task in a fresh process forked from a server that imported what the exports will import (and, with
        ``share``, warmed the dynamo exporter: :mod:`harness.export._warm`). What a task left unexported (its
        process died or ran out of time, or an export changed the model's state) is exported again, each artifact
        in a process of its own."""
        preload = Preload(self.out)
        warm = _warm_server(tasks, share, self.echo)
        peaks = _known_peaks(self.store, {t.case for t in tasks})
        memory = MemoryGate(lambda task: peaks.get(task.case, DEFAULT_EXPORT_MIB))
        progress = Progress("export", sum(len(t.items) for t in tasks), self.echo, workers=workers)
        progress.expect(t.case for t in tasks for _ in t.items)
        phase: dict[str, str] = {}
        begun: dict[str, float] = {}
        current: dict[ExportTask, ExportItem] = {}
        while tasks:
            left: list[ExportTask] = []
            for outcome in run_tasks(
                "harness.export._exporters:export_one",
                tasks,
                workers=workers,
                timeout=lambda task: task.timeout,
                init="harness.export._exporters:init_worker",
                initargs=(corpus, str(root), self.settings),
                log=str(self.out / "logs" / "export.log"),
                fresh=True,  # exporters keep per-process caches: each task gets a clean process
                preload=(*preload.modules(list(self.sources)), *imported, *warm),
                admit=memory.admit,
                heartbeat=(30.0, lambda running: progress.running((_doing(t, current).id, s) for t, s in running)),
            ):
                task = outcome.task
                if outcome.kind == "item" and isinstance(outcome.value, Phase):
                    item = next(i for i in task.items if task.artifact(i).id == outcome.value.artifact)
                    current[task] = item
                    phase[outcome.value.artifact] = outcome.value.phase
                    begun.setdefault(outcome.value.artifact, time.monotonic() - outcome.seconds)  # process start included
                    continue
                if outcome.kind == "item" and isinstance(outcome.value, Exported):
                    key = outcome.value.record.key
                    item = next(i for i in task.items if i.opset == key.opset)
                else:  # the task is over: what it did not export goes again, each artifact alone
                    unfinished = [i for i in task.items if task.artifact(i).id not in self.records]
                    if not unfinished:
                        continue
                    if outcome.kind == "ok" and len(task.items) > 1:  # an export changed the model's state
                        left += [dataclasses.replace(task, items=(i,), share=False) for i in unfinished]
                        continue
                    if outcome.kind == "ok":  # one artifact, and its worker ended without its record
                        bug = ("HarnessBug", "the worker ended without a record")
                        outcome = dataclasses.replace(outcome, kind="error", value=bug)
                    item = current[task] if current.get(task) in unfinished else unfinished[0]
                    left += [dataclasses.replace(task, items=(i,), share=False) for i in unfinished if i != item]
                    key = task.artifact(item)
                rec = self.ended(outcome, key, item, phase.get(key.id, "build"), preload)
                if rec.peak_rss_mib:
                    peaks[key.case] = max(peaks.get(key.case, 0.0), rec.peak_rss_mib)
                mark = "ok" if rec.ok else (rec.error_class or "fail")
                wall = time.monotonic() - begun.get(key.id, time.monotonic() - rec.seconds)
                progress.done(f"export {key.id:<52} {mark:<24} {rec.seconds:6.2f}s", kind=key.case, seconds=wall)
            if left:
                self.echo(f"export: {len(left)} artifacts again, each in a process of its own")
            tasks = left
        os.environ.pop(_warm.ENV, None)
        if preload.dirty:
            preload.save()

    def ended(self, outcome: Any, key: ArtifactKey, item: ExportItem, phase: str, preload: Preload) -> ExportRecord:
        """An artifact's record (streamed, or that of its lost worker), its files into the store or in place."""
        tmp = Path(item.dir)
        if outcome.kind == "item" and isinstance(outcome.value, Exported):
            rec = outcome.value.record
            preload.learn(key.case, outcome.value.imported)
        else:
            rec = _lost(outcome, key, self.registry[key.case], self.settings, phase, tmp)
        if not _cacheable(rec):
            self.store.place(tmp, self.art_dir / key.id)
        else:
            self.store.commit(item.key, key.id, tmp)
            self.store.link(item.key, self.art_dir / key.id)
        self.records[key.id] = rec
        return rec

    def user_errors(self, echo_error: Any) -> None:
        """A case whose own code failed (not the exporter): said once, by name, as a corpus problem."""
        broken: set[str] = set()
        for k in self.keys:
            rec = self.records[k.id]
            if user_error(rec) and k.case not in broken:
                broken.add(k.case)
                self.registry.problems.append(f"{self.registry[k.case].source_file}: case {k.case!r}: {rec.error_line}")
                echo_error(self.registry.problems[-1])

    def manifest(self, profile: Profile, defaults: Mapping[str, Any] | None = None) -> None:
        """The manifest, the runtimes' frontier models, and the store pruned of what no export of it needs;
        ``defaults``: the opset each exporter of this torch writes unasked."""
        manifest: dict[str, Any] = {
            "profile": profile.name,
            "artifacts": [k.id for k in self.keys],
            "versions": self.settings["versions"],
            "problems": self.registry.problems,
            "requirements": list(self.requirements),
            # The reference runtime's interpreter: the run stage asks it for a large model's node values on demand.
            "reference_python": sys.executable,
        }
        if defaults is not None:
            manifest["default_opsets"] = dict(defaults)
        cache.write_json(self.out / layout.MANIFEST, manifest)
        index = frontier.write_models(self.out)  # what each run session loads to measure its runtime's frontier
        self.echo(
            f"frontier: {len(index['files'])} one-node models, IR {index['irs'][0]}–{index['irs'][-1]} × opset "
            f"{index['opsets'][0]}–{index['opsets'][-1]} (onnx {index['onnx']})"
        )
        self.store.prune(self.address.values())


def _default_opsets(echo: Any) -> dict[str, Any]:
    """:func:`harness.export._exporters.default_opsets`, measured in a process of its own (this one stays free of the
    exporters' state); an exporter it could not measure is named with why."""
    code = "import json; from harness.export._exporters import default_opsets; print(json.dumps(default_opsets()))"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
        found = dict(json.loads(done.stdout.strip().splitlines()[-1]))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        found = {"torchscript": f"not measured: {exc}", "dynamo": f"not measured: {exc}"}
    echo("default opsets (opset_version not given): " + ", ".join(f"{e} {v}" for e, v in found.items()))
    return found


DEFAULT_EXPORT_MIB = 1024.0
"""What an export of a case never exported before is expected to need (a gotcha takes ~600 MiB, most of
it torch, shared with the fork server); once one of its artifacts is done, its measured peak counts."""


def _known_peaks(store: cache.ExportStore, cases: set[str]) -> dict[str, float]:
    """Each case's highest peak memory recorded by an earlier export of it in the store (any version)."""
    peaks: dict[str, float] = {}
    if not cases or not store.root.is_dir():
        return peaks
    for entry in store.root.iterdir():
        info = cache.read_json(entry / cache.CACHE_INFO)
        if not isinstance(info, dict) or str(info.get("artifact", "")).split(".")[0] not in cases:
            continue
        rec = cache.read_json(entry / layout.RECORD)
        peak = rec.get("peak_rss_mib") if isinstance(rec, dict) else None
        case = rec.get("case") if isinstance(rec, dict) else None
        if isinstance(peak, (int, float)) and isinstance(case, str) and 0 <= peak < float("inf"):
            peaks[case] = max(peaks.get(case, 0.0), float(peak))
    return peaks


def _lost(
    outcome: Any, key: ArtifactKey, case: corpus_mod.Case, settings: Mapping[str, Any], phase: str, tmp: Path
) -> ExportRecord:
    """The record of an export whose process died or ran out of time in ``phase``. In the reference pass
    the export itself stands (its record was written before the pass): only the localization data is
    lost, and the record says why. Before that, nothing of it is kept."""
    detail = outcome.value if isinstance(outcome.value, str) else f"{outcome.value[0]}: {outcome.value[1]}"
    what = phase_words(phase, key.exporter)
    written = cache.read_json(tmp / layout.RECORD)
    if phase == "reference" and isinstance(written, dict) and written.get("ok"):
        from harness.export import node_values as reference

        for name in (*layout.LOCALIZATION_FILES, *reference.TEMPORARY):  # half-written localization data
            (tmp / name).unlink(missing_ok=True)
        rec = ExportRecord.from_dict(written)
        if outcome.kind == "timeout":
            why = f"{what} exceeded {settings['reference_timeout'] + 60:g} s ([export] reference_timeout)"
        else:
            why = f"{what} failed ({detail})"
        rec = dataclasses.replace(rec, reference_runtime=f"failed: onnxruntime=={settings['reference']}: not recorded: {why}")
        cache.write_json(tmp / layout.RECORD, rec.to_dict())
        return rec
    for old in tmp.iterdir():  # what the dead exporter left behind
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    if outcome.kind == "timeout":
        budget = case.export_timeout or settings["timeout"]
        where = f"the case's export_timeout ({budget:g} s)" if case.export_timeout else f"[export] timeout ({budget:g} s)"
        raise_it = "raise the case's export_timeout" if case.export_timeout else "raise [export] timeout in matrix.toml"
        line = (
            f"{what} did not finish within {where}, the budget of building the model, torch's outputs and the "
            f"export together; {raise_it} (or set Case(export_timeout=...))"
        )
        ended = Outcome.EXPORT_TIMEOUT
    else:
        line = f"{detail} during {what}"
        ended = Outcome.EXPORT_CRASH if outcome.kind == "crash" else Outcome.EXPORT_HARNESS_BUG
    rec = base_record(
        case, key, settings, seconds=outcome.seconds, error_class=ended.error_class, error_line=first_line(line), error=line
    )
    cache.write_json(tmp / layout.RECORD, rec.to_dict())
    return rec


@dataclasses.dataclass(frozen=True)
class _Stamp:
    """What an export was asked for (matrix.toml and the command line)."""

    root: Path
    matrix: Matrix
    profile: Profile
    corpus: Sequence[str]
    cases: Sequence[str] | None
    requirements: Sequence[str]

    def write(
        self,
        out: Path,
        registry: corpus_mod.Registry,
        records: list[ExportRecord],
        watched: set[str],
        exported: int,
        seconds: float,
    ) -> None:
        """What this export read (files, settings, environment) and wrote, for :mod:`harness.store.plan`. It is
        ``complete`` when a rerun would do nothing: no corpus problem, every artifact in the store."""
        extra = [str(corpus_mod.source_file(c, self.root)) for c in self.corpus]
        extra += [str(cache.PACKAGE / n) for n in code_files.export_files()] + sorted(watched)
        globs = []
        for case in registry:
            extra += [str(p) for p in cache.probe_files(case)]
            globs += [[case.source_dir, pattern, cache.glob_names(case.source_dir, pattern)] for pattern in case.probe_files]
        floor = {k: round(sum(r.timing.get(k, 0.0) for r in records), 3) for k in ("torch", "export", "reference")}
        cache.write_json(
            out / layout.EXPORT_STAMP,
            {
                "inputs": stamps.export_inputs(self.matrix, self.profile, self.corpus, self.cases, self.requirements),
                "files": cache.project_files(extra),
                "globs": globs,
                "env": cache.environment(),
                "complete": not registry.problems and all(_cacheable(r) for r in records),
                "artifacts": {r.key.id: {"key": r.cache_key, "digest": r.digest} for r in records},
                "stats": {"seconds": round(seconds, 3), "artifacts": len(records), "exported": exported, "floor": floor},
            },
        )
