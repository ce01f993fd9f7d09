"""Size-aware work on real exports and the real runtime: node values recorded on demand for a model over
[export] intermediates_mib, a debug model that references its weights, models saved with ONNX external
data end to end, reproducers that link the model (or, where only loading failed, hold no weights)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from harness.config.matrix import Profile, load
from harness.core.records import Status
from harness.export.stage import export_all
from harness.numeric import localize
from harness.publish import report
from harness.publish.repro import ZEROS
from harness.run.stage import run_runtime
from harness.store.layout import load_artifacts
from tests.artifacts import write_artifact, write_manifest

pytestmark = pytest.mark.torch  # exports with real torch: `nox -s tests`, not `nox -s unit`

ROOT = Path(__file__).resolve().parent.parent

WIDE = """
import torch
from harness.cases.corpus import Case, randn, register, seeded



class Wide(torch.nn.Module):
    '''256 KiB of weights: what makes a copy of them in the debug model visible.'''

    def __init__(self):
        super().__init__()
        seeded(0)
        self.lin = torch.nn.Linear(256, 256)

    def forward(self, x):
        return torch.relu(self.lin(x)).sum(-1, keepdim=True) * x[:, :1]


register(
    Case(name="wide", model=Wide, inputs=lambda: {"x": randn(1, 256)}, probes=lambda: {"batch4": {"x": randn(4, 256, seed=1)}})
)
"""

MISMATCHING = ["nan_chain", "layer_norm_no_keepdim", "data_dependent_branch"]


def _matrix(tmp: Path, **export: float):  # type: ignore[no-untyped-def]
    lines = "".join(f"{k} = {v}\n" for k, v in export.items())
    text = (ROOT / "matrix.toml").read_text().replace('onnxruntime = "1.32.0"\n', f'onnxruntime = "1.32.0"\n{lines}', 1)
    (tmp / "matrix.toml").write_text(text)
    return load(tmp / "matrix.toml")


def _export_and_run(tmp: Path, matrix, cases: list[str], extra: list[str], exporters=("torchscript", "dynamo")):  # type: ignore[no-untyped-def]
    newest = matrix.runtime(onnxruntime.__version__)
    profile = Profile("size", (newest,), ("cpu",), tuple(exporters), (18,))
    out = tmp / "build"
    export_all(
        matrix, profile, [*matrix.corpus, *extra], out, root=ROOT, cases=cases, echo=lambda _: None, echo_error=lambda _: None
    )
    cells = run_runtime(matrix, newest, ["cpu"], out, echo=lambda _: None)
    return out, profile, cells


@pytest.fixture(scope="module")
def eager_and_lazy(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    runs = {}
    for name, settings in (("eager", {}), ("lazy", {"intermediates_mib": 0})):
        tmp = tmp_path_factory.mktemp(name)
        runs[name] = _export_and_run(tmp, _matrix(tmp, **settings), MISMATCHING, [])
    return runs


def test_node_values_over_the_budget_are_recorded_on_demand_and_localize_the_same(eager_and_lazy) -> None:  # type: ignore[no-untyped-def]
    _, _, eager = eager_and_lazy["eager"]
    lazy_out, _, lazy = eager_and_lazy["lazy"]
    for rec in load_artifacts(lazy_out):
        art = lazy_out / "artifacts" / rec.key.id
        if rec.ok:
            assert not (art / localize.INTERMEDIATES).exists(), "no node values at export over the budget"
            assert json.loads((art / localize.LOCALIZATION).read_text())["intermediates"] == localize.ON_DEMAND
    mismatches = {c.key: c for c in eager if c.status is Status.MISMATCH}
    assert {k for k, c in ((c.key, c) for c in lazy) if c.status is Status.MISMATCH} == set(mismatches)
    assert len(mismatches) >= 5
    for cell in lazy:
        if cell.status is Status.MISMATCH:
            assert cell.localization == mismatches[cell.key].localization, cell.key
            assert cell.optimizer == mismatches[cell.key].optimizer
            assert "not recorded" not in (cell.note or ""), cell.note
    # One file per mismatching artifact × probe, recorded once by the export environment's reference runtime.
    recorded = sorted(p.name for p in (lazy_out / "cache" / "reference").rglob("*.npz"))
    assert recorded and len(recorded) <= len(mismatches) and all(not n.endswith(".tmp.npz") for n in recorded)
    # The torch-side finding of a dynamo export whose graph is wrong is made at export, budget or not.
    torch_side = next(c for c in lazy if c.case == "nan_chain" and c.exporter == "dynamo" and c.status is Status.MISMATCH)
    assert "the graph differs from torch from FX value" in (torch_side.localization or "")


def test_without_the_export_environment_the_localization_says_so(eager_and_lazy, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    lazy_out, _, _ = eager_and_lazy["lazy"]
    art = next(a for a in (lazy_out / "artifacts").iterdir() if a.name == "layer_norm_no_keepdim.torchscript.op18")
    values, meta = localize.on_demand(art, "example", cache=tmp_path, python="/no/such/python", timeout=30)
    assert values == {} and meta["error"].startswith(
        "not recorded: this model's node values are recorded on demand by the export environment's reference runtime "
        "(/no/such/python), which this machine lacks"
    )


@pytest.fixture(scope="module")
def external(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("external")
    (tmp / "wide.py").write_text(WIDE)
    matrix = _matrix(tmp, external_data_mib=0.1)  # the 256 KiB model goes to model.onnx.data
    out, profile, cells = _export_and_run(tmp, matrix, ["wide"], [str(tmp / "wide.py")])
    results = tmp / "results"
    report.build(out, results, profile=profile, builtin=matrix.corpus)
    return out, cells, results


def test_a_model_over_the_threshold_uses_external_data_end_to_end(external) -> None:  # type: ignore[no-untyped-def]
    out, cells, results = external
    for exporter in ("torchscript", "dynamo"):
        art = out / "artifacts" / f"wide.{exporter}.op18"
        assert (art / "model.onnx.data").stat().st_size >= 256 * 256 * 4
        assert (art / "model.onnx").stat().st_size < 64 * 1024, "the weights are not in the protobuf"
        assert [p.name for p in art.iterdir() if p.suffix == ".bin" or p.name.startswith("onnx__")] == []
        rec = json.loads((art / "export.json").read_text())
        assert rec["data_sha256"] and rec["ok"]
        debug = onnx.load(str(art / localize.DEBUG_MODEL), load_external_data=False)
        locations = {e.value for i in debug.graph.initializer for e in i.external_data if e.key == "location"}
        assert locations == {"model.onnx.data"}, "the debug model reads the same weights"
        mine = {c.probe: c for c in cells if c.exporter == exporter}
        assert mine["example"].status is Status.PASS and mine["batch4"].status is Status.RUN_FAIL  # a frozen batch
        repro = results / "repro" / f"wide.{exporter}.op18"
        data = repro / "model.onnx.data"  # a copy (issue 26: never an inode an edit of the build would reach)
        assert not os.path.samefile(data, art / "model.onnx.data") and data.read_bytes() == (art / "model.onnx.data").read_bytes()
        proc = subprocess.run([sys.executable, str(repro / "repro.py")], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 1 and "batch4: RUN-FAIL" in proc.stdout and "example: PASS" in proc.stdout, proc.stdout


def test_the_debug_model_references_the_weights_of_an_inline_model(tmp_path: Path) -> None:
    (tmp_path / "wide.py").write_text(WIDE)
    out, _, _ = _export_and_run(tmp_path, _matrix(tmp_path), ["wide"], [str(tmp_path / "wide.py")], exporters=("torchscript",))
    art = out / "artifacts" / "wide.torchscript.op18"
    assert not (art / "model.onnx.data").exists()
    assert (art / localize.DEBUG_MODEL).stat().st_size < (art / "model.onnx").stat().st_size / 10
    # and it computes what the model computes: every value on the real runtime, the outputs equal
    sess = onnxruntime.InferenceSession(str(art / localize.DEBUG_MODEL), providers=["CPUExecutionProvider"])
    plain = onnxruntime.InferenceSession(str(art / "model.onnx"), providers=["CPUExecutionProvider"])
    x = {"x": np.random.default_rng(0).standard_normal((1, 256)).astype(np.float32)}
    assert len(sess.get_outputs()) > len(plain.get_outputs())
    np.testing.assert_array_equal(sess.run(None, x)[0], plain.run(None, x)[0])


def test_a_model_only_refused_at_load_is_reproduced_without_its_weights(tmp_path: Path) -> None:
    """Its reproducer holds the graph and a sparse file of zeros: the same refusal, no copy of the weights."""
    weights = helper.make_tensor("w", TensorProto.FLOAT, [64, 64], np.ones(64 * 64, np.float32).tobytes(), raw=True)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("NoSuchOp", ["h"], ["y"], domain="com.example")],
        "refused",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
        initializer=[weights],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)], ir_version=8
    )
    out = tmp_path / "build"
    x = np.ones((1, 64), np.float32)
    rec = write_artifact(out, "refused", model, {"example": {"x": x}}, {"example": [x]})
    write_manifest(out, [rec.key.id])
    matrix = load(ROOT / "matrix.toml")
    newest = matrix.runtime(onnxruntime.__version__)
    (cell,) = run_runtime(matrix, newest, ["cpu"], out, echo=lambda _: None, latency=False)
    assert cell.status is Status.LOAD_FAIL and "NoSuchOp" in (cell.error_line or "")
    results = tmp_path / "results"
    report.build(out, results, profile=Profile("refused", (newest,), ("cpu",), ("torchscript",), (17,)))
    repro = results / "repro" / rec.key.id
    zeros = repro / ZEROS
    assert zeros.stat().st_size == 64 * 64 * 4 and zeros.stat().st_blocks == 0, "zeros that take no disk"
    assert (repro / "model.onnx").stat().st_size < 1024 < (out / "artifacts" / rec.key.id / "model.onnx").stat().st_size
    proc = subprocess.run([sys.executable, str(repro / "repro.py")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stdout.splitlines()[1].startswith("LOAD-FAIL:") and "NoSuchOp" in proc.stdout
    assert "Weights: zeros (weights.zeros, a sparse file)" in (repro / "README.txt").read_text()
