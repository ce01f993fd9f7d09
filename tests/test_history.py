"""results/history.jsonl: a new run adds a line, the same run reported again replaces its own."""

from __future__ import annotations

import json
import os
from pathlib import Path

from harness.publish import history


def _entry(run: str, passed: int) -> dict[str, object]:
    env = {"generated": "2026-12-01 00:00 UTC", "profile": "default", "export": {"torch": "2.13.0+cpu", "onnx": "1.23.2"}}
    counts = {"pass": passed, "mismatch": 2}
    return history.summary(
        run=run, date="2026-12-01 00:00 UTC", environment=env, counts=counts, cases=3, runtimes=["onnxruntime==1.32.0"]
    )


def test_a_new_run_appends_and_the_same_run_replaces(tmp_path: Path) -> None:
    path = tmp_path / history.HISTORY
    history.record(path, _entry("r1", 10))
    history.record(path, _entry("r2", 11))
    entries = history.record(path, _entry("r2", 12))  # the report of run r2, regenerated
    assert [(e["run"], e["counts"]["pass"]) for e in entries] == [("r1", 10), ("r2", 12)]
    assert history.read(path) == entries
    assert entries[0]["cells"] == 12 and entries[0]["torch"] == "2.13.0+cpu" and entries[0]["runtimes"] == ["onnxruntime==1.32.0"]


def test_a_torn_line_is_skipped_not_fatal(tmp_path: Path) -> None:
    path = tmp_path / history.HISTORY
    history.record(path, _entry("r1", 10))
    path.write_text(path.read_text() + '{"run": "r2", "da')
    assert [e["run"] for e in history.read(path)] == ["r1"]
    assert [e["run"] for e in history.record(path, _entry("r3", 1))] == ["r1", "r3"]


def test_the_run_id_is_the_files_a_run_wrote(tmp_path: Path) -> None:
    manifest, shard = tmp_path / "manifest.json", tmp_path / "ort-1.32.0-cpu.jsonl"
    manifest.write_text("{}")
    shard.write_text('{"case": "a", "seconds": 0.0123}\n')
    first = history.run_id([shard, manifest])
    assert history.run_id([manifest, shard]) == first
    shard.write_text('{"case": "a", "seconds": 0.0124}\n')  # a rerun: same cells, other timings
    assert history.run_id([manifest, shard]) != first
    os.utime(shard, (1_764_547_200, 1_764_547_200))  # 2025-12-01 00:00 UTC
    os.utime(manifest, (1_764_547_100, 1_764_547_100))
    assert history.finished([manifest, shard]) == "2025-12-01 00:00 UTC"


def test_a_run_reported_again_keeps_its_place_in_time(tmp_path: Path) -> None:
    path = tmp_path / history.HISTORY
    old, new = _entry("r1", 10) | {"date": "2026-11-30 03:00 UTC"}, _entry("r2", 11) | {"date": "2026-12-01 03:00 UTC"}
    history.record(path, old)
    history.record(path, new)
    assert [e["run"] for e in history.record(path, old | {"cases": 4})] == ["r1", "r2"]


def test_a_new_run_that_changed_no_verdict_adds_no_line(tmp_path: Path) -> None:
    path = tmp_path / history.HISTORY
    history.record(path, _entry("r1", 10))
    before = path.read_bytes()
    again = _entry("r2", 10) | {"date": "2026-12-02 00:00 UTC", "wall_seconds": 99.0}
    assert [e["run"] for e in history.record(path, again, verdicts_changed=False)] == ["r1"]
    assert path.read_bytes() == before, "a republish that changed nothing leaves the trend's bytes"
    assert [e["run"] for e in history.record(path, again, verdicts_changed=True)] == ["r1", "r2"], "a verdict changed"
    other = _entry("r3", 10) | {"date": "2026-12-03 00:00 UTC", "torch": "2.14.0+cpu"}
    assert [e["run"] for e in history.record(path, other, verdicts_changed=False)][-1] == "r3", "a new torch is news"


def test_a_republish_keeps_the_case_pages_that_say_the_same_date_aside(tmp_path: Path) -> None:
    from harness.publish import report
    from harness.publish.staged import Publication

    results = tmp_path / "results"
    (results / "cases").mkdir(parents=True)
    (results / "matrix.jsonl").write_text("")
    page = "# a\n\nsome table\nProfile **default**, generated {} by `nox -s matrix` from the committed code.\n"
    (results / "cases" / "a.md").write_text(page.format("2026-12-01 00:00 UTC"))
    (results / "cases" / "b.md").write_text(page.format("2026-12-01 00:00 UTC"))
    stage = Publication(results, [])
    stage.folder(results)
    stage.write_text(results / "matrix.jsonl", "")
    new = {"a": page.format("2026-12-03 10:00 UTC"), "b": page.replace("some", "another").format("2026-12-03 10:00 UTC")}
    report._write_case_pages(stage, results, new)
    stage.commit()
    assert (results / "cases" / "a.md").read_text() == page.format("2026-12-01 00:00 UTC"), "unchanged: kept, old date"
    assert (results / "cases" / "b.md").read_text() == new["b"], "changed: written, new date"


def test_a_run_that_added_no_trend_row_keeps_its_wall_time_when_reported_again(tmp_path: Path) -> None:
    """A run whose verdicts equal the last one adds no row to the trend, so the row cannot carry its wall time to a
    report redone on its shards (the report's code changed): the environment.json it published does."""
    from harness.config.matrix import load
    from harness.publish import report

    shard = tmp_path / "shard.jsonl"
    shard.write_text("{}\n")
    results = tmp_path / "results"
    results.mkdir()
    profile = load(Path(__file__).resolve().parent.parent / "matrix.toml").profile("smoke")

    def wall(given: float) -> object:
        return report._environment(tmp_path, results, [], profile, {}, [shard], given, 0, 0, [])["wall_seconds"]

    first = report._environment(tmp_path, results, [], profile, {}, [shard], 683.0, 0, 0, [])
    (results / "environment.json").write_text(json.dumps(first))
    assert wall(0.5) == 683.0, "the same run reported again keeps the wall time it took"
    shard.write_text('{"another": "run"}\n')
    assert wall(0.5) == 0.5, "another run is timed anew"
