"""The one cell schema (harness.core.schema): every published field once, and every renderer reads it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.core import schema
from harness.core.records import CellRecord, DiffStats, Stage, Status
from harness.publish import page

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "results" / "matrix.jsonl"


def _cell(**changes: object) -> CellRecord:
    base = CellRecord(
        case="nan_chain", exporter="dynamo", opset=18, runtime="onnxruntime==1.32.0", provider="cpu", probe="example",
        status=Status.MISMATCH, stage=Stage.RUN, error_line="outputs differ", localization="node Max_3",
        optimizer=False, providers_used=("CPUExecutionProvider",),
        diff=DiffStats(max_abs=1.234567, max_rel=0.5, mismatched=2, total=8),
    )  # fmt: skip
    return base.replace(**changes)


def test_every_field_of_a_cell_is_published_once_or_said_unpublished() -> None:
    names = [f.name for f in schema.FIELDS]
    assert len(names) == len(set(names)), "a field defined twice"
    cell_fields = {f.name for f in dataclasses.fields(CellRecord)}
    published = {f.name for f in schema.FIELDS if f.jsonl is not None} & cell_fields
    assert published.isdisjoint(schema.UNPUBLISHED)
    assert published | schema.UNPUBLISHED == cell_fields, "a CellRecord field neither in the schema nor said unpublished"
    derived = {"repro", "gpu", "platform", "fault", "fault_why", "fixed_in", "last_failing", "transform", "drift"}
    assert schema.derived() == derived, "published keys that are no field of the cell"
    details = [f.detail for f in schema.FIELDS if f.detail is not None]
    assert len(details) == len(set(details))


def test_the_keys_of_every_published_line_are_the_schemas_jsonl_fields_in_order() -> None:
    """Each line of the committed table (sorted keys) holds only schema keys, the key fields and status always."""
    order = sorted(f.name for f in schema.FIELDS if f.jsonl is not None)
    always = {f.name for f in schema.FIELDS if f.jsonl is not None and not f.optional and f.name != "error"}
    seen: set[str] = set()
    with open(PUBLISHED, encoding="utf-8") as f:
        for n, line in enumerate(f):
            keys = list(json.loads(line))
            assert keys == [k for k in order if k in keys], f"line {n + 1}: keys not the schema's, in order: {keys}"
            assert always <= set(keys)
            seen.update(keys)
    assert {"diff", "latency", "repro", "localization"} <= seen


def test_a_published_line_reads_back_as_the_cell_it_was() -> None:
    cell = _cell(note="a note", opset_asked=17)
    line = json.loads(json.dumps(schema.published(cell, schema.Context(repro=lambda c: "repro/x"))))
    assert line["repro"] == "repro/x" and line["diff"]["max_abs"] == 1.235
    back = schema.record(line)
    assert (back.key, back.status, back.note, back.opset_asked, back.localization) == (
        cell.key, cell.status, cell.note, 17, cell.localization,
    )  # fmt: skip


def test_the_renderers_say_the_same_as_before() -> None:
    """The shapes the report published before the schema, for one cell."""
    cell = _cell()
    ctx = schema.Context(nvidia=lambda p: p == "cuda")
    assert schema.row(cell, ctx) == {
        "case": "nan_chain", "exporter": "dynamo", "opset": 18, "runtime": "onnxruntime==1.32.0", "provider": "cpu",
        "probe": "example", "status": "mismatch", "error_class": "", "error_line": "outputs differ",
        "localization": "node Max_3", "optimizer": "no", "fault": "", "repro": "", "note": "", "median_ms": None,
        "copies": "",
    }  # fmt: skip
    said = {"kind": "runtime", "why": "spec agrees", "fixed_in": "1.24.4", "said": "runtime: spec agrees; passes from 1.24.4"}
    faulted = schema.Context(fault=lambda c: said)
    assert schema.row(cell, faulted)["fault"] == said["said"] and schema.detail(cell, faulted)["fault"] == said["said"]
    line = schema.published(cell, faulted)
    published = (line["fault"], line["fault_why"], line["fixed_in"], "last_failing" in line)
    assert published == ("runtime", "spec agrees", "1.24.4", False)
    assert schema.detail(cell) == {
        "error": "outputs differ", "starts_at": "node Max_3", "optimizer": "no: fails with them disabled too",
        "diff": {"max_abs": 1.235, "max_rel": 0.5, "mismatched": 2, "total": 8}, "providers": "CPUExecutionProvider",
    }  # fmt: skip
    assert "gpu" not in schema.published(cell, ctx)
    assert "platform" not in schema.published(cell, ctx)  # this machine's plain column: environment.json says it
    on_arm = cell.replace(provider="cpu@aarch64", env={"how": "emulated: qemu-user 10.0.2 -cpu neoverse-n1", "isa": "aarch64"})
    assert schema.published(on_arm, ctx)["platform"] == {
        "name": "aarch64", "how": "emulated: qemu-user 10.0.2 -cpu neoverse-n1", "isa": "aarch64"
    }
    assert schema.published(cell.replace(provider="cuda"), ctx)["gpu"] == "?"
    wide = schema.published(cell.replace(error_class="EnvironmentError", error=None), ctx)
    assert "error" in wide and wide["error"] is None, "a broken environment keeps its (empty) diagnosis key"


def test_a_field_added_to_the_schema_alone_reaches_the_jsonl_the_dataframe_and_the_page(monkeypatch: pytest.MonkeyPatch) -> None:
    new = schema.Field(
        "threads", "int", "threads used", jsonl=lambda c, _: 4, row=lambda c, _: 4, detail="threads",
        detail_value=lambda c, _: "4 threads",
    )  # fmt: skip
    monkeypatch.setattr(schema, "FIELDS", (*schema.FIELDS, new))
    cell = _cell()
    assert schema.published(cell, schema.Context())["threads"] == 4
    assert list(schema.row(cell, schema.Context()))[-1] == "threads"
    assert schema.detail(cell)["threads"] == "4 threads"
    html = page.render({"cells": []})
    assert '["threads used", d["threads"]]' in html, "the page lists a detail its script does not lay out itself"


def test_the_page_lays_out_every_detail_of_today_itself() -> None:
    """No generic row today: the page's bytes are the ones its template had before the schema."""
    template = page.TEMPLATE.read_text(encoding="utf-8")
    assert schema.page_rows(template) == []
    assert "__HARNESS_MORE_DETAILS__" not in page.render({"cells": []})


def test_a_field_with_a_failing_cells_column_reaches_the_reproducers_readme(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failing-cells column declared in the schema alone shows in a reproducer's README.txt as ``label: value``,
    beside the columns the README lays out itself (today's README is unchanged: no such column exists)."""
    from harness.publish.repro import _readme

    cell = _cell()
    assert not any(line.startswith("    threads used:") for line in _readme._cell_lines([cell], [cell.probe]))
    new = schema.Field(
        "threads", "int", "threads used", jsonl=lambda c, _: 4, row=lambda c, _: 4, column=schema.Column("threads")
    )
    monkeypatch.setattr(schema, "FIELDS", (*schema.FIELDS, new))
    assert new in schema.failing_columns()
    assert "    threads used: 4" in _readme._cell_lines([cell], [cell.probe])
