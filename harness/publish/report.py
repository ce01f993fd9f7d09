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
  failing cells with their first error line and reproducer;
- ``results/timing.md``: what is measured anew each run (export seconds,
  latency), apart, so that a republish that moves no verdict leaves every
  case page and reproducer as it was.

The table is published as one unit (:func:`harness.publish.staged.publishing`),
and ``environment.json`` records the SHA-256 of each file the answers read
(:data:`harness.answer.published.SEALED`).

Needs pandas and tabulate (the report environment), never torch or a runtime.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from tabulate import tabulate

from harness.answer import fault, lookup, published, real_models, recommend
from harness.answer.published import (
    CASES,
    REWRITES,
    column_label,
    group_by,
    published_beside,
    runtime_order,
    tables_beside,
    why,
    worst,
)
from harness.config import runtimes
from harness.config.matrix import Profile, version_tuple
from harness.core import schema
from harness.core.errors import HarnessError
from harness.core.records import CellRecord, ExportRecord, Status, by_written_opset, spread
from harness.numeric import across, drift
from harness.publish import gpu_outputs as gpuref
from harness.publish import history, markdown, page, plots
from harness.publish.markdown import LEGEND
from harness.publish.repro import FAILING, write_repros
from harness.publish.staged import Publication, publishing
from harness.store import cache, frontier, layout, spec, stamps

__all__ = ["LEGEND", "build", "gather", "your_models"]


def _column(cell: CellRecord, providers: int) -> str:
    return column_label(cell.runtime, cell.provider, providers)


def gather(out: Path, profile: Profile, *, partial: bool = False) -> tuple[list[CellRecord], list[ExportRecord], list[str]]:
    """Cells of the profile's shards for the artifacts of the last export (a runtime-wide ``env-error``
    record stays one record: :func:`harness.core.records.spread` expands it), and what is wrong with them.

    Raises:
        HarnessError: a shard of the profile is not whole (:func:`harness.store.layout.check`: unsealed, changed,
            damaged, missing cells), unless ``partial``: then its sound cells are taken and the
            problems returned, for the report to say so.
    """
    exports = layout.load_artifacts(out)
    wanted = {(r.case, r.exporter, r.opset) for r in exports}
    cells: list[CellRecord] = []
    found: list[str] = []
    for rt, provider in profile.shards():
        shard = layout.shard_path(out, rt, provider)
        sound, problem = layout.check(shard, rt.pin, provider, exports)
        if problem:  # what --partial may publish of it: the cells its seal vouches for, of this export's files
            sound = _vouched(shard, exports)
            kept = f"{len(sound)} of its cells published, those its seal vouches for" if sound else "none of its cells published"
            found.append(f"{problem} ({kept})")
        cells.extend(c for c in sound.values() if c.runtime_wide or (c.case, c.exporter, c.opset) in wanted)
    if found and not partial:
        raise HarnessError(
            f"report: not publishing profile {profile.name!r}, {len(found)} of {len(profile.shards())} shards are not whole: "
            f"{layout.describe(found)}; rerun `nox -s matrix` (it runs what is missing), or add --partial to publish "
            "what there is, labelled partial"
        )
    if not cells:
        raise HarnessError(f"{out / 'shards'}: no shards for profile {profile.name!r}; run the `run` sessions first")
    if unmeasured := _frontier_missing(out, profile):  # what each runtime loads: published whole, or said missing
        if not partial:
            raise HarnessError(
                f"report: not publishing profile {profile.name!r}: {unmeasured[0]}"
                + (f" (and {len(unmeasured) - 1} more)" if len(unmeasured) > 1 else "")
                + "; rerun `nox -s matrix` (it measures it again), or add --partial to publish without it, labelled partial"
            )
        found.extend(unmeasured)
    rows, left_out = gpuref.read(out, exports)  # torch on the GPU, for the mismatches of NVIDIA columns
    if left_out:
        print(f"report: second reference {left_out}", file=sys.stderr)
    return gpuref.join(cells, rows), exports, found


def _frontier_missing(out: Path, profile: Profile) -> list[str]:
    """Each runtime of the profile whose measured frontier (what it loads, which explains its refusals at load and
    makes its answers say "measured") is missing or not measured on this export's frontier models, one line each."""
    if frontier.index_digest(out) is None:
        return [f"the frontier models are missing ({frontier.models_dir(out)}), so no runtime's frontier is measured"]
    measured = frontier.read(out, [(rt.id, rt.pin) for rt in profile.runtimes])
    return [
        f"{rt.pin}: {frontier.why_stale(out, rt.id) or 'its frontier is not measured'} ({frontier.result_path(out, rt.id)})"
        for rt in profile.runtimes
        if rt.kind.frontier and rt.pin not in measured
    ]


