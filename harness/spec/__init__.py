"""The spec stage: what the ONNX specification itself says of each exported file (its own environment: the pinned
onnx and numpy, no torch, no runtime). :mod:`harness.spec.stage` keys, caches and schedules; the evaluation runs in
worker processes (:mod:`harness.spec._evaluate`)."""
