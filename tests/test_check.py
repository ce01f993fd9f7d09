"""`harness check`: a file the project never exported (or one module) on real runtimes, predicted then measured.

The files are written here as a user's would be: with onnx's helper, by plain ``torch.onnx.export``, and quantized by
onnxruntime's own quantizer. The measured tests make real runtime environments with uv (``build/check/envs``, kept
between runs as nox keeps its own) and run real onnxruntime releases; the action's steps run locally as GitHub would
run them, its ``uses:`` steps aside (setup-python: this Python; cache: a speed-up).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.check import answer, onnxinfo

ROOT = Path(__file__).resolve().parent.parent
ENVS = ROOT / "build" / "check" / "envs"
SCHEMA = json.loads((ROOT / "docs" / "schemas" / "harness.check-1.schema.json").read_text())
FRONTIER = json.loads((ROOT / "results" / "frontier.json").read_text())


def harness(*args: str, cwd: Path = ROOT, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUTF8": "1"}
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env
    )


def check(*args: str, cwd: Path = ROOT) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``harness check ... --json``: the process and its answer, validated against the documented schema."""
    import jsonschema

    extra = ["--envs", str(ENVS), "--matrix", str(ROOT / "matrix.toml"), "--results", str(ROOT / "results")]
    proc = harness("check", *args, *extra, "--json", cwd=cwd)
    assert proc.returncode in (0, 1, 2), proc.stderr
    data = json.loads(proc.stdout)
    jsonschema.validate(data, SCHEMA)
    assert data["exit"] == proc.returncode
    return proc, data


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("harness: error: ") and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def _model(
    path: Path,
    nodes: list[Any],
    inputs: list[Any],
    outputs: list[Any],
    inits: tuple[Any, ...] = (),
    opset: int = 17,
    ir: int = 8,
    extra_opsets: dict[str, int] | None = None,
) -> Path:
    import onnx
    from onnx import helper

    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    imports = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, v) for d, v in (extra_opsets or {}).items())]
    onnx.save(helper.make_model(graph, opset_imports=imports, ir_version=ir), str(path))
    return path


