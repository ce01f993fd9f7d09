"""Records survive the trip through JSON unchanged (shards and reports depend on it)."""

from __future__ import annotations

import dataclasses
import json

from harness.core.records import CellRecord, DiffStats, ExportRecord, Latency, Outcome, Stage, Status, first_line


def test_cell_record_round_trip() -> None:
    cell = CellRecord(
        case="frozen_batch",
        exporter="dynamo",
        opset=18,
        runtime="onnxruntime==1.17.3",
        provider="cpu",
        probe="batch8",
        status=Status.MISMATCH,
        stage=Stage.COMPARE,
        error_class="Mismatch",
        error_line="x",
        diff=DiffStats(0.5, None, 3, 10, nan_ref=1, shape_mismatch=None),
        providers_used=("CPUExecutionProvider",),
        opset_actual=18,
        ir_version=10,
        latency=Latency(0.1, 0.2, 50, 5, 1, 3.0),
        sha256="ab",
        note="n",
        seconds=0.25,
        env={"onnxruntime": "1.17.3"},
    )
    back = CellRecord.from_dict(json.loads(json.dumps(cell.to_dict())))
    assert back == cell
    assert back.key == "frozen_batch|dynamo|op18|onnxruntime==1.17.3|cpu|batch8"


def test_cell_record_ignores_unknown_fields_from_newer_writers() -> None:
    data = CellRecord("a", "dynamo", 18, "onnxruntime==1.32.0", "cpu", "example", Status.PASS, Stage.RUN).to_dict()
    data["added_later"] = 1
    assert CellRecord.from_dict(data).status is Status.PASS


def test_export_record_round_trip() -> None:
    rec = ExportRecord(
        case="c",
        exporter="torchscript",
        opset=13,
        ok=True,
        seconds=0.1,
        opset_actual=13,
        ir_version=7,
        checker="ok",
        warnings=({"category": "TracerWarning", "message": "m"},),
        graph={"nodes": 3},
        probes=("example", "negative"),
        sha256="ff",
        versions={"torch": "2.13.0"},
        card={"symptom": "s"},
    )
    assert ExportRecord.from_dict(json.loads(json.dumps(rec.to_dict()))) == rec


def test_status_fold_order_puts_failures_before_probes_above_passes() -> None:
    assert Status.EXPORT_FAIL.severity > Status.LOAD_FAIL.severity > Status.RUN_FAIL.severity
    assert Status.MISMATCH.severity > Status.PASS.severity
    assert len({s.symbol for s in Status}) == len(Status)


def test_first_line_strips_ansi_and_blank_lines() -> None:
    assert first_line("\n\n  \x1b[96mstep 1/3\x1b[0m of x\nmore") == "step 1/3 of x"
    assert first_line("a" * 500).endswith("…") and len(first_line("a" * 500)) == 300
    assert first_line("<PassManager object at 0x7f3a2b1c>: failed") == "<PassManager object at 0x…>: failed"


def test_rows_are_labelled_by_the_opset_written_and_a_repeated_export_is_recorded_once() -> None:
    """dynamo asked for 13 writes 18 for one case (the same export as asked 18: left out, said as a rewrite)
    and 13 for another (its own row); asked 13 writing 18 where 18 was never asked becomes the opset-18 row,
    keeping the request; a failed export wrote nothing and stays under its request."""
    from harness.core.records import ArtifactKey, by_written_opset

    def export(case: str, asked: int, wrote: int | None) -> ExportRecord:
        return ExportRecord(case, "dynamo", asked, wrote is not None, 1.0, opset_actual=wrote)

    exports = [
        export("a", 13, 18),
        export("a", 18, 18),  # a duplicate
        export("b", 13, 13),
        export("b", 18, 18),  # converted down: two rows
        export("c", 13, 18),  # the only request: relabelled
        export("d", 13, None),  # failed
    ]
    cells = [rec.cell("onnxruntime==1.32.0", "cpu", {}, probe="example") for rec in exports]
    out_cells, out_exports, rewrites = by_written_opset(cells, exports)
    assert sorted((c.case, c.opset, c.opset_asked) for c in out_cells) == [
        ("a", 18, None),
        ("b", 13, None),
        ("b", 18, None),
        ("c", 18, 13),
        ("d", 13, None),
    ]
    assert [(r.case, r.opset, r.opset_asked) for r in out_exports] == [
        ("a", 18, None),
        ("b", 13, None),
        ("b", 18, None),
        ("c", 18, 13),
        ("d", 13, None),
    ]
    assert [(w.case, w.asked, w.wrote, w.kept) for w in rewrites] == [("a", 13, 18, False), ("c", 13, 18, True)]
    relabelled = next(c for c in out_cells if c.case == "c")
    assert relabelled.artifact == ArtifactKey("c", "dynamo", 13)  # its files stay under the request
    assert relabelled.key == "c|dynamo|op18|onnxruntime==1.32.0|cpu|example"
    assert CellRecord.from_dict(json.loads(json.dumps(relabelled.to_dict()))) == relabelled


def test_every_outcome_has_one_status_and_an_exports_outcome_survives_its_record() -> None:
    """The one mapping covers every outcome; an export's outcome is read back from the ``error_class`` it travels in."""
    assert all(isinstance(o.status, Status) for o in Outcome)
    base = ExportRecord(case="c", exporter="dynamo", opset=18, ok=False, seconds=0.0)
    for ended in (Outcome.SKIPPED, Outcome.EXPORT_TIMEOUT, Outcome.EXPORT_CRASH, Outcome.EXPORT_HARNESS_BUG):
        rec = ExportRecord.from_dict({**base.to_dict(), "error_class": ended.error_class})
        assert rec.outcome is ended
    assert dataclasses.replace(base, error_class="TorchExportError").outcome is Outcome.EXPORT_ERROR
    assert dataclasses.replace(base, ok=True).outcome is Outcome.PASSED
    assert Outcome.LOAD_ERROR.fields(ValueError("x")) == {"status": Status.LOAD_FAIL, "error_class": "ValueError"}
