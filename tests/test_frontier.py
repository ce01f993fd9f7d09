"""What each runtime loads, measured with real one-node models on the real runtime.

The models are written by the real ``onnx`` and loaded by the real
``onnxruntime`` of this environment; the published table's frontier is
checked against its own cells (every model that loaded lies inside it, every
refusal for an IR or opset outside it) and against onnxruntime's documented
support of 1.16 and 1.17 (IR 9 with opsets 19 and 20:
https://onnxruntime.ai/docs/reference/compatibility.html).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import onnx
import onnxruntime as ort
import pytest

from harness.answer import lookup, published, recommend
from harness.store import cache, frontier

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("frontier")
    frontier.write_models(out)
    return out


def test_one_model_per_ir_and_opset_this_onnx_writes(out: Path) -> None:
    index = cache.read_json(frontier.models_dir(out) / frontier.INDEX)
    assert index["irs"] == list(range(frontier.FIRST_IR, onnx.IR_VERSION + 1))
    assert index["opsets"] == list(range(frontier.FIRST_OPSET, onnx.defs.onnx_opset_version() + 1))
    assert len(index["files"]) == len(index["irs"]) * len(index["opsets"])
    model = onnx.load(str(frontier.models_dir(out) / "ir9.op19.onnx"))
    assert model.ir_version == 9 and [(o.domain, o.version) for o in model.opset_import] == [("", 19)]
    onnx.checker.check_model(model)  # valid where the IR and the opset agree
    stamp = os.stat(frontier.models_dir(out) / "ir9.op19.onnx").st_mtime_ns
    assert frontier.write_models(out) == index  # intact: not written again
    assert os.stat(frontier.models_dir(out) / "ir9.op19.onnx").st_mtime_ns == stamp
    assert frontier.models_missing(out) is None


def test_this_runtime_loads_what_a_direct_session_loads(out: Path) -> None:
    result = frontier.measure(out, f"onnxruntime=={ort.__version__}")
    assert result["version"] == ort.__version__ and result["seconds"] < 30
    loaded = {(ir, op) for ir in result["irs"] for op in result["opsets"]} - {tuple(x) for x in result["refused"]}
    assert max(ir for ir, _ in loaded) == result["max_ir"] and max(op for _, op in loaded) == result["max_opset"]
    # the frontier is the runtime's, one session at a time: just past it (when onnx writes past it) is refused
    for ir, op in [(result["max_ir"] + 1, frontier.FIRST_OPSET), (frontier.FIRST_IR, result["max_opset"] + 1)]:
        path = frontier.models_dir(out) / f"ir{ir}.op{op}.onnx"
        if path.exists():
            with pytest.raises(Exception, match=r"ONNXRuntimeError"):
                ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            assert [ir, op] in result["refused"]
    assert result["max_ir"] >= 10 and result["max_opset"] >= 21  # the test env holds the newest runtime
    # what is past it (where onnx writes past it) is refused when the session is created, as above: said so
    assert all(r["at"] == frontier.LOAD for r in result["reasons"])
    assert frontier.refused_at(result) == ("at load" if result["refused"] else "")
    assert frontier.why_stale(out, "ort-x") == "its frontier is not measured"
    cache.write_json(frontier.result_path(out, "ort-x"), result)
    assert frontier.why_stale(out, "ort-x") is None


def test_a_changed_model_is_refused_and_makes_the_frontier_stale(out: Path, tmp_path: Path) -> None:
    mine = tmp_path / "out"
    frontier.write_models(mine)
    cache.write_json(frontier.result_path(mine, "ort-x"), frontier.measure(mine, "onnxruntime==x"))
    victim = frontier.models_dir(mine) / "ir8.op13.onnx"
    victim.write_bytes(victim.read_bytes() + b"\x00")
    assert "not written" in (frontier.models_missing(mine) or "")
    with pytest.raises(RuntimeError, match="missing or changed"):
        frontier.measure(mine, "onnxruntime==x")
    frontier.write_models(mine)  # the export writes them again, byte for byte: the measurement still holds
    assert frontier.models_missing(mine) is None
    assert frontier.why_stale(mine, "ort-x") is None
    measured = cache.read_json(frontier.result_path(mine, "ort-x"))
    cache.write_json(frontier.result_path(mine, "ort-x"), measured | {"models": "another onnx's models"})
    assert frontier.why_stale(mine, "ort-x") == "its frontier was measured on other models"
    assert frontier.read(mine, [("ort-x", "onnxruntime==x")]) == {}  # and the report does not publish it


def test_models_of_other_code_are_written_again_and_a_failed_measurement_has_the_same_shape(out: Path, tmp_path: Path) -> None:
    mine = tmp_path / "out"
    frontier.write_models(mine)
    index = cache.read_json(frontier.models_dir(mine) / frontier.INDEX)
    cache.write_json(frontier.models_dir(mine) / frontier.INDEX, index | {"code": "older code"})
    assert "written by other code" in (frontier.models_missing(mine) or "")
    # A run on another Python (the GPU machine's 3.12 digests the same code otherwise) still measures the same models.
    assert frontier.measure(mine, "onnxruntime==z")["max_ir"] >= 10
    assert frontier.write_models(mine)["code"] == index["code"] and frontier.models_missing(mine) is None
    broken = frontier.failed(mine, "onnxruntime==x", "ImportError: no onnxruntime")
    good = frontier.measure(mine, "onnxruntime==y")
    assert set(good) - set(broken) == {"seconds"} and (broken["irs"], broken["opsets"]) == (good["irs"], good["opsets"])
    assert frontier.describe(broken) == "loads none of the frontier models (ImportError: no onnxruntime)"
    from harness.publish.markdown import _frontier_lines  # the README section, led by a runtime that could not measure

    text = "\n".join(_frontier_lines({"onnxruntime==x": broken, "onnxruntime==y": good}, ["onnxruntime==x"], []))
    assert f"IR version {good['irs'][0]}–{good['irs'][-1]}" in text and "| onnxruntime==x | none" in text


def test_when_a_refusal_came_is_kept_apart_by_reason() -> None:
    refusals = {
        (3, 17): (frontier.LOAD, "Opset 17 is under development and support for this is limited"),
        (3, 18): (frontier.LOAD, "Opset 18 is under development and support for this is limited"),
        (9, 7): (frontier.RUN, "Could not find an implementation for Add(7) node with name ''"),
    }
    reasons = frontier._reasons(refusals)
    assert [(r["ir"], r["opset"], r["at"]) for r in reasons] == [(3, 17, "load"), (9, 7, "run")]  # 18: same words as 17
    assert frontier.refused_at({"reasons": reasons}) == "at load and at run"
    assert frontier.refused_at({"reasons": reasons[:1]}) == "at load" and frontier.refused_at({"reasons": []}) == ""


def test_explain_names_what_is_past_the_frontier() -> None:
    old = {"runtime": "onnxruntime==1.16.3", "max_ir": 9, "max_opset": 19}
    assert frontier.explain(old, 10, 18) == "1.16.3 loads up to IR 9 / opset 19; the model is IR 10"
    assert frontier.explain(old, 10, 20) == "1.16.3 loads up to IR 9 / opset 19; the model is IR 10 and opset 20"
    assert frontier.explain(old, 9, 19) is None
    assert frontier.explain({"runtime": "x", "max_ir": None}, 10, 20) is None


def _published_frontier() -> dict:  # type: ignore[type-arg]
    loads = published.read_frontier(RESULTS / "matrix.jsonl")
    if not loads:
        pytest.fail("results/frontier.json is missing: the published report measures every runtime's frontier")
    return loads


def test_the_published_frontier_agrees_with_the_published_cells() -> None:
    """Every artifact that loaded on a runtime lies inside its measured frontier; every refusal that names
    an IR version or an opset lies outside it; 1.16 and 1.17 are as onnxruntime documents them."""
    loads = _published_frontier()
    rows = [json.loads(line) for line in (RESULTS / "matrix.jsonl").read_text().splitlines()]
    cpu = {r["runtime"] for r in rows if r["runtime"].startswith("onnxruntime==")}
    assert cpu <= set(loads), f"no frontier for {sorted(cpu - set(loads))}"
    assert (loads["onnxruntime==1.16.3"]["max_ir"], loads["onnxruntime==1.16.3"]["max_opset"]) == (9, 19)
    assert (loads["onnxruntime==1.17.3"]["max_ir"], loads["onnxruntime==1.17.3"]["max_opset"]) == (9, 20)
    checked = refused = 0
    for r in rows:
        f = loads.get(r["runtime"])
        if not f or f.get("max_ir") is None or r.get("ir_version") is None:
            continue
        inside = r["ir_version"] <= f["max_ir"] and (r.get("opset_actual") or r["opset"]) <= f["max_opset"]
        if r["status"] in ("pass", "mismatch", "run-fail"):
            assert inside, (r["case"], r["exporter"], r["opset"], r["runtime"])
            checked += 1
        elif r["status"] == "load-fail" and re.search(r"IR version|opset", r.get("error_line") or ""):
            assert not inside, (r["case"], r["exporter"], r["opset"], r["runtime"], r["error_line"])
            refused += 1
    assert checked > 1000 and refused > 1000


def test_recommend_explains_a_refusal_with_the_frontier() -> None:
    loads = _published_frontier()
    cells = published.read_cells(RESULTS / "matrix.jsonl")
    runtime = "onnxruntime==1.16.3"
    chosen = lookup.select(list(dict.fromkeys(c.case for c in cells)), published.read_cases(RESULTS / "matrix.jsonl"), "results")
    answer = recommend.recommend(cells, runtime, "cpu", chosen.cases, chosen.said, loads[runtime])
    text = recommend.render(answer)
    assert text.splitlines()[1] == "1.16.3 loads up to IR 9 / opset 19 (measured)"
    dynamo = [o for o in answer.options if o.exporter == "dynamo"]
    assert dynamo and all("the model is IR 10" in why for o in dynamo for _, why in o.failing if "load-fail" in why)
