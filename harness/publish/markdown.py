"""The Markdown of the published table: ``results/README.md`` (:func:`readme`), each case's page,
``results/cases/<case>.md`` (:func:`case_pages`), and what each run measures again, ``results/timing.md``
(:func:`timing_page`: export seconds and latency, kept out of the case pages so that a page changes only with
what it says).

Every string from a model, a card, a probe or an error goes in as text, never as markup (:func:`_md_escape`,
:func:`_md_code`). Needs pandas and tabulate (the report environment).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd
from tabulate import tabulate

from harness.answer import fault, published, real_models, recommend
from harness.answer.published import runs, runtime_key, shorten
from harness.config import runtimes
from harness.config.matrix import Profile, version_tuple
from harness.core import schema
from harness.core.errors import PROBE_FILE_ERROR
from harness.core.records import CellRecord, ExportRecord, Outcome, Rewrite, Status
from harness.publish import claims
from harness.store import frontier, layout

_CASE_NAME = re.compile(r"^[a-z0-9][a-z0-9_]*$")  # as harness.cases.corpus registers a case


CASE_PAGES = "cases"  # results/cases/<case>.md: one page per case, linked from README.md
TIMING = "timing.md"  # results/timing.md: every case's export seconds and latency, a section each, linked from its page


LEGEND = {
    Status.PASS: "ran, and every output matched torch within tolerance",
    Status.MISMATCH: "ran, but outputs differ from torch beyond tolerance (or NaN/inf where torch had none, or a shape differs)",
    Status.EXPORT_FAIL: "the exporter raised (or wrote no model): nothing to run",
    Status.LOAD_FAIL: "the runtime refused the model when creating the session (opset, IR version, unknown op, invalid graph)",
    Status.RUN_FAIL: "the session loaded but `run` raised (shape, type or kernel error)",
    Status.CRASH: "the worker process died (signal) while running this probe (or creating its session)",
    Status.TIMEOUT: "the probe gave no result within matrix.toml's [run] timeout and its worker was killed, "
    "or the export ran past [export] timeout (the phase it was in is named)",
    Status.UNAVAILABLE: "the provider cannot run here (not in the package, its libraries do not load, no GPU), "
    "or the session silently fell back to another one",
    Status.FALLBACK: "dynamo only: torch.export failed and torch.onnx.export(dynamo=True) silently captured the graph "
    "another way (torch.jit.trace, on torch 2.5.1 and 2.7.1); the file ran and matched torch, but it is no dynamo export",
    Status.ENV_ERROR: "the runtime environment itself is broken (e.g. it fails to import)",
    Status.SKIPPED: "the case does not apply to this exporter (reason given)",
}


def _fold(pairs: list[tuple[str, str]]) -> str:
    """One table cell from its probes' ``(status, probe)``: the worst status, and which probes it hit if not all."""
    worst = max((status for status, _ in pairs), key=lambda s: Status(s).severity)
    sym = Status(worst).symbol
    if worst != Status.PASS.value:
        hit = sorted(probe for status, probe in pairs if status == worst)
        if len(hit) < len(pairs):
            sym += " " + _md_escape(",".join(hit))  # probe names are file stems and dict keys: anything
    return sym


def _fold_table(df: pd.DataFrame) -> dict[str, dict[tuple[str, int, str], str]]:
    """Every table cell, folded once: case → (exporter, opset, column) → symbol (plain Python: a pandas
    groupby-apply per case took seconds)."""
    groups: dict[tuple[str, str, int, str], list[tuple[str, str]]] = {}
    keys = zip(df["case"], df["exporter"], df["opset"], df["column"], strict=True)
    for key, status, probe in zip(keys, df["status"], df["probe"], strict=True):
        groups.setdefault(key, []).append((status, probe))
    table: dict[str, dict[tuple[str, int, str], str]] = {}
    for (case, exporter, opset, column), pairs in groups.items():
        table.setdefault(case, {})[(exporter, int(opset), column)] = _fold(pairs)
    return table


def runtime_order(columns: Iterable[str]) -> list[str]:
    """The columns by runtime kind in the registry's order (onnxruntime's first), each kind's oldest first."""
    prefixes = [k.label.rstrip("-") for k in runtimes.KINDS]

    def key(c: str) -> tuple[Any, ...]:
        prefix, _, version = c.split()[0].rpartition("-")
        return (prefixes.index(prefix) if prefix in prefixes else len(prefixes), version_tuple(version), c)

    return sorted(set(columns), key=key)


_MD = str.maketrans(
    {
        "&": "&amp;",
        "<": "&lt;",
        ">": "&gt;",
        "|": "\\|",
        "`": "\\`",
        "\\": "\\\\",
        "\n": " ",
        "\r": " ",
    }
)


def _md_escape(text: str) -> str:
    """A string from a model, a card, a probe or an error as Markdown text: never markup. HTML is entity-escaped
    (GitHub strips raw HTML, other renderers run it), link, image, code and table syntax is backslash-escaped
    (emphasis is left: it cannot load or run anything), and it stays on one line (a table cell)."""
    return text.translate(_MD).replace("](", "\\](")  # brackets alone are shapes ([1, 3]); "](" is a link


def _md_code(text: str) -> str:
    """A string from outside as a code span: nothing in it can close the span (backticks become quotes)."""
    return "`" + text.replace("`", "'").replace("\n", " ").replace("\r", " ") + "`"


def _problem_lines(problems: list[str]) -> list[str]:
    if not problems:
        return []
    return (
        ["## Corpus problems", "", "These cases could not be loaded and are not in the table:", ""]
        + [f"- {_md_escape(p)}" for p in problems]
        + [""]
    )


def claims_lines(rec: ExportRecord, cells: list[CellRecord], newest: str) -> list[str]:
    """One line per claim of the case: does this run's table show it?"""
    lines = []
    for claim in rec.claims:
        verdict = claims.holds(claim, rec.case, cells, newest)
        mark = {True: "✓ reproduced", False: "✗ **not shown in this run** (news: fixed, or changed?)", None: "· not measured"}
        lines.append(f"- {mark[verdict]}: {_md_escape(claims.describe(claim, newest))}")
    return lines


