"""A table of platform columns (profile ``hardware``): what each column ran on, the verdicts that change with the
platform, and how far each case's outputs move between platforms.

Every cell of a platform column (``cpu@aarch64``) was compared with torch like any other; its outputs were also kept
per probe (``<out>/outputs/<cell key>.npz``, :func:`harness.store.layout.keep_outputs`). Here the same probe's outputs
on two platforms are compared with each other: the spread is ``max |a - b|`` over every element of every output (abs)
and that divided by the largest ``|b|`` of the output (rel: the difference at the output's own scale; an element-wise
ratio blows up where a value is near zero), with ``b`` the first platform of the profile (the native one). A pair is
counted only where both cells ran (pass or mismatch) and both kept their outputs; what could not be compared is said.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.config import platforms
from harness.core.records import CellRecord, Status
from harness.store import layout

SCHEMA = "harness.platforms/1"
_RAN = (Status.PASS, Status.MISMATCH)


def _spread(a: Sequence[Any], b: Sequence[Any]) -> tuple[float, float] | None:
    """(max abs, max abs / max |b|) between two runs' outputs; None where they do not line up (count, shape)."""
    import numpy as np

    if len(a) != len(b):
        return None
    worst_abs = worst_rel = 0.0
    for x, y in zip(a, b):  # noqa: B905  (lengths checked above; Python 3.9 has no strict)
        x, y = np.asarray(x), np.asarray(y)
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
        rel = d / scale if scale > 0 else (0.0 if d == 0 else math.inf)
        worst_rel = max(worst_rel, rel)
    return worst_abs, worst_rel


def measure(out: Path, cells: Iterable[CellRecord], order: Sequence[str]) -> dict[str, Any]:
    """The platform summary of ``cells`` (those of platform columns), ``order`` the profile's platforms: per column how
    it ran and what its process saw, per case its verdicts per platform and its spread against ``order[0]``, and every
    cell whose verdict is not the same on every platform."""
    by_slot: dict[tuple[str, str, int, str, str], dict[str, CellRecord]] = defaultdict(dict)
    columns: dict[str, dict[str, Any]] = {}
    for c in cells:
        name = platforms.of(c.provider)
        if not name:
            continue
        col = columns.setdefault(f"{c.runtime} {name}", {"runtime": c.runtime, "platform": name, "cells": 0, "pass": 0})
        if c.runtime_wide:  # the column did not run: what it says, and no fact of a CPU
            col["unmeasured"] = f"{c.status.value}: {c.error_line}"
            continue
        by_slot[(c.case, c.exporter, c.opset, c.runtime, c.probe)][name] = c
        col["cells"] += 1
        col["pass"] += c.status is Status.PASS
        for key in ("how", "isa", "isa_features", "machine"):
            if c.env.get(key) and key not in col:
                col[key] = c.env[key]
    base = order[0] if order else ""
    cases: dict[str, dict[str, Any]] = {}
    changes: list[dict[str, Any]] = []
    folder = out / layout.OUTPUTS
    for (case, exporter, opset, runtime, probe), on in sorted(by_slot.items()):
        row = cases.setdefault(case, {"verdicts": {}, "spread": {}, "compared": 0, "not_compared": 0})
        for name, c in on.items():
            v = row["verdicts"].setdefault(name, {"pass": 0, "cells": 0})
            v["cells"] += 1
            v["pass"] += c.status is Status.PASS
        statuses = {name: c.status.value for name, c in on.items() if not c.runtime_wide}
        if len(set(statuses.values())) > 1:
            changes.append(
                {
                    "case": case, "exporter": exporter, "opset": opset, "runtime": runtime, "probe": probe,
                    "verdicts": statuses,
                    "lines": {n: c.error_line for n, c in on.items() if c.status is not Status.PASS and c.error_line},
                    "localization": {n: c.localization for n, c in on.items() if c.localization},
                }
            )  # fmt: skip
        ref = on.get(base)
        if ref is None or ref.status not in _RAN or not ref.cache_key:
            continue
        want = layout.read_outputs(folder, ref.cache_key)
        for name, c in on.items():
            if name == base or c.status not in _RAN or not c.cache_key:
                continue
            got = layout.read_outputs(folder, c.cache_key) if want is not None else None
            found = _spread(got, want) if got is not None and want is not None else None
            if found is None:
                row["not_compared"] += 1
                continue
            row["compared"] += 1
            abs_, rel = found
            s = row["spread"].setdefault(name, {"abs": 0.0, "rel": 0.0})
            s["abs"], s["rel"] = max(s["abs"], abs_), max(s["rel"], rel)
    return {"schema": SCHEMA, "base": base, "columns": columns, "cases": cases, "changes": changes}


