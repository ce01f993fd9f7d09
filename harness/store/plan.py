"""What a rerun has to do: each stage checked against what it recorded last time.

``nox -s matrix`` asks before it starts a session: a stage whose stamp still
holds (the same settings, the same files with the same hashes, the same
packages in its environment, every cache entry whole) is not started at all,
so a rerun with nothing changed starts no environment, imports no torch and
takes a second or two. A stage it does start decides again for itself, cell by
cell and artifact by artifact (:mod:`harness.store.cache`): this module only ever
says "skip" when the stage would have found nothing to do.

Stamps:

- ``build/export.stamp.json`` (:func:`harness.export.stage.export_all`): the export's
  settings, every project file it read with its hash, its environment's package
  listing, each artifact's content address and digest.
- ``build/shards/<runtime>-<column>.stamp.json`` (:func:`harness.run.stage.run_runtime`):
  a digest of the shard's inputs, the shard's own hash, the environment.
- ``build/spec.stamp.json`` (:func:`harness.spec.stage.judge_all`): a digest of the artifacts, the onnx release
  and the spec stage's code, the hash of ``build/spec.json``, the environment.
- ``build/report.<profile>.stamp.json`` (:func:`harness.store.stamps.write_report_stamp`): a digest of the
  report's inputs and the hash of every file it wrote under ``results/``, and the hash of the spec's answer it read.

Standard library only: the noxfile runs this before any environment exists.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.config.matrix import Matrix, Profile, Runtime
from harness.store import cache, frontier, layout, spec, stamps


def corpus_sources(matrix: Matrix, extra: Sequence[str] = (), only: bool = False, profile: Profile | None = None) -> list[str]:
    """The corpus of a run: the built-in corpus (the profile's own, else matrix.toml's modules; none with ``only``)
    then ``extra`` files."""
    base = [] if only else list(matrix.corpus_of(profile))
    return base + [c for c in extra if c not in base]


@dataclasses.dataclass(frozen=True)
class Plan:
    """Why each stage must run; None where it is up to date."""

    export: str | None
    runs: Mapping[str, str | None]
    """By runtime id."""
    report: str | None
    spec: str | None = None
    """The spec stage (the ONNX checker and reference evaluator on every artifact)."""

    def lines(self) -> list[str]:
        """One line per stage; runtimes that agree share a line."""

        def say(stage: str, why: str | None) -> str:
            return f"{stage}: {'up to date' if why is None else 'runs: ' + why}"

        by_reason: dict[str | None, list[str]] = {}
        for rt, why in self.runs.items():
            by_reason.setdefault(why, []).append(rt)
        runs = []
        for why, ids in by_reason.items():
            label = f"run({ids[0]})" if len(ids) == 1 else f"run: {len(ids)} runtimes ({ids[0]} … {ids[-1]})"
            if len(ids) == len(self.runs) and len(ids) > 1:
                label = f"run: all {len(ids)} runtimes"
            runs.append(say(label, why))
        return [say("export", self.export), say("spec", self.spec), *runs, say("report", self.report)]

    @property
    def idle(self) -> bool:
        return self.export is None and self.spec is None and self.report is None and not any(self.runs.values())


def plan(
    matrix: Matrix,
    profile: Profile,
    out: Path,
    results: Path,
    *,
    corpus: Sequence[str],
    cases: Sequence[str] | None = None,
    force: bool = False,
    requirements: Sequence[str] = (),
    removed_env: bool = False,
) -> Plan:
    """What ``nox -s matrix`` must run for ``profile``; ``requirements`` are what the export environment
    is given beyond its pins (:func:`harness.cases.corpus.requirements_of`). ``removed_env``: the export environment
    is removed after each export (a torch release installed on demand): one that is gone is no reason to export again,
    its pins are in the settings and its package listing in the stamp."""
    if force:
        return Plan("--force", {rt.id: "--force" for rt in profile.runtimes}, "--force", "--force")
    stamp = cache.read_json(out / layout.EXPORT_STAMP)
    export_why = _export_why(out, stamp, stamps.export_inputs(matrix, profile, corpus, cases, requirements), removed_env)
    runs: dict[str, str | None] = {}
    for rt in profile.runtimes:
        if export_why is not None:
            runs[rt.id] = "the export runs first"
            continue
        runs[rt.id] = next((w for p in profile.columns(rt) if (w := _run_why(out, matrix, rt, p, stamp)) is not None), None)
        if runs[rt.id] is None and rt.kind.frontier:
            runs[rt.id] = frontier.why_stale(out, rt.id)
    spec_why = "the export runs first" if export_why is not None else _spec_why(out, stamp, matrix.export.onnx)
    report_why = "an earlier stage runs" if export_why is not None or spec_why is not None or any(runs.values()) else None
    if report_why is None:
        report_why = _report_why(out, profile, results, matrix.corpus_of(profile))
    return Plan(export_why, runs, report_why, spec_why)


def _spec_why(out: Path, export_stamp: Any, onnx_pin: str) -> str | None:
    why = spec.why_stale(out, export_stamp, onnx_pin)
    if why is not None:
        return why
    stamp = cache.read_json(spec.stamp_path(out))
    return cache.environment_unchanged(stamp.get("env") if isinstance(stamp, dict) else None)


def _export_why(out: Path, stamp: Any, settings: Mapping[str, Any], removed_env: bool = False) -> str | None:
    if not isinstance(stamp, dict):
        return "no export yet"
    if not stamp.get("complete"):
        return "the last export left something undone (a crash, a timeout or a corpus problem)"
    if stamp.get("inputs") != settings:
        return "its settings changed (matrix.toml or the command line)"
    if (why := _damaged_stamp(stamp)) is not None:
        return f"{out / layout.EXPORT_STAMP} is damaged ({why})"
    gone = removed_env and not os.path.isdir(stamp["env"]["prefix"])
    why = cache.files_unchanged(stamp["files"]) or (None if gone else cache.environment_unchanged(stamp["env"]))
    if why is not None:
        return why
    for folder, pattern, names in stamp["globs"]:
        if cache.glob_names(folder, pattern) != names:
            return f"the probe files {pattern!r} under {folder} changed"
    manifest = cache.read_json(out / layout.MANIFEST)
    artifacts: Mapping[str, Mapping[str, str]] = stamp["artifacts"]
    listed = manifest.get("artifacts") if isinstance(manifest, dict) else None
    if not isinstance(listed, list) or not all(isinstance(a, str) for a in listed) or sorted(listed) != sorted(artifacts):
        return f"{out / layout.MANIFEST} does not list the stamped artifacts"
    store = cache.ExportStore(out / layout.STORE)
    for art_id, entry in artifacts.items():
        if (why := store.check(entry["key"])) is not None:
            return f"{art_id}: cache entry {why}"
        if not store.linked(entry["key"], layout.artifact_dir(out, art_id)):
            return f"{layout.artifact_dir(out, art_id)} differs from its cache entry"
    return frontier.models_missing(out)


def _damaged_stamp(stamp: Mapping[str, Any]) -> str | None:
    """What in the export stamp is not as :func:`harness.export.stage.export_all` writes it (None: each field that
    the plan reads has its shape), so that a damaged stamp is one more reason to export, never a traceback."""
    files, env, globs, artifacts = (stamp.get(k) for k in ("files", "env", "globs", "artifacts"))
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return "its files"
    if not isinstance(env, dict) or not isinstance(env.get("prefix"), str) or not isinstance(env.get("site"), list):
        return "its environment"
    if not isinstance(globs, list) or not all(_glob(g) for g in globs):
        return "its probe-file patterns"
    entries = artifacts.values() if isinstance(artifacts, dict) else None
    if entries is None or not all(isinstance(a, dict) and _text(a.get("key")) and _text(a.get("digest")) for a in entries):
        return "its artifacts"
    return None


def _glob(item: Any) -> bool:
    return isinstance(item, list) and len(item) == 3 and _text(item[0]) and _text(item[1]) and isinstance(item[2], list)


def _text(value: Any) -> bool:
    """A string a path can be made of (JSON may hold a NUL, which no path may)."""
    return isinstance(value, str) and "\0" not in value


def _run_why(out: Path, matrix: Matrix, runtime: Runtime, column: str, stamp: Mapping[str, Any]) -> str | None:
    shard = layout.shard_path(out, runtime, column)
    mine = cache.read_json(layout.stamp_path(out, runtime, column))
    if not isinstance(mine, dict) or not isinstance(mine.get("sha256"), str):  # none, damaged, or open (killed)
        return f"{column}: not run to the end yet"
    if mine.get("redo"):  # sealed (whole), but a rerun has something to do
        return f"{column}: {mine['redo']}"
    artifacts = ((art_id, a["key"], a["digest"]) for art_id, a in stamp["artifacts"].items())
    if mine.get("inputs") != stamps.shard_inputs(artifacts, matrix, runtime, column):
        return f"{column}: artifacts, settings or harness code changed"
    try:
        if cache.sha256_file(shard) != mine["sha256"]:
            return f"{column}: {shard} changed after its run sealed it (its every cell runs again)"
    except OSError:
        return f"{column}: {shard} is gone"
    return cache.environment_unchanged(mine.get("env"))


# The report ------------------------------------------------------------------


def _report_why(out: Path, profile: Profile, results: Path, builtin: Iterable[str]) -> str | None:
    stamp = cache.read_json(layout.report_stamp(out, profile.name))
    if not isinstance(stamp, dict):
        return "no report yet"
    if stamp.get("inputs") != stamps.report_inputs(out, profile, results, builtin):
        return f"its inputs changed since {results} was written"
    if (why := cache.environment_unchanged(stamp.get("env"))) is not None:
        return why
    stat, outputs = stamp.get("stat"), stamp.get("outputs")
    if not isinstance(outputs, dict) or not isinstance(stat, dict):
        return f"{layout.report_stamp(out, profile.name)} is damaged"
    for name, sha in outputs.items():
        path = results / name
        try:
            same = os.path.isfile(path) and cache.verify(path, sha, stat.get(name))[0]
        except OSError:
            same = False
        if not same:
            return f"{path} differs from what the report wrote"
    return None
