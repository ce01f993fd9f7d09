"""The table across torch releases: one profile's tables, one per torch release, read together.

A profile that lists torch releases (``torch = ["2.5.1", …]`` in matrix.toml) exports, runs and reports each release
as a table of its own (``results/torch/<release>/``: the page, the README, the reproducers, as every table). This
module reads those published tables, and nothing else, and writes beside them:

- ``README.md``: the releases and what each exporter writes unasked; on each torch release, which exporter and opset
  to ship per runtime; per case, the torch release where its verdict changes, and in which direction; every dynamo
  export that was a silent fallback (:attr:`harness.core.records.Status.FALLBACK`);
- ``index.html``: the same, as a page, linking each release's own page;
- ``torch.json``: the same facts for a program, and the hash of each release's ``matrix.jsonl`` that they come from
  (:func:`why_stale` compares them).

A release whose table is missing or partial is said so in every section, never left out in silence.
Standard library only.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.answer import ask, lookup, published, recommend
from harness.config.matrix import Matrix, Profile
from harness.core.errors import HarnessError
from harness.core.records import CellRecord, Status

SUMMARY = published.TORCH_SUMMARY
_CODE = (Path(__file__), *(Path(str(m.__file__)) for m in (ask, lookup, published, recommend)))


def _sha(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _code() -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in _CODE)).hexdigest()[:16]


def folders(matrix: Matrix, profile: Profile, results: Path) -> dict[str, Path]:
    """Each release's table: ``<results>/<release>/`` where one was published there, else, for the torch the default
    table was exported with (``[export] torch``), the default table itself: the same environment and the same
    artifacts, measured at every opset and on every runtime of the default profile (:func:`reuses_default`)."""
    out = {}
    for release in profile.torch:
        own = results / release
        reuse = release == matrix.export.torch and not (own / "matrix.jsonl").is_file()
        out[release] = default_table(matrix) if reuse else own
    return out


def default_table(matrix: Matrix) -> Path:
    """The default profile's table (``results/``)."""
    return matrix.profile("default").results("build")


def reuses_default(matrix: Matrix, profile: Profile, *, custom: bool) -> str | None:
    """The release of ``profile`` that is the default table's measurement rather than a table of its own: the torch of
    ``[export]``, unless the run is ``custom`` (its own corpus or cases, which the default table did not measure)."""
    if custom or matrix.export.torch not in profile.torch:
        return None
    return matrix.export.torch


def _inputs(matrix: Matrix, profile: Profile, results: Path) -> dict[str, Any]:
    tables = {r: _sha(folder / "matrix.jsonl") for r, folder in folders(matrix, profile, results).items()}
    return {"profile": profile.name, "releases": list(profile.torch), "tables": tables, "code": _code()}


def why_stale(matrix: Matrix, profile: Profile, results: Path) -> str | None:
    """Why ``results/README.md`` (the table across releases) must be written again; None: it says what the release
    tables say."""
    summary = _read_json(results / SUMMARY)
    if not summary:
        return f"no {results / SUMMARY} yet"
    if summary.get("inputs") != _inputs(matrix, profile, results):
        return "a release's table, the releases or this code changed"
    for name in ("README.md", "index.html"):
        if summary.get("outputs", {}).get(name) != _sha(results / name):
            return f"{results / name} differs from what was written"
    return None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# Reading the release tables --------------------------------------------------------------------------------


