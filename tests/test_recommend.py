"""harness recommend: its answer for the runtimes users ask about agrees with the published table, worked
out here independently from matrix.jsonl's raw rows; and the selection, ranking and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.answer import published, recommend
from harness.core.records import CellRecord, Stage, Status, runtime_wide

pytestmark = pytest.mark.slow  # seconds a test: `nox -s tests` runs them, `nox -s unit` leaves them out

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def _version(pin: str) -> tuple[int, ...]:
    return tuple(int(x) for x in pin.split("==")[1].split("."))


@pytest.fixture(scope="module")
def rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (RESULTS / "matrix.jsonl").read_text().splitlines()]


def _applicable(rows: list[dict[str, Any]], cases: set[str]) -> dict[str, set[str]]:
    """Per exporter, the selected cases that apply to it: those with a cell of it that is not `skipped`."""
    out: dict[str, set[str]] = {}
    for r in rows:
        if r["case"] in cases and r["status"] != "skipped":
            out.setdefault(r["exporter"], set()).add(r["case"])
    return out


def _options(rows: list[dict[str, Any]], runtime: str, cases: set[str]) -> dict[tuple[str, int], bool]:
    """From raw rows: per (exporter, opset written) on ``runtime``'s CPU column, whether every selected case that
    applies to the exporter passes every probe there (a case with no row there, because asked for it the exporter
    wrote another opset, fails it; a skipped cell is neither a pass nor a failure)."""
    status: dict[tuple[str, int, str], set[str]] = {}
    for r in rows:
        if r["runtime"] == runtime and r["provider"] == "cpu" and r["case"] in cases:
            status.setdefault((r["exporter"], r["opset"], r["case"]), set()).add(r["status"])
    applies = _applicable(rows, cases)
    out: dict[tuple[str, int], bool] = {}
    for exporter, opset in {k[:2] for k in status}:
        verdicts = {c: status.get((exporter, opset, c), {"missing"}) - {"skipped"} for c in applies[exporter]}
        out[(exporter, opset)] = all(v == {"pass"} for v in verdicts.values())
    return out


def _expected(rows: list[dict[str, Any]], runtime: str, cases: set[str]) -> tuple[int | None, set[tuple[str, int]]]:
    """The highest opset at which some exporter passes every selected case that applies to it, and the
    (exporter, opset) pairs that do so there."""
    safe = {eo for eo, ok in _options(rows, runtime, cases).items() if ok}
    top = max((o for _, o in safe), default=None)
    return top, {eo for eo in safe if eo[1] == top}


ASKED = ["1.16.3", "1.17.3", "1.20.1", "newest"]


@pytest.mark.parametrize("asked", ASKED)
def test_the_answer_agrees_with_the_table(rows: list[dict[str, Any]], asked: str) -> None:
    pins = sorted({r["runtime"] for r in rows}, key=_version)
    runtime = pins[-1] if asked == "newest" else f"onnxruntime=={asked}"
    cards = json.loads((RESULTS / "cases.json").read_text())
    twins = {name for name, card in cards.items() if card.get("fixes") or not card.get("symptom")}
    top, winners = _expected(rows, runtime, twins)

    proc = harness("recommend", "--runtime", runtime, "--provider", "cpu", "--results", "results/matrix.jsonl")
    assert proc.returncode == (0 if top else 1), proc.stderr
    out = proc.stdout
    readme = (RESULTS / "README.md").read_text().split("## Newest safe opset per runtime")[1].split("\n## ")[0]
    line = next(ln for ln in readme.splitlines() if ln.startswith(f"| {runtime} "))
    if top is None:
        assert "no exporter and opset passes every selected case here" in out
        assert "| none (closest:" in line
        return
    answer = out.split("recommended: ", 1)[1].split(":", 1)[0]
    exporter, _, opset = answer.partition(" opset ")
    assert (exporter, int(opset)) in winners, f"{answer} is not among the safe highest {winners}"
    assert f"**{exporter} opset {opset}**" in line
    shown = dict(zip(("torchscript", "dynamo"), [c.strip() for c in line.strip().strip("|").split("|")][3:5], strict=True))
    for exp, text in shown.items():  # each exporter's highest safe opset, as the README shows it
        safe = [o for (e, o) in _safe_per_exporter(rows, runtime, twins) if e == exp]
        mine = [r for r in rows if r["runtime"] == runtime and r["provider"] == "cpu" and r["exporter"] == exp]
        counted = [r for r in mine if r["status"] not in ("skipped", "export-fail")]
        if safe:
            assert text == str(max(safe))
        elif counted and all(r["status"] == "load-fail" for r in counted):  # nothing it writes loads: one reason
            assert text.startswith(f"none ({exp} writes "), text
        else:
            assert text.startswith("none (opset ")


def _safe_per_exporter(rows: list[dict[str, Any]], runtime: str, cases: set[str]) -> set[tuple[str, int]]:
    return {eo for eo, ok in _options(rows, runtime, cases).items() if ok}


def test_your_own_cases_and_the_whole_corpus(rows: list[dict[str, Any]]) -> None:
    pins = sorted({r["runtime"] for r in rows}, key=_version)
    proc = harness("recommend", "--runtime", pins[-1], "--cases", "frozen_batch_fixed,fft_rfft_matmul")
    assert proc.returncode == 0, proc.stderr
    assert "2 cases from --cases" in proc.stdout and "recommended: " in proc.stdout
    everything = harness("recommend", "--runtime", pins[-1], "--all")
    assert everything.returncode == 1, "no option passes every gotcha: that is what the corpus is for"
    assert "no exporter and opset passes every selected case" in everything.stdout and "frozen_batch" in everything.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["--runtime", "1.17.1"],
            "onnxruntime==1.17.1 is not in results/matrix.jsonl; nearest measured: onnxruntime==1.17.3, onnxruntime==1.18.1",
        ),
        (["--runtime", "1.99.0"], "nearest measured: onnxruntime==1.32.0"),
        (["--runtime", "1.17.3", "--provider", "cuda"], "--provider cuda: onnxruntime==1.17.3 was measured on cpu only"),
        (["--runtime", "1.17.3", "--provider", "cuda"], "no cuda column is published beside results/matrix.jsonl"),
        (["--runtime", "1.17.3", "--provider", "openvino"], "openvino's columns are published in results/openvino/"),
        (["--runtime", "1.17.3", "--provider", "foo"], "--provider foo: not a provider the harness runs"),
        (["--runtime", "1.17.3", "--provider", "gpu"], "--provider gpu: not a provider the harness runs"),
        (["--runtime", "onxruntime==1.17.3"], "no package 'onxruntime' in results/matrix.jsonl; did you mean onnxruntime==1.17.3?"),  # noqa: E501
        (["--runtime", "1.17.3", "--cases", "frozen_bach"], "did you mean 'frozen_batch', in results/?"),
        (["--runtime", "1.17.3", "--corpus", "examples/my_models.py"], "nox -s matrix -- --corpus examples/my_models.py"),
        (["--runtime", "1.17.3", "--results", "nowhere/matrix.jsonl"], "nowhere/matrix.jsonl: no such file"),
        (["--runtime", "abc"], "--runtime abc: 'abc' is not a version"),
        (["--runtime", "ort-1.x"], "'1.x' is not a version"),
        (["--runtime", "1.17.3", "--corpus", "no/such_models.py"], "--corpus no/such_models.py: no such file"),
        (["--runtime", "1.20.2"], "nearest measured: onnxruntime==1.20.1, onnxruntime==1.19.2"),  # nearest first
        (["--runtime", "onnxruntime=1.20.1"], "with ==, not '='; did you mean onnxruntime==1.20.1?"),
        (["--runtime", "onnxruntime>=1.20"], "give one measured pin, with ==, not '>='"),
        (["--runtime", "1.20.1", "--cases", "Lama"], "'Lama' is in no published table (did you mean 'llama', in results/architectures/?)"),  # noqa: E501
        (["--runtime", "1.20.1", "--cases", "bert,frozen_batch_fixed"], "no one table measured them together (bert in results/architectures/; frozen_batch_fixed in results/)"),  # noqa: E501
        (["--runtime", "1.20.1", "--cases", "nope_nothing"], "published table; `python -m harness list --results results`, "),
        (["--runtime", "1.20.1", "--results", "results", "--cases", "nope_nothing"], "lists its 110 cases"),
        (["--runtime", "1.20.1", "--torch", ".."], "--torch ..: not a torch release; write X.Y.Z"),
        (["--runtime", "1.20.1", "--torch", "../architectures"], "--torch ../architectures: not a torch release"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    proc = harness("recommend", *args)
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr
    assert proc.stdout == ""


def test_the_default_table_is_the_checkouts_wherever_it_is_asked(tmp_path: Path, rows: list[dict[str, Any]]) -> None:
    """Started from another folder (which has no results/), the answer still comes from this checkout's table."""
    newest = max({r["runtime"] for r in rows}, key=_version)
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "recommend", "--runtime", newest],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode in (0, 1), proc.stderr
    assert proc.stdout.startswith(f"{newest} on cpu, ") and "recommended: " in proc.stdout
    here = harness("recommend", "--runtime", newest)
    assert f"answered from {RESULTS / 'matrix.jsonl'} " in proc.stdout  # said as it is found from there
    assert proc.stdout.replace(f"{ROOT}/", "") == here.stdout


