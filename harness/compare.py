"""Compare a runtime's outputs with torch's: pure numpy, no runtime, no torch.

The verdict is element-wise ``|out - ref| <= atol + rtol * |ref|`` (numpy's
``isclose`` convention) on elements finite in both; NaN must meet NaN and
inf must meet an inf of the same sign. A NaN where torch had a number (or
the reverse) is a mismatch however loose the tolerance, and so is an output
of another shape or dtype than torch's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from harness.records import DiffStats


def compare(refs: Sequence[np.ndarray], outs: Sequence[np.ndarray], *, atol: float, rtol: float) -> tuple[bool, DiffStats]:
    """Return (within tolerance, statistics) over all outputs of one probe."""
    if len(refs) != len(outs):
        return False, DiffStats(None, None, 0, 0, shape_mismatch=f"{len(outs)} outputs, torch has {len(refs)}")
    max_abs: float | None = None
    max_rel: float | None = None
    mismatched = total = nan_ref = nan_out = inf_ref = inf_out = 0
    for i, (ref, out) in enumerate(zip(refs, outs, strict=True)):
        ref, out = np.asarray(ref), np.asarray(out)
        if ref.shape != out.shape:
            return False, DiffStats(None, None, 0, 0, shape_mismatch=f"output {i}: shape {out.shape}, torch {ref.shape}")
        if ref.dtype != out.dtype:  # an int32 where torch gives int64 breaks the caller's code too
            return False, DiffStats(None, None, 0, 0, shape_mismatch=f"output {i}: dtype {out.dtype}, torch {ref.dtype}")
        if ref.dtype.kind in "OUSV":  # strings and objects: equal or not
            total += ref.size
            mismatched += int(ref.size - np.sum(ref == out))
            continue
        if ref.dtype.kind == "c":  # a complex value is its real and imaginary parts, each compared
            ref, out = np.stack([ref.real, ref.imag], -1), np.stack([out.real, out.imag], -1)
        r = ref.astype(np.float64, copy=False).reshape(-1)  # 1-d: a 0-d output is one element, not a scalar
        o = out.astype(np.float64, copy=False).reshape(-1)
        total += r.size
        r_nan, o_nan = np.isnan(r), np.isnan(o)
        r_inf, o_inf = np.isinf(r), np.isinf(o)
        nan_ref += int(r_nan.sum())
        nan_out += int(o_nan.sum())
        inf_ref += int(r_inf.sum())
        inf_out += int(o_inf.sum())
        finite = ~(r_nan | o_nan | r_inf | o_inf)
        bad = (r_nan != o_nan) | ((r_inf | o_inf) & ~(r_nan | o_nan) & (r != o))
        if finite.any():
            err = np.abs(o[finite] - r[finite])
            bad[finite] = err > atol + rtol * np.abs(r[finite])
            max_abs = max(max_abs or 0.0, float(err.max()))
            nz = r[finite] != 0
            if nz.any():
                rel = float((err[nz] / np.abs(r[finite][nz])).max())
                max_rel = max(max_rel or 0.0, rel)
        mismatched += int(bad.sum())
    stats = DiffStats(max_abs, max_rel, mismatched, total, nan_ref, nan_out, inf_ref, inf_out)
    return mismatched == 0, stats


def describe(stats: DiffStats) -> str:
    """One line for a table: why a probe is a mismatch."""
    if stats.shape_mismatch:
        return stats.shape_mismatch
    parts = [f"{stats.mismatched}/{stats.total} elements differ"]
    if stats.nan_ref != stats.nan_out:
        parts.append(f"NaN: torch {stats.nan_ref}, runtime {stats.nan_out}")
    if stats.inf_ref != stats.inf_out:
        parts.append(f"inf: torch {stats.inf_ref}, runtime {stats.inf_out}")
    if stats.max_abs is not None:
        parts.append(f"max abs {stats.max_abs:.3g}")
    if stats.max_rel is not None:
        parts.append(f"max rel {stats.max_rel:.3g}")
    return ", ".join(parts)
