"""The front door's answer: the block of the project's README that states it, generated from the published table.

The README shows a short excerpt of ``results/README.md``'s "Newest safe opset per runtime" table and one
``harness recommend`` answer. Both are produced here from the published files, never typed: ``nox -s matrix``
refreshes the block after each report of the default table (``harness readme``), and a test fails when the
committed README's block is not what the committed table gives.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from harness.core.errors import HarnessError

BEGIN = "<!-- answer:begin -->"
END = "<!-- answer:end -->"
SECTION = "## Newest safe opset per runtime"
RUNTIME = "onnxruntime==1.20.1"
"""The runtime of the pasted ``harness recommend`` answer: one the README's prose explains."""
_PREFIX = "onnxruntime=="


def safe_table(readme: str) -> list[str]:
    """The published table, shortened to one screen: the provider column dropped (the CPU's), each answer cut
    before its detail in parentheses, and consecutive runtimes with the same three answers merged into one row."""
    lines = readme.splitlines()
    if SECTION not in lines:
        raise HarnessError(f"the published README has no {SECTION!r} section; run `nox -s matrix` to publish the table")
    rows: list[list[str]] = []
    header: list[str] = []
    for line in lines[lines.index(SECTION) + 1 :]:
        if line.startswith("## "):
            break
        if line.startswith("|") and not line.startswith("|-"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            header, rows = (cells, rows) if cells[0] == "runtime" else (header, [*rows, cells])
    if header != ["runtime", "provider", "recommended", "torchscript", "dynamo"]:
        raise HarnessError(f"the published {SECTION!r} table has columns {header}; this harness reads another layout")
    merged: list[tuple[list[str], tuple[str, ...]]] = []
    for runtime, provider, *answers in rows:
        if not runtime.startswith(_PREFIX) or provider != "cpu":
            continue  # the excerpt is onnxruntime's CPU column; the published README holds the others
        short = tuple(_short(a) for a in answers)
        version = runtime[len(_PREFIX) :]
        if merged and merged[-1][1] == short:
            merged[-1][0].append(version)
        else:
            merged.append(([version], short))
    out = ["| onnxruntime (cpu) | recommended | torchscript | dynamo |", "|---|---|---|---|"]
    return out + [f"| {', '.join(versions)} | {' | '.join(short)} |" for versions, short in merged]


_UNLOADABLE = re.compile(r"^none \(\w+ writes (?P<writes>[^;]+); [\w.]+ loads up to (?P<loads>[^)]+)\)$")


def _short(answer: str) -> str:
    """An answer cut before its detail in parentheses, except the one reason an exporter loads nothing on a runtime
    (``none: writes IR 10, loads up to IR 9``): the whole answer there, in one line."""
    if m := _UNLOADABLE.match(answer):
        return f"none: writes {m['writes']}, loads up to {m['loads']}"
    return answer.split(" (", 1)[0]


def recommend_head(results: Path) -> list[str]:
    """``harness recommend --runtime`` :data:`RUNTIME` on ``results``, up to its list of alternatives."""
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "recommend", "--runtime", RUNTIME, "--results", str(results)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise HarnessError(f"harness recommend --runtime {RUNTIME} failed: {proc.stderr.strip() or proc.stdout.strip()}")
    lines = proc.stdout.splitlines()
    head = lines[: lines.index("alternatives, best first:")] if "alternatives, best first:" in lines else lines
    while head and not head[-1].strip():
        head.pop()
    return head


def block(results: Path) -> str:
    """What goes between :data:`BEGIN` and :data:`END`, from the table published in ``results``."""
    table = safe_table((results / "README.md").read_text(encoding="utf-8"))
    console = ["```console", f"$ python -m harness recommend --runtime {RUNTIME}", *recommend_head(results), "```"]
    return "\n".join([*table, "", *console])


def current(readme: str) -> str:
    """The block the README holds now."""
    if BEGIN not in readme or END not in readme:
        raise HarnessError(f"README.md has no {BEGIN} … {END} block; put the two markers where the answer goes")
    return readme.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


def refresh(readme_path: Path, results: Path, *, write: bool = True) -> bool:
    """Whether the README's block is not what ``results`` gives; with ``write``, rewrite it then (nothing is
    written when it is)."""
    text = readme_path.read_text(encoding="utf-8")
    new = block(results)
    if current(text) == new:
        return False
    if not write:
        return True
    head, rest = text.split(BEGIN, 1)
    readme_path.write_text(f"{head}{BEGIN}\n{new}\n{END}{rest.split(END, 1)[1]}", encoding="utf-8")
    return True