def _cell(case: str, exporter: str, opset: int, status: Status, runtime: str = "onnxruntime==1.20.1") -> CellRecord:
    return CellRecord(case, exporter, opset, runtime, "cpu", "example", status, Stage.COMPARE)


def test_ranking_highest_opset_first_then_the_broader_corpus() -> None:
    cells = [
        _cell("mine", "torchscript", 20, Status.PASS),
        _cell("mine", "dynamo", 20, Status.PASS),
        _cell("mine", "dynamo", 18, Status.PASS),
        _cell("mine", "torchscript", 18, Status.MISMATCH),
        _cell("gotcha", "dynamo", 20, Status.PASS),
        _cell("gotcha", "torchscript", 20, Status.LOAD_FAIL),
        _cell("gotcha", "dynamo", 18, Status.PASS),
        _cell("gotcha", "torchscript", 18, Status.PASS),
    ]
    answer = recommend.recommend(cells, "onnxruntime==1.20.1", "cpu", ["mine"], "1 case")
    assert [(o.exporter, o.opset, o.ok) for o in answer.options] == [
        ("dynamo", 20, True),  # ties torchscript 20 on the selection; 2 of 2 corpus cases pass, torchscript 1
        ("torchscript", 20, True),
        ("dynamo", 18, True),
        ("torchscript", 18, False),
    ]
    assert answer.best is not None and answer.best.label == "dynamo opset 20"
    text = recommend.render(answer)
    assert "torchscript opset 18: 1 of 1 fail" in text and "mine: mismatch on every probe" in text