def _vouched(shard: Path, exports: Sequence[ExportRecord]) -> dict[str, CellRecord]:
    """The cells of a shard that is not whole which its seal vouches for (a sealed shard's bytes as sealed, an open
    one's up to its run's last checkpoint: :func:`harness.store.layout.resume`), each of this export's files: none
    from a shard whose bytes are not the ones its seal describes (a forged line, even with its checksum redone)."""
    cells, _, problem = layout.resume(shard)
    if problem is not None:
        return {}
    made = {(r.case, r.exporter, r.opset): r for r in exports}
    return {
        key: c for key, c in cells.items()
        if c.runtime_wide
        or (
            (r := made.get((c.case, c.exporter, c.opset))) is not None
            and c.inputs == r.digest and c.sha256 == r.sha256 and (r.ok or c.error_line == r.error_line)
        )
    }  # fmt: skip


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

    Only whole shards are published (:func:`gather`), and only from artifacts whose files are the ones the
    export recorded; with ``partial``, what there is, and the report says so on its first line and on the
    page (and adds no entry to the history). The new report is written whole beside ``results`` and
    swapped in at once (:class:`harness.publish.staged.Publication`): a write that fails, a refused rename or a
    kill at any instant leaves the previous report whole.

    Raises:
        HarnessError: the shards are not whole (without ``partial``), an artifact changed, ``results`` is
            not a results folder (:func:`harness.answer.published.kept`), or it cannot be written.
    """
    with publishing(results, "report") as stage:
        cells, exports, problems = gather(out, profile, partial=partial)
        if changed := layout.damaged(out, exports):
            art_id, what = next(iter(sorted(changed.items())))
            raise HarnessError(
                f"report: not publishing profile {profile.name!r}: {len(changed)} artifact(s) changed since the export "
                f"wrote them ({art_id}: {what}); run `nox -s matrix` (it exports them again and runs their cells)"
            )
        summary = _build(out, results, stage, cells, exports, problems, profile=profile, wall=wall, builtin=builtin)
    try:
        stamps.write_report_stamp(out, profile, results, builtin)
    except OSError as exc:
        raise HarnessError(
            f"report: {results} is written, but its stamp in {out} is not ({exc.strerror or exc}): "
            "the next `nox -s matrix` writes the report again"
        ) from None
    return summary


def _build(
    out: Path,
    results: Path,
    stage: Publication,
    raw_cells: list[CellRecord],
    raw_exports: list[ExportRecord],
    problems: list[str],
    *,
    profile: Profile,
    wall: float | None,
    builtin: tuple[str, ...],
) -> str:
    """The report's files, written into ``stage``; the summary. The steps run in the order of the README's
    figures: the cells and cards, the environment, the history, the plots and the page, the Markdown.

    (Over 60 lines, on purpose: each step is a call or two whose results the later steps read; in one piece the
    order they depend on is the order on the page.)"""
    raw, exports, rewrites = by_written_opset(raw_cells, raw_exports)
    stage.folder(results)
    cells = sorted(spread(raw, exports), key=lambda c: c.key)
    constraints = {rt.pin: rt.constraints for rt in profile.runtimes}
    loads = frontier.read(out, [(rt.id, rt.pin) for rt in profile.runtimes])
    facts, spec_missing = spec.read(out, exports)
    faults = fault.assign(cells, facts, loads, runtime_order(rt.pin for rt in profile.runtimes), spec_missing)
    by_cell = {key: f.published() for key, f in faults.items()}
    repros = write_repros(out, results, cells, exports, constraints, stage, loads, faults=faults)
    made = {r.key.id: str(r.transform["name"]) for r in exports if r.transform.get("name")}
    drifts = drift.measure(out, raw, exports) if made else {}
    ctx = _context(repros, by_cell, made, drifts)
    _write_lines(stage, results / "matrix.jsonl", (schema.published(c, ctx) for c in sorted(raw, key=lambda c: c.key)))
    cards = _cards(exports)
    stage.write_text(results / CASES, json.dumps(cards, indent=1, sort_keys=True, ensure_ascii=False) + "\n")
    stage.write_text(results / REWRITES, json.dumps([dataclasses.asdict(w) for w in rewrites], indent=1) + "\n")
    runs = [p for p in (out / layout.MANIFEST, *(layout.shard_path(out, rt, p) for rt, p in profile.shards())) if p.exists()]
    manifest = json.loads((out / layout.MANIFEST).read_text())
    environment = _environment(out, results, raw, profile, manifest, runs, wall, len(cells), len(repros), problems)
    environment["spec"] = _spec_said(facts, spec_missing, faults)

    df = pd.DataFrame([schema.row(c, ctx) for c in cells])
    providers = df["provider"].nunique()
    df["column"] = [_column(c, providers) for c in cells]
    counts = df["status"].value_counts().to_dict()
    trend = _history(stage, results, profile, raw, df, environment, counts, runs, partial=bool(problems))
    folded = _fold_cases(df)
    chosen = lookup.select(list(dict.fromkeys(c.case for c in cells)), cards, str(results / "matrix.jsonl"))
    names = list(chosen.cases)
    figures = _plots(stage, results, folded, markdown.runtime_order(df["column"]), names, _runtime_axis(profile))
    rewritten = {(w.case, w.exporter, w.asked): w.wrote for w in rewrites}
    cols = recommend.columns(cells, loads, rewritten, {k: f.fixed_in for k, f in faults.items() if f.fixed_in})
    safe = [recommend.combine(col, names, chosen.said) for col in cols]  # the one answer, for the safe models
    # What each runtime loads, without the seconds its measure took: a republish that moved no verdict leaves it as it was.
    timeless = {pin: {k: v for k, v in r.items() if k != "seconds"} for pin, r in loads.items()}
    stage.write_text(results / frontier.PUBLISHED, json.dumps(timeless, indent=1, sort_keys=True) + "\n")
    # The files the answers read, each hashed: a table cut or put together from two reports is refused, not answered.
    sealed = {"files": {name: stage.sha256(results / name) for name in published.SEALED}}
    stage.write_text(results / "environment.json", json.dumps({**environment, **sealed}, indent=1, sort_keys=True) + "\n")
    beside, tables = published_beside(results), tables_beside(results)
    if (releases := published.torch_beside(results)) is not None:  # the table across torch releases, linked
        tables = [*tables, {"folder": releases["folder"], "profile": "torch", "releases": releases["releases"]}]
    every = list(dict.fromkeys(r.case for r in exports))
    alone = {a.case: a for a in real_models.per_model(cells, every, loads, rewritten, cards, cols)}  # each case's own answer
    real = [case for case in every if cards.get(case, {}).get("about")]
    per_model = [alone[case] for case in real if case in alone]
    ship = {case: real_models.by_runtime(a) for case, a in alone.items()}
    mine = set(real)
    causes = real_models.findings([c for c in cells if c.case in mine], loads, providers=len({c.provider for c in cells}))
    payload = page.data(
        cells, exports, repros=repros, constraints=constraints, environment=environment, legend=LEGEND, counts=counts,
        frontier=loads, verdicts=cols, beside=beside, home=_home(results), tables=tables, rewrites=rewrites,
        ship=ship, ctx=ctx,
    )  # fmt: skip
    stage.write_text(results / "index.html", page.render(payload))

    # A column that is one runtime-wide record (a provider unavailable here, a broken env) was not measured: said once.
    unmeasured = {(c.runtime, c.provider): f"{c.status.symbol} {c.status.value}: {c.error_line}" for c in raw if c.runtime_wide}
    text = markdown.readme(
        markdown.Readme(
            df, exports, environment, counts, profile, folded, safe, trend, figures,
            unmeasured={_column(c, providers): unmeasured[(c.runtime, c.provider)] for c in raw if c.runtime_wide},
            unmeasured_pins=unmeasured, loads=loads, runtimes=[rt.pin for rt in profile.runtimes], rewrites=rewrites,
            beside=beside, per_model=per_model, findings=causes, cards=cards, tables=tables, columns=cols,
        )
    )  # fmt: skip
    if profile.platforms:  # a table of platform columns: what each ran on, what changes with it, how far outputs move
        summary = across.measure(out, raw, profile.platforms)
        stage.write_text(results / published.PLATFORMS, json.dumps(summary, indent=1, sort_keys=True) + "\n")
        text += "\n" + across.section(summary, profile.platforms)
    if made:  # a table of transformed files: what each transform costs, per case and column
        text += "\n" + drift.section(drifts, cells, exports)
    stage.write_text(results / "README.md", text)
    verdicts = _verdicts(cells, exports)
    pages = markdown.case_pages(
        df, exports, verdicts, profile, environment, findings=causes, cards=cards,
        ship=ship, rewrites=rewrites,
    )  # fmt: skip
    _write_case_pages(stage, results, pages)
    stage.write_text(results / markdown.TIMING, markdown.timing_page(df, exports))
    return _summary_line(cells, exports, counts, results, cards, builtin, providers, manifest, problems, alone)


def _home(results: Path) -> str | None:
    """``../index.html`` for a profile published in a folder inside the main table's (``results/openvino/``)."""
    parent = results.resolve().parent
    return "../index.html" if (parent / "matrix.jsonl").is_file() and (parent / "index.html").is_file() else None


