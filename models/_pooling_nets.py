"""The modules behind :mod:`models.pooling`; importing this imports torch."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MaxPoolCeil(nn.Module):
    """``MaxPool2d(2, 2, padding=1, ceil_mode=True)``: ceil's extra window starts in the padding."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.MaxPool2d(2, stride=2, padding=1, ceil_mode=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


class MaxPoolFloor(nn.Module):
    """The same pooling with ``ceil_mode=False``: in torch the same output for every size."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.MaxPool2d(2, stride=2, padding=1, ceil_mode=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


class AvgPoolCeil(nn.Module):
    """``AvgPool2d(3, 2, ceil_mode=True)``: the last window of an even size is partial."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AvgPool2d(3, stride=2, ceil_mode=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


class AvgPoolCeilNoPadCount(nn.Module):
    """The same pooling with ``count_include_pad=False``: identical in torch without padding."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AvgPool2d(3, stride=2, ceil_mode=True, count_include_pad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


class SumPoolDivisor(nn.Module):
    """Sum pooling written as ``avg_pool2d(..., divisor_override=1)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x, 2, stride=2, divisor_override=1)


class SumPoolScaled(nn.Module):
    """Sum pooling as the average times the window size (4): no ``divisor_override``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.avg_pool2d(x, 2, stride=2) * 4.0


class AdaptiveUneven(nn.Module):
    """``AdaptiveAvgPool2d((3, 4))`` on a 7×9 map: bins of unequal size that overlap."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d((3, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def _adaptive_bins(x: torch.Tensor, dim: int, out: int) -> torch.Tensor:
    """Average ``x`` over ``out`` adaptive bins of ``dim``: torch's floor/ceil bin edges."""
    size = int(x.shape[dim])
    bins = []
    for i in range(out):
        start = (i * size) // out
        end = -((-(i + 1) * size) // out)
        bins.append(x.narrow(dim, start, end - start).mean(dim=dim, keepdim=True))
    return torch.cat(bins, dim=dim)


class AdaptiveUnevenSliced(nn.Module):
    """Adaptive average pooling as explicit slices and means, for a fixed input size.

    The bin edges are Python ints computed from the (frozen) spatial size:
    ``start = floor(i * size / out)``, ``end = ceil((i + 1) * size / out)``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _adaptive_bins(_adaptive_bins(x, 2, 3), 3, 4)
