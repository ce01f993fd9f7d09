"""harness diff: cells matched on their key (across a changed pin), regressions first, exit 1 on one."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

from harness.answer import diff
from harness.answer.published import read_cells
from harness.core.records import CellRecord, Stage, Status, runtime_wide

ROOT = Path(__file__).resolve().parent.parent


def cell(case: str, status: Status, runtime: str = "onnxruntime==1.31.1", probe: str = "example", **kw: object) -> CellRecord:
    return CellRecord(case, "dynamo", 18, runtime, "cpu", probe, status, Stage.COMPARE, **kw)  # type: ignore[arg-type]


def write(path: Path, cells: list[CellRecord], *, shuffle: bool = False) -> Path:
    rows = [c.to_dict() for c in cells]
    if shuffle:
        random.Random(0).shuffle(rows)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def harness(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


OLD = [
    cell("a", Status.PASS),
    cell("a", Status.PASS, probe="batch3"),
    cell("b", Status.MISMATCH, error_line="3/4 elements differ"),
    cell("c", Status.LOAD_FAIL, error_line="Unsupported model IR version: 10"),
    cell("d", Status.PASS),
    cell("gone", Status.PASS),
]
NEW = [
    cell("a", Status.PASS),
    cell("a", Status.RUN_FAIL, probe="batch3", error_line="Got invalid dimensions"),
    cell("b", Status.PASS),
    cell("c", Status.MISMATCH, error_line="1/4 elements differ"),
    cell("d", Status.PASS),
    cell("new", Status.PASS),
]


def test_kinds_and_their_order() -> None:
    result = diff.diff(OLD, NEW)
    assert [(ch.kind, ch.cell.case, ch.cell.probe) for ch in result.changes] == [
        ("regression", "a", "batch3"),
        ("fix", "b", "example"),
        ("changed", "c", "example"),
        ("new", "new", "example"),
        ("gone", "gone", "example"),
    ]
    assert result.unchanged == 2 and result.regressions == 1
    text = diff.render(result, "old", "new")
    assert text.index("Regressions") < text.index("Fixes") < text.index("Changed") < text.index("New cells") < text.index("Gone")
    assert "a dynamo op18 onnxruntime==1.31.1 cpu [batch3]: pass → run-fail: Got invalid dimensions" in text


def test_cells_are_matched_on_their_key_not_their_position(tmp_path: Path) -> None:
    old = write(tmp_path / "old.jsonl", OLD)
    shuffled = write(tmp_path / "shuffled.jsonl", OLD, shuffle=True)
    assert shuffled.read_text() != old.read_text()
    same = harness("diff", str(old), str(shuffled))
    assert same.returncode == 0, same.stderr
    assert "no cell changed status" in same.stdout and "regressions 0" in same.stdout
    new = write(tmp_path / "new.jsonl", NEW, shuffle=True)
    changed = harness("diff", str(old), str(new))
    assert changed.returncode == 1, "a regression must fail the command (a nightly gates on it)"
    assert "regressions 1, fixes 1, changed 1, new 1, gone 1, unchanged 2" in changed.stdout
    fixed_only = harness(
        "diff", str(new), str(write(tmp_path / "fixed.jsonl", [*NEW[:1], cell("a", Status.PASS, probe="batch3"), *NEW[2:]]))
    )
    assert fixed_only.returncode == 0 and "fixes 1" in fixed_only.stdout


def test_a_changed_pin_is_paired_unless_strict(tmp_path: Path) -> None:
    old = [cell("a", Status.PASS, runtime="onnxruntime==1.31.1"), cell("a", Status.PASS, runtime="onnxruntime==1.17.3")]
    new = [cell("a", Status.MISMATCH, runtime="onnxruntime==1.32.0"), cell("a", Status.PASS, runtime="onnxruntime==1.17.3")]
    result = diff.diff(old, new)
    assert result.pairs == (("onnxruntime==1.31.1", "onnxruntime==1.32.0"),)
    assert [(ch.kind, ch.old.runtime if ch.old else None) for ch in result.changes] == [("regression", "onnxruntime==1.31.1")]
    text = diff.render(result, "old", "new")
    assert "runtime pin changed: onnxruntime==1.31.1 → onnxruntime==1.32.0" in text
    assert "onnxruntime==1.31.1 → 1.32.0 cpu [example]: pass → mismatch" in text
    strict = diff.diff(old, new, pair=False)
    assert strict.pairs == () and [ch.kind for ch in strict.changes] == ["new", "gone"] and strict.regressions == 0


def test_pairing_prefers_the_same_minor_and_refuses_ambiguity() -> None:
    assert diff.pair_runtimes(["onnxruntime==1.20.0", "onnxruntime==1.31.1"], ["onnxruntime==1.20.1", "onnxruntime==1.32.0"]) == [
        ("onnxruntime==1.20.0", "onnxruntime==1.20.1"),
        ("onnxruntime==1.31.1", "onnxruntime==1.32.0"),
    ]
    # two unpaired runtimes of a package on each side, no shared minor: which goes with which is a guess
    assert (
        diff.pair_runtimes(["onnxruntime==1.18.1", "onnxruntime==1.19.2"], ["onnxruntime==1.21.1", "onnxruntime==1.22.1"]) == []
    )
    assert diff.pair_runtimes(["onnxruntime==1.20.1"], ["onnxruntime-gpu==1.20.1"]) == []


def test_a_broken_column_is_spread_over_the_cells_it_stands_for(tmp_path: Path) -> None:
    """A runtime-wide env-error record in NEW is a regression of every cell of that column."""
    old = write(tmp_path / "old.jsonl", [cell("a", Status.PASS), cell("b", Status.PASS), cell("b", Status.PASS, probe="neg")])
    broken = runtime_wide("onnxruntime==1.31.1", "cpu", {}, status=Status.ENV_ERROR, error_line="onnxruntime fails to import")
    new = write(tmp_path / "new.jsonl", [broken])  # the shard of a broken runtime: that one record
    assert [c.runtime_wide for c in read_cells(new)] == [True], "nothing in the file to spread it over: it stays"
    result = diff.diff(read_cells(old, spread=False), read_cells(new, spread=False))
    assert sorted((ch.kind, ch.cell.case, ch.cell.probe, ch.cell.status) for ch in result.changes) == [
        ("regression", "a", "example", Status.ENV_ERROR),
        ("regression", "b", "example", Status.ENV_ERROR),
        ("regression", "b", "neg", Status.ENV_ERROR),
    ]
    proc = harness("diff", str(old), str(new))
    assert proc.returncode == 1 and "regressions 3," in proc.stdout and "onnxruntime fails to import" in proc.stdout


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    good = write(tmp_path / "good.jsonl", OLD)
    missing = harness("diff", str(tmp_path / "nope.jsonl"), str(good))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no such file" in missing.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text() + '{"case": "x"}\n')
    garbled = harness("diff", str(good), str(bad))
    assert garbled.returncode == 2 and garbled.stderr.count("\n") == 1
    assert f"{bad}:7: not a cell record" in garbled.stderr and "Traceback" not in garbled.stderr


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path: Path) -> None:
    """`harness diff a b | head -1`: the pipe closes under the command, which stops quietly."""
    old = write(tmp_path / "old.jsonl", OLD)
    new = write(tmp_path / "new.jsonl", [cell(f"case{i}", Status.PASS) for i in range(5000)])
    proc = subprocess.Popen(
        [sys.executable, "-m", "harness", "diff", str(old), str(new), "--limit", "0"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline().startswith(b"harness diff:")
    proc.stdout.close()
    assert proc.wait(timeout=60) == 141
    with proc.stderr:
        assert b"Traceback" not in proc.stderr.read()


def test_json_for_scripts_says_what_the_text_says_and_follows_its_schema(tmp_path: Path) -> None:
    import jsonschema

    schema = json.loads((ROOT / "docs" / "schemas" / "harness.diff-1.schema.json").read_text())
    old = write(tmp_path / "old.jsonl", [*OLD, cell("p", Status.PASS, runtime="onnxruntime==1.30.0")])
    moved = cell("p", Status.MISMATCH, runtime="onnxruntime==1.30.1", error_line="2/4 differ")
    new = write(tmp_path / "new.jsonl", [*NEW, moved])
    proc = harness("diff", str(old), str(new), "--json", "--limit", "1")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    jsonschema.validate(data, schema)
    assert data["counts"] == {"regression": 2, "fix": 1, "changed": 1, "new": 1, "gone": 1} and data["exit"] == 1
    assert data["pairs"] == [["onnxruntime==1.30.0", "onnxruntime==1.30.1"]]
    regression = {g["case"]: g for g in data["changes"]["regression"]}  # every group, whatever --limit says
    assert set(regression) == {"a", "p"} and regression["a"]["probes"] == ["batch3"]
    a = regression["a"]
    assert (a["old"], a["new"], a["detail"]) == ("pass", "run-fail", "Got invalid dimensions")
    assert regression["p"]["old_runtime"] == "onnxruntime==1.30.0" and regression["p"]["runtime"] == "onnxruntime==1.30.1"
    assert data["changes"]["gone"][0]["new"] is None and data["changes"]["new"][0]["old"] is None
    bad = harness("diff", str(old), str(tmp_path / "missing.jsonl"), "--json")
    assert bad.returncode == 2 and json.loads(bad.stdout)["exit"] == 2
    jsonschema.validate(json.loads(bad.stdout), schema)
    doc = (ROOT / "docs" / "reading-the-table.md").read_text(encoding="utf-8")
    doc = doc.split("#### `diff --json`", 1)[1].split("###", 1)[0]
    for field in schema["properties"]:
        if field != "error":
            assert f"`{field}`" in doc, field