def _cards(exports: Iterable[ExportRecord]) -> dict[str, dict[str, str]]:
    """Every case's card (every record carries its case's card; one from before that rule may not)."""
    cards: dict[str, dict[str, str]] = {}
    for r in exports:
        if r.card or r.case not in cards:
            cards[r.case] = r.card or cards.get(r.case, {})
    return cards


def _environment(
    out: Path, results: Path, raw: Iterable[CellRecord], profile: Profile, manifest: Mapping[str, Any], runs: list[Path],
    wall: float | None, cells: int, repros: int, problems: list[str],
) -> dict[str, Any]:  # fmt: skip
    """``environment.json``: what made the table (the export's versions, each runtime's environment), when, in how long."""
    run_id = history.run_id(runs)
    # Reporting a run again (the report's code changed, nothing else) is not the run: its wall time stays the one
    # recorded when its cells were made, not the seconds this report took.
    # The trend holds a row for it, or (a run that changed no verdict adds none) the environment.json it published.
    earlier: Mapping[str, Any] = next((e for e in history.read(results / history.HISTORY) if e.get("run") == run_id), {})
    published = _mapping(cache.read_json(results / "environment.json"))
    if published.get("run") == run_id and not isinstance(earlier.get("wall_seconds"), int | float):
        earlier = published
    if isinstance(earlier.get("wall_seconds"), int | float):
        wall = earlier["wall_seconds"]
    export_stamp = _mapping(cache.read_json(out / layout.EXPORT_STAMP))
    export_stats = _mapping(export_stamp.get("stats"))
    settings = _mapping(_mapping(export_stamp.get("inputs")).get("settings"))
    # The tolerance every case without its own was compared with, as the export that wrote the references used it.
    tolerance = {k: settings[k] for k in ("atol", "rtol", "scaled") if isinstance(settings.get(k), int | float)}
    runtimes_env = {}
    # A runtime's environment as this machine's own process found it: a native column's cell before an emulated one's
    # (whose Python, numpy and CPU are the platform's: the README's "Per platform" section gives those, per column).
    for c in sorted(raw, key=lambda c: c.env.get("how", "native") != "native"):
        if c.env and c.runtime not in runtimes_env:
            runtimes_env[c.runtime] = {k: v for k, v in c.env.items() if k not in ("torch", "onnx", "onnxscript")}
    environment = {
        "generated": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "run": run_id,
        "profile": profile.name,
        "export": manifest.get("versions", {}),
        **({"default_opsets": manifest["default_opsets"]} if isinstance(manifest.get("default_opsets"), dict) else {}),
        "export_seconds": export_stats.get("seconds"),
        "exported": export_stats.get("exported"),
        "runtimes": runtimes_env,
        "wall_seconds": wall,
        "cells": cells,
        "reproducers": repros,
        "problems": manifest.get("problems", []),
    }
    if tolerance:
        environment["tolerance"] = tolerance
    if problems:  # published only when asked for (--partial): said on the README's first line and on the page
        environment["partial"] = problems
    return environment


