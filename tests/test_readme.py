"""The README's answer block is generated from the published table (:mod:`harness.answer.readme`): never stale."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from harness.answer import readme

ROOT = Path(__file__).resolve().parent.parent


def test_the_committed_readme_states_what_the_committed_table_gives() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme.current(text) == readme.block(ROOT / "results"), "run `python -m harness readme`"


def test_a_changed_table_makes_the_block_stale_and_harness_readme_refreshes_it(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    for name in ("README.md", "matrix.jsonl", "cases.json", "frontier.json", "rewrites.json", "environment.json"):
        if (ROOT / "results" / name).exists():
            shutil.copy(ROOT / "results" / name, results / name)
    page = results / "README.md"
    text = page.read_text(encoding="utf-8")
    section = text.split(readme.SECTION, 1)
    row = next(line for line in section[1].splitlines() if line.startswith("| onnxruntime==1.32.0 "))
    page.write_text(section[0] + readme.SECTION + section[1].replace(row, "| onnxruntime==1.32.0 | cpu | none | none | none |"))
    text = (ROOT / "README.md").read_text(encoding="utf-8")  # its facts are of tables this copy lacks: plain text here
    (tmp_path / "README.md").write_text(re.sub(r"<!-- /?fact(:[\w-]+)? -->", "", text), encoding="utf-8")
    args = [sys.executable, "-m", "harness", "readme", "--results", str(results), "--readme", str(tmp_path / "README.md")]
    check = subprocess.run([*args, "--check"], cwd=ROOT, capture_output=True, text=True)
    assert check.returncode == 1 and "STALE" in check.stdout
    assert subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip().endswith(str(results))
    assert "| 1.32.0 | none | none | none |" in readme.current((tmp_path / "README.md").read_text(encoding="utf-8"))
    assert subprocess.run([*args, "--check"], cwd=ROOT, capture_output=True, text=True).returncode == 0


def test_every_count_the_readme_and_docs_give_of_a_table_is_the_tables() -> None:
    """Each marked fact (``<!-- fact:NAME -->…<!-- /fact -->``) of README.md and docs/ is what the published tables
    give; a fact name the harness does not compute fails too, and the README's headline counts are marked."""
    assert readme.facts(ROOT, write=False) == [], "run `python -m harness readme`"
    names = readme.named(ROOT)
    assert set(names) <= set(readme.FACTS) and {"gotchas", "twins", "families"} <= set(names)


def test_a_fact_that_drifts_is_stale_and_refreshed(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    shutil.copytree(ROOT / "results", tmp_path / "results", ignore=shutil.ignore_patterns("repro", "cases", "plots", "*.html"))
    (tmp_path / "docs" / "x.md").write_text("We have <!-- fact:gotchas -->7<!-- /fact --> gotchas.\n", encoding="utf-8")
    assert readme.facts(tmp_path, write=False) == ["docs/x.md: gotchas"]
    readme.facts(tmp_path)
    said = (tmp_path / "docs" / "x.md").read_text(encoding="utf-8")
    assert said == f"We have <!-- fact:gotchas -->{readme.FACTS['gotchas'](ROOT)}<!-- /fact --> gotchas.\n"
    (tmp_path / "docs" / "y.md").write_text("<!-- fact:nonsense -->1<!-- /fact -->", encoding="utf-8")
    import pytest

    from harness.core.errors import HarnessError

    with pytest.raises(HarnessError, match="is no fact this harness gives"):
        readme.facts(tmp_path, write=False)


def test_the_docs_legend_uses_the_tables_symbols() -> None:
    """docs/reading-the-table.md's table of statuses shows each status with the symbol the table and the page use."""
    from harness.core.records import Status

    doc = (ROOT / "docs" / "reading-the-table.md").read_text(encoding="utf-8").split("## Statuses", 1)[1].split("\n## ", 1)[0]
    shown = {status: symbol for symbol, status in re.findall(r"^\| (\S+) \| `([a-z-]+)` \|", doc, re.M)}
    assert shown == {s.value: s.symbol for s in Status}
