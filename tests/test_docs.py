"""What the docs state about the code is the code: the package map, the layers, the rules, the test files.

A statement a test can hold is held here, so the docs cannot drift from the package as they did (a package map
missing modules, "not a ninth module" under a rule that allows nine, "onnx only under export/", a test count a
year old). Figures (durations, counts) are measured and dated by bench/test_table.py, not asserted.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from bench.test_table import BEGIN, END, what
from tests.test_architecture import ALLOWED, MAX_MODULES, PACKAGE, _modules

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
TESTS = ROOT / "docs" / "tests.md"


def _package_map(text: str) -> dict[str, set[str]]:
    """The words listed under each folder of the package map (the first code block that starts with ``harness/``)."""
    block = re.search(r"```\nharness/\n(.*?)```", text, re.S)
    assert block is not None, "no package map (a code block starting with harness/)"
    listed: dict[str, set[str]] = {}
    stack: list[tuple[int, str]] = []
    folder = ""
    for line in block.group(1).splitlines():
        head = re.match(r"( +)(\w+)/", line)
        if head:
            depth = len(head.group(1))
            stack = [(d, f) for d, f in stack if d < depth] + [(depth, head.group(2))]
            folder = "/".join(f for _, f in stack)
        elif re.match(r"  \w+\.py", line) and not line.startswith("   "):  # a module at the root (cli.py)
            folder = ""
        listed.setdefault(folder, set()).update(re.findall(r"\b(\w+)(?:\.py)?\b", line))
    return listed


def test_the_package_map_names_every_module_in_its_folder() -> None:
    listed = _package_map(ARCHITECTURE.read_text(encoding="utf-8"))
    missing = []
    for module in _modules():
        parts = module.split(".")[1:]
        if not parts or parts[-1] == "__main__" or (PACKAGE.joinpath(*parts) / "__init__.py").is_file():
            continue  # a folder's own __init__ is the folder
        folder, name = "/".join(parts[:-1]), parts[-1]
        if name not in listed.get(folder, set()) | ({"cli"} if not folder else set()):
            missing.append(f"{folder or '(root)'}: {name}")
    assert not missing, f"docs/architecture.md's package map does not list: {missing}"


def _layers(text: str) -> list[set[str]]:
    line = re.search(r"`?(core\s*<\s*config[^`\n]*)", text)
    assert line is not None, "no layer line (core < config < ...)"
    return [{f.strip() for f in group.split("|")} for group in line.group(1).split("<")]


def test_the_layer_lines_are_the_rules() -> None:
    """Every folder the rules know is in the line, and every folder a folder may import is in an earlier group."""
    for doc in (ARCHITECTURE, CONTRIBUTING):
        layers = _layers(doc.read_text(encoding="utf-8"))
        named = set().union(*layers)
        assert set(ALLOWED) <= named, (doc.name, set(ALLOWED) - named)
        rank = {f: i for i, group in enumerate(layers) for f in group}
        wrong = [f"{f} imports {g}" for f, below in ALLOWED.items() for g in below if rank[g] >= rank[f]]
        assert not wrong, (doc.name, wrong)


def test_every_rule_contributing_states_names_a_test_that_exists() -> None:
    text = CONTRIBUTING.read_text(encoding="utf-8")
    section = text.split("## The package and its import rules", 1)[1].split("\n## ", 1)[0]
    rules = re.findall(r"^\d+\. \*\*(.+?)\*\*(.*?)(?=^\d+\. |\Z)", section, re.M | re.S)
    assert len(rules) >= 8, rules
    defined = {
        node.name
        for path in (ROOT / "tests").glob("test_*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    }
    for title, body in rules:
        named = re.findall(r"`(test_\w+)`", body)
        assert named, f"rule {title!r} names no test that enforces it"
        assert set(named) <= defined, f"rule {title!r} names tests that do not exist: {set(named) - defined}"
    assert f"at most {['zero', 'one', 'two', 'three', 'four', 'five', 'six', 'seven', 'eight', 'nine'][MAX_MODULES]}" in section


def test_every_test_file_is_in_the_table_with_what_it_checks() -> None:
    text = TESTS.read_text(encoding="utf-8")
    table = text[text.index(BEGIN) : text.index(END)]
    rows = {m.group(1): m.group(2).strip() for m in re.finditer(r"^\| `(test_\w+\.py)` \| (.*?) \|", table, re.M)}
    files = {p.name: p for p in (ROOT / "tests").glob("test_*.py")}
    assert set(rows) == set(files), (sorted(set(files) - set(rows)), sorted(set(rows) - set(files)))
    stale = [name for name, said in rows.items() if said != what(files[name])]
    assert not stale, f"rerun bench/test_table.py --write: these rows no longer say what the file's docstring says: {stale}"
