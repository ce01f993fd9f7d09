"""The transform stage: every artifact of the profile's last export through one transform, into a build folder of
its own (``<out>/transforms/<name>/``) that the run stage and the report read as they read an export's.

Per artifact of the export: a transformed artifact (:func:`harness.transform._apply.apply`, in a worker, within the
export's reference timeout) or, where the export itself failed, a record that says so (its cells then carry the
export's failure, as in the export's table). Each is keyed by what it is made from: the source's digest, the
transform, the tools' versions and this stage's code (:func:`key`); an artifact whose key and files are unchanged is
kept. A worker that dies or overruns costs that artifact (``export-fail``, said as the transform's), never the stage.

Then the folder's manifest, its export stamp, and its ``spec.json``: the specification's answer on each transformed
file is what its cells are compared with, so the spec agrees with that reference by construction on every probe it
answered, and where it could not answer the probe says ``failed`` with the evaluator's words
(:mod:`harness.store.spec`; the report's fault assignment reads it: a runtime that departs from the specification on
the same file is at fault).

Runs in the transform environment (``nox -s transform``): the export's onnx, its reference onnxruntime (whose
``onnxruntime.quantization`` is the quantizer) and ``[transforms] requirements``; no torch.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.config import transforms
from harness.config.matrix import Matrix, Profile
from harness.core.errors import HarnessError
from harness.core.records import ExportRecord, first_line
from harness.pool.workers import run_tasks
from harness.store import cache, code, frontier, layout, spec

ENTRY = "harness.transform.stage"
STAMP_SCHEMA = "harness.transform/1"


def transform_code() -> str:
    """The digest of the code that makes a transformed artifact (this stage's import closure)."""
    return code.digest(code.files(ENTRY))


def key(source: ExportRecord, name: str, tools: dict[str, str], code_digest: str, budgets: tuple[float, int | None]) -> str:
    """A transformed artifact's content address: its source's files (or failure), the card and claims it carries on
    (an edited card reaches the transformed table too), the transform, the tools' versions, this stage's code."""
    made = source.digest if source.ok else f"failed:{source.cache_key}:{source.error_class}:{source.error_line}"
    settings = transforms.get(name)
    said = (source.card, source.claims)
    return cache.digest("transform", made, said, name, dict(settings.settings), settings.scaled, tools, code_digest, budgets)


def canonical(name: str) -> str:
    """A distribution's name as PEP 503 normalizes it (``onnx_ir`` → ``onnx-ir``)."""
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def pins(matrix: Matrix) -> dict[str, str]:
    """The tools the transform environment must hold, by distribution name: the export's onnx, its reference
    onnxruntime, and ``[transforms] requirements``."""
    wanted = {"onnx": matrix.export.onnx, "onnxruntime": matrix.export.onnxruntime}
    for req in matrix.transform_requirements:
        name, _, version = req.partition("==")
        wanted[canonical(name)] = version.strip()
    return wanted


def check_environment(matrix: Matrix) -> dict[str, str]:
    """The tools' versions here, or one line naming the first that is not matrix.toml's pin.

    Raises:
        HarnessError: a tool is missing or another version than the pin.
    """
    from harness.transform import _apply

    have = _apply.versions()
    for name, want in pins(matrix).items():
        got = have.get(name)
        if got is None:
            try:
                got = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                got = "missing"
        if got != want:
            raise HarnessError(
                f"transform: this environment holds {name} {got}, matrix.toml pins {want}; run it with "
                "`nox -s transform` (or `nox -s matrix`), whose environment holds the pins"
            )
    return have


def transform_all(
    matrix: Matrix,
    profile: Profile,
    out: Path,
    name: str,
    *,
    workers: int = 0,
    force: bool = False,
    echo: Callable[[str], Any] = print,
) -> list[ExportRecord]:
    """The transformed artifacts of the export in ``out`` for transform ``name``; the folder's manifest, stamp and
    ``spec.json`` written.

    Raises:
        HarnessError: no whole export in ``out``, a transform the profile does not list, or another environment.
    """
    if name not in profile.transforms:
        listed = ", ".join(profile.transforms) or "none"
        raise HarnessError(f"transform {name!r}: profile {profile.name!r} lists {listed}; name one of them")
    stamp = cache.read_json(out / layout.EXPORT_STAMP)
    if not isinstance(stamp, dict) or not stamp.get("complete") or not isinstance(stamp.get("artifacts"), dict):
        raise HarnessError(f"{out / layout.EXPORT_STAMP}: missing or not whole; run the export first (`nox -s matrix`)")
    sources = layout.load_artifacts(out)
    tools = check_environment(matrix)
    dest_out = profile.transform_out(out, name)
    (dest_out / layout.ARTIFACTS).mkdir(parents=True, exist_ok=True)
    digest = transform_code()
    budgets = (matrix.export.reference_timeout, int(matrix.export.intermediates_mib * 2**20))
    reference_pin = f"onnxruntime=={tools['onnxruntime']}"
    done: dict[str, ExportRecord] = {}
    todo: dict[str, tuple[ExportRecord, str]] = {}
    for rec in sources:
        art_id, want = rec.key.id, key(rec, name, tools, digest, budgets)
        dest = layout.artifact_dir(dest_out, art_id)
        kept = _kept(dest_out, dest, want) if not force else None
        if kept is not None:
            done[art_id] = kept
        elif not rec.ok:  # the export's own failure: the transformed table says so, cell by cell
            done[art_id] = _source_failed(dest, rec, name, tools, want)
        else:
            todo[art_id] = (rec, want)
    t0 = time.perf_counter()
    if todo:
        echo(f"transform {name}: {len(todo)} artifact(s) to make ({len(done)} kept) with {transforms.get(name).tool}")
    tasks = [
        (str(layout.artifact_dir(out, i)), str(layout.artifact_dir(dest_out, i)), name, budgets[0], budgets[1], reference_pin)
        for i in todo
    ]
    by_folder = {t[1]: i for t, i in zip(tasks, todo, strict=True)}
    for outcome in run_tasks(
        "harness.transform._apply:apply",
        tasks,
        workers=workers or os.cpu_count() or 1,
        timeout=matrix.export.timeout,
        init="harness.transform._apply:warm",
    ):
        art_id = by_folder[outcome.task[1]]
        rec, want = todo[art_id]
        dest = layout.artifact_dir(dest_out, art_id)
        if outcome.kind == "ok":
            made = ExportRecord.from_dict({**outcome.value, "cache_key": want})
        else:
            made = _broken(dest, rec, name, tools, want, outcome)
        cache.write_json(dest / layout.RECORD, made.to_dict())
        done[art_id] = made
    records = [done[rec.key.id] for rec in sources]
    _write_folder(dest_out, records, stamp, name, tools, digest)
    if todo:
        failed = sum(1 for r in records if not r.ok and r.error_class != "Skipped")
        echo(f"transform {name}: {len(todo)} made in {time.perf_counter() - t0:.1f}s ({failed} failed) → {dest_out}")
    return records


def _kept(dest_out: Path, dest: Path, want: str) -> ExportRecord | None:
    """The transformed artifact already in ``dest`` when it was made from the same inputs and its files are whole."""
    if not (dest / layout.RECORD).is_file():
        return None
    try:
        rec = layout.read_record(dest)
    except (HarnessError, OSError, ValueError, TypeError, KeyError):
        return None
    if rec.cache_key != want or layout.damaged(dest_out, [rec]):
        return None
    return rec


def _made(name: str, tools: dict[str, str], rec: ExportRecord) -> dict[str, Any]:
    t = transforms.get(name)
    return {**t.record(tools[t.package]), "source": rec.digest}


def _source_failed(dest: Path, rec: ExportRecord, name: str, tools: dict[str, str], want: str) -> ExportRecord:
    dest.mkdir(parents=True, exist_ok=True)
    made = ExportRecord.from_dict({**rec.to_dict(), "transform": _made(name, tools, rec), "cache_key": want})
    cache.write_json(dest / layout.RECORD, made.to_dict())
    return made


def _broken(dest: Path, rec: ExportRecord, name: str, tools: dict[str, str], want: str, outcome: Any) -> ExportRecord:
    """The record of a transform whose worker overran, died or raised: ``export-fail``, said as the transform's."""
    if outcome.kind == "timeout":
        error_class, line = "TransformTimeout", f"{name}: the transform took over its budget"
    elif isinstance(outcome.value, tuple):  # (type, message, traceback)
        said = f"{outcome.value[0]}: {first_line(str(outcome.value[1]))}"
        error_class, line = "HarnessBug", f"{name}: the transform's worker failed: {said}"
    else:
        error_class, line = "TransformCrash", f"{name}: the transform's worker died: {first_line(str(outcome.value))}"
    dest.mkdir(parents=True, exist_ok=True)
    for f in dest.iterdir():
        if f.is_file():
            f.unlink()
    data = {
        **rec.to_dict(), "ok": False, "error_class": error_class, "error_line": line, "error": line, "sha256": None,
        "reference_sha256": None, "intermediates_sha256": None, "data_sha256": None,
        "transform": _made(name, tools, rec), "cache_key": want,
    }  # fmt: skip
    return ExportRecord.from_dict(data)


def _write_folder(
    dest_out: Path, records: list[ExportRecord], source_stamp: dict[str, Any], name: str, tools: dict[str, str], digest: str
) -> None:
    """The manifest, then ``spec.json``, then the export stamp (last: it vouches for the folder). What each runtime
    loads is the runtime's, whatever file it is given: the export's frontier (its one-node models and each runtime's
    measure of them) is the folder's too, linked, so a runtime's frontier is measured once for the export and every
    transform."""
    (dest_out / layout.EXPORT_STAMP).unlink(missing_ok=True)
    _link(dest_out / frontier.FOLDER, Path("..") / ".." / frontier.FOLDER)
    # What a runtime's environment holds is the environment's, whatever folder it runs: probed once for every transform
    # (an emulated platform's probe is an interpreter started under qemu).
    _link(dest_out / ENVS, Path("..") / ".." / ".." / ENVS)
    ids = [r.key.id for r in records]
    cache.write_json(dest_out / layout.MANIFEST, {"artifacts": ids, "transform": name})
    version = tools["onnx"]
    facts = {r.key.id: _fact(r, version) for r in records if r.ok}
    artifacts = {r.key.id: {"digest": r.digest, "key": r.cache_key or ""} for r in records}
    said = {"onnx": version, "budget_seconds": spec.BUDGET_SECONDS, "artifacts": facts}
    spec.write(dest_out, said, spec.inputs(artifacts, version))
    stamp = {
        "schema": STAMP_SCHEMA,
        "transform": name,
        "tools": tools,
        "code": digest,
        "source": cache.digest("source", source_stamp.get("artifacts")),
        "artifacts": artifacts,
        "complete": True,
        "env": cache.environment(),
        "stats": {"artifacts": len(records)},
    }
    cache.write_json(dest_out / layout.EXPORT_STAMP, stamp)


ENVS = Path("cache") / "envs"
"""Where the run stage keeps each environment's probe (:mod:`harness.run.envprobe`), under a build folder."""


def _link(link: Path, target: Path) -> None:
    """``link`` → ``target`` (relative), replacing a folder of its own there; the target made where it is missing."""
    if link.is_symlink():
        return
    if link.is_dir():
        shutil.rmtree(link)
    link.parent.mkdir(parents=True, exist_ok=True)
    (link.parent / target).mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=True)


def _fact(rec: ExportRecord, version: str) -> dict[str, Any]:
    """The spec's fact on a transformed file: the reference evaluator's answer is its cells' reference, so every probe
    it answered agrees with it; a probe it could not answer says why."""
    from_torch = set(rec.probe_errors) - {p for p, why in rec.probe_errors.items() if "reference evaluator" in why}
    probes: dict[str, dict[str, Any]] = {}
    for p in rec.probes:
        if p in from_torch:
            continue
        why = rec.probe_errors.get(p)
        probes[p] = {"verdict": "failed", "line": why} if why else {"verdict": "agrees", "max_abs": 0.0}
    unanswered = None
    if probes and all(v["verdict"] == "failed" for v in probes.values()):
        unanswered = next(iter(probes.values()))["line"]
    return {"digest": rec.digest, "onnx": version, "checker": rec.checker, "probes": probes, "unanswered": unanswered}
