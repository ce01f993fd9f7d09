"""One backend per runtime kind: onnxruntime's providers and native TensorRT behind one contract."""