def pool_file(path: Path, ceil: bool) -> Path:
    """AveragePool 3x3 / stride 2 on 10x10: with ``ceil_mode`` the last window hangs over the edge, which onnxruntime
    before 1.29 divides by the full kernel (the published table's avg_pool_ceil_mode); without it, nothing does."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 2, 10, 10])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node(
            "AveragePool", ["r"], ["p"], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=int(ceil), count_include_pad=1
        ),
        helper.make_node("Sigmoid", ["p"], ["y"]),
    ]
    return _model(path, nodes, [x], [y])


# What the file declares, read without onnx --------------------------------------------------------------------------


def test_the_file_is_read_as_onnx_reads_it_subgraphs_domains_and_external_data_included(tmp_path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    then = helper.make_graph([helper.make_node("Neg", ["x"], ["t"])], "then", [], [helper.make_tensor_value_info("t", 1, None)])
    other = helper.make_graph([helper.make_node("Abs", ["x"], ["e"])], "else", [], [helper.make_tensor_value_info("e", 1, None)])
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "w")
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        helper.make_node("If", ["c"], ["i"], then_branch=then, else_branch=other),
        helper.make_node("MatMul", ["i", "w"], ["m"]),
        helper.make_node("Gelu", ["m"], ["y"], domain="com.microsoft"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    zero = numpy_helper.from_array(np.zeros((), np.float32), "zero")
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", None])
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y], [w, zero]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        ir_version=8,
    )
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    info = onnxinfo.read(path)
    loaded = onnx.load(str(path))
    assert info.ir_version == loaded.ir_version == 8
    assert info.opsets == {"ai.onnx": 17, "com.microsoft": 1} and info.opset == 17
    assert info.ops == {"ReduceSum": 1, "Greater": 1, "If": 1, "Neg": 1, "Abs": 1, "MatMul": 1, "com.microsoft::Gelu": 1}
    assert [v.words() for v in info.inputs] == ["x float32[batch,4]"]  # initializers are not inputs
    assert [v.words() for v in info.outputs] == ["y float32[batch,?]"]
    assert info.external == ("m.onnx.data",) and info.size == path.stat().st_size + (tmp_path / "m.onnx.data").stat().st_size


def test_bad_files_and_bad_options_are_one_line_and_exit_2(tmp_path: Path) -> None:
    good = pool_file(tmp_path / "pool.onnx", ceil=False)
    (tmp_path / "truncated.onnx").write_bytes(good.read_bytes()[:-7])
    (tmp_path / "text.onnx").write_text("hello\n")
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    weighted = helper.make_model(
        helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [helper.make_tensor_value_info("y", 1, [2, 4])], [w]
        ),
        opset_imports=[helper.make_opsetid("", 17)],
        ir_version=8,
    )
    onnx.save(weighted, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="ext.data", size_threshold=0)
    np.savez(tmp_path / "named.npz", z=np.ones((2, 2, 10, 10), np.float32))
    np.savez(tmp_path / "f64.npz", x=np.ones((2, 2, 10, 10)))
    np.savez(tmp_path / "shape.npz", x=np.ones((2, 2, 10, 9), np.float32))
    np.savez(tmp_path / "good.npz", x=np.ones((2, 2, 10, 10), np.float32))
    (tmp_path / "baseline.json").write_text(json.dumps({"schema": "harness.diff/1"}))
    cases = {
        ("truncated.onnx",): "the file is truncated",
        ("text.onnx",): "not an ONNX model",
        ("missing.onnx",): "no such file",
        ("pool.onnx", "--dim", "batch=two"): "write NAME=N",
        ("pool.onnx", "--dim", "bach=2"): "has no such dim",
        ("pool.onnx",): "bind it with --dim batch=N",
        ("pool.onnx", "--inputs", "named.npz"): "'z', which is not an input",
        ("pool.onnx", "--inputs", "f64.npz"): "is float64, the model takes float32",
        ("pool.onnx", "--inputs", "shape.npz"): "has 9 on axis 3, the model's is fixed at 10",
        ("pool.onnx", "--inputs", "good.npz", "--expected", "named.npz"): "lacks output 'y'",
        ("pool.onnx", "--dim", "batch=2", "--expected", "good.npz"): "one expected .npz per --inputs file",
        ("pool.onnx", "--baseline", "baseline.json"): "not a harness.check/1 answer",
        ("pool.onnx", "--runtime", "9.9.9"): "no runtime '9.9.9'",
        ("pool.onnx", "--platform", "x86-64-v9"): "not a platform",
        ("pool.onnx", "--input", "x=1x2"): "a module spec's",
    }
    (tmp_path / "ext.data").rename(tmp_path / "ext.moved")
    cases[("ext.onnx",)] = "not beside it"
    for args, said in cases.items():
        proc = harness("check", *args, "--matrix", str(ROOT / "matrix.toml"), "--results", str(ROOT / "results"), cwd=tmp_path)
        assert said in one_line(proc), (args, proc.stderr)
        refused = harness("check", *args, "--json", "--matrix", str(ROOT / "matrix.toml"), cwd=tmp_path)
        assert json.loads(refused.stdout) == {"schema": "harness.check/1", "error": one_line(refused)[16:], "exit": 2}


def test_the_predicted_answer_is_the_measured_frontier_of_each_runtime(tmp_path: Path) -> None:
    """Before any runtime starts: IR 8 / opset 17 against every runtime's published frontier, and IR 10 / opset 21."""
    old = pool_file(tmp_path / "old.onnx", ceil=False)
    proc, data = check(str(old), "--predict")
    assert data["measured"] is False and data["reference"]["kind"] == "none"
    for entry in data["runtimes"]:
        frontier = FRONTIER[entry["runtime"]]
        within = frontier["max_ir"] >= 8 and frontier["max_opset"] >= 17 and [8, 17] not in frontier["refused"]
        assert entry["predicted"]["loads"] is within, entry
        assert entry["loads"] == {"max_ir": frontier["max_ir"], "max_opset": frontier["max_opset"]}
    assert data["failed"] == ["onnxruntime==1.10.0", "onnxruntime==1.11.1"] and proc.returncode == 1
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", 1, [2])
    new = _model(tmp_path / "new.onnx", [helper.make_node("Relu", ["x"], ["y"])], [x], [y], opset=21, ir=10)
    _, data = check(str(new), "--predict", "--runtime", "1.17.3", "--runtime", "1.18.1")
    said = {e["runtime"]: e["predicted"] for e in data["runtimes"]}
    assert said["onnxruntime==1.17.3"] == {
        "loads": False,
        "why": "1.17.3 loads up to IR 9 / opset 20; the model is IR 10 and opset 21",
    }
    assert said["onnxruntime==1.18.1"]["loads"] is True
    text = harness("check", str(new), "--predict", "--runtime", "1.17.3").stdout
    assert "| 1.17.3 | refused | 1.17.3 loads up to IR 9 / opset 20" in text


