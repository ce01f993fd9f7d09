"""The published cell, field by field: every renderer of a cell reads this one table of fields.

A cell (:class:`harness.core.records.CellRecord`) leaves the build in four shapes: a line of ``matrix.jsonl``
(:func:`published`), a row of the report's DataFrame that the README is written from (:func:`row`), the detail the
page shows for it (:func:`detail`) and the failing-cells table of a case page (:func:`failing_columns`); the
answers read the line back (:func:`record`). Each :class:`Field` says once which of these it is in and how it
looks there, so a new published field is one entry here and its producer: the jsonl, the DataFrame, the page's
data (and a row of the page's details, :func:`page_rows`) follow. Standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from harness.core.records import CellRecord, DiffStats, Outcome


def _no_repro(_: CellRecord) -> str | None:
    return None


def _not_nvidia(_: str) -> bool:
    return False


def _no_fault(_: CellRecord) -> Mapping[str, Any] | None:
    return None


def _no_transform(_: CellRecord) -> str | None:
    return None


@dataclasses.dataclass(frozen=True)
class Context:
    """What a published value needs beyond its cell: where its reproducer was written (the report decides), whether a
    provider is an NVIDIA one (``harness.config.runtimes``, which this module may not import) and whose fault a
    failing cell is (``harness.answer.fault``: ``kind``, ``why``, ``fixed_in``, ``last_failing``, ``said``)."""

    repro: Callable[[CellRecord], str | None] = _no_repro
    nvidia: Callable[[str], bool] = _not_nvidia
    fault: Callable[[CellRecord], Mapping[str, Any] | None] = _no_fault
    transform: Callable[[CellRecord], str | None] = _no_transform
    """The transform that made the cell's file (a table of transformed files: ``int8-qdq-u8``), or None."""
    drift: Callable[[CellRecord], Mapping[str, Any] | None] = _no_fault
    """How far the cell's outputs on a transformed file are from torch's fp32 outputs
    (:mod:`harness.numeric.drift`), or None."""


Getter = Callable[[CellRecord, Context], Any]

OMIT: Any = object()
"""A :attr:`Field.jsonl` getter's answer for "this cell publishes no such key" (not even null)."""

EMPTY: tuple[Any, ...] = (None, [], {})
"""Values an optional key is left out for (an empty string is published: it says something)."""


@dataclasses.dataclass(frozen=True)
class Column:
    """How a field shows in a case page's failing-cells table (cells grouped by it, one column)."""

    header: str
    cut: int | None = None
    """Characters kept of a long value (an error line, a localization)."""
    link: str | None = None
    """The value is a folder under ``results/``; the column links to this file in it (the reproducer)."""


@dataclasses.dataclass(frozen=True)
class Field:
    """One published field: its name, its JSON type, how it is named to a reader, and where it goes."""

    name: str
    type: str
    """As published (JSON): ``str``, ``int``, ``bool``, ``list[str]``, ``object``; ``| null`` where it may be."""
    label: str
    """How a reader sees it named: a column header, the page's row label."""
    jsonl: Getter | None = None
    """Its value in ``matrix.jsonl`` (:data:`OMIT`: no key for this cell); None: not published there."""
    optional: bool = True
    """In ``matrix.jsonl`` only when its value is not in :data:`EMPTY` (the key fields and the status always are)."""
    row: Getter | None = None
    """Its value in the report's DataFrame (Markdown reads the DataFrame); None: not a column there."""
    detail: str | None = None
    """Its key in the page's detail of a cell (the cell's panel); None: not there."""
    detail_value: Getter | None = None
    """Its value there (left out when empty); None: the :attr:`row` value."""
    column: Column | None = None
    """Its column in a case page's failing-cells table; None: not there."""


def _attr(name: str) -> Getter:
    return lambda c, _: getattr(c, name)


def _text(name: str) -> Getter:
    """The attribute, or "" when it is None (a DataFrame column of strings)."""
    return lambda c, _: getattr(c, name) or ""


def _sig(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.4g}")


def _diff_data(d: DiffStats) -> dict[str, Any]:
    """A diff's published values, unrounded: the errors, the counts, the NaN/inf counts only where non-zero, the
    shape mismatch and the error in units of the output's own scale where there is one."""
    data: dict[str, Any] = {"max_abs": d.max_abs, "max_rel": d.max_rel, "mismatched": d.mismatched, "total": d.total}
    data.update({k: v for k, v in _nonfinite(d) if v})
    if d.shape_mismatch:
        data["shape_mismatch"] = d.shape_mismatch
    for key in ("scaled_error", "scaled_output", "scaled_limit"):
        if getattr(d, key) is not None:
            data[key] = getattr(d, key)
    return data


