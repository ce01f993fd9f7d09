"""The spec's answer per artifact: where the spec stage (:mod:`harness.spec.stage`) keeps it, how it is keyed, and
how the plan and the report know whether it is current.

``build/spec.json`` holds, per artifact of the last export, what the ONNX specification says of its file: the full
``onnx.checker`` (strict shape inference) and the ONNX reference evaluator's outputs on every probe, compared with
torch's by the same rule as a cell, or why the evaluator could not answer. Each artifact's fact is cached in
``build/cache/spec/<key>.json`` by a key of the artifact's digest (model, references, probes, tolerance), the onnx
release that judged it and the spec stage's code: a rerun judges only what changed.

Standard library only: the noxfile's plan reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.store import cache, code, layout

FACTS = layout.SPEC
"""In the build folder: every artifact's fact, written whole by the spec stage."""
STAMP = layout.SPEC_STAMP
"""In the build folder: what ``spec.json`` was computed from and its hash."""
CACHE = Path("cache") / "spec"
"""In the build folder: one fact per key."""

ENTRY = "harness.spec.stage"
"""What the spec stage runs (its workers import :mod:`harness.spec._evaluate`, which it names). Named to digest its
files, never imported here: this layer may not import a stage (:data:`harness.store.code._DATA` reads it as data,
as it does the other stages' entry points)."""

BUDGET_SECONDS = 60.0
"""Seconds the reference evaluator may take over one artifact (every probe): past it, the spec's answer is
"undetermined: over budget" (the evaluator is Python, slow on large models; a cell's verdict never waits on it)."""
MAX_MODEL_MIB = 256.0
"""A model whose files are larger than this is not evaluated (said as the reason): the evaluator holds every
intermediate tensor in Python."""

VERDICTS = ("agrees", "disagrees")
"""A probe the evaluator ran: its outputs within the cell's tolerance of torch's, or not."""


def spec_code() -> str:
    """The digest of the code that judges a file (:func:`harness.store.code.files` of the stage)."""
    return code.digest(code.files(ENTRY))


def key(artifact_digest: str, onnx_version: str, code_digest: str) -> str:
    """An artifact's fact's cache key: its files (:attr:`harness.core.records.ExportRecord.digest`), the onnx release
    that judges it, the stage's code and its bounds."""
    return cache.digest("spec", artifact_digest, onnx_version, code_digest, BUDGET_SECONDS, MAX_MODEL_MIB)


def inputs(artifacts: Mapping[str, Mapping[str, str]], onnx_version: str) -> str:
    """What ``spec.json`` depends on: each artifact's ``(id, digest)`` (the export stamp's), the onnx release and the
    code. The plan compares it with the stamp's before starting the spec stage."""
    ids = sorted((str(art_id), str(a.get("digest") if isinstance(a, Mapping) else a)) for art_id, a in artifacts.items())
    return cache.digest("spec", ids, onnx_version, spec_code(), BUDGET_SECONDS, MAX_MODEL_MIB)


def facts_path(out: Path) -> Path:
    return out / FACTS


def stamp_path(out: Path) -> Path:
    return out / STAMP


def cache_path(out: Path, fact_key: str) -> Path:
    return out / CACHE / f"{fact_key}.json"


def write(out: Path, facts: Mapping[str, Any], stamp_inputs: str) -> None:
    """``spec.json`` whole, then its stamp (its inputs and its hash): a killed stage leaves no stamp that vouches for
    a file it did not finish."""
    path = facts_path(out)
    stamp_path(out).unlink(missing_ok=True)
    cache.write_json(path, facts)
    stamp = {"inputs": stamp_inputs, "sha256": cache.sha256_file(path), "env": cache.environment()}
    cache.write_json(stamp_path(out), stamp)


def why_stale(out: Path, export_stamp: Any, onnx_version: str) -> str | None:
    """Why the spec stage must run again for the export ``export_stamp`` records (None: ``spec.json`` is current)."""
    stamp = cache.read_json(stamp_path(out))
    if not isinstance(stamp, dict) or not isinstance(stamp.get("sha256"), str):
        return "the spec's answer is not recorded yet"
    artifacts = export_stamp.get("artifacts") if isinstance(export_stamp, dict) else None
    if not isinstance(artifacts, dict) or stamp.get("inputs") != inputs(artifacts, onnx_version):
        return "artifacts, the onnx release or the spec stage's code changed"
    try:
        if cache.sha256_file(facts_path(out)) != stamp["sha256"]:
            return f"{facts_path(out)} changed after the spec stage wrote it"
    except OSError:
        return f"{facts_path(out)} is gone"
    return None


def sha256(out: Path) -> str | None:
    """The hash of ``spec.json`` as it is now (None: missing or unreadable), to check it against its seal."""
    try:
        return cache.sha256_file(facts_path(out))
    except OSError:
        return None


def read(out: Path, exports: Any) -> tuple[dict[str, dict[str, Any]], str | None]:
    """The facts of the artifacts ``exports`` (export records), by artifact id, and one line when any is missing:
    ``spec.json`` absent, unsealed, damaged, or of other files (a fact whose digest is not the artifact's is not its
    fact: left out, never reused)."""
    stamp = cache.read_json(stamp_path(out))
    data = cache.read_json(facts_path(out))
    # Said without the build folder's path: the line is published with every cell it leaves undetermined.
    if data is None:
        return {}, f"the spec's answer is not recorded (no {FACTS} in the build folder): run `nox -s spec` (or `nox -s matrix`)"
    if not isinstance(stamp, dict) or sha256(out) != stamp.get("sha256"):
        return {}, f"the build folder's {FACTS} is not the file the spec stage sealed: run `nox -s spec` again"
    recorded = data.get("artifacts") if isinstance(data, dict) else None
    if not isinstance(recorded, dict):
        return {}, f"the build folder's {FACTS} is damaged: run `nox -s spec` again"
    found: dict[str, dict[str, Any]] = {}
    for rec in exports:
        fact = recorded.get(rec.key.id)
        if isinstance(fact, dict) and fact.get("digest") == rec.digest and well_formed(fact):
            found[rec.key.id] = fact
    missing = [rec.key.id for rec in exports if rec.ok and rec.key.id not in found]
    said = None
    if missing:
        said = f"the spec's answer is missing for {len(missing)} artifact(s) ({layout.describe(missing)}): run `nox -s spec`"
    return found, said


def well_formed(fact: Mapping[str, Any]) -> bool:
    """A fact as the stage writes it: ``checker`` ``"ok"``, the checker's first error line or None (not checked),
    ``probes`` a mapping of probe → verdict, ``unanswered`` a string or None."""
    probes = fact.get("probes")
    if not isinstance(fact.get("checker"), (str, type(None))) or not isinstance(probes, dict):
        return False
    if fact.get("unanswered") is not None and not isinstance(fact.get("unanswered"), str):
        return False
    return all(isinstance(v, dict) and v.get("verdict") in (*VERDICTS, "failed") for v in probes.values())
