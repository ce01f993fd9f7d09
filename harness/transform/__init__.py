"""The step after export: transformed artifacts (quantized, float16) made from the export's fp32 files, judged against
the ONNX specification's answer on the same file (:mod:`harness.transform.stage`)."""
