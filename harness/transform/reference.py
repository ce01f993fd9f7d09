"""The specification's answer on a transformed file: the ONNX reference evaluator, and for the contrib ops a
transform writes that it lacks, a reference of each op's documented semantics.

``MatMulNBits`` (``com.microsoft``, written by ``MatMulNBitsQuantizer``) is not an ONNX op: onnxruntime's
ContribOperators.md documents it. ``B`` holds, per output column ``n`` and block ``kb`` of ``block_size`` along ``K``,
the ``bits``-wide integers packed low bits first into bytes; ``scales`` one value per (n, kb); ``zero_points``, where
given, packed the same way (or, in the input type, one value per (n, kb)), else ``2^(bits-1)``. The weight is
``(q - zero_point) * scale`` cut to ``K`` rows, and ``Y = A @ W^T + bias``. It is computed here in float64 and cast to
``A``'s type: the answer an exact implementation gives (``accuracy_level`` lets a runtime compute in lower precision;
the transform's tolerance says how much lower, :mod:`harness.config.transforms`). Tested against onnxruntime on
hand-checked weights (tests/test_transforms.py).

Runs in the transform environment (onnx, numpy).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

CONTRIB = ("MatMulNBits",)
"""The contrib ops this module answers for."""
QDQ_SINCE = 19
"""The oldest QuantizeLinear/DequantizeLinear the evaluator implements (onnx 1.23: 19, 21, 23, 25). A file of opset 13
to 18 has the version-13 ops, whose semantics on the types they take (uint8, int8, int32; per tensor or per axis)
are version 19's on those types (19 added the float8 types and ``saturate``): the evaluator is given version 19's
implementation for them."""


def unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """``count`` unsigned ``bits``-wide integers from each row of ``packed`` (uint8, low bits first)."""
    per = 8 // bits
    mask = (1 << bits) - 1
    rows = packed.reshape(packed.shape[0], -1).astype(np.uint8)
    parts = [(rows >> (bits * i)) & mask for i in range(per)]
    values = np.stack(parts, axis=-1).reshape(rows.shape[0], -1)
    return values[:, :count].astype(np.int64)


def matmul_nbits(
    a: np.ndarray,
    b: np.ndarray,
    scales: np.ndarray,
    zero_points: np.ndarray | None = None,
    g_idx: np.ndarray | None = None,
    bias: np.ndarray | None = None,
    *,
    K: int,
    N: int,
    bits: int = 4,
    block_size: int,
) -> np.ndarray:
    """``MatMulNBits`` as ContribOperators.md documents it (``g_idx`` given: its block of each row of K)."""
    blocks = -(-K // block_size)
    q = unpack(b.reshape(N, -1), bits, blocks * block_size).reshape(N, blocks, block_size)
    scale = scales.reshape(N, blocks).astype(np.float64)
    if zero_points is None:
        zp = np.full((N, blocks), 1 << (bits - 1), dtype=np.float64)
    elif zero_points.dtype == np.uint8 and zero_points.dtype != a.dtype:
        zp = unpack(zero_points.reshape(N, -1), bits, blocks).astype(np.float64)
    else:
        zp = zero_points.reshape(N, blocks).astype(np.float64)
    if g_idx is not None and g_idx.size:
        rows = np.asarray(g_idx, dtype=np.int64).reshape(K)
        flat = q.reshape(N, -1)[:, :K].astype(np.float64)
        w = (flat - zp[:, rows]) * scale[:, rows]
    else:
        w = ((q - zp[:, :, None]) * scale[:, :, None]).reshape(N, -1)[:, :K]
    y = a.astype(np.float64) @ w.T
    if bias is not None and bias.size:
        y = y + bias.astype(np.float64)
    return y.astype(a.dtype)


def _ops() -> list[type]:
    from onnx.reference.op_run import OpRun

    class MatMulNBits(OpRun):
        op_domain = "com.microsoft"

        def _run(self, a, b, scales, zero_points=None, g_idx=None, bias=None, **attrs):  # type: ignore[no-untyped-def]
            got: dict[str, Any] = {k: attrs.get(k, getattr(self, k, None)) for k in ("K", "N", "bits", "block_size")}
            k, n, bits, block = int(got["K"]), int(got["N"]), int(got["bits"] or 4), int(got["block_size"])
            return (matmul_nbits(a, b, scales, zero_points, g_idx, bias, K=k, N=n, bits=bits, block_size=block),)

    return [MatMulNBits]


_INTEGER = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535), "int16": (-32768, 32767)}


def quantize(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, axis: int = 1) -> np.ndarray:
    """QuantizeLinear to an 8- or 16-bit integer as the specification defines it: ``saturate(round(x / scale) +
    zero_point)``, rounding half to even, per tensor or per ``axis``. Saturation is of the real value: ``+inf`` is the
    type's largest value, ``-inf`` its smallest (the reference evaluator of onnx 1.23 casts ``inf`` to int32 first,
    which numpy leaves undefined: 0 after the clip, where every runtime gives the saturated value). NaN, which the
    specification leaves undefined, is taken as 0 (the zero point)."""
    dtype = zero_point.dtype if zero_point is not None else np.dtype(np.uint8)
    low, high = _INTEGER[dtype.name]
    s = np.asarray(scale, dtype=np.float64)
    z = np.zeros_like(s) if zero_point is None else np.asarray(zero_point, dtype=np.float64)
    if s.ndim == 1 and s.size > 1:
        shape = [1] * x.ndim
        shape[axis % x.ndim] = s.size
        s, z = s.reshape(shape), z.reshape(shape)
    with np.errstate(all="ignore"):
        q = np.rint(x.astype(np.float64) / s) + z
    q = np.where(np.isnan(q), z, q)  # inf stays inf until the clip saturates it
    return np.clip(q, low, high).astype(dtype)


def _qdq(opset: int) -> list[type]:
    """QuantizeLinear to 8- and 16-bit integers by :func:`quantize`, every other output type by the evaluator's own;
    for a file older than opset :data:`QDQ_SINCE`, DequantizeLinear too by version 19's implementation."""
    from onnx.reference.ops import op_quantize_linear as ql
    from onnx.reference.ops.op_dequantize_linear import DequantizeLinear_19

    builtin = ql.QuantizeLinear_19
    for since, cls in ((21, "QuantizeLinear_21"), (23, "QuantizeLinear_23"), (25, "QuantizeLinear_25")):
        if opset >= since and hasattr(ql, cls):
            builtin = getattr(ql, cls)

    class QuantizeLinear(builtin):  # type: ignore[valid-type,misc]
        op_domain = ""

        def _run(self, x, y_scale, y_zero_point=None, axis=1, saturate=1, block_size=0, output_dtype=0, **kw):  # type: ignore[no-untyped-def]
            target = y_zero_point.dtype.name if y_zero_point is not None else "uint8"
            if not block_size and not output_dtype and target in _INTEGER and np.asarray(y_scale).ndim <= 1:
                return (quantize(np.asarray(x), np.asarray(y_scale), y_zero_point, axis),)
            extra = {"block_size": block_size, "output_dtype": output_dtype} if builtin is not ql.QuantizeLinear_19 else {}
            return super()._run(x, y_scale, y_zero_point, axis=axis, saturate=saturate, **extra, **kw)

    found: list[type] = [QuantizeLinear]
    if opset < QDQ_SINCE:
        # Named as the op, the evaluator hands it the newest schema's attributes too (block_size, output_dtype): the
        # version-19 implementation takes the ones a version-13 node has.
        class DequantizeLinear(DequantizeLinear_19):
            op_domain = ""

            def _run(self, x, x_scale, x_zero_point=None, axis=1, **_):  # type: ignore[no-untyped-def,override]
                return super()._run(x, x_scale, x_zero_point, axis=axis)

        found.append(DequantizeLinear)
    return found


