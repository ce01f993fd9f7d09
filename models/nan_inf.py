"""NaN propagation: torch ops whose NaN rule the exported ONNX operator does not keep.

torch's max, argmax, topk, maximum and max pooling all treat NaN as "larger
than everything": a NaN in the input shows up in the output. The ONNX
operators they export to (ReduceMax, ArgMax, TopK, Max, MaxPool) say nothing
about NaN, and onnxruntime's CPU kernels have answered differently across
releases. Each case's example input holds no NaN (and passes); its probes put
NaNs where they reach the difference. Each fixed twin spells torch's NaN rule
out with ``torch.isnan`` and ``torch.where``.

Measured, not reproduced (no case): relu, hardtanh/relu6/clamp with scalar
bounds (Clip), softmax over a row with -inf, log/sqrt of negatives and
inf - inf all give the same NaNs in torch and every runtime measured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from harness.cases import Card, Case, Claim, lazy, randn, register

if TYPE_CHECKING:
    import torch

BATCH = {"x": {0: "batch"}}
ONNX_NAN_SPEC = "onnx/onnx#4716 (the spec leaves NaN handling of TopK, ArgMax, Max, ReduceMax open)"


def _net(cls: str, seed: int = 0) -> Callable[[], torch.nn.Module]:
    """A factory for ``models._nan_inf_nets.<cls>`` with seeded weights."""
    return lazy("models._nan_inf_nets", cls, seed=seed)


def _with_nan(*shape: int, seed: int, cells: Sequence[tuple[int, ...]]) -> torch.Tensor:
    """A seeded normal tensor with NaN at ``cells`` (index tuples)."""
    x = randn(*shape, seed=seed)
    for cell in cells:
        x[cell] = float("nan")
    return x


# torch.max(x, dim) → ReduceMax + ArgMax ------------------------------------------

# NaN before the row's maximum, at the end of a row, at the start of a row; row 1 has none.
ROW_NANS = ((0, 1), (2, 5), (3, 0))


def _rows_probes() -> dict[str, dict[str, Any]]:
    return {"nan_rows": {"x": _with_nan(4, 6, seed=1, cells=ROW_NANS)}}


MAX_DIM = Card(
    symptom="torch.max(x, dim=-1) on a row holding a NaN: torch returns NaN and the NaN's index; the exported model "
    "returns the largest number of the row and its index. No error; rows without NaN agree.",
    cause="torch's max/amax/argmax propagate NaN (NaN counts as the largest value). ONNX ReduceMax and ArgMax leave "
    "NaN unspecified, and onnxruntime's CPU kernels compare with '>' and '<', so a NaN mostly loses — how often "
    "depends on where it sits in the row (microsoft/onnxruntime#10514).",
    fix="Make the NaN rule explicit: has_nan = isnan(x).any(dim); values = where(has_nan, nan, x.amax(dim)); "
    "indices = where(has_nan, isnan(x).float().argmax(dim), x.argmax(dim)). Or clean NaNs before (torch.nan_to_num).",
    source=f"microsoft/onnxruntime#10514; {ONNX_NAN_SPEC}",
)

register(
    Case(
        name="nan_max_dim",
        model=_net("MaxDim"),
        inputs=lambda: {"x": randn(4, 6)},
        probes=_rows_probes,
        dynamic=BATCH,
        card=MAX_DIM,
        claims=(
            Claim("mismatch", exporter="torchscript", probe="nan_rows", match="NaN: torch 3, runtime 0"),
            Claim("mismatch", exporter="dynamo", probe="nan_rows", match="NaN: torch 3, runtime 0"),
            Claim("mismatch", exporter="torchscript", probe="nan_rows", opset=13, runtime="onnxruntime==1.15.1"),
        ),
    )
)
register(
    Case(
        name="nan_max_dim_fixed",
        model=_net("MaxDimFixed"),
        inputs=lambda: {"x": randn(4, 6)},
        probes=_rows_probes,
        dynamic=BATCH,
        fixes="nan_max_dim",
    )
)

# torch.topk → TopK -------------------------------------------------------------------


def _topk_probes() -> dict[str, dict[str, Any]]:
    return {"nan_rows": {"x": _with_nan(4, 6, seed=2, cells=((0, 1), (1, 4), (3, 0)))}}


register(
    Case(
        name="nan_topk",
        model=_net("TopK"),
        inputs=lambda: {"x": randn(4, 6)},
        probes=_topk_probes,
        dynamic=BATCH,
        card=Card(
            symptom="torch.topk(x, 3) (and torch.sort, also exported as TopK) on rows holding a NaN: torch ranks "
            "the NaN first; onnxruntime up to 1.31 returns a different top-3 — the NaN dropped or out of place, "
            "values out of order, other indices. onnxruntime 1.32.0 is the first to agree with torch.",
            cause="TopK's spec does not say where NaN ranks. torch sorts NaN above +inf; onnxruntime's CPU TopK "
            "compared with ordered '>'/'<', for which NaN is neither larger nor smaller, so the selection around a "
            "NaN is arbitrary — until a later release ranked NaN as largest too.",
            fix="Rank NaN explicitly: indices = topk(where(isnan(x), inf, x), k).indices; values = x.gather(-1, "
            "indices). Or require a runtime that ranks NaN first (see this row by runtime).",
            source=f"{ONNX_NAN_SPEC}; pytorch/pytorch#16762 (torch's NaN ranking in topk/sort)",
        ),
        claims=(
            Claim("mismatch", exporter="torchscript", probe="nan_rows", runtime="onnxruntime==1.24.4"),
            Claim("mismatch", exporter="dynamo", probe="nan_rows", runtime="onnxruntime==1.24.4"),
            Claim("mismatch", exporter="torchscript", probe="nan_rows", opset=13, runtime="onnxruntime==1.15.1"),
        ),
    )
)
register(
    Case(
        name="nan_topk_fixed",
        model=_net("TopKFixed"),
        inputs=lambda: {"x": randn(4, 6)},
        probes=_topk_probes,
        dynamic=BATCH,
        fixes="nan_topk",
    )
)

# torch.maximum → Max -------------------------------------------------------------------

MAXIMUM_DYNAMIC = {"x": {0: "batch"}, "y": {0: "batch"}}


def _maximum_inputs() -> dict[str, Any]:
    return {"x": randn(4, 6, seed=3), "y": randn(4, 6, seed=4)}


def _maximum_probes() -> dict[str, dict[str, Any]]:
    nans = ((0, 2), (1, 0), (3, 5))
    return {
        "nan_in_y": {"x": randn(4, 6, seed=3), "y": _with_nan(4, 6, seed=4, cells=nans)},
        "nan_in_x": {"x": _with_nan(4, 6, seed=3, cells=nans), "y": randn(4, 6, seed=4)},
    }


register(
    Case(
        name="nan_maximum",
        model=_net("Maximum"),
        inputs=_maximum_inputs,
        probes=_maximum_probes,
        dynamic=MAXIMUM_DYNAMIC,
        card=Card(
            symptom="torch.maximum(x, y) (or clamp(x, min=y) with a tensor bound) where y holds a NaN: torch gives "
            "NaN, onnxruntime up to 1.18 gives x — the NaN in the second operand is dropped (a NaN in x still "
            "propagates, probe nan_in_x). onnxruntime 1.19.2 and later agree with torch.",
            cause="Max/Min's spec says nothing about NaN; onnxruntime's CPU Max/Min returned the other operand for a "
            "NaN in some operand positions until it was made to propagate NaN (microsoft/onnxruntime#21455, fixed "
            "by #21492).",
            fix="Propagate NaN explicitly: where(isnan(x) | isnan(y), x + y, maximum(x, y)); or require onnxruntime >= 1.20.",
            source="microsoft/onnxruntime#21455; pytorch/pytorch#72307 ('Max-* in ONNX ignores NaN whereas "
            "torch.maximum doesn't')",
        ),
        claims=(
            Claim("mismatch", exporter="torchscript", probe="nan_in_y", runtime="onnxruntime==1.18.1"),
            Claim("mismatch", exporter="dynamo", probe="nan_in_y", runtime="onnxruntime==1.18.1"),
            Claim("mismatch", exporter="torchscript", probe="nan_in_y", runtime="onnxruntime==1.17.3"),
        ),
    )
)
register(
    Case(
        name="nan_maximum_fixed",
        model=_net("MaximumFixed"),
        inputs=_maximum_inputs,
        probes=_maximum_probes,
        dynamic=MAXIMUM_DYNAMIC,
        fixes="nan_maximum",
    )
)

# F.max_pool2d → MaxPool ----------------------------------------------------------------


def _pool_probes() -> dict[str, dict[str, Any]]:
    # NaNs at the first, second and last position of three different 2x2 windows.
    return {"nan_windows": {"x": _with_nan(1, 2, 4, 6, seed=5, cells=((0, 0, 0, 0), (0, 0, 2, 3), (0, 1, 3, 5)))}}


register(
    Case(
        name="nan_max_pool",
        model=_net("MaxPool"),
        inputs=lambda: {"x": randn(1, 2, 4, 6)},
        probes=_pool_probes,
        dynamic=BATCH,
        card=Card(
            symptom="F.max_pool2d over a window holding a NaN: torch returns NaN for that window, the exported "
            "model returns the largest number of the window — all three NaN windows of the probe lose their NaN, "
            "on every runtime measured.",
            cause="torch's max pooling propagates NaN (pytorch/pytorch#7645 made it so); ONNX MaxPool leaves NaN "
            "unspecified and onnxruntime's kernel keeps a running max with an ordered '>', for which a NaN never "
            "wins.",
            fix="Pool a NaN mask alongside and put the NaN back: where(max_pool2d(isnan(x).float(), k) > 0, nan, "
            "max_pool2d(x, k)); or clean NaNs before pooling.",
            source="pytorch/pytorch#7645 (torch's NaN rule for max pooling); onnx/onnx#4716",
        ),
        claims=(
            Claim("mismatch", exporter="torchscript", probe="nan_windows", match="NaN: torch 3, runtime 0"),
            Claim("mismatch", exporter="dynamo", probe="nan_windows", match="NaN: torch 3, runtime 0"),
        ),
    )
)
register(
    Case(
        name="nan_max_pool_fixed",
        model=_net("MaxPoolFixed"),
        inputs=lambda: {"x": randn(1, 2, 4, 6)},
        probes=_pool_probes,
        dynamic=BATCH,
        fixes="nan_max_pool",
    )
)
