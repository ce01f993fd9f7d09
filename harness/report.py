"""Report stage: shards + export records → the published table in ``results/``.

Writes:

- ``results/matrix.jsonl``: every cell, long format, one JSON object a line,
  sorted by key (a diff between two runs is a diff of lines);
- ``results/environment.json``: versions of everything that produced it;
- ``results/cases.json``: every case's card and the file it came from (what
  ``harness recommend --corpus`` selects by);
- ``results/history.jsonl``: one summary line per published run;
- ``results/plots/*.svg``: pass rate per runtime for each exporter and opset,
  of the fixed twins and of every case;
- ``results/index.html``: the whole table as one self-contained page;
- ``results/README.md``: the newest safe opset per runtime, the legend, a
  summary per runtime × exporter × opset, the plots and the trend, and per
  case its card, its row across runtimes and providers, export facts,
  failing cells with their first error line and reproducer, and latency.

Needs pandas and tabulate (the report environment), never torch or a runtime.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from harness import cache, claims, frontier, history, page, plan, plots, recommend, shards, staged
from harness import export as export_mod
from harness.corpus import PROBE_FILE_ERROR
from harness.errors import HarnessError
from harness.export import MANIFEST
from harness.matrix import Profile, version_tuple
from harness.published import (
    CASES,
    LABEL_PREFIX,
    REWRITES,
    column_label,
    group_by,
    runtime_key,
    runtime_order,
    shorten,
    why,
    worst,
)
from harness.records import CellRecord, ExportRecord, Rewrite, Status, by_written_opset, spread
from harness.repro import FAILING, write_repros
from harness.run import load_artifacts, shard_path
from harness.staged import Staged

_CASE_NAME = re.compile(r"^[a-z0-9][a-z0-9_]*$")  # as harness.corpus registers a case
CASE_PAGES = "cases"  # results/cases/<case>.md: one page per case, linked from README.md

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
    Status.ENV_ERROR: "the runtime environment itself is broken (e.g. it fails to import)",
    Status.SKIPPED: "the case does not apply to this exporter (reason given)",
}


def _column(cell: CellRecord, providers: int) -> str:
    return column_label(cell.runtime, cell.provider, providers)


def gather(out: Path, profile: Profile, *, partial: bool = False) -> tuple[list[CellRecord], list[ExportRecord], list[str]]:
    """Cells of the profile's shards for the artifacts of the last export (a runtime-wide ``env-error``
    record stays one record: :func:`harness.records.spread` expands it), and what is wrong with them.

    Raises:
        HarnessError: a shard of the profile is not whole (:mod:`harness.shards`: unsealed, changed,
            damaged, missing cells), unless ``partial``: then its sound cells are taken and the
            problems returned, for the report to say so.
    """
    exports = load_artifacts(out)
    wanted = {(r.case, r.exporter, r.opset) for r in exports}
    cells: list[CellRecord] = []
    found: list[str] = []
    for rt, provider in profile.shards():
        sound, problem = shards.check(shard_path(out, rt, provider), rt.pin, provider, exports)
        if problem:
            found.append(problem)
        cells.extend(c for c in sound.values() if c.runtime_wide or (c.case, c.exporter, c.opset) in wanted)
    if found and not partial:
        raise HarnessError(
            f"report: not publishing profile {profile.name!r}, {len(found)} of {len(profile.shards())} shards are not whole: "
            f"{shards.describe(found)}; rerun `nox -s matrix` (it runs what is missing), or add --partial to publish "
            "what there is, labelled partial"
        )
    if not cells:
        raise HarnessError(f"{out / 'shards'}: no shards for profile {profile.name!r}; run the `run` sessions first")
    return cells, exports, found


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


def build(
    out: Path,
    results: Path,
    *,
    profile: Profile,
    wall: float | None = None,
    builtin: tuple[str, ...] = (),
    partial: bool = False,
) -> str:
    """Write results/ and return a summary: one line, then the rows of cases from outside ``builtin``
    (the user's own corpus files), so ``nox -s matrix -- --corpus my_models.py`` ends with the answer.

    Only whole shards are published (:func:`gather`); with ``partial``, what there is, and the report
    says so on its first line and on the page (and adds no entry to the history). Every file is staged
    and put in place together (:class:`harness.staged.Staged`): a write that fails leaves the previous
    results as they were and no temporary file.

    Raises:
        HarnessError: the shards are not whole (without ``partial``), or ``results`` cannot be written.
    """
    cells, exports, problems = gather(out, profile, partial=partial)
    stage = Staged()
    try:
        staged.sweep(results)  # what a report killed while staging left (SIGKILL: no abort ran)
        summary = _build(out, results, stage, cells, exports, problems, profile=profile, wall=wall, builtin=builtin)
        stage.commit()
    except OSError as exc:
        stage.abort()
        where = f" ({exc.filename})" if exc.filename else ""
        raise HarnessError(
            f"report: cannot write {results}: {exc.strerror or exc}{where}; the previous report is left as it was: "
            "free some space or fix the folder's permissions, then run the report again"
        ) from None
    except BaseException:  # Ctrl-C, a bug: nothing half-written stays behind either
        stage.abort()
        raise
    try:
        plan.write_report_stamp(out, profile, results, builtin)
    except OSError as exc:
        raise HarnessError(
            f"report: {results} is written, but its stamp in {out} is not ({exc.strerror or exc}): "
            "the next `nox -s matrix` writes the report again"
        ) from None
    return summary


def _build(
    out: Path,
    results: Path,
    stage: Staged,
    raw_cells: list[CellRecord],
    raw_exports: list[ExportRecord],
    problems: list[str],
    *,
    profile: Profile,
    wall: float | None,
    builtin: tuple[str, ...],
) -> str:
    """The report's files, written into ``stage``; the summary. (One function: the order in which the
    figures are made is the order of the README; it reads top to bottom.)"""
    raw, exports, rewrites = by_written_opset(raw_cells, raw_exports)
    stage.folder(results)
    cells = sorted(spread(raw, exports), key=lambda c: c.key)
    constraints = {rt.pin: rt.constraints for rt in profile.runtimes}
    repros = write_repros(out, results, cells, exports, constraints, stage)
    _write_lines(stage, results / "matrix.jsonl", (_published(c, repros) for c in sorted(raw, key=lambda c: c.key)))
    cards: dict[str, dict[str, str]] = {}
    for r in exports:  # every record carries its case's card; one from before that rule may not
        if r.card or r.case not in cards:
            cards[r.case] = r.card or cards.get(r.case, {})
    stage.write_text(results / CASES, json.dumps(cards, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    stage.write_text(results / REWRITES, json.dumps([dataclasses.asdict(w) for w in rewrites], indent=1) + "\n")

    runs = [p for p in (out / MANIFEST, *(shard_path(out, rt, p) for rt, p in profile.shards())) if p.exists()]
    run_id = history.run_id(runs)
    # Reporting a run again (the report's code changed, nothing else) is not the run: its wall time stays the one
    # recorded when its cells were made, not the seconds this report took.
    earlier = next((e for e in history.read(results / history.HISTORY) if e.get("run") == run_id), {})
    if earlier.get("wall_seconds") is not None:
        wall = earlier["wall_seconds"]
    manifest = json.loads((out / MANIFEST).read_text())
    export_stats = (cache.read_json(out / export_mod.STAMP) or {}).get("stats", {})
    runtimes_env = {}
    for c in raw:
        if c.env and c.runtime not in runtimes_env:
            runtimes_env[c.runtime] = {k: v for k, v in c.env.items() if k not in ("torch", "onnx", "onnxscript")}
    environment = {
        "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "profile": profile.name,
        "export": manifest.get("versions", {}),
        "export_seconds": export_stats.get("seconds"),
        "exported": export_stats.get("exported"),
        "runtimes": runtimes_env,
        "wall_seconds": wall,
        "cells": len(cells),
        "reproducers": len(repros),
        "problems": manifest.get("problems", []),
    }
    if problems:  # published only when asked for (--partial): said on the README's first line and on the page
        environment["partial"] = problems
    stage.write_text(results / "environment.json", json.dumps(environment, indent=1, sort_keys=True) + "\n")

    df = pd.DataFrame([_row(c, repros) for c in cells])
    providers = df["provider"].nunique()
    df["column"] = [_column(c, providers) for c in cells]
    counts = df["status"].value_counts().to_dict()
    # Claims are about onnxruntime on the CPU: the newest CPU package (native TensorRT 10.x is not newer).
    pins = {c.runtime for c in cells}
    newest = max([p for p in pins if p.startswith("onnxruntime==")] or pins, key=lambda pin: version_tuple(pin.split("==")[-1]))
    by_case: dict[str, list[CellRecord]] = {}
    for c in cells:
        by_case.setdefault(c.case, []).append(c)
    verdicts = {r.case: _claims(r, by_case.get(r.case, []), newest) for r in exports}

    entry = history.summary(
        run=run_id,
        date=history.finished(runs),
        environment=environment,
        counts=counts,
        cases=df["case"].nunique(),
        runtimes=[rt.pin for rt in profile.runtimes if rt.pin in set(df["runtime"])],
    )
    if problems:  # a partial report is not a run of the profile: the trend stays the runs'
        trend = history.read(results / history.HISTORY)
    else:
        trend, text = history.merged(results / history.HISTORY, entry)
        stage.write_text(results / history.HISTORY, text)
    folded = _fold_cases(df)
    names, selection = recommend.select(cells, cards, str(results / "matrix.jsonl"))
    figures = _plots(stage, results, folded, _runtime_order(df["column"]), names, _runtime_axis(profile))
    loads = frontier.read(out, [(rt.id, rt.pin) for rt in profile.runtimes])
    rewritten = {(w.case, w.exporter, w.asked): w.wrote for w in rewrites}
    safe = recommend.safe_opsets(cells, names, selection, loads, rewritten)
    stage.write_text(results / frontier.PUBLISHED, json.dumps(loads, indent=1, sort_keys=True) + "\n")
    payload = page.data(
        cells,
        exports,
        repros=repros,
        constraints=constraints,
        environment=environment,
        legend=LEGEND,
        counts=counts,
        frontier=loads,
        answers=safe,
    )
    stage.write_text(results / "index.html", page.render(payload))

    # A column that is one runtime-wide record (a provider unavailable here, a broken env) was not measured: said once.
    unmeasured = {
        (c.runtime, c.provider): f"{c.status.symbol} {c.status.value}: {c.error_line}" for c in raw if c.runtime_wide
    }
    text = _markdown(
        df,
        exports,
        environment,
        counts,
        profile,
        folded=folded,
        safe=safe,
        trend=trend,
        figures=figures,
        unmeasured={_column(c, providers): unmeasured[(c.runtime, c.provider)] for c in raw if c.runtime_wide},
        unmeasured_pins=unmeasured,
        loads=loads,
        runtimes=[rt.pin for rt in profile.runtimes],
        rewrites=rewrites,
    )
    stage.write_text(results / "README.md", text)
    _write_case_pages(stage, results, case_pages(df, exports, verdicts, profile, environment))
    summary = (
        f"report: {len(cells)} cells, {len(exports)} artifacts, "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        + f" → {results} (open {results / 'index.html'})"
    )
    mine = list(dict.fromkeys(r.case for r in exports if cards.get(r.case, {}).get("source_file") not in builtin))
    if mine:
        summary += "\n\n" + your_models(cells, mine, cards, providers)
    for problem in manifest.get("problems", []):
        summary += f"\ncorpus problem: {problem}"
    if problems:
        summary = f"report: PARTIAL, {len(problems)} shard(s) not whole: {shards.describe(problems)}\n" + summary
    return summary


def your_models(cells: list[CellRecord], mine: list[str], cards: Mapping[str, Mapping[str, str]], providers: int) -> str:
    """The end of a ``--corpus`` run, in one screen: per model, the exporter and opset to ship on each
    runtime (``recommend`` for that model alone), then what fails where, each failure once with the
    opsets and runtimes it covers."""
    columns = group_by((c for c in cells if c.case in mine), "runtime", "provider")
    whole = group_by(cells, "runtime", "provider")  # a column's every cell, once: recommend breaks ties with them
    order = {pin: i for i, pin in enumerate(runtime_order(pin for pin, _ in columns))}
    keys = sorted(columns, key=lambda k: (order[k[0]], k[1]))
    labels = [column_label(pin, provider, providers) for pin, provider in keys]
    files = sorted({cards.get(c, {}).get("source_file", "") for c in mine} - {""})
    rows = []
    for case in mine:
        row = [case]
        for pin, provider in keys:
            try:
                answer = recommend.recommend(whole[(pin, provider)], pin, provider, [case], case)
            except HarnessError:
                row.append("not measured")
                continue
            best = answer.best
            if best is not None:
                row.append(f"{best.exporter} {best.opset}")
            elif answer.options:
                closest = answer.options[0]
                status = closest.failing[0][1].split(" ", 1)[0] if closest.failing else "?"
                row.append(f"none (closest: {closest.exporter} {closest.opset}, {status})")
            else:
                row.append("none")
        rows.append(row)
    lines = [
        f"Your models ({', '.join(files) or 'your corpus'}): the exporter and opset to ship on each runtime "
        "(the highest opset at which every probe passes; `harness recommend --corpus FILE` says more)",
        "",
        tabulate(rows, headers=["model", *labels], tablefmt="github"),
    ]
    failures = _failures(cells, mine, providers)
    if failures:
        lines += ["", "What fails where:", *failures]
    return "\n".join(lines)


def _failures(cells: list[CellRecord], mine: list[str], providers: int) -> list[str]:
    """One line per model × exporter × failure (status and first error line), with the opsets and the
    runtimes it holds on: ``bert: dynamo opsets 13-20 on 1.16.3: L load-fail: Unsupported model IR version …``."""
    runtimes = runtime_order(c.runtime for c in cells if c.case in mine)
    by: dict[tuple[str, str, str, str], dict[str, set[int]]] = {}
    for (case, exporter, opset, pin, provider), group in group_by(
        (c for c in cells if c.case in mine), "case", "exporter", "opset", "runtime", "provider"
    ).items():
        status = worst(group)
        if status in (Status.PASS, Status.SKIPPED):
            continue
        reason = why(group)
        label = column_label(pin, provider, providers)
        by.setdefault((case, exporter, status.symbol, reason), {}).setdefault(label, set()).add(opset)
    all_opsets = {c.opset for c in cells if c.case in mine}
    labels = [column_label(p, q, providers) for p in runtimes for q in sorted({c.provider for c in cells if c.runtime == p})]
    lines = []
    for (case, exporter, symbol, reason), where in sorted(by.items(), key=lambda kv: (mine.index(kv[0][0]), kv[0][1])):
        groups: dict[frozenset[int], list[str]] = {}
        for label in labels:
            if label in where:
                groups.setdefault(frozenset(where[label]), []).append(label)
        for opsets, at in groups.items():
            listed = ", ".join(map(str, sorted(opsets)))
            on = "every opset" if opsets == all_opsets else f"opset{'s' * (len(opsets) > 1)} {listed}"
            runs = "every runtime" if len(at) == len(labels) > 1 else ", ".join(at)
            lines.append(f"- {case}: {exporter} {on} on {runs}: {symbol} {reason}")
    return lines


def _published(c: CellRecord, repros: dict[str, str]) -> dict[str, Any]:
    """A cell as published: one line of what a reader needs, without what changes on every run or
    lives elsewhere. The full error message, the environment and the digests stay in the shard
    (build/shards); the environment is published once per runtime in environment.json; the error
    reproduces with the cell's reproducer (``repro``)."""
    data: dict[str, Any] = {**_where(c), "status": c.status.value, "stage": c.stage.value}
    optional = {
        "opset_actual": c.opset_actual,
        "opset_asked": c.opset_asked,
        "ir_version": c.ir_version,
        "error_class": c.error_class,
        "error_line": c.error_line,
        "localization": c.localization,
        "optimizer": c.optimizer,
        "note": c.note,
        "providers_used": list(c.providers_used),
        "placement": c.placement,
        "engine": c.engine,
        "diff": _compact_diff(c),
        "latency": _compact_latency(c),
        "repro": _repro(c, repros),
    }
    data.update({k: v for k, v in optional.items() if v not in (None, [], {})})
    if c.error_class != "EnvironmentError":
        return data
    data["error"] = c.error  # a broken environment is one record: keep its whole diagnosis
    return data


