"""Writes ``results/repro/``: the folder of every artifact with a failing cell, into a publication."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from harness.build import layout
from harness.core.records import CellRecord, ExportRecord, Status
from harness.publish.repro._files import SCRIPT, ZEROS, data_sets, model_files, parameters, probe_order, recorded
from harness.publish.repro._readme import readme
from harness.publish.staged import Publication

REPRO_DIR = "repro"
"""Folder under ``results/`` that holds one reproducer folder per failing artifact."""

FAILING = frozenset({Status.MISMATCH, Status.RUN_FAIL, Status.LOAD_FAIL, Status.CRASH, Status.TIMEOUT})
"""Statuses that get a reproducer: the runtime had a model to run and something went wrong."""

Files = dict[str, tuple[Path, str | None] | bytes | int]
"""A folder's files by relative path: bytes, a build file to copy with its recorded hash, or a sparse file's size."""


def write_repros(
    build: Path,
    results: Path,
    cells: Iterable[CellRecord],
    exports: Iterable[ExportRecord],
    constraints: Mapping[str, tuple[str, ...]],
    stage: Publication | None = None,
) -> dict[str, str]:
    """Write ``results/repro/<artifact id>/`` into ``stage`` for every artifact with a failing cell; return
    artifact id → its folder relative to ``results`` (``"repro/nan_topk.dynamo.op18"``). Without ``stage``,
    ``results`` is published at once holding these folders alone.

    ``build`` holds ``artifacts/<id>/{model.onnx, reference.npz}``; ``constraints`` maps a runtime pin
    (``"onnxruntime==1.17.3"``) to what must be installed beside it (``("numpy<2",)``). An artifact
    without model.onnx (export-fail) or without an export record is left out, and so is one whose
    references hold a dtype ONNX cannot encode (strings, objects) or cannot be read. Every file is a copy
    (never a link into the build folder, which a later export or edit may change) of bytes checked
    against the hashes the export recorded as they are read.

    Raises:
        HarnessError: an artifact's file is not the one the export recorded.
    """
    if stage is None:
        alone = Publication(results)
        try:
            at_once = write_repros(build, results, cells, exports, constraints, alone)
            alone.commit()
        except BaseException:
            alone.abort()
            raise
        return at_once
    records = {r.key.id: r for r in exports}
    failing: dict[str, dict[str, CellRecord]] = {}
    for cell in cells:
        if cell.status in FAILING:
            failing.setdefault(cell.artifact.id, {})[cell.key] = cell
    written: dict[str, str] = {}
    for art_id in sorted(failing):
        rec = records.get(art_id)
        files = None if rec is None else _folder(build, rec, [failing[art_id][k] for k in sorted(failing[art_id])], constraints)
        if files is not None:
            _install(stage, results / REPRO_DIR / art_id, files)
            written[art_id] = f"{REPRO_DIR}/{art_id}"
    return written


def _folder(build: Path, rec: ExportRecord, cells: list[CellRecord], constraints: Mapping[str, tuple[str, ...]]) -> Files | None:
    """Every file of one artifact's folder but repro.py, or None where it gets none (no model.onnx: an export-fail;
    references that cannot be read or encoded).

    Raises:
        HarnessError: an artifact's file is not the one the export recorded.
    """
    src = layout.artifact_dir(build, rec.key.id)
    if not (src / layout.MODEL).is_file():
        return None
    probes = probe_order(rec)
    reference = src / layout.REFERENCE
    try:
        sets = data_sets(rec, recorded(reference, rec.reference_sha256) if reference.is_file() else None, probes)
    except (TypeError, ValueError, OSError, KeyError):
        return None
    models = model_files(src, rec, all(c.status is Status.LOAD_FAIL for c in cells))
    text = readme(rec, probes, cells, constraints, weightless=ZEROS in models)
    return {**sets, **models, "README.txt": text.encode("utf-8"), "repro.json": parameters(rec)}


def _install(stage: Publication, target: Path, files: Files) -> None:
    """Stage one folder: bytes written, build files copied as checked, sparse zeros, and repro.py (executable)."""
    for rel, data in sorted(files.items()):
        if isinstance(data, tuple):
            stage.copy(target / rel, *data)
        elif isinstance(data, int):
            stage.write_zeros(target / rel, data)
        else:
            stage.write_bytes(target / rel, data)
    stage.write_bytes(target / "repro.py", SCRIPT, mode=0o755)
