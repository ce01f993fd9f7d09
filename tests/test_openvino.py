"""OpenVINO as a column: the real onnxruntime-openvino wheel and its OpenVINO execution provider on this x86 CPU.

The column is the registry's entry (harness/config/runtimes.py) and matrix.toml's: no backend code of its own. These
tests install the real wheel (OpenVINO's libraries inside it) into a real environment (uv) and run the real run
stage there over real ONNX models (tests/artifacts.py):

- the openvino column's cells pass, run by OpenVINO (the session holds it, its fused subgraph is in the
  placement, its own thread count and FP32 asked), beside the same package's CPU column;
- OpenVINO falls back to onnxruntime's CPU provider without a word for a device it lacks, or for a graph it
  takes nothing of (a ``Det``): both are ``unavailable``, never a pass.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from harness.config import runtimes
from harness.config.matrix import load
from harness.core.records import CellRecord, Status
from harness.run.stage import reusable
from harness.store import stamps
from tests.artifacts import IR_VERSION, OPSET, fault_corpus, runtime_env, write_artifact, write_manifest

ROOT = Path(__file__).resolve().parent.parent
OPENVINO = "1.24.1"  # the newest onnxruntime-openvino (OpenVINO 2025.4)
PIN = f"onnxruntime-openvino=={OPENVINO}"

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def ov_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding onnxruntime-openvino, numpy and the harness (no torch), as a `run` session would."""
    return runtime_env(tmp_path_factory.mktemp("ortov"), PIN, "numpy")


