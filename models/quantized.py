"""Gotchas of the step after export: files that are right in fp32 and part ways once quantized or converted to
float16, across onnxruntime versions and CPUs (profile ``quantized``, :mod:`harness.config.transforms`).

Each case is an ordinary case (its fp32 export is checked like any other); what it is for is its transformed files.
The modules live in :mod:`models._quantized_nets`, imported only when a case builds its model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.cases import Card, Case, lazy, randn, register

if TYPE_CHECKING:
    import torch

QUANTIZATION_DOCS = "https://onnxruntime.ai/docs/performance/model-optimizations/quantization.html"
FLOAT16_DOCS = "https://onnxruntime.ai/docs/performance/model-optimizations/float16.html"


def _net(cls: str, seed: int = 0) -> Callable[[], torch.nn.Module]:
    """A factory for ``models._quantized_nets.<cls>`` with seeded weights."""
    return lazy("models._quantized_nets", cls, seed=seed)


def _positive(*shape: int, seed: int) -> torch.Tensor:
    """Activations near the top of their range: 0.9 to 1.0 (quantized to uint8, 230 to 255)."""
    return randn(*shape, seed=seed, scale=0.02, shift=0.95)


# int8: u8 x s8 products that saturate a 16-bit sum ---------------------------------------------------------------
# No fixed twin: the fix is a setting of the quantizer (reduce_range) or the CPU, not a rewrite of the model (a model
# whose weights could not pair up large same-sign products would be another model, not this one fixed).

register(
    Case(
        name="int8_u8s8_saturation",
        model=_net("SaturatingLinear"),
        inputs=lambda: {"x": _positive(4, 64, seed=0)},
        probes=lambda: {"other": {"x": _positive(4, 64, seed=1)}},
        dynamic={"x": {0: "batch"}},
        card=Card(
            symptom="Quantized to int8 with uint8 activations (quantize_dynamic, or quantize_static with QUInt8), a "
            "Linear whose activations sit near the top of their range and whose weights are all large and of one sign "
            "can compute a different answer from the file on CPUs whose int8 kernel multiplies uint8 by int8 into "
            "16-bit sums (x86 without VNNI): two products of 255 × 127 are 64,770, past 32,767.",
            cause="x86 CPUs before AVX-512 VNNI / AVX-VNNI multiply u8 × s8 pairs with vpmaddubsw, which saturates each "
            "pair's sum to int16; onnxruntime's documentation warns of it for the U8S8 format and offers reduce_range "
            "(7-bit weights) for such CPUs. VNNI (vpdpbusd) sums into int32 and does not saturate.",
            fix="Quantize with reduce_range=True for CPUs without VNNI, or with int8 activations (QDQ S8S8), or "
            "check the quantized file on the CPU it ships to (the quantized table's x86-64-v3 and -v2 columns).",
            source=f"{QUANTIZATION_DOCS} (reduce_range, U8S8 on x86-64 without VNNI); microsoft/onnxruntime#6004",
        ),
    )
)
# float16: logits past 65,504 ---------------------------------------------------------------------------------------

register(
    Case(
        name="fp16_attention_overflow",
        model=_net("LargeLogits"),
        inputs=lambda: {"x": randn(2, 6, 64, scale=5.0)},
        probes=lambda: {"loud": {"x": randn(2, 6, 64, seed=1, scale=40.0)}},
        dynamic={"x": {0: "batch"}},
        card=Card(
            symptom="Converted to float16 with keep_io_types (inputs and outputs stay float32), unscaled attention "
            "scores of loud inputs pass float16's largest value, 65,504: the file's own answer is NaN after the "
            "softmax. A CPU runtime that computes the float16 MatMul in float32 returns fp32's finite answer instead "
            "(a mismatch with the file that looks like success), and one that computes float16 as float16 returns "
            "the NaN: validation on one CPU passes a model that breaks on another, or on a GPU.",
            cause="float16 has 5 exponent bits: x @ xᵀ over 64 features of magnitude ~40 is ~10⁵. The converter turns "
            "every float tensor and op to float16 unless told otherwise; where a CPU provider has no float16 kernel it "
            "inserts Casts to float32 and the optimizer drops the float16 round trip between them.",
            fix="Scale before the product (q/√d · k/√d, or scaled_dot_product_attention), or keep the overflowing ops "
            "in float32 (convert_float_to_float16(op_block_list=[...]), or auto_convert_mixed_precision with a "
            "validation input).",
            source=f"{FLOAT16_DOCS} (mixed precision: ops kept in float32); microsoft/onnxconverter-common#55",
        ),
    )
)
register(
    Case(
        name="fp16_attention_overflow_scaled",
        model=_net("ScaledLogits"),
        inputs=lambda: {"x": randn(2, 6, 64, scale=5.0)},
        probes=lambda: {"loud": {"x": randn(2, 6, 64, seed=1, scale=40.0)}},
        dynamic={"x": {0: "batch"}},
        fixes="fp16_attention_overflow",
    )
)

# 4-bit weights: K not a multiple of the block --------------------------------------------------------------------

register(
    Case(
        name="int4_partial_block",
        model=_net("OddBlockLinear"),
        inputs=lambda: {"x": randn(2, 5, 40)},
        probes=lambda: {"long": {"x": randn(2, 9, 40, seed=1)}},
        dynamic={"x": {0: "batch", 1: "seq"}},
        card=Card(
            symptom="A MatMul whose K (40) is no multiple of the 4-bit block (32): the quantizer pads the last block, "
            "and a runtime's MatMulNBits kernel must ignore the padding; a kernel that does not reads weights that "
            "are not there.",
            cause="MatMulNBits packs K into ceil(K / block_size) blocks; the padding's rows are zero-filled codes that "
            "dequantize to -zero_point × scale unless a kernel stops at K.",
            fix="Choose a block_size that divides K where the runtime is old, or check the quantized file on every "
            "runtime it ships to.",
            source="microsoft/onnxruntime ContribOperators.md (com.microsoft.MatMulNBits: K, block_size, packing)",
        ),
    )
)
register(
    Case(
        name="int4_partial_block_even",
        model=_net("EvenBlockLinear"),
        inputs=lambda: {"x": randn(2, 5, 64)},
        probes=lambda: {"long": {"x": randn(2, 9, 64, seed=1)}},
        dynamic={"x": {0: "batch", 1: "seq"}},
        fixes="int4_partial_block",
    )
)
