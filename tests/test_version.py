"""One version: pyproject.toml's, shown by ``harness --version`` and heading the CHANGELOG."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_version_is_pyprojects_everywhere() -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    shown = subprocess.run([sys.executable, "-m", "harness", "--version"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == f"harness {version}"
    newest = re.search(r"^## \[?v?(\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert newest is not None and newest.group(1) == version, "the CHANGELOG's newest entry names another version"