class Release:
    """One release's published table, as far as it is there."""

    def __init__(self, release: str, folder: Path, default: bool = False, profile: str = "torch") -> None:
        self.release, self.folder = release, folder
        self.default = default
        """The default table (the torch ``[export]`` pins): measured at every opset and runtime of the default profile."""
        self.problem: str | None = None
        self.cells: list[CellRecord] = []
        self.faults: dict[str, dict[str, Any]] = {}
        """Each failing cell's fault, by cell key, as its table published it (:mod:`harness.answer.fault`)."""
        self.rewrites: dict[tuple[str, str, int], int] = {}
        self.environment: dict[str, Any] = {}
        run = "nox -s matrix" if default else f"nox -s matrix -- --profile {profile}"
        if not (folder / "matrix.jsonl").is_file():
            self.problem = f"not measured: no table (run `{run}`)"
            return
        try:
            self.environment = published.check_table(folder, sealed=True)
            if (foreign := published.foreign_table(self.environment, release, "default" if default else profile)) is not None:
                self.environment = {}
                raise HarnessError(f"{folder / 'environment.json'}: {foreign}; republish it with `{run}`")
            with published.reading(folder / "matrix.jsonl"):
                self.cells = published.read_cells(folder, faults=self.faults)
            # (case, exporter, opset asked) → opset written, where the release answered a request with another opset
            # and the table kept that export in the written opset's row only (torch 2.5's dynamo writes 18 for 20).
            self.rewrites = published.read_rewrites(folder / "matrix.jsonl")
            partial = published.read_partial(folder)
        except HarnessError as exc:
            self.problem, self.cells = f"unreadable: {exc}", []
            return
        if partial:
            self.problem = f"PARTIAL: {len(partial)} shard(s) were not whole ({partial[0]})"

    @property
    def build(self) -> str:
        export = self.environment.get("export", {})
        return str(export.get("torch", self.release)) if isinstance(export, dict) else self.release

    def package(self, name: str) -> str:
        export = self.environment.get("export", {})
        return str(export.get(name, "?")) if isinstance(export, dict) else "?"

    def defaults(self) -> dict[str, Any]:
        found = self.environment.get("default_opsets")
        return found if isinstance(found, dict) else {}

    def within(self, profile: Profile) -> list[CellRecord]:
        """Its cells on the profile's runtimes, at the opsets the profile asks: what compares with the other releases
        (the default table measures more of both)."""
        pins = {rt.pin for rt in profile.runtimes}
        return [
            c for c in self.cells if c.runtime in pins and (c.opset_asked or c.opset) in profile.opsets_of(c.exporter)
        ]

    def measured(self) -> str:
        """``TorchScript 17, 18, 20 and dynamo 18, 20 on 1.17.3, 1.20.1, 1.32.0``: what its table measured."""
        said = ask.axes_said(recommend.asked_opsets(self.cells, self.rewrites))
        versions = [p.split("==")[-1] for p in published.runtime_order(c.runtime for c in self.cells)]
        where = ", ".join(versions) if len(versions) <= 4 else f"{len(versions)} runtimes ({versions[0]} … {versions[-1]})"
        return f"{said} on {where}" if said else "nothing"


def _verdicts(r: Release, cells: Sequence[CellRecord] | None = None) -> dict[tuple[str, str, int, str, str], list[CellRecord]]:
    """Cells by (case, exporter, opset asked, runtime, provider). A request the release answered with another opset
    that was asked too stands for that row's cells: the same file, which is what a user asking for it gets."""
    out: dict[tuple[str, str, int, str, str], list[CellRecord]] = {}
    for c in r.cells if cells is None else cells:
        out.setdefault((c.case, c.exporter, c.opset_asked or c.opset, c.runtime, c.provider), []).append(c)
    for (case, exporter, asked), wrote in r.rewrites.items():
        for key in [k for k in out if k[:3] == (case, exporter, wrote)]:
            out.setdefault((case, exporter, asked, *key[3:]), out[key])
    return out


