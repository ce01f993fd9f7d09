"""An example of your own corpus file: `nox -s matrix -- --corpus examples/my_models.py`.

Each `register(Case(...))` adds one row group to the table. The harness
exports the model with both exporters at every opset of the profile, runs it
on every runtime, and compares with torch on the example inputs, on each
probe, and on the real samples under `samples/` (probe_files).
"""

from __future__ import annotations

import torch
from torch import nn

from harness.cases import Case, randn, register, seeded


class TinyClassifier(nn.Module):
    """Conv → global pool → linear → softmax: the shape of many image classifiers."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1))
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x - self.mean) / self.std
        x = torch.relu(self.conv(x)).mean(dim=(2, 3))
        return self.head(x).softmax(dim=-1)


def build() -> nn.Module:
    seeded(0)  # fixed weights: the same table on every machine
    return TinyClassifier()


register(
    Case(
        name="my_classifier",
        model=build,
        inputs=lambda: {"x": randn(1, 3, 16, 16).sigmoid()},  # keys are forward()'s parameter names
        dynamic={"x": {0: "batch", 2: "height", 3: "width"}},  # what varies in deployment
        probes=lambda: {"batch5_odd": {"x": randn(5, 3, 15, 17, seed=1).sigmoid()}},
        probe_files=("samples/*.npz",),  # real preprocessed inputs: one probe per file, keys = input names
        atol=1e-5,
    )
)
