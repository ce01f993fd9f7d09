"""Budgets that say what they bound: [export] timeout (and a case's export_timeout) for building the model,
torch's outputs and the export; [export] reference_timeout for the reference pass alone. Real torch, real
onnxruntime, real processes; the slow parts are real work (a sleep in a factory, a chain of matrix products)."""

from __future__ import annotations

import json
from pathlib import Path

import onnxruntime
import pytest

from harness.answer import lookup
from harness.answer.published import read_cases, read_cells
from harness.config.matrix import Profile, load
from harness.core.records import Stage, Status
from harness.export.stage import export_all
from harness.publish import report
from harness.run.stage import run_runtime

pytestmark = pytest.mark.torch  # exports with real torch: `nox -s tests`, not `nox -s unit`

ROOT = Path(__file__).resolve().parent.parent

CORPUS = """
import time
import torch
from harness.cases.corpus import Card, Case, randn, register



def slow():
    time.sleep(60)  # building this model takes longer than any budget here
    return torch.nn.Identity()


class Chain(torch.nn.Module):
    '''A real model whose every run takes seconds: 120 products of 768x768 matrices (40 made the reference pass
    a close call with its 1 s budget on a fast machine).'''

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(768, 768) / 28)

    def forward(self, x):
        for _ in range(120):
            x = torch.tanh(x @ self.w)
        return x


card = Card(symptom="s", cause="c", fix="f", source="here")
register(Case(name="slow_build", model=slow, inputs=lambda: {"x": randn(2)}, card=card))
register(Case(name="slow_build_own", model=slow, inputs=lambda: {"x": randn(2)}, export_timeout=1.5))
register(Case(name="slow_reference", model=Chain, inputs=lambda: {"x": randn(768, 768)}, export_timeout=300))
"""


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object], Path]:
    tmp = tmp_path_factory.mktemp("budgets")
    text = (
        (ROOT / "matrix.toml")
        .read_text()
        .replace('onnxruntime = "1.32.0"\n', 'onnxruntime = "1.32.0"\ntimeout = 3\nreference_timeout = 1\n', 1)
    )
    (tmp / "matrix.toml").write_text(text)
    matrix = load(tmp / "matrix.toml")
    newest = matrix.runtime(onnxruntime.__version__)
    profile = Profile("budgets", (newest,), ("cpu",), ("torchscript",), (18,))
    source = tmp / "budget_cases.py"
    source.write_text(CORPUS)
    out = tmp / "build"
    records, problems = export_all(
        matrix, profile, [str(source)], out, root=ROOT, echo=lambda line: None, echo_error=lambda line: None
    )
    assert problems == []
    cells = run_runtime(matrix, newest, ["cpu"], out, echo=lambda line: None)
    results = tmp / "results"
    report.build(out, results, profile=profile, builtin=matrix.corpus)
    return out, {r.case: r for r in records}, results, cells  # type: ignore[return-value]


def test_a_build_past_the_export_budget_is_timeout_naming_the_phase_and_the_key(exported) -> None:  # type: ignore[no-untyped-def]
    _, records, _, cells = exported
    rec = records["slow_build"]
    assert (rec.ok, rec.error_class) == (False, "ExporterTimeout")
    assert rec.error_line.startswith(
        "building the model and its probes did not finish within [export] timeout (3 s), the budget of building the "
        "model, torch's outputs and the export together; raise [export] timeout in matrix.toml"
    ), rec.error_line
    own = records["slow_build_own"]
    assert (
        "did not finish within the case's export_timeout (1.5 s)" in own.error_line
        and "raise the case's export_timeout" in own.error_line
    )
    mine = [c for c in cells if c.case == "slow_build"]
    assert mine and {(c.status, c.stage) for c in mine} == {(Status.TIMEOUT, Stage.EXPORT)}, "a timeout, not an export-fail"


def test_a_record_that_timed_out_still_names_its_case_for_recommend(exported) -> None:  # type: ignore[no-untyped-def]
    out, records, results, _ = exported
    assert records["slow_build"].card["source_file"].endswith("budget_cases.py") and records["slow_build"].card["symptom"] == "s"
    cards = read_cases(results)
    cells = read_cells(results)
    measured = list(dict.fromkeys(c.case for c in cells))
    chosen = lookup.select(measured, cards, str(results), corpus=[str(out.parent / "budget_cases.py")])
    assert set(chosen.cases) == {"slow_build", "slow_build_own", "slow_reference"}, "every case of the file, the timed-out too"


def test_a_slow_reference_pass_costs_the_localization_data_never_the_export(exported) -> None:  # type: ignore[no-untyped-def]
    out, records, results, cells = exported
    rec = records["slow_reference"]
    assert rec.ok and (out / "artifacts" / rec.key.id / "model.onnx").is_file()
    assert rec.reference_runtime == (
        f"failed: onnxruntime=={onnxruntime.__version__}: "
        "not recorded: the reference pass exceeded 1 s ([export] reference_timeout)"
    )
    assert not (out / "artifacts" / rec.key.id / "intermediates.npz").exists()
    assert not [p for p in (out / "artifacts" / rec.key.id).iterdir() if p.name.endswith(".tmp.npz")], "nothing half-written kept"
    assert {c.status for c in cells if c.case == "slow_reference"} == {Status.PASS}
    readme = (results / "cases" / "slow_reference.md").read_text(encoding="utf-8")  # the case's own page
    assert "Localization data not recorded for torchscript opset 18: not recorded: the reference pass exceeded 1 s" in readme
    published = [json.loads(line) for line in (results / "matrix.jsonl").read_text().splitlines()]
    assert {c["status"] for c in published if c["case"] == "slow_build"} == {"timeout"}