def test_a_baseline_fails_only_on_a_regression() -> None:
    """:func:`answer.compare` over two answers of the same runtimes: passed → failed is a regression; failed → failed,
    failed → passed and a runtime new to the check are not."""
    old = {
        "runtimes": [{"runtime": r, "status": s, "error_line": ""} for r, s in (("a", "pass"), ("b", "load-fail"), ("c", "pass"))]
    }
    now = (("a", "mismatch", "made: 3/8 differ"), ("b", "load-fail", ""), ("c", "pass", ""), ("d", "run-fail", ""))
    new = {"runtimes": [{"runtime": r, "status": s, "error_line": e} for r, s, e in now]}
    found = answer.compare(old, new)
    assert found["regressions"] == [{"runtime": "a", "old": "pass", "new": "mismatch", "why": "made: 3/8 differ"}]
    assert found["still_failing"] == ["b"] and found["new"] == ["d"] and not found["fixes"] and not found["gone"]
    assert answer.compare(new, old)["fixes"] == ["a"] and not answer.compare(new, old)["regressions"]


# Measured on real runtimes ----------------------------------------------------------------------------------------


@pytest.mark.e2e
def test_a_mismatch_is_localized_reproduced_and_gated_by_a_baseline(tmp_path: Path) -> None:
    """The published gotcha avg_pool_ceil_mode, in a file written by hand: 1.20.1 departs from the specification at the
    AveragePool (the node, by name), 1.32.0 agrees; the reproducer shows it with the runtime alone; against the answer
    of the file before the "refactor" that introduced ceil_mode, 1.20.1 is a regression and nothing else is."""
    before = pool_file(tmp_path / "before.onnx", ceil=False)
    after = pool_file(tmp_path / "after.onnx", ceil=True)
    runtimes = ["--runtime", "1.20.1", "--runtime", "1.32.0", "--dim", "batch=2"]
    proc, old = check(str(before), *runtimes, "--out", str(tmp_path / "before"))
    assert proc.returncode == 0 and old["passed"] == ["onnxruntime==1.20.1", "onnxruntime==1.32.0"]
    assert old["reference"]["kind"] == "specification" and "ONNX reference evaluator" in old["reference"]["said"]
    proc, new = check(
        str(after), *runtimes, "--out", str(tmp_path / "after"), "--baseline", str(tmp_path / "before" / "check.json")
    )
    assert proc.returncode == 1
    rows = {e["runtime"]: e for e in new["runtimes"]}
    bad, good = rows["onnxruntime==1.20.1"], rows["onnxruntime==1.32.0"]
    assert good["status"] == "pass" and good["max_abs"] < 1e-6
    assert bad["status"] == "mismatch" and bad["loaded"] and bad["ran"] and not bad["agrees"] and bad["predicted_agrees"]
    assert "first node that differs: #1 (AveragePool), output p" in bad["localization"]
    assert new["baseline"]["regressions"] == [
        {"runtime": "onnxruntime==1.20.1", "old": "pass", "new": "mismatch", "why": bad["error_line"]}
    ]
    repro = Path(bad["repro"])
    assert sorted(p.name for p in repro.iterdir()) == ["README.md", "expected.npz", "inputs.npz", "model.onnx", "repro.py"]
    assert '"onnxruntime==1.20.1"' in (repro / "README.md").read_text()
    shown = subprocess.run([str(ENVS / "ort-1.20.1" / "bin" / "python"), "repro.py"], cwd=repro, capture_output=True, text=True)
    assert "onnxruntime 1.20.1" in shown.stdout and "output 0: DIFFERS" in shown.stdout, shown.stderr
    # The same file against its own answer: still failing, no regression, exit 0.
    proc, again = check(
        str(after), *runtimes, "--out", str(tmp_path / "again"), "--baseline", str(tmp_path / "after" / "check.json")
    )
    assert proc.returncode == 0 and again["baseline"]["still_failing"] == ["onnxruntime==1.20.1"]
    screen = harness("check", str(after), *runtimes, "--envs", str(ENVS), "--out", str(tmp_path / "screen")).stdout
    assert "| 1.20.1 | loads | yes | yes | NO |" in screen and "1 of 2 runtimes pass; not: 1.20.1" in screen


