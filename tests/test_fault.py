"""Whose fault a failing cell is (:mod:`harness.answer.fault`), on hand-made ONNX files judged for real: the spec's
answer by the ONNX checker and reference evaluator (:mod:`harness.spec`), the runtime's by the onnxruntime installed
here, with graph optimizations on and off. Four files, one per kind of answer: a file wrong per the spec, a file the
runtime alone fails (an int16 ``Max`` it has no kernel for), a file only the runtime's optimizer breaks (a layer norm
whose means drop their axis), and a file with an op the evaluator lacks (``com.microsoft`` ``FusedMatMul``). Then the
spec stage itself (cache, seal, plan), "fixed in", and the issue text each reproducer folder gets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper as h  # noqa: E402

from harness.answer import fault  # noqa: E402
from harness.config.matrix import load  # noqa: E402
from harness.core.records import CellRecord, ExportRecord, Stage, Status  # noqa: E402
from harness.numeric.compare import compare  # noqa: E402
from harness.spec import _evaluate  # noqa: E402
from harness.spec import stage as spec_stage  # noqa: E402
from harness.store import cache, layout, plan, spec  # noqa: E402
from tests.artifacts import write_artifact, write_manifest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PIN = f"onnxruntime=={ort.__version__}"


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], opset: int = 17, **kw: Any) -> Any:
    graph = h.make_graph(nodes, "g", inputs, outputs, initializer=kw.pop("initializer", []))
    extra = kw.pop("domains", [])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", opset), *extra], ir_version=8)


def _vec(name: str, elem: int = T.FLOAT, shape: list[Any] | None = None) -> Any:
    return h.make_tensor_value_info(name, elem, shape or [3])


def wrong_per_spec() -> tuple[Any, dict[str, np.ndarray], np.ndarray]:
    """``y = x + 1``, where torch computed ``x + 2``: the file disagrees with the model, whatever runs it."""
    one = h.make_tensor("one", T.FLOAT, [], [1.0])
    x = np.array([1.0, 2.0, 3.0], np.float32)
    return _model([h.make_node("Add", ["x", "one"], ["y"])], [_vec("x")], [_vec("y")], initializer=[one]), {"x": x}, x + 2


def runtime_only() -> tuple[Any, dict[str, np.ndarray], np.ndarray]:
    """int16 ``Max`` (opset 13 allows it): onnxruntime has no kernel for it and refuses the file at load."""
    a, b = np.array([1, -5, 7], np.int16), np.array([3, -9, 2], np.int16)
    model = _model(
        [h.make_node("Max", ["a", "b"], ["y"])], [_vec("a", T.INT16), _vec("b", T.INT16)], [_vec("y", T.INT16)], opset=13
    )
    return model, {"a": a, "b": b}, np.maximum(a, b)


def optimizer_only() -> tuple[Any, dict[str, np.ndarray], np.ndarray]:
    """A layer norm whose means drop their axis (``keepdims=0``) on a square input: the (8,) means broadcast along
    the last axis. onnxruntime's LayerNormFusion matches it anyway and normalizes each row by its own statistics."""
    inits = [
        h.make_tensor("axes", T.INT64, [1], [-1]),
        h.make_tensor("two", T.FLOAT, [], [2.0]),
        h.make_tensor("eps", T.FLOAT, [], [1e-5]),
        h.make_tensor("g", T.FLOAT, [8], np.linspace(0.5, 1.5, 8).tolist()),
        h.make_tensor("b", T.FLOAT, [8], np.linspace(-1, 1, 8).tolist()),
    ]
    nodes = [
        h.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=0),
        h.make_node("Sub", ["x", "m"], ["d"]),
        h.make_node("Pow", ["d", "two"], ["p"]),
        h.make_node("ReduceMean", ["p", "axes"], ["v"], keepdims=0),
        h.make_node("Add", ["v", "eps"], ["ve"]),
        h.make_node("Sqrt", ["ve"], ["s"]),
        h.make_node("Div", ["d", "s"], ["n"]),
        h.make_node("Mul", ["n", "g"], ["ng"]),
        h.make_node("Add", ["ng", "b"], ["y"]),
    ]
    model = _model(nodes, [_vec("x", shape=[8, 8])], [_vec("y", shape=[8, 8])], opset=18, initializer=inits)
    x = (np.random.default_rng(0).standard_normal((8, 8)) * 3 + np.arange(8)).astype(np.float32)
    d = x - x.mean(-1)  # what torch computes for x - x.mean(-1) (no keepdim): numpy broadcasts the same way
    y = d / np.sqrt((d**2).mean(-1) + 1e-5) * np.linspace(0.5, 1.5, 8) + np.linspace(-1, 1, 8)
    return model, {"x": x}, y.astype(np.float32)


