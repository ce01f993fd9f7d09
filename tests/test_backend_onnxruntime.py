"""The onnxruntime backend's error lines: same refusal, same line, on every machine and version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx

from harness.core.records import error_line
from harness.run.backends.latency import time_runs
from harness.run.backends.onnxruntime import placement

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


def _add_one_session(tmp_path: Path) -> tuple[Any, dict[str, np.ndarray]]:
    import onnxruntime

    from tests.artifacts import add_one

    path = tmp_path / "m.onnx"
    path.write_bytes(add_one().SerializeToString())
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]), {"x": np.ones(3, np.float32)}


LATENCY = {"warmup": 2, "min_runs": 10, "max_runs": 60, "budget_seconds": 30.0}


def test_timing_stops_when_two_windows_agree(tmp_path: Path) -> None:
    sess, feeds = _add_one_session(tmp_path)
    call = lambda: sess.run(None, feeds)  # noqa: E731
    sample, runs, stable, warm = time_runs(call, {**LATENCY, "stability": 10.0})  # any two windows agree within 1000%
    assert stable and runs == len(sample) == 2 * LATENCY["min_runs"]
    assert warm == LATENCY["warmup"]


def test_timing_stops_at_the_cap_when_the_median_never_settles(tmp_path: Path) -> None:
    sess, feeds = _add_one_session(tmp_path)
    call = lambda: sess.run(None, feeds)  # noqa: E731
    sample, runs, stable, _ = time_runs(call, {**LATENCY, "stability": 0.0})  # never "within 0%" unless exactly equal
    assert runs <= LATENCY["max_runs"] and runs % LATENCY["min_runs"] == 0
    assert stable or runs == LATENCY["max_runs"]  # stable only on an exact tie of two medians
    assert len(sample) == 2 * LATENCY["min_runs"]  # the figures come from the last two windows


def test_the_budget_wins_over_the_window_for_a_slow_model(tmp_path: Path) -> None:
    """A model whose one run outlasts the budget (a real transformer: 1.5 s) is timed a few runs, not
    warmup + 2 windows of them: one warm-up run and MIN_TIMED timed runs, even inside a window."""
    import onnxruntime

    from harness.run.backends.latency import MIN_TIMED

    x = np.random.default_rng(0).standard_normal((384, 384)).astype(np.float32)
    node = onnx.helper.make_node("MatMul", ["a", "b"], ["y"])
    nodes = [node] + [onnx.helper.make_node("MatMul", [f"y{i - 1}" if i else "y", "b"], [f"y{i}"]) for i in range(30)]
    graph = onnx.helper.make_graph(
        nodes,
        "slow",
        [onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [384, 384]) for n in ("a", "b")],
        [onnx.helper.make_tensor_value_info("y29", onnx.TensorProto.FLOAT, [384, 384])],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path / "slow.onnx"
    path.write_bytes(model.SerializeToString())
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = 1
    sess = onnxruntime.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
    feeds = {"a": x, "b": x / 20}
    # Far less than one run of this model (31 MatMuls of 384x384: 0.02 s a run on an AVX-512 core, ~0.1 s on others):
    # the first warm-up run alone spends more than half of it, on any CPU within 10x of the fastest measured.
    budget = 0.002
    sample, runs, stable, warm = time_runs(lambda: sess.run(None, feeds), {**LATENCY, "stability": 0.0, "budget_seconds": budget})
    assert (runs, len(sample), stable, warm) == (MIN_TIMED, MIN_TIMED, False, 1)
    sample, runs, stable, warm = time_runs(lambda: sess.run(None, feeds), {**LATENCY, "stability": 0.0, "budget_seconds": 0.0})
    assert (runs, warm) == (MIN_TIMED, 1)  # no budget at all still gives a median of MIN_TIMED runs


def test_placement_counts_nodes_per_provider_in_a_real_profile(tmp_path: Path) -> None:
    import onnxruntime

    from tests.artifacts import div_int_min

    path = tmp_path / "m.onnx"
    path.write_bytes(div_int_min().SerializeToString())
    so = onnxruntime.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "profile")
    sess = onnxruntime.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
    for _ in range(3):
        sess.run(None, {"a": np.array([4, 9], np.int32), "b": np.array([2, 3], np.int32)})
    assert placement(sess.end_profiling()) == {"CPUExecutionProvider": 1}