def changes(releases: Sequence[Release], profile: Profile | None = None) -> list[dict[str, Any]]:
    """Every case × exporter × opset whose verdict (the worst over its probes) differs between torch releases on some
    runtime: runtimes with the same verdicts share one entry. Only releases whose table is whole count, each on the
    ``profile``'s runtimes and opsets (where given)."""
    whole = [r for r in releases if r.problem is None]
    by_release = {r.release: _verdicts(r, r.within(profile) if profile is not None else None) for r in whole}
    keys = sorted(
        {k for v in by_release.values() for k in v}, key=lambda k: (k[0], k[1], k[2], published.runtime_key(k[3]), k[4])
    )
    grouped: dict[tuple[Any, ...], dict[str, Any]] = {}
    for key in keys:
        seq = []
        for r in whole:
            hit = by_release[r.release].get(key)
            seq.append(published.worst(hit).value if hit else "")
        if len({s for s in seq if s}) < 2:
            continue
        case, exporter, opset, runtime, provider = key
        entry = grouped.setdefault((case, exporter, opset, provider, tuple(seq)), {
            "case": case, "exporter": exporter, "opset": opset, "provider": provider, "runtimes": [],
            "verdicts": dict(zip([r.release for r in whole], seq, strict=True)),
        })  # fmt: skip
        entry["runtimes"].append(runtime)
        if "why" not in entry:
            entry["why"] = {r.release: _why(by_release[r.release].get(key)) for r in whole}
            entry["faults"] = {r.release: f for r in whole if (f := _fault(r, by_release[r.release].get(key)))}
            entry["wrote"] = {r.release: w for r in whole if (w := r.rewrites.get((case, exporter, opset))) is not None}
    out = list(grouped.values())
    for e in out:
        e["change"] = _direction(e["verdicts"], e.get("faults", {}))
    return out


def _fault(r: Release, cells: list[CellRecord] | None) -> str | None:
    """The fault of the cells that fold a verdict: the worst cells' one, where they agree (None: no fault, or none
    published)."""
    if not cells:
        return None
    status = published.worst(cells)
    kinds = {r.faults.get(c.key, {}).get("fault") for c in cells if c.status is status}
    return kinds.pop() if len(kinds) == 1 else None


def _why(cells: list[CellRecord] | None) -> str:
    if not cells:
        return ""
    return published.shorten(published.why(cells), 200)


def _direction(verdicts: Mapping[str, str], faults: Mapping[str, str] | None = None) -> str:
    """``passes from 2.9.1 (fallback before)``, ``fails from 2.9.1 (export-fail; pass before)``, or each step; a pass
    after the file's fault (``faults``, by release: :mod:`harness.answer.fault`) is the first release that writes a
    good file: ``passes from 2.9.1 (run-fail before, the exporter's fault: 2.9.1 is the first to write a good file)``."""
    steps = [(a, b) for a, b in zip(verdicts.items(), list(verdicts.items())[1:], strict=False) if a[1] != b[1]]
    words = []
    faults = faults or {}
    for (was, before), (release, after) in steps:
        if after == "pass" and faults.get(was) == "exporter":
            good = f"the exporter's fault: {release} is the first to write a good file"
            words.append(f"passes from {release} ({before} before, {good})")
        elif after == "pass":
            words.append(f"passes from {release} ({before or 'not measured'} before)")
        elif before == "pass":
            words.append(f"fails from {release} ({after}; pass before)")
        else:
            words.append(f"{before or 'not measured'} → {after or 'not measured'} from {release}")
    return "; ".join(words)


def fallbacks(releases: Sequence[Release]) -> list[dict[str, Any]]:
    """Every dynamo artifact whose graph a fallback captured: case, opset, release, what its cells were."""
    found: dict[tuple[str, int, str], set[str]] = {}
    for r in releases:
        for c in r.cells:
            if c.exporter == "dynamo" and (c.status is Status.FALLBACK or "dynamo fallback" in (c.note or "")):
                found.setdefault((c.case, c.opset_asked or c.opset, r.release), set()).add(c.status.value)
    return [
        {"case": case, "opset": opset, "torch": release, "statuses": sorted(statuses)}
        for (case, opset, release), statuses in sorted(found.items())
    ]