@dataclasses.dataclass(frozen=True)
class Readme:
    """What ``results/README.md`` says, as the report gathered it."""

    df: pd.DataFrame
    """Every cell, one row each (:func:`harness.core.schema.row`), with its table ``column``."""
    exports: list[ExportRecord]
    env: dict[str, Any]
    """``environment.json``."""
    counts: dict[str, int]
    profile: Profile
    folded: pd.Series
    """Each case's worst status per column × exporter × opset."""
    safe: list[recommend.Answer]
    trend: list[dict[str, Any]]
    figures: list[tuple[str, str]]
    unmeasured: Mapping[str, str]
    """Column label → why it was not measured here (one runtime-wide record)."""
    unmeasured_pins: Mapping[tuple[str, str], str]
    """The same by (runtime pin, provider)."""
    loads: Mapping[str, Mapping[str, Any]]
    runtimes: Sequence[str]
    rewrites: Sequence[Rewrite]
    beside: Sequence[Mapping[str, Any]] = ()
    """:func:`harness.answer.published.published_beside`: the columns of profiles published in folders inside this one."""
    per_model: Sequence[real_models.ModelAnswer] = ()
    """The answer per real model (cases with a card of their own, ``about``): :func:`harness.answer.real_models.per_model`."""
    findings: Sequence[real_models.Finding] = ()
    """What fails among the real models, once per cause (:func:`harness.answer.real_models.findings`)."""
    cards: Mapping[str, Mapping[str, str]] = dataclasses.field(default_factory=dict)
    tables: Sequence[Mapping[str, Any]] = ()
    """:func:`harness.answer.published.tables_beside`: tables of another corpus published inside this one."""
    columns: Sequence[recommend.Column] = ()
    """Every case's verdict at every option, per runtime × provider (:func:`harness.answer.recommend.columns`): what
    the answer and the summary per runtime count."""


def readme(r: Readme) -> str:
    """``results/README.md``: the answer first (the newest safe opset per runtime), then what each runtime loads,
    the legend, the summary per runtime, the plots, the trend, the cases and the environment."""
    cases = list(dict.fromkeys(rec.case for rec in r.exports))
    columns = runtime_order(r.df["column"])
    lines = [
        *_head_lines(r, cases, columns),
        *_model_lines(r.per_model),
        *_finding_lines(r.findings, r.cards, r.runtimes, sorted(r.df["opset"].unique())),
        *tolerance_lines(r.exports, r.env.get("tolerance")),
        *_problem_lines(r.env.get("problems", [])),
        *_safe_lines(r.safe, r.unmeasured_pins, r.env),
        *_frontier_lines(r.loads, r.runtimes, r.exports),
        *_rewrite_lines(r.rewrites),
        *fault_lines(r.env.get("spec")),
        "## Legend",
        "",
        "A table cell folds its probes (the example inputs and each probe the case declares): it shows the worst status, "
        "followed by the probes that hit it when not all did.",
        "",
    ]
    legend = [[s.symbol, f"`{s.value}`", LEGEND[s], r.counts.get(s.value, 0)] for s in sorted(Status, key=lambda s: s.severity)]
    lines += [tabulate(legend, headers=["", "status", "meaning", "cells"], tablefmt="github"), ""]
    lines += _runtime_summary(r.columns, columns, cases, r.unmeasured, _labels(r.df))
    lines += _beside_lines(r.beside)
    if r.figures:
        lines += ["## Plots", ""] + [f"![{title}]({path})" for title, path in r.figures] + [""]
    lines += _trend_lines(r.trend)
    lines += [
        "## Per case",
        "",
        f"Each case has a page of its own in [{CASE_PAGES}/]({CASE_PAGES}/): its card, its rows across runtimes and "
        "providers, its export facts, its failing cells with their reproducers, its latency. In corpus order, each "
        "fixed twin after its case:",
        "",
    ]
    cards = {rec.case: rec.card for rec in r.exports}
    for case in cases:
        card = cards[case]
        said = card.get("symptom") or (f"fixed twin of {card['fixes']}" if card.get("fixes") else "")
        said = said or (f"{card['title']}: {card.get('about', '').split(chr(10))[0]}" if card.get("title") else "")
        lines.append(f"- [{case}]({_page(case)})" + (f": {_md_escape(shorten(said, 110))}" if said else ""))
    lines += ["", "## Environment", "", "```json", json.dumps(r.env, indent=1, sort_keys=True), "```", ""]
    return "\n".join(lines)


def fault_lines(said: Mapping[str, Any] | None) -> list[str]:
    """``## Whose fault``: the failing cells counted by fault (:mod:`harness.answer.fault`), and what the spec's answer
    they rest on covered (``environment.json``'s ``spec``)."""
    if not isinstance(said, Mapping) or not isinstance(said.get("faults"), Mapping):
        return []
    lines = ["## Whose fault", "", fault.summary(said["faults"]), ""]
    probes = said.get("probes") or {}
    judged = (
        f"The spec's answer: onnx {said.get('onnx') or '?'}'s checker (full check, strict shape inference) and reference "
        f"evaluator judged {said.get('judged', 0):,} files ({said.get('checker_failed', 0):,} fail the checker); on their "
        f"probes the evaluator agrees with torch {probes.get('agrees', 0):,} times, disagrees {probes.get('disagrees', 0):,} "
        f"times and could not run {probes.get('failed', 0):,}."
    )
    unanswered = said.get("unanswered") or {}
    if unanswered:
        judged += " Not evaluated: " + "; ".join(f"{n} ({_md_escape(str(w))})" for w, n in sorted(unanswered.items())) + "."
    if said.get("missing"):
        judged += f" **Missing**: {_md_escape(str(said['missing']))}."
    lines += [
        judged + " How a fault is decided: the project's docs/reading-the-table.md, \"Whose fault\". Each "
        "reproducer folder's ISSUE.md is an issue ready to file where the fault belongs.",
        "",
    ]
    return lines


