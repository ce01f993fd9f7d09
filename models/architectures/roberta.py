"""RoBERTa (``RobertaModel``): BERT retrained; position ids start after the padding id and come from the
ids themselves (``cumsum`` over the non-padding tokens). Export: batch and sequence dynamic, mask as input."""

from models.architectures._family import TEXT, encoder

encoder("roberta", "RoBERTa", "RobertaModel", "RobertaConfig", {**TEXT, "pad_token_id": 1}, add_pooling_layer=False)