def written(r: Release) -> dict[str, str]:
    """What each exporter wrote on this release: IR and opset, per opset asked (from its cells)."""
    seen: dict[tuple[str, int], set[tuple[int, int]]] = {}
    for c in r.cells:
        if c.ir_version and c.opset:
            seen.setdefault((c.exporter, c.opset_asked or c.opset), set()).add((c.ir_version, c.opset))
    for (_, exporter, asked), wrote in r.rewrites.items():
        seen.setdefault((exporter, asked), set()).update(seen.get((exporter, wrote), set()))
    return {f"{e} {asked}": ", ".join(f"IR {ir} / opset {op}" for ir, op in sorted(v)) for (e, asked), v in sorted(seen.items())}


# Writing ---------------------------------------------------------------------------------------------------


def compose(matrix: Matrix, profile: Profile, results: Path) -> dict[str, str]:
    """The table across releases, from the release tables in ``results``: ``README.md``, ``index.html`` and
    ``torch.json`` by name, for :func:`harness.publish.tables.write_torch` to publish as one.

    Raises:
        HarnessError: the profile lists no torch releases, or no release has a readable table.
    """
    if not profile.torch:
        raise HarnessError(f"profile {profile.name!r} lists no torch releases; `harness torch-report` reads a profile that does")
    tables = folders(matrix, profile, results)
    default = default_table(matrix)
    releases = [Release(r, folder, default=folder == default, profile=profile.name) for r, folder in tables.items()]
    if all(r.problem is not None and not r.cells for r in releases):
        raise HarnessError(
            f"{results}: no torch release has a whole table ({releases[0].release}: {releases[0].problem}); "
            f"run `nox -s matrix -- --profile {profile.name}`"
        )
    facts = {
        "releases": [_release_facts(r, results) for r in releases],
        "answers": {r.release: _answer(r, profile) for r in releases},
        "changes": changes(releases, profile),
        "fallbacks": fallbacks(releases),
    }
    markdown = render(profile, releases, facts)
    files = {"README.md": markdown, "index.html": _page(markdown)}
    summary = {
        **facts,
        "inputs": _inputs(matrix, profile, results),
        "outputs": {n: hashlib.sha256(text.encode("utf-8")).hexdigest() for n, text in files.items()},
    }
    return {**files, SUMMARY: json.dumps(summary, indent=1, sort_keys=True) + "\n"}


def _release_facts(r: Release, results: Path) -> dict[str, Any]:
    return {
        "torch": r.release,
        "table": os.path.relpath(r.folder, results),
        "default_table": r.default,
        "measured": r.measured(),
        "build": r.build,
        "onnx": r.package("onnx"),
        "onnxscript": r.package("onnxscript"),
        "default_opsets": r.defaults(),
        "written": written(r),
        "cells": len(r.cells),
        "problem": r.problem,
    }


def _answer(r: Release, profile: Profile) -> list[list[str]]:
    """Per runtime of the profile (the torch profile's: the same runtimes for every release), the answer for the
    release's safe models, as every answer is made (:func:`harness.answer.recommend.combine`): ``[runtime, recommended,
    torchscript's best, dynamo's best]``."""
    if r.problem is not None and not r.cells:
        return []
    pins = {rt.pin for rt in profile.runtimes}
    try:
        cards = published.read_cases(r.folder)
    except HarnessError:
        cards = {}
    cells = [c for c in r.cells if c.runtime in pins]
    chosen = lookup.select(list(dict.fromkeys(c.case for c in cells)), cards, str(r.folder / "matrix.jsonl"))
    rows = []
    for col in recommend.columns(cells, published.read_frontier(r.folder / "matrix.jsonl"), r.rewrites):
        if col.provider != "cpu":
            continue
        answer = recommend.combine(col, chosen.cases, chosen.said)
        mine = recommend.per_exporter(answer)
        best = answer.best
        row = [col.runtime.split("==")[-1], f"**{best.exporter} opset {best.opset}**" if best else "none"]
        for exporter in ("torchscript", "dynamo"):
            o = mine.get(exporter)
            if o is None:
                row.append("not measured")
            elif o.ok:
                row.append(str(o.opset))
            elif not o.selected:
                row.append(f"none (does not apply to {exporter})")
            elif (cannot := answer.cannot_load(exporter)) is not None:
                row.append(f"none: {cannot}")
            else:
                row.append(f"none (closest opset {o.opset}: {len(o.failing)} of {o.selected} fail)")
        rows.append(row)
    return rows


