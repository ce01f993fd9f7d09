"""How long each test file takes, and what it checks: the table in docs/tests.md, written from real runs.

Reads the JUnit XML pytest writes (``--junitxml``) for ``nox -s unit`` and, optionally, ``nox -s tests``, and
writes docs/tests.md's table between its ``<!-- test-table -->`` markers: per test file, what it checks (the
first sentence of its docstring: tests/test_docs.py holds the table to the files and their docstrings), how many
tests each session ran and their seconds (the sum of each test's set-up, call and tear-down; a module's shared
fixtures count in its first test).

    nox -s unit -- --junitxml=build/unit.xml
    nox -s tests -- --junitxml=build/tests.xml
    python bench/test_table.py --unit build/unit.xml --tests build/tests.xml

Without ``--write`` it prints the table; ``--write`` replaces docs/tests.md's.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "tests.md"
BEGIN, END = "<!-- test-table -->", "<!-- /test-table -->"


def what(path: Path) -> str:
    """The first sentence of a test file's docstring (up to its first ``. `` or the end of its first paragraph), as
    Markdown (reST's double backquotes made single)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    first = " ".join(doc.split("\n\n")[0].split())
    match = re.match(r"(.+?\.)(\s|$)", first)
    return (match.group(1) if match else first).rstrip(":.").replace("``", "`").replace("|", "\\|")


def per_file(junit: Path) -> dict[str, tuple[int, float]]:
    """tests/test_x.py → (tests run, seconds), from one JUnit XML file (skipped tests not counted as run)."""
    found: dict[str, list[float]] = defaultdict(list)
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("skipped") is not None:
            continue
        module = case.get("classname", "").split(".")
        name = next((f"{'/'.join(module[: i + 1])}.py" for i, p in enumerate(module) if p.startswith("test_")), None)
        if name is not None:
            found[name].append(float(case.get("time", 0.0)))
    return {name: (len(times), sum(times)) for name, times in found.items()}


def table(unit: dict[str, tuple[int, float]], tests: dict[str, tuple[int, float]] | None) -> str:
    files = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").glob("test_*.py"))
    head = "| File | What it checks | `unit`: tests, s |" + (" `tests`: tests, s |" if tests is not None else "")
    rule = "|---|---|---:|" + ("---:|" if tests is not None else "")
    rows = [head, rule]
    total_u, total_t = [0, 0.0], [0, 0.0]
    for name in files:
        u = unit.get(name, (0, 0.0))
        total_u = [total_u[0] + u[0], total_u[1] + u[1]]
        row = f"| `{Path(name).name}` | {what(ROOT / name)} | {u[0]}, {u[1]:.1f} |"
        if tests is not None:
            t = tests.get(name, (0, 0.0))
            total_t = [total_t[0] + t[0], total_t[1] + t[1]]
            row += f" {t[0]}, {t[1]:.0f} |"
        rows.append(row)
    last = f"| all | | {total_u[0]}, {total_u[1]:.1f} |" + (f" {total_t[0]}, {total_t[1]:.0f} |" if tests is not None else "")
    return "\n".join([*rows, last])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--unit", type=Path, required=True, help="JUnit XML of `nox -s unit`")
    ap.add_argument("--tests", type=Path, help="JUnit XML of `nox -s tests`")
    ap.add_argument("--write", action="store_true", help="replace docs/tests.md's table")
    args = ap.parse_args()
    body = table(per_file(args.unit), per_file(args.tests) if args.tests else None)
    if not args.write:
        print(body)
        return 0
    text = DOC.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    said = f"\nMeasured {datetime.date.today().isoformat()} on 2 cores (`python bench/test_table.py`, its docstring):\n\n"
    DOC.write_text(text[:start] + said + body + "\n" + text[end:], encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
