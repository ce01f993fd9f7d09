"""ELECTRA (``ElectraModel``): BERT's graph trained as a discriminator, embeddings projected up. Export: batch
and sequence dynamic, mask as input."""

from models.architectures._family import TEXT, encoder

encoder("electra", "ELECTRA", "ElectraModel", "ElectraConfig", {**TEXT, "embedding_size": 16})
