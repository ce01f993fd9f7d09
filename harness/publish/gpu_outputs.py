"""The second reference for GPU cells: torch's own CUDA outputs, joined into the verdicts of NVIDIA columns.

Every reference in the table is torch on the CPU. A cell of an NVIDIA column that mismatches it may be the
runtime's doing, or the GPU's arithmetic before any exporter or runtime is involved (TF32 matmuls, another
reduction order). ``bench/cuda_reference.py`` runs each case in torch on the GPU, on the very probe inputs of
the export's ``reference.npz``, and writes ``<out>/cuda_reference.jsonl``; the report joins it here: each such
mismatch says which it is, in its note, beside where it starts (the cell's ``localization``).

A row is joined only where it was computed against this export's reference (its ``reference_sha256`` is that
of an artifact of the case): a second reference of another export says nothing about these cells.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.config.runtimes import provider
from harness.core.records import CellRecord, ExportRecord, Status
from harness.store import layout


def read(out: Path, exports: Iterable[ExportRecord]) -> tuple[dict[tuple[str, str], dict[str, Any]], str | None]:
    """Rows of ``<out>/cuda_reference.jsonl`` by (case, probe) that were computed against this export, and what
    was left out (one line) or None. No file: nothing, and nothing to say."""
    path = out / layout.CUDA_REFERENCE
    if not path.is_file():
        return {}, None
    refs: dict[str, set[str]] = {}
    for rec in exports:
        if rec.reference_sha256:
            refs.setdefault(rec.case, set()).add(rec.reference_sha256)
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    damaged = stale = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            row = json.loads(line)
            key = (str(row["case"]), str(row["probe"]))
        except (ValueError, KeyError, TypeError):
            damaged += 1
            continue
        if not isinstance(row.get("reference_sha256"), str):
            damaged += 1
            continue
        if row["reference_sha256"] not in refs.get(key[0], ()):
            stale += 1
            continue
        rows[key] = row
    left = [f"{damaged} damaged line(s)"] * bool(damaged) + [f"{stale} row(s) of another export"] * bool(stale)
    return rows, f"{path}: {', '.join(left)} left out" if left else None


def verdict(row: Mapping[str, Any]) -> str:
    """What torch on the GPU says about a mismatch of an NVIDIA column, in words."""
    device = row.get("device") or "the GPU"
    if row.get("status") == "pass":
        return (
            f"second reference: torch on {device} agrees with the CPU reference here (max abs diff {row.get('max_abs', 0):.3g}): "
            "the difference is the runtime's"
        )
    if row.get("status") == "mismatch":
        return (
            f"second reference: torch on {device} differs from the CPU reference too ({row.get('error') or 'mismatch'}): "
            "a GPU-side numerical difference, not an export bug"
        )
    return f"second reference: torch on {device} could not run it ({row.get('error') or row.get('status')})"


def join(cells: Iterable[CellRecord], rows: Mapping[tuple[str, str], Mapping[str, Any]]) -> list[CellRecord]:
    """The cells, each mismatch of an NVIDIA column that has a row noted with :func:`verdict`."""
    joined = []
    for cell in cells:
        row = rows.get((cell.case, cell.probe)) if cell.status is Status.MISMATCH else None
        if row is not None and provider(cell.provider).nvidia:
            cell = cell.noted(verdict(row))
        joined.append(cell)
    return joined
