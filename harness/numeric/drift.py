"""How far a transformed file's outputs moved from torch's fp32 outputs: the drift, published per cell as numbers,
never as a pass.

A transformed artifact (:mod:`harness.transform.stage`) keeps torch's fp32 outputs beside it (``fp32.npz``, its
SHA-256 in the record) and every cell run on it keeps the runtime's outputs (``<out>/outputs/<cell key>.npz``). Per
cell that ran (pass or mismatch): ``max_abs`` = max |out - fp32| over every element of every output; ``max_rel`` =
the worst output's max_abs over its largest finite |fp32| (the difference at the output's own scale); ``top1`` =
where the first output is scores over classes (a last axis of 2 or more, floating), the share of rows whose argmax
is torch's; ``flagged`` where ``max_rel`` is past what the transform should cost (:attr:`Transform.drift`), which is
what a user meets as "quantization broke my model". Integer outputs are compared as integers; NaN against NaN is no
difference, NaN against a number infinite. The same numbers for the specification's answer on the file (what the
transform itself costs, whichever runtime runs it): :func:`of_file`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.config import transforms
from harness.core.records import CellRecord, ExportRecord, Status
from harness.store import cache, layout

_RAN = (Status.PASS, Status.MISMATCH)


def between(got: Sequence[Any], fp32: Sequence[Any]) -> dict[str, Any] | None:
    """The drift of outputs ``got`` from ``fp32`` (None: they do not line up: count or shapes)."""
    import numpy as np

    if len(got) != len(fp32) or not got:
        return None
    worst_abs = worst_rel = 0.0
    for a, b in zip(got, fp32):  # noqa: B905 (lengths checked)
        x, y = np.asarray(a), np.asarray(b)
        if x.shape != y.shape:
            return None
        if x.size == 0:
            continue
        if x.dtype.kind in "biu" and y.dtype.kind in "biu":
            d = float(np.max(np.abs(x.astype(np.int64) - y.astype(np.int64))))
            scale = float(np.max(np.abs(y.astype(np.int64))))
        else:
            xf, yf = x.astype(np.float64), y.astype(np.float64)
            same = (xf == yf) | (np.isnan(xf) & np.isnan(yf))
            diff = np.where(same, 0.0, np.abs(xf - yf))
            d = float(np.max(np.where(np.isnan(diff), np.inf, diff)))
            finite = np.abs(yf[np.isfinite(yf)])
            scale = float(np.max(finite)) if finite.size else 0.0
        worst_abs = max(worst_abs, d)
        worst_rel = max(worst_rel, d / scale if scale > 0 else (0.0 if d == 0 else math.inf))
    return {"max_abs": worst_abs, "max_rel": worst_rel, "top1": top1(got[0], fp32[0])}


def top1(got: Any, fp32: Any) -> float | None:
    """The share of rows whose argmax over the last axis is the same (None: not scores over classes)."""
    import numpy as np

    x, y = np.asarray(got), np.asarray(fp32)
    if x.shape != y.shape or x.ndim < 2 or x.shape[-1] < 2 or x.dtype.kind != "f" or y.dtype.kind != "f" or not x.size:
        return None
    a = np.nan_to_num(x.reshape(-1, x.shape[-1]), nan=-np.inf).argmax(axis=1)
    b = np.nan_to_num(y.reshape(-1, y.shape[-1]), nan=-np.inf).argmax(axis=1)
    return float(np.mean(a == b))


def _fp32(folder: Path, rec: ExportRecord, probe: str) -> list[Any] | None:
    import numpy as np

    path = folder / layout.FP32
    try:
        if cache.sha256_file(path) != rec.transform.get("fp32_sha256"):
            return None  # not the file the transform wrote: no drift is published from it
        with np.load(path) as data:
            return [data[k] for k in sorted((k for k in data.files if k.startswith(f"{probe}/out/")), key=_index)]
    except (OSError, ValueError, KeyError):
        return None


def _index(key: str) -> int:
    return int(key.rpartition("/")[2])


def flag(d: dict[str, Any], rec: ExportRecord) -> dict[str, Any]:
    """``d`` with the transform's limit and whether it is past it."""
    name = rec.transform.get("name")
    limit = transforms.get(name).drift if name in transforms.CATALOG else math.inf
    return {**d, "limit": limit, "flagged": d["max_rel"] > limit}