def test_a_column_where_nothing_ran_has_no_answer() -> None:
    cells = [_cell("a", "dynamo", 18, Status.PASS, "onnxruntime==1.17.3")]
    cells += [runtime_wide("onnxruntime==1.20.1", "cpu", {}, status=Status.ENV_ERROR, error_line="onnxruntime fails to import")]
    from harness.answer.published import spread_wide

    with pytest.raises(recommend.HarnessError, match=r"no cell ran in this table \(env-error: onnxruntime fails to import\)"):
        recommend.recommend(spread_wide(cells), "onnxruntime==1.20.1", "cpu", ["a"], "1 case")


def test_a_case_that_does_not_apply_to_an_exporter_never_makes_it_none() -> None:
    """A twin written for TorchScript (a scripted Loop) is `skipped` under dynamo: dynamo's answer counts the
    cases that apply to it, names the skipped one apart, and a real failure still fails it."""
    cells = [
        _cell("twin", "torchscript", 20, Status.PASS),
        _cell("twin", "dynamo", 20, Status.PASS),
        _cell("scripted", "torchscript", 20, Status.PASS),
        _cell("scripted", "dynamo", 20, Status.SKIPPED).replace(error_line="a ScriptModule's Loop is torchscript only"),
        _cell("twin", "dynamo", 21, Status.PASS),
        _cell("scripted", "dynamo", 21, Status.SKIPPED),
        _cell("twin", "dynamo", 18, Status.MISMATCH),
        _cell("scripted", "dynamo", 18, Status.SKIPPED),
    ]
    answer = recommend.recommend(cells, "onnxruntime==1.20.1", "cpu", ["twin", "scripted"], "2 cases")
    best = recommend.per_exporter(answer)
    assert best["dynamo"].ok and best["dynamo"].opset == 21 and best["dynamo"].selected == 1
    assert best["dynamo"].skipped[0][0] == "scripted"
    assert answer.best is not None and answer.best.label == "dynamo opset 21"  # the highest safe opset of either
    dyn18 = next(o for o in answer.options if (o.exporter, o.opset) == ("dynamo", 18))
    assert not dyn18.ok and [c for c, _ in dyn18.failing] == ["twin"]
    text = recommend.render(answer)
    assert "best per exporter (--exporter X answers for one):" in text
    assert "  torchscript: opset 20: all 2 pass" in text
    assert "  dynamo: opset 21: the 1 case passes; scripted skipped: does not apply to dynamo" in text

    only = recommend.recommend(cells, "onnxruntime==1.20.1", "cpu", ["twin", "scripted"], "2 cases", exporter="torchscript")
    assert {o.exporter for o in only.options} == {"torchscript"} and only.best is not None and only.best.opset == 20
    assert "(torchscript exporter only)" in recommend.render(only) and "best per exporter" not in recommend.render(only)
    with pytest.raises(recommend.HarnessError, match=r"--exporter dynamoo: not in this table \(did you mean 'dynamo'\?\)"):
        recommend.recommend(cells, "onnxruntime==1.20.1", "cpu", ["twin"], "1 case", exporter="dynamoo")