def evaluator(model: Any) -> Any:
    """The ONNX reference evaluator of ``model`` (a ModelProto), with the contrib ops of :data:`CONTRIB` and the
    quantization ops of :func:`_qdq`, each float16 op computed in float32 and its output rounded to float16
    (:func:`_rounded_at_outputs`)."""
    from onnx.reference import ReferenceEvaluator

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), QDQ_SINCE)
    ops = _ops() + _qdq(opset)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = ReferenceEvaluator(model, new_ops=ops)
    for node in getattr(session, "rt_nodes_", None) or ():
        if node.onnx_node.op_type != "Cast":
            node.run = _rounded_at_outputs(node.run)
    return session


def _rounded_at_outputs(run: Any) -> Any:
    """An op of a float16 file as the specification defines it: the op's result on its float16 inputs, exactly, then
    rounded to float16 once, at its output. numpy's float16 arithmetic rounds inside an op too (each partial sum of
    a MatMul, the mean and variance of a LayerNormalization), which no runtime does and which makes a sum of
    64 products overflow where the exact one does not; here the op runs on its inputs widened to float32 and its
    float32 outputs are rounded back to float16. (A Cast is left as it is: its output type is its attribute.)"""

    def rounded(*args: Any, **kwargs: Any) -> Any:
        halves = [isinstance(a, np.ndarray) and a.dtype == np.float16 for a in args]
        if not any(halves):
            return run(*args, **kwargs)
        wide = [a.astype(np.float32) if h else a for a, h in zip(args, halves)]  # noqa: B905 (same length)
        outs = run(*wide, **kwargs)
        with np.errstate(over="ignore"):
            return tuple(o.astype(np.float16) if isinstance(o, np.ndarray) and o.dtype == np.float32 else o for o in outs)

    return rounded
