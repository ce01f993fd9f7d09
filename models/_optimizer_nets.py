"""The modules behind :mod:`models.optimizer`; importing this imports torch.

Each gotcha module is a hand-written layer norm or RMSNorm whose reductions
forget ``keepdim=True``, fed a square input: torch broadcasts the per-row
statistics along the last axis (legal only because rows == features), and the
exported graph says the same, but onnxruntime's default optimizer fuses the
sub-graph into a real (row-wise) norm anyway. Each ``*Fixed`` twin is the same
code with ``keepdim=True``: a real norm, which the fusion computes correctly.
"""

from __future__ import annotations

import torch
from torch import nn

FEATURES = 8


class _Scale(nn.Module):
    """A learnable per-feature scale, initialised away from 1 like a trained layer's."""

    def __init__(self, features: int = FEATURES) -> None:
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.5 * torch.randn(features))


class _ScaleShift(_Scale):
    """A learnable per-feature scale and shift, initialised away from 1 and 0."""

    def __init__(self, features: int = FEATURES) -> None:
        super().__init__(features)
        self.bias = nn.Parameter(0.5 * torch.randn(features))


class LayerNormNoKeepdim(_ScaleShift):
    """Layer norm written out, with ``mean(-1)`` lacking ``keepdim=True``.

    On an ``(n, n)`` input, ``x - x.mean(-1)`` subtracts row j's mean from
    column j: not a layer norm, but what torch (and the exported graph) computes.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1)
        centered = x - mean
        var = centered.pow(2).mean(-1)
        return centered / torch.sqrt(var + 1e-5) * self.weight + self.bias


class LayerNormNoKeepdimFixed(_ScaleShift):
    """The same layer norm with ``keepdim=True``: each row normalized by its own statistics."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(-1, keepdim=True)
        centered = x - mean
        var = centered.pow(2).mean(-1, keepdim=True)
        return centered / torch.sqrt(var + 1e-5) * self.weight + self.bias


class RmsNormNoKeepdim(_Scale):
    """RMSNorm written out as ``x / sqrt(mean(x²) + eps) * weight``, ``mean(-1)`` lacking ``keepdim=True``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.sqrt(x.pow(2).mean(-1) + 1e-6) * self.weight


class RmsNormNoKeepdimFixed(RmsNormNoKeepdim):
    """The same RMSNorm with ``keepdim=True``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class RmsNormRsqrtNoKeepdim(_Scale):
    """RMSNorm the Llama way, ``weight * (x * rsqrt(mean(x²) + eps))``, ``mean(-1)`` lacking ``keepdim=True``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1) + 1e-6))


class RmsNormRsqrtNoKeepdimFixed(RmsNormRsqrtNoKeepdim):
    """The same Llama-style RMSNorm with ``keepdim=True``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
