"""The modules behind :mod:`models.operators`; importing this imports torch."""

from __future__ import annotations

import torch
from torch import nn

EDGES = (-1.0, -0.25, 0.0, 0.5, 1.0)


class Cdist(nn.Module):
    """Pairwise Euclidean distances with ``torch.cdist``."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.cdist(a, b)


class CdistExplicit(nn.Module):
    """The same distances from broadcast differences: Sub, Mul, ReduceSum, Sqrt."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        diff = a.unsqueeze(-2) - b.unsqueeze(-3)
        return (diff * diff).sum(-1).sqrt()


class SearchSorted(nn.Module):
    """Bins ``x`` against fixed sorted edges with ``torch.searchsorted``."""

    edges: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("edges", torch.tensor(EDGES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.searchsorted(self.edges, x)


class Bucketize(SearchSorted):
    """The same bins with ``torch.bucketize`` (arguments swapped, same left-side rule)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.bucketize(x, self.edges)


class Cumprod(nn.Module):
    """Running product along the last dimension with ``torch.cumprod``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(x, dim=-1)


class CumprodUnrolled(nn.Module):
    """The same running product unrolled over the (static) last axis: Mul and Concat only, exact for zeros."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        running = [x[..., :1]]
        for i in range(1, x.shape[-1]):
            running.append(running[-1] * x[..., i : i + 1])
        return torch.cat(running, dim=-1)


class Inverse(nn.Module):
    """Inverts a batch of 3×3 matrices with ``torch.linalg.inv``."""

    def forward(self, m: torch.Tensor) -> torch.Tensor:
        return torch.linalg.inv(m)


class Inverse3x3(nn.Module):
    """The same inverse in closed form: adjugate from cross products of the rows, over the determinant."""

    def forward(self, m: torch.Tensor) -> torch.Tensor:
        r0, r1, r2 = m[..., 0, :], m[..., 1, :], m[..., 2, :]
        c0 = torch.linalg.cross(r1, r2)
        c1 = torch.linalg.cross(r2, r0)
        c2 = torch.linalg.cross(r0, r1)
        det = (r0 * c0).sum(-1, keepdim=True).unsqueeze(-1)
        return torch.stack((c0, c1, c2), dim=-1) / det


class RopeComplex(nn.Module):
    """Rotary position embedding the LLaMA way: ``torch.polar`` and complex multiplication."""

    angles: torch.Tensor

    def __init__(self, seq: int = 6, dim: int = 8) -> None:
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("angles", torch.outer(torch.arange(seq).float(), inv_freq))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        freqs = torch.polar(torch.ones_like(self.angles), self.angles)
        pairs = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(pairs * freqs).flatten(-2)


class RopeReal(RopeComplex):
    """The same rotation in real arithmetic: each (even, odd) pair times a 2×2 cos/sin rotation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cos, sin = self.angles.cos(), self.angles.sin()
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class ProdLastDim(nn.Module):
    """Product over the last dimension: ``x.prod(-1)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.prod(-1)
