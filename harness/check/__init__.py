"""``harness check``: one ONNX file the user already has on every runtime of a profile (predicted, then measured)."""
