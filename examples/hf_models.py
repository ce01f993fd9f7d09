"""Real models as your own corpus: five Hugging Face architectures at their real sizes.

    nox -s matrix -- --corpus examples/hf_models.py --only-corpus --profile quick --out build/hf --results build/hf/results

BERT-base (110M parameters), GPT-2 small (124M, ``use_cache=False``), ViT-base (86M), ResNet-50 (25M)
and Whisper-tiny's encoder (8M), each built from its ``transformers`` config with seeded random
weights (nothing is downloaded) and wrapped to return ``last_hidden_state``; the models and their
probes are in ``examples/hf_nets.py``.

``REQUIREMENTS`` is what the models need installed: ``nox -s matrix`` reads it from this file (without
importing it) and installs it into the export environment only; the run environments stay onnxruntime
and numpy. ``--with PKG`` does the same for one run, ``[export] requirements`` in matrix.toml for every run.
"""

from __future__ import annotations

from examples.hf_nets import hf_cases
from harness.cases import register

REQUIREMENTS = ["transformers==5.24.0"]

for case in hf_cases("full"):
    register(case)