def _repro(c: CellRecord, repros: dict[str, str]) -> str | None:
    """The reproducer folder of a failing cell (relative to results/)."""
    return repros.get(c.artifact.id) if c.status in FAILING else None


def _sig(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.4g}")


def _compact_diff(c: CellRecord) -> dict[str, Any] | None:
    if c.diff is None:
        return None
    d = c.diff
    data: dict[str, Any] = {"max_abs": _sig(d.max_abs), "max_rel": _sig(d.max_rel), "mismatched": d.mismatched, "total": d.total}
    extra = {"nan_ref": d.nan_ref, "nan_out": d.nan_out, "inf_ref": d.inf_ref, "inf_out": d.inf_out}
    data.update({k: v for k, v in extra.items() if v})
    if d.scaled_error is not None:  # the error in units of the output's own scale, and the bound it had
        data["scaled_error"] = _sig(d.scaled_error)
        data.update({k: v for k, v in (("scaled_output", d.scaled_output), ("scaled_limit", d.scaled_limit)) if v is not None})
    if d.shape_mismatch:
        data["shape_mismatch"] = d.shape_mismatch
    return data


def _compact_latency(c: CellRecord) -> dict[str, Any] | None:
    if c.latency is None:
        return None
    data = c.latency.to_dict()
    for k in ("median_ms", "p90_ms", "session_ms"):
        data[k] = _sig(data[k])
    return data