def _tolerance_of(rec: ExportRecord) -> tuple[Any, ...]:
    return (rec.atol, rec.rtol, rec.scaled, json.dumps(rec.output_tolerance, sort_keys=True))


def _said(atol: float, rtol: float, scaled: float | None, outputs: str = "{}") -> str:
    """``atol 0.0001, rtol 0.001, scaled 1e-05`` (and each output's own)."""
    text = f"atol {atol:g}, rtol {rtol:g}, " + (f"scaled {scaled:g}" if scaled else "element-wise only (no scaled bound)")
    for index, own in sorted(json.loads(outputs).items()):
        text += f"; output {_md_escape(str(index))}: " + ", ".join(f"{k} {float(v):g}" for k, v in sorted(own.items()))
    return text


def tolerance_lines(exports: Sequence[ExportRecord], default: Mapping[str, Any] | None = None) -> list[str]:
    """The tolerances this table's verdicts rest on, said on the table itself: the shared one (``default``, matrix.toml's
    ``[tolerance]`` as ``environment.json`` records it; else the one most cases were compared with) and every case that
    set its own. Read from the export records, which carry the tolerance each artifact was compared with."""
    by_case = {rec.case: _tolerance_of(rec) for rec in exports}
    if not by_case:
        return []
    counts: dict[tuple[Any, ...], int] = {}
    for tol in by_case.values():
        counts[tol] = counts.get(tol, 0) + 1
    shared = max(counts, key=lambda t: counts[t])
    if default:
        shared = (default.get("atol"), default.get("rtol"), default.get("scaled") or None, "{}")
    own = {case: tol for case, tol in by_case.items() if tol != shared}
    source = "matrix.toml's `[tolerance]`" if default else "the one most cases share: matrix.toml's `[tolerance]`"
    lines = [
        "**Tolerance.** A probe passes when every output is within `|out - ref| <= atol + rtol * |ref|` of torch's or, "
        "for a floating output, `max|out - ref| <= scaled * max|ref|` (NaN must meet NaN, inf the same inf): "
        f"{len(by_case) - len(own)} of {len(by_case)} cases with {_said(*shared)} ({source}, bounded to 0..0.1 each)"
        + (f"; {len(own)} set their own:" if own else "; no case sets its own."),
        "",
    ]
    if own:
        lines += [f"- [{case}]({_page(case)}): {_said(*tol)}" for case, tol in sorted(own.items())] + [""]
    return lines


def _beside_lines(beside: Sequence[Mapping[str, Any]]) -> list[str]:
    """The columns other profiles published beside this table (GPU, OpenVINO): package and version, provider and
    precision, the device, the date measured, the cells by outcome, a link to that profile's README."""
    if not beside:
        return []
    failed = {s.value for s in Status} - {s.value for s in (Status.PASS, Status.MISMATCH, Status.SKIPPED, Status.UNAVAILABLE)}
    rows = []
    for b in beside:
        counts, why = b["counts"], b["not_measured"]
        row = [f"[{b['runtime']}]({b['folder']}/README.md)", f"`{b['column']}`", _md_escape(str(b["device"])), b["measured"]]
        if why:
            row += [f"not measured: {_md_escape(shorten(why, 100))}", "", "", ""]
        else:
            row += [counts.get(Status.PASS.value, 0), counts.get(Status.MISMATCH.value, 0)]
            row += [sum(n for st, n in counts.items() if st in failed), counts.get(Status.UNAVAILABLE.value, 0)]
        rows.append(row)
    headers = ["runtime", "column", "device", "date", "pass", "mismatch", "failed", "unavailable"]
    return [
        "## Columns published beside this table",
        "",
        "Profiles measured on other machines or runtimes publish in folders of their own (each with its page, "
        "README and environment); their columns, with the device each computed on and the date (measured, where the "
        "machine recorded it in its device.json; else published):",
        "",
        tabulate(rows, headers=headers, tablefmt="github"),
        "",
    ]


def _head_lines(r: Readme, cases: list[str], columns: list[str]) -> list[str]:
    """The title (a partial report says so first), where it came from, and its counts."""
    df, env, profile = r.df, r.env, r.profile
    axis = "; ".join(f"{e} {', '.join(map(str, sorted(g['opset'].unique())))}" for e, g in df.groupby("exporter", sort=True))
    partial = env.get("partial") or []
    lines = []
    if partial:
        lines += [
            f"**PARTIAL REPORT: {len(partial)} shard(s) were not whole when it was made; it is not the answer.** "
            + _md_escape(layout.describe(partial, limit=len(partial))),
            "",
        ]
    by_severity = sorted(r.counts.items(), key=lambda kv: Status(kv[0]).severity)
    return [
        *lines,
        "# PyTorch → ONNX compatibility matrix" + (" (partial)" if partial else ""),
        "",
        f"Profile **{profile.name}**, generated {env['generated']} by `nox -s matrix"
        + ("" if profile.name == "default" else f" -- --profile {profile.name}")
        + f"` from the committed code, exported with {_built(env)}. Do not edit by hand: rerun it.",
        "",
        f"{len(df)} cells ({len(cases)} cases × {df[['exporter', 'opset']].drop_duplicates().shape[0]} exporter × opset "
        f"({axis}) × {len(columns)} runtime columns × probes)"
        + (f", wall time {env['wall_seconds']:.0f} s" if env.get("wall_seconds") else "")
        + ". "
        + ", ".join(f"{Status(k).symbol} {k}: {v}" for k, v in by_severity)
        + ".",
        "",
        "The same data as one filterable, sortable page: **[index.html](index.html)** (self-contained; open it from a clone, "
        "or from the project's GitHub Pages). Every cell, long format: [matrix.jsonl](matrix.jsonl).",
        "",
        *(
            f"Also published: **[{_md_escape(t['profile'])}]({t['folder']}/README.md)**, a table of {t['cases']} cases of "
            f"another corpus (`nox -s matrix -- --profile {_md_escape(t['profile'])}`)."
            if "releases" not in t
            else f"Also published: **[torch releases]({t['folder']}/README.md)** ({_md_escape(', '.join(t['releases']))}), "
            f"the corpus on each (`nox -s matrix -- --profile {_md_escape(t['profile'])}`)."
            for t in r.tables
        ),
        *([""] if r.tables else []),
    ]


