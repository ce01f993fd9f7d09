"""Publishing a folder of tables across one axis, beside the tables themselves, through the same staged swap as every
report (:func:`harness.publish.staged.publishing`): a kill, a full disk or a file-size limit at any instant leaves the
previous files whole, and the tables inside the folder are carried over untouched.

- **torch releases** (``harness torch-report``, :func:`write_torch`): ``README.md``, ``index.html`` and ``torch.json``,
  composed by :mod:`harness.answer.torch_table`;
- **transforms** (``harness transform-report``, :func:`write_transforms`; profile ``quantized``: ``results/quantized/``):
  per transform, runtime and platform, how many transformed files run right; the verdicts that change with the
  runtime's version or with the platform; what each transform costs against torch's fp32 outputs. ``README.md`` and
  ``transforms.json`` (schema ``harness.transforms/1``) beside the tables, one per transform (each a whole table as
  ``harness report --transform NAME`` wrote it). Read from the published tables alone (each checked whole:
  :func:`harness.answer.published.check_table`); a table that is missing, not whole or partial is said as such and its
  transform left out of every count, never guessed.
"""


from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.answer import published, torch_table
from harness.config import platforms, transforms
from harness.config.matrix import Matrix, Profile, version_tuple
from harness.core import schema
from harness.core.errors import HarnessError
from harness.core.records import CellRecord, Status
from harness.publish.staged import publishing

SCHEMA = "harness.transforms/1"
_ORDER = {s: s.severity for s in Status}


def write_transforms(profile: Profile, results: Path) -> dict[str, Any]:
    """Publish the summary of ``profile``'s transform tables in ``results``; returns it (``transforms.json``).

    Raises:
        HarnessError: the profile lists no transforms, or no transform has a whole table.
    """
    if not profile.transforms:
        raise HarnessError(f"profile {profile.name!r} lists no transforms; `harness transform-report` reads a profile that does")
    tables = [Table.read(name, results / name) for name in profile.transforms]
    if all(t.problem for t in tables):
        raise HarnessError(
            f"{results}: no transform has a whole table ({tables[0].name}: {tables[0].problem}); "
            f"run `nox -s matrix -- --profile {profile.name}`"
        )
    summary = compose(profile, tables)
    text = render(profile, tables, summary)
    with publishing(results, "transform-report") as stage:
        stage.folder(results)
        stage.write_text(results / "README.md", text)
        stage.write_text(results / published.TRANSFORM_SUMMARY, json.dumps(summary, indent=1, sort_keys=True) + "\n")
    return summary


class Table:
    """One transform's published table: its cells folded per artifact and column, its cells' drift."""

    def __init__(
        self, name: str, folder: Path, problem: str | None, cells: list[CellRecord], drift: dict[str, Any], env: dict[str, Any]
    ) -> None:
        self.name, self.folder, self.problem, self.cells, self.drift, self.env = name, folder, problem, cells, drift, env
        self.frontier: set[str] = set()
        """Keys of the cells whose file the runtime is too old to load (IR or opset: the main table's frontier)."""

    @classmethod
    def read(cls, name: str, folder: Path) -> Table:
        table = folder / "matrix.jsonl"
        if not table.is_file():
            return cls(name, folder, f"no table at {table}", [], {}, {})
        try:
            env = published.check_table(table, sealed=True)
            partial = published.read_partial(table)
            if partial:
                return cls(name, folder, f"partial: {', '.join(partial[:3])}", [], {}, env)
            cells: list[CellRecord] = []
            drift: dict[str, Any] = {}
            frontier: set[str] = set()
            with open(table, encoding="utf-8") as f:
                for line in f:
                    if not line.strip():
                        continue
                    data = json.loads(line)
                    cell = schema.record(data)
                    cells.append(cell)
                    if data.get("fault") == "frontier":  # the runtime is older than the file's IR or opset
                        frontier.add(cell.key)
                    if isinstance(data.get("drift"), dict):
                        drift[cell.key] = data["drift"]
        except (HarnessError, OSError, ValueError, KeyError, TypeError) as exc:
            return cls(name, folder, str(exc).splitlines()[0] if str(exc) else type(exc).__name__, [], {}, {})
        read = cls(name, folder, None, published.spread_wide(cells), drift, env)
        read.frontier = frontier
        return read

    def too_old(self) -> dict[str, int]:
        """Runtime pin → the transformed files it cannot load because they are newer than it (IR or opset)."""
        found: dict[str, set[tuple[str, str, int]]] = defaultdict(set)
        for c in self.cells:
            if c.key in self.frontier:
                found[c.runtime].add((c.case, c.exporter, c.opset))
        return {pin: len(files) for pin, files in sorted(found.items())}

    def folded(self) -> dict[tuple[str, str, int], dict[str, CellRecord]]:
        """(case, exporter, opset) → column → the worst cell over its probes; a column whose runtime is too old for the
        file's IR or opset is left out (:meth:`too_old`: what the main table's frontier says, not this transform's)."""
        found: dict[tuple[str, str, int], dict[str, CellRecord]] = defaultdict(dict)
        for c in self.cells:
            if c.key in self.frontier:
                continue
            slot = found[(c.case, c.exporter, c.opset)]
            col = column(c)
            if col not in slot or c.status.severity > slot[col].status.severity:
                slot[col] = c
        return found


