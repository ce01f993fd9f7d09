"""``results/index.html``: the whole table as one self-contained static page.

No network access is needed to view it (no scripts, fonts or styles from
elsewhere), so it works from ``file://`` and from GitHub Pages alike. The data
travels inside the page as JSON, with every repeated string stored once; the
page's script builds the table from it and puts every string from a model or
an error into the document as text (``textContent``), never as markup, and the
JSON escapes ``<``, ``>`` and ``&`` so that nothing in it can close its
``<script>`` element. Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.answer import fault
from harness.answer.published import column_label, exported_with, runtime_order
from harness.answer.recommend import UNMEASURED, Column, table_counts
from harness.config import runtimes
from harness.core import schema
from harness.core.records import CellRecord, ExportRecord, Rewrite, Status
from harness.store.frontier import describe

TEMPLATE = Path(__file__).with_name("page.html")
_TOKEN = "__HARNESS_DATA__"
_MORE = "__HARNESS_MORE_DETAILS__"
"""Where the template's list of a cell's details ends: the schema's details the script does not lay out itself
(:func:`harness.core.schema.page_rows`) are listed there, label and value."""


class _Interned:
    """Values stored once, referred to by index."""

    def __init__(self) -> None:
        self.values: list[Any] = []
        self._index: dict[str, int] = {}

    def __call__(self, value: Any) -> int:
        if value in (None, "", {}, []):
            return -1
        key = json.dumps(value, sort_keys=True)
        if key not in self._index:
            self._index[key] = len(self.values)
            self.values.append(value)
        return self._index[key]


_CARD_KEYS = ("symptom", "cause", "fix", "source", "fixes", "exporters", "skip_reason", "source_file", "title", "about")


def _answers(cols: Sequence[Column], cases: Sequence[str]) -> list[dict[str, Any]]:
    """Each runtime × provider's verdicts, for the page to answer for whatever cases its filter selects by the rule
    every answer follows (:func:`harness.answer.recommend.combine`): per option ``[exporter, opset written, table
    passing, table counted, codes]``, ``codes`` one letter per case of the page (in its order: ``p`` pass, ``f`` fail,
    ``s`` skipped, ``w`` written at another opset, ``n`` not measured); ``asked``, the opsets each exporter was asked
    for; ``unloadable``, exporter → the one reason nothing it writes loads here."""
    index = {name: i for i, name in enumerate(cases)}
    out = []
    for col in cols:
        options = []
        for (exporter, opset), verdicts in col.verdicts.items():
            codes = [UNMEASURED] * len(cases)
            for case, v in verdicts.items():
                if case in index:
                    codes[index[case]] = v.code
            options.append([exporter, opset, *table_counts(verdicts), "".join(codes)])
        out.append(
            {
                "runtime": col.runtime,
                "provider": col.provider,
                "frontier": col.frontier or "",
                "unloadable": dict(col.unloadable),
                "asked": {e: list(o) for e, o in col.asked.items()},
                "options": options,
            }
        )
    return out


def _loads(result: Mapping[str, Any] | None) -> dict[str, str]:
    """``{"loads": "loads up to IR 9 / opset 19", "loads_short": "IR≤9 op≤19", "max_ir": 9, "max_opset": 19}`` for a
    measured frontier (the numbers: the grid's "failures within what the runtime loads")."""
    if not result or result.get("max_ir") is None:
        return {}
    return {
        "loads": describe(result),
        "loads_short": f"IR≤{result['max_ir']} op≤{result['max_opset']}",
        "max_ir": result["max_ir"],
        "max_opset": result["max_opset"],
    }


def _reproducer(pin: str, column: str, constraints: Sequence[str]) -> dict[str, str]:
    """What a column's reproducer installs and the command after ``pip install`` (``{repro}``: its folder), as the
    runtime's kind reproduces a cell (:meth:`harness.config.runtimes.Kind.reproduce`)."""
    kind = runtimes.kind(runtimes.package_of(pin))
    install, command = kind.reproduce(pin, column, constraints, "results/{repro}/")
    return {"pip": kind.pip(pin), "install": " ".join(f'"{req}"' for req in install), "reproduce": command}


def data(
    cells: Sequence[CellRecord],
    exports: Iterable[ExportRecord],
    *,
    repros: Mapping[str, str],
    constraints: Mapping[str, Sequence[str]],
    environment: Mapping[str, Any],
    legend: Mapping[Status, str],
    counts: Mapping[str, int],
    frontier: Mapping[str, Mapping[str, Any]] | None = None,
    verdicts: Sequence[Column] = (),
    beside: Sequence[Mapping[str, Any]] = (),
    home: str | None = None,
    tables: Sequence[Mapping[str, Any]] = (),
    ship: Mapping[str, str] | None = None,
    rewrites: Sequence[Rewrite] = (),
    ctx: schema.Context | None = None,
) -> dict[str, Any]:
    """Everything the page shows, compactly: every case's verdict at every option per runtime × provider
    (``verdicts``: the page answers for the cases its filter selects, as ``harness recommend`` does), the requests an
    exporter wrote at another opset (``rewrites``), each case's answer alone per runtime (``ship``), columns, cases,
    artifact rows, and one short array per cell; a column's header says what its runtime loads, where ``frontier``
    measured it."""
    frontier = frontier or {}
    exports = list(exports)
    strings = _Interned()
    details = _Interned()
    pins = runtime_order(c.runtime for c in cells)
    providers = sorted({c.provider for c in cells})
    measured = {(c.runtime, c.provider) for c in cells}
    columns = [(pin, p) for pin in pins for p in providers if (pin, p) in measured]
    case_names = list(dict.fromkeys(r.case for r in exports))
    case_index = {name: i for i, name in enumerate(case_names)}
    rows = [r for r in exports if r.case in case_index]
    statuses = sorted(Status, key=lambda s: s.severity)
    packed = _pack(cells, rows, columns, statuses, strings, details, ctx or schema.Context())
    cards = {r.case: r.card for r in exports}
    hows = {(c.runtime, c.provider): c.env["how"] for c in cells if c.env.get("how")}
    return {
        "title": "PyTorch → ONNX compatibility matrix",
        "generated": environment.get("generated"),
        "profile": environment.get("profile"),
        "wall_seconds": environment.get("wall_seconds"),
        "partial": list(environment.get("partial") or []),
        "home": home,  # the main table's page, from a profile's folder inside its results (../index.html)
        "beside": list(beside),  # harness.answer.published.published_beside: columns of profiles published inside this one
        "tables": list(tables),  # harness.answer.published.tables_beside: tables of another corpus inside this one
        "ship": dict(ship or {}),  # a case alone: the exporter and opset to ship per runtime (answer.real_models.by_runtime)
        "counts": dict(counts),
        "statuses": [[s.value, s.symbol, legend[s]] for s in statuses],  # the README's symbols: one set
        "faults": list(fault.KINDS),  # a failing cell's fault, by index (harness.answer.fault)
        "columns": [
            {
                "runtime": pin,
                "provider": p,
                "label": column_label(pin, p, len(providers)),
                "how": hows.get((pin, p), ""),  # a platform column: native, or emulated (qemu-user, its -cpu model)
            }
            | _reproducer(pin, p, constraints.get(pin, ()))
            | _loads(frontier.get(pin))
            for pin, p in columns
        ],
        "answers": _answers(verdicts, case_names),
        "rewrites": [
            [case_index[w.case], w.exporter, w.asked, w.wrote, w.reason] for w in rewrites if w.case in case_index
        ],
        "built": exported_with(environment),
        "cases": [{k: cards[name].get(k, "") for k in _CARD_KEYS} | {"name": name} for name in case_names],
        "rows": [
            [case_index[r.case], r.exporter, r.opset, r.opset_asked or r.opset, r.ir_version or 0, repros.get(r.key.id, "")]
            for r in rows
        ],
        "strings": strings.values,
        "details": details.values,
        "cells": packed,
        "environment": dict(environment),
    }


def _pack(
    cells: Sequence[CellRecord],
    rows: Sequence[ExportRecord],
    columns: Sequence[tuple[str, str]],
    statuses: Sequence[Status],
    strings: _Interned,
    details: _Interned,
    ctx: schema.Context,
) -> list[list[Any]]:
    """One short array per cell: ``[row, column, probe, status, details, latency, fault]``, by index (fault: its index
    in :data:`harness.answer.fault.KINDS`, -1 for a cell that carries none)."""
    fault_index = {k: i for i, k in enumerate(fault.KINDS)}
    row_index = {(r.case, r.exporter, r.opset): i for i, r in enumerate(rows)}
    col_index = {col: i for i, col in enumerate(columns)}
    status_index = {s: i for i, s in enumerate(statuses)}
    packed = []
    for c in cells:
        row = row_index.get((c.case, c.exporter, c.opset))
        if row is None:
            continue
        lat = c.latency
        latency = [float(f"{lat.median_ms:.4g}"), float(f"{lat.p90_ms:.4g}"), lat.runs, int(lat.stable)] if lat else 0
        column = col_index[(c.runtime, c.provider)]
        kind = fault_index.get(str((ctx.fault(c) or {}).get("kind")), -1)
        packed.append([row, column, strings(c.probe), status_index[c.status], details(schema.detail(c, ctx)), latency, kind])
    return packed


def render(payload: Mapping[str, Any]) -> str:
    """The page: the template with ``payload`` inlined as script-safe JSON."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    text = text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    text = text.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    template = _template()
    head, sep, tail = template.partition(_TOKEN)
    assert sep, f"{TEMPLATE} lost its {_TOKEN} placeholder"
    return head + text + tail


def _template() -> str:
    """The page's template with the cell details it does not lay out itself added to its list of details."""
    template = TEMPLATE.read_text(encoding="utf-8")
    assert _MORE in template, f"{TEMPLATE} lost its {_MORE} placeholder"
    more = "".join(f", [{json.dumps(label)}, d[{json.dumps(key)}]]" for key, label in schema.page_rows(template))
    return template.replace(_MORE, more)