def test_recommend_for_one_exporter_on_the_newest_runtime_names_an_opset_of_it(rows: list[dict[str, Any]]) -> None:
    """The question of a dynamo user on the newest runtime: answered for dynamo alone, an opset that every
    fixed twin applying to dynamo passes (or the twin that fails and why), agreeing with the raw rows."""
    newest = max({r["runtime"] for r in rows}, key=_version)
    cards = json.loads((RESULTS / "cases.json").read_text())
    twins = {name for name, card in cards.items() if card.get("fixes") or not card.get("symptom")}
    for exporter in ("dynamo", "torchscript"):
        proc = harness("recommend", "--runtime", newest, "--exporter", exporter)
        safe = [o for (e, o) in _safe_per_exporter(rows, newest, twins) if e == exporter]
        assert proc.returncode == (0 if safe else 1), proc.stderr
        assert f"({exporter} exporter only)" in proc.stdout.splitlines()[0]
        if safe:
            assert f"recommended: {exporter} opset {max(safe)}: " in proc.stdout
        else:
            assert f"no {exporter} exporter and opset passes" in proc.stdout
        other = "torchscript" if exporter == "dynamo" else "dynamo"
        assert f"{other} opset" not in proc.stdout


def test_a_request_the_exporter_wrote_at_another_opset_is_no_file_at_that_opset() -> None:
    """Asked for 28, dynamo keeps 18 for an SDPA model (its converter cannot take it up): the table holds one row, at
    18. The option "dynamo opset 28" has no file of that model: it fails there (a user asking for 28 believes they
    ship 28), and the option it has, 18, says which requests write it."""
    cells = [
        _cell("sdpa", "dynamo", 18, Status.PASS),
        _cell("plain", "dynamo", 18, Status.PASS),
        _cell("plain", "dynamo", 28, Status.PASS),
    ]
    answer = recommend.recommend(
        cells, "onnxruntime==1.20.1", "cpu", ["sdpa", "plain"], "2 cases", rewrites={("sdpa", "dynamo", 28): 18}
    )
    assert answer.best is not None and answer.best.opset == 18 and answer.best.asks == (18,)
    at28 = next(o for o in answer.options if o.opset == 28)
    assert not at28.ok and at28.elsewhere == (("sdpa", 18),) and at28.corpus_total == 2
    assert at28.failing == (("sdpa", "no file at opset 28: asking for 28 writes opset 18"),)
    alone = recommend.recommend(cells, "onnxruntime==1.20.1", "cpu", ["sdpa"], "1 case", rewrites={("sdpa", "dynamo", 28): 18})
    assert alone.best is not None and alone.best.opset == 18 and alone.best.asks == (18, 28) and alone.best.ask == 18
    assert "dynamo: opset 18: the 1 case passes; asking for 18, 28 writes opset 18" in recommend.render(alone)
    # A runtime that loads up to 21: the answer for the SDPA model alone is its file's opset, 18, never 28.
    loads = {"runtime": "onnxruntime==1.18.1", "max_ir": 10, "max_opset": 21}
    old = [c.replace(runtime="onnxruntime==1.18.1") for c in cells]
    old[2] = old[2].replace(status=Status.LOAD_FAIL)
    rewrites = {("sdpa", "dynamo", 28): 18}
    past = recommend.recommend(old, "onnxruntime==1.18.1", "cpu", ["sdpa"], "1 case", loads, rewrites=rewrites)
    assert past.best is not None and past.best.opset == 18 <= 21