def _where(c: CellRecord) -> dict[str, Any]:
    """The fields of a cell's key."""
    return {k: getattr(c, k) for k in ("case", "exporter", "opset", "runtime", "provider", "probe")}


def _row(c: CellRecord, repros: dict[str, str]) -> dict[str, Any]:
    return {
        **_where(c),
        "status": c.status.value,
        "error_class": c.error_class or "",
        "error_line": c.error_line or "",
        "localization": c.localization or "",
        "optimizer": {True: "yes", False: "no", None: ""}[c.optimizer],
        "repro": _repro(c, repros) or "",
        "note": c.note or "",
        "median_ms": c.latency.median_ms if c.latency else None,
        "copies": c.latency.copies if c.latency else "",
    }


def _write_lines(stage: Staged, path: Path, rows: Iterable[dict[str, Any]]) -> None:
    stage.write_text(path, "".join(json.dumps(row, sort_keys=True, separators=(",", ":")) + "\n" for row in rows))


def _runtime_order(columns: Iterable[str]) -> list[str]:
    """onnxruntime's columns oldest first, then onnxruntime-gpu's, then native TensorRT's."""
    prefixes = [p.rstrip("-") for p in LABEL_PREFIX.values()]

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


def _claims(rec: ExportRecord, cells: list[CellRecord], newest: str) -> list[str]:
    """One line per claim of the case: does this run's table show it?"""
    lines = []
    for claim in rec.claims:
        verdict = claims.holds(claim, rec.case, cells, newest)
        mark = {True: "✓ reproduced", False: "✗ **not shown in this run** (news: fixed, or changed?)", None: "· not measured"}
        lines.append(f"- {mark[verdict]}: {_md_escape(claims.describe(claim, newest))}")
    return lines