def _model_lines(answers: Sequence[real_models.ModelAnswer]) -> list[str]:
    """The exporter and opset to ship per model and runtime (runtimes that agree folded into one span)."""
    if not answers:
        return []
    rows = [[f"[{_md_escape(a.title)}]({_page(a.case)})", f"`{a.case}`", _md_escape(real_models.by_runtime(a))] for a in answers]
    return [
        "## The answer per model",
        "",
        "For each model alone: the exporter and opset to ship on each runtime, the highest opset written (the one the "
        "file declares) at which every one of its probes passes (a tie going to the exporter under which more of the "
        "table passes); where none does, the closest "
        'and its status. `harness recommend --runtime 1.20.1 --cases "Llama (decode step)"` (a title or a name) says '
        "the same with every alternative and why it fails.",
        "",
        tabulate(rows, headers=["model", "case", "exporter and opset to ship, by onnxruntime"], tablefmt="github",
                 disable_numparse=True),
        "",
    ]  # fmt: skip


def _finding_lines(
    found: Sequence[real_models.Finding], cards: Mapping[str, Mapping[str, str]], pins: Sequence[str], opsets: Sequence[int]
) -> list[str]:
    """What fails, once per cause, the causes that most models share first."""
    if not found:
        return []
    return [
        "## What fails, once per cause",
        "",
        "Every failing cell of the table, folded: the same exporter, status, probes and error (numbers and names aside) "
        "is one cause, said once with every model, opset and runtime it holds for. A refusal at load that the runtime's "
        "measured frontier explains is not repeated here (see what each runtime loads). Each cell's own error, where it "
        "starts and its reproducer are on the model's page.",
        "",
        *(f"- {_md_escape(f.line(cards, pins, opsets))}" for f in found),
        "",
    ]


def case_pages(
    df: pd.DataFrame,
    exports: list[ExportRecord],
    verdicts: dict[str, list[str]],
    profile: Profile,
    env: Mapping[str, Any],
    findings: Sequence[real_models.Finding] = (),
    cards: Mapping[str, Mapping[str, str]] | None = None,
    ship: Mapping[str, str] | None = None,
    rewrites: Sequence[Rewrite] = (),
) -> dict[str, str]:
    """``{case: Markdown}``: each case's own page, ``results/cases/<case>.md``: its answer alone per runtime (``ship``:
    :func:`harness.answer.real_models.by_runtime`, the one answer), the requests its exporters wrote at another opset, and
    for a real model what fails for it, once per cause, from ``findings``."""
    columns = runtime_order(df["column"])
    by_case: dict[str, list[ExportRecord]] = {}
    for r in exports:
        by_case.setdefault(r.case, []).append(r)
    table = _fold_table(df)
    footer = f"Profile **{profile.name}**, generated {env['generated']} by `nox -s matrix` from the committed code."
    pins = [rt.pin for rt in profile.runtimes]
    opsets = sorted(df["opset"].unique())
    mine = {case: [f for f in findings if case in f.cases] for case in by_case}
    return {
        case: "\n".join(
            [
                *_case_section(case, recs, df[df["case"] == case], table, columns, verdicts[case]),
                *_ship_lines(case, (ship or {}).get(case), [w for w in rewrites if w.case == case]),
                *_twin_lines(case, by_case, ship or {}),
                *_own_findings(case, mine[case], cards or {}, pins, opsets),
                footer,
                "",
            ]
        )
        for case, recs in by_case.items()
    }


def _twin_lines(case: str, by_case: Mapping[str, list[ExportRecord]], ship: Mapping[str, str]) -> list[str]:
    """The cases written as this one's fix (its fixed twins, or an architecture's fix candidates: the same model with a
    setting its user controls), each with its own answer per runtime where it has one."""
    twins = [c for c, recs in by_case.items() if recs[0].card.get("fixes") == case]
    if not twins:
        return []
    lines = ["Its fix, measured beside it (each its own case, with its own verdicts):", ""]
    for twin in twins:
        title = by_case[twin][0].card.get("title")
        said = f"- [{twin}]({twin}.md)" + (f" ({_md_escape(title)})" if title else "")
        lines.append(said + (f": {_md_escape(ship[twin])}" if ship.get(twin) else ""))
    return [*lines, ""]


def _ship_lines(case: str, ship: str | None, rewrites: Sequence[Rewrite]) -> list[str]:
    """The case's own answer per runtime, and each request of it an exporter wrote at another opset."""
    lines = []
    if ship:
        lines += [
            "## The answer for this case alone",
            "",
            "The exporter and opset written to ship it, by runtime (as `harness recommend --cases "
            f"{case}` says it, with every alternative): {_md_escape(ship)}",
            "",
        ]
    for exporter, asked, wrote, reason, _ in published.rewrite_groups(rewrites):
        said = f"; the exporter's reason: {_md_escape(reason)}" if reason else "; the exporter said nothing"
        lines += [f"**{recommend.rewrite_said(exporter, asked, wrote)}** for this case, silently{said}.", ""]
    return lines


def _own_findings(
    case: str,
    found: Sequence[real_models.Finding],
    cards: Mapping[str, Mapping[str, str]],
    pins: Sequence[str],
    opsets: Sequence[int],
) -> list[str]:
    if not found:
        return []
    lines = ["## What fails for this model, once per cause", ""]
    for f in found:
        lines.append(f"- {_md_escape(f.line(cards, pins, opsets, one=case))}")
    return [*lines, ""]


