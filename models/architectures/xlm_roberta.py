"""XLM-RoBERTa (``XLMRobertaModel``): RoBERTa's multilingual twin (same graph, a larger vocabulary). Export:
batch and sequence dynamic, mask as input."""

from models.architectures._family import TEXT, encoder

encoder("xlm_roberta", "XLM-RoBERTa", "XLMRobertaModel", "XLMRobertaConfig", {**TEXT, "pad_token_id": 1}, add_pooling_layer=False)
