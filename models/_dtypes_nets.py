"""The modules behind :mod:`models.dtypes`; importing this imports torch.

Narrow and reduced-precision dtypes: uint8 arithmetic, int8 matmul,
bfloat16 and float16 on the CPU runtime.
"""

from __future__ import annotations

import torch
from torch import nn


class Uint8Offset(nn.Module):
    """uint8 image plus a uint8 offset, in uint8: wraps modulo 256 like C."""

    def forward(self, img: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
        return img + offset


class Uint8OffsetInt32(nn.Module):
    """The offset added in int32, saturated to [0, 255], narrowed back to uint8."""

    def forward(self, img: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
        out = img.to(torch.int32) + offset.to(torch.int32)
        return out.clamp(0, 255).to(torch.uint8)


class Int8MatMul(nn.Module):
    """int8 activations times int8 weights with ``@``, in int8."""

    weight: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("weight", torch.randint(-8, 8, (16, 8), dtype=torch.int8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


class Int8MatMulInt32(Int8MatMul):
    """The same product with both operands widened to int32 (an int32 accumulator)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.int32) @ self.weight.to(torch.int32)


class Bf16Linear(nn.Module):
    """A Linear whose weights are bfloat16; float32 in and out."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 8).to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.to(torch.bfloat16)).float()


class Fp32Linear(nn.Module):
    """The same Linear left in float32."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class Fp16Energy(nn.Module):
    """Sum of squares over the last axis, computed in float16 (overflows past 65504)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.half()
        return (h * h).sum(-1).float()


class Fp16EnergyFp32Acc(nn.Module):
    """The same squares in float16, summed with a float32 accumulator."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.half()
        return (h * h).sum(-1, dtype=torch.float32)