def test_the_runtimes_the_help_gives_as_examples_are_answered() -> None:
    """``recommend --help`` names runtimes to ask about: each is answered by a published table (an example with no
    data behind it would send a new user to a refusal)."""
    from harness.cli import RUNTIME_EXAMPLES

    assert "--runtime" in harness("recommend", "--help").stdout
    for example in RUNTIME_EXAMPLES:
        spec = example.split(" (")[0]
        proc = harness("recommend", "--runtime", spec)
        assert proc.returncode in (0, 1), f"{spec}: {proc.stderr}"
        assert "recommended: " in proc.stdout or "no exporter and opset passes" in proc.stdout


def _loads(pin: str, max_ir: int, max_opset: int) -> dict[str, Any]:
    return {"runtime": pin, "max_ir": max_ir, "max_opset": max_opset}


def _written(case: str, exporter: str, opset: int, status: Status, ir: int, runtime: str) -> CellRecord:
    cell = _cell(case, exporter, opset, status, runtime)
    return cell.replace(ir_version=ir, opset_actual=opset)


def test_an_exporter_nothing_of_which_loads_is_one_line_not_a_failure_per_case() -> None:
    """Dynamo writes IR 10; a runtime that loads up to IR 9 refuses all of it: the answer says that in one line (per
    exporter, and alone with --exporter), not "53 of 53 fail" at each opset; an exporter that loads is ranked first."""
    pin = "onnxruntime==1.17.3"
    cells = [_written(c, "dynamo", o, Status.LOAD_FAIL, 10, pin) for c in ("a", "b") for o in (18, 20)]
    cells += [_written("a", "torchscript", 17, Status.PASS, 8, pin), _written("b", "torchscript", 17, Status.MISMATCH, 8, pin)]
    cells += [_written("c", "dynamo", 18, Status.EXPORT_FAIL, 0, pin), _written("c", "torchscript", 17, Status.PASS, 8, pin)]
    loads = _loads(pin, 9, 20)
    answer = recommend.recommend(cells, pin, "cpu", ["a", "b", "c"], "3 cases", loads)
    assert answer.unloadable == (("dynamo", "dynamo writes IR 10; 1.17.3 loads up to IR 9"),)
    assert answer.options[0].exporter == "torchscript"
    text = recommend.render(answer)
    assert "  dynamo: none: dynamo writes IR 10; 1.17.3 loads up to IR 9" in text
    assert "  dynamo opset 18, 20: nothing loads here (dynamo writes IR 10; 1.17.3 loads up to IR 9)" in text
    assert "2 of 3 fail" not in text and "dynamo opset 18: " not in text
    alone = recommend.render(recommend.recommend(cells, pin, "cpu", ["a", "b", "c"], "3 cases", loads, exporter="dynamo"))
    said = "none: nothing the dynamo exporter writes loads here (dynamo writes IR 10; 1.17.3 loads up to IR 9)"
    assert alone.splitlines()[-1] == said
    # Past the opset frontier only: said by opset.
    by_opset = [_written("a", "dynamo", o, Status.LOAD_FAIL, 9, pin) for o in (21, 22)]
    assert recommend.recommend(by_opset, pin, "cpu", ["a"], "1 case", loads).unloadable == (
        ("dynamo", "dynamo writes opset 21–22; 1.17.3 loads up to opset 20"),
    )
    # A refusal the frontier does not explain (a model within it: an op the runtime lacks) is a failure of its own.
    own = [*cells, _written("a", "dynamo", 19, Status.LOAD_FAIL, 9, pin)]
    assert recommend.recommend(own, pin, "cpu", ["a", "b", "c"], "3 cases", loads).unloadable == ()
    # Without a measured frontier nothing is claimed.
    assert recommend.recommend(cells, pin, "cpu", ["a", "b", "c"], "3 cases").unloadable == ()


