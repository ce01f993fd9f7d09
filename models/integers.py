"""Gotcha cases of integer and rounding semantics, each with its fixed twin.

PyTorch follows Python for integers (``//`` and ``>>`` round toward -inf,
reductions promote to int64, ``argmax`` lets NaN win); ONNX and onnxruntime
follow C (``Div`` truncates) or their own kernels. The modules live in
:mod:`models._integers_nets`, imported only when a case builds its model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from harness.cases import Card, Case, Claim, lazy, randint, randn, register

if TYPE_CHECKING:
    import torch

ONNX_DIV = "https://onnx.ai/onnx/operators/onnx__Div.html"


def _net(cls: str, seed: int = 0) -> Callable[[], torch.nn.Module]:
    """A factory for ``models._integers_nets.<cls>`` with seeded weights."""
    return lazy("models._integers_nets", cls, seed=seed)


def _ints(values: list[list[int]], dtype: str = "int64") -> torch.Tensor:
    """A 2-d integer tensor of ``values`` with the torch dtype named ``dtype``."""
    import torch

    return torch.tensor(values, dtype=getattr(torch, dtype))


def _divisors(rows: int, cols: int, seed: int) -> torch.Tensor:
    """Random non-zero int64 divisors in [-5, 5], both signs."""
    d = randint(1, 6, rows, cols, seed=seed)
    sign = randint(0, 2, rows, cols, seed=seed + 100) * 2 - 1
    return d * sign


def _overflowing() -> torch.Tensor:
    """A 2x8 int32 tensor whose row sums leave int32's range, one up and one down."""
    big = 2_000_000_000
    return _ints([[big, big, 5, 0, 0, 0, 0, 0], [-big, -big, -5, 0, 0, 0, 0, 0]], "int32")


def _scores_with_nan(rows: int, cols: int, seed: int, nan_col: int) -> torch.Tensor:
    """Normal scores with a NaN in column ``nan_col`` of every other row."""
    x = randn(rows, cols, seed=seed)
    x[::2, nan_col] = float("nan")
    return x


# Floor division: `//` on negative operands --------------------------------------

FLOOR_DIVIDE = Card(
    symptom="a // b on integer (or float) tensors matches torch for positive operands and is off by one wherever the "
    "quotient is negative and inexact: torch gives -7 // 2 = -4, the torchscript export gives -3. No error, no warning.",
    cause="torch's floor_divide rounds toward -inf (Python semantics since torch 1.13). The torchscript exporter still "
    "lowers aten::floor_divide to ONNX Div, whose integer division truncates toward zero (C semantics, as "
    "onnxruntime implements it). The dynamo exporter emits the floor correction.",
    fix="Write torch.div(a, b, rounding_mode='floor') (exported with the correction by both exporters), or use the "
    "dynamo exporter; for trunc semantics say rounding_mode='trunc'.",
    source="pytorch/pytorch#78442; onnx/onnx#4016; " + ONNX_DIV,
)

register(
    Case(
        name="floor_divide_negative",
        model=_net("FloorDivide"),
        inputs=lambda: {"a": _ints([[-7, -5, 5, 7], [-8, 3, 9, -1]]), "b": _ints([[2, 3, -3, -2], [3, -4, 2, 5]])},
        probes=lambda: {
            "positive": {"a": randint(0, 50, 2, 4, seed=1), "b": randint(1, 6, 2, 4, seed=2)},
            "mixed_signs": {"a": randint(-50, 50, 2, 4, seed=3), "b": _divisors(2, 4, seed=4)},
        },
        card=FLOOR_DIVIDE,
        claims=(
            Claim("mismatch", "torchscript", probe="mixed_signs"),
            Claim("mismatch", "torchscript", probe="mixed_signs", opset=13),
        ),
    )
)
register(
    Case(
        name="floor_divide_negative_fixed",
        model=_net("FloorDivideExplicit"),
        inputs=lambda: {"a": _ints([[-7, -5, 5, 7], [-8, 3, 9, -1]]), "b": _ints([[2, 3, -3, -2], [3, -4, 2, 5]])},
        probes=lambda: {
            "positive": {"a": randint(0, 50, 2, 4, seed=1), "b": randint(1, 6, 2, 4, seed=2)},
            "mixed_signs": {"a": randint(-50, 50, 2, 4, seed=3), "b": _divisors(2, 4, seed=4)},
        },
        fixes="floor_divide_negative",
    )
)

