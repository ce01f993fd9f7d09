"""Gotcha cases of narrow and reduced-precision dtypes, each with its fixed twin.

A model that keeps uint8, int8, bfloat16 or float16 tensors exports them as
they are; whether onnxruntime's CPU provider has a kernel for that type, and
whether it computes in that type at all, varies by operator and by release.
The modules live in :mod:`models._dtypes_nets`, imported only when a case
builds its model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.cases import Card, Case, Claim, lazy, randint, randn, register

if TYPE_CHECKING:
    import torch

OPERATOR_KERNELS = "https://github.com/microsoft/onnxruntime/blob/main/docs/OperatorKernels.md"


def _net(cls: str, seed: int = 0) -> Callable[[], torch.nn.Module]:
    """A factory for ``models._dtypes_nets.<cls>`` with seeded weights."""
    return lazy("models._dtypes_nets", cls, seed=seed)


def _uint8(low: int, high: int, *shape: int, seed: int) -> torch.Tensor:
    """A seeded uint8 tensor in ``[low, high)``."""
    return randint(low, high, *shape, seed=seed, dtype="uint8")


def _int8(low: int, high: int, *shape: int, seed: int) -> torch.Tensor:
    """A seeded int8 tensor in ``[low, high)``."""
    return randint(low, high, *shape, seed=seed, dtype="int8")


# uint8 arithmetic on older runtimes ---------------------------------------------

UINT8_INPUTS = {
    "example": lambda: {"img": _uint8(0, 100, 1, 3, 8, 8, seed=0), "offset": _uint8(0, 100, 1, 3, 1, 1, seed=1)},
    "bright": lambda: {"img": _uint8(150, 256, 1, 3, 8, 8, seed=2), "offset": _uint8(100, 150, 1, 3, 1, 1, seed=3)},
}

register(
    Case(
        name="uint8_add",
        model=_net("Uint8Offset"),
        inputs=UINT8_INPUTS["example"],
        probes=lambda: {"bright": UINT8_INPUTS["bright"]()},
        card=Card(
            symptom="A preprocessing step that adds an offset to a uint8 image exports cleanly; onnxruntime up to "
            "1.20 refuses to load it ('NOT_IMPLEMENTED : Could not find an implementation for Add(14)'). Newer "
            "runtimes load it and wrap modulo 256 exactly as torch does (250 + 10 = 4), which is rarely what an "
            "image pipeline wants either.",
            cause="ONNX Add/Sub/Mul/Div accept (u)int8 and (u)int16 since opset 14, but onnxruntime's CPU provider "
            "registered only 32/64-bit integer kernels until the element-wise kernels were extended (after 1.20). "
            "At opset 13 the torchscript exporter widens to int64 around the Add, so that export loads everywhere.",
            fix="Widen first: (img.to(torch.int32) + offset).clamp(0, 255).to(torch.uint8), or convert to float "
            "at the model boundary; both load on every runtime and saturate instead of wrapping.",
            source="microsoft/onnxruntime#19231; microsoft/onnxruntime#23090",
        ),
        claims=(
            Claim("load-fail", "torchscript", runtime="onnxruntime==1.20.1", match="Could not find an implementation"),
            Claim("load-fail", "dynamo", runtime="onnxruntime==1.20.1", match="Could not find an implementation"),
        ),
    )
)
register(
    Case(
        name="uint8_add_fixed",
        model=_net("Uint8OffsetInt32"),
        inputs=UINT8_INPUTS["example"],
        probes=lambda: {"bright": UINT8_INPUTS["bright"]()},
        fixes="uint8_add",
    )
)

# int8 MatMul ------------------------------------------------------------------

register(
    Case(
        name="int8_matmul",
        model=_net("Int8MatMul"),
        inputs=lambda: {"x": _int8(-8, 8, 2, 16, seed=0)},
        probes=lambda: {"large": {"x": _int8(-128, 127, 2, 16, seed=1)}},
        card=Card(
            symptom="An int8 x int8 matmul (hand-rolled quantized layer) exports, and every onnxruntime refuses the "
            "model: \"Type Error: Type 'tensor(int8)' of input parameter ... of operator (MatMul) ... is invalid\".",
            cause="ONNX MatMul is defined for float types and 32/64-bit integers only; 8-bit integer products are "
            "MatMulInteger (int32 output) or QLinearMatMul. Both exporters emit MatMul on int8 (torchscript widens "
            "to int64 only at opset 13). torch's int8 matmul also accumulates and wraps in int8.",
            fix="Widen to int32 before the product (x.to(torch.int32) @ w.to(torch.int32)), or use torch's "
            "quantization flow, which exports QLinearMatMul / MatMulInteger.",
            source="onnx/tensorflow-onnx#2071; https://onnx.ai/onnx/operators/onnx__MatMul.html",
        ),
        claims=(
            Claim("load-fail", "torchscript", match="MatMul"),
            Claim("load-fail", "dynamo", match="MatMul"),
        ),
    )
)
register(
    Case(
        name="int8_matmul_fixed",
        model=_net("Int8MatMulInt32"),
        inputs=lambda: {"x": _int8(-8, 8, 2, 16, seed=0)},
        probes=lambda: {"large": {"x": _int8(-128, 127, 2, 16, seed=1)}},
        fixes="int8_matmul",
    )
)

# bfloat16 on the CPU provider ---------------------------------------------------

register(
    Case(
        name="bfloat16_linear",
        model=_net("Bf16Linear"),
        inputs=lambda: {"x": randn(2, 16)},
        dynamic={"x": {0: "batch"}},
        card=Card(
            symptom="A model kept in bfloat16 (as trained) exports cleanly, then the CPU runtime refuses it: "
            "'NOT_IMPLEMENTED : Could not find an implementation for Gemm(13)' (MatMul, Mul, Div, ReduceMean ... "
            "in bigger models).",
            cause="onnxruntime's CPU provider has bfloat16 kernels for Cast and a few data-movement ops, not for "
            "Gemm/MatMul or most arithmetic; bfloat16 models target the CUDA provider. The exporters keep the "
            "weights' dtype.",
            fix="Export a float32 copy for CPU (model.float() before export), or float16 where the runtime's "
            "kernels allow it; keep bfloat16 exports for GPU providers.",
            source="microsoft/onnxruntime#26311; " + OPERATOR_KERNELS,
        ),
        claims=(
            Claim("load-fail", "torchscript", match="Could not find an implementation"),
            Claim("load-fail", "dynamo", match="Could not find an implementation"),
        ),
    )
)
register(
    Case(
        name="bfloat16_linear_fixed",
        model=_net("Fp32Linear"),
        inputs=lambda: {"x": randn(2, 16)},
        dynamic={"x": {0: "batch"}},
        fixes="bfloat16_linear",
    )
)

# float16 reductions on the CPU provider -------------------------------------------

register(
    Case(
        name="fp16_sum_overflow",
        model=_net("Fp16Energy"),
        inputs=lambda: {"x": randn(2, 512)},
        probes=lambda: {"loud": {"x": randn(2, 512, seed=1, scale=20.0)}},
        card=Card(
            symptom="A float16 energy (sum of squares) agrees for small inputs; when the sum passes 65504 torch "
            "returns inf, but the torchscript export on the CPU runtime returns a finite number — CPU validation "
            "passes a model that overflows on a real fp16 device.",
            cause="The torchscript exporter emits ReduceSum in float16. onnxruntime's CPU provider has no float16 "
            "ReduceSum, so it inserts Casts and runs it in float32, and the float32→float16→float32 round trip "
            "that would overflow is optimised away. torch sums into a float16 result. The dynamo exporter "
            "decomposes sum to float32 then casts to float16, which overflows like torch.",
            fix="Accumulate in float32 on purpose: (h * h).sum(-1, dtype=torch.float32) (or h.float() before the "
            "reduction); validate fp16 models on the target provider, not only on CPU.",
            source="microsoft/onnxruntime#11831; microsoft/onnxruntime#8787",
        ),
        claims=(Claim("mismatch", "torchscript", probe="loud"),),
    )
)
register(
    Case(
        name="fp16_sum_overflow_fixed",
        model=_net("Fp16EnergyFp32Acc"),
        inputs=lambda: {"x": randn(2, 512)},
        probes=lambda: {"loud": {"x": randn(2, 512, seed=1, scale=20.0)}},
        fixes="fp16_sum_overflow",
    )
)
