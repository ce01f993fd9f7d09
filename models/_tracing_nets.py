"""The modules behind :mod:`models.tracing`; importing this imports torch.

Each gotcha module sits next to its fixed twin. Kept apart from the case
declarations so that loading the corpus never needs torch.
"""

from __future__ import annotations

import torch
from torch import nn

HIDDEN = 6


class LstmH0Int(nn.Module):
    """An LSTM whose initial state is sized with ``int(x.size(0))``: a frozen batch."""

    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(4, HIDDEN, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch = int(x.size(0))
        h0 = torch.zeros(1, batch, HIDDEN)
        c0 = torch.zeros(1, batch, HIDDEN)
        out, _ = self.rnn(x, (h0, c0))
        return out


class LstmH0Omitted(LstmH0Int):
    """The same LSTM with the initial state omitted: ONNX LSTM defaults it to zeros of the runtime batch."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return out


class ChunkGate(nn.Module):
    """A gated unit that halves the features with ``torch.chunk(x, 2, dim=1)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = torch.chunk(x, 2, dim=1)
        return a * torch.sigmoid(b)


class SliceGate(nn.Module):
    """The same gate with the halves taken by slicing at ``x.shape[1] // 2``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        half = x.shape[1] // 2
        return x[:, :half] * torch.sigmoid(x[:, half:])


class SplitCount(nn.Module):
    """Sums each group of 4 features: ``x.split(4, dim=1)`` yields a Python list whose length the trace keeps."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([part.sum(1) for part in x.split(4, dim=1)], dim=1)


class SplitReshape(nn.Module):
    """The same group sums as a reshape to ``(batch, -1, 4)``: the group count stays symbolic."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(x.shape[0], -1, 4).sum(-1)


class ScaledSoftmax(nn.Module):
    """``softmax(x / temperature)``; ``temperature`` is a Python float or a 0-d tensor."""

    def forward(self, x: torch.Tensor, temperature: float | torch.Tensor) -> torch.Tensor:
        return torch.softmax(x / temperature, dim=-1)


class LinearBatchNorm(nn.Module):
    """Linear → BatchNorm1d, with non-trivial running statistics so eval and train modes differ."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.bn = nn.BatchNorm1d(8)
        mean, var = self.bn.running_mean, self.bn.running_var
        assert mean is not None and var is not None
        with torch.no_grad():
            mean.copy_(torch.randn(8) * 0.5)
            var.copy_(torch.rand(8) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.fc(x))


class LoopOverBatch(nn.Module):
    """Sums each sequence's first ``lengths[i]`` steps in a Python loop over the batch."""

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        return torch.stack([x[i, : lengths[i]].sum(0) for i in range(x.shape[0])])


class MaskedSum(nn.Module):
    """The same per-sequence sums with a length mask: no Python loop, no data-dependent slice."""

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        keep = torch.arange(x.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)
        return (x * keep.unsqueeze(-1).to(x.dtype)).sum(1)