# Arithmetic right shift of negative integers ------------------------------------

register(
    Case(
        name="right_shift_negative",
        model=_net("RightShift"),
        inputs=lambda: {"x": _ints([[-7, -5, -4, -1, 0, 1, 5, 7]])},
        probes=lambda: {
            "non_negative": {"x": randint(0, 1000, 1, 8, seed=1)},
            "signed": {"x": randint(-1000, 1000, 1, 8, seed=2)},
        },
        card=Card(
            symptom="x >> 2 on an int64 tensor is right for non-negative values; for negative values not divisible by "
            "4 the torchscript export returns one more than torch (-7 >> 2: torch -2, ONNX -1).",
            cause="torch's >> on signed integers is an arithmetic shift (rounds toward -inf). ONNX BitShift accepts "
            "unsigned types only, so the torchscript exporter lowers a signed shift to Div by 2**n, which truncates "
            "toward zero. The dynamo exporter emits a correct lowering.",
            fix="Write the shift as torch.div(x, 2**n, rounding_mode='floor'), or use the dynamo exporter.",
            source="pytorch/pytorch#191014; pytorch/pytorch#139455",
        ),
        claims=(Claim("mismatch", "torchscript", probe="signed"), Claim("mismatch", "torchscript", probe="example")),
    )
)
register(
    Case(
        name="right_shift_negative_fixed",
        model=_net("RightShiftAsFloorDiv"),
        inputs=lambda: {"x": _ints([[-7, -5, -4, -1, 0, 1, 5, 7]])},
        probes=lambda: {
            "non_negative": {"x": randint(0, 1000, 1, 8, seed=1)},
            "signed": {"x": randint(-1000, 1000, 1, 8, seed=2)},
        },
        fixes="right_shift_negative",
    )
)

# int16 tensors: kernels onnxruntime's CPU provider does not have ----------------

register(
    Case(
        name="int16_maximum_clamp",
        model=_net("Int16PeakClip"),
        inputs=lambda: {
            "left": randint(-12000, 12000, 2, 64, seed=0, dtype="int16"),
            "right": randint(-12000, 12000, 2, 64, seed=1, dtype="int16"),
        },
        card=Card(
            symptom="An int16 model (PCM audio samples) exports cleanly, then onnxruntime refuses to load it: "
            "'NOT_IMPLEMENTED : Could not find an implementation for Max(13)' (or Where(16) / Less(13) for the clamp).",
            cause="The ONNX spec allows int16 for Max, Clip, Where and the comparisons, but onnxruntime's CPU provider "
            "registers kernels only for the types production models asked for; int16 Max, Where and ArgMax are not "
            "among them. Both exporters keep the tensor's dtype.",
            fix="Widen to int32 at the model boundary (x.to(torch.int32)), compute, and narrow back with "
            ".to(torch.int16) if the output must be int16; check docs/OperatorKernels.md for the types a kernel has.",
            source="microsoft/onnxruntime#26382; https://github.com/microsoft/onnxruntime/blob/main/docs/OperatorKernels.md",
        ),
        claims=(
            Claim("load-fail", "torchscript", match="Could not find an implementation"),
            Claim("load-fail", "dynamo", match="Could not find an implementation"),
        ),
    )
)
register(
    Case(
        name="int16_maximum_clamp_fixed",
        model=_net("Int16PeakClipInt32"),
        inputs=lambda: {
            "left": randint(-12000, 12000, 2, 64, seed=0, dtype="int16"),
            "right": randint(-12000, 12000, 2, 64, seed=1, dtype="int16"),
        },
        fixes="int16_maximum_clamp",
    )
)

# cumsum of a bool mask (position ids) ----------------------------------------

