"""The modules behind :mod:`models.nan_inf`; importing this imports torch.

Each gotcha module uses one torch op whose NaN semantics the ONNX operator
it exports to does not pin down; each ``*Fixed`` twin spells the NaN rule
out with ``torch.isnan`` so that the runtime's own choice no longer matters.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

NAN = float("nan")
INF = float("inf")


class MaxDim(nn.Module):
    """``torch.max(x, dim=-1)``: values and indices (ReduceMax + ArgMax)."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = torch.max(x, dim=-1)
        return values, indices


class MaxDimFixed(nn.Module):
    """``torch.max(x, dim=-1)`` with torch's NaN rule made explicit.

    A row holding a NaN yields NaN and the index of its first NaN (torch's
    rule); other rows take the plain max. The NaN mask is argmax-ed as float:
    onnxruntime before 1.19 has no int64 ArgMax.
    """

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        isnan = torch.isnan(x)
        has_nan = isnan.any(dim=-1)
        values = torch.where(has_nan, torch.full_like(x[..., 0], NAN), x.amax(dim=-1))
        indices = torch.where(has_nan, isnan.to(x.dtype).argmax(dim=-1), x.argmax(dim=-1))
        return values, indices


class TopK(nn.Module):
    """``torch.topk(x, 3)``: torch ranks NaN above every number."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = torch.topk(x, 3, dim=-1)
        return values, indices


class TopKFixed(nn.Module):
    """``torch.topk`` on NaN → +inf, then the values gathered back from ``x``.

    The indices match torch's as long as a row does not hold both a NaN and a
    +inf; the gather restores the NaN values themselves.
    """

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ranked = torch.where(torch.isnan(x), torch.full_like(x, INF), x)
        _, indices = torch.topk(ranked, 3, dim=-1)
        return torch.gather(x, -1, indices), indices


class Maximum(nn.Module):
    """``torch.maximum(x, y)``: NaN in either operand gives NaN in torch."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.maximum(x, y)


class MaximumFixed(nn.Module):
    """``torch.maximum`` with NaN propagation spelled out (``x + y`` is NaN there)."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.where(torch.isnan(x) | torch.isnan(y), x + y, torch.maximum(x, y))


class MaxPool(nn.Module):
    """``F.max_pool2d(x, 2)``: torch returns NaN for a window holding a NaN."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(x, 2)


class MaxPoolFixed(nn.Module):
    """Max pooling plus a pooled NaN mask that puts the NaN back."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = F.max_pool2d(x, 2)
        window_has_nan = F.max_pool2d(torch.isnan(x).to(x.dtype), 2) > 0
        return torch.where(window_has_nan, torch.full_like(pooled, NAN), pooled)