def _nonfinite(d: DiffStats) -> tuple[tuple[str, int], ...]:
    return (("nan_ref", d.nan_ref), ("nan_out", d.nan_out), ("inf_ref", d.inf_ref), ("inf_out", d.inf_out))


_JSONL_ROUNDED = ("max_abs", "max_rel", "scaled_error")
"""The errors ``matrix.jsonl`` gives to four significant digits (the bound and the output index stay as they are)."""


def _diff(c: CellRecord, _: Context) -> dict[str, Any] | None:
    """The diff as published: four significant digits for the errors; the scale's output and bound only with its
    error."""
    if c.diff is None:
        return None
    data = _diff_data(c.diff)
    if c.diff.scaled_error is None:
        data = {k: v for k, v in data.items() if k not in ("scaled_output", "scaled_limit")}
    return {k: (_sig(v) if k in _JSONL_ROUNDED else v) for k, v in data.items()}


def _page_diff(c: CellRecord, _: Context) -> dict[str, Any] | None:
    """The diff on the page: every float to four significant digits (the page shows numbers, not records)."""
    if c.diff is None:
        return None
    return {k: (float(f"{v:.4g}") if isinstance(v, float) else v) for k, v in _diff_data(c.diff).items()}


def _latency(c: CellRecord, _: Context) -> dict[str, Any] | None:
    if c.latency is None:
        return None
    data = c.latency.to_dict()
    for k in ("median_ms", "p90_ms", "session_ms"):
        data[k] = _sig(data[k])
    return data


def _optimizer_text(c: CellRecord, _: Context) -> str | None:
    if c.optimizer is None:
        return None
    return "yes: passes with graph optimizations disabled" if c.optimizer else "no: fails with them disabled too"


def _fault_of(key: str) -> Getter:
    """One key of the cell's fault (None for a cell that carries none)."""
    return lambda c, ctx: (ctx.fault(c) or {}).get(key)


def _gpu(c: CellRecord, ctx: Context) -> Any:
    """Every GPU cell names the GPU it ran on."""
    return (c.env.get("gpu") or "?") if ctx.nvidia(c.provider) else OMIT


def _platform(c: CellRecord, _: Context) -> Any:
    """Every cell of a platform column (``cpu@aarch64``) says how it ran and the level its process saw."""
    named = c.provider.partition("@")[2]
    if not named or c.runtime_wide:
        return OMIT
    return {"name": named, "how": c.env.get("how") or "?", "isa": c.env.get("isa") or "?"}


def _drift_text(c: CellRecord, ctx: Context) -> str:
    d = ctx.drift(c)
    if not d:
        return ""
    top1 = f", top-1 agreement {d['top1']:.0%}" if d.get("top1") is not None else ""
    flag = f" — over the {d['limit']:g} this transform should cost" if d.get("flagged") else ""
    return f"max |out − torch fp32| {d['max_abs']:.3g} ({d['max_rel']:.3g} of its scale){top1}{flag}"


def _error(c: CellRecord, _: Context) -> Any:
    """A broken environment is one record: it keeps its whole diagnosis (other cells' full errors stay in the shard)."""
    return c.error if c.error_class == Outcome.NO_ENVIRONMENT.error_class else OMIT


def _key(name: str, type_: str) -> Field:
    """A field of the cell's key: always published, a column everywhere."""
    return Field(name, type_, name, jsonl=_attr(name), optional=False, row=_attr(name))


