"""The files of one reproducer folder: the model, its test-data sets, the copied script and its parameters."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from harness.config import runtimes
from harness.core.onnxfile import strip_weights
from harness.core.records import ExportRecord
from harness.publish.repro._portable import portable
from harness.publish.repro._tensor import encode_tensor
from harness.publish.staged import changed_since_export
from harness.store import cache, layout

SCRIPT = (Path(__file__).parent / "_script.py").read_bytes()
"""``repro.py`` of every folder: :mod:`harness.publish.repro._script` as it is, so ruff and mypy check what users run."""

ZEROS = "weights.zeros"
"""The weights of a reproducer whose every failing cell failed at load: zeros, in a sparse file."""

_COLUMNS = runtimes.reproducer_columns("onnxruntime")


def probe_order(rec: ExportRecord) -> list[str]:
    """The artifact's probes, ``example`` first, the others in the export's order."""
    probes = list(rec.probes) or ["example"]
    return sorted(probes, key=lambda p: p != "example")


def parameters(rec: ExportRecord) -> bytes:
    """``repro.json``: what the copied script cannot know by itself, the artifact, its tolerances, and the
    ``--provider`` choices (every column an onnxruntime package runs, with its execution provider and the
    options its precision sets: :func:`harness.config.runtimes.reproducer_columns`)."""
    outputs = {str(k): dict(v) for k, v in sorted(rec.output_tolerance.items())}
    return parameters_of(rec.key.id, float(rec.atol), float(rec.rtol), None if rec.scaled is None else float(rec.scaled), outputs)


def parameters_of(artifact: str, atol: float, rtol: float, scaled: float | None, outputs: Mapping[str, Any]) -> bytes:
    """``repro.json`` from its values (:func:`parameters` of an artifact; a shared folder's own)."""
    given = {
        "artifact": artifact,
        "atol": atol,
        "rtol": rtol,
        "scaled": scaled,
        "outputs": dict(outputs),
        "providers": {col: [ep, dict(opts)] for col, (ep, opts) in _COLUMNS.items()},
    }
    return (json.dumps(given, indent=1, sort_keys=True) + "\n").encode("utf-8")


def data_sets(rec: ExportRecord, reference: bytes | None, probes: list[str]) -> dict[str, bytes]:
    """``test_data_set_<k>/...`` files of every probe, by path relative to the repro folder, from the bytes of
    ``reference.npz`` (None: the artifact has none)."""
    files: dict[str, bytes] = {}
    if reference is None:
        return files
    graph_inputs = rec.graph.get("inputs")
    in_names = None if graph_inputs is None else [str(v["name"]) for v in graph_inputs]
    out_names = [str(v["name"]) for v in rec.graph.get("outputs", ())]
    with np.load(io.BytesIO(reference), allow_pickle=False) as ref:
        for k, probe in enumerate(probes):
            folder = f"test_data_set_{k}"
            given = layout.probe_inputs(ref, probe)
            names = list(given) if in_names is None else [n for n in in_names if n in given]  # frozen inputs are not graph inputs
            for i, name in enumerate(names):
                files[f"{folder}/input_{i}.pb"] = encode_tensor(given[name], name)
            for i, value in enumerate(layout.probe_outputs(ref, probe)):
                files[f"{folder}/output_{i}.pb"] = encode_tensor(value, out_names[i] if i < len(out_names) else f"out{i}")
            files[f"{folder}/probe.txt"] = f"{probe}\n".encode()
    return files


def recorded(path: Path, sha256: str | None) -> bytes:
    """``path``'s bytes, which must be those the export recorded (a file edited since is never published).

    Raises:
        HarnessError: they are not.
    """
    data = path.read_bytes()
    if sha256 is not None and cache.sha256_bytes(data) != sha256:
        raise changed_since_export(path)
    return data


def model_files(src: Path, rec: ExportRecord, weightless: bool) -> dict[str, tuple[Path, str | None] | bytes | int]:
    """The model files of a reproducer folder: the artifact's ``model.onnx`` (checked against the hash the export
    recorded, its stack traces made :func:`portable`, bytes) and any ``model.onnx.data``, to be copied with its
    recorded hash; or, where only loading failed, that ``model.onnx`` with its floating weights pointing into
    :data:`ZEROS` and the zeros' size (an int: a sparse file).

    Raises:
        HarnessError: a file is not the one the export recorded.
    """
    model = published_model(recorded(src / layout.MODEL, rec.sha256))
    if weightless:
        try:
            stripped, size = strip_weights(model, ZEROS)
            if size:
                return {layout.MODEL: stripped, ZEROS: size}
        except (ValueError, OSError, IndexError):
            pass  # a model this cannot take apart (or with no weights to leave out) keeps its own
    own: dict[str, tuple[Path, str | None] | bytes | int] = {layout.MODEL: model}
    if (src / layout.DATA).is_file():
        own[layout.DATA] = (src / layout.DATA, rec.data_sha256)
    return own


def published_model(data: bytes) -> bytes:
    """A ``model.onnx`` as a reproducer publishes it: :func:`portable` (no path of the checkout that exported it);
    bytes that are no model this can read, as they are (what the runtimes were given)."""
    try:
        return portable(data)
    except ValueError:
        return data
