"""The step after export: what users do to an exported fp32 file before they ship it, as data.

A profile's ``transforms = ["int8-dynamic", "int8-qdq-u8", ...]`` transforms each fp32 artifact of its cases with
each named transform (:mod:`harness.transform.stage`, in an environment of its own that holds the tools pinned in
``[transforms]`` of matrix.toml); every transformed artifact is an artifact like any other, in a build folder of its
own per transform (:meth:`harness.config.matrix.Profile.transform_out`), run on every runtime and platform of the
profile and published as a table of its own (``results/quantized/<transform>/``).

Each transform says how a runtime's output on the transformed file is judged against the ONNX specification's answer
on *the same file* (the reference evaluator, :mod:`harness.transform.reference`): its tolerance, and how far from
torch's fp32 output the transformed model may drift before the drift is flagged (published as a number, never a
pass). Integer outputs are always compared exactly (:func:`harness.numeric.compare.compare`).

Standard library only: matrix.toml's reader imports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

INT8_STEP = 1 / 127
"""One int8 quantization step as a fraction of a tensor's largest magnitude (symmetric int8: max|x| / 127; uint8 over
[min, max] with zero included: (max - min) / 255 <= max|x| / 127.5)."""
FP16_EPS = 2.0**-10
"""float16's resolution relative to a value (its machine epsilon): the spacing of its numbers around 1."""


@dataclasses.dataclass(frozen=True)
class Transform:
    name: str
    tool: str
    """The function users call, as they call it (``onnxruntime.quantization.quantize_dynamic``)."""
    package: str
    """The pinned package that holds :attr:`tool` (``onnxruntime``, ``onnxconverter-common``)."""
    settings: Mapping[str, Any]
    """The arguments it is called with, besides the model (recorded on every artifact)."""
    ops: tuple[str, ...]
    """The op types it rewrites: a model holding none of them is not transformed (its cells are ``skipped``)."""
    scaled: float
    """Tolerance against the specification's answer on the same file: ``max|out - spec| <= scaled * max|spec|``
    per floating output (element-wise ``atol``/``rtol`` of the case also pass)."""
    rule: str
    """:attr:`scaled` in words: what a difference of that size is."""
    drift: float
    """``max|out - torch fp32| / max|torch fp32|`` past which the drift is flagged: far past what the transform
    should cost, what a user meets as "quantization broke my model"."""
    says: str
    """One line: what the transform is."""

    def record(self, version: str) -> dict[str, Any]:
        """What an artifact it made records: the transform, the tool and its version, the settings."""
        settings = dict(self.settings)
        return {"name": self.name, "tool": self.tool, "package": self.package, "version": version, "settings": settings}


_INT8_RULE = "4 int8 steps of the output's scale (4/127 of its largest magnitude): requantization rounds differently"
_INT8_OPS = ("MatMul", "Gemm", "Conv", "ConvTranspose", "LSTM", "GRU", "Attention", "Gather", "EmbedLayerNormalization")

CATALOG: dict[str, Transform] = {
    t.name: t
    for t in (
        Transform(
            "int8-dynamic",
            "onnxruntime.quantization.quantize_dynamic",
            "onnxruntime",
            {"weight_type": "QInt8", "per_channel": False, "reduce_range": False},
            _INT8_OPS,
            4 * INT8_STEP,
            _INT8_RULE,
            0.2,
            "weights int8, activations quantized at run time (DynamicQuantizeLinear, MatMulInteger, ConvInteger)",
        ),
        Transform(
            "int8-qdq-u8",
            "onnxruntime.quantization.quantize_static",
            "onnxruntime",
            {
                "quant_format": "QDQ",
                "activation_type": "QUInt8",
                "weight_type": "QInt8",
                "per_channel": True,
                "reduce_range": False,
                "calibrate_method": "MinMax",
                "calibration": "the case's example and probes",
            },
            _INT8_OPS,
            4 * INT8_STEP,
            _INT8_RULE,
            0.2,
            "static QDQ, activations uint8 and weights int8 per channel (U8S8), calibrated on the case's own inputs",
        ),
        Transform(
            "int8-qdq-s8",
            "onnxruntime.quantization.quantize_static",
            "onnxruntime",
            {
                "quant_format": "QDQ",
                "activation_type": "QInt8",
                "weight_type": "QInt8",
                "per_channel": True,
                "reduce_range": False,
                "calibrate_method": "MinMax",
                "calibration": "the case's example and probes",
            },
            _INT8_OPS,
            4 * INT8_STEP,
            _INT8_RULE,
            0.2,
            "static QDQ, activations and weights int8 per channel (S8S8), calibrated on the case's own inputs",
        ),
        Transform(
            "int4-sym",
            "onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer",
            "onnxruntime",
            {"bits": 4, "block_size": 32, "is_symmetric": True, "accuracy_level": None, "algo": "RTN (default)"},
            ("MatMul",),
            1e-3,
            "1e-3 of the output's scale: the 4-bit weights dequantize exactly; fp32 sums in another order",
            0.2,
            "MatMul weights 4-bit, blocks of 32 along K, symmetric (MatMulNBits), computed in fp32",
        ),
        Transform(
            "int4-asym",
            "onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer",
            "onnxruntime",
            {"bits": 4, "block_size": 32, "is_symmetric": False, "accuracy_level": None, "algo": "RTN (default)"},
            ("MatMul",),
            1e-3,
            "1e-3 of the output's scale: the 4-bit weights dequantize exactly; fp32 sums in another order",
            0.2,
            "MatMul weights 4-bit, blocks of 32 along K, with zero points (MatMulNBits), computed in fp32",
        ),
        Transform(
            "int4-sym-a4",
            "onnxruntime.quantization.matmul_nbits_quantizer.MatMulNBitsQuantizer",
            "onnxruntime",
            {"bits": 4, "block_size": 32, "is_symmetric": True, "accuracy_level": 4, "algo": "RTN (default)"},
            ("MatMul",),
            4 * INT8_STEP,
            "4 int8 steps of the output's scale: accuracy_level 4 lets the runtime quantize the activations to int8 "
            "per block (the specification's MatMulNBits computes in fp32)",
            0.2,
            "as int4-sym, with accuracy_level 4 (the runtime may compute in int8: the speed setting users pick on CPU)",
        ),
        Transform(
            "fp16",
            "onnxconverter_common.float16.convert_float_to_float16",
            "onnxconverter-common",
            {"keep_io_types": True},
            (),
            8 * FP16_EPS,
            "8 float16 steps of the output's scale (8 * 2^-10 of its largest magnitude): the runtime may keep fp32 "
            "between ops where the specification rounds each op to fp16",
            0.05,
            "every float tensor float16, inputs and outputs kept float32 (Casts at the edges)",
        ),
    )
}


def names() -> tuple[str, ...]:
    return tuple(CATALOG)


def get(name: str) -> Transform:
    return CATALOG[name]