def _mapping(value: Any) -> Mapping[str, Any]:
    """``value`` where it is a JSON object, else an empty one (a damaged stamp says nothing)."""
    return value if isinstance(value, dict) else {}


def _history(
    stage: Publication, results: Path, profile: Profile, raw: list[CellRecord], df: pd.DataFrame,
    environment: Mapping[str, Any], counts: dict[str, int], runs: list[Path], *, partial: bool,
) -> list[dict[str, Any]]:  # fmt: skip
    """This run's line in ``history.jsonl`` (not a partial report's: the trend stays the runs', carried over as it
    is; nor a new run's that changed no verdict of the table it replaces and says what the last line says), and
    the trend."""
    if partial:
        with contextlib.suppress(FileNotFoundError):
            stage.write_bytes(results / history.HISTORY, (results / history.HISTORY).read_bytes())
        return history.read(results / history.HISTORY)
    entry = history.summary(
        run=history.run_id(runs),
        date=history.finished(runs),
        environment=environment,
        counts=counts,
        cases=df["case"].nunique(),
        runtimes=[rt.pin for rt in profile.runtimes if rt.pin in set(df["runtime"])],
    )
    before = published.read_verdicts(results / "matrix.jsonl")
    changed = before != {c.key: c.status.value for c in raw}
    trend, text = history.merged(results / history.HISTORY, entry, verdicts_changed=changed)
    stage.write_text(results / history.HISTORY, text)
    return trend


