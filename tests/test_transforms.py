"""The step after export (harness/transform, harness/config/transforms.py): the specification's answer on a transformed
file, its drift, the tables per transform and `recommend --transform`.

The references are checked against hand-computed values and against the newest onnxruntime; the end-to-end test runs
`nox -s matrix -- --profile smoke-quantized` (the pinned quantizer, the reference evaluator, a runtime, the reports).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.config import transforms
from harness.config.matrix import load
from harness.core.errors import HarnessError
from harness.core.records import CellRecord, Stage, Status
from harness.numeric import drift
from harness.publish import tables
from harness.transform import reference

ROOT = Path(__file__).resolve().parent.parent


# The specification's answer -------------------------------------------------------------------------------------


def _pack4(codes: np.ndarray) -> np.ndarray:
    """4-bit codes (N, blocks, block) → bytes, low nibble first, as MatMulNBits stores B."""
    flat = codes.reshape(codes.shape[0], codes.shape[1], -1, 2).astype(np.uint8)
    return (flat[..., 0] | (flat[..., 1] << 4)).astype(np.uint8)


def _nbits_case(zero_points: bool, k: int = 20, n: int = 3, block: int = 16) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    blocks = -(-k // block)
    codes = rng.integers(0, 16, size=(n, blocks, block))
    codes[:, -1, k - (blocks - 1) * block :] = 0  # the padding of the last block, as the quantizer writes it
    scales = rng.uniform(0.05, 0.2, size=(n, blocks)).astype(np.float32)
    zps = rng.integers(0, 16, size=(n, blocks)) if zero_points else np.full((n, blocks), 8)
    a = rng.standard_normal((2, k)).astype(np.float32)
    # Hand-computed: W[n, k] = (code - zero point) * scale of its block, only the first K rows.
    w = np.zeros((n, k))
    for i in range(n):
        for j in range(k):
            w[i, j] = (codes[i, j // block, j % block] - zps[i, j // block]) * scales[i, j // block]
    out = {"a": a, "b": _pack4(codes), "scales": scales.reshape(-1), "want": (a.astype(np.float64) @ w.T).astype(np.float32)}
    if zero_points:
        packed = np.zeros((n, -(-blocks // 2)), dtype=np.uint8)
        for i in range(n):
            for j in range(blocks):
                packed[i, j // 2] |= np.uint8(zps[i, j] << (4 * (j % 2)))
        out["zero_points"] = packed.reshape(-1)
    return out


@pytest.mark.parametrize("zero_points", [False, True])
def test_matmul_nbits_reference_is_its_documented_semantics(zero_points: bool) -> None:
    """MatMulNBits by hand (codes, scales, packed zero points, K = 20 over blocks of 16: a padded last block) and by
    the reference; then onnxruntime's kernel on the same node agrees with both."""
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    c = _nbits_case(zero_points)
    got = reference.matmul_nbits(c["a"], c["b"], c["scales"], c.get("zero_points"), K=20, N=3, bits=4, block_size=16)
    np.testing.assert_allclose(got, c["want"], rtol=1e-5, atol=1e-5)
    from onnx import TensorProto, helper, numpy_helper

    inputs = ["a", "B", "scales", *(["zp"] if zero_points else [])]
    node = helper.make_node("MatMulNBits", inputs, ["y"], domain="com.microsoft", K=20, N=3, bits=4, block_size=16)
    inits = [numpy_helper.from_array(c["b"], "B"), numpy_helper.from_array(c["scales"], "scales")]
    if zero_points:
        inits.append(numpy_helper.from_array(c["zero_points"], "zp"))
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    spec = reference.evaluator(model).run(None, {"a": c["a"]})[0]
    np.testing.assert_allclose(spec, c["want"], rtol=1e-5, atol=1e-5)
    runtime = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": c["a"]})[0]
    np.testing.assert_allclose(runtime, c["want"], rtol=1e-4, atol=1e-4)
    assert onnx.__version__


def test_quantize_saturates_infinities_and_rounds_half_to_even() -> None:
    """QuantizeLinear as the specification defines it: an infinite input saturates (onnx 1.23's evaluator gives 0,
    which made a quantized RMSNorm look like a runtime bug), after the zero point is added; halves round to even."""
    x = np.array([np.inf, -np.inf, 0.5, 1.5, 2.5, -0.5, np.nan, 1e9], dtype=np.float32)
    u8 = reference.quantize(x, np.array(1.0, np.float32), np.array(0, np.uint8))
    assert u8.tolist() == [255, 0, 0, 2, 2, 0, 0, 255]
    s8 = reference.quantize(x, np.array(1.0, np.float32), np.array(-128, np.int8))
    assert s8.tolist() == [127, -128, -128, -126, -126, -128, -128, 127]
    per_axis = reference.quantize(
        np.ones((2, 3), np.float32), np.array([1.0, 0.5, 0.25], np.float32), np.array([0, 1, 2], np.int8), axis=1
    )
    assert per_axis.tolist() == [[1, 3, 6], [1, 3, 6]]


