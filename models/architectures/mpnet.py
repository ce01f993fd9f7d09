"""MPNet (``MPNetModel``): BERT with a relative-position bias (bucketed in the graph). Export: batch and
sequence dynamic, mask as input."""

from models.architectures._family import TEXT, encoder

encoder("mpnet", "MPNet", "MPNetModel", "MPNetConfig", TEXT, add_pooling_layer=False)