def _verdicts(cells: list[CellRecord], exports: list[ExportRecord]) -> dict[str, list[str]]:
    """Each case's claims checked against the table. Claims are about onnxruntime on the CPU: the newest CPU package
    (native TensorRT 10.x is not newer)."""
    pins = {c.runtime for c in cells}
    cpu = [p for p in pins if runtimes.package_of(p) == runtimes.REFERENCE]
    newest = max(cpu or pins, key=lambda pin: version_tuple(pin.split("==")[-1]))
    by_case: dict[str, list[CellRecord]] = {}
    for c in cells:
        by_case.setdefault(c.case, []).append(c)
    return {r.case: markdown.claims_lines(r, by_case.get(r.case, []), newest) for r in exports}


def _builtin(source: str, builtin: tuple[str, ...]) -> bool:
    """A case of the built-in corpus: from one of its sources, or from a module of one of its packages."""
    return any(source == b or source.startswith(b + ".") for b in builtin)


def _summary_line(
    cells: list[CellRecord], exports: list[ExportRecord], counts: Mapping[str, int], results: Path,
    cards: Mapping[str, Mapping[str, str]], builtin: tuple[str, ...], providers: int, manifest: Mapping[str, Any],
    problems: list[str], ship: Mapping[str, real_models.ModelAnswer],
) -> str:  # fmt: skip
    """What the report prints: its counts, then the user's own models (a ``--corpus`` run ends with the answer)."""
    summary = (
        f"report: {len(cells)} cells, {len(exports)} artifacts, "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
        + f" → {results} (open {results / 'index.html'})"
    )
    mine = list(dict.fromkeys(r.case for r in exports if not _builtin(cards.get(r.case, {}).get("source_file", ""), builtin)))
    if mine:
        summary += "\n\n" + your_models(cells, mine, cards, providers, ship)
    for problem in manifest.get("problems", []):
        summary += f"\ncorpus problem: {problem}"
    if problems:
        summary = f"report: PARTIAL, {len(problems)} shard(s) not whole: {layout.describe(problems)}\n" + summary
    return summary


def your_models(
    cells: list[CellRecord],
    mine: list[str],
    cards: Mapping[str, Mapping[str, str]],
    providers: int,
    ship: Mapping[str, real_models.ModelAnswer],
) -> str:
    """The end of a ``--corpus`` run, in one screen: per model, the exporter and opset to ship on each runtime (``ship``:
    :func:`harness.answer.real_models.per_model`, what ``recommend`` says for that model alone), then what fails where,
    each failure once with the opsets and runtimes it covers."""
    columns = group_by((c for c in cells if c.case in mine), "runtime", "provider")
    order = {pin: i for i, pin in enumerate(runtime_order(pin for pin, _ in columns))}
    keys = sorted(columns, key=lambda k: (order[k[0]], k[1]))
    labels = [column_label(pin, provider, providers) for pin, provider in keys]
    files = sorted({cards.get(c, {}).get("source_file", "") for c in mine} - {""})
    rows = []
    for case in mine:
        said = {(pin, provider): text for pin, provider, text in (ship[case].answers if case in ship else ())}
        rows.append([case, *(said.get(key, "not measured") for key in keys)])
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