def column(c: CellRecord) -> str:
    """``1.20.1 x86-64-v3``: the runtime's version and the platform (the provider where the column has none)."""
    version = c.runtime.partition("==")[2] or c.runtime
    return f"{version} {platforms.of(c.provider) or c.provider}"


def _column_key(col: str) -> tuple[Any, ...]:
    version, _, where = col.partition(" ")
    return (where, version_tuple(version))


def compose(profile: Profile, tables: Sequence[Table]) -> dict[str, Any]:
    """The facts: per transform and column the verdicts counted, the changes, the drift per case."""
    facts: dict[str, Any] = {"schema": SCHEMA, "profile": profile.name, "transforms": [], "changes": []}
    for t in tables:
        spec = transforms.get(t.name)
        entry: dict[str, Any] = {
            "transform": t.name,
            "tool": spec.tool,
            "says": spec.says,
            "rule": spec.rule,
            "scaled": spec.scaled,
            "drift_limit": spec.drift,
            "table": t.name,
            "problem": t.problem,
        }
        if t.problem:
            facts["transforms"].append(entry)
            continue
        versions = t.env.get("versions") if isinstance(t.env.get("versions"), dict) else {}
        entry["measured_with"] = {k: v for k, v in versions.items() if k.startswith("transform:")} if versions else {}
        folded = t.folded()
        counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for by_col in folded.values():
            for col, c in by_col.items():
                counts[col][c.status.value] += 1
        entry["columns"] = {col: dict(sorted(counts[col].items())) for col in sorted(counts, key=_column_key)}
        entry["not_applicable"] = sorted(
            {f"{k[0]} {k[1]} {k[2]}" for k, by in folded.items() if all(_not_applicable(c) for c in by.values())}
        )
        entry["drift"] = _drift_by_case(t)
        entry["too_old"] = t.too_old()
        facts["transforms"].append(entry)
        facts["changes"].extend(changes(t.name, folded))
    return facts


def _not_applicable(c: CellRecord) -> bool:
    return c.status is Status.SKIPPED and c.error_class == "Skipped" and "nothing to transform" in (c.error_line or "")