def _page(case: str) -> str:
    return f"{CASE_PAGES}/{case}.md"


def _frontier_lines(loads: Mapping[str, Mapping[str, Any]], runtimes: Sequence[str], exports: list[ExportRecord]) -> list[str]:
    """ "What each runtime loads": the measured frontier per runtime, and what the exporters write."""
    if not loads:
        return []
    first = next(iter(loads.values()))
    writes: dict[str, tuple[set[int], set[int]]] = {}
    for r in exports:
        if r.ok and r.ir_version is not None:
            irs, opsets = writes.setdefault(r.exporter, (set(), set()))
            irs.add(r.ir_version)
            opsets.add(r.opset_actual or r.opset)
    said = "; ".join(
        f"{e} writes IR {', '.join(map(str, sorted(i)))} at opsets {', '.join(map(str, sorted(o)))}"
        for e, (i, o) in sorted(writes.items())
    )
    lines = [
        "## What each runtime loads",
        "",
        f"Measured, not declared: one `Add` node at every IR version {first['irs'][0]}–{first['irs'][-1]} × opset "
        f"{first['opsets'][0]}–{first['opsets'][-1]} (all that onnx {first['onnx']} writes), loaded and run once on "
        "each runtime's CPU provider. The refusal is the runtime's own first words past its frontier (shortened; "
        "`frontier.json` holds them whole), and when it came: at load (creating the session refused the file, before "
        "any node ran) or at run (it loaded, then its node failed)." + (f" Here {said}." if said else ""),
        "",
    ]
    table = []
    for pin in [p for p in runtimes if p in loads] + sorted(set(loads) - set(runtimes)):
        result = loads[pin]
        reasons = result.get("reasons") or []
        table.append(
            [
                pin,
                result.get("max_ir") if result.get("max_ir") is not None else "none",
                result.get("max_opset") if result.get("max_opset") is not None else "none",
                frontier.refused_at(result),
                _md_escape("; ".join(f"{_at(r)}{_ends(r['text'], 120)}" for r in reasons[:2]))
                or f"none: loads every model onnx {result.get('onnx', '?')} writes",
            ]
        )
    headers = ["runtime", "highest IR", "highest opset", "refused", "refusal past it"]
    lines += [tabulate(table, headers=headers, tablefmt="github"), ""]
    return lines


def _ends(text: str, limit: int) -> str:
    """A long message cut in its middle: its start (what failed) and its end (the runtime's own limit) both stay."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    half = (limit - 3) // 2
    return f"{text[:half].rstrip()} … {text[-half:].lstrip()}"


def _rewrite_lines(rewrites: Sequence[Rewrite]) -> list[str]:
    """"Asked for one opset, written at another": each request an exporter answered with a lower opset, its cases and
    the exporter's reason. Users believe the number they asked for; the file declares another."""
    if not rewrites:
        return []
    lines = [
        "## Asked for one opset, written at another",
        "",
        "An exporter that cannot convert a model to the opset asked keeps what it built, with no error: the file "
        "declares a lower opset than the `opset_version` passed. Rows of the table are labelled by the opset written "
        "(the file's own), so such a case has no row at the opset asked, and no answer counts it there: the answer "
        "names the opset the file declares and the requests that write it. Each request, its cases and the "
        "exporter's own words:",
        "",
    ]
    rows = []
    for exporter, asked, wrote, reason, cases in published.rewrite_groups(rewrites):
        named = ", ".join(f"[{c}]({_page(c)})" if _CASE_NAME.match(c) else _md_escape(c) for c in cases)
        said = _md_escape(reason) or "(it said nothing)"
        rows.append([recommend.rewrite_said(exporter, asked, wrote), f"{len(cases)}: {named}", said])
    lines += [tabulate(rows, headers=["request", "cases", "the exporter's reason"], tablefmt="github"), ""]
    return lines


def _at(reason: Mapping[str, Any]) -> str:
    return f"IR {reason['ir']} / opset {reason['opset']}: " if reason.get("ir") is not None else ""


def _built(env: Mapping[str, Any]) -> str:
    """``torch 2.13.0+cpu, onnx 1.23.2, onnxscript 0.7.2``: what the table was exported with."""
    return published.built_said(published.exported_with(env))


def _safe_lines(
    answers: list[recommend.Answer], unmeasured: Mapping[tuple[str, str], str], env: Mapping[str, Any]
) -> list[str]:
    """The newest safe opset per runtime: what ``harness recommend`` answers for each column (a column
    not measured here says so, not "none")."""
    if not answers:
        return []
    exporters = sorted({o.exporter for a in answers for o in a.options}, key=lambda e: (e != "torchscript", e))

    def closest(opt: recommend.Option) -> str:
        names = ", ".join(c for c, _ in opt.failing[:3]) + (f" and {len(opt.failing) - 3} more" if len(opt.failing) > 3 else "")
        return f"opset {opt.opset}: {len(opt.failing)} fail{'s' * (len(opt.failing) == 1)} ({names})"

    rows = []
    for a in answers:
        best, mine = a.best, recommend.per_exporter(a)
        rows.append(
            [
                a.runtime,
                a.provider,
                f"**{best.exporter} opset {best.opset}**"
                if best
                else f"none (closest: {a.options[0].exporter} {closest(a.options[0])})",
                *(_exporter_cell(a, o, closest) if (o := mine.get(e)) else "" for e in exporters),
            ]
        )
    answered = {(a.runtime, a.provider) for a in answers}
    for (runtime, provider), reason in sorted(unmeasured.items(), key=lambda kv: (runtime_key(kv[0][0]), kv[0][1])):
        if (runtime, provider) not in answered:
            rows.append([runtime, provider, f"not measured here ({_md_escape(shorten(reason, 140))})", *("" for _ in exporters)])
    count, _, kinds = answers[0].selection.split(" (")[0].partition(": ")
    skipped: dict[str, dict[str, str]] = {}
    for a in answers:
        for o in a.options:
            for case, reason in o.skipped:
                skipped.setdefault(o.exporter, {})[case] = reason
    skip_lines = [
        f"Not counted for {exporter}: {', '.join(f'{c} ({_md_escape(r)})' for c, r in sorted(why.items()))}. "
        "A case that does not apply to an exporter is `skipped` there: neither a pass nor a failure."
        for exporter, why in sorted(skipped.items())
    ]
    return [
        "## Newest safe opset per runtime",
        "",
        f"For {kinds or 'the selected cases'} ({count}): the highest opset written (the one the file declares) at which "
        "every one of them passes every probe, per exporter "
        "(or, where none does, the closest and what fails there), and the recommendation: the highest safe opset, a tie going "
        "to the exporter under which more of the whole corpus passes. "
        f"Measured with {_built(env)}. `harness recommend --runtime onnxruntime==X.Y.Z` "
        "prints the same answer with every alternative and why its cases fail (`--exporter dynamo` for one exporter); "
        "`--corpus my_models.py` or `--cases a,b` asks it about your own cases.",
        "",
        tabulate(rows, headers=["runtime", "provider", "recommended", *exporters], tablefmt="github", disable_numparse=True),
        "",
        *(line for text in skip_lines for line in (text, "")),
    ]