def test_the_published_answer_on_a_runtime_that_loads_no_dynamo_export_is_one_line(rows: list[dict[str, Any]]) -> None:
    """On the published table: where every dynamo cell of a runtime that is not an export failure is refused at load
    (worked out from the raw rows), `recommend` and the README say why in one line."""
    frontier = json.loads((RESULTS / "frontier.json").read_text())
    readme = (RESULTS / "README.md").read_text().split("## Newest safe opset per runtime")[1].split("\n## ")[0]
    checked = 0
    for pin in sorted({r["runtime"] for r in rows}, key=_version):
        mine = [r for r in rows if r["runtime"] == pin and r["exporter"] == "dynamo" and r["provider"] == "cpu"]
        counted = [r for r in mine if r["status"] not in ("skipped", "export-fail")]
        if not counted or any(r["status"] != "load-fail" for r in counted):
            continue
        checked += 1
        irs = sorted({r["ir_version"] for r in counted})
        proc = harness("recommend", "--runtime", pin)
        version = pin.split("==")[1]
        said = f"dynamo writes IR {irs[0]}; {version} loads up to IR {frontier[pin]['max_ir']}"
        assert irs[0] > frontier[pin]["max_ir"] and f"  dynamo: none: {said}" in proc.stdout, proc.stdout
        assert f"| none ({said}) |" in next(ln for ln in readme.splitlines() if ln.startswith(f"| {pin} "))
    assert checked >= 3, "1.15, 1.16 and 1.17 load no IR 10 model: the table shows it"


