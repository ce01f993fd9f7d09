"""The table is never wrong (issue 16): killed runs, damaged files, two writers, hostile strings, failed writes.

Each test drives the real stages (the `harness` command in real processes where it matters: a real
SIGKILL, a real second writer, a real write that the kernel refuses) over real ONNX artifacts from
tests/artifacts.py, and checks what a broken harness would get wrong: a report published from a shard
its run did not finish, a cell computed from a changed file, a traceback.
"""

from __future__ import annotations

import json
import os
import re
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from harness.config.matrix import Matrix, load
from harness.core.errors import HarnessError
from harness.core.records import CellRecord, Stage, Status
from harness.publish import report
from harness.run.stage import run_runtime
from harness.store import layout, lock, nightly
from harness.store.layout import load_artifacts, shard_path, write_shard
from tests.artifacts import fault_corpus, faults, write_artifact, write_manifest
from tests.test_isolation import _alive

pytestmark = pytest.mark.torch  # exports with real torch: `nox -s tests`, not `nox -s unit`


ROOT = Path(__file__).resolve().parent.parent
PROFILE = "reliability"


def _matrix(tmp_path: Path) -> Matrix:
    """The project's matrix, a 3 s cell timeout, one worker, and a profile of the newest runtime alone."""
    text = (ROOT / "matrix.toml").read_text().replace("timeout = 120", "timeout = 3").replace("workers = 0", "workers = 1")
    text += (
        f'\n[profiles.{PROFILE}]\nruntimes = ["onnxruntime=={onnxruntime.__version__}"]\nproviders = ["cpu"]\n'
        'exporters = ["torchscript"]\nopsets = [17]\n'
    )
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    return load(path)


def _harness(matrix: Matrix, out: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "harness", args[0], "--matrix", str(matrix.path), "--profile", PROFILE, "--out", str(out)]
    return subprocess.run(
        [*cmd, *args[1:]], cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}
    )