def evaluator_lacks() -> tuple[Any, dict[str, np.ndarray], np.ndarray]:
    """onnxruntime's contrib op ``FusedMatMul`` (alpha 1), where torch computed twice the product: onnxruntime runs it
    and disagrees with torch, and the spec's evaluator has no such op, so nothing says whose fault that is."""
    a = np.eye(2, dtype=np.float32) * 3
    b = np.arange(4, dtype=np.float32).reshape(2, 2)
    model = _model(
        [h.make_node("FusedMatMul", ["a", "b"], ["y"], domain="com.microsoft", alpha=1.0)],
        [_vec("a", shape=[2, 2]), _vec("b", shape=[2, 2])],
        [_vec("y", shape=[2, 2])],
        domains=[h.make_opsetid("com.microsoft", 1)],
    )
    return model, {"a": a, "b": b}, 2 * a @ b


def _measure(model: Any, feeds: dict[str, np.ndarray], want: np.ndarray, optimize: bool = True) -> tuple[Status, str]:
    """The cell onnxruntime gives the file here: load, run, compare with torch's output by the cell's rule."""
    so = ort.SessionOptions()
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception as exc:
        return Status.LOAD_FAIL, str(exc).splitlines()[0]
    try:
        outs = session.run(None, feeds)
    except Exception as exc:
        return Status.RUN_FAIL, str(exc).splitlines()[0]
    ok, _ = compare([want], outs, atol=1e-4, rtol=1e-3)
    return (Status.PASS, "") if ok else (Status.MISMATCH, "differs")


def _judge(tmp: Path, case: str, made: tuple[Any, dict[str, np.ndarray], np.ndarray]) -> tuple[CellRecord, dict[str, Any]]:
    """The hand-made file written as an artifact, the spec's answer on it, and the cell the runtime here gives it."""
    model, feeds, want = made
    rec = write_artifact(tmp, case, model, {"example": feeds}, {"example": [want]}, opset=17)
    fact = _evaluate.evaluate((str(layout.artifact_dir(tmp, rec.key.id)), rec.probes, rec.tolerance))
    status, line = _measure(model, feeds, want)
    optimizer = None
    if status is Status.MISMATCH:
        optimizer = _measure(model, feeds, want, optimize=False)[0] is Status.PASS
    cell = CellRecord(case, "torchscript", 17, PIN, "cpu", "example", status, Stage.COMPARE, error_line=line or None)
    return cell.replace(optimizer=optimizer), fact


def _fault_of(cell: CellRecord, fact: dict[str, Any], others: list[CellRecord] = ()) -> fault.Fault:  # type: ignore[assignment]
    return fault.assign([cell, *others], {cell.artifact.id: fact}, {}, [PIN])[cell.key]


def test_a_file_wrong_per_spec_is_the_exporters(tmp_path: Path) -> None:
    cell, fact = _judge(tmp_path, "wrong", wrong_per_spec())
    assert cell.status is Status.MISMATCH and cell.optimizer is False  # the runtime is wrong with it, optimized or not
    assert fact["checker"] == "ok" and fact["probes"]["example"]["verdict"] == "disagrees"
    found = _fault_of(cell, fact)
    assert found.kind == "exporter" and "disagrees with torch per the spec's evaluator and the runtimes" in found.why


