"""ALBERT (``AlbertModel``): one transformer layer's weights shared by every layer, factorized embeddings.
Export: batch and sequence dynamic, mask as input."""

from models.architectures._family import TEXT, encoder

encoder("albert", "ALBERT", "AlbertModel", "AlbertConfig", {**TEXT, "embedding_size": 16}, add_pooling_layer=False)