_SYMBOL = {s.value: s.symbol for s in Status}


def render(profile: Profile, releases: Sequence[Release], facts: Mapping[str, Any]) -> str:
    """The README of the table across torch releases.

    (Over 60 lines, on purpose: the page read top to bottom, its sections in page order, each a few lines of text
    around one table; split up, each piece would be a one-caller function holding one paragraph.)"""
    runtimes = ", ".join(rt.pin for rt in profile.runtimes)
    asked = "; ".join(f"{e} {', '.join(map(str, profile.opsets_of(e)))}" for e in profile.exporters)
    own = [r.release for r in releases if not r.default]
    reused = [r for r in releases if r.default]
    lines = [
        f"# Torch releases: profile `{profile.name}`",
        "",
        f"The corpus exported by each torch release ({', '.join(profile.torch)}), each in an export environment of "
        f"its own, by both exporters, and run on onnxruntime. Each release is a table of its own "
        "(linked below: its page, its README, its reproducers); this page reads them together. "
        + (
            f"Torch {', '.join(own)} {'is' if len(own) == 1 else 'are'} measured by this profile ({asked}, on {runtimes}); "
            if own else ""
        )
        + "".join(
            f"torch {r.release} is the default table's own measurement (the same environment and artifacts, at every "
            "opset and on every runtime of the default profile), compared here on this profile's runtimes and opsets. "
            for r in reused
        )
        + "Generated by `harness torch-report` from those tables; `python -m harness recommend --torch X.Y.Z "
        "--runtime 1.20.1` answers from one of them, and says what it measured.",
        "",
        "## The releases",
        "",
        "| torch | build | onnxscript | onnx | unasked, TorchScript writes | unasked, dynamo writes | measured | "
        "TorchScript writes (asked → IR / opset) | dynamo writes (asked → IR / opset) | cells | table |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r, f in zip(releases, facts["releases"], strict=True):
        d = f["default_opsets"]
        where = f["table"].replace(os.sep, "/")
        table = f"[page]({where}/index.html), [README]({where}/README.md)" if r.cells else "—"
        table += " (the default table)" if r.default else ""
        problem = f" **{f['problem']}**" if f["problem"] else ""
        lines.append(
            f"| {r.release}{problem} | {f['build']} | {f['onnxscript']} | {f['onnx']} | {_opset(d.get('torchscript'))} | "
            f"{_opset(d.get('dynamo'))} | {f['measured']} | {_writes(f['written'], 'torchscript')} | "
            f"{_writes(f['written'], 'dynamo')} | {f['cells']:,} | {table} |"
        )
    lines += [
        "",
        '"Unasked": the opset each exporter writes when `opset_version` is not given, measured in that release\'s '
        "environment on a one-layer module. \"Writes\": the opset of the file, per opset asked (an exporter that cannot "
        "convert to the opset asked keeps a lower one).",
        "",
        "## On torch X, which exporter and opset?",
        "",
        f"Per release and runtime ({runtimes}): the highest opset written at which every fixed twin passes, the "
        "recommended exporter, and each exporter's best, within what that release's table measured (the column "
        "above): the same answer as `harness recommend --torch X.Y.Z --runtime R`, which says why and what fails "
        "elsewhere.",
        "",
        "| torch | onnxruntime (cpu) | recommended | torchscript | dynamo |",
        "|---|---|---|---|---|",
    ]
    for r in releases:
        rows = facts["answers"][r.release]
        if not rows:
            lines.append(f"| {r.release} | {r.problem or 'no answer'} | | | |")
        for row in rows:
            lines.append("| " + " | ".join([r.release, *(_cell(c) for c in row)]) + " |")
    lines += _changes_section(releases, facts["changes"])
    lines += _fallback_section(facts["fallbacks"])
    lines += [
        "",
        "## Legend",
        "",
        "Statuses as in every table (each release's README has the legend). `fallback` (↩): `torch.onnx.export(dynamo=True)` "
        "returned a model, but `torch.export` had failed and torch captured the graph another way (on 2.5.1 and "
        "2.7.1: `torch.jit.trace`), silently; the file ran and matched torch on every probe, "
        "and it is still no dynamo export: it holds the one path the example took. It never counts as a pass.",
        "",
    ]
    return "\n".join(lines)


def _cell(text: str) -> str:
    """Text as one Markdown table cell: its pipes escaped (the page's table reads them back whole)."""
    return text.replace("|", "\\|")


def _writes(written: Mapping[str, str], exporter: str) -> str:
    """``17 → 8 / 17; 18 → 8 / 18``: per opset asked, the IR and opset the exporter wrote."""
    said = [
        f"{key.split()[1]} → {value.replace('IR ', '').replace(' / opset ', ' / ')}"
        for key, value in written.items()
        if key.split()[0] == exporter
    ]
    return "; ".join(said) or "—"


def _opset(value: Any) -> str:
    return f"opset {value}" if isinstance(value, int) else (str(value) if value else "not measured")


def _changes_section(releases: Sequence[Release], found: Sequence[Mapping[str, Any]]) -> list[str]:
    whole = [r.release for r in releases if r.problem is None]
    missing = [f"{r.release} ({r.problem})" for r in releases if r.problem is not None]
    lines = [
        "",
        "## Where the torch release changes the verdict",
        "",
        f"{len(found)} case × exporter × opset verdicts differ between torch releases on some runtime (worst probe; "
        "runtimes that agree share a row). \"(wrote 18)\": that release answered the opset asked with another, "
        "and the verdict is that file's." + (f" Not compared: {'; '.join(missing)}." if missing else ""),
        "",
    ]
    if not found:
        return [*lines, "Every verdict is the same on every release."]
    lines += [
        "In short: the same change over the same runtimes, by how many cases it moves (a case counts once however "
        "many opsets it moves at).",
        "",
        "| exporter | runtimes | change | cases | the first case's failure at its first step |",
        "|---|---|---|---|---|",
    ]
    for exporter, rts, change, cases, why in grouped_changes(found):
        named = ", ".join(f"`{c}`" for c in cases[:6]) + (f" and {len(cases) - 6} more" if len(cases) > 6 else "")
        said = published.shorten(why, 200).replace("|", "\\|") if why else ""
        lines.append(f"| {exporter} | {rts} | {change} | {len(cases)}: {named} | {said} |")
    lines += [
        "",
        f"| case | exporter | opset | runtimes | {' | '.join(whole)} | change |",
        "|---|---|---|---|" + "---|" * len(whole) + "---|",
    ]
    for e in found:
        wrote = e.get("wrote", {})
        marks = " | ".join(
            (f"{_SYMBOL.get(v, '')} {v}".strip() or "—") + (f" (wrote {wrote[r]})" if r in wrote else "")
            for r, v in e["verdicts"].items()
        )
        rts = ", ".join(rt.split("==")[-1] for rt in e["runtimes"])
        lines.append(f"| `{e['case']}` | {e['exporter']} | {e['opset']} | {rts} | {marks} | {e['change']} |")
    return lines


def grouped_changes(found: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str, list[str], str]]:
    """(exporter, runtimes, change, cases, why): the entries of :func:`changes` that say the same thing, most cases
    first, with why the first of them fails on the failing side of its first step. A change whose earlier step is
    only "not measured" (an opset a release did not export) keeps its measured steps only."""
    groups: dict[tuple[str, str, str], set[str]] = {}
    why: dict[tuple[str, str, str], str] = {}
    for e in found:
        steps = [w for w in str(e["change"]).split("; ") if not w.startswith("not measured →")]
        if not steps:
            continue
        rts = ", ".join(rt.split("==")[-1] for rt in e["runtimes"])
        key = (str(e["exporter"]), rts, "; ".join(steps))
        groups.setdefault(key, set()).add(str(e["case"]))
        if key not in why:
            measured = [(r, v) for r, v in e["verdicts"].items() if v]
            at = next((i for i, (_, v) in enumerate(measured) if v != measured[0][1]), None)
            # the failing side of the first step: after it, or before it where it is a pass
            side = None if at is None else measured[at - 1 if measured[at][1] == "pass" else at][0]
            why[key] = str(e.get("why", {}).get(side, "")) if side else ""
    return sorted(((*k, sorted(v), why[k]) for k, v in groups.items()), key=lambda g: (-len(g[3]), g[0], g[1], g[2]))


