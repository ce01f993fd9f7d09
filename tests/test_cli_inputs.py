"""Command-line inputs a hostile user tried (issue 26, finding 5): each is one line and exit 2, before anything is
written, never a traceback, never taken silently.

`--wall nan` wrote `NaN` (not JSON) into history.jsonl; `--cases ,` sealed an empty export over the last one;
`harness diff` and `recommend --results` on a file that is not UTF-8 ended in `UnicodeDecodeError` tracebacks;
`diff --limit -1` dropped the last group without a word; `export --workers -3` and `--out .` were taken.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.publish import history
from tests.test_cli import harness, one_line_error

ROOT = Path(__file__).resolve().parent.parent


def _table(folder: Path, lines: int = 400) -> Path:
    """A small published table: the first cells of the committed results/matrix.jsonl."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(ROOT / "results" / "matrix.jsonl", encoding="utf-8") as f:
        head = [next(f) for _ in range(lines)]
    (folder / "matrix.jsonl").write_text("".join(head), encoding="utf-8")
    return folder


@pytest.mark.parametrize("wall", ["nan", "inf", "-inf", "-1", "1e300"])
def test_a_wall_time_that_is_not_seconds_is_refused_before_anything_is_written(tmp_path: Path, wall: str) -> None:
    out, results = tmp_path / "b", tmp_path / "r"
    line = one_line_error(harness("report", "--out", str(out), "--results", str(results), f"--wall={wall}"))
    assert f"--wall {float(wall)!r}: must be the run's wall time in seconds" in line
    assert not out.exists() and not results.exists()


def test_the_history_never_holds_nan(tmp_path: Path) -> None:
    """Whatever reaches it, history.jsonl stays JSON: a NaN wall time is null, and a NaN an earlier version
    wrote reads as null and is not written again."""
    path = tmp_path / history.HISTORY
    path.write_text('{"run":"old","date":"2025-01-01 00:00 UTC","wall_seconds":NaN,"counts":{"pass":Infinity}}\n')
    assert history.read(path)[0]["wall_seconds"] is None
    entry = history.summary(
        run="new", date="2025-01-02 00:00 UTC", environment={"wall_seconds": math.nan}, counts={"pass": 1}, cases=1, runtimes=[]
    )
    entries, text = history.merged(path, {**entry, "odd": [math.inf, {"x": -math.inf}]})
    assert "NaN" not in text and "Infinity" not in text

    def strict(constant: str) -> None:
        raise AssertionError(f"{constant} in history.jsonl")

    parsed = [json.loads(line, parse_constant=strict) for line in text.splitlines()]
    assert [e["wall_seconds"] for e in parsed] == [None, None]
    assert parsed[1]["odd"] == [None, {"x": None}] and entries[1]["wall_seconds"] is None


@pytest.mark.parametrize("cases", [",", " , ,", ""])
@pytest.mark.parametrize("command", ["export", "plan"])
def test_cases_that_name_no_case_are_refused_before_anything_is_written(tmp_path: Path, command: str, cases: str) -> None:
    out = tmp_path / "b"
    line = one_line_error(harness(command, "--out", str(out), "--cases", cases))
    assert f"--cases {cases!r} names no case; give case names separated by commas" in line
    assert not out.exists()


def test_recommend_with_cases_that_name_no_case_is_refused(tmp_path: Path) -> None:
    line = one_line_error(harness("recommend", "--runtime", "1.17.3", "--results", str(_table(tmp_path)), "--cases", ","))
    assert "--cases ',' names no case" in line


NOT_UTF8 = b'\xff\xfe{"case": "x"}\n'


@pytest.mark.parametrize("where", ["file", "folder"])
def test_diff_and_recommend_on_a_file_that_is_not_utf8_are_one_line(tmp_path: Path, where: str) -> None:
    bad = tmp_path / "bad" / "matrix.jsonl"
    bad.parent.mkdir()
    bad.write_bytes(NOT_UTF8)
    given = str(bad if where == "file" else bad.parent)
    good = str(_table(tmp_path / "good"))
    for args in (["diff", given, good], ["diff", good, given], ["recommend", "--runtime", "1.17.3", "--results", given]):
        line = one_line_error(harness(*args))
        assert line.startswith(f"harness: error: {given}") and ": not UTF-8 text (byte 0: invalid start byte); " in line, args


@pytest.mark.parametrize(
    ("name", "content"),
    [("cases.json", b"[]"), ("cases.json", b'{"x": 1}'), ("cases.json", NOT_UTF8), ("environment.json", NOT_UTF8)],
    ids=["cases-list", "cases-shape", "cases-not-utf8", "environment-not-utf8"],
)
def test_recommend_beside_a_damaged_file_is_one_line_or_ignores_it(tmp_path: Path, name: str, content: bytes) -> None:
    table = _table(tmp_path / "t")
    (table / name).write_bytes(content)
    proc = harness("recommend", "--runtime", "1.17.3", "--results", str(table))
    assert "Traceback" not in proc.stderr, proc.stderr
    if proc.returncode == 2:
        assert one_line_error(proc).startswith(f"harness: error: {table}")


def test_diff_on_lines_of_another_shape_is_one_line(tmp_path: Path) -> None:
    odd = tmp_path / "odd.jsonl"
    odd.write_text("[1]\n")
    line = one_line_error(harness("diff", str(odd), str(_table(tmp_path / "good"))))
    assert str(odd) in line


def test_diff_with_a_negative_limit_is_refused(tmp_path: Path) -> None:
    table = str(_table(tmp_path))
    assert "--limit -1: must be >= 0 (0 shows every line)" in one_line_error(harness("diff", table, table, "--limit", "-1"))


@pytest.mark.parametrize("workers", ["-3", "100000000"])
def test_export_workers_out_of_range_are_refused(tmp_path: Path, workers: str) -> None:
    out = tmp_path / "b"
    line = one_line_error(harness("export", "--out", str(out), "--cases", "frozen_batch", "--workers", workers))
    assert f"--workers {workers}: must be within 0..256" in line
    assert not out.exists()


@pytest.mark.parametrize("out", [".", "", "results", "results/x", ".."])
@pytest.mark.parametrize("command", ["export", "report", "run"])
def test_an_out_that_is_the_project_or_its_published_table_is_refused(command: str, out: str) -> None:
    extra = ["--runtime", "1.32.0"] if command == "run" else []
    line = one_line_error(harness(command, "--out", out, *extra))
    assert f"--out {out!r} is " in line and "give a build folder such as --out build" in line


def test_a_reference_timeout_that_is_not_seconds_is_refused(tmp_path: Path) -> None:
    line = one_line_error(harness("reference", str(tmp_path), "example", "--out", str(tmp_path / "x.npz"), "--timeout", "nan"))
    assert "--timeout nan: must be within 1..86400 seconds" in line


@pytest.mark.e2e  # runs nox itself
@pytest.mark.parametrize(
    ("args", "said"), [(["--cases", ","], "--cases ',' names no case"), (["--out", "."], "--out '.' is the project's")]
)
def test_nox_matrix_refuses_them_too_before_anything_is_written(tmp_path: Path, args: list[str], said: str) -> None:
    import subprocess
    import sys

    out = ["--out", str(tmp_path / "b")] if "--out" not in args else []
    proc = subprocess.run(
        [sys.executable, "-m", "nox", "-s", "matrix", "--", *out, *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != 0 and f"nox: {said}" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "b").exists()
