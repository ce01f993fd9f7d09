"""One answer per question, wherever it is asked: for every runtime × provider of every published table, the answer
worked out here from ``matrix.jsonl`` and ``rewrites.json`` alone (no harness code) is what ``recommend`` (text and
``--json``), the table's README, the page (in a real Chromium), each case's page, the answer per model and the table
across torch releases say; and it never names an opset the runtime does not load.

The independent rule: an option is (exporter, opset written), a row of the table; a selected case passes it when its
row there exists and every probe passes (a row whose every cell is ``skipped`` does not apply and is not counted); a
case whose request for that opset wrote another has no row there and fails it. The answer is the highest opset at which
every selected case passes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.answer import ask, published
from tests.browser import Page

pytestmark = pytest.mark.slow  # seconds a test: `nox -s tests` runs them, `nox -s unit` leaves them out

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "results"


def _tables() -> list[Path]:
    found = [RESULTS, *sorted(p.parent for p in RESULTS.glob("*/matrix.jsonl"))]
    found += sorted((p.parent for p in (RESULTS / "torch").glob("*/matrix.jsonl")), key=lambda p: p.name)
    return found


TABLES = _tables()
IDS = [str(t.relative_to(ROOT)) for t in TABLES]

Key = tuple[str, str]  # (runtime, provider)


class Table:
    """One published table, read with nothing but json."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.status: dict[tuple[str, str, str, int, str], set[str]] = {}
        self.ir: dict[tuple[str, str, int], int] = {}
        with open(folder / "matrix.jsonl", encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                if r["case"] == "*":
                    continue
                key = (r["runtime"], r["provider"], r["exporter"], r["opset"], r["case"])
                self.status.setdefault(key, set()).add(r["status"])
        self.cards: dict[str, dict[str, str]] = json.loads((folder / "cases.json").read_text(encoding="utf-8"))
        self.frontier: dict[str, dict[str, Any]] = json.loads((folder / "frontier.json").read_text(encoding="utf-8"))
        self.columns = sorted({k[:2] for k in self.status})
        self.options = {col: sorted({k[2:4] for k in self.status if k[:2] == col}) for col in self.columns}
        self.cases = list(dict.fromkeys(k[4] for k in self.status))

    @property
    def safe(self) -> list[str]:
        return [c for c in self.cases if self.cards.get(c, {}).get("fixes") or not self.cards.get(c, {}).get("symptom")]

    def passes(self, col: Key, exporter: str, opset: int, cases: list[str]) -> bool:
        """Every selected case that applies has its row at this opset written and passes every probe there, and one
        case applies."""
        applies = False
        for case in cases:
            got = self.status.get((*col, exporter, opset, case))
            if got is None:
                return False  # no file at this opset: asked for it, the exporter wrote another (or nothing measured)
            if got == {"skipped"}:
                continue  # does not apply to this exporter
            applies = True
            if not got <= {"pass", "skipped"}:
                return False
        return applies

    def best(self, col: Key, cases: list[str]) -> tuple[int | None, set[tuple[str, int]]]:
        safe = [(e, o) for e, o in self.options[col] if self.passes(col, e, o, cases)]
        top = max((o for _, o in safe), default=None)
        return top, {(e, o) for e, o in safe if o == top}


_CACHE: dict[Path, Table] = {}


def table(folder: Path) -> Table:
    if folder not in _CACHE:
        _CACHE[folder] = Table(folder)
    return _CACHE[folder]


def _said(label: str) -> tuple[str, int] | None:
    """``**dynamo opset 21**`` / ``dynamo 28`` / ``none (…)`` → (exporter, opset) or None."""
    m = re.fullmatch(r"\**(\w+)(?: opset)? (\d+)\**", label.strip())
    return (m[1], int(m[2])) if m else None


def _safe_rows(readme: str) -> dict[Key, str]:
    """The README's "Newest safe opset per runtime": (runtime, provider) → its recommended cell."""
    section = readme.split("## Newest safe opset per runtime", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and "==" in cells[0]:
            rows[(cells[0], cells[1])] = cells[2]
    return rows


def _by_runtime(text: str, pins: list[str]) -> dict[str, str]:
    """``1.15.1–1.16.3: torchscript 18 · 1.17.3: none (…)`` → version → label, every runtime of ``pins`` spelled out."""
    versions = [p.split("==")[1] for p in pins]
    out: dict[str, str] = {}
    for part in text.split(" · "):
        span, _, label = part.partition(": ")
        span = span.split(" (")[0]
        first, _, last = span.partition("–")
        i, j = versions.index(first), versions.index(last or first)
        for v in versions[i : j + 1]:
            out[v] = label
    return out


@pytest.mark.parametrize("folder", TABLES, ids=IDS)
def test_recommend_and_the_readme_give_the_independent_answer_within_what_the_runtime_loads(folder: Path) -> None:
    t = table(folder)
    rows = _safe_rows((folder / "README.md").read_text(encoding="utf-8"))
    for col in t.columns:
        top, winners = t.best(col, t.safe)
        asked = ask.ask(col[0], provider=col[1], results=str(folder))
        best = asked.answer.best
        assert (best.opset if best else None) == top, (folder, col)
        if best is not None:
            assert (best.exporter, best.opset) in winners, (folder, col, best.label, winners)
            loads = t.frontier.get(col[0])
            if loads and loads.get("max_opset") is not None:
                assert best.opset <= loads["max_opset"], (folder, col, best.label, "past what the runtime loads")
            assert best.ask is not None, (folder, col, best.label, "no request writes it for every case")
        said = rows[col]
        assert _said(said) == ((best.exporter, best.opset) if best else None), (folder, col, said)
        as_json = ask.to_json(asked)
        expected = None if best is None else {"exporter": best.exporter, "opset": best.opset, "ask": best.ask}
        assert as_json["recommended"] == expected
        assert as_json["measured_with"].get("torch"), "every answer names the torch it was measured with"


@pytest.mark.parametrize("folder", [t for t in TABLES if (t / "cases").is_dir()], ids=lambda p: str(p.relative_to(ROOT)))
def test_each_case_page_and_the_answer_per_model_say_what_recommend_says_for_that_case(folder: Path) -> None:
    """Every case's own answer (its page; for real models the README's answer per model too) is the independent
    answer for that case alone, on every runtime × provider, as `recommend --cases <case>` gives it."""
    t = table(folder)
    pins = published.runtime_order(r for r, _ in t.columns)
    readme = (folder / "README.md").read_text(encoding="utf-8")
    per_model = {}
    if "## The answer per model" in readme:
        section = readme.split("## The answer per model", 1)[1].split("\n## ", 1)[0]
        for line in section.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if line.startswith("| [") and len(cells) == 3:
                per_model[cells[1].strip("`")] = cells[2]
    providers = {p for _, p in t.columns}
    for case in t.cases:
        text = (folder / "cases" / f"{case}.md").read_text(encoding="utf-8")
        line = text.split("## The answer for this case alone", 1)[1].split("\n\n", 2)[1]
        said = line.split("): ", 1)[1]
        if case in per_model:
            assert per_model[case] == said, case
        if len(providers) > 1:
            continue  # several providers: the runs name theirs; the README's answer per runtime is checked above
        labels = _by_runtime(said, pins)
        for col in t.columns:
            top, winners = t.best(col, [case])
            label = labels[col[0].split("==")[1]]
            got = _said(label)
            if top is None:
                assert got is None and label.startswith("none"), (case, col, label)
            else:
                assert got in winners, (case, col, label, winners)


def test_the_front_readme_and_recommend_name_the_torch_and_the_requests_written_at_another_opset() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("<!-- answer:begin -->", 1)[1].split("<!-- answer:end -->", 1)[0]
    built = published.measured_with(RESULTS / "matrix.jsonl")
    assert f"torch {built['torch']}" in block and "exported with torch" in block
    rewrites = json.loads((RESULTS / "rewrites.json").read_text(encoding="utf-8"))
    for w in rewrites:  # every request written at another opset is said, with its case
        assert f"`{w['case']}`" in block or " more" in block, w


@pytest.mark.browser
@pytest.mark.parametrize("folder", [t for t in TABLES if (t / "index.html").is_file()], ids=lambda p: str(p.relative_to(ROOT)))
def test_the_page_answers_as_recommend_for_every_runtime_and_case(chromium: Any, folder: Path) -> None:
    """The page's own answer (window.harnessAnswer, which its answer box shows) for the safe models of every column,
    and for each case alone, is the independent one."""
    t = table(folder)
    p = Page(chromium, (folder / "index.html").as_uri())
    try:
        questions = [[rt, pv, "", ""] for rt, pv in t.columns]
        questions += [[rt, pv, f"={case}", ""] for rt, pv in t.columns for case in t.cases]
        answers = p.page.evaluate("(qs) => qs.map((q) => window.harnessAnswer(...q))", questions)
        for (rt, pv, text, _), got in zip(questions, answers, strict=True):
            cases = [text[1:]] if text else t.safe
            top, winners = t.best((rt, pv), cases)
            best = tuple(got["best"]) if got["best"] else None
            assert (best[1] if best else None) == top and (best is None or best in winners), (folder, rt, pv, text, got)
        assert p.errors == [], p.errors
    finally:
        p.close()


def test_the_table_across_torch_releases_gives_each_release_tables_answer() -> None:
    """results/torch/README.md's "On torch X, which exporter and opset?": per release and runtime, the independent
    answer of that release's table (the default table for the torch it was exported with), as `recommend --torch`."""
    summary = json.loads((RESULTS / "torch" / "torch.json").read_text(encoding="utf-8"))
    readme = (RESULTS / "torch" / "README.md").read_text(encoding="utf-8")
    section = readme.split("## On torch X, which exporter and opset?", 1)[1].split("\n## ", 1)[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in section.splitlines() if line.startswith("| 2.")]
    folders = {r["torch"]: (RESULTS / "torch" / r["table"]).resolve() for r in summary["releases"]}
    assert folders, "no release in torch.json"
    checked = 0
    for release, version, recommended, *_ in rows:
        t = table(folders[release])
        top, winners = t.best((f"onnxruntime=={version}", "cpu"), t.safe)
        got = _said(recommended)
        assert (got[1] if got else None) == top and (got is None or got in winners), (release, version, recommended)
        asked = ask.ask(version, torch=release)
        assert Path(asked.table).resolve().parent == folders[release]
        best = asked.answer.best
        assert (None if best is None else (best.exporter, best.opset)) == got, (release, version)
        checked += 1
    assert checked == len(summary["releases"]) * len({r[1] for r in rows}), "a release or runtime is missing its answer"
