"""The five architectures of examples/hf_models.py at a tiny size (two layers, hidden size 32): what the
end-to-end test runs through real nox sessions, with transformers installed from this file's REQUIREMENTS."""

from __future__ import annotations

from examples.hf_nets import hf_cases
from harness.cases import register

REQUIREMENTS = ["transformers==5.24.0"]

for case in hf_cases("tiny"):
    register(case)