def _context(
    repros: Mapping[str, str],
    faults: Mapping[str, Mapping[str, Any]],
    made: Mapping[str, str] | None = None,
    drifts: Mapping[str, Mapping[str, Any]] | None = None,
) -> schema.Context:
    """What the published fields need beyond the cell: its reproducer's folder (only a failing cell's), which
    providers are NVIDIA ones (a GPU cell names its GPU), whose fault a failing cell is and, in a table of transformed
    files, the transform that made each and how far its outputs drifted from torch's fp32 ones."""
    made, drifts = made or {}, drifts or {}
    return schema.Context(
        repro=lambda c: repros.get(c.artifact.id) if c.status in FAILING else None,
        nvidia=lambda provider: runtimes.provider(provider).nvidia,
        fault=lambda c: faults.get(c.key),
        transform=lambda c: made.get(c.artifact.id),
        drift=lambda c: drifts.get(c.key),
    )


def _spec_said(facts: Mapping[str, Mapping[str, Any]], missing: str | None, faults: Mapping[str, fault.Fault]) -> dict[str, Any]:
    """``environment.json``'s ``spec``: the onnx release whose checker and reference evaluator judged the files (each
    fact names it), how many it answered for, why not the others, and the faults counted (the README's summary)."""
    unanswered: dict[str, int] = {}
    probes = {"agrees": 0, "disagrees": 0, "failed": 0}
    for f in facts.values():
        if f.get("unanswered"):
            reason = str(f["unanswered"]).split(":")[0]
            unanswered[reason] = unanswered.get(reason, 0) + 1
        for verdict in (f.get("probes") or {}).values():
            probes[verdict["verdict"]] += 1
    said: dict[str, Any] = {
        "onnx": next((f.get("onnx") for f in facts.values()), None),
        "judged": len(facts),
        "evaluated": sum(1 for f in facts.values() if not f.get("unanswered")),
        "probes": probes,
        "checker_failed": sum(1 for f in facts.values() if f.get("checker") not in (None, "ok")),
        "faults": fault.counts(faults.values()),
    }
    if unanswered:
        said["unanswered"] = unanswered
    if missing:
        said["missing"] = missing
    return said


def _write_lines(stage: Publication, path: Path, rows: Iterable[dict[str, Any]]) -> None:
    stage.write_text(path, "".join(json.dumps(row, sort_keys=True, separators=(",", ":")) + "\n" for row in rows))


def _write_case_pages(stage: Publication, results: Path, pages: Mapping[str, str]) -> None:
    """Write each case's page (the new folder holds no page of a case the table no longer holds). A page that says
    what the published one says, its date line aside, keeps the published bytes: a republish that changed nothing
    rewrites no page (git, a reader's diff and the page's history see no change)."""
    folder = stage.folder(results / markdown.CASE_PAGES)
    for case, text in pages.items():
        kept = _unchanged(results / markdown.CASE_PAGES / f"{case}.md", text)
        if kept is None:
            stage.write_text(folder / f"{case}.md", text)
        else:
            stage.write_bytes(folder / f"{case}.md", kept)


_DATE = re.compile(r"\b\d{4}-\d\d-\d\d \d\d:\d\d UTC\b")


def _unchanged(published: Path, text: str) -> bytes | None:
    """The published page's bytes where they say ``text``, the date of the last line aside; else None."""
    try:
        before = published.read_bytes()
    except OSError:
        return None
    head, _, last = text.rstrip("\n").rpartition("\n")
    old_head, _, old_last = before.decode("utf-8", errors="replace").rstrip("\n").rpartition("\n")
    same = head == old_head and _DATE.sub("", last) == _DATE.sub("", old_last) and before.endswith(b"\n") == text.endswith("\n")
    return before if same else None


def _fold_cases(df: pd.DataFrame) -> pd.Series:
    """Each case's status per runtime column × exporter × opset: the worst over its probes (pass only when
    every probe passed). The summary per runtime and the pass-rate plots count these."""
    return df.groupby(["column", "exporter", "opset", "case"], observed=True)["status"].agg(
        lambda s: max(s, key=lambda v: Status(v).severity)
    )


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
    stage: Publication, results: Path, folded: pd.Series, columns: list[str], twins: Sequence[str], runtime_axis: str
) -> list[tuple[str, str]]:
    """Write results/plots/*.svg; return (title, path relative to results/) for the README: the pass rate of the
    fixed twins (the models written as the cards recommend: what a user can ship), then of every case (the
    gotchas included, which fail on purpose), per exporter × opset over the runtimes."""
    folder = stage.folder(results / "plots")
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
        svg = plots.line_chart(title, columns, series, y_label="% of cases", x_label=runtime_axis, y_max=100, dashed=dashed)
        stage.write_text(folder / f"{name}.svg", svg)
        figures.append((title, f"plots/{name}.svg"))
    return figures
