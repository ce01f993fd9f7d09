"""The published table: produced by a real run of this corpus, and showing every claim.

These tests read the committed results/ (the default profile: every
onnxruntime minor). They fail when the corpus changed and the table was not
regenerated, or when a claim is no longer what the table shows: rerun
`nox -s matrix` and commit results/.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cases import corpus
from harness.config.matrix import load, version_tuple
from harness.core.records import CellRecord, Status
from harness.publish import claims

pytestmark = pytest.mark.slow  # seconds a test: `nox -s tests` runs them, `nox -s unit` leaves them out

ROOT = Path(__file__).resolve().parent.parent
MATRIX = load(ROOT / "matrix.toml")
REGISTRY = corpus.load(MATRIX.corpus, ROOT)
TABLES = {"default": ROOT / "results"}
NEWEST = max((rt.pin for rt in MATRIX.profile("default").runtimes), key=lambda pin: version_tuple(pin.split("==")[-1]))
FAILING = {Status.MISMATCH, Status.RUN_FAIL, Status.LOAD_FAIL, Status.CRASH, Status.TIMEOUT}


def _rows(profile: str) -> list[dict]:  # type: ignore[type-arg]
    path = TABLES[profile] / "matrix.jsonl"
    if not path.exists():
        pytest.fail(f"{path} is missing: run `nox -s matrix`")
    return [json.loads(line) for line in path.read_text().splitlines()]


def _cells(profile: str) -> list[CellRecord]:
    return [CellRecord.from_dict(row) for row in _rows(profile)]


@pytest.fixture(scope="module")
def published() -> dict[str, list[CellRecord]]:
    return {name: _cells(name) for name in TABLES}


@pytest.mark.parametrize("profile", list(TABLES))
def test_table_covers_the_corpus_and_the_profile(published: dict[str, list[CellRecord]], profile: str) -> None:
    cells = published[profile]
    prof = MATRIX.profile(profile)
    assert {c.case for c in cells} == set(REGISTRY.names()), "corpus changed: regenerate the table"
    assert {c.runtime for c in cells} == {rt.pin for rt in prof.runtimes}
    assert {c.exporter for c in cells} == set(prof.exporters)
    for exporter in prof.exporters:  # rows by the opset written; a request another opset holds is a fact, not a row
        mine = [c for c in cells if c.exporter == exporter]
        assert {c.opset for c in mine} == set(prof.opsets_of(exporter))
        asked = {(c.opset_asked, c.opset) for c in mine if c.opset_asked is not None}
        assert all(a in prof.opsets_of(exporter) and a != o for a, o in asked), asked
        assert all(c.opset_actual in (None, c.opset) for c in mine)
    for case in REGISTRY:  # a case for one exporter: every cell of the other is `skipped` with its reason
        for c in cells:
            if c.case == case.name and c.exporter not in case.exporters:
                assert c.status is Status.SKIPPED and c.error_line == case.skip_reason
    assert len({c.key for c in cells}) == len(cells), "a cell appears twice"
    env = json.loads((TABLES[profile] / "environment.json").read_text())
    assert env["profile"] == profile and env["cells"] == len(cells)
    readme = (TABLES[profile] / "README.md").read_text()
    assert f"Profile **{profile}**" in readme
    for status in {c.status for c in cells}:
        assert f"`{status.value}`" in readme


CLAIMS = [(case.name, claim) for case in REGISTRY for claim in case.claims]


@pytest.mark.parametrize(("case", "claim"), CLAIMS, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CLAIMS)])
def test_every_claim_is_shown_by_the_published_table(
    published: dict[str, list[CellRecord]], case: str, claim: corpus.Claim
) -> None:
    verdicts = []
    for cells in published.values():
        newest = max({c.runtime for c in cells}, key=lambda pin: version_tuple(pin.split("==")[-1]))
        verdicts.append(claims.holds(claim.to_dict(), case, cells, newest))
    if all(v is None for v in verdicts) and claim.opset is not None and claim.runtime in (None, NEWEST):
        # an opset no published profile asks of that exporter (dynamo below 18: profile `full`): test_pipeline.py
        # checks it live on the newest runtime (LIVE_CLAIMS)
        asked = {eo for name in TABLES for eo in MATRIX.profile(name).exports()}
        assert all((e, claim.opset) not in asked for e in ([claim.exporter] if claim.exporter else ["torchscript", "dynamo"]))
        return
    assert any(v is not None for v in verdicts), f"{claims.describe(claim.to_dict(), 'newest')}: no published table measures it"
    assert all(v is not False for v in verdicts), f"{claims.describe(claim.to_dict(), 'newest')}: the table disagrees"


def test_every_published_mismatch_says_where_it_starts_and_whether_the_optimizer_is_to_blame(
    published: dict[str, list[CellRecord]],
) -> None:
    mismatches = [c for c in published["default"] if c.status is Status.MISMATCH]
    assert mismatches
    unlocalized = [c.key for c in mismatches if not c.localization]
    unchecked = [c.key for c in mismatches if c.optimizer is None]
    assert not unlocalized, f"{len(unlocalized)} mismatches without localization, e.g. {unlocalized[:3]}"
    assert not unchecked, f"{len(unchecked)} mismatches without the optimizations-off verdict, e.g. {unchecked[:3]}"


def test_every_failing_cell_links_a_reproducer_that_is_committed(published: dict[str, list[CellRecord]]) -> None:
    rows = _rows("default")
    failing = [r for r in rows if Status(r["status"]) in FAILING and r["case"] != "*"]
    assert failing
    missing = [(r["case"], r["exporter"], r["opset"], r["runtime"], r["probe"]) for r in failing if "repro" not in r]
    assert not missing, f"failing cells without a reproducer: {missing[:5]}"
    for folder in {r["repro"] for r in failing}:
        repro = ROOT / "results" / folder
        assert (repro / "repro.py").is_file() and (repro / "model.onnx").is_file(), folder
        assert (repro / "test_data_set_0" / "input_0.pb").is_file() or not any(repro.glob("test_data_set_*/input_*.pb"))
    page = (ROOT / "results" / "cases" / f"{failing[0]['case']}.md").read_text()  # the case's own page links it
    assert f"](../{failing[0]['repro']}/repro.py)" in page
    # no reproducer is left behind for an artifact that no longer fails
    linked = {r["repro"].split("/")[1] for r in failing}  # repro/<artifact>, or repro/frontier/<ir.op> shared
    assert {p.name for p in (ROOT / "results" / "repro").iterdir()} == linked


def test_the_page_plots_history_and_cards_come_from_the_same_run(published: dict[str, list[CellRecord]]) -> None:
    """index.html embeds every cell of matrix.jsonl (runtime-wide records spread); history.jsonl's last line
    counts exactly those cells; cases.json holds every case's card; the README embeds the plots it wrote."""
    from harness.answer.published import read_cells

    results = ROOT / "results"
    cells = read_cells(results / "matrix.jsonl")
    html = (results / "index.html").read_text(encoding="utf-8")
    payload = json.loads(html.split('<script id="data" type="application/json">', 1)[1].split("</script>", 1)[0])
    assert len(payload["cells"]) == len(cells)
    statuses = [s[0] for s in payload["statuses"]]
    embedded: dict[str, int] = {}
    for cell in payload["cells"]:
        embedded[statuses[cell[3]]] = embedded.get(statuses[cell[3]], 0) + 1
    counts: dict[str, int] = {}
    for c in cells:
        counts[c.status.value] = counts.get(c.status.value, 0) + 1
    assert embedded == counts
    assert [c["runtime"] for c in payload["columns"]] == sorted(
        {c.runtime for c in cells}, key=lambda p: version_tuple(p.split("==")[1])
    )

    history = [json.loads(line) for line in (results / "history.jsonl").read_text().splitlines()]
    assert history and history[-1]["counts"] == counts and history[-1]["cells"] == len(cells)
    env = json.loads((results / "environment.json").read_text())
    assert history[-1]["date"] <= env["generated"] and history[-1]["torch"] == env["export"]["torch"]
    assert len({e["run"] for e in history}) == len(history), "one line per run"

    cards = json.loads((results / "cases.json").read_text())
    assert set(cards) == set(REGISTRY.names())
    for case in REGISTRY:
        assert cards[case.name].get("fixes") == case.fixes and cards[case.name]["source_file"] == case.source_file

    readme = (results / "README.md").read_text()
    for name in ("pass_rate", "pass_rate_all"):
        assert f"](plots/{name}.svg)" in readme and (results / "plots" / f"{name}.svg").is_file()
    assert "## Newest safe opset per runtime" in readme and "## Trend" in readme and "## Summary per runtime" in readme


def test_the_readme_fits_github_and_links_every_case_s_own_page() -> None:
    """GitHub renders a Markdown file up to about 512 KB: the summary stays within 400 KB, and each case's
    section is a page of its own in results/cases/, linked from it, none left for a case the table lacks."""
    readme = ROOT / "results" / "README.md"
    assert readme.stat().st_size <= 400_000, f"{readme}: {readme.stat().st_size} bytes"
    text = readme.read_text()
    pages = {p.stem: p for p in (ROOT / "results" / "cases").glob("*.md")}
    assert set(pages) == set(REGISTRY.names())
    for name, page in pages.items():
        assert f"- [{name}](cases/{name}.md)" in text
        body = page.read_text()
        assert body.startswith(f"# {name}\n") and "Across runtimes and providers:" in body
        assert "[← the table](../README.md)" in body
