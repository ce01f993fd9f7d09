"""DistilBERT (``DistilBertModel``): BERT distilled to half its layers, no token types. Export: batch and
sequence dynamic, mask as input."""

from models.architectures._family import encoder

encoder(
    "distilbert",
    "DistilBERT",
    "DistilBertModel",
    "DistilBertConfig",
    {"vocab_size": 128, "dim": 32, "n_layers": 2, "n_heads": 4, "hidden_dim": 64, "max_position_embeddings": 64},
)
