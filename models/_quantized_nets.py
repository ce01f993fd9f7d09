"""The modules behind :mod:`models.quantized`; importing this imports torch.

Models whose fp32 export is right and whose quantized or float16 file is where runtimes part: int8 products that
saturate a 16-bit intermediate, fp16 logits past 65504, a 4-bit weight whose K is no multiple of the block.
"""

from __future__ import annotations

import torch
from torch import nn


class SaturatingLinear(nn.Module):
    """A Linear whose weights sit at the top of their range, all of one sign: quantized to int8 per channel each is
    +127, and an activation near the top of its calibrated range is 255 as uint8, so two neighbouring products sum to
    64,770 — past an int16's 32,767."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(64, 8)
        with torch.no_grad():
            self.fc.weight.copy_(1.0 + 0.01 * torch.rand(8, 64))
            self.fc.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class LargeLogits(nn.Module):
    """Unscaled self-attention scores: x @ xᵀ over 64 features of magnitude ~40 reaches ~10⁵, past float16's 65,504."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = x @ x.transpose(-1, -2)
        return torch.softmax(scores, dim=-1) @ x


class ScaledLogits(nn.Module):
    """The same attention with the scores scaled by 1/√d before the product overflows (x/√d on both sides)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q = x / x.shape[-1] ** 0.25
        scores = q @ q.transpose(-1, -2)
        return torch.softmax(scores, dim=-1) @ x


class OddBlockLinear(nn.Module):
    """A Linear on a sequence (exported as MatMul, which 4-bit weight quantization rewrites) with K = 40: the last block
    of 32 along K holds 8 weights and 24 of padding."""

    def __init__(self, k: int = 40) -> None:
        super().__init__()
        self.fc = nn.Linear(k, 24)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class EvenBlockLinear(OddBlockLinear):
    """K = 64: two whole blocks of 32."""

    def __init__(self) -> None:
        super().__init__(64)