def test_a_runtime_only_failure_is_the_runtimes(tmp_path: Path) -> None:
    cell, fact = _judge(tmp_path, "int16_max", runtime_only())
    assert cell.status is Status.LOAD_FAIL and "NOT_IMPLEMENTED" in (cell.error_line or "")
    assert fact["checker"] == "ok" and fact["probes"]["example"] == {"verdict": "agrees", "max_abs": 0.0}
    found = _fault_of(cell, fact)
    assert found.kind == "runtime" and "agrees with torch" in found.why


def test_an_optimizer_only_failure_is_the_optimizers(tmp_path: Path) -> None:
    cell, fact = _judge(tmp_path, "layer_norm", optimizer_only())
    assert cell.status is Status.MISMATCH and cell.optimizer is True
    assert fact["probes"]["example"]["verdict"] == "agrees"
    found = _fault_of(cell, fact)
    assert found.kind == "optimizer" and "the spec's evaluator agrees with torch" in found.why


def test_an_op_the_evaluator_lacks_is_undetermined_and_says_why(tmp_path: Path) -> None:
    cell, fact = _judge(tmp_path, "fused", evaluator_lacks())
    assert cell.status is Status.MISMATCH
    assert fact["probes"] == {} and "FusedMatMul" in fact["unanswered"]
    found = _fault_of(cell, fact)
    assert found.kind == "undetermined" and found.why.startswith("the reference evaluator cannot load it: NotImplementedError")


def test_a_frozen_input_is_the_files_fault_without_running_it(tmp_path: Path) -> None:
    """The file declares ``x`` as ``[2]``; torch ran the model on three values: the file cannot take them."""
    one = h.make_tensor("one", T.FLOAT, [], [1.0])
    model = _model([h.make_node("Add", ["x", "one"], ["y"])], [_vec("x", shape=[2])], [_vec("y", shape=[2])], initializer=[one])
    x2, x3 = np.ones(2, np.float32), np.ones(3, np.float32)
    probes, outputs = {"example": {"x": x2}, "batch3": {"x": x3}}, {"example": [x2 + 1], "batch3": [x3 + 1]}
    rec = write_artifact(tmp_path, "frozen", model, probes, outputs)
    fact = _evaluate.evaluate((str(layout.artifact_dir(tmp_path, rec.key.id)), rec.probes, rec.tolerance))
    assert fact["probes"]["example"]["verdict"] == "agrees"
    assert fact["probes"]["batch3"]["verdict"] == "disagrees" and "froze" in fact["probes"]["batch3"]["line"]
    cell = CellRecord("frozen", "torchscript", 17, PIN, "cpu", "batch3", Status.RUN_FAIL, Stage.RUN, error_line="invalid dims")
    assert _fault_of(cell, fact).kind == "exporter"


def test_the_spec_contested_by_a_passing_runtime_is_undetermined(tmp_path: Path) -> None:
    cell, fact = _judge(tmp_path, "wrong", wrong_per_spec())
    passing = cell.replace(runtime="onnxruntime==9.9.9", status=Status.PASS, optimizer=None)
    found = _fault_of(cell, fact, [passing])
    assert found.kind == "undetermined" and found.why.startswith("contested") and "9.9.9 passes" in found.why


def test_a_refusal_the_frontier_explains_is_the_frontiers_and_an_export_failure_the_exporters() -> None:
    loads = {PIN: {"runtime": PIN, "max_ir": 9, "max_opset": 19, "irs": [], "opsets": []}}
    refused = CellRecord("m", "dynamo", 23, PIN, "cpu", "example", Status.LOAD_FAIL, Stage.LOAD, ir_version=10, opset_actual=23)
    failed = refused.replace(exporter="torchscript", status=Status.EXPORT_FAIL, error_line="Unsupported: ONNX export of x")
    found = fault.assign([refused, failed], {}, loads, [PIN])
    assert found[refused.key].kind == "frontier" and "IR 10" in found[refused.key].why
    assert found[failed.key].kind == "exporter" and "wrote no file" in found[failed.key].why
    passing = refused.replace(status=Status.PASS)
    assert fault.assign([passing], {}, loads, [PIN]) == {}  # a pass carries no fault