def changes(name: str, folded: Mapping[tuple[str, str, int], Mapping[str, CellRecord]]) -> list[dict[str, Any]]:
    """Every artifact whose verdict is not the same across the runtimes of one platform (``runtime``) or across the
    platforms of one runtime (``platform``): each with the verdict of every column."""
    found = []
    for (case, exporter, opset), by_col in sorted(folded.items()):
        measured = {col: c for col, c in by_col.items() if c.status not in (Status.UNAVAILABLE, Status.ENV_ERROR)}
        by_platform: dict[str, dict[str, str]] = defaultdict(dict)
        by_runtime: dict[str, dict[str, str]] = defaultdict(dict)
        for col, c in measured.items():
            version, _, where = col.partition(" ")
            by_platform[where][version] = c.status.value
            by_runtime[version][where] = c.status.value
        kinds = [
            k for k, groups in (("runtime", by_platform), ("platform", by_runtime))
            if any(len(set(g.values())) > 1 for g in groups.values())
        ]  # fmt: skip
        if kinds:
            found.append(
                {
                    "transform": name, "case": case, "exporter": exporter, "opset": opset, "changes_with": kinds,
                    "verdicts": {col: measured[col].status.value for col in sorted(measured, key=_column_key)},
                    "lines": sorted(
                        {f"{col}: {c.error_line}" for col, c in measured.items() if c.status is not Status.PASS and c.error_line}
                    )[:4],
                }
            )  # fmt: skip
    return found


def _drift_by_case(t: Table) -> dict[str, dict[str, Any]]:
    """Per case: the worst drift of any cell (of its scale), the lowest top-1 agreement, how many cells are flagged."""
    by_case: dict[str, dict[str, Any]] = {}
    for c in t.cells:
        d = t.drift.get(c.key)
        if not d:
            continue
        e = by_case.setdefault(c.case, {"worst": 0.0, "top1": None, "flagged": 0, "cells": 0})
        e["cells"] += 1
        e["worst"] = max(e["worst"], float(d.get("max_rel") or 0.0))
        e["flagged"] += bool(d.get("flagged"))
        if d.get("top1") is not None:
            e["top1"] = d["top1"] if e["top1"] is None else min(e["top1"], d["top1"])
    return dict(sorted(by_case.items()))


def _symbol(status: str) -> str:
    try:
        return Status(status).symbol
    except ValueError:
        return "?"


def render(profile: Profile, tables: Sequence[Table], facts: Mapping[str, Any]) -> str:
    """The README of the folder of transform tables."""
    lines = [
        f"# The step after export: {', '.join(profile.transforms)}",
        "",
        "What users do to an exported fp32 file before shipping it, run on every runtime and platform of profile "
        f"`{profile.name}`. A transformed file is judged against the ONNX specification's answer on **the same file** "
        "(the ONNX reference evaluator, with a reference of `MatMulNBits`'s documented semantics): a cell passes when the "
        "runtime computes what the file says, within the transform's stated tolerance; its drift from torch's fp32 "
        "output is published beside, as a number, never as a pass. In each transform's table, \"torch\" in a cell's "
        "error line names that reference (the specification's answer), not torch's own output.",
        "",
        "| transform | tool | what it does | tolerance against the spec | drift flagged past | table |",
        "|---|---|---|---|---|---|",
    ]
    for e in facts["transforms"]:
        where = f"[{e['table']}/]({e['table']}/README.md)" if not e.get("problem") else f"not whole: {e['problem']}"
        lines.append(
            f"| {e['transform']} | `{e['tool']}` | {e['says']} | {e['rule']} | "
            f"{e['drift_limit']:g} of the output's scale | {where} |"
        )
    lines += _grid(facts)
    old = [
        f"{e['transform']} on {', '.join(f'{pin.partition(chr(61) * 2)[2]} ({n})' for pin, n in e['too_old'].items())}"
        for e in facts["transforms"] if e.get("too_old")
    ]  # fmt: skip
    if old:
        lines += ["", "Left out of the counts above and of the changes below: files a runtime cannot load because their IR "
                  "or opset is newer than it (the main table's frontier, not this transform's doing; each table lists "
                  f"them): {'; '.join(old)}."]
    lines += ["", "## Verdicts that change with the runtime version or the platform", ""]
    changed = facts["changes"]
    if not changed:
        lines.append("None: on every transformed file, every runtime of a platform gives the same verdict, and every "
                     "platform of a runtime does.")
    else:
        by_kind = {k: sum(1 for c in changed if k in c["changes_with"]) for k in ("runtime", "platform")}
        lines.append(
            f"{len(changed)} transformed file(s) change verdict: {by_kind['runtime']} with the runtime's version, "
            f"{by_kind['platform']} with the platform. Per transform:"
        )
        lines.append("")
        for e in facts["transforms"]:
            if e.get("problem"):
                continue
            mine = [c for c in changed if c["transform"] == e["transform"]]
            runtime = sum(1 for c in mine if "runtime" in c["changes_with"])
            platform = sum(1 for c in mine if "platform" in c["changes_with"])
            said = f"{runtime} with the runtime's version, {platform} with the platform" if mine else "none"
            lines.append(f"- {e['transform']}: {said}")
        lines += ["", "| transform | case | exporter | opset | changes with | verdicts |", "|---|---|---|---|---|---|"]
        for c in changed:
            verdicts = ", ".join(f"{col} {_symbol(s)}" for col, s in c["verdicts"].items())
            with_ = ", ".join(c["changes_with"])
            lines.append(f"| {c['transform']} | {c['case']} | {c['exporter']} | {c['opset']} | {with_} | {verdicts} |")
    lines += _costs(facts)
    problems = [e for e in facts["transforms"] if e.get("problem")]
    if problems:
        lines += ["", "## Not whole", ""] + [f"- {e['transform']}: {e['problem']}" for e in problems]
    return "\n".join(lines) + "\n"