def measure(out: Path, cells: Iterable[CellRecord], exports: Iterable[ExportRecord]) -> dict[str, dict[str, Any]]:
    """Cell key → its drift, for every cell of a transformed file that ran and kept its outputs."""
    by_id = {r.key.id: r for r in exports if r.ok and r.transform}
    found: dict[str, dict[str, Any]] = {}
    fp32_cache: dict[tuple[str, str], list[Any] | None] = {}
    for c in cells:
        rec = by_id.get(c.artifact.id)
        if rec is None or c.status not in _RAN or not c.cache_key:
            continue
        slot = (rec.key.id, c.probe)
        if slot not in fp32_cache:
            fp32_cache[slot] = _fp32(layout.artifact_dir(out, rec.key.id), rec, c.probe)
        want = fp32_cache[slot]
        got = layout.read_outputs(out / layout.OUTPUTS, c.cache_key) if want is not None else None
        d = between(got, want) if got is not None and want is not None else None
        if d is not None:
            found[c.key] = flag(d, rec)
    return found


def of_file(out: Path, rec: ExportRecord) -> dict[str, dict[str, Any]]:
    """Probe → the drift of the specification's answer on a transformed file (what the transform costs)."""
    import numpy as np

    folder = layout.artifact_dir(out, rec.key.id)
    found: dict[str, dict[str, Any]] = {}
    if not rec.ok or not rec.transform:
        return found
    try:
        with np.load(folder / layout.REFERENCE) as ref:
            answers = {p: layout.probe_outputs(ref, p) for p in rec.probes if p not in rec.probe_errors}
    except (OSError, ValueError, KeyError):
        return found
    for probe, outs in answers.items():
        want = _fp32(folder, rec, probe)
        d = between(outs, want) if want is not None else None
        if d is not None:
            found[probe] = flag(d, rec)
    return found


def section(drifts: dict[str, dict[str, Any]], cells: Iterable[CellRecord], exports: Iterable[ExportRecord]) -> str:
    """The README's "Drift from torch fp32" section of a table of transformed files: per artifact and column, the
    worst drift over its probes (of its scale), ⚑ where past the transform's limit, the lowest top-1 agreement."""
    worst: dict[tuple[str, str, int], dict[str, dict[str, Any]]] = {}
    columns: list[str] = []
    for c in cells:
        d = drifts.get(c.key)
        if d is None:
            continue
        col = f"{c.runtime.partition('==')[2] or c.runtime} {c.provider}"
        if col not in columns:
            columns.append(col)
        slot = worst.setdefault((c.case, c.exporter, c.opset), {})
        have = slot.get(col) or {}
        tops = [x for x in (d.get("top1"), have.get("top1")) if x is not None]
        keep = d if not have or d["max_rel"] > have["max_rel"] else have  # the worst drift over the probes
        slot[col] = {**keep, "top1": min(tops) if tops else None}  # and the lowest top-1 agreement
    limits = {r.transform.get("name"): flag({"max_rel": 0.0}, r)["limit"] for r in exports if r.transform}
    lines = [
        "## Drift from torch fp32",
        "",
        "How far each runtime's outputs on the transformed file are from torch's fp32 outputs: the worst over the "
        "case's probes of max |out − fp32| / max |fp32| (the difference at the output's own scale), and where the output "
        "is scores over classes the lowest share of rows whose top-1 is torch's. A number, never a pass: the verdict is "
        "the comparison with the specification's answer on the same file. ⚑: past "
        + ", ".join(f"{lim:g} ({name})" for name, lim in sorted(limits.items()))
        + ", what the transform should cost. Every cell's own figures are in `matrix.jsonl` (`drift`).",
        "",
    ]
    if not worst:
        return "\n".join([*lines, "No cell of a transformed file ran and kept its outputs.", ""])
    lines.append("| case | exporter | opset | " + " | ".join(columns) + " |")
    lines.append("|---|---|---|" + "---|" * len(columns))
    for (case, exporter, opset), by_col in sorted(worst.items()):
        row = []
        for col in columns:
            d = by_col.get(col)
            if d is None:
                row.append("")
                continue
            text = f"{d['max_rel']:.2g}" + (" ⚑" if d["flagged"] else "")
            if d.get("top1") is not None and d["top1"] < 1:
                text += f" (top-1 {d['top1']:.0%})"
            row.append(text)
        lines.append(f"| {case} | {exporter} | {opset} | " + " | ".join(row) + " |")
    return "\n".join([*lines, ""])
