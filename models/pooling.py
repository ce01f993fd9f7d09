"""Pooling edge cases: ceil_mode windows, divisor_override, uneven adaptive bins.

torch and ONNX describe pooling with the same words (kernel, stride, pads,
ceil_mode, count_include_pad) but not always the same arithmetic at the
right/bottom edge; and some torch arguments have no ONNX attribute at all.
Most of these only show at some input sizes, so the image cases are exported
with dynamic height and width and probed at sizes that reach the edge.

Measured, not reproduced (no case): bicubic F.interpolate (the exporters set
cubic_coeff_a=-0.75 like torch), mode="nearest" with a fractional scale_factor,
recompute_scale_factor=True, avg_pool2d with padding (either count_include_pad)
and ceil_mode with count_include_pad=False all match torch on every runtime
measured. F.interpolate(antialias=True) and mode="nearest-exact" fail to export
with the torchscript exporter ("aten::_upsample_bilinear2d_aa" /
"aten::_upsample_nearest_exact2d" unsupported) and export and match with dynamo.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.cases import Card, Case, Claim, lazy, randn, register

if TYPE_CHECKING:
    import torch

IMAGE = {"x": {0: "batch", 2: "height", 3: "width"}}
BATCH = {"x": {0: "batch"}}


def _net(cls: str, seed: int = 0) -> Callable[[], torch.nn.Module]:
    """A factory for ``models._pooling_nets.<cls>`` with seeded weights."""
    return lazy("models._pooling_nets", cls, seed=seed)


def _images(**shapes: tuple[int, ...]) -> Callable[[], dict[str, dict[str, Any]]]:
    """Probes named like ``odd_5x7`` → input ``x`` of that shape, seeded by position."""

    def probes() -> dict[str, dict[str, Any]]:
        return {name: {"x": randn(*shape, seed=i + 1)} for i, (name, shape) in enumerate(shapes.items())}

    return probes


# MaxPool ceil_mode: the last window starting in the padding ----------------------------

MAX_CEIL_PROBES = _images(odd_5x7=(1, 3, 5, 7), batch2_9x9=(2, 3, 9, 9))

register(
    Case(
        name="max_pool_ceil_mode",
        model=_net("MaxPoolCeil"),
        inputs=lambda: {"x": randn(1, 3, 8, 8)},
        probes=MAX_CEIL_PROBES,
        dynamic=IMAGE,
        card=Card(
            symptom="MaxPool2d(2, stride=2, padding=1, ceil_mode=True) on an odd-sized input (5x7): torch returns "
            "3x4, onnxruntime up to 1.20 returns 4x5 — one extra row and column (a shape mismatch downstream, or "
            "silently wrong features). Even sizes agree; onnxruntime 1.21.1 and later agree (full profile).",
            cause="With ceil_mode, torch drops a last window that would start inside the right/bottom padding; "
            "ONNX's shape formula did not say so until onnx/onnx#5741, and onnxruntime's pooling kept that "
            "window (microsoft/onnxruntime#15446) until a later release.",
            fix="Here ceil_mode=True changes nothing in torch (every extra window starts in the padding): export "
            "with ceil_mode=False. In general pad explicitly (F.pad with -inf) and pool with ceil_mode=False, or "
            "require a runtime that applies torch's rule.",
            source="microsoft/onnxruntime#15446; onnx/onnx#5711; pytorch/pytorch#106270",
        ),
        claims=(
            Claim("mismatch", exporter="torchscript", probe="odd_5x7", runtime="onnxruntime==1.20.1", match="shape"),
            Claim("mismatch", exporter="dynamo", probe="odd_5x7", runtime="onnxruntime==1.20.1", match="shape"),
            Claim("mismatch", exporter="torchscript", probe="batch2_9x9", opset=13, runtime="onnxruntime==1.15.1"),
        ),
    )
)
register(
    Case(
        name="max_pool_ceil_mode_fixed",
        model=_net("MaxPoolFloor"),
        inputs=lambda: {"x": randn(1, 3, 8, 8)},
        probes=MAX_CEIL_PROBES,
        dynamic=IMAGE,
        fixes="max_pool_ceil_mode",
    )
)

# AvgPool ceil_mode: the divisor of the partial last window ----------------------------

AVG_CEIL_PROBES = _images(even_10x10=(1, 3, 10, 10), batch2_8x12=(2, 3, 8, 12))

register(
    Case(
        name="avg_pool_ceil_mode",
        model=_net("AvgPoolCeil"),
        inputs=lambda: {"x": randn(1, 3, 9, 9)},
        probes=AVG_CEIL_PROBES,
        dynamic=IMAGE,
        card=Card(
            symptom="AvgPool2d(3, stride=2, ceil_mode=True) (no padding): on sizes where the last window hangs "
            "over the edge (10x10), the last row and column differ — onnxruntime divides their sums by the full "
            "kernel size 9 instead of the elements actually in the window. Sizes where windows fit (9x9) agree. "
            "Measured: wrong up to 1.28.0 at opsets 13-18, up to 1.20.1 at opset 20; 1.29.0 and later agree.",
            cause="torch's divisor for a ceil_mode window is clipped to the input (plus padding); "
            "count_include_pad=True (torch's default, exported as count_include_pad=1) made onnxruntime count the "
            "overhang as padding (microsoft/onnxruntime#16203, fixed for AveragePool-19 by #16752, for older "
            "opsets later).",
            fix="Without padding count_include_pad does not change torch's result: pass count_include_pad=False "
            "and the runtime divides by the real element count. With padding, pad explicitly (F.pad) and use "
            "count_include_pad=False.",
            source="microsoft/onnxruntime#16203; pytorch/pytorch#183528",
        ),
        claims=(
            Claim("mismatch", exporter="torchscript", probe="even_10x10", runtime="onnxruntime==1.24.4"),
            Claim("mismatch", exporter="dynamo", probe="even_10x10", runtime="onnxruntime==1.24.4"),
            Claim("mismatch", exporter="torchscript", probe="even_10x10", opset=20, runtime="onnxruntime==1.20.1"),
        ),
    )
)
register(
    Case(
        name="avg_pool_ceil_mode_fixed",
        model=_net("AvgPoolCeilNoPadCount"),
        inputs=lambda: {"x": randn(1, 3, 9, 9)},
        probes=AVG_CEIL_PROBES,
        dynamic=IMAGE,
        fixes="avg_pool_ceil_mode",
    )
)

# divisor_override: an argument ONNX AveragePool does not have --------------------------

SUM_POOL_PROBES = _images(odd_7x9=(1, 3, 7, 9))

register(
    Case(
        name="avg_pool_divisor_override",
        model=_net("SumPoolDivisor"),
        inputs=lambda: {"x": randn(1, 3, 8, 8)},
        probes=SUM_POOL_PROBES,
        dynamic=IMAGE,
        card=Card(
            symptom="Sum pooling written as F.avg_pool2d(x, 2, divisor_override=1) exports without an error or "
            "warning, and the model returns the average: every output is 4x too small.",
            cause="ONNX AveragePool has no divisor attribute. The issue reports the torchscript exporter refusing "
            "divisor_override; both exporters now drop it silently and emit a plain AveragePool.",
            fix="Scale explicitly: F.avg_pool2d(x, k) * (k * k / divisor) — here * 4 — (exact without padding or "
            "with count_include_pad=True), or a depthwise Conv with a ones kernel.",
            source="pytorch/pytorch#105349",
        ),
        claims=(
            Claim("mismatch", exporter="torchscript", probe="example"),
            Claim("mismatch", exporter="dynamo", probe="example"),
            Claim("mismatch", exporter="torchscript", probe="odd_7x9", opset=13),
        ),
    )
)
register(
    Case(
        name="avg_pool_divisor_override_fixed",
        model=_net("SumPoolScaled"),
        inputs=lambda: {"x": randn(1, 3, 8, 8)},
        probes=SUM_POOL_PROBES,
        dynamic=IMAGE,
        fixes="avg_pool_divisor_override",
    )
)

# AdaptiveAvgPool2d with an output size that does not divide the input -------------------

register(
    Case(
        name="adaptive_avg_pool_uneven",
        model=_net("AdaptiveUneven"),
        inputs=lambda: {"x": randn(1, 3, 7, 9)},
        probes=lambda: {"batch2": {"x": randn(2, 3, 7, 9, seed=1)}},
        dynamic=BATCH,
        card=Card(
            symptom="The torchscript exporter refuses AdaptiveAvgPool2d((3, 4)) on a 7x9 map (and "
            "F.interpolate(mode='area'), which is the same op): 'Unsupported: ONNX export of operator "
            "adaptive_avg_pool2d, output size that are not factor of input size'. The dynamo exporter "
            "decomposes it for the frozen spatial size.",
            cause="ONNX has no adaptive pooling. An output size dividing the input is a plain AveragePool; uneven "
            "bins (start = floor(i*H/out), end = ceil((i+1)*H/out)) differ in size and overlap, which no single "
            "AveragePool expresses.",
            fix="For a fixed input size, slice the bins and average them explicitly (or use dynamo=True); or "
            "choose output sizes that divide the feature map.",
            source="pytorch/pytorch#42653; pytorch/pytorch#64806",
        ),
        claims=(Claim("export-fail", exporter="torchscript", match="output size that are not factor of input size"),),
    )
)
register(
    Case(
        name="adaptive_avg_pool_uneven_fixed",
        model=_net("AdaptiveUnevenSliced"),
        inputs=lambda: {"x": randn(1, 3, 7, 9)},
        probes=lambda: {"batch2": {"x": randn(2, 3, 7, 9, seed=1)}},
        dynamic=BATCH,
        fixes="adaptive_avg_pool_uneven",
    )
)
