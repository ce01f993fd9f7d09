"""BERT (``BertModel``): the bidirectional text encoder. Export: batch and sequence dynamic, the attention
mask as an input (padding), SDPA attention."""

from models.architectures._family import TEXT, encoder

encoder("bert", "BERT", "BertModel", "BertConfig", TEXT, add_pooling_layer=False)
