"""The export stage (torch environment).

Every case × exporter × opset to an ONNX file with torch's outputs and the reference runtime's node values.
"""