def _num(x: float) -> str:
    if x == 0:
        return "0"
    if math.isinf(x):
        return "inf"
    return f"{x:.1e}"


def section(summary: Mapping[str, Any], order: Sequence[str], repros: Mapping[str, str] | None = None) -> str:
    """The README's "Per platform" section."""
    base = summary.get("base", "")
    lines = [
        "## Per platform",
        "",
        "Each column is the CPU provider on one platform (harness/config/platforms.py): natively where this machine is "
        "that CPU, else under Debian's qemu-user (`-cpu` the model below). A column is published only where its own "
        "process saw the instruction sets its name promises (numpy's runtime CPU dispatch, below); one that saw another "
        "CPU is a column-wide `env-error`. **No latency on an emulated column**: qemu translates every instruction, so "
        "its speed says nothing of the CPU's; its verdicts and differences are the kernels' own (onnxruntime picks its "
        "kernels from CPUID, which the emulator answers as the CPU it emulates).",
        "",
        "| runtime | platform | how it ran | level seen | instruction sets seen | pass / cells |",
        "|---|---|---|---|---|---|",
    ]
    shown = ("AVX", "FMA", "SSE4", "ASIMD", "NEON")
    for col in sorted(summary.get("columns", {}).values(), key=lambda col: (col["runtime"], _rank(col["platform"], order))):
        feats = " ".join(f for f in str(col.get("isa_features", "")).split() if f.startswith(shown))
        if col.get("unmeasured"):  # never a CPU it did not run on
            lines.append(f"| {col['runtime']} | {col['platform']} | not measured: {col['unmeasured']} | — | — | — |")
            continue
        said = f"{col['pass']} / {col['cells']}"
        ran = f"{col.get('how', '—')} | {col.get('isa', '—')} | {feats or '—'}"
        lines.append(f"| {col['runtime']} | {col['platform']} | {ran} | {said} |")
    changes = summary.get("changes", [])
    lines += ["", "### Verdicts that change with the platform", ""]
    if not changes:
        lines.append("None: every cell has the same verdict on every platform it ran on.")
    else:
        lines += ["| case | exporter | opset | runtime | probe | verdicts | where it starts |", "|---|---|---|---|---|---|---|"]
        for ch in changes:
            said = ", ".join(f"{p}: {s}" for p, s in sorted(ch["verdicts"].items(), key=lambda kv: _rank(kv[0], order)))
            where = "; ".join(f"{p}: {loc}" for p, loc in ch["localization"].items()) or "; ".join(
                f"{p}: {line}" for p, line in ch["lines"].items()
            )
            slot = f"{ch['case']} | {ch['exporter']} | {ch['opset']} | {ch['runtime']} | {ch['probe']}"
            lines.append(f"| {slot} | {said} | {where or '—'} |")
    others = [p for p in order if p != base]
    lines += [
        "",
        f"### Spread of outputs across platforms (against {base})",
        "",
        "Per case, the largest difference between a probe's outputs on a platform and on "
        f"{base}, over every exporter, opset, runtime and probe that ran on both: max |a − b| (abs) and that over the "
        "largest |b| of the output (rel). 0: bit-identical; inf: a NaN or an infinity on one side, a number on the other; "
        "—: no probe ran on both. *not compared*: probes that ran on both but whose outputs could not be set side by side "
        "(another count or shape of outputs on that platform, or outputs not kept): left out of the maximum, and counted.",
        "",
        "| case | " + " | ".join(f"{p} pass | vs {base} abs | rel" for p in others) + " | not compared |",
        "|---|" + "---|---|---|" * len(others) + "---|",
    ]
    for case, row in sorted(summary.get("cases", {}).items()):
        cells = []
        for p in others:
            v = row["verdicts"].get(p, {"pass": 0, "cells": 0})
            s = row["spread"].get(p)
            cells += [f"{v['pass']}/{v['cells']}", _num(s["abs"]) if s else "—", _num(s["rel"]) if s else "—"]
        lines.append(f"| {case} | " + " | ".join(cells) + f" | {row['not_compared'] or ''} |")
    return "\n".join(lines) + "\n"


def _rank(name: str, order: Sequence[str]) -> int:
    return order.index(name) if name in order else len(order)