def test_fixed_in_is_the_first_later_runtime_from_which_every_measured_one_passes() -> None:
    pins = ["onnxruntime==1.20.1", "onnxruntime==1.23.2", "onnxruntime==1.24.4", "onnxruntime==1.32.0"]
    agrees = {"checker": "ok", "probes": {"example": {"verdict": "agrees", "max_abs": 0.0}}, "unanswered": None}
    base = CellRecord("llama", "dynamo", 23, pins[0], "cpu", "example", Status.RUN_FAIL, Stage.RUN)
    fail, ok = Status.RUN_FAIL, Status.PASS

    def assigned(*statuses: Status) -> list[fault.Fault]:
        cells = [base.replace(runtime=p, status=s) for p, s in zip(pins, statuses, strict=True)]
        found = fault.assign(cells, {base.artifact.id: agrees}, {}, pins)
        return [found[c.key] for c in cells if c.key in found]

    first, second = assigned(fail, fail, ok, ok)
    said = ("runtime", "1.24.4", "1.23.2")
    assert (first.kind, first.fixed_in, first.last_failing) == said == (second.kind, second.fixed_in, second.last_failing)
    assert "passes from 1.24.4 (fails up to 1.23.2)" in first.said
    # Failing again on the newest: no runtime from which it passes for good, so none is named.
    assert [f.fixed_in for f in assigned(fail, fail, ok, fail)] == [None, None, None]
    # A runtime that measured nothing (its provider unavailable) neither fails nor passes.
    (only,) = assigned(fail, Status.UNAVAILABLE, ok, ok)
    assert (only.fixed_in, only.last_failing) == ("1.24.4", "1.20.1")
    counted = fault.counts([first, second])
    assert counted == {**dict.fromkeys(fault.KINDS, 0), "runtime": 2, "runtime_fixed": 2, "optimizer_fixed": 0}
    assert fault.summary(counted).startswith("Of 2 failing cells, 0 are the file's (the exporter's), 2 the runtime's (2 of")


def test_a_disagreement_no_runtime_confirmed_is_undetermined(tmp_path: Path) -> None:
    """The evaluator disagrees with torch, and no runtime ran the probe (each refused the file at load): the
    evaluator's word alone does not make it the file's fault (bfloat16 models, off by one bf16 step, read so)."""
    cell, fact = _judge(tmp_path, "wrong", wrong_per_spec())
    refused = cell.replace(status=Status.LOAD_FAIL, optimizer=None, error_line="NOT_IMPLEMENTED")
    found = _fault_of(refused, fact)
    assert found.kind == "undetermined" and found.why.startswith("only the spec's evaluator ran this probe")
    assert _fault_of(refused, fact, [cell.replace(runtime="onnxruntime==9.9.9")]).kind == "exporter"  # one ran it


def test_the_spec_stage_caches_seals_and_is_planned(tmp_path: Path) -> None:
    """The stage over a build folder: every artifact judged once, then from the cache; ``spec.json`` sealed, so an
    edited one is refused by the report's reader and makes the plan run the stage again."""
    out = tmp_path / "build"
    recs = [write_artifact(out, "wrong", *_probe(wrong_per_spec())), write_artifact(out, "int16_max", *_probe(runtime_only()))]
    write_manifest(out, [r.key.id for r in recs])
    cache.write_json(out / layout.EXPORT_STAMP, {"artifacts": {r.key.id: {"key": r.key.id, "digest": r.digest} for r in recs}})
    said: list[str] = []
    facts = spec_stage.judge_all(out, workers=1, echo=said.append)
    assert {k: f["probes"]["example"]["verdict"] for k, f in facts.items()} == {
        "wrong.torchscript.op17": "disagrees",
        "int16_max.torchscript.op17": "agrees",
    }
    assert said[0].startswith("spec: judging 2 artifact(s)")
    read, missing = spec.read(out, recs)
    assert missing is None and read == facts
    stamp = cache.read_json(out / layout.EXPORT_STAMP)
    onnx_version = json.loads(spec.facts_path(out).read_text())["onnx"]
    assert spec.why_stale(out, stamp, onnx_version) is None
    said.clear()
    assert spec_stage.judge_all(out, workers=1, echo=said.append) == facts and said == []  # all from the cache
    spec.facts_path(out).write_text(spec.facts_path(out).read_text().replace("disagrees", "agrees"))
    assert spec.read(out, recs)[1] is not None and "not the file the spec stage sealed" in (spec.read(out, recs)[1] or "")
    assert "changed after the spec stage wrote it" in (spec.why_stale(out, stamp, onnx_version) or "")
    assert "spec.json" in (plan._spec_why(out, stamp, onnx_version) or "")