def test_the_summary_counts_every_exporter_and_opset_as_recommend_does(rows: list[dict[str, Any]]) -> None:
    """One denominator: the README's summary per runtime and `recommend` give the same passing / counted for every
    exporter × opset of the newest runtime and of one the dynamo exporter's rewrites touch."""
    readme = (RESULTS / "README.md").read_text().split("## Summary per runtime")[1].split("\n## ")[0]
    table = [ln for ln in readme.splitlines() if ln.startswith("|") and not ln.startswith("|-")]
    head = [c.strip() for c in table[0].strip("|").split("|")]
    pins = sorted({r["runtime"] for r in rows}, key=_version)
    for pin in (pins[-1], "onnxruntime==1.22.1"):
        line = next(ln for ln in table if ln.startswith(f"| {pin.split('==')[1]} "))
        shown = dict(zip(head, [c.strip() for c in line.strip("|").split("|")], strict=True))
        proc = harness("recommend", "--runtime", pin, "--all")
        assert proc.returncode in (0, 1), proc.stderr
        from harness.answer.published import read_cells, read_frontier, read_rewrites

        table_path = RESULTS / "matrix.jsonl"
        cells = read_cells(table_path, runtime=pin)
        answer = recommend.recommend(
            cells, pin, "cpu", [], "none", read_frontier(table_path).get(pin), rewrites=read_rewrites(table_path)
        )
        for opt in answer.options:
            assert shown[f"{opt.exporter} {opt.opset}"] == f"{opt.corpus_pass}/{opt.corpus_total}", (pin, opt.label)


def test_lookups_a_person_would_expect() -> None:
    """A minor alone is its newest patch (and says so); a case by its name or title in any case, from the table that
    measured it, which the answer names."""
    minor = harness("recommend", "--runtime", "1.20")
    assert minor.returncode in (0, 1), minor.stderr
    assert "1.20 is onnxruntime==1.20.1, the newest 1.20.x measured" in minor.stdout
    assert minor.stdout.replace("1.20 is onnxruntime==1.20.1, the newest 1.20.x measured\n", "") == harness(
        "recommend", "--runtime", "onnxruntime==1.20.1"
    ).stdout
    for given in ("Llama", "LLAMA", "llama (PREFILL)"):
        proc = harness("recommend", "--runtime", "1.20.1", "--cases", given)
        assert proc.returncode in (0, 1), proc.stderr
        assert "1 case from --cases (llama)" in proc.stdout and "answered from results/architectures/matrix.jsonl" in proc.stdout
    step = harness("recommend", "--runtime", "1.20.1", "--cases", " llama   (decode step) ")
    assert "(llama_step)" in step.stdout, step.stderr
    listed = harness("list", "--results", "results/architectures")
    cases = len(json.loads((ROOT / "results" / "architectures" / "cases.json").read_text()))
    assert listed.returncode == 0 and "llama_step" in listed.stdout and listed.stdout.strip().endswith(
        f"{cases} cases in results/architectures/matrix.jsonl"
    ), listed.stdout[-300:]


def test_json_for_scripts_follows_its_schema_and_never_names_an_opset_the_runtime_cannot_load() -> None:
    import jsonschema

    schema = json.loads((ROOT / "docs" / "schemas" / "harness.recommend-1.schema.json").read_text())
    proc = harness("recommend", "--json", "--runtime", "onnxruntime==1.18.1", "--cases", "bert")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    jsonschema.validate(data, schema)
    assert data["recommended"]["opset"] <= data["loads"]["max_opset"] == 21
    assert data["table"] == "results/architectures/matrix.jsonl" and data["measured_with"]["torch"].startswith("2.")
    assert data["exit"] == 0 and data["options"][0]["ok"]
    refused = harness("recommend", "--json", "--runtime", "9.9.9")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    error = json.loads(refused.stdout)
    jsonschema.validate(error, schema)
    assert error["exit"] == 2 and "nearest measured" in error["error"]
    # The documented fields are the schema's: a field added to one and not the other fails here.
    doc = (ROOT / "docs" / "reading-the-table.md").read_text(encoding="utf-8")
    section = doc.split("#### `recommend --json`", 1)[1].split("####", 1)[0]
    for field in schema["properties"]:
        if field != "error":
            assert f"`{field}`" in section, field