def _exporter_cell(a: recommend.Answer, o: recommend.Option, closest: Any) -> str:
    """An exporter's best opset on one runtime: ``21``, ``none (dynamo writes IR 10; 1.17.3 loads up to IR 9)``, or
    ``none (opset 18: 1 fails (…))``."""
    if o.ok:
        return str(o.opset)
    if not o.selected:
        return f"none (does not apply to {o.exporter})"
    why = a.cannot_load(o.exporter)
    return f"none ({_md_escape(why) if why else closest(o)})"


def _labels(df: pd.DataFrame) -> dict[tuple[str, str], str]:
    """(runtime pin, provider) → the table's column label."""
    return dict(zip(zip(df["runtime"], df["provider"], strict=True), df["column"], strict=True))


def _runtime_summary(
    cols: Sequence[recommend.Column],
    columns: list[str],
    cases: list[str],
    unmeasured: Mapping[str, str],
    labels: Mapping[tuple[str, str], str],
) -> list[str]:
    """Per runtime × exporter × opset written: cases whose every probe passes / cases counted, then the failing ones by
    status; a column not measured here (one runtime-wide record) shows its status and, once, why. Counted as every
    answer counts (:func:`harness.answer.recommend.combine`): a case that does not apply to the exporter is not
    counted, and a case the exporter, asked for this opset, wrote at another counts as no file here."""
    combos = sorted({k for col in cols for k in col.verdicts}, key=lambda eo: (eo[0] != "torchscript", eo[0], eo[1]))
    by_label = {labels.get((col.runtime, col.provider), col.runtime): col for col in cols}
    rows = []
    details = []
    order = {c: i for i, c in enumerate(cases)}
    for column in columns:
        if (why := unmeasured.get(column)) is not None:
            rows.append([column, *(why.split(":")[0] for _ in combos)])
            details += [f"- **{column}** not measured here: {_md_escape(why)}", ""]
            continue
        col = by_label.get(column)
        row = [column]
        failing_lines: list[tuple[str, int, int, str]] = []
        for exporter, opset in combos:
            verdicts = col.verdicts.get((exporter, opset)) if col else None
            counted = {c: v for c, v in (verdicts or {}).items() if v.code in _COUNTED}
            if not counted:
                row.append("")
                continue
            bad = {c: v for c, v in counted.items() if v.code != recommend.PASS}
            row.append(f"{len(counted) - len(bad)}/{len(counted)}")
            if not bad:
                continue
            by_status: dict[str, list[str]] = {}
            for case, v in sorted(bad.items(), key=lambda kv: order.get(kv[0], 0)):
                by_status.setdefault(v.status or _WRITTEN_ELSEWHERE, []).append(case)
            text = "; ".join(
                f"{_status_said(st)} ({len(names)}): " + ", ".join(names)
                for st, names in sorted(by_status.items(), key=lambda kv: -_severity(kv[0]))
            )
            failing_lines.append((exporter, opset, len(bad), text))
        rows.append(row)
        details += [f"<details><summary>{column}: the failing cases</summary>", "", *_merged(failing_lines), "", "</details>", ""]
    return [
        "## Summary per runtime",
        "",
        "Cases whose every probe passes, of the cases counted, per runtime × exporter × opset written: the same count as "
        "`harness recommend` and the page (a case that does not apply to an exporter is not counted; one the exporter, "
        f"asked for this opset, wrote at another has no file here and counts as {_WRITTEN_ELSEWHERE}). Below the table, "
        "each runtime's failing cases by status (click to open).",
        "",
        tabulate(rows, headers=["runtime", *(f"{e} {o}" for e, o in combos)], tablefmt="github", disable_numparse=True),
        "",
        *details,
    ]


_COUNTED = (recommend.PASS, recommend.FAIL, recommend.ELSEWHERE)
_WRITTEN_ELSEWHERE = "written at another opset"


def _status_said(status: str) -> str:
    return status if status == _WRITTEN_ELSEWHERE else f"{Status(status).symbol} {status}"


def _severity(status: str) -> int:
    return -1 if status == _WRITTEN_ELSEWHERE else Status(status).severity


def _merged(failing: Sequence[tuple[str, int, int, str]]) -> list[str]:
    """One line per run of an exporter's consecutive opsets whose failing cases are the same (``torchscript opset
    20–23``): at every opset each exporter writes, most neighbours fail alike, and the README must stay readable."""
    alike = runs(failing, lambda a, b: (a[0], a[3], a[1] + 1) == (b[0], b[3], b[1]))
    lines = []
    for run in alike:
        exporter, first, n, text = run[0]
        opsets = f"opset {first}" if len(run) == 1 else f"opsets {first}–{run[-1][1]}"
        lines.append(f"- **{exporter} {opsets}**, {n} failing{' at each' if len(run) > 1 else ''}: {text}")
    return lines


