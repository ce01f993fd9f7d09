"""The surfaces added after the first two passes keep the same promise (issue 40): the table across torch releases,
the README's answer block, ``recommend --torch``, ``report --partial`` and the measured frontier.

One unit or nothing, every input bounded and checked, one line for bad input (exit 2), never a traceback, never a
table that claims more than it holds. Real ``harness`` processes over real builds (tests/artifacts.py's ONNX models,
run by the real run stage on this environment's onnxruntime), real kills, a real file-size limit.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnxruntime
import pytest

from harness.config.matrix import Matrix, load
from harness.store import cache, frontier, layout
from tests.artifacts import fault_corpus, forge
from tests.test_reliability import ROOT, _matrix, _one_line, _report, _run

pytestmark = pytest.mark.slow  # seconds a test: `nox -s tests` runs them, `nox -s unit` leaves them out

TORCH = "torchy"
RELEASES = ("2.5.1", "2.7.1")
PIN = f"onnxruntime=={onnxruntime.__version__}"


def _torch_matrix(tmp: Path) -> Matrix:
    """The reliability matrix plus a profile of two torch releases on the same runtime, case and opset."""
    text = _matrix(tmp).path.read_text() + (
        f'\n[profiles.{TORCH}]\nruntimes = ["{PIN}"]\nproviders = ["cpu"]\nexporters = ["torchscript"]\nopsets = [17]\n'
        f"torch = {json.dumps(list(RELEASES))}\n"
    )
    (tmp / "matrix.toml").write_text(text)
    return load(tmp / "matrix.toml")


def _harness(matrix: Matrix, *args: str, profile: str = TORCH, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    def fsize() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # type: ignore[arg-type]

    cmd = [sys.executable, "-m", "harness", args[0], "--matrix", str(matrix.path), "--profile", profile, *args[1:]]
    return subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=fsize if limit else None
    )


def _answer(*args: str) -> subprocess.CompletedProcess[str]:
    """A command that reads published files alone (``recommend``, ``readme``): no matrix.toml."""
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def _release_table(matrix: Matrix, build: Path, tables: Path, release: str) -> None:
    """One release's build (its manifest says the torch it was exported with) run and reported into
    ``tables/<release>/``, as ``nox -s matrix -- --profile torch`` does."""
    out = build / "torch" / release
    fault_corpus(out, only=["add_one", "div_int_min"])
    manifest = json.loads((out / layout.MANIFEST).read_text())
    cache.write_json(out / layout.MANIFEST, {**manifest, "versions": {"torch": f"{release}+cpu", "onnx": "1.23.2"}})
    common = ("--out", str(build), "--torch", release)
    assert (proc := _harness(matrix, "run", *common, "--runtime", onnxruntime.__version__, "--no-latency")).returncode == 0, (
        proc.stderr
    )
    assert (proc := _harness(matrix, "report", *common, "--results", str(tables))).returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def torch_tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two release tables and the table across them, published; and a one-release build apart, so a second
    ``torch-report`` has something new to say."""
    tmp = tmp_path_factory.mktemp("surfaces")
    matrix = _torch_matrix(tmp)
    build, tables = tmp / "build", tmp / "torch"
    for release in RELEASES:
        _release_table(matrix, build, tables, release)
    assert (proc := _harness(matrix, "torch-report", "--out", str(build), "--results", str(tables))).returncode == 0, (
        proc.stderr
    )
    return {"matrix": matrix.path, "build": build, "tables": tables, "tmp": tmp}


def _copy(torch_tables: dict[str, Path], tmp_path: Path) -> Path:
    tables = tmp_path / "torch"
    shutil.copytree(torch_tables["tables"], tables, ignore=shutil.ignore_patterns(".harness*"))
    return tables


def _whole(tables: Path) -> str:
    """The table across releases is one unit: ``torch.json`` names the hashes of the README and page beside it."""
    summary = json.loads((tables / "torch.json").read_text())
    for name in ("README.md", "index.html"):
        assert summary["outputs"][name] == hashlib.sha256((tables / name).read_bytes()).hexdigest(), f"torn: {name}"
    return (tables / "README.md").read_text()