def _markdown(
    df: pd.DataFrame,
    exports: list[ExportRecord],
    env: dict[str, Any],
    counts: dict[str, int],
    profile: Profile,
    *,
    folded: pd.Series,
    safe: list[recommend.Answer],
    trend: list[dict[str, Any]],
    figures: list[tuple[str, str]],
    unmeasured: Mapping[str, str] | None = None,
    unmeasured_pins: Mapping[tuple[str, str], str] | None = None,
    loads: Mapping[str, Mapping[str, Any]] | None = None,
    runtimes: Sequence[str] = (),
    rewrites: Sequence[Rewrite] = (),
) -> str:
    cases = list(dict.fromkeys(r.case for r in exports))
    axis = "; ".join(
        f"{e} {', '.join(map(str, sorted(g['opset'].unique())))}" for e, g in df.groupby("exporter", sort=True)
    )
    columns = _runtime_order(df["column"])
    partial = env.get("partial") or []
    lines = [
        *(
            [
                f"**PARTIAL REPORT: {len(partial)} shard(s) were not whole when it was made; it is not the answer.** "
                + _md_escape(shards.describe(partial, limit=len(partial))),
                "",
            ]
            if partial
            else []
        ),
        "# PyTorch → ONNX compatibility matrix" + (" (partial)" if partial else ""),
        "",
        f"Profile **{profile.name}**, generated {env['generated']} by `nox -s matrix"
        + ("" if profile.name == "default" else f" -- --profile {profile.name}")
        + "` from the committed code. Do not edit by hand: rerun it.",
        "",
        f"{len(df)} cells ({len(cases)} cases × {df[['exporter', 'opset']].drop_duplicates().shape[0]} exporter × opset "
        f"({axis}) × {len(columns)} runtime columns × probes)"
        + (f", wall time {env['wall_seconds']:.0f} s" if env.get("wall_seconds") else "")
        + ". "
        + ", ".join(f"{Status(k).symbol} {k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: Status(kv[0]).severity))
        + ".",
        "",
        "The same data as one filterable, sortable page: **[index.html](index.html)** (self-contained; open it from a clone, "
        "or from the project's GitHub Pages). Every cell, long format: [matrix.jsonl](matrix.jsonl).",
        "",
        *_problem_lines(env.get("problems", [])),
        *_safe_lines(safe, unmeasured_pins or {}),
        *_frontier_lines(loads or {}, runtimes, exports),
        *_rewrite_lines(rewrites),
        "## Legend",
        "",
        "A table cell folds its probes (the example inputs and each probe the case declares): it shows the worst status, "
        "followed by the probes that hit it when not all did.",
        "",
    ]
    legend = [[s.symbol, f"`{s.value}`", LEGEND[s], counts.get(s.value, 0)] for s in sorted(Status, key=lambda s: s.severity)]
    lines += [tabulate(legend, headers=["", "status", "meaning", "cells"], tablefmt="github"), ""]
    lines += _runtime_summary(folded, columns, cases, unmeasured or {})
    if figures:
        lines += ["## Plots", ""] + [f"![{title}]({path})" for title, path in figures] + [""]
    lines += _trend_lines(trend)
    lines += [
        "## Per case",
        "",
        f"Each case has a page of its own in [{CASE_PAGES}/]({CASE_PAGES}/): its card, its rows across runtimes and "
        "providers, its export facts, its failing cells with their reproducers, its latency. In corpus order, each "
        "fixed twin after its case:",
        "",
    ]
    cards = {r.case: r.card for r in exports}
    for case in cases:
        symptom = cards[case].get("symptom") or (f"fixed twin of {cards[case]['fixes']}" if cards[case].get("fixes") else "")
        lines.append(f"- [{case}]({_page(case)})" + (f": {_md_escape(shorten(symptom, 110))}" if symptom else ""))
    lines += ["", "## Environment", "", "```json", json.dumps(env, indent=1, sort_keys=True), "```", ""]
    return "\n".join(lines)


def case_pages(
    df: pd.DataFrame, exports: list[ExportRecord], verdicts: dict[str, list[str]], profile: Profile, env: Mapping[str, Any]
) -> dict[str, str]:
    """``{case: Markdown}``: each case's own page, ``results/cases/<case>.md``."""
    columns = _runtime_order(df["column"])
    by_case: dict[str, list[ExportRecord]] = {}
    for r in exports:
        by_case.setdefault(r.case, []).append(r)
    table = _fold_table(df)
    footer = f"Profile **{profile.name}**, generated {env['generated']} by `nox -s matrix` from the committed code."
    return {
        case: "\n".join(
            [*_case_section(case, recs, df[df["case"] == case], table, columns, verdicts[case]), footer, ""]
        )
        for case, recs in by_case.items()
    }


def _page(case: str) -> str:
    return f"{CASE_PAGES}/{case}.md"


def _write_case_pages(stage: Staged, results: Path, pages: Mapping[str, str]) -> None:
    """Write each case's page; a page of a case the table no longer holds goes."""
    folder = stage.folder(results / CASE_PAGES)
    for case, text in pages.items():
        stage.write_text(folder / f"{case}.md", text)
    for old in folder.glob("*.md"):
        if old.stem not in pages:
            stage.remove(old)


def _frontier_lines(loads: Mapping[str, Mapping[str, Any]], runtimes: Sequence[str], exports: list[ExportRecord]) -> list[str]:
    """"What each runtime loads": the measured frontier per runtime, and what the exporters write."""
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
        "each runtime's CPU provider. The refusal is the runtime's own first words past its frontier."
        + (f" Here {said}." if said else ""),
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
                _md_escape("; ".join(f"{_at(r)}{r['text']}" for r in reasons[:2]))
                or f"none: loads every model onnx {result.get('onnx', '?')} writes",
            ]
        )
    lines += [tabulate(table, headers=["runtime", "highest IR", "highest opset", "refusal past it"], tablefmt="github"), ""]
    return lines