def _fallback_section(found: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["", "## Dynamo's silent fallback", ""]
    if not found:
        return [*lines, "No dynamo export of any release fell back: `torch.export` captured every graph that exported."]
    by_case: dict[tuple[str, str], list[str]] = {}
    for f in found:
        by_case.setdefault((f["case"], ", ".join(f["statuses"])), []).append(f"{f['torch']} (opset {f['opset']})")
    lines += [
        "These dynamo exports reported success, but `torch.export` had failed and torch fell back to tracing: "
        "the table shows them as `fallback` (or the failure their file then had), never as a dynamo pass.",
        "",
        "| case | torch (opset asked) | verdicts |",
        "|---|---|---|",
    ]
    lines += [f"| `{case}` | {', '.join(where)} | {statuses} |" for (case, statuses), where in sorted(by_case.items())]
    return lines


_PIPE = re.compile(r"(?<!\\)\|")
"""A cell boundary of a Markdown table row: a pipe not escaped (``\\|`` is a pipe inside a cell)."""


def _cells(line: str) -> list[str]:
    """A Markdown table row's cells, whole: an escaped pipe stays in its cell (as the character)."""
    return [c.strip().replace("\\|", "|") for c in _PIPE.split(line.strip().strip("|"))]


def _page(markdown: str) -> str:
    """The README as one static page: headings, paragraphs, tables, links and code spans (nothing else is used). It
    fits a phone: the page is as wide as the screen (a viewport), and a table wider than it scrolls on its own."""
    body: list[str] = []
    table: list[list[str]] = []

    def inline(text: str) -> str:
        out = html.escape(text)
        parts = out.split("`")
        out = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
        out = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r'<a href="\2">\1</a>', out)
        return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)

    def flush() -> None:
        if table:
            head, *rows = table
            heads = "".join(f"<th>{inline(c)}</th>" for c in head)
            body.append(f'<div class="scroll"><table><thead><tr>{heads}</tr></thead><tbody>')
            body.extend("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in row) + "</tr>" for row in rows)
            body.append("</tbody></table></div>")
            table.clear()

    for line in markdown.splitlines():
        if line.startswith("|"):
            if not line.startswith("|---"):
                table.append(_cells(line))
            continue
        flush()
        if line.startswith("## "):
            body.append(f"<h2>{inline(line[3:])}</h2>")
        elif line.startswith("# "):
            body.append(f"<h1>{inline(line[2:])}</h1>")
        elif line.strip():
            body.append(f"<p>{inline(line)}</p>")
    flush()
    style = (
        "body{font:14px system-ui,sans-serif;margin:1.5em;max-width:110em}table{border-collapse:collapse;margin:.5em 0}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}th{background:#f3f3f3}"
        "code{background:#f4f4f4;padding:0 2px;overflow-wrap:anywhere}.scroll{overflow-x:auto;max-width:100%}"
        "p{overflow-wrap:anywhere}@media (max-width:600px){body{margin:.6em;font-size:13px}td,th{padding:2px 4px}}"
    )
    title = "Torch releases"
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title}</title><style>{style}</style></head>"
        f"<body>\n" + "\n".join(body) + "\n</body></html>\n"
    )
