"""Writes ``results/repro/``: the folder of every artifact with a failing cell, into a publication."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from harness.answer.fault import Fault
from harness.core import schema
from harness.core.records import CellRecord, ExportRecord, Status
from harness.publish.repro._files import (
    SCRIPT,
    ZEROS,
    data_sets,
    model_files,
    parameters,
    parameters_of,
    probe_order,
    published_model,
    recorded,
)
from harness.publish.repro._issue import frontier_issue, issue
from harness.publish.repro._readme import frontier_readme, readme
from harness.publish.repro._tensor import encode_tensor
from harness.publish.staged import Publication
from harness.store import cache, frontier, layout

SHARED = "frontier"
"""``repro/frontier/ir<N>.op<M>/``: the one reproducer of every artifact of IR N and opset M whose every failing cell
is a refusal at load that the runtime's measured frontier explains (:mod:`harness.store.frontier`)."""

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
    loads: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    faults: Mapping[str, Fault] | None = None,
) -> dict[str, str]:
    """Write ``results/repro/<artifact id>/`` into ``stage`` for every artifact with a failing cell; return
    artifact id → its folder relative to ``results`` (``"repro/nan_topk.dynamo.op18"``). Without ``stage``,
    ``results`` is published at once holding these folders alone.

    With ``loads`` (runtime pin → its measured frontier), an artifact whose every failing cell is a refusal at load
    that its runtime's frontier explains (an IR version or opset past what it loads) shares one folder per IR × opset,
    ``repro/frontier/ir<N>.op<M>/``: the frontier's one-node model of that IR and opset, which those runtimes refuse
    the same way. A table of real models, most of whose artifacts only newer runtimes load, then publishes a few
    such folders instead of a copy of every model.

    ``build`` holds ``artifacts/<id>/{model.onnx, reference.npz}``; ``constraints`` maps a runtime pin
    (``"onnxruntime==1.17.3"``) to what must be installed beside it (``("numpy<2",)``). An artifact
    without model.onnx (export-fail) or without an export record is left out, and so is one whose
    references hold a dtype ONNX cannot encode (strings, objects) or cannot be read. Every file is a copy
    (never a link into the build folder, which a later export or edit may change) of bytes checked
    against the hashes the export recorded as they are read.

    With ``faults`` (cell key → :class:`harness.answer.fault.Fault`), each folder's README names each cell's fault and
    its ISSUE.md is the text of an issue ready to file where the fault belongs (nothing is posted anywhere).

    Raises:
        HarnessError: an artifact's file is not the one the export recorded.
    """
    faults = faults or {}
    if stage is None:
        alone = Publication(results)
        try:
            at_once = write_repros(build, results, cells, exports, constraints, alone, loads, faults=faults)
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
    shared: dict[str, list[CellRecord]] = {}
    for art_id in sorted(failing):
        rec = records.get(art_id)
        cells_ = [failing[art_id][k] for k in sorted(failing[art_id])]
        if rec is not None and (name := _shared_name(build, rec, cells_, loads or {})) is not None:
            shared.setdefault(name, []).extend(cells_)
            written[art_id] = f"{REPRO_DIR}/{SHARED}/{name}"
            continue
        files = None if rec is None else _folder(build, rec, cells_, constraints, faults)
        if files is not None:
            _install(stage, results / REPRO_DIR / art_id, files)
            written[art_id] = f"{REPRO_DIR}/{art_id}"
    for name, cells_ in sorted(shared.items()):
        _install(stage, results / REPRO_DIR / SHARED / name, _shared_folder(build, name, cells_, constraints, faults))
    return written


def _shared_name(build: Path, rec: ExportRecord, cells: list[CellRecord], loads: Mapping[str, Mapping[str, Any]]) -> str | None:
    """``ir10.op18`` where every failing cell of the artifact is a refusal at load its runtime's frontier explains and
    the frontier wrote a model of that IR and opset; else None (the artifact gets a folder of its own)."""
    ir, opset = rec.ir_version, rec.opset_actual
    if ir is None or opset is None or not loads:
        return None
    for c in cells:
        if c.status is not Status.LOAD_FAIL or frontier.explain(loads.get(c.runtime) or {}, ir, opset) is None:
            return None
    name = f"ir{ir}.op{opset}"
    return name if (frontier.models_dir(build) / f"{name}.onnx").is_file() else None


def _shared_folder(
    build: Path, name: str, cells: list[CellRecord], constraints: Mapping[str, tuple[str, ...]], faults: Mapping[str, Fault]
) -> Files:
    """The frontier's model ``name`` (checked against its index), one test set (``y = x + x``), the README naming every
    artifact and runtime it stands for, and repro.json."""
    folder = frontier.models_dir(build)
    index = cache.read_json(folder / frontier.INDEX) or {}
    model = published_model(recorded(folder / f"{name}.onnx", (index.get("files") or {}).get(f"{name}.onnx")))
    x = np.array([1.0, 2.0], dtype=np.float32)
    return {
        layout.MODEL: model,
        "test_data_set_0/input_0.pb": encode_tensor(x, "x"),
        "test_data_set_0/output_0.pb": encode_tensor(x + x, "y"),
        "test_data_set_0/probe.txt": b"example\n",
        "README.txt": frontier_readme(name, cells, constraints).encode("utf-8"),
        "ISSUE.md": frontier_issue(name, cells, faults).encode("utf-8"),
        "repro.json": parameters_of(f"{SHARED}/{name}", 0.0, 0.0, None, {}),
    }


def _folder(
    build: Path,
    rec: ExportRecord,
    cells: list[CellRecord],
    constraints: Mapping[str, tuple[str, ...]],
    faults: Mapping[str, Fault],
) -> Files | None:
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
    ctx = schema.Context(fault=lambda c: f.published() if (f := faults.get(c.key)) else None)
    text = readme(rec, probes, cells, constraints, weightless=ZEROS in models, ctx=ctx)
    filed = issue(rec, cells, constraints, faults)
    return {
        **sets,
        **models,
        "README.txt": text.encode("utf-8"),
        "ISSUE.md": filed.encode("utf-8"),
        "repro.json": parameters(rec),
    }


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
