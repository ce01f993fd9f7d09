"""The README's answer block is generated from the published table (:mod:`harness.answer.readme`): never stale."""

from __future__ import annotations

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
    for name in ("README.md", "matrix.jsonl", "cases.json", "frontier.json", "rewrites.json"):
        if (ROOT / "results" / name).exists():
            shutil.copy(ROOT / "results" / name, results / name)
    page = results / "README.md"
    text = page.read_text(encoding="utf-8")
    section = text.split(readme.SECTION, 1)
    row = next(line for line in section[1].splitlines() if line.startswith("| onnxruntime==1.32.0 "))
    page.write_text(section[0] + readme.SECTION + section[1].replace(row, "| onnxruntime==1.32.0 | cpu | none | none | none |"))
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    args = [sys.executable, "-m", "harness", "readme", "--results", str(results), "--readme", str(tmp_path / "README.md")]
    check = subprocess.run([*args, "--check"], cwd=ROOT, capture_output=True, text=True)
    assert check.returncode == 1 and "STALE" in check.stdout
    assert subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip().endswith(str(results))
    assert "| 1.32.0 | none | none | none |" in readme.current((tmp_path / "README.md").read_text(encoding="utf-8"))
    assert subprocess.run([*args, "--check"], cwd=ROOT, capture_output=True, text=True).returncode == 0