def determinant(relu: bool = False) -> onnx.ModelProto:
    """``y = det(x)`` of a float32 ``[3, 3]``: OpenVINO's provider takes no node of it (it claims no ``Det``), so
    onnxruntime runs it all on its CPU provider, quietly. With ``relu``, ``det(relu(x))``: OpenVINO takes the Relu,
    the CPU provider the Det."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Det", ["r"], ["y"])] if relu else []
    graph = helper.make_graph(
        nodes or [helper.make_node("Det", ["x"], ["y"])],
        "relu_det" if relu else "determinant",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return model


def _run(ov_env: Path, tmp: Path, options: str = 'device_type = "CPU"') -> dict[str, dict[str, CellRecord]]:
    """The run stage in the OpenVINO environment, on a profile of its two columns: {column: {case/probe: cell}}."""
    out = tmp / "build"
    ids = fault_corpus(out, only=["add_one"])
    x = np.diag([2.0, 3.0, 4.0]).astype(np.float32)
    want = {"example": [np.array(24.0, np.float32)]}
    write_artifact(out, "determinant", determinant(), {"example": {"x": x}}, want)
    write_artifact(out, "relu_det", determinant(relu=True), {"example": {"x": x}}, want)
    write_manifest(out, [*ids, "determinant.torchscript.op17", "relu_det.torchscript.op17"])
    text = (ROOT / "matrix.toml").read_text()
    default = '[providers.openvino]\noptions = { device_type = "CPU" }'
    assert default in text
    text = text.replace(default, f"[providers.openvino]\noptions = {{ {options} }}")
    profile = f'[profiles.ov-test]\nruntimes = ["{PIN}"]\nproviders = ["cpu", "openvino"]\n'
    profile += 'exporters = ["torchscript"]\nopsets = [17]\n\n'
    matrix = tmp / "matrix.toml"
    matrix.write_text(text.replace("[profiles.default]", f"{profile}[profiles.default]"))
    cmd = [str(ov_env), "-m", "harness", "run", "--matrix", str(matrix), "--profile", "ov-test", "--out", str(out)]
    cmd += ["--runtime", PIN]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    found: dict[str, dict[str, CellRecord]] = {}
    for column in ("cpu", "openvino"):
        path = out / "shards" / f"ortov-{OPENVINO}-{column}.jsonl"
        cells = [CellRecord.from_dict(json.loads(line)) for line in path.read_text().splitlines()]
        found[column] = {f"{c.case}/{c.probe}": c for c in cells}
    return found


@pytest.fixture(scope="module")
def cells(ov_env: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, CellRecord]]:
    return _run(ov_env, tmp_path_factory.mktemp("ov"))


def test_openvino_runs_the_cells_itself_and_they_pass(cells: dict[str, dict[str, CellRecord]]) -> None:
    for probe in ("example", "second"):
        c = cells["openvino"][f"add_one/{probe}"]
        assert c.status is Status.PASS, c.error_line
        assert c.providers_used[0] == "OpenVINOExecutionProvider"
        assert c.placement.get("OpenVINOExecutionProvider", 0) >= 1  # its fused subgraph ran the Add
        assert c.env["package"] == "onnxruntime-openvino" and c.env["onnxruntime"] == OPENVINO
        assert "OpenVINOExecutionProvider" in c.env["available_providers"]
    timed = cells["openvino"]["add_one/example"].latency
    assert timed is not None and timed.runs >= 3 and timed.copies == "host"  # no device of its own to bind to
    assert {c.status for c in cells["cpu"].values()} == {Status.PASS}  # the same package's CPU provider: the control
    assert all(c.providers_used == ("CPUExecutionProvider",) for c in cells["cpu"].values())


def test_a_graph_openvino_takes_nothing_of_is_unavailable_never_a_pass(cells: dict[str, dict[str, CellRecord]]) -> None:
    c = cells["openvino"]["determinant/example"]
    assert c.status is Status.UNAVAILABLE and c.error_class == "ProviderTookNoNode"
    assert c.error_line == "OpenVINOExecutionProvider took none of the session's 1 nodes: they ran on CPUExecutionProvider"
    assert reusable(c, c.cache_key or "")  # the artifact and the provider's version decide it: a rerun keeps it
    assert c.placement == {"CPUExecutionProvider": 1}
    assert cells["cpu"]["determinant/example"].status is Status.PASS  # the model itself is fine


def test_a_graph_openvino_takes_part_of_says_how_it_was_split(cells: dict[str, dict[str, CellRecord]]) -> None:
    c = cells["openvino"]["relu_det/example"]
    assert c.status is Status.PASS and c.placement == {"OpenVINOExecutionProvider": 1, "CPUExecutionProvider": 1}
    assert c.note == (
        "partly placed: OpenVINOExecutionProvider 1, CPUExecutionProvider 1 of the session's 2 nodes "
        "(a fused subgraph counts as one)"
    )
    assert cells["cpu"]["relu_det/example"].note is None  # one provider: nothing to say


def test_a_device_openvino_lacks_falls_back_quietly_and_is_unavailable(ov_env: Path, tmp_path: Path) -> None:
    found = _run(ov_env, tmp_path, 'device_type = "GPU"')  # this machine has no Intel GPU
    assert {c.status for c in found["openvino"].values()} == {Status.UNAVAILABLE}
    for c in found["openvino"].values():
        assert c.error_line == "OpenVINOExecutionProvider was requested but the session fell back to CPUExecutionProvider"
        assert c.error_class == "ProviderFellBack" and not reusable(c, c.cache_key or "")  # a device can appear: checked again
        assert c.latency is None  # a fallback is never timed as the provider's latency
    assert {c.status for c in found["cpu"].values()} == {Status.PASS}


def test_the_column_is_the_registry_entry_and_matrix_toml() -> None:
    """What a session of the column is given comes from data: matrix.toml's device, the registry's FP32 and
    thread option; its cells' keys name its own entries, no other kind's."""
    from harness.run.backends.onnxruntime import session_providers

    matrix = load(ROOT / "matrix.toml")
    rt = matrix.runtime(PIN)
    assert rt.id == f"ortov-{OPENVINO}" and rt.kind.columns() == ("cpu", "openvino") and not rt.gpu
    options = matrix.options("openvino", rt.kind)
    assert options == {"device_type": "CPU", "precision": "FP32"}
    assert session_providers("openvino", options, threads=1) == [
        ("OpenVINOExecutionProvider", {"device_type": "CPU", "precision": "FP32", "num_of_threads": 1})
    ]
    assert matrix.run.workers_for(runtimes.provider("openvino")) == matrix.run.worker_count  # the CPU's cores, not a GPU's share
    settings = stamps.run_settings(matrix, "openvino", rt)
    assert settings["registry"]["provider"]["name"] == "openvino" and settings["registry"]["kind"]["package"] == rt.package
    assert "releases" not in settings["registry"]["kind"]  # a new release of it reruns nothing