register(
    Case(
        name="bool_mask_cumsum",
        model=_net("PositionIdsBoolCumsum"),
        inputs=lambda: {"input_ids": _ints([[5, 8, 3, 0, 0, 0], [7, 0, 2, 9, 4, 0]])},
        dynamic={"input_ids": {0: "batch", 1: "seq"}},
        probes=lambda: {"longer": {"input_ids": randint(0, 3, 3, 11, seed=1)}},
        card=Card(
            symptom="Position ids computed as (input_ids != pad).cumsum(-1) export with the torchscript exporter, "
            "then loading fails: \"Type Error: Type 'tensor(bool)' of input parameter ... of operator (CumSum) ... is "
            'invalid".',
            cause="torch.cumsum accepts bool and returns int64; ONNX CumSum does not accept bool. The torchscript "
            "exporter emits CumSum on the bool mask directly; the dynamo exporter casts to int64 first.",
            fix="Cast the mask before the cumsum: (input_ids != pad).long().cumsum(-1) (or .int()).",
            source="microsoft/onnxruntime#13681; pytorch/pytorch#82870",
        ),
        claims=(Claim("load-fail", "torchscript", match="CumSum"),),
    )
)
register(
    Case(
        name="bool_mask_cumsum_fixed",
        model=_net("PositionIdsLongCumsum"),
        inputs=lambda: {"input_ids": _ints([[5, 8, 3, 0, 0, 0], [7, 0, 2, 9, 4, 0]])},
        dynamic={"input_ids": {0: "batch", 1: "seq"}},
        probes=lambda: {"longer": {"input_ids": randint(0, 3, 3, 11, seed=1)}},
        fixes="bool_mask_cumsum",
    )
)

# argmax over NaN --------------------------------------------------------------

register(
    Case(
        name="argmax_nan",
        model=_net("ArgmaxScores"),
        inputs=lambda: {"x": randn(4, 10)},
        probes=lambda: {
            "nan_middle": {"x": _scores_with_nan(4, 10, seed=1, nan_col=4)},
            "nan_first": {"x": _scores_with_nan(4, 10, seed=2, nan_col=0)},
        },
        card=Card(
            symptom="argmax agrees on clean scores; on a row holding a NaN torch returns the NaN's index while "
            "onnxruntime returns the index of the largest number (unless the NaN is the row's first element).",
            cause="torch's CPU argmax propagates NaN (NaN is the maximum, the first NaN wins). onnxruntime's ArgMax "
            "compares with '>', which is false for NaN, so a NaN is skipped unless it is the starting value. The ONNX "
            "spec does not define NaN ordering for ArgMax.",
            fix="Decide what a NaN score means and make it explicit before argmax: torch.where(x.isnan(), inf, x) "
            "keeps torch's 'NaN wins'; nan_to_num(nan=-inf) ignores NaNs. Better, keep NaN out of the scores.",
            source="pytorch/pytorch#187039 (torch CPU argmax returns the first NaN); apache/tvm#19558",
        ),
        claims=(
            Claim("mismatch", "torchscript", probe="nan_middle"),
            Claim("mismatch", "dynamo", probe="nan_middle"),
        ),
    )
)
register(
    Case(
        name="argmax_nan_fixed",
        model=_net("ArgmaxNanAsInf"),
        inputs=lambda: {"x": randn(4, 10)},
        probes=lambda: {
            "nan_middle": {"x": _scores_with_nan(4, 10, seed=1, nan_col=4)},
            "nan_first": {"x": _scores_with_nan(4, 10, seed=2, nan_col=0)},
        },
        fixes="argmax_nan",
    )
)

# int32 sums that overflow -------------------------------------------------------

register(
    Case(
        name="int32_sum_overflow",
        model=_net("Int32SumInt32"),
        inputs=lambda: {"x": randint(-100, 100, 2, 8, seed=0, dtype="int32")},
        probes=lambda: {"overflow": {"x": _overflowing()}},
        card=Card(
            symptom="x.sum(-1, dtype=torch.int32) matches torch until the sum leaves int32's range: torch wraps "
            "(2e9 + 2e9 + 5 = -294967291), the dynamo export on a recent onnxruntime returns 2147483647.",
            cause="torch's integer reductions wrap on overflow (two's complement). The dynamo exporter emits ReduceSum "
            "on int32, and onnxruntime's CPU reductions saturate integer overflow to the type's max/min since the "
            "numerical-accuracy rework; older runtimes wrapped. The torchscript exporter sums in int64 and casts "
            "back, which wraps like torch.",
            fix="Let torch promote (x.sum(-1) gives int64, the default) or sum in int64 explicitly; do not rely on "
            "integer overflow behaviour across runtimes.",
            source="microsoft/onnxruntime#28743",
        ),
        claims=(Claim("mismatch", "dynamo", probe="overflow"),),
    )
)
register(
    Case(
        name="int32_sum_overflow_fixed",
        model=_net("Int32SumDefault"),
        inputs=lambda: {"x": randint(-100, 100, 2, 8, seed=0, dtype="int32")},
        probes=lambda: {"overflow": {"x": _overflowing()}},
        fixes="int32_sum_overflow",
    )
)
