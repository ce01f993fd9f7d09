"""The onnxruntime backend's error lines: same refusal, same line, on every machine and version."""

from __future__ import annotations

from harness.backends.onnxruntime import error_line

IR = (
    "[ONNXRuntimeError] : 1 : FAIL : Load model from /tmp/x/build/artifacts/a.dynamo.op18/model.onnx failed:"
    "/onnxruntime_src/onnxruntime/core/graph/model.cc:179 onnxruntime::Model::Model(onnx::ModelProto&&, const "
    "onnxruntime::PathString&, const onnxruntime::IOnnxRuntimeOpSchemaRegistryList*, const onnxruntime::logging::Logger&, "
    "const onnxruntime::ModelOptions&) Unsupported model IR version: 10, max supported IR version: 9\n"
)
OPSET = (
    "[ONNXRuntimeError] : 1 : FAIL : Load model from build/artifacts/c.torchscript.op20/model.onnx failed:"
    "/onnxruntime_src/onnxruntime/core/graph/model_load_utils.h:46 void onnxruntime::model_load_utils::"
    "ValidateOpsetForDomain(const std::unordered_map<std::basic_string<char>, int>&, const onnxruntime::logging::Logger&, "
    "bool, const string&, int) ONNX Runtime only *guarantees* support for models stamped with official released onnx "
    "opset versions. Opset 20 is under development and support for this is limited. The operator schemas and or other "
    "functionality may change before next ONNX release and in this case ONNX Runtime will not guarantee backward "
    "compatibility. Current official support for domain ai.onnx is till opset 19.\n"
)
BATCH = (
    "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: x for the following indices\n"
    " index: 0 Got: 8 Expected: 1\n Please fix either the inputs/outputs or the model.\n"
)


def test_ir_version_refusal_loses_path_and_source_location() -> None:
    assert error_line(IR) == "[ONNXRuntimeError] : 1 : FAIL : Unsupported model IR version: 10, max supported IR version: 9"


def test_long_message_keeps_its_verdict_at_the_end() -> None:
    line = error_line(OPSET)
    assert line.startswith("[ONNXRuntimeError] : 1 : FAIL : ONNX Runtime only *guarantees*")
    assert line.endswith("Current official support for domain ai.onnx is till opset 19.")
    assert "ValidateOpsetForDomain" not in line and len(line) <= 300


def test_detail_lines_join_the_first() -> None:
    assert error_line(BATCH) == (
        "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: x for the following indices "
        "index: 0 Got: 8 Expected: 1 Please fix either the inputs/outputs or the model."
    )