def _torch_report(torch_tables: dict[str, Path], tables: Path, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    matrix = load(torch_tables["matrix"])
    return _harness(matrix, "torch-report", "--out", str(torch_tables["build"]), "--results", str(tables), limit=limit)


# 1. torch-report is one unit -------------------------------------------------------------------------------


def test_torch_report_under_a_file_size_limit_says_one_line_and_leaves_the_previous_table(
    torch_tables: dict[str, Path], tmp_path: Path
) -> None:
    tables = _copy(torch_tables, tmp_path)
    (tables / "2.7.1" / "matrix.jsonl").unlink()  # the previous table says 2.7.1 is not measured
    shutil.rmtree(tables / "2.7.1")
    assert _torch_report(torch_tables, tables).returncode == 1  # a release not whole: said, exit 1
    before = {p.name: p.read_bytes() for p in tables.iterdir() if p.is_file()}
    shutil.copytree(torch_tables["tables"] / "2.7.1", tables / "2.7.1", ignore=shutil.ignore_patterns(".harness*"))
    proc = _torch_report(torch_tables, tables, limit=len(before["README.md"]) // 2)
    line = _one_line(proc)
    assert "cannot write" in line and "File too large" in line and "the previous report is left as it was" in line
    assert {p.name: p.read_bytes() for p in tables.iterdir() if p.is_file()} == before
    assert "not measured" in _whole(tables)
    assert not list(tmp_path.glob(".torch.*.tmp")), "the staged folder is removed"


def test_a_sigkilled_torch_report_leaves_the_whole_previous_or_the_whole_new_table(
    torch_tables: dict[str, Path], tmp_path: Path
) -> None:
    tables = _copy(torch_tables, tmp_path)
    new = _whole(tables)
    shutil.rmtree(tables / "2.7.1")
    assert _torch_report(torch_tables, tables).returncode == 1
    previous = _whole(tables)
    shutil.copytree(torch_tables["tables"] / "2.7.1", tables / "2.7.1", ignore=shutil.ignore_patterns(".harness*"))
    matrix = load(torch_tables["matrix"])
    cmd = [sys.executable, "-m", "harness", "torch-report", "--matrix", str(matrix.path), "--profile", TORCH]
    seen = set()
    for delay in (0.2, 0.5, 0.8, 1.1, 1.4, 1.8, 2.5):
        proc = subprocess.Popen(
            [*cmd, "--out", str(torch_tables["build"]), "--results", str(tables)], cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        now = _whole(tables)
        assert now in (previous, new), f"killed after {delay} s: neither table"
        seen.add("new" if now == new else "previous")
        assert sorted(p.name for p in tables.iterdir() if not p.name.startswith(".")) == [
            *RELEASES, "README.md", "index.html", "torch.json"
        ]  # fmt: skip
        if now == new:
            break
    assert _torch_report(torch_tables, tables).returncode == 0  # the next one undoes what a kill left, and publishes
    assert _whole(tables) == new and not list(tmp_path.glob(".torch.*.tmp"))


# 2. torch-report and recommend --torch on damaged or foreign release tables -------------------------------


def _damage(tables: Path, what: str) -> None:
    release = tables / "2.5.1"
    if what == "non-UTF-8 matrix.jsonl":
        with open(release / "matrix.jsonl", "ab") as f:
            f.write(b"\xff\xfe\n")
    elif what == "matrix.jsonl cut at a line":
        lines = (release / "matrix.jsonl").read_bytes().splitlines(keepends=True)
        (release / "matrix.jsonl").write_bytes(b"".join(lines[: max(1, len(lines) * 7 // 10)]))
    elif what == "garbage environment.json":
        (release / "environment.json").write_text("garbage")
    elif what == "another profile's table":
        env = json.loads((release / "environment.json").read_text())
        (release / "environment.json").write_text(json.dumps({**env, "profile": "default"}))
    elif what == "another release's table":
        env = json.loads((release / "environment.json").read_text())
        (release / "environment.json").write_text(json.dumps({**env, "export": {**env["export"], "torch": "2.13.0+cpu"}}))
    elif what in ("README.md a folder", "torch.json a folder"):
        name = what.split()[0]
        (tables / name).unlink()
        (tables / name).mkdir()
    else:
        raise AssertionError(what)


@pytest.mark.parametrize(
    "what",
    [
        "non-UTF-8 matrix.jsonl", "matrix.jsonl cut at a line", "garbage environment.json", "another profile's table",
        "another release's table", "README.md a folder", "torch.json a folder",
    ],
)  # fmt: skip
def test_a_damaged_or_foreign_release_table_is_said_never_read_as_that_release(
    torch_tables: dict[str, Path], tmp_path: Path, what: str
) -> None:
    tables = _copy(torch_tables, tmp_path)
    _damage(tables, what)
    proc = _torch_report(torch_tables, tables)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    text = _whole(tables)
    row = next(line for line in text.splitlines() if line.startswith("| 2.5.1 |"))
    if "folder" in what:  # the table across releases is the torch-report's own: written again, whole
        assert proc.returncode == 0, proc.stderr
        assert "2.5.1+cpu" in row
        return
    assert proc.returncode == 1 and "not whole: 2.5.1" in proc.stdout, proc.stdout + proc.stderr
    assert row.split("|")[2].strip().startswith("unreadable: "), row  # its facts are not read as 2.5.1's
    answer = _answer("recommend", "--runtime", onnxruntime.__version__, "--torch", "2.5.1", "--results", str(tables))
    line = _one_line(answer)
    assert "2.5.1" in line and answer.stdout == "", answer.stdout


@pytest.mark.parametrize("given", ["..", "../architectures", ".", "02.05.01", "2.5.1+cpu", "2.5", "2.9.9", "2.5.1/"])
def test_recommend_torch_takes_a_release_the_torch_table_lists_never_a_path(
    torch_tables: dict[str, Path], given: str
) -> None:
    proc = _answer("recommend", "--runtime", onnxruntime.__version__, "--torch", given, "--results", str(torch_tables["tables"]))
    line = _one_line(proc)
    assert proc.stdout == "" and "--torch" in line, line
    ok = _answer("recommend", "--runtime", onnxruntime.__version__, "--torch", "2.5.1", "--results", str(torch_tables["tables"]))
    assert ok.returncode in (0, 1) and "exported with torch 2.5.1+cpu" in ok.stdout, ok.stdout + ok.stderr


def test_a_release_the_torch_table_does_not_list_is_not_answered_from_a_folder_of_that_name(
    torch_tables: dict[str, Path], tmp_path: Path
) -> None:
    tables = _copy(torch_tables, tmp_path)
    shutil.copytree(tables / "2.5.1", tables / "2.6.0")  # a folder named as a release, not listed by torch.json
    proc = _answer("recommend", "--runtime", onnxruntime.__version__, "--torch", "2.6.0", "--results", str(tables))
    assert "no table of torch 2.6.0" in _one_line(proc)


def test_a_torch_release_that_is_not_x_y_z_is_refused_before_anything_starts(tmp_path: Path) -> None:
    matrix = _torch_matrix(tmp_path)
    matrix.path.write_text(matrix.path.read_text().replace('"2.7.1"', '"02.07.01"'))
    proc = _harness(matrix, "validate")
    assert "02.07.01" in _one_line(proc) and "X.Y.Z" in _one_line(proc)


# 3. report --partial and the measured frontier --------------------------------------------------------------


def _build(tmp_path: Path) -> tuple[Matrix, Path, Path]:
    matrix, out, results = _matrix(tmp_path), tmp_path / "build", tmp_path / "results"
    fault_corpus(out, only=["add_one", "div_int_min"])
    assert (proc := _run(matrix, out)).returncode == 0, proc.stderr
    return matrix, out, results


def test_report_partial_never_publishes_a_cell_of_a_shard_that_failed_its_seal(tmp_path: Path) -> None:
    matrix, out, results = _build(tmp_path)
    shard = layout.shard_path(out, matrix.runtime(onnxruntime.__version__), "cpu")
    forge(shard, "crash", "pass")  # its checksum redone: the line holds, the seal does not
    assert "changed after its run sealed it" in _one_line(_report(matrix, out, results))
    line = _one_line(_report(matrix, out, results, "--partial"))  # its only shard vouches for nothing: nothing to publish
    assert "no shards" in line and not (results / "matrix.jsonl").exists()


def test_report_partial_publishes_what_an_open_seal_vouches_for_and_not_a_line_forged_past_it(tmp_path: Path) -> None:
    matrix, out, results = _build(tmp_path)
    shard = layout.shard_path(out, matrix.runtime(onnxruntime.__version__), "cpu")
    lines = shard.read_bytes().splitlines(keepends=True)
    honest = [line for line in lines if b'"status": "crash"' not in line]
    assert 0 < len(honest) < len(lines)
    prefix = b"".join(honest)  # a run killed after these lines, its open seal checkpointed them
    shard.write_bytes(prefix + b"".join(line for line in lines if line not in honest))
    forged = forge(shard, "crash", "pass")  # then a pass appended past the checkpoint, its checksum redone
    layout.checkpoint(shard, len(prefix), hashlib.sha256(prefix).hexdigest())
    assert "did not finish" in _one_line(_report(matrix, out, results))
    proc = _report(matrix, out, results, "--partial")
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (results / "matrix.jsonl").read_text().splitlines()]
    assert len(rows) == len(honest) and forged not in {f"{r['case']} {r['probe']}" for r in rows}
    readme, page = (results / "README.md").read_text(), (results / "index.html").read_text()
    said = f"{len(honest)} of its cells published, those its seal vouches for"
    assert "PARTIAL REPORT" in readme and said in readme and said in page


def test_an_answer_from_a_partial_table_says_so_on_its_first_line(tmp_path: Path) -> None:
    matrix, out, results = _build(tmp_path)
    frontier.result_path(out, matrix.runtime(onnxruntime.__version__).id).unlink()
    assert _report(matrix, out, results, "--partial").returncode == 0
    proc = _answer("recommend", "--runtime", onnxruntime.__version__, "--results", str(results))
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("PARTIAL TABLE, not the answer"), proc.stdout
    said = json.loads(_answer("recommend", "--runtime", onnxruntime.__version__, "--results", str(results), "--json").stdout)
    assert said["partial"] and "frontier" in said["partial"][0]


@pytest.mark.parametrize("damage", ["garbage", "a list", "non-UTF-8", "missing", "models deleted"])
def test_a_report_without_its_measured_frontier_is_refused_or_labelled_never_silent(tmp_path: Path, damage: str) -> None:
    matrix, out, results = _build(tmp_path)
    rt = matrix.runtime(onnxruntime.__version__)
    measured = frontier.result_path(out, rt.id)
    if damage == "models deleted":
        shutil.rmtree(frontier.models_dir(out))
    elif damage == "missing":
        measured.unlink()
    else:
        measured.write_bytes({"garbage": b"{not json", "a list": b"[1, 2]", "non-UTF-8": b"\xff\xfe{}"}[damage])
    line = _one_line(_report(matrix, out, results))
    assert "frontier" in line and "--partial" in line and not (results / "matrix.jsonl").exists()
    proc = _report(matrix, out, results, "--partial")
    assert proc.returncode == 0, proc.stderr
    first = (results / "README.md").read_text().split("\n## ", 1)[0]  # said where a reader starts
    assert "PARTIAL REPORT" in first and ("frontier is not measured" in first or "frontier models are missing" in first)


# 4. harness readme ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def readme_table(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the published table's files that the README block reads (sealed by the report that wrote them)."""
    tmp = tmp_path_factory.mktemp("readme")
    table = tmp / "results"
    table.mkdir()
    for name in ("matrix.jsonl", "cases.json", "rewrites.json", "frontier.json", "environment.json", "README.md"):
        shutil.copy(ROOT / "results" / name, table / name)
    return table


def _readme_copy(tmp_path: Path, stale: bool = True) -> Path:
    readme = tmp_path / "README.md"
    text = (ROOT / "README.md").read_text()
    if stale:
        begin, rest = text.split("<!-- answer:begin -->", 1)
        text = f"{begin}<!-- answer:begin -->\nstale\n<!-- answer:end -->{rest.split('<!-- answer:end -->', 1)[1]}"
    readme.write_text(text)
    return readme


def test_readme_writes_the_block_from_a_whole_table_and_check_says_fresh(readme_table: Path, tmp_path: Path) -> None:
    readme = _readme_copy(tmp_path)
    check = _answer("readme", "--check", "--results", str(readme_table), "--readme", str(readme))
    assert check.returncode == 1 and "STALE" in check.stdout, check.stdout + check.stderr
    assert (proc := _answer("readme", "--results", str(readme_table), "--readme", str(readme))).returncode == 0, proc.stderr
    assert "stale" not in readme.read_text().split("<!-- answer:begin -->", 1)[1].split("<!-- answer:end -->")[0]
    assert _answer("readme", "--check", "--results", str(readme_table), "--readme", str(readme)).returncode == 0


@pytest.mark.parametrize(
    "bad",
    [
        "missing --results", "a file as --results", "missing --readme", "a folder as --readme", "binary --readme",
        "non-UTF-8 --readme", "/dev/zero as --readme", "/dev/full as --readme", "duplicated markers",
        "matrix.jsonl cut at a line", "garbage frontier.json", "missing frontier.json", "no environment.json",
    ],
)  # fmt: skip
def test_readme_refuses_what_it_cannot_read_in_one_line_exit_2_and_writes_nothing(
    readme_table: Path, tmp_path: Path, bad: str
) -> None:
    table = tmp_path / "results"
    shutil.copytree(readme_table, table)
    readme = _readme_copy(tmp_path)
    if bad == "missing --results":
        table = tmp_path / "nowhere"
    elif bad == "a file as --results":
        table = table / "matrix.jsonl"
    elif bad == "missing --readme":
        readme.unlink()
    elif bad == "a folder as --readme":
        readme.unlink()
        readme.mkdir()
    elif bad == "binary --readme":
        readme.write_bytes(b"\x00\x01\x02<!-- answer:begin -->")
    elif bad == "non-UTF-8 --readme":
        readme.write_bytes(readme.read_bytes() + b"\xff\xfe")
    elif bad.startswith("/dev/"):
        readme = Path(bad.split()[0])
    elif bad == "duplicated markers":
        readme.write_text(readme.read_text() + "\n<!-- answer:begin -->\nold\n<!-- answer:end -->\n")
    elif bad == "matrix.jsonl cut at a line":
        lines = (table / "matrix.jsonl").read_bytes().splitlines(keepends=True)
        (table / "matrix.jsonl").write_bytes(b"".join(lines[: len(lines) * 7 // 10]))
    elif bad == "garbage frontier.json":
        (table / "frontier.json").write_text("garbage")
    elif bad == "missing frontier.json":
        (table / "frontier.json").unlink()
    elif bad == "no environment.json":
        (table / "environment.json").unlink()
    before = readme.read_bytes() if readme.is_file() and not bad.startswith("/dev/") else None
    for check in (["--check"], []):
        proc = _answer("readme", *check, "--results", str(table), "--readme", str(readme))
        _one_line(proc)
        assert proc.stdout == ""
    if before is not None:
        assert readme.read_bytes() == before


def test_readme_under_a_file_size_limit_leaves_the_readme_whole(readme_table: Path, tmp_path: Path) -> None:
    readme = _readme_copy(tmp_path)
    before = readme.read_bytes()
    cmd = [sys.executable, "-m", "harness", "readme", "--results", str(readme_table), "--readme", str(readme)]
    limit = len(before) // 2

    def fsize() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300, preexec_fn=fsize)
    assert "cannot be written" in _one_line(proc)
    assert readme.read_bytes() == before and sorted(os.listdir(tmp_path)) == ["README.md"]


# 5. Smaller ----------------------------------------------------------------------------------------------------


def test_a_results_folder_that_is_no_report_gets_no_lock_files(tmp_path: Path) -> None:
    matrix, out, _ = _build(tmp_path)
    models = tmp_path / "notes"
    models.mkdir()
    (models / "mine.py").write_text("x = 1\n")
    assert "is not part of a report" in _one_line(_report(matrix, out, models))
    assert sorted(p.name for p in models.iterdir()) == ["mine.py"], "lock files left in a folder that is no report's"


def test_recommend_cases_names_the_damaged_cases_json_that_may_hold_them(tmp_path: Path) -> None:
    from harness.answer import lookup
    from harness.core.errors import HarnessError

    matrix, out, results = _build(tmp_path)
    assert _report(matrix, out, results).returncode == 0
    other = results / "other"  # another corpus's table published inside it, as results/architectures/ is
    shutil.copytree(results, other, ignore=shutil.ignore_patterns(".harness*", "other"))
    (other / "cases.json").write_bytes(b"\xff{")
    with pytest.raises(HarnessError) as refused:
        lookup.cases_table(["llama_decode"], str(results / "matrix.jsonl"))
    assert str(other / "cases.json") in str(refused.value) and "llama_decode" in str(refused.value)