def test_the_torch_release_the_default_table_measured_is_the_default_table() -> None:
    """`--torch` with the torch the default table was exported with answers from the default table itself: the same
    answer as without it. Another release's narrower table says what it measured."""
    built = published.measured_with(RESULTS / "matrix.jsonl")["torch"].split("+")[0]
    same = harness("recommend", "--runtime", "1.32.0", "--torch", built)
    plain = harness("recommend", "--runtime", "1.32.0")
    assert same.returncode == plain.returncode and same.stdout == plain.stdout
    older = sorted((p.name for p in (RESULTS / "torch").glob("*") if (p / "matrix.jsonl").is_file()), key=_version_of)
    if not older:
        pytest.skip("no torch release table published")
    proc = harness("recommend", "--runtime", "1.32.0", "--torch", older[0])
    assert proc.returncode in (0, 1), proc.stderr
    head = proc.stdout.splitlines()[:4]
    said = f"torch {older[0]}'s table measured "
    assert any(line.startswith(said) and "only (the default table:" in line for line in head), head


def _version_of(release: str) -> tuple[int, ...]:
    return tuple(int(x) for x in release.split("."))


def test_your_own_torch_is_named_with_its_table() -> None:
    from harness.answer import ask

    asked = ask.ask("1.32.0")
    built = asked.measured_with["torch"].split("+")[0]
    assert ask.local_torch(asked, built + "+cu126", None, str(RESULTS)) == []  # the same release: nothing to say
    releases = sorted((p.name for p in (RESULTS / "torch").glob("*") if (p / "matrix.jsonl").is_file()), key=_version_of)
    if releases:
        said = ask.local_torch(asked, releases[0] + "+cu121", None, str(RESULTS))
        assert said and f"`--torch {releases[0]}` answers from its table" in said[0]
    assert "which no published table measured" in ask.local_torch(asked, "2.99.0", None, str(RESULTS))[0]


def test_an_answer_for_a_platform_comes_from_that_platform_s_column() -> None:
    """`--platform aarch64` answers from the column that measured the runtime on ARM64 (results/hardware/), and the
    answer is that column's: what passes there, recomputed here from its cells."""
    hardware = ROOT / "results" / "hardware" / "matrix.jsonl"
    if not hardware.is_file():
        pytest.skip("no published hardware table (nox -s matrix -- --profile hardware)")
    proc = harness("recommend", "--platform", "aarch64", "--runtime", "onnxruntime==1.20.1", "--json")
    assert proc.returncode in (0, 1), proc.stderr
    answer = json.loads(proc.stdout)
    assert answer["table"].endswith("results/hardware/matrix.jsonl") and answer["provider"] == "cpu@aarch64", answer
    rows = [json.loads(line) for line in hardware.read_text(encoding="utf-8").splitlines()]
    on_arm = [r for r in rows if r["provider"] == "cpu@aarch64" and r["runtime"] == "onnxruntime==1.20.1"]
    assert on_arm and all(r["platform"]["isa"] == "aarch64" for r in on_arm if r["case"] != "*"), "a cell not seen as ARM64"
    picked = answer["recommended"]
    if picked is not None:  # every selected case passes every probe there, in that column
        chosen = set(answer["selection"]["cases"])
        at = (picked["exporter"], picked["opset"])
        there = [r for r in on_arm if r["case"] in chosen and (r["exporter"], r["opset"]) == at]
        assert there and all(r["status"] in ("pass", "skipped") for r in there)


def test_a_platform_never_measured_for_a_runtime_says_so() -> None:
    proc = harness("recommend", "--platform", "x86-64-v3", "--runtime", "1.24")
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("harness: error: --platform x86-64-v3: onnxruntime==1.24.4 was measured on cpu only")
    bad = harness("recommend", "--platform", "arm", "--runtime", "1.20.1")
    assert bad.returncode == 2 and "--platform arm: not a platform; use x86-64-v4, x86-64-v3, x86-64-v2, aarch64" in bad.stderr