# fmt: off
FIELDS: tuple[Field, ...] = (
    _key("case", "str"),
    _key("exporter", "str"),
    _key("opset", "int"),
    _key("runtime", "str"),
    _key("provider", "str"),
    _key("probe", "str"),
    Field("status", "str", "status", jsonl=lambda c, _: c.status.value, optional=False, row=lambda c, _: c.status.value),
    Field("error_class", "str | null", "error class", jsonl=_attr("error_class"), row=_text("error_class"), detail="class"),
    Field(
        "error_line", "str | null", "error", jsonl=_attr("error_line"), row=_text("error_line"), detail="error",
        column=Column("first error line", cut=240),
    ),
    Field(
        "localization", "str | null", "starts at", jsonl=_attr("localization"), row=_text("localization"), detail="starts_at",
        column=Column("starts at", cut=300),
    ),
    Field(
        "optimizer", "bool | null", "optimizer", jsonl=_attr("optimizer"),
        row=lambda c, _: {True: "yes", False: "no", None: ""}[c.optimizer], detail="optimizer", detail_value=_optimizer_text,
        column=Column("optimizer"),
    ),
    Field(
        "fault", "str | null", "fault", jsonl=_fault_of("kind"), row=lambda c, ctx: (ctx.fault(c) or {}).get("said") or "",
        detail="fault", column=Column("fault", cut=300),
    ),
    Field("fault_why", "str | null", "fault's evidence", jsonl=_fault_of("why")),
    Field("fixed_in", "str | null", "passes from", jsonl=_fault_of("fixed_in")),
    Field("last_failing", "str | null", "fails up to", jsonl=_fault_of("last_failing")),
    Field(
        "repro", "str | null", "repro", jsonl=lambda c, ctx: ctx.repro(c), row=lambda c, ctx: ctx.repro(c) or "",
        column=Column("repro", link="repro.py"),
    ),
    Field("note", "str | null", "note", jsonl=_attr("note"), row=_text("note"), detail="note"),
    Field("median_ms", "float | null", "median ms", row=lambda c, _: c.latency.median_ms if c.latency else None),
    Field("copies", "str", "copies", row=lambda c, _: c.latency.copies if c.latency else ""),
    Field("stage", "str", "stage", jsonl=lambda c, _: c.stage.value, optional=False),
    Field("opset_actual", "int | null", "opset in the file", jsonl=_attr("opset_actual")),
    Field("opset_asked", "int | null", "opset asked", jsonl=_attr("opset_asked")),
    Field("ir_version", "int | null", "IR", jsonl=_attr("ir_version")),
    Field(
        "providers_used", "list[str]", "providers", jsonl=lambda c, _: list(c.providers_used), detail="providers",
        detail_value=lambda c, _: ", ".join(c.providers_used),
    ),
    Field("placement", "object", "nodes per provider", jsonl=_attr("placement")),
    Field("engine", "object", "engine", jsonl=_attr("engine")),
    Field("diff", "object | null", "diff", jsonl=_diff, detail="diff", detail_value=_page_diff),
    Field("latency", "object | null", "latency", jsonl=_latency),
    Field("gpu", "str", "GPU", jsonl=_gpu),
    Field("platform", "object", "platform", jsonl=_platform),
    Field("transform", "str", "transform", jsonl=lambda c, ctx: ctx.transform(c)),
    Field(
        "drift", "object", "drift from torch fp32", jsonl=lambda c, ctx: ctx.drift(c), detail="drift",
        detail_value=_drift_text,
    ),
    Field("error", "str | null", "error", jsonl=_error, optional=False),
)
# fmt: on
"""Every published field once. The DataFrame's columns keep this order; the jsonl's keys are written sorted."""

UNPUBLISHED = frozenset({"sha256", "inputs", "cache_key", "seconds", "env"})
"""The cell's fields that stay in the shard (``build/shards``): what changes on every run or lives elsewhere (the
environment is published once per runtime in ``environment.json``)."""


def failing_columns() -> tuple[Field, ...]:
    """The failing-cells table's grouped columns, in order (after exporter, opset, status, probes and runtimes)."""
    return tuple(f for f in FIELDS if f.column is not None)


def published(c: CellRecord, ctx: Context) -> dict[str, Any]:
    """A cell as ``matrix.jsonl`` publishes it: one line of what a reader needs (the fields with a :attr:`Field.jsonl`)."""
    data: dict[str, Any] = {}
    for f in FIELDS:
        value = OMIT if f.jsonl is None else f.jsonl(c, ctx)
        if value is not OMIT and not (f.optional and value in EMPTY):
            data[f.name] = value
    return data


def row(c: CellRecord, ctx: Context) -> dict[str, Any]:
    """A cell as a row of the report's DataFrame (the fields with a :attr:`Field.row`, in order)."""
    return {f.name: f.row(c, ctx) for f in FIELDS if f.row is not None}


def detail(c: CellRecord, ctx: Context | None = None) -> dict[str, Any]:
    """What the page says of a cell beyond its status (the fields with a :attr:`Field.detail`; an empty value is
    left out)."""
    ctx = ctx or Context()
    data: dict[str, Any] = {}
    for f in FIELDS:
        get = f.detail_value or f.row or f.jsonl
        if f.detail is None or get is None:
            continue
        value = get(c, ctx)
        if value not in (None, "", [], {}):
            data[f.detail] = value
    return data


def page_rows(shown: str) -> list[tuple[str, str]]:
    """(detail key, label) of every detail the page's script ``shown`` does not lay out itself (it names each one
    it does as ``d.<key>``): the page lists these generically, so a new field needs no edit to the page."""
    return [(f.detail, f.label) for f in FIELDS if f.detail is not None and f"d.{f.detail}" not in shown]


def record(data: Mapping[str, Any]) -> CellRecord:
    """A published line (or a shard's) back as a cell: the keys the report derived (:func:`derived`) are dropped."""
    dropped = derived()
    return CellRecord.from_dict({k: v for k, v in data.items() if k not in dropped})


def derived() -> frozenset[str]:
    """The published keys that are no field of the cell: the report works them out (the reproducer's folder, the GPU)."""
    return frozenset(f.name for f in FIELDS if f.jsonl is not None) - _CELL


_CELL = frozenset(f.name for f in dataclasses.fields(CellRecord))
