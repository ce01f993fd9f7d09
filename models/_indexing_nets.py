"""The modules behind :mod:`models.indexing`; importing this imports torch.

Each gotcha module sits next to its fixed twin. Kept apart from the case
declarations so that loading the corpus never needs torch.
"""

from __future__ import annotations

import torch
from torch import nn


class IndexPutAccumulate(nn.Module):
    """Adds rows of ``v`` into ``x`` at ``idx`` with ``index_put(accumulate=True)`` (``x[idx] += v``)."""

    def forward(self, x: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return x.index_put((idx,), v, accumulate=True)


class OneHotAccumulate(nn.Module):
    """The same accumulation as a one-hot matmul: duplicates add up by construction."""

    def forward(self, x: torch.Tensor, idx: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        onehot = (idx.unsqueeze(1) == torch.arange(x.shape[0]).unsqueeze(0)).to(v.dtype)
        return x + onehot.transpose(0, 1) @ v


class ScatterMean(nn.Module):
    """``x.scatter_reduce(0, idx, src, reduce="mean")`` (``include_self=True``)."""

    def forward(self, x: torch.Tensor, idx: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return x.scatter_reduce(0, idx, src, reduce="mean")


class ScatterMeanExplicit(nn.Module):
    """The same mean as two ``scatter_add``: (self + sum of src) / (1 + count)."""

    def forward(self, x: torch.Tensor, idx: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        total = x.scatter_add(0, idx, src)
        count = torch.ones_like(x).scatter_add(0, idx, torch.ones_like(src))
        return total / count


class ScatterAmaxExcludeSelf(nn.Module):
    """``x.scatter_reduce(0, idx, src, reduce="amax", include_self=False)``."""

    def forward(self, x: torch.Tensor, idx: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        return x.scatter_reduce(0, idx, src, reduce="amax", include_self=False)


class ScatterAmaxMasked(nn.Module):
    """The same result with ``include_self=True``: scattered-to positions of ``x`` are set to ``-inf`` first.

    The mask comes from ``scatter_add`` of ones; the canvas is derived from ``x`` rather than built with
    ``full_like``, which the torchscript exporter folds into a constant that breaks its scatter_reduce shapes.
    """

    def forward(self, x: torch.Tensor, idx: torch.Tensor, src: torch.Tensor) -> torch.Tensor:
        touched = torch.zeros_like(x).scatter_add(0, idx, torch.ones_like(src)) > 0
        canvas = x.masked_fill(touched, float("-inf"))
        return canvas.scatter_reduce(0, idx, src, reduce="amax", include_self=True)


class PairIndex(nn.Module):
    """``x[i, :, j]``: two index tensors around a slice (advanced indexing)."""

    def forward(self, x: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        return x[i, :, j]


class PairIndexNormalized(nn.Module):
    """The same indexing with negative indices wrapped first (``i + size`` where ``i < 0``)."""

    def forward(self, x: torch.Tensor, i: torch.Tensor, j: torch.Tensor) -> torch.Tensor:
        i = torch.where(i < 0, i + x.shape[0], i)
        j = torch.where(j < 0, j + x.shape[2], j)
        return x[i, :, j]