def _grid(facts: Mapping[str, Any]) -> list[str]:
    """The README's "Which transforms run right": per transform and column, the files by their worst verdict."""
    lines: list[str] = []
    lines += ["", "## Which transforms run right, per runtime and platform", ""]
    lines.append(
        "Transformed files (case × exporter × opset) per column, the worst verdict over their probes: ✓ pass, ≠ mismatch "
        "with the specification's answer, L load-fail, R run-fail, E the transform itself failed, – skipped (nothing to "
        "transform, or no answer from the specification: its reason is in the table)."
    )
    lines.append("")
    cols = sorted({col for e in facts["transforms"] for col in e.get("columns", {})}, key=_column_key)
    if cols:
        lines.append("| transform | " + " | ".join(cols) + " |")
        lines.append("|---|" + "---|" * len(cols))
        for e in facts["transforms"]:
            if e.get("problem"):
                continue
            row = []
            for col in cols:
                counts = e["columns"].get(col, {})
                ordered = sorted(counts.items(), key=lambda kv: _ORDER.get(Status(kv[0]), 0))
                row.append(" ".join(f"{_symbol(s)}{n}" for s, n in ordered))
            lines.append(f"| {e['transform']} | " + " | ".join(row) + " |")
    return lines


def _costs(facts: Mapping[str, Any]) -> list[str]:
    """The README's "What each transform costs": per transform and case, the worst drift, the lowest top-1, the
    flagged cells."""
    lines = ["", "## What each transform costs", ""]
    lines.append(
        "Per case, the worst drift of any cell from torch's fp32 output (max |out − fp32| over the output's largest "
        "|fp32|), the lowest top-1 agreement where the output is scores over classes, and the cells flagged (past the "
        "transform's limit: what a user meets as \"quantization broke my model\")."
    )
    for e in facts["transforms"]:
        if e.get("problem") or not e.get("drift"):
            continue
        lines += ["", f"**{e['transform']}**", "", "| case | worst drift | lowest top-1 | flagged cells |", "|---|---|---|---|"]
        for case, d in e["drift"].items():
            top = f"{d['top1']:.0%}" if d["top1"] is not None else ""
            lines.append(f"| {case} | {d['worst']:.2g} | {top} | {d['flagged']} of {d['cells']} |")
    return lines


def write_torch(matrix: Matrix, profile: Profile, results: Path) -> dict[str, Any]:
    """Publish the table across ``profile``'s torch releases in ``results``; returns its summary (``torch.json``).

    Raises:
        HarnessError: no release has a whole table, ``results`` is not a folder of torch tables, or it cannot be
            written (the previous files are left as they were).
    """
    with publishing(results, "torch-report") as stage:
        files = torch_table.compose(matrix, profile, results)
        stage.folder(results)
        for name, text in files.items():
            stage.write_text(results / name, text)
    summary: dict[str, Any] = json.loads(files[torch_table.SUMMARY])
    return summary
