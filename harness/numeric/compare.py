"""Compare a runtime's outputs with torch's: pure numpy, no runtime, no torch.

An output matches when every element finite in both is within
``|out - ref| <= atol + rtol * |ref|`` (numpy's ``isclose`` convention) **or**,
for a floating output with ``scaled`` set, when its largest error is within
``scaled`` of its largest magnitude: ``max|out - ref| <= scaled * max|ref|``.
The second metric scales with the output: fp32 rounding in a deep network
leaves a few elements near zero (after a ReLU, say) off by 1e-4 of an output
that reaches 255, which the element-wise bound calls a mismatch although the
error is 2e-6 of the output's scale; a wrong graph is off by far more.

Whatever the tolerance, NaN must meet NaN and inf an inf of the same sign (a
NaN where torch had a number, or the reverse, is a mismatch), and an output
of another count, shape or dtype than torch's is a mismatch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harness.core.records import DiffStats

TOLERANCE_KEYS = ("atol", "rtol", "scaled")
"""What a tolerance holds, as matrix.toml's ``[tolerance]`` and a case's own settings name it."""


def tolerance_of(
    i: int, atol: float, rtol: float, scaled: float | None, outputs: Mapping[Any, Mapping[str, Any]] | None
) -> tuple[float, float, float | None]:
    """Output ``i``'s ``(atol, rtol, scaled)``: the case's own per-output settings (keyed by index, as an
    int or its string in JSON) over the shared ones."""
    own = dict((outputs or {}).get(i) or (outputs or {}).get(str(i)) or {})
    return (
        float(own.get("atol", atol)),
        float(own.get("rtol", rtol)),
        own.get("scaled", scaled),
    )


def compare(
    refs: Sequence[np.ndarray],
    outs: Sequence[np.ndarray],
    *,
    atol: float,
    rtol: float,
    scaled: float | None = None,
    outputs: Mapping[Any, Mapping[str, Any]] | None = None,
) -> tuple[bool, DiffStats]:
    """Return (every output matches, statistics) over all outputs of one probe.

    (Over 60 lines, on purpose: the verdict every cell rests on, one loop over the outputs that reads top to
    bottom: shape and dtype, NaN and inf, the element-wise bound, the scaled bound, the statistics.)

    Args:
        refs: torch's outputs.
        outs: The runtime's outputs, in the same order.
        atol: Absolute tolerance of the element-wise bound.
        rtol: Relative tolerance of the element-wise bound.
        scaled: Bound on a floating output's ``max|out - ref| / max|ref|``; None: element-wise only.
        outputs: Per-output overrides of ``atol``, ``rtol`` and ``scaled``, by output index.
    """
    if len(refs) != len(outs):
        return False, DiffStats(None, None, 0, 0, shape_mismatch=f"{len(outs)} outputs, torch has {len(refs)}")
    max_abs: float | None = None
    max_rel: float | None = None
    worst: tuple[float, int, float | None] | None = None  # (scaled error, output, its limit) of the worst output
    failing: tuple[float, int, float | None] | None = None  # the same, over the outputs that fail
    ok = True
    mismatched = total = nan_ref = nan_out = inf_ref = inf_out = 0
    for i, (ref, out) in enumerate(zip(refs, outs)):  # noqa: B905 (as long: checked above; zip's strict is 3.10's)
        ref, out = np.asarray(ref), np.asarray(out)
        if ref.shape != out.shape:
            return False, DiffStats(None, None, 0, 0, shape_mismatch=f"output {i}: shape {out.shape}, torch {ref.shape}")
        if ref.dtype != out.dtype:  # an int32 where torch gives int64 breaks the caller's code too
            return False, DiffStats(None, None, 0, 0, shape_mismatch=f"output {i}: dtype {out.dtype}, torch {ref.dtype}")
        a, r_tol, limit = tolerance_of(i, atol, rtol, scaled, outputs)
        if ref.dtype.kind in "OUSV":  # strings and objects: equal or not
            total += ref.size
            bad_strings = int(ref.size - np.sum(ref == out))
            mismatched += bad_strings
            ok = ok and not bad_strings
            continue
        floating = ref.dtype.kind in "fc"
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
        special = bool(bad.any())  # a NaN or inf disagreement: a mismatch under any tolerance
        ratio: float | None = None
        if finite.any():
            rf = r[finite]
            err = np.abs(o[finite] - rf)
            bad[finite] = err > a + r_tol * np.abs(rf)
            peak_err = float(err.max())
            max_abs = max(max_abs or 0.0, peak_err)
            nz = rf != 0
            if nz.any():
                rel = float((err[nz] / np.abs(rf[nz])).max())
                max_rel = max(max_rel or 0.0, rel)
            if floating:
                scale = float(np.abs(rf).max())
                ratio = peak_err / scale if scale > 0 else (0.0 if peak_err == 0 else float("inf"))
        n_bad = int(bad.sum())
        mismatched += n_bad
        within_scale = limit is not None and ratio is not None and ratio <= limit
        output_ok = n_bad == 0 or (not special and within_scale)
        if ratio is not None:
            entry = (ratio, i, limit)
            worst = entry if worst is None or ratio > worst[0] else worst
            if not output_ok:
                failing = entry if failing is None or ratio > failing[0] else failing
        ok = ok and output_ok
    shown = failing or worst
    stats = DiffStats(
        max_abs,
        max_rel,
        mismatched,
        total,
        nan_ref,
        nan_out,
        inf_ref,
        inf_out,
        scaled_error=shown[0] if shown else None,
        scaled_output=shown[1] if shown else None,
        scaled_limit=shown[2] if shown else None,
    )
    return ok, stats


def describe(stats: DiffStats) -> str:
    """One line for a table: why a probe is a mismatch, in the words of the metrics that failed."""
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
    if stats.scaled_error is not None and stats.scaled_limit is not None:
        parts.append(f"{scaled_words(stats)} (limit {stats.scaled_limit:.3g})")
    return ", ".join(parts)


def scaled_words(stats: DiffStats) -> str:
    """``error 2.1e-06 of output 0's largest |value|``: the scaled metric in words."""
    where = f"output {stats.scaled_output}'s" if stats.scaled_output is not None else "the output's"
    return f"error {stats.scaled_error:.3g} of {where} largest |value|"