def _rewrite_lines(rewrites: Sequence[Rewrite]) -> list[str]:
    """What each exporter wrote when asked for an opset it does not write: every row is labelled by the opset
    written, so a request that wrote another opset is that opset's row, or (when that opset was asked too)
    left out as the same export again."""
    if not rewrites:
        return []
    lines = [
        "## Opsets asked and written",
        "",
        "Rows are labelled by the opset the exporter wrote. Where it wrote another than the one asked, the cells are "
        "that opset's row (the request is kept on each cell as `opset_asked`), or, where that opset was asked too, "
        "they are the same export again and are left out:",
        "",
    ]
    groups: dict[tuple[str, int], list[Rewrite]] = {}
    for w in rewrites:
        groups.setdefault((w.exporter, w.asked), []).append(w)
    for (exporter, asked), ws in sorted(groups.items()):
        wrote: dict[int, list[Rewrite]] = {}
        for w in ws:
            wrote.setdefault(w.wrote, []).append(w)
        parts = []
        for opset, got in sorted(wrote.items()):
            kept = sum(w.kept for w in got)
            how = "left out" if not kept else ("recorded there" if kept == len(got) else f"{kept} recorded there")
            names = ", ".join(w.case for w in got[:3]) + (f" and {len(got) - 3} more" if len(got) > 3 else "")
            parts.append(f"{len(got)} wrote {opset} ({how}: {_md_escape(names)})")
        lines.append(f"- **{exporter} asked for {asked}**: " + "; ".join(parts))
    return [*lines, ""]


