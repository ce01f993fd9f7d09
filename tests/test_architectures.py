"""The architectures corpus and its published table (``results/architectures/``): real ``transformers`` families,
built offline, each output far from zero (a vanishing output would pass every comparison), the profile that runs
them alone, the answer per model (``recommend`` by title) and what fails once per cause."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from harness.answer import lookup, real_models
from harness.cases import corpus
from harness.config.matrix import load
from harness.core.records import CellRecord, Stage, Status
from harness.store import plan

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results" / "architectures"
MATRIX = load(ROOT / "matrix.toml")
REGISTRY = corpus.load(["models.architectures"], ROOT)


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUTF8": "1"}
    return subprocess.run(
        [sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env
    )


# The corpus ----------------------------------------------------------------------------------------------------------


@pytest.mark.torch  # the decode step's inputs are torch tensors
def test_forty_families_with_decoders_twice() -> None:
    assert not REGISTRY.problems
    families = {c.source_file for c in REGISTRY}
    assert len(families) >= 40, sorted(families)
    names = REGISTRY.names()
    decoders = ["gpt2", "gpt_neo", "gptj", "opt", "bloom", "falcon", "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma"]
    for name in decoders:
        step = REGISTRY[f"{name}_step"]
        assert name in names and step.title.endswith("(decode step)")
        inputs = step.inputs()
        # the cache goes in, per layer: past keys and values of (batch, heads, past, head size), the past dynamic
        assert {"past_key_0", "past_value_0", "past_key_1", "past_value_1"} <= set(inputs)
        assert inputs["attention_mask"].shape[1] == inputs["past_key_0"].shape[2] + 1
        assert step.dynamic["past_key_0"] == {0: "batch", 2: "past"}


def test_every_case_has_a_card_a_title_and_a_probe_off_the_example() -> None:
    titles = [c.title for c in REGISTRY]
    assert len(set(titles)) == len(titles)
    for case in REGISTRY:
        assert case.title and case.about and case.card is None, case.name  # a real model: no gotcha of its own
        assert case.source_file.startswith("models.architectures."), case.name  # its family's file, not the package
        assert case.dynamic and 0 in next(iter(case.dynamic.values())), f"{case.name}: the batch must be dynamic"
        varies = any(len(dims) > 1 for dims in case.dynamic.values())
        assert (case.probes is not None) == varies, f"{case.name}: a probe exactly where more than the batch varies"


def test_importing_the_corpus_imports_neither_torch_nor_transformers() -> None:
    code = (
        "import sys; from harness.cases import corpus; r = corpus.load(['models.architectures']); "
        "print(len(r), 'torch' in sys.modules, 'transformers' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == [str(len(REGISTRY)), "False", "False"], out.stderr


def test_the_profile_runs_its_own_corpus_and_installs_transformers() -> None:
    profile = MATRIX.profile("architectures")
    assert plan.corpus_sources(MATRIX, [], False, profile) == ["models.architectures"]
    assert plan.corpus_sources(MATRIX, ["mine.py"], False, profile) == ["models.architectures", "mine.py"]
    assert plan.corpus_sources(MATRIX, ["mine.py"], True, profile) == ["mine.py"]
    assert plan.corpus_sources(MATRIX, [], False, MATRIX.profile("default")) == list(MATRIX.corpus)
    assert corpus.requirements_of(MATRIX, [], ["models.architectures"], ROOT) == ["transformers==5.24.0"]
    default = MATRIX.profile("default")
    assert profile.runtimes == default.runtimes and profile.exporter_opsets == default.exporter_opsets


def test_a_profile_corpus_that_does_not_exist_is_one_line(tmp_path: Path) -> None:
    text = (ROOT / "matrix.toml").read_text().replace('corpus = ["models.architectures"]', 'corpus = ["models.archtectures"]')
    (tmp_path / "matrix.toml").write_text(text)
    shutil.copytree(ROOT / "models", tmp_path / "models")
    with pytest.raises(Exception, match=r"profiles\.architectures\.corpus.*models\.archtectures"):
        load(tmp_path / "matrix.toml")


@pytest.mark.torch
def test_every_model_builds_offline_and_its_output_is_far_from_zero() -> None:
    """A model whose output vanishes (MobileNetV2 at the library's initializer: ~1e-26; EfficientNet: zeros) would
    pass every comparison with any export: each case's first output must have a spread of real numbers."""
    pytest.importorskip("transformers")
    import torch

    env_offline = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    os.environ.update(env_offline)
    torch.set_num_threads(1)
    for case in REGISTRY:
        with warnings.catch_warnings():  # the library's deprecation notes (past_key_values → cache): the export records them
            warnings.simplefilter("ignore")
            model = case.model().eval()
            with torch.no_grad():
                out = model(*case.inputs().values())
        first = out[0] if isinstance(out, tuple) else out
        assert torch.isfinite(first).all(), case.name
        assert first.float().std().item() > 0.05, f"{case.name}: output spread {first.float().std().item():.2g}"
        # The card says the model the table measured: an attention implementation it names is the one built.
        config = getattr(getattr(model, "model", model), "config", None)
        built = getattr(config, "_attn_implementation", None)
        for said in _ATTENTION.findall(case.about):
            assert said.lower() == built, f"{case.name}: its card says {said} attention; the model is built with {built}"


_ATTENTION = re.compile(r"\b(eager|SDPA)\s+attention", re.IGNORECASE)
"""What a card says of its model's attention implementation (``Eager attention only``, ``SDPA attention``)."""


def test_a_card_that_names_the_wrong_attention_is_caught() -> None:
    """The check above, on the two cards it corrected: T5 and GPT-J were said "eager attention only" and built with SDPA."""
    assert [s.lower() for s in _ATTENTION.findall("T5. Eager attention only. Export")] == ["eager"]
    assert [s.lower() for s in _ATTENTION.findall(REGISTRY["t5"].about)] == ["sdpa"]
    assert [s.lower() for s in _ATTENTION.findall(REGISTRY["t5_eager"].about)] == ["eager"]
    assert REGISTRY["t5_eager"].fixes == "t5" and REGISTRY["t5_eager"].title == "T5 (eager attention)"


# The answer per model and its causes ----------------------------------------------------------------------------------


def _cell(case: str, exporter: str, opset: int, runtime: str, status: Status, line: str = "", ir: int = 8) -> CellRecord:
    return CellRecord(
        case, exporter, opset, runtime, "cpu", "example", status, Stage.COMPARE, error_line=line or None, ir_version=ir,
        opset_actual=opset,
    )  # fmt: skip


OLD, NEW = "onnxruntime==1.16.3", "onnxruntime==1.32.0"


def test_one_cause_shared_by_two_models_is_one_finding() -> None:
    cells = [
        _cell("llama", "dynamo", 18, NEW, Status.RUN_FAIL, "Reshape node 'node_view_12': {2,32,6,5} to {2,32,25}"),
        _cell("qwen2", "dynamo", 18, NEW, Status.RUN_FAIL, "Reshape node 'node_view_7': {2,16,6,5} to {2,16,30}"),
        _cell("llama", "dynamo", 18, OLD, Status.LOAD_FAIL, "Unsupported model IR version: 10, max supported IR version: 9", 10),
        _cell("llama", "torchscript", 17, NEW, Status.PASS),
        _cell("bert", "torchscript", 17, NEW, Status.MISMATCH, "3/40 elements differ"),
    ]
    loads = {OLD: {"runtime": OLD, "max_ir": 9, "max_opset": 19}, NEW: {"runtime": NEW, "max_ir": 11, "max_opset": 25}}
    found = real_models.findings(cells, loads)
    assert [(f.exporter, f.status, f.cases) for f in found] == [
        ("dynamo", Status.RUN_FAIL, ("llama", "qwen2")),
        ("torchscript", Status.MISMATCH, ("bert",)),
    ]  # the IR-10 refusal on 1.16.3 is the frontier's, said once per runtime: no finding
    loads[OLD]["max_ir"] = 10  # a refusal the frontier does not explain is a finding of its own
    assert any(f.status is Status.LOAD_FAIL for f in real_models.findings(cells, loads))


def test_the_answer_per_model_folds_runtimes_that_agree() -> None:
    runtimes = ["onnxruntime==1.15.1", "onnxruntime==1.16.3", "onnxruntime==1.17.3"]
    cells = [_cell("m", "torchscript", o, rt, Status.PASS) for o in (17, 18) for rt in runtimes]
    cells += [_cell("m", "dynamo", 18, rt, Status.PASS if rt.endswith("1.17.3") else Status.MISMATCH) for rt in runtimes]
    cells = [c for c in cells if not (c.runtime.endswith("1.17.3") and c.opset == 18 and c.exporter == "torchscript")]
    (answer,) = real_models.per_model(cells, ["m"], cards={"m": {"title": "M (decode step)"}})
    assert answer.title == "M (decode step)"
    assert real_models.by_runtime(answer) == "1.15.1–1.16.3: torchscript 18 · 1.17.3: dynamo 18"


def test_recommend_takes_a_title() -> None:
    cards = {"llama_step": {"title": "Llama (decode step)"}, "llama": {"title": "Llama (prefill)"}}
    assert lookup.find_case("llama (Decode  step)", cards) == "llama_step"
    assert lookup.find_case("llama", cards) == "llama" and lookup.find_case("LLAMA", cards) == "llama"
    assert lookup.find_case("Gemma (decode step)", cards) is None
    assert lookup.did_you_mean("Lama (decode step)", cards) == "Llama (decode step)"


# The published table ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    if not (RESULTS / "matrix.jsonl").is_file():
        pytest.fail("results/architectures/ is not published: nox -s matrix -- --profile architectures")
    return [json.loads(line) for line in (RESULTS / "matrix.jsonl").read_text().splitlines()]


def test_the_published_table_holds_every_architecture_of_the_corpus(rows: list[dict[str, Any]]) -> None:
    cards = json.loads((RESULTS / "cases.json").read_text())
    assert set(cards) == set(REGISTRY.names())
    assert len({card["source_file"] for card in cards.values()}) >= 40
    assert {r["runtime"] for r in rows} == {rt.pin for rt in MATRIX.profile("architectures").runtimes}
    rewrites = json.loads((RESULTS / "rewrites.json").read_text())  # asked for 28, dynamo writes 18 for an SDPA model
    measured = {(r["exporter"], r["opset"]) for r in rows} | {(w["exporter"], w["asked"]) for w in rewrites}
    assert measured >= set(MATRIX.profile("architectures").exports())


def test_every_failing_cell_says_why_and_where_to_reproduce_it(rows: list[dict[str, Any]]) -> None:
    failing = [r for r in rows if r["status"] not in ("pass", "skipped")]
    assert failing
    for r in failing:
        assert r.get("error_line") or r.get("localization") or r.get("diff"), r
        if r["status"] in ("mismatch", "run-fail", "load-fail"):
            repro = r.get("repro")
            assert repro and (RESULTS / repro).exists(), (r["case"], r["exporter"], r["opset"], r["runtime"], repro)


def test_the_readme_answers_per_model_and_once_per_cause(rows: list[dict[str, Any]]) -> None:
    text = (RESULTS / "README.md").read_text()
    assert "## The answer per model" in text and "## What fails, once per cause" in text
    assert "[Llama (decode step)](cases/llama_step.md)" in text
    page = (RESULTS / "cases" / "llama_step.md").read_text()
    assert page.startswith("# llama_step: Llama (decode step)") and "grouped-query attention" in page


def test_recommend_answers_for_a_model_by_its_title(rows: list[dict[str, Any]]) -> None:
    out = harness("recommend", "--runtime", "1.20.1", "--cases", "Llama (decode step)")
    assert out.returncode in (0, 1), out.stderr
    assert "answered from results/architectures/matrix.jsonl" in out.stdout
    assert "1 case from --cases (llama_step)" in out.stdout
    # the same answer, worked out from the raw rows: the highest opset written at which llama_step passes every probe
    # (a request written at another opset is no file at the opset asked: rows are by the opset written)
    passing: dict[tuple[str, int], set[str]] = {}
    for r in rows:
        if r["case"] == "llama_step" and r["runtime"] == "onnxruntime==1.20.1":
            passing.setdefault((r["exporter"], r["opset"]), set()).add(r["status"])
    best = max((o for (_, o), s in passing.items() if s == {"pass"}), default=None)
    if best is None:
        assert "recommended: none" in out.stdout
    else:
        assert f"opset {best}" in out.stdout.split("recommended:")[1].splitlines()[0]
