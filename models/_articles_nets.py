"""The modules behind :mod:`models.articles`; importing this imports torch.

Kept apart from the case declarations so that loading the corpus (names,
cards, probes) never needs torch: only the export environment builds models.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class SmallCNN(nn.Module):
    """Conv → ReLU → global pool → Linear: shape-agnostic apart from the batch."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(torch.relu(self.conv(x))), 1))


class ConvClassifierView(nn.Module):
    """Article 1 §1: flattens the pooled features with ``view(-1, 16)``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.conv(x))
        x = x.view(-1, 16)
        return self.fc(x)


class ConvClassifierFlatten(ConvClassifierView):
    """Article 1 §1, fixed: ``flatten(1)`` keeps the batch dimension explicit."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.conv(x))
        x = torch.flatten(x, 1)
        return self.fc(x)


class ResidualInplace(nn.Module):
    """Article 1 §2: a residual block that adds the skip connection in place."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x
        x = self.conv1(x)
        x = self.relu(x)
        x = self.conv2(x)
        x += residual
        x = self.relu(x)
        return x


class ResidualOutOfPlace(ResidualInplace):
    """Article 1 §2, fixed: the same block with an out-of-place add."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = x
        out = self.conv1(x)
        out = self.relu(out)
        out = self.conv2(out)
        out = out + residual
        out = self.relu(out)
        return out


class MLP(nn.Module):
    """A plain two-layer MLP: nothing in it but MatMul/Gemm, Add and Relu."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class LoopPythonInt(nn.Module):
    """Article 1 §4: loops ``n`` times where ``n`` is a Python int (traced: unrolled)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(10, 10)

    def forward(self, x: torch.Tensor, n: int) -> torch.Tensor:
        for _ in range(n):
            x = self.fc(x)
            x = torch.relu(x)
        return x


class LoopTensorCount(nn.Module):
    """Article 1 §4, scripted: ``n`` is a 0-d int64 tensor, so it stays a graph input."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(10, 10)

    def forward(self, x: torch.Tensor, n: torch.Tensor) -> torch.Tensor:
        for _ in range(int(n)):
            x = self.fc(x)
            x = torch.relu(x)
        return x


class SquarePlusOne(torch.autograd.Function):
    """Article 1 §5: ``x * x + 1`` as an autograd Function with no ONNX symbolic."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * x + 1

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return grad_output * 2 * x


class SquarePlusOneSymbolic(SquarePlusOne):
    """The same Function with a ``symbolic`` the TorchScript exporter uses."""

    @staticmethod
    def symbolic(g: Any, x: Any) -> Any:
        """Emit ``Add(Mul(x, x), 1)``; ``g`` is the torchscript exporter's graph context."""
        one = g.op("Constant", value_t=torch.tensor(1.0))
        return g.op("Add", g.op("Mul", x, x), one)


class CustomFunction(nn.Module):
    """Calls :class:`SquarePlusOne`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return SquarePlusOne.apply(x)


class CustomFunctionSymbolic(nn.Module):
    """Calls :class:`SquarePlusOneSymbolic`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return SquarePlusOneSymbolic.apply(x)


class CustomFunctionPlain(nn.Module):
    """Article 1 §5, refactored: the same math in plain torch ops."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * x + 1


@torch.library.custom_op("onnx_matrix::square_plus_one", mutates_args=())
def square_plus_one(x: torch.Tensor) -> torch.Tensor:
    """A true black box to both exporters: an opaque op with no ONNX translation."""
    return x * x + 1


@square_plus_one.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class CustomLibraryOp(nn.Module):
    """Calls the ``torch.library`` custom op :func:`square_plus_one`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return square_plus_one(x)


class NormalizeInForward(nn.Module):
    """Article 1 §6: ImageNet mean/std built as tensors inside ``forward``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
        std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
        return (x - mean) / std


class NormalizeBuffers(nn.Module):
    """Article 1 §6, fixed: mean/std registered as buffers (ONNX initializers)."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


class InterpolateDefault(nn.Module):
    """Article 1 §7: bilinear upsampling with ``align_corners`` left unspecified."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=2, mode="bilinear")


class InterpolateExplicit(nn.Module):
    """Article 1 §7, fixed: ``align_corners=False`` spelled out."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)


class GridSampleDefault(nn.Module):
    """Article 1 §7: ``grid_sample`` with every default (bilinear, zeros, align_corners=False)."""

    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        return F.grid_sample(x, grid)


class GridSampleExplicit(nn.Module):
    """Article 1 §7, fixed: ``mode``, ``padding_mode`` and ``align_corners`` spelled out."""

    def forward(self, x: torch.Tensor, grid: torch.Tensor) -> torch.Tensor:
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)


class PadDefault(nn.Module):
    """Article 1 §7: ``F.pad`` with ``mode`` and ``value`` left at their defaults."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, (1, 2, 2, 1))


class PadExplicit(nn.Module):
    """Article 1 §7, fixed: ``mode="constant", value=0.0`` spelled out."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.pad(x, (1, 2, 2, 1), mode="constant", value=0.0)


class Branchy(nn.Module):
    """Article 2 §2: a Python ``if`` on a tensor value (tracing keeps one branch)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.mean() > 0:
            return x * 2
        return x - 100


class BranchyWhere(nn.Module):
    """Article 2 §2, fixed: both branches as tensor ops, chosen by ``torch.where``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x.mean() > 0, x * 2, x - 100)


class RfftMagnitude(nn.Module):
    """Article 2 §3: magnitude spectrum through ``torch.fft.rfft`` (real output)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.fft.rfft(x, dim=-1).abs()


class RfftMatmul(nn.Module):
    """Article 2 §3, rewritten: the same real DFT as matmuls against cos/sin buffers."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, n: int = 32) -> None:
        super().__init__()
        k = torch.arange(n // 2 + 1, dtype=torch.float64)
        t = torch.arange(n, dtype=torch.float64)
        angle = 2 * math.pi * torch.outer(t, k) / n
        self.register_buffer("cos", torch.cos(angle).float())
        self.register_buffer("sin", -torch.sin(angle).float())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        real = x @ self.cos
        imag = x @ self.sin
        return torch.sqrt(real * real + imag * imag)


class NanChain(nn.Module):
    """Standardise each row, mask with ``-inf``, softmax: NaN on constant or fully masked rows."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        z = (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)
        z = z.masked_fill(mask == 0, float("-inf"))
        return torch.softmax(z, dim=-1)


class NanChainFixed(nn.Module):
    """The same chain with an epsilon in the denominator and a finite mask value."""

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        z = (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5)
        z = z.masked_fill(mask == 0, -1e9)
        return torch.softmax(z, dim=-1)