def _at(reason: Mapping[str, Any]) -> str:
    return f"IR {reason['ir']} / opset {reason['opset']}: " if reason.get("ir") is not None else ""


def _safe_lines(answers: list[recommend.Answer], unmeasured: Mapping[tuple[str, str], str]) -> list[str]:
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
                *((str(o.opset) if o.ok else f"none ({closest(o)})") if (o := mine.get(e)) else "" for e in exporters),
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
        f"For {kinds or 'the selected cases'} ({count}): the highest opset at which every one of them passes every probe, "
        "per exporter "
        "(or, where none does, the closest and what fails there), and the recommendation: the highest safe opset, a tie going "
        "to the exporter under which more of the whole corpus passes. `harness recommend --runtime onnxruntime==X.Y.Z` "
        "prints the same answer with every alternative and why its cases fail (`--exporter dynamo` for one exporter); "
        "`--corpus my_models.py` or `--cases a,b` asks it about your own cases.",
        "",
        tabulate(rows, headers=["runtime", "provider", "recommended", *exporters], tablefmt="github", disable_numparse=True),
        "",
        *(line for text in skip_lines for line in (text, "")),
    ]


def _fold_cases(df: pd.DataFrame) -> pd.Series:
    """Each case's status per runtime column × exporter × opset: the worst over its probes (pass only when
    every probe passed). The summary per runtime and the pass-rate plots count these."""
    return df.groupby(["column", "exporter", "opset", "case"], observed=True)["status"].agg(
        lambda s: max(s, key=lambda v: Status(v).severity)
    )


