"""Real architectures: forty-two ``transformers`` families, one file per family, each file's docstring its card.

Every model is a real class of the library built from its config at reduced size (a few layers, small widths:
the same graph) with seeded random weights; nothing is downloaded. Decoders come twice, as their prefill and as
one decode step with a KV cache, the way they are served. The profile ``architectures`` of matrix.toml runs this
corpus alone and publishes ``results/architectures/``; ``--corpus models.architectures`` adds it to any run.
Importing this package imports neither torch nor transformers: the modules are built in the export environment
(:mod:`models._architectures_nets`).
"""

from __future__ import annotations

import importlib
import sys

REQUIREMENTS = ["transformers==5.24.0"]

FAMILIES = (
    # encoders
    "bert", "roberta", "distilbert", "deberta_v2", "modernbert", "xlm_roberta", "albert", "electra", "mpnet",
    # decoders: each its prefill and its decode step with a KV cache
    "gpt2", "gpt_neo", "gptj", "opt", "bloom", "falcon", "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma",
    # encoder-decoders
    "t5", "bart", "marian", "whisper",
    # fix candidates: a family built with a setting its user controls, where that setting changes the outcome
    "t5_eager",
    # vision
    "vit", "deit", "beit", "swin", "convnext", "resnet", "mobilenet_v2", "efficientnet", "segformer", "detr", "yolos",
    "dinov2",
    # audio and multimodal
    "wav2vec2", "hubert", "ast", "clip", "siglip",
)  # fmt: skip

for _family in FAMILIES:  # each family file registers its cases when it runs: run it again on a reload
    _module = f"{__name__}.{_family}"
    if _module in sys.modules:
        importlib.reload(sys.modules[_module])
    else:
        importlib.import_module(_module)