@pytest.mark.e2e
def test_without_an_answer_from_the_specification_the_runtimes_agreement_is_said(tmp_path: Path) -> None:
    """com.microsoft's Gelu: onnxruntime's own op, which the reference evaluator does not have."""
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])
    path = _model(
        tmp_path / "gelu.onnx",
        [helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")],
        [x],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])],
        extra_opsets={"com.microsoft": 1},
    )
    proc, data = check(str(path), "--runtime", "1.20.1", "--runtime", "1.32.0")
    assert proc.returncode == 0 and data["reference"]["kind"] == "agreement"
    assert data["reference"]["said"].startswith("agreement among the runtimes: 2 of 2 that ran agree with onnxruntime==1.32.0")
    assert "Gelu" in data["reference"]["said"]  # why the evaluator could not answer


@pytest.mark.e2e
@pytest.mark.torch
@pytest.mark.filterwarnings("ignore:You are using the legacy TorchScript-based ONNX export:DeprecationWarning")
def test_a_plain_torch_export_and_its_quantized_file(tmp_path: Path) -> None:
    """A file written by plain ``torch.onnx.export`` (TorchScript, opset 17, a dynamic batch) on the user's own inputs
    and torch's outputs: refused where the frontier says (1.11.1, on Python 3.9), passes elsewhere. Then the same file
    quantized by onnxruntime's quantizer (int8 dynamic): the int8 tolerance, and ConvInteger, which onnxruntime's CPU
    provider lacks before 1.32 (docs/quantized.md): predicted to load on 1.20.1, measured refused there — a
    disagreement the answer states, not one it hides."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 10)
    ).eval()
    x = torch.randn(2, 3, 8, 8)
    path = tmp_path / "net.onnx"
    torch.onnx.export(
        net,
        (x,),
        str(path),
        dynamo=False,
        opset_version=17,
        input_names=["x"],
        output_names=["y"],
        dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}},
    )
    sample = torch.randn(5, 3, 8, 8)
    np.savez(tmp_path / "sample.npz", x=sample.numpy())
    with torch.no_grad():
        np.savez(tmp_path / "sample.out.npz", y=net(sample).numpy())
    runtimes = ["--runtime", "1.11.1", "--runtime", "1.20.1", "--runtime", "1.32.0"]
    proc, data = check(
        str(path), *runtimes, "--inputs", str(tmp_path / "sample.npz"), "--expected", str(tmp_path / "sample.out.npz")
    )
    assert data["reference"]["kind"] == "expected" and data["probes"] == {"sample": {"x": [5, 3, 8, 8]}}
    status = {e["runtime"]: e["status"] for e in data["runtimes"]}
    assert status == {"onnxruntime==1.11.1": "load-fail", "onnxruntime==1.20.1": "pass", "onnxruntime==1.32.0": "pass"}
    assert all(e["predicted_agrees"] for e in data["runtimes"]) and not data["disagreements"] and proc.returncode == 1
    assert data["file"]["producer"].startswith("pytorch")

    quantized = tmp_path / "net.int8.onnx"
    quantize_dynamic(str(path), str(quantized), weight_type=QuantType.QInt8)
    proc, data = check(str(quantized), "--runtime", "1.20.1", "--runtime", "1.32.0", "--dim", "batch=3")
    assert "ConvInteger" in data["file"]["ops"] and data["tolerance"]["why"].startswith("int8 ops")
    rows = {e["runtime"]: e for e in data["runtimes"]}
    assert rows["onnxruntime==1.32.0"]["status"] == "pass", rows["onnxruntime==1.32.0"]
    refused = rows["onnxruntime==1.20.1"]
    assert refused["status"] == "load-fail" and "ConvInteger" in refused["error_line"] and refused["predicted"]["loads"] is True
    assert data["disagreements"] == [
        {"runtime": "onnxruntime==1.20.1", "predicted": True, "loaded": False, "why": refused["error_line"]}
    ]
    text = harness("check", str(quantized), "--runtime", "1.20.1", "--dim", "batch=3", "--envs", str(ENVS)).stdout
    assert "predicted loads but measured refused on 1.20.1: " in text


@pytest.mark.e2e
@pytest.mark.torch
def test_a_module_spec_is_exported_by_both_exporters_and_checked(tmp_path: Path) -> None:
    (tmp_path / "mynet.py").write_text(
        "import torch\n\n\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(6, 3)\n\n"
        "    def forward(self, x):\n"
        "        return torch.softmax(self.fc(x), -1)\n\n\n"
        "def make():\n"
        "    return Net()\n\n\n"
        "def not_a_module():\n"
        "    return 3\n"
    )
    proc, data = check(
        "mynet:make",
        "--input",
        "x=2x6",
        "--dynamic",
        "x:0",
        "--opset",
        "18",
        "--runtime",
        "1.20.1",
        "--runtime",
        "1.32.0",
        "--out",
        str(tmp_path / "out"),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert [(e["exporter"], e["opset"], e["status"]) for e in data["exports"]] == [
        ("torchscript", 18, "checked"),
        ("dynamo", 18, "checked"),
    ]
    for e in data["exports"]:
        assert e["check"]["reference"]["kind"] == "expected" and "batch3" in e["check"]["probes"]  # torch's outputs, batch 3 too
    assert data["ship"]["onnxruntime==1.32.0"]["opset"] == 18 and (tmp_path / "out" / "check.json").is_file()
    where = ["--matrix", str(ROOT / "matrix.toml"), "--results", str(ROOT / "results")]
    for spec, said in {
        "nomodule:make": "nomodule does not import: ModuleNotFoundError",
        "mynet:missing": "mynet has no 'missing'",
        "mynet:not_a_module": "returned a int, not a torch.nn.Module",
    }.items():
        assert said in one_line(harness("check", spec, "--input", "x=2x6", "--runtime", "1.32.0", *where, cwd=tmp_path))
    assert "--input 'x=2by6'" in one_line(harness("check", "mynet:make", "--input", "x=2by6", *where, cwd=tmp_path))
    assert "--dynamic 'y:0'" in one_line(
        harness("check", "mynet:make", "--input", "x=2x6", "--dynamic", "y:0", *where, cwd=tmp_path)
    )


# Your CI: the action ----------------------------------------------------------------------------------------------


def _action() -> dict[str, Any]:
    from tests.test_nightly import parse

    return parse(ROOT / "action.yml")


def test_the_action_and_the_example_workflow_are_valid_for_github() -> None:
    from tests.test_nightly import executable

    for path, schema in (
        (ROOT / "action.yml", "vendor.github-actions"),
        (ROOT / "examples" / "check-workflow.yml", "vendor.github-workflows"),
    ):
        done = subprocess.run(
            [executable("check-jsonschema"), "--builtin-schema", schema, str(path)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stdout + done.stderr
    steps = _action()["runs"]["steps"]
    for step in steps:  # inputs reach the script through env only: an expression in a script is an injection
        assert "${{" not in step.get("run", ""), step
    assert {s.get("uses", "").split("@")[0] for s in steps} == {"", "actions/setup-python", "actions/cache"}
    example = (ROOT / "examples" / "check-workflow.yml").read_text()
    assert "uses: " in example and "target: " in example and "baseline: " in example


@pytest.mark.e2e
def test_the_actions_steps_pass_locally(tmp_path: Path) -> None:
    """Every ``run:`` step of action.yml in order, in a workspace holding the caller's file, with the inputs as GitHub
    hands them (through env): the answer file, the outputs and the job summary; then a regression against it fails."""
    workspace = tmp_path / "workspace"
    (workspace / "models").mkdir(parents=True)
    pool_file(workspace / "models" / "net.onnx", ceil=False)
    inputs = {
        "target": "models/net.onnx",
        "args": "--dim batch=2",
        "runtimes": "1.20.1 1.32.0",
        "profile": "default",
        "baseline": "",
        "answer": "harness-check.json",
    }
    status, outputs, summary = _run_steps(inputs, workspace, tmp_path / "first")
    assert status == 0 and outputs == {"exit": "0", "answer": "harness-check.json"}
    data = json.loads((workspace / "harness-check.json").read_text())
    assert data["passed"] == ["onnxruntime==1.20.1", "onnxruntime==1.32.0"]
    assert "### harness check" in summary and "| 1.32.0 | loads | yes | yes | yes |" in summary
    (workspace / "baseline.json").write_text((workspace / "harness-check.json").read_text())
    pool_file(workspace / "models" / "net.onnx", ceil=True)  # the "harmless" refactor
    status, outputs, _ = _run_steps(dict(inputs, baseline="baseline.json"), workspace, tmp_path / "second")
    assert status == 1 and outputs["exit"] == "1"
    assert (
        json.loads((workspace / "harness-check.json").read_text())["baseline"]["regressions"][0]["runtime"]
        == "onnxruntime==1.20.1"
    )


def _run_steps(inputs: dict[str, str], workspace: Path, temp: Path) -> tuple[int, dict[str, str], str]:
    temp.mkdir()
    github = {
        "GITHUB_WORKSPACE": str(workspace),
        "RUNNER_TEMP": str(temp),
        "GITHUB_OUTPUT": str(temp / "output"),
        "GITHUB_STEP_SUMMARY": str(temp / "summary.md"),
        "GITHUB_ACTION_PATH": str(ROOT),
    }
    status = 0
    for step in _action()["runs"]["steps"]:
        if "run" not in step:
            continue
        # actions/setup-python puts its Python (with pip) first on PATH: this interpreter's base installation here
        env = {**os.environ, **github, "PATH": f"{Path(sys._base_executable).parent}{os.pathsep}{os.environ['PATH']}"}
        for key, value in (step.get("env") or {}).items():
            value = str(value).replace("${{ github.action_path }}", str(ROOT))
            for name, given in inputs.items():
                value = value.replace(f"${{{{ inputs.{name} }}}}", given)
            env[key] = value
        done = subprocess.run(["bash", "-c", step["run"]], cwd=workspace, env=env, capture_output=True, text=True, timeout=900)
        status = done.returncode
        if step.get("id") != "check":
            assert status == 0, done.stderr
    outputs = dict(line.split("=", 1) for line in (temp / "output").read_text().splitlines())
    return status, outputs, (temp / "summary.md").read_text()


def test_when_every_runtime_disagrees_with_the_evaluator_and_agrees_with_each_other_the_answer_says_so() -> None:
    """The evaluator is a third opinion, not an oracle (onnx 1.23's QuantizeLinear once turned inf into 0): a
    unanimous disagreement is said, not published as every runtime's fault; one runtime agreeing with it is not."""
    from harness.check import stage
    from harness.config.matrix import load

    matrix = load(ROOT / "matrix.toml")
    tol = {"atol": 1e-4, "rtol": 1e-3, "scaled": 1e-5}

    def row(version: str, value: float, status: str) -> stage.Row:
        r = stage.Row(matrix.runtime(version), {"loads": True, "why": ""}, status=status, stage="run")
        r.probes["made"] = {"ok": True}
        r.outputs["made"] = [np.full((2, 3), value, np.float32)]
        return r

    ref = {"kind": stage.SPEC, "said": ""}
    unanimous = [row("1.20.1", 1.0, "mismatch"), row("1.32.0", 1.0, "mismatch")]
    assert "the evaluator may be the one that is wrong" in stage._doubts(unanimous, ref, tol)[0]
    assert not stage._doubts([row("1.20.1", 1.0, "mismatch"), row("1.32.0", 2.0, "mismatch")], ref, tol)
    assert not stage._doubts([row("1.20.1", 1.0, "mismatch"), row("1.32.0", 0.0, "pass")], ref, tol)
    assert not stage._doubts(unanimous, {"kind": stage.EXPECTED, "said": ""}, tol)


@pytest.mark.e2e
def test_the_cpu_the_file_ships_to_is_a_platform_row(tmp_path: Path) -> None:
    """A quantized Linear whose weights are all large and of one sign (the quantized table's int8_u8s8_saturation),
    on an AVX2 CPU without VNNI (x86-64-v3: qemu's Haswell): the u8 × s8 sums saturate 16 bits and the file's answer
    is not the specification's, at the MatMulInteger; the row says it was emulated and is named with its platform."""
    from harness.config import launchers

    if (why := launchers.problem("x86-64-v3")) is not None:
        pytest.skip(why)
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((1.0 + 0.01 * rng.random((64, 8))).astype(np.float32), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8])
    path = _model(tmp_path / "sat.onnx", [helper.make_node("MatMul", ["x", "w"], ["y"])], [x], [y], inits=(w,))
    quantize_dynamic(str(path), str(tmp_path / "sat.int8.onnx"), weight_type=QuantType.QInt8)
    np.savez(tmp_path / "near_top.npz", x=(0.95 + 0.02 * rng.standard_normal((4, 64))).astype(np.float32))
    proc, data = check(
        str(tmp_path / "sat.int8.onnx"),
        "--inputs",
        str(tmp_path / "near_top.npz"),
        "--runtime",
        "1.32.0",
        "--platform",
        "x86-64-v3",
    )
    (row,) = data["runtimes"]
    assert row["platform"] == "x86-64-v3" and row["how"].startswith("emulated: qemu-user") and "Haswell" in row["how"]
    assert row["status"] == "mismatch" and row["scaled_error"] > 0.2 and proc.returncode == 1
    assert "(MatMulInteger)" in row["localization"] and data["failed"] == ["onnxruntime==1.32.0@x86-64-v3"]
    assert Path(row["repro"]).name == "ort-1.32.0@x86-64-v3"
