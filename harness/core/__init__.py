"""The vocabulary every stage speaks.

Errors, the records that travel between stages, the published cell's fields, the ONNX wire format. Standard
library only.
"""