def _run(matrix: Matrix, out: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return _harness(matrix, out, "run", "--runtime", onnxruntime.__version__, "--no-latency", env=env)


def _report(matrix: Matrix, out: Path, results: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return _harness(matrix, out, "report", "--results", str(results), *args)


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    """A refusal: exit status 2, one line on stderr, no traceback."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("harness: error:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _published(matrix: Matrix, out: Path, results: Path) -> dict[str, bytes]:
    """A first, whole report: what a later failure must leave exactly as it is."""
    assert (proc := _run(matrix, out)).returncode == 0, proc.stdout + proc.stderr
    assert (proc := _report(matrix, out, results)).returncode == 0, proc.stdout + proc.stderr
    return _files(results)


# 1. A killed run session -------------------------------------------------------------------------


def test_a_sigkilled_run_session_is_never_published_and_a_partial_report_says_so(tmp_path: Path) -> None:
    matrix, out, results = _matrix(tmp_path), tmp_path / "build", tmp_path / "results"
    fault_corpus(out, only=["add_one"])
    before = _published(matrix, out, results)
    assert b"add_one" in before["matrix.jsonl"] and "history.jsonl" in before

    # The export grows a case; its run is SIGKILLed while the endless Loop holds the worker.
    fault_corpus(out, only=["add_one", "endless_loop"])
    shard = shard_path(out, matrix.runtime(onnxruntime.__version__), "cpu")
    cmd = [sys.executable, "-m", "harness", "run", "--matrix", str(matrix.path), "--profile", PROFILE, "--out", str(out)]
    proc = subprocess.Popen([*cmd, "--runtime", onnxruntime.__version__], cwd=ROOT, start_new_session=True, text=True)
    deadline = time.monotonic() + 60
    while b'"endless_loop"' not in (shard.read_bytes() if shard.exists() else b""):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()

    line = _one_line(_report(matrix, out, results))
    assert f"onnxruntime=={onnxruntime.__version__} cpu" in line and "did not finish" in line and "--partial" in line
    assert _files(results) == before, "a refused report must leave the published results and history untouched"

    proc2 = _report(matrix, out, results, "--partial")
    assert proc2.returncode == 0, proc2.stderr
    assert proc2.stdout.startswith("report: PARTIAL")
    readme = (results / "README.md").read_text()
    assert readme.splitlines()[0].startswith("**PARTIAL REPORT: 1 shard(s) were not whole")
    html = (results / "index.html").read_text()
    assert '"partial":["onnxruntime==' in html.replace(" ", "")
    assert (results / "history.jsonl").read_bytes() == before["history.jsonl"], "a partial report is not a run"

    # Rerun the killed session: the shard is sealed again and the report publishes with no label.
    assert _run(matrix, out).returncode == 0
    assert (proc3 := _report(matrix, out, results)).returncode == 0, proc3.stderr
    assert not (results / "README.md").read_text().startswith("**PARTIAL")


def test_a_latency_phase_cut_short_by_sigterm_still_seals_every_verdict(tmp_path: Path) -> None:
    """A step's deadline (bench/gpu_check.sh, a CI timeout) sends SIGTERM while the timings run: the verdicts
    are all in, so the shard is sealed (publishable, untimed where it stopped) and the plan runs it again."""
    matrix, out, results = _matrix(tmp_path), tmp_path / "build", tmp_path / "results"
    text = matrix.path.read_text().replace("budget_seconds = 0.25", "budget_seconds = 60")
    text = text.replace("max_runs = 200", "max_runs = 100000000").replace("min_runs = 20", "min_runs = 100000000")
    matrix.path.write_text(text.replace("timeout = 3", "timeout = 120"))  # its first window outlasts the 60 s budget
    matrix = load(matrix.path)
    fault_corpus(out, only=["add_one"])
    shard = shard_path(out, matrix.runtime(onnxruntime.__version__), "cpu")
    cmd = [sys.executable, "-m", "harness", "run", "--matrix", str(matrix.path), "--profile", PROFILE, "--out", str(out)]
    proc = subprocess.Popen([*cmd, "--runtime", onnxruntime.__version__], cwd=ROOT, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while (shard.read_bytes() if shard.exists() else b"").count(b'"add_one"') < 2:  # both verdicts are in
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before its latency phase"
        time.sleep(0.05)
    time.sleep(2.0)  # inside the 60 s timing of add_one's example
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130
    assert layout.problem(shard, f"onnxruntime=={onnxruntime.__version__}", "cpu", load_artifacts(out)) is None
    assert "cut short" in json.loads(layout.stamp_of(shard).read_text())["redo"]
    # Its frontier (the run stage's last step) was not measured: the report says so (issue 40), --partial publishes.
    refused = _report(matrix, out, results)
    assert refused.returncode == 2 and "its frontier is not measured" in refused.stderr, refused.stderr
    assert _report(matrix, out, results, "--partial").returncode == 0


def test_gather_refuses_a_shard_its_run_did_not_seal_or_that_was_cut_short(tmp_path: Path) -> None:
    matrix, out = _matrix(tmp_path), tmp_path / "build"
    fault_corpus(out, only=["add_one", "div_int_min"])
    runtime = matrix.runtime(onnxruntime.__version__)
    run_runtime(matrix, runtime, ["cpu"], out, latency=False, echo=lambda _: None)
    job = tmp_path / "job"
    job.mkdir()
    shard = shard_path(out, runtime, "cpu")
    good = shard.read_bytes()
    upload, stamp = job / shard.name, job / layout.stamp_of(shard).name
    profile = matrix.profile(PROFILE)

    upload.write_bytes(good)  # the stamp is not uploaded: the job was killed before it sealed
    with pytest.raises(HarnessError, match="has no seal beside it"):
        nightly.gather(out, profile, [job], echo=lambda _: None)
    stamp.write_bytes(layout.stamp_of(shard).read_bytes())
    upload.write_bytes(good[:-40])  # cut short mid-line, as a killed upload leaves it
    with pytest.raises(HarnessError, match="cut short or fail their checksum"):
        nightly.gather(out, profile, [job], echo=lambda _: None)
    said: list[str] = []
    assert nightly.gather(out, profile, [job], echo=said.append, partial=True) == []  # left out, and said
    assert "cut short or fail their checksum" in said[0] and "left out (--partial)" in said[0]
    upload.write_bytes(good)
    assert nightly.gather(out, profile, [job], echo=lambda _: None) == [shard]
    assert layout.problem(shard, runtime.pin, "cpu", load_artifacts(out)) is None  # the gathered shard is sealed


# 2. A changed artifact ---------------------------------------------------------------------------


def test_a_cell_is_never_computed_from_or_reused_for_an_artifact_that_changed_since_its_export(tmp_path: Path) -> None:
    matrix, out = _matrix(tmp_path), tmp_path / "build"
    (art_id,) = fault_corpus(out, only=["add_one"])
    runtime = matrix.runtime(onnxruntime.__version__)
    assert {c.status for c in run_runtime(matrix, runtime, ["cpu"], out, latency=False, echo=lambda _: None)} == {Status.PASS}

    ref = out / "artifacts" / art_id / "reference.npz"
    good = ref.read_bytes()
    with np.load(ref) as z:
        arrays = {k: z[k] + (100 if "/out/" in k else 0) for k in z.files}
    np.savez(ref, **arrays)  # edited in place: a valid file whose expected outputs are wrong
    said: list[str] = []
    with pytest.raises(HarnessError, match=r"1 artifact\(s\) changed since the export wrote them.*reference.npz"):
        run_runtime(matrix, runtime, ["cpu"], out, latency=False, force=True, echo=said.append)
    assert any("reference.npz differs from its recorded hash" in s for s in said)
    shard = shard_path(out, runtime, "cpu")
    assert Status.MISMATCH.value.encode() not in shard.read_bytes(), "no cell is computed from the changed file"
    assert "not sealed" in (layout.problem(shard, runtime.pin, "cpu", load_artifacts(out)) or "")

    ref.write_bytes(good)  # repaired (as the export's rerun writes it): the cells are computed from it
    cells = run_runtime(matrix, runtime, ["cpu"], out, latency=False, echo=lambda _: None)
    assert {c.status for c in cells} == {Status.PASS}


# 3. One writer per build folder ------------------------------------------------------------------


def test_a_second_writer_is_refused_at_once_and_a_dead_holder_s_lock_is_taken_over(tmp_path: Path) -> None:
    matrix, out = _matrix(tmp_path), tmp_path / "build"
    fault_corpus(out, only=["add_one"])
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from harness.store import lock; "
         "held = lock.acquire(Path(sys.argv[1]), 'nox -s matrix (the test holder)', stage=False); print('held', flush=True); "
         "time.sleep(300)",
         str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        t0 = time.monotonic()
        line = _one_line(_run(matrix, out))
        assert time.monotonic() - t0 < 30, "refused at once, not after waiting"
        assert f"is in use by PID {holder.pid} since " in line and "the test holder" in line and "another --out" in line
        assert not shard_path(out, matrix.runtime(onnxruntime.__version__), "cpu").exists(), "the refused run wrote nothing"

        # A stage that the holder started (nox hands its lock down through the environment) goes on.
        token = json.loads(lock.path_of(out).read_text())["token"]
        handed = _run(matrix, out, **{lock.TOKEN_ENV: f"{out.resolve()}={token}"})
        assert handed.returncode == 0, handed.stderr
        assert _one_line(_run(matrix, out, **{lock.TOKEN_ENV: f"{out.resolve()}=not-the-token"}))
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    took = _run(matrix, out)  # the holder died with SIGKILL, without releasing: its lock is taken over
    assert took.returncode == 0, took.stderr
    assert f"took over the lock of PID {holder.pid}" in took.stderr
    again = _run(matrix, out)  # that run released its lock as it ended: nothing to take over
    assert again.returncode == 0 and "took over" not in again.stderr, again.stderr


def test_two_real_runs_on_one_build_folder_cannot_both_write(tmp_path: Path) -> None:
    matrix, out = _matrix(tmp_path), tmp_path / "build"
    fault_corpus(out, only=["add_one", "endless_loop"])  # the endless Loop keeps the first run busy for its 3 s timeout
    cmd = [sys.executable, "-m", "harness", "run", "--matrix", str(matrix.path), "--profile", PROFILE, "--out", str(out)]
    first = subprocess.Popen([*cmd, "--runtime", onnxruntime.__version__, "--no-latency"], cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    shard = shard_path(out, matrix.runtime(onnxruntime.__version__), "cpu")
    deadline = time.monotonic() + 60
    while not shard.exists():
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    assert f"is in use by PID {first.pid}" in _one_line(_run(matrix, out))
    assert first.wait(timeout=120) == 0
    assert layout.problem(shard, f"onnxruntime=={onnxruntime.__version__}", "cpu", load_artifacts(out)) is None


# 4 and 5. Any bytes in a shard or a cache file -----------------------------------------------------


def test_damaged_bytes_in_a_shard_are_redone_and_never_published(tmp_path: Path) -> None:
    matrix, out, results = _matrix(tmp_path), tmp_path / "build", tmp_path / "results"
    fault_corpus(out, only=["add_one", "div_int_min"])
    _published(matrix, out, results)
    shard = shard_path(out, matrix.runtime(onnxruntime.__version__), "cpu")
    lines = shard.read_bytes().splitlines(keepends=True)
    assert len(lines) == 5

    # An edited verdict (crash → pass) keeping the line's checksum text: the seal's hash no longer holds.
    crash = next(i for i, line in enumerate(lines) if b'"crash"' in line)
    shard.write_bytes(b"".join([*lines[:crash], lines[crash].replace(b'"crash"', b'"pass"'), *lines[crash + 1 :]]))
    assert "changed after its run sealed it" in _one_line(_report(matrix, out, results))
    # The same edit, sealed again by hand: the line's own checksum refuses it.
    layout.seal(shard, json.loads(layout.stamp_of(shard).read_text()))
    assert "1 line(s)" in _one_line(_report(matrix, out, results))
    # A byte that is not UTF-8 and a line cut short: the report refuses, the run redoes those cells, no traceback.
    shard.write_bytes(b"".join([*lines[:1], b'{"case": "add_\xff\xfe"}\n', *lines[1:-1], lines[-1][:30]]))
    layout.seal(shard, json.loads(layout.stamp_of(shard).read_text()))
    assert "2 line(s)" in _one_line(_report(matrix, out, results))
    rerun = _run(matrix, out)
    assert rerun.returncode == 0 and "2 line(s)" in rerun.stdout and "Traceback" not in rerun.stderr, rerun.stderr
    assert len(shard.read_bytes().splitlines()) == 5
    assert _report(matrix, out, results).returncode == 0


@pytest.mark.parametrize(
    "damaged",
    ["manifest.json", "artifacts/add_one.torchscript.op17/export.json", "shards/*.stamp.json", "report.reliability.stamp.json",
     "results/history.jsonl", "shards/*.jsonl"],
)  # fmt: skip
def test_random_bytes_in_any_file_of_the_build_are_one_line_or_redone(tmp_path: Path, damaged: str) -> None:
    matrix, out, results = _matrix(tmp_path), tmp_path / "build", tmp_path / "results"
    fault_corpus(out, only=["add_one"])
    _published(matrix, out, results)
    base = tmp_path if damaged.startswith("results/") else out
    (path,) = base.glob(damaged)
    path.write_bytes(os.urandom(300) + b"\n\xff\xfe\x00{")
    for proc in (_run(matrix, out), _report(matrix, out, results)):
        assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
        assert proc.returncode in (0, 2), proc.stderr
        if proc.returncode == 2:
            _one_line(proc)


# 7. Markdown ---------------------------------------------------------------------------------------

HOSTILE = "<script>alert(1)</script> <img src=x onerror=alert(2)> [click](javascript:alert(3)) `code` | injected-cell"
HOSTILE_PROBE = "<b onclick=alert(4)>probe"  # a probe name is a key of reference.npz: no "/"


def test_no_string_from_a_model_a_card_a_probe_or_an_error_becomes_markup(tmp_path: Path) -> None:
    """The run stage's cells are written here by hand (a failing run would not say these words); the report is real."""
    out, results = tmp_path / "build", tmp_path / "results"
    x = np.ones((1, 4), np.float32)
    fault = faults()["add_one"]
    rec = write_artifact(
        out, "add_one", fault.model, {"example": {"x": x}, HOSTILE_PROBE: {"x": x}}, {"example": [x + 1], HOSTILE_PROBE: [x]}
    )
    data = json.loads((out / "artifacts" / rec.key.id / "export.json").read_text())
    data["card"] = {"symptom": HOSTILE, "cause": HOSTILE, "fix": HOSTILE, "source": HOSTILE}
    data["checker"] = HOSTILE
    (out / "artifacts" / rec.key.id / "export.json").write_text(json.dumps(data))
    write_manifest(out, [rec.key.id])
    matrix = _matrix(tmp_path)
    runtime = matrix.runtime(onnxruntime.__version__)
    (rec,) = load_artifacts(out)
    cells = rec.each_probe(rec.cell(runtime.pin, "cpu", {}), status=Status.RUN_FAIL, stage=Stage.RUN, error_line=HOSTILE)
    shard = shard_path(out, runtime, "cpu")
    shard.parent.mkdir(parents=True)
    write_shard(shard, cells)
    from harness.store import frontier  # what the runtime loads, measured for real: the report refuses it missing

    frontier.measure_if_stale(out, matrix.runtime(onnxruntime.__version__), echo=lambda _: None)
    layout.seal(shard, {})
    report.build(out, results, profile=matrix.profile(PROFILE))
    pages = [results / "README.md", *sorted((results / "cases").glob("*.md"))]
    assert len(pages) == 2
    for md in pages:
        text = md.read_text()
        for markup in ("<script", "<img", "<b "):
            assert markup not in text, (md.name, markup)
        for syntax in (r"\]\(javascript:", r"`code`", r"\| injected-cell"):  # link, code span, table cell: only escaped
            assert not re.search(r"(?<!\\)" + syntax, text), (md.name, syntax)
    case_page = (results / "cases" / "add_one.md").read_text()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in case_page and "[click\\](javascript:alert(3))" in case_page


def test_cells_for_other_artifacts_make_a_shard_not_whole(tmp_path: Path) -> None:
    out = tmp_path / "build"
    fault_corpus(out, only=["add_one"])
    (rec,) = load_artifacts(out)
    cells = [c.replace(inputs="0" * 16) for c in rec.each_probe(rec.cell("onnxruntime==1.32.0", "cpu", {}))]
    shard = out / "shards" / "x-cpu.jsonl"
    shard.parent.mkdir()
    write_shard(shard, cells)
    layout.seal(shard, {})
    said = layout.problem(shard, "onnxruntime==1.32.0", "cpu", [rec]) or ""
    assert "are of other files or another export than this export's artifacts" in said
    failed = json.loads((out / "artifacts" / rec.key.id / "export.json").read_text())
    failed.update(ok=False, error_class="TorchExportError", error_line="the export fails now")
    (out / "artifacts" / rec.key.id / "export.json").write_text(json.dumps(failed))
    (now,) = load_artifacts(out)  # its cells say it exported and passed: not this export's verdict
    write_shard(shard, rec.each_probe(rec.cell("onnxruntime==1.32.0", "cpu", {})))
    layout.seal(shard, {})
    assert "another export" in (layout.problem(shard, "onnxruntime==1.32.0", "cpu", [now]) or "")
    write_shard(shard, cells[:1])
    layout.seal(shard, {})
    assert "1 of 2 cells of this export are missing" in (layout.problem(shard, "onnxruntime==1.32.0", "cpu", [rec]) or "")
    assert isinstance(cells[0], CellRecord)


# 8. A write that fails ----------------------------------------------------------------------------


def _small_files(limit: int) -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG, as a full disk's does
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_report_that_cannot_be_written_leaves_the_previous_results_and_no_temporary_file(tmp_path: Path) -> None:
    matrix, out, results = _matrix(tmp_path), tmp_path / "build", tmp_path / "results"
    fault_corpus(out, only=["add_one", "div_int_min"])
    before = _published(matrix, out, results)
    cmd = [sys.executable, "-m", "harness", "report", "--matrix", str(matrix.path), "--profile", PROFILE, "--out", str(out)]
    full = subprocess.run(
        [*cmd, "--results", str(results)], cwd=ROOT, capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: _small_files(16 * 1024),  # index.html alone is larger
    )  # fmt: skip
    line = _one_line(full)
    assert f"cannot write {results}" in line and "the previous report is left as it was" in line
    assert _files(results) == before
    assert not [p for p in results.rglob("*") if p.name.endswith(".tmp") or ".tmp-" in p.name]

    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    line = _one_line(_report(matrix, out, blocked))
    assert str(blocked) in line


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    todo = [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                kids = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found += kids
            todo += kids
    return found


def test_a_killed_parent_leaves_no_fork_server_or_worker_behind(tmp_path: Path) -> None:
    """The export's workers are forked from a fork server: SIGKILL of the process that runs them takes the
    server and its workers with it, at once."""
    script = (
        "from harness.pool.workers import run_tasks\n"
        "for outcome in run_tasks('time:sleep', [300], workers=1, timeout=600, fresh=True, preload=('json',)):\n"
        "    pass\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    deadline = time.monotonic() + 60
    while len(below := _descendants(proc.pid)) < 2:  # the fork server, and the worker it forked
        assert proc.poll() is None and time.monotonic() < deadline, "the worker never started"
        time.sleep(0.1)
    time.sleep(0.5)
    below = _descendants(proc.pid)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while alive := [p for p in below if _alive(p)]:
        assert time.monotonic() < deadline, f"{alive} outlived their killed parent"
        time.sleep(0.1)


def test_a_second_nox_matrix_on_one_build_folder_is_refused_before_it_starts_anything(tmp_path: Path) -> None:
    """`nox -s matrix` takes the build folder's lock in its first session, before any environment exists."""
    out = tmp_path / "build"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from harness.store import lock; "
         "held = lock.acquire(Path(sys.argv[1]), 'nox -s matrix (the first one)', stage=False); print('held', flush=True); "
         "time.sleep(300)", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        proc = subprocess.run(
            [sys.executable, "-m", "nox", "-s", "matrix", "--", "--profile", "smoke", "--out", str(out)],
            cwd=ROOT, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and f"is in use by PID {holder.pid}" in said and "(nox -s matrix (the first one))" in said
    assert "Session matrix aborted" in said or "Session matrix failed" in said
    assert {p.name for p in out.iterdir()} <= {lock.NAME, lock.STAGE}, "nothing else was written"


def _holder(out: Path, what: str, *, stage: bool, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from harness.store import lock; "
         f"held = lock.acquire(Path(sys.argv[1]), {what!r}, stage={stage}); print('held', flush=True); time.sleep(300)",
         str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_a_stage_that_outlives_its_job_still_keeps_the_folder(tmp_path: Path) -> None:
    """nox killed alone leaves its stage running: the next job takes the dead job's lock, but not the stage's."""
    matrix, out = _matrix(tmp_path), tmp_path / "build"
    fault_corpus(out, only=["add_one"])
    job = _holder(out, "nox -s matrix (the job)", stage=False)
    token = json.loads(lock.path_of(out).read_text())["token"]
    stage = _holder(out, "harness run (its stage)", stage=True, env={lock.TOKEN_ENV: f"{out.resolve()}={token}"})
    try:
        job.kill()
        job.wait()
        line = _one_line(_run(matrix, out))
        assert f"in use by a stage still running, PID {stage.pid}" in line and "(its stage)" in line
    finally:
        for proc in (job, stage):
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    assert _run(matrix, out).returncode == 0