def _probe(made: tuple[Any, dict[str, np.ndarray], np.ndarray]) -> tuple[str, Any, dict[str, Any], dict[str, Any]]:
    model, feeds, want = made
    return model, {"example": feeds}, {"example": [want]}  # type: ignore[return-value]


def test_every_reproducer_folder_gets_an_issue_where_the_fault_belongs(tmp_path: Path) -> None:
    from harness.publish.repro import write_repros

    out = tmp_path / "build"
    cells, facts, recs = [], {}, []
    for case, made in (("int16_max", runtime_only()), ("fused", evaluator_lacks())):
        cell, fact = _judge(out, case, made)
        cells.append(cell)
        facts[cell.artifact.id] = fact
        recs.append(ExportRecord.from_dict(json.loads((layout.artifact_dir(out, cell.artifact.id) / "export.json").read_text())))
    faults = fault.assign(cells, facts, {}, [PIN])
    written = write_repros(out, tmp_path / "results", cells, recs, {}, faults=faults)
    runtime_issue = (tmp_path / "results" / written["int16_max.torchscript.op17"] / "ISSUE.md").read_text()
    assert "Where to file it: **onnxruntime**" in runtime_issue and "Fault: **runtime**" in runtime_issue
    assert f"pip install \"{PIN}\"" in runtime_issue and "python repro.py" in runtime_issue
    assert "NOT_IMPLEMENTED" in runtime_issue  # what was got
    undetermined = (tmp_path / "results" / written["fused.torchscript.op17"] / "ISSUE.md").read_text()
    assert "Nothing to file: the evidence does not say whose bug it is" in undetermined and "FusedMatMul" in undetermined
    readme = (tmp_path / "results" / written["int16_max.torchscript.op17"] / "README.txt").read_text()
    assert "fault: runtime: the spec's evaluator agrees with torch" in readme


def test_the_matrix_plans_the_spec_stage_after_the_export() -> None:
    matrix = load(ROOT / "matrix.toml")
    todo = plan.Plan("no export yet", {}, "an earlier stage runs", "the export runs first")
    assert todo.lines()[:2] == ["export: runs: no export yet", "spec: runs: the export runs first"]
    assert plan.Plan(None, {}, None, None).idle and not todo.idle
    assert matrix.export.onnx  # the spec stage installs the export's onnx pin


def test_the_checker_is_the_full_one_with_strict_shape_inference(tmp_path: Path) -> None:
    """``Add`` of a [3] and a [4]: the plain checker passes it, only strict shape inference refuses it; the spec's
    checker refuses it, and a failing cell of such a file is the exporter's."""
    model = _model([h.make_node("Add", ["a", "b"], ["y"])], [_vec("a"), _vec("b", shape=[4])], [_vec("y")])
    onnx.checker.check_model(model)  # the export's own check passes it
    feeds = {"a": np.ones(3, np.float32), "b": np.ones(4, np.float32)}
    rec = write_artifact(tmp_path, "bad_add", model, {"example": feeds}, {"example": [np.full(3, 2, np.float32)]})
    fact = _evaluate.evaluate((str(layout.artifact_dir(tmp_path, rec.key.id)), rec.probes, rec.tolerance))
    assert "Incompatible dimensions" in fact["checker"]
    cell = CellRecord("bad_add", "torchscript", 17, PIN, "cpu", "example", Status.RUN_FAIL, Stage.RUN)
    found = _fault_of(cell, fact)
    assert found.kind == "exporter" and "fails onnx.checker (full check, strict shape inference)" in found.why