def _trend_lines(trend: list[dict[str, Any]], last: int = 30) -> list[str]:
    """The history of published runs, newest first."""
    if not trend:
        return []
    statuses = sorted({k for e in trend for k in e.get("counts", {})}, key=lambda v: Status(v).severity)
    rows = []
    for e in reversed(trend[-last:]):
        runtimes = e.get("runtimes") or []
        span = f"{runtimes[0].split('==')[-1]} … {runtimes[-1].split('==')[-1]} ({len(runtimes)})" if runtimes else ""
        pass_rate = 100 * e.get("counts", {}).get("pass", 0) / max(e.get("cells") or 1, 1)
        rows.append(
            [
                e.get("date", ""),
                e.get("torch", ""),
                span,
                e.get("cases", ""),
                e.get("cells", ""),
                f"{pass_rate:.1f}%",
                *(e.get("counts", {}).get(st, 0) for st in statuses),
                f"{e['wall_seconds']:.0f}" if e.get("wall_seconds") else "",
            ]
        )
    headers = ["date", "torch", "runtimes", "cases", "cells", "pass rate", *statuses, "wall s"]
    return [
        "## Trend",
        "",
        "One row per published run ([history.jsonl](history.jsonl)), newest first"
        + (f", the last {last}." if len(trend) > last else "."),
        "",
        tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True),
        "",
    ]


def _summary(
    table: dict[str, dict[tuple[str, int, str], str]], columns: list[str], cases: list[str], *, links: bool = True
) -> str:
    """Rows of ``cases`` (in that order; exporter, then opset), one column per runtime."""
    rows = []
    for case in cases:
        cells = table.get(case, {})
        for exporter, opset in sorted({(e, o) for e, o, _ in cells}):
            label = f"[{case}]({_page(case)})" if links else case
            rows.append([label, exporter, opset, *(cells.get((exporter, opset, col), "") for col in columns)])
    return tabulate(rows, headers=["case", "exporter", "opset", *columns], tablefmt="github")


def _case_section(
    case: str,
    exports: list[ExportRecord],
    df: pd.DataFrame,
    table: dict[str, dict[tuple[str, int, str], str]],
    columns: list[str],
    verdicts: list[str],
) -> list[str]:
    """A case's page: its card, its claims, its row across runtimes, its export facts, its failing cells, and a link
    to its timing (:func:`timing_page`)."""
    title = exports[0].card.get("title")
    heading = f"# {case}" + (f": {_md_escape(title)}" if title else "")
    lines = [heading, "", "[← the table](../README.md) · [the page](../index.html)", ""]
    lines += _card_lines(exports[0].card)
    if verdicts:
        lines += ["", "Where the gotcha was reproduced (the case's claims, checked against this table):", "", *verdicts]
    lines += ["", "Across runtimes and providers:", "", _summary(table, columns, [case], links=False), ""]
    lines += _export_lines(exports)
    lines += _failing_lines(df)
    notes = df[df["note"] != ""]
    if not notes.empty:
        lines += [f"Note: {_md_escape(notes['note'].iloc[0])}.", ""]
    return [*lines, f"Export seconds and latency: [{TIMING}](../{TIMING}#{case}).", ""]


def _card_lines(card: Mapping[str, str]) -> list[str]:
    lines = []
    if card.get("about"):  # a real model's card: what it is, what its export needs; its ``names`` as code
        parts = " ".join(card["about"].split()).split("``")
        lines += ["".join(_md_code(p) if i % 2 else _md_escape(p) for i, p in enumerate(parts)), ""]
    if card.get("symptom"):
        for field in ("symptom", "cause", "fix", "source"):
            lines.append(f"- **{field}**: {_md_escape(card.get(field, ''))}")
    if card.get("fixes"):
        twin = card["fixes"]
        linked = _CASE_NAME.match(twin) is not None  # a case's name (corpus._NAME): a safe link target
        lines.append("- **fixed twin of** " + (f"[{twin}]({twin}.md)" if linked else _md_escape(twin)))
    if card.get("exporters"):
        lines.append(
            f"- **applies to** {card['exporters']} only (the other exporter's cells are skipped): "
            f"{_md_escape(card.get('skip_reason', ''))}"
        )
    if card.get("source_file"):
        lines.append(f"- defined in {_md_code(card['source_file'])}")
    return lines


def _export_lines(exports: list[ExportRecord]) -> list[str]:
    """Each export's facts; the probes torch could not run; where the localization data was not recorded; the
    first TracerWarning."""
    rows = []
    for r in sorted(exports, key=lambda r: (r.exporter, r.opset)):
        tracer = sum(w["category"] == "TracerWarning" for w in r.warnings)
        g = r.graph or {}
        rows.append(
            [
                r.exporter,
                r.opset,
                "ok" if r.ok else ("skipped" if r.outcome is Outcome.SKIPPED else f"**{r.error_class}**"),
                r.opset_asked or r.opset,
                r.ir_version or "",
                _md_escape(r.checker or ""),
                f"{len(r.warnings)} ({tracer} Tracer)" if r.warnings else "0",
                g.get("nodes", ""),
                g.get("constants", ""),
                g.get("initializers", ""),
            ]
        )
    headers = ["exporter", "opset", "export", "asked", "IR", "checker", "warnings", "nodes", "Constant", "init"]
    lines = [tabulate(rows, headers=headers, tablefmt="github"), ""]
    torch_failed = {p: e for r in exports for p, e in r.probe_errors.items()}
    for probe, error in sorted(torch_failed.items()):
        if error.startswith(PROBE_FILE_ERROR):
            lines += [f"The file of probe {_md_code(probe)} cannot be used (no cells for it): {_md_escape(error)}", ""]
        else:
            lines += [f"Torch itself fails on probe {_md_code(probe)} (no cells for it): {_md_escape(error)}", ""]
    # The reference pass that records what a mismatch is localized with: where it did not finish, said once per reason.
    unrecorded: dict[str, list[str]] = {}
    for r in sorted(exports, key=lambda r: (r.exporter, r.opset)):
        said = r.reference_runtime or ""
        if r.ok and said.startswith("failed:"):
            unrecorded.setdefault(said.split(": ", 2)[-1], []).append(f"{r.exporter} opset {r.opset}")
    for reason, where in unrecorded.items():
        lines += [f"Localization data not recorded for {', '.join(where)}: {_md_escape(reason)}", ""]
    warned = [(r, w) for r in exports for w in r.warnings if w["category"] == "TracerWarning"]
    if warned:
        first = warned[0][1]["message"]
        lines += [f"TracerWarning ({len(warned)} in all): {_md_escape((first.splitlines() or [''])[0][:300])}", ""]
    return lines


