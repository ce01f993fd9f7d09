"""Words from the data: the README's answer block and every count the README and docs give of the published tables.

The README shows the answer per onnxruntime version, one ``harness recommend`` answer, the torch it was measured with
and each request an exporter wrote at another opset. All of it is produced here from the published files, never typed:
``nox -s matrix`` refreshes the block after each report of the default table (``harness readme``), and a test fails
when the committed README's block is not what the committed table gives.

The same goes for each count the prose gives of a table (the gotchas, the families, the mismatches): it sits between
``<!-- fact:NAME -->`` and ``<!-- /fact -->`` in README.md or a page of docs/, :data:`FACTS` computes it from the
published files, ``harness readme`` rewrites it and ``harness readme --check`` (and the test) say when one is stale.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.answer import ask, published, recommend
from harness.core.errors import HarnessError

BEGIN = "<!-- answer:begin -->"
END = "<!-- answer:end -->"
SECTION = "## Newest safe opset per runtime"
RUNTIME = "onnxruntime==1.12.1"
"""The runtime of the pasted ``harness recommend`` answer: the first seed's own example (its production server runs
ONNX Runtime 1.12; the model is exported at opset 17)."""
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
    """``harness recommend --runtime`` :data:`RUNTIME` on ``results``, up to its list of alternatives: the one answer
    (:func:`harness.answer.ask.ask`), as the command prints it wherever it runs (no note on the reader's own torch)."""
    asked = ask.ask(RUNTIME, results=str(results))
    asked = dataclasses.replace(asked, table=f"{results.name}/matrix.jsonl")  # as said from the checkout's root
    lines = ask.text(asked).splitlines()
    head = lines[: lines.index("alternatives, best first:")] if "alternatives, best first:" in lines else lines
    while head and not head[-1].strip():
        head.pop()
    return head


def rewrite_lines(results: Path) -> list[str]:
    """One line per way an exporter, asked for an opset, silently wrote a lower one (``rewrites.json``)."""
    lines = []
    records = published.read_rewrite_records(results / "matrix.jsonl")
    for exporter, asked, wrote, reason, cases in published.rewrite_groups(records):
        named = ", ".join(f"`{c}`" for c in cases[:4]) + (f" and {len(cases) - 4} more" if len(cases) > 4 else "")
        said = f" ({_reason(reason)})" if reason else ""
        lines.append(
            f"- **{recommend.rewrite_said(exporter, asked, wrote)}** for "
            f"{len(cases)} case{'s' * (len(cases) != 1)}: {named}{said}"
        )
    return lines


def _reason(reason: str) -> str:
    """The exporter's words, the cause first: ``No Adapter From Version $22 for Attention`` from onnxscript's long
    line, where it gives one in parentheses."""
    m = re.search(r"\((\w+Error): (.*)\)$", reason)
    return f"{m[1]}: {m[2]}" if m else published.shorten(reason, 140)


def block(results: Path) -> str:
    """What goes between :data:`BEGIN` and :data:`END`, from the table published in ``results``."""
    table = safe_table(published.read_text(results / "README.md", "the README.md a report wrote"))
    said = published.built_said(published.measured_with(results / "matrix.jsonl"))
    asked = ask.axes_said(published.read_axes(results)[1])
    head = [
        f"Measured with {said}, at every opset each exporter writes ({asked}). Each opset named is the one the file "
        "declares (the opset written).",
        "",
    ]
    console = ["```console", f"$ python -m harness recommend --runtime {RUNTIME}", *recommend_head(results), "```"]
    rewrites = rewrite_lines(results)
    tail = ["", "Asked for one opset, an exporter sometimes writes another, without a word:", "", *rewrites] if rewrites else []
    return "\n".join([*head, *table, "", *console, *tail])


def current(readme: str) -> str:
    """The block the README holds now.

    Raises:
        HarnessError: the README has no block, or more than one marker of a kind, or the end before the beginning:
            which block is the answer cannot be told.
    """
    if BEGIN not in readme or END not in readme:
        raise HarnessError(f"README.md has no {BEGIN} … {END} block; put the two markers where the answer goes")
    if readme.count(BEGIN) != 1 or readme.count(END) != 1 or readme.index(BEGIN) > readme.index(END):
        raise HarnessError(
            f"README.md holds {BEGIN} {readme.count(BEGIN)} time(s) and {END} {readme.count(END)} time(s): which block is "
            "the answer cannot be told; keep one pair, the beginning first"
        )
    return readme.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")


# Facts: each count the prose gives of a published table ---------------------------------------------------

_FACT = re.compile(r"<!-- fact:(?P<name>[\w-]+) -->(?P<text>.*?)<!-- /fact -->", re.S)


def _cards(results: Path) -> dict[str, dict[str, str]]:
    published.check_table(results, sealed=True)
    return published.read_cases(results / "matrix.jsonl")


def _gotchas(root: Path) -> str:
    return f"{sum(bool(c.get('symptom')) and not c.get('fixes') for c in _cards(root / 'results').values()):,}"


def _twins(root: Path) -> str:
    return f"{sum(bool(c.get('fixes')) for c in _cards(root / 'results').values()):,}"


def _families(root: Path) -> str:
    """The families' files, a fix candidate's aside (the same family built with a setting its user controls)."""
    cards = _cards(root / "results" / "architectures")
    return f"{len({c.get('source_file') for c in cards.values() if not c.get('fixes')}):,}"


def _architecture_cases(root: Path) -> str:
    return f"{len(_cards(root / 'results' / 'architectures')):,}"


def _rows(table: Path) -> list[dict[str, Any]]:
    published.check_table(table, sealed=True)
    with open(table, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _scaled_floor(root: Path) -> str:
    """The smallest scaled error among the default table's mismatches on finite outputs (the scaled bound alone
    decided them), and the next case's; the other mismatches are NaN, inf, shape or integer differences."""
    rows = [r for r in _rows(root / "results" / "matrix.jsonl") if r.get("status") == "mismatch"]
    finite: dict[str, float] = {}
    for r in rows:
        d: dict[str, Any] = r["diff"] if isinstance(r.get("diff"), dict) else {}
        special = any(d.get(f"{k}_out", 0) != d.get(f"{k}_ref", 0) for k in ("nan", "inf")) or d.get("shape_mismatch")
        if d.get("scaled_error") is not None and not special:
            case = str(r["case"])
            finite[case] = min(float(d["scaled_error"]), finite.get(case, float("inf")))
    ordered = sorted(finite.items(), key=lambda kv: kv[1])
    if len(ordered) < 2:
        return "(no mismatch on finite outputs in the published table)"
    (first, low), (_, next_low) = ordered[0], ordered[1]
    return (
        f"the smallest scaled error among its {len(rows):,} mismatches is {low:.2g} (`{first}`), and every other case's "
        f"is {next_low:.2g} or more"
    )


def _frontier(root: Path) -> str:
    published.check_table(root / "results", sealed=True)
    loads = published.read_frontier(root / "results" / "matrix.jsonl")
    first = next(iter(loads.values()), {})
    irs, opsets = first.get("irs") or [0], first.get("opsets") or [0]
    grid = f"IR {irs[0]}–{irs[-1]} × opset {opsets[0]}–{opsets[-1]}"
    return f"{grid} with onnx {first.get('onnx', '?')}, {len(irs) * len(opsets)} models"


def _openvino(root: Path) -> str:
    env = published.check_table(root / "results" / "openvino", sealed=True)
    date = str(env.get("generated", "?")).split(" ")[0]
    return f"the table published on {date}: both releases, {int(env.get('cells', 0)):,} cells"


FACTS: dict[str, Callable[[Path], str]] = {
    "gotchas": _gotchas,
    "twins": _twins,
    "families": _families,
    "architecture-cases": _architecture_cases,
    "scaled-floor": _scaled_floor,
    "frontier": _frontier,
    "openvino": _openvino,
}
"""Each fact the prose may give, by name, from the project's root (its published ``results/``)."""

PAGES = ("README.md", "docs/*.md")
"""Where facts are looked for."""


def _pages(root: Path) -> list[Path]:
    return sorted({p for pattern in PAGES for p in root.glob(pattern)})


def facts(root: Path, *, write: bool = True) -> list[str]:
    """Each marked fact of the README and docs/ that is not what the published tables give (``page: name``); with
    ``write``, rewritten (each page whole, after every fact is known). A fact whose table is missing or damaged is
    refused in one line.

    Raises:
        HarnessError: a page names a fact :data:`FACTS` does not know, or its table cannot be read.
    """
    stale, pages = _facts(root)
    if write:
        replace(pages)
    return stale


def _facts(root: Path) -> tuple[list[str], dict[Path, str]]:
    """The stale facts (``page: name``) and each page that holds one, as it must read."""
    stale: list[str] = []
    cache: dict[str, str] = {}
    pages: dict[Path, str] = {}
    for page in _pages(root):
        text = published.read_text(page, "a Markdown page of the project")

        def value(m: re.Match[str], page: Path = page) -> str:
            name = m["name"]
            if name not in FACTS:
                raise HarnessError(f"{page}: <!-- fact:{name} --> is no fact this harness gives ({', '.join(FACTS)})")
            if name not in cache:
                try:
                    cache[name] = FACTS[name](root)
                except (OSError, ValueError, KeyError, TypeError) as exc:
                    raise HarnessError(f"{page}: fact {name}: its table cannot be read ({exc}); publish it first") from None
            if m["text"] != cache[name]:
                stale.append(f"{page.relative_to(root)}: {name}")
            return f"<!-- fact:{name} -->{cache[name]}<!-- /fact -->"

        new = _FACT.sub(value, text)
        if new != text:
            pages[page] = new
    return stale, pages


def replace(pages: Mapping[Path, str]) -> None:
    """Each page's new text, written whole beside it and renamed over it: a reader (and a kill, a full disk, a file-size
    limit) sees each page as it was or as it is now, never cut; where one cannot be written, none is.

    Raises:
        HarnessError: a page cannot be written (the pages are left as they were).
    """
    staged: list[tuple[Path, Path]] = []
    try:
        for page, text in pages.items():
            target = page.resolve()
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            staged.append((tmp, target))
            tmp.write_text(text, encoding="utf-8")
            shutil.copymode(target, tmp)
    except OSError as exc:
        for tmp, _ in staged:
            tmp.unlink(missing_ok=True)
        raise HarnessError(
            f"{exc.filename or 'README.md'}: cannot be written ({exc.strerror or exc}); the README and docs are left as "
            "they were: free some space or fix the permissions, then run `harness readme` again"
        ) from None
    for tmp, target in staged:
        os.replace(tmp, target)


def named(root: Path) -> Sequence[str]:
    """Every fact name the README and docs/ mark (the test checks each is one :data:`FACTS` gives)."""
    return [m["name"] for page in _pages(root) for m in _FACT.finditer(page.read_text(encoding="utf-8"))]


def results_folder(results: Path) -> None:
    """Refuse a ``--results`` that is no folder (before a lock file is put in it).

    Raises:
        HarnessError: one line, with the fix.
    """
    if not results.is_dir():
        raise HarnessError(f"--results {results}: not a folder; give the published results folder (default: results)")


def refresh(readme_path: Path, results: Path, *, write: bool = True) -> bool:
    """Whether the README's block, or a fact of the README or docs/, is not what ``results`` gives; with ``write``,
    rewrite them then (nothing is written when they are; where one is, each page is written whole: :func:`replace`).
    Facts are refreshed where ``results`` is the project's own published table (the README beside it).

    Raises:
        HarnessError: ``results`` is not a whole published table (:func:`harness.answer.published.check_table`: cut,
            damaged, of two reports), the README cannot be read or holds no single block, or a page cannot be written:
            whether the README is stale cannot be told, and nothing is written.
    """
    results_folder(results)
    published.check_table(results, sealed=True)
    if partial := published.read_partial(results / "matrix.jsonl"):
        raise HarnessError(
            f"{results} is a PARTIAL table ({len(partial)} shard(s) were not whole: {partial[0]}): the README states a "
            "whole one; run `nox -s matrix` (it runs what is missing), then `harness readme`"
        )
    text = published.read_text(readme_path, "the project's README.md, which holds the answer block")
    held = current(text)
    new = block(results)
    root = readme_path.resolve().parent
    _, pages = _facts(root) if results.resolve() == (root / "results").resolve() else ([], {})
    if held != new:
        head, rest = pages.get(readme_path.resolve(), text).split(BEGIN, 1)
        pages[readme_path.resolve()] = f"{head}{BEGIN}\n{new}\n{END}{rest.split(END, 1)[1]}"
    if write:
        replace(pages)
    return bool(pages)