def _runtime_summary(per_case: pd.Series, columns: list[str], cases: list[str], unmeasured: Mapping[str, str]) -> list[str]:
    """Per runtime × exporter × opset: cases whose every probe passes / cases, then the failing ones by
    status; a column not measured here (one runtime-wide record) shows its status and, once, why."""
    combos = sorted({(e, o) for _, e, o, _ in per_case.index}, key=lambda eo: (eo[0] != "torchscript", eo[0], eo[1]))
    rows = []
    details = []
    order = {c: i for i, c in enumerate(cases)}
    for column in columns:
        if (why := unmeasured.get(column)) is not None:
            rows.append([column, *(why.split(":")[0] for _ in combos)])
            details += [f"- **{column}** not measured here: {_md_escape(why)}", ""]
            continue
        row = [column]
        failing_lines = []
        for exporter, opset in combos:
            try:
                got = per_case.loc[(column, exporter, opset)]
            except KeyError:
                row.append("")
                continue
            passed = int((got == Status.PASS.value).sum())
            row.append(f"{passed}/{len(got)}")
            bad = got[got != Status.PASS.value]
            if bad.empty:
                continue
            by_status: dict[str, list[str]] = {}
            for case, status in sorted(bad.items(), key=lambda kv: order.get(kv[0], 0)):
                by_status.setdefault(status, []).append(case)
            text = "; ".join(
                f"{Status(st).symbol} {st} ({len(names)}): " + ", ".join(names)
                for st, names in sorted(by_status.items(), key=lambda kv: -Status(kv[0]).severity)
            )
            failing_lines.append(f"- **{exporter} opset {opset}**, {len(bad)} failing: {text}")
        rows.append(row)
        details += [f"<details><summary>{column}: the failing cases</summary>", "", *failing_lines, "", "</details>", ""]
    return [
        "## Summary per runtime",
        "",
        "Cases whose every probe passes, of the cases measured, per runtime × exporter × opset. "
        "Below the table, each runtime's failing cases by status (click to open).",
        "",
        tabulate(rows, headers=["runtime", *(f"{e} {o}" for e, o in combos)], tablefmt="github", disable_numparse=True),
        "",
        *details,
    ]


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


def _runtime_axis(profile: Profile) -> str:
    """The x axis of the plots: the runtime columns, oldest first, in words."""
    packages = sorted({rt.package for rt in profile.runtimes})
    providers = ", ".join(profile.providers)
    return f"{' / '.join(packages)} version, oldest first ({providers} provider{'s' * (len(profile.providers) > 1)})"


def _pass_rates(folded: pd.Series, columns: list[str], cases: Sequence[str] | None) -> dict[str, list[float | None]]:
    """Per exporter × opset, per runtime column: % of ``cases`` (None: all) whose every probe passes there, over
    the cases that apply (a case skipped under an exporter is neither)."""
    if cases is not None:
        folded = folded[folded.index.get_level_values("case").isin(list(cases))]
    folded = folded[folded != Status.SKIPPED.value]
    passed = (folded == Status.PASS.value).reorder_levels(["exporter", "opset", "column", "case"])
    rate = passed.groupby(level=["exporter", "opset", "column"], observed=True).mean() * 100
    return {
        f"{exporter} opset {opset}": [
            float(rate[(exporter, opset, c)]) if (exporter, opset, c) in rate.index else None for c in columns
        ]
        for exporter, opset in sorted({(e, o) for e, o, _ in rate.index})
    }