def _failing_lines(df: pd.DataFrame) -> list[str]:
    """The case's failing cells, runtimes that share a first error line grouped."""
    failing = df[~df["status"].isin([Status.PASS.value, Status.SKIPPED.value])]
    if failing.empty:
        return []
    lines = [
        "Failing cells (first error line; runtimes that share it are grouped). For a mismatch, *starts at* says where "
        "the difference begins and *optimizer* whether the probe passes with graph optimizations disabled; "
        "*repro* is a standalone reproducer (onnxruntime + numpy):",
        "",
    ]
    shown = schema.failing_columns()
    keys = ["exporter", "opset", "status", *(f.name for f in shown)]
    # The columns that decide what to do first (the optimizer, the reproducer, where it starts), the long ones last:
    # the first error line, then the runtimes (a range where they follow one another).
    first = {"first error line": 2, "starts at": 1}
    order = sorted((i for i, f in enumerate(shown) if f.column is not None), key=lambda i: first.get(shown[i].column.header, 0))  # type: ignore[union-attr]
    everyone = runtime_order(df["column"])
    rows = []
    for (exporter, opset, status, *values), g in failing.groupby(keys, sort=True):
        probes = ",".join(sorted(set(g["probe"])))
        runtimes = _runtime_span(runtime_order(g["column"]), everyone)
        row = [exporter, opset, f"{Status(status).symbol} {status}", _md_escape(probes)]
        rows.append(row + [_column_text(shown[i].column, values[i]) for i in order] + [runtimes])  # type: ignore[arg-type]
    headers = ["exporter", "opset", "status", "probes", *(shown[i].column.header for i in order), "runtimes"]  # type: ignore[union-attr]
    return [*lines, tabulate(rows, headers=headers, tablefmt="github"), ""]


def _runtime_span(columns: Sequence[str], everyone: Sequence[str]) -> str:
    """``1.18.1–1.32.0`` for runtimes that follow one another in the table's order; the others listed."""
    at = {c: i for i, c in enumerate(everyone)}
    folded = runs(columns, lambda a, b: at.get(b, -9) == at.get(a, -9) + 1)
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(r) for r in folded)


def _column_text(column: schema.Column, value: Any) -> str:
    """A schema field's value in the failing-cells table: a link to the file in its folder, or escaped text cut short."""
    if column.link:
        return f"[{column.header}](../{value}/{column.link})" if value else ""
    return _md_escape(str(value)[: column.cut])


def timing_page(df: pd.DataFrame, exports: list[ExportRecord]) -> str:
    """``results/timing.md``: per case, in the corpus's order, a section (anchored by the case's name, which
    :data:`_CASE_NAME` keeps a plain GitHub anchor) with its export seconds and latency per exporter × opset.
    Each run measures them again: they are here, not on the case pages, so that a republish whose verdicts
    did not move rewrites this file alone. Its tables are unpadded, to stay within what GitHub renders."""
    columns = runtime_order(df["column"])
    by_case: dict[str, list[ExportRecord]] = {}
    for r in exports:
        by_case.setdefault(r.case, []).append(r)
    timed = df.dropna(subset=["median_ms"])
    device = "; GPU columns with inputs and outputs on the device, copies excluded" if (timed["copies"] == "device").any() else ""
    lines = [
        "# Timing",
        "",
        "[← the table](README.md)",
        "",
        "Per case, each export's seconds (*export s*) and the example probe's median latency per runtime column, in µs "
        f"(serial, 1 thread{device}). Every run measures them again; the case pages link here.",
        "",
    ]
    latency = {case: g for case, g in timed.groupby("case", sort=False)}
    for case, recs in by_case.items():
        lines += [f"## {case}", "", f"[{case}]({CASE_PAGES}/{case}.md)", "", *_timing_lines(recs, latency.get(case), columns)]
    return "\n".join(lines)


def _timing_lines(exports: list[ExportRecord], timed: pd.DataFrame | None, columns: list[str]) -> list[str]:
    """One case's table: per exporter × opset its export seconds and the example probe's median latency per column."""
    seconds = {(r.exporter, r.opset): f"{r.seconds:.2f}" for r in exports}
    latency: dict[tuple[str, int], dict[str, str]] = {}
    for row in () if timed is None else timed.itertuples(index=False):
        latency.setdefault((row.exporter, int(row.opset)), {}).setdefault(row.column, f"{row.median_ms * 1e3:.0f}")
    shown = [c for c in columns if any(c in v for v in latency.values())]
    rows = [
        [e, str(o), seconds.get((e, o), ""), *(latency.get((e, o), {}).get(c, "") for c in shown)]
        for e, o in sorted({*seconds, *latency})
    ]
    return [*_unpadded(["exporter", "opset", "export s", *shown], rows, left=1), ""]


def _unpadded(headers: list[str], rows: list[list[str]], left: int) -> list[str]:
    """A GitHub table without the padding that lines its columns up in the source (the first ``left`` columns
    aligned left, the others right): the same table rendered, in about half the bytes."""
    rule = ["---"] * left + ["--:"] * (len(headers) - left)
    return [f"| {' | '.join(cells)} |" for cells in (headers, rule, *rows)]
