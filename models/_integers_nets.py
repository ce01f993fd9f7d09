"""The modules behind :mod:`models.integers`; importing this imports torch.

Integer and rounding semantics: floor division, arithmetic shifts, int16
kernels, cumulative sums of masks, argmax over NaN and int32 reductions.
"""

from __future__ import annotations

import torch
from torch import nn


class FloorDivide(nn.Module):
    """``a // b`` on int64: Python floor division, rounding toward -inf."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a // b


class FloorDivideExplicit(nn.Module):
    """The same floor division, spelled ``torch.div(..., rounding_mode="floor")``."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.div(a, b, rounding_mode="floor")


class RightShift(nn.Module):
    """``x >> 2`` on int64: an arithmetic shift, which rounds toward -inf."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x >> 2


class RightShiftAsFloorDiv(nn.Module):
    """The shift written as the floor division it is: ``x // 4`` via ``rounding_mode="floor"``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.div(x, 4, rounding_mode="floor")


class Int16PeakClip(nn.Module):
    """Two int16 PCM channels: element-wise peak, clipped to a limit, in int16."""

    def forward(self, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        return torch.maximum(left, right).clamp(-8000, 8000)


class Int16PeakClipInt32(nn.Module):
    """The same peak/clip computed in int32, narrowed back to int16 at the end."""

    def forward(self, left: torch.Tensor, right: torch.Tensor) -> torch.Tensor:
        peak = torch.maximum(left.to(torch.int32), right.to(torch.int32))
        return peak.clamp(-8000, 8000).to(torch.int16)


class PositionIdsBoolCumsum(nn.Module):
    """Position ids from padded token ids: cumsum of the bool mask ``ids != 0``."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mask = input_ids != 0
        return mask.cumsum(-1) * mask


class PositionIdsLongCumsum(nn.Module):
    """The same position ids, with the mask cast to int64 before the cumsum."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mask = (input_ids != 0).long()
        return mask.cumsum(-1) * mask


class ArgmaxScores(nn.Module):
    """``argmax`` over the last axis of scores that may hold NaN."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.argmax(-1)


class ArgmaxNanAsInf(nn.Module):
    """NaN mapped to +inf before ``argmax``: torch's 'first NaN wins', made explicit."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.where(torch.isnan(x), torch.full_like(x, float("inf")), x)
        return x.argmax(-1)


class Int32SumInt32(nn.Module):
    """A row sum of int32 values kept in int32 (``dtype=torch.int32``): wraps on overflow."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(-1, dtype=torch.int32)


class Int32SumDefault(nn.Module):
    """The row sum with torch's default promotion of int32 to int64."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(-1)