def _plots(
    stage: Staged,
    results: Path, folded: pd.Series, columns: list[str], twins: Sequence[str], runtime_axis: str
) -> list[tuple[str, str]]:
    """Write results/plots/*.svg; return (title, path relative to results/) for the README: the pass rate of the
    fixed twins (the models written as the cards recommend: what a user can ship), then of every case (the
    gotchas included, which fail on purpose), per exporter × opset over the runtimes."""
    folder = stage.folder(results / "plots")
    for stale in ("latency.svg",):  # the latency plot went: five toy cases' medians said nothing a user can use
        stage.remove(folder / stale)
    figures = []
    charts = (
        ("pass_rate", f"Fixed twins ({len(twins)} cases) whose every probe passes, % per exporter and opset", twins),
        ("pass_rate_all", "Every case (the gotchas fail on purpose) whose every probe passes, %", None),
    )
    for name, title, cases in charts:
        series = _pass_rates(folded, columns, cases)
        if not series:
            continue
        dashed = [k for k in series if k.startswith("torchscript")]
        svg = plots.line_chart(
            title, columns, series, y_label="% of cases", x_label=runtime_axis, y_max=100, dashed=dashed
        )
        stage.write_text(folder / f"{name}.svg", svg)
        figures.append((title, f"plots/{name}.svg"))
    return figures


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
    card = exports[0].card
    lines = [f"# {case}", "", "[← the table](../README.md) · [the page](../index.html)", ""]
    if card.get("symptom"):
        for field in ("symptom", "cause", "fix", "source"):
            lines.append(f"- **{field}**: {_md_escape(card.get(field, ''))}")
    if card.get("fixes"):
        twin = card["fixes"]
        linked = _CASE_NAME.match(twin) is not None  # a case's name (corpus._NAME): a safe link target
        lines.append("- **fixed twin of** " + (f"[{twin}]({twin}.md)" if linked else _md_escape(twin)))
    if card.get("exporters"):
        lines.append(f"- **applies to** {card['exporters']} only (the other exporter's cells are skipped): "
                     f"{_md_escape(card.get('skip_reason', ''))}")
    if card.get("source_file"):
        lines.append(f"- defined in {_md_code(card['source_file'])}")
    if verdicts:
        lines += ["", "Where the gotcha was reproduced (the case's claims, checked against this table):", "", *verdicts]
    lines += ["", "Across runtimes and providers:", "", _summary(table, columns, [case], links=False), ""]
    rows = []
    for r in sorted(exports, key=lambda r: (r.exporter, r.opset)):
        tracer = sum(w["category"] == "TracerWarning" for w in r.warnings)
        g = r.graph or {}
        rows.append(
            [
                r.exporter,
                r.opset,
                "ok" if r.ok else ("skipped" if r.error_class == "Skipped" else f"**{r.error_class}**"),
                r.opset_asked or r.opset,
                r.ir_version or "",
                _md_escape(r.checker or ""),
                f"{len(r.warnings)} ({tracer} Tracer)" if r.warnings else "0",
                g.get("nodes", ""),
                g.get("constants", ""),
                g.get("initializers", ""),
                f"{r.seconds:.2f}",
            ]
        )
    headers = ["exporter", "opset", "export", "asked", "IR", "checker", "warnings", "nodes", "Constant", "init", "s"]
    lines += [tabulate(rows, headers=headers, tablefmt="github"), ""]

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

    failing = df[~df["status"].isin([Status.PASS.value, Status.SKIPPED.value])]
    if not failing.empty:
        lines += [
            "Failing cells (first error line; runtimes that share it are grouped). For a mismatch, *starts at* says where "
            "the difference begins and *optimizer* whether the probe passes with graph optimizations disabled; "
            "*repro* is a standalone reproducer (onnxruntime + numpy):",
            "",
        ]
        keys = ["exporter", "opset", "status", "error_line", "localization", "optimizer", "repro"]
        rows = []
        for (exporter, opset, status, error, where, optimizer, repro), g in failing.groupby(keys, sort=True):
            probes = ",".join(sorted(set(g["probe"])))
            runtimes = ", ".join(_runtime_order(g["column"]))
            rows.append(
                [
                    exporter,
                    opset,
                    f"{Status(status).symbol} {status}",
                    _md_escape(probes),
                    runtimes,
                    _md_escape(error[:240]),
                    _md_escape(where[:300]),
                    optimizer,
                    f"[repro](../{repro}/repro.py)" if repro else "",
                ]
            )
        headers = ["exporter", "opset", "status", "probes", "runtimes", "first error line", "starts at", "optimizer", "repro"]
        lines += [tabulate(rows, headers=headers, tablefmt="github"), ""]
    notes = df[df["note"] != ""]
    if not notes.empty:
        lines += [f"Note: {_md_escape(notes['note'].iloc[0])}.", ""]
    lat = df.dropna(subset=["median_ms"])
    if not lat.empty:
        wide = lat.pivot_table(index=["exporter", "opset"], columns="column", values="median_ms", aggfunc="first")
        wide = wide.reindex(columns=[c for c in columns if c in wide.columns])
        rows = [[e, o, *(f"{v * 1e3:.0f}" if pd.notna(v) else "" for v in vals)] for (e, o), vals in wide.iterrows()]
        on_device = (lat["copies"] == "device").any()
        device = "; GPU columns with inputs and outputs on the device, copies excluded" if on_device else ""
        lines += [
            f"Latency of the example probe, median µs (serial, 1 thread{device}):",
            "",
            tabulate(rows, headers=["exporter", "opset", *wide.columns], tablefmt="github"),
            "",
        ]
    return lines