def test_the_evaluator_answers_old_quantization_ops_and_agrees_with_onnxruntime() -> None:
    """A QDQ file of opset 17 (QuantizeLinear-13, which onnx 1.23's evaluator has no implementation of) is answered,
    and on finite values as onnxruntime computes it."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    nodes = [
        helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
        helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]),
    ]
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(np.array(3, np.uint8), "z")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = np.array([-1.0, 0.04, 0.05, 0.15, 30.0], np.float32)
    spec = reference.evaluator(model).run(None, {"x": x})[0]
    runtime = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(spec, runtime, atol=1e-7)
    np.testing.assert_allclose(spec, [-0.3, 0.0, 0.0, 0.2, 25.2], atol=1e-6)


# Configuration --------------------------------------------------------------------------------------------------


def _matrix(tmp_path: Path, profile: str, top: str = "") -> Path:
    text = (ROOT / "matrix.toml").read_text()
    text = text.replace("[profiles.smoke-quantized]", f"{profile}\n\n[profiles.smoke-quantized]", 1)
    text = text.replace("[transforms]\n", f"[transforms]\n{top}", 1) if top else text
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    for name in ("models",):
        (tmp_path / name).symlink_to(ROOT / name)
    return path


@pytest.mark.parametrize(
    ("profile", "pattern"),
    [
        ('[profiles.t]\nruntimes = ["onnxruntime==1.32.0"]\nopsets = [17]\ntransforms = ["int9"]', "unknown transform 'int9'"),
        (
            '[profiles.t]\nruntimes = ["onnxruntime==1.32.0"]\nopsets = [17]\ntransforms = ["fp16", "fp16"]',
            "lists 'fp16' twice; remove the duplicate",
        ),
        (
            '[profiles.t]\nruntimes = ["onnxruntime==1.32.0"]\nopsets = [17]\ntorch = ["2.13.0"]\ntransforms = ["fp16"]',
            "transforms and torch releases in one profile are not supported",
        ),
    ],
)
def test_a_bad_transforms_key_is_one_line(tmp_path: Path, profile: str, pattern: str) -> None:
    with pytest.raises(HarnessError, match=pattern) as err:
        load(_matrix(tmp_path, profile))
    assert "\n" not in str(err.value)


def test_an_unpinned_transform_tool_is_refused(tmp_path: Path) -> None:
    text = (ROOT / "matrix.toml").read_text().replace('"onnxconverter-common==1.16.0"', '"onnxconverter-common>=1.16"', 1)
    (tmp_path / "matrix.toml").write_text(text)
    (tmp_path / "models").symlink_to(ROOT / "models")
    with pytest.raises(HarnessError, match=r"is not pinned; write name==X\.Y\.Z"):
        load(tmp_path / "matrix.toml")


def test_each_transform_states_its_rule_and_a_tolerance_at_least_an_int8_step_where_int8_computes() -> None:
    for t in transforms.CATALOG.values():
        assert t.rule and t.says and t.drift > 0 and t.scaled > 0
        if "int8" in t.name or t.settings.get("accuracy_level") == 4:
            assert t.scaled >= transforms.INT8_STEP
    assert load(ROOT / "matrix.toml").profile("quantized").transforms == tuple(transforms.CATALOG)


# Drift and the summary ------------------------------------------------------------------------------------------


def test_drift_is_at_the_output_s_scale_with_top1_for_scores() -> None:
    fp32 = [np.array([[1.0, 3.0, 2.0], [0.5, 0.1, 0.2]], np.float32)]
    got = [np.array([[1.0, 2.9, 3.0], [0.5, 0.1, 0.2]], np.float32)]
    d = drift.between(got, fp32)
    assert d is not None
    assert d["max_abs"] == pytest.approx(1.0) and d["max_rel"] == pytest.approx(1.0 / 3.0)
    assert d["top1"] == pytest.approx(0.5)
    assert drift.between([np.array([np.nan])], [np.array([1.0])])["max_rel"] == float("inf")  # type: ignore[index]
    assert drift.between([np.array([1, 2])], [np.array([1, 2, 3])]) is None
    assert drift.between([np.array([[3, 1]], np.int64)], [np.array([[3, 2]], np.int64)])["top1"] is None  # type: ignore[index]


def _cell(case: str, runtime: str, platform: str, status: Status) -> CellRecord:
    return CellRecord(case, "torchscript", 17, f"onnxruntime=={runtime}", f"cpu@{platform}", "example", status, Stage.COMPARE)


def test_the_summary_names_verdicts_that_change_with_the_runtime_or_the_platform() -> None:
    cells = [
        _cell("a", "1.20.1", "x86-64-v4", Status.PASS),
        _cell("a", "1.32.0", "x86-64-v4", Status.MISMATCH),
        _cell("a", "1.20.1", "x86-64-v3", Status.PASS),
        _cell("a", "1.32.0", "x86-64-v3", Status.MISMATCH),
        _cell("b", "1.32.0", "x86-64-v4", Status.PASS),
        _cell("b", "1.32.0", "aarch64", Status.MISMATCH),
        _cell("c", "1.32.0", "x86-64-v4", Status.PASS),
        _cell("c", "1.32.0", "aarch64", Status.PASS),
    ]
    table = tables.Table("int8-qdq-u8", Path("x"), None, cells, {}, {})
    found = {c["case"]: c["changes_with"] for c in tables.changes("int8-qdq-u8", table.folded())}
    assert found == {"a": ["runtime"], "b": ["platform"]}


# End to end -----------------------------------------------------------------------------------------------------


def _nox(*args: str, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    nox = shutil.which("nox") or str(Path(sys.executable).parent / "nox")
    cmd = [nox, "-f", str(ROOT / "noxfile.py"), "--envdir", str(ROOT / ".nox"), "-s", "matrix", "--", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.mark.e2e
def test_the_smoke_quantized_profile_end_to_end(tmp_path: Path) -> None:
    """Export, transform (the pinned quantizer), run, report: every cell of a transformed table names its transform,
    every cell that ran its drift; the records name the tool and its version; a second run makes nothing again; a
    changed fp32.npz is refused; recommend --transform answers from the table."""
    out, results = tmp_path / "build", tmp_path / "results"
    proc = _nox("--profile", "smoke-quantized", "--out", str(out), "--results", str(results))
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-4000:]
    profile = load(ROOT / "matrix.toml").profile("smoke-quantized")
    for name in profile.transforms:
        rows = [json.loads(line) for line in (results / name / "matrix.jsonl").read_text().splitlines()]
        assert rows and all(r["transform"] == name for r in rows)
        ran = [r for r in rows if r["status"] in ("pass", "mismatch")]
        assert ran and all("drift" in r and r["drift"]["limit"] == transforms.get(name).drift for r in ran)
        for art in (out / "transforms" / name / "artifacts").iterdir():
            rec = json.loads((art / "export.json").read_text())
            assert rec["transform"]["name"] == name and rec["transform"]["version"]
            assert rec["versions"]["transform:onnxruntime"] == load(ROOT / "matrix.toml").export.onnxruntime
    skipped = [json.loads(line) for line in (results / "int4-sym" / "matrix.jsonl").read_text().splitlines()]
    assert {r["case"] for r in skipped if r["status"] == "skipped"} == {"opset_baseline"}  # Gemm only: nothing 4-bit
    summary = json.loads((results / "transforms.json").read_text())
    assert [t["transform"] for t in summary["transforms"]] == list(profile.transforms)
    assert "## Verdicts that change with the runtime version or the platform" in (results / "README.md").read_text()
    again = _nox("--profile", "smoke-quantized", "--out", str(out), "--results", str(results))
    assert again.returncode == 0 and "artifact(s) to make" not in again.stdout + again.stderr
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    answer = subprocess.run(
        [sys.executable, "-m", "harness", "recommend", "--transform", "int8-qdq", "--runtime", "1.32.0", "--results",
         str(results), "--all"], capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert answer.returncode in (0, 1) and "Transformed with int8-qdq-u8" in answer.stdout, answer.stderr
    fp32 = next((out / "transforms" / "int8-qdq-u8" / "artifacts").iterdir()) / "fp32.npz"
    fp32.write_bytes(fp32.read_bytes() + b"\0")
    report = subprocess.run(
        [sys.executable, "-m", "harness", "report", "--matrix", str(ROOT / "matrix.toml"), "--profile", "smoke-quantized",
         "--out", str(out), "--transform", "int8-qdq-u8", "--results", str(results)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert report.returncode == 2 and "fp32.npz differs from its recorded hash" in report.stderr


def test_a_float16_op_is_computed_exactly_and_rounded_once_at_its_output() -> None:
    """[300, 300, -300, -300] · [300, 300, 300, 300] is 0; numpy's float16 arithmetic overflows on the partial sum
    (90,000 > 65,504) where neither the specification's op nor onnxruntime does."""
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    w = numpy_helper.from_array(np.full((4, 1), 300.0, np.float16), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [1, 1])], [w],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = np.array([[300.0, 300.0, -300.0, -300.0]], np.float16)
    with np.errstate(all="ignore"):
        naive = ReferenceEvaluator(model).run(None, {"x": x})[0]
    assert not np.isfinite(naive).all() or naive.item() == 0  # numpy's own float16 sum (how it fails depends on numpy)
    assert reference.evaluator(model).run(None, {"x": x})[0].item() == 0.0
    runtime = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert runtime.item() == 0.0
