"""What a killed, forged or edited build leaves is redone, never trusted (issue 26, findings 2, 3 and 7).

A shard's seal vouches for its bytes: a rerun reuses a sealed shard only when its bytes are the sealed ones,
and a shard whose run was killed only up to the last checkpoint its open seal holds; anything else is redone
whole. An artifact edited in place with its modification time put back is exported again. A writer refused
between a killed job and the next leaves the dead job's word in the lock, so the next job says it took over.
Real `harness` processes, real SIGKILLs, real bytes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import onnxruntime
import pytest

from harness.config.matrix import Matrix
from harness.store import cache, layout
from harness.store.layout import load_artifacts, shard_path
from tests.artifacts import fault_corpus
from tests.artifacts import forge as _forge
from tests.test_cache import NEWEST, _export, _plan, user_corpus  # noqa: F401 (the fixture)
from tests.test_reliability import PROFILE, ROOT, _holder, _matrix, _one_line, _published, _report, _run

pytestmark = pytest.mark.torch  # exports with real torch: `nox -s tests`, not `nox -s unit`


def _statuses(shard: Path) -> dict[str, str]:
    return {f"{c.case} {c.probe}": c.status.value for c in layout.read_shard(shard).values()}


def _published_statuses(results: Path) -> dict[str, str]:
    rows = [json.loads(line) for line in (results / "matrix.jsonl").read_text().splitlines()]
    return {f"{r['case']} {r['probe']}": r["status"] for r in rows if "probe" in r}


# Finding 2: a line forged under a broken seal ------------------------------------------------------------


def test_a_shard_that_no_longer_matches_its_seal_is_redone_whole_never_resealed(tmp_path: Path) -> None:
    matrix, out, results = _matrix(tmp_path), tmp_path / "build", tmp_path / "results"
    fault_corpus(out, only=["add_one", "div_int_min"])
    _published(matrix, out, results)
    shard = shard_path(out, matrix.runtime(onnxruntime.__version__), "cpu")
    honest = _statuses(shard)
    assert honest["div_int_min boom"] == "crash"

    for damage in ("forged", "forged, its seal deleted"):
        key = _forge(shard, "crash", "pass")
        if "deleted" in damage:
            layout.stamp_of(shard).unlink()
        assert _statuses(shard)[key] == "pass", "the forged line holds its own checksum"
        rerun = _run(matrix, out)
        assert rerun.returncode == 0, rerun.stderr
        said = "has no seal beside it" if "deleted" in damage else "changed after its run sealed it"
        assert f"{said}: none of its cells is reused, every cell runs again" in rerun.stdout, (damage, rerun.stdout)
        assert "5 to run" not in rerun.stdout and "2 artifacts, 2 to run" in rerun.stdout, rerun.stdout
        assert _statuses(shard) == honest, f"{damage}: the forged pass must not survive the rerun"
        assert layout.problem(shard, matrix.runtime(onnxruntime.__version__).pin, "cpu", load_artifacts(out)) is None
        assert _report(matrix, out, results).returncode == 0
        assert _published_statuses(results)["div_int_min boom"] == "crash", damage


def _killed_mid_shard(matrix: Matrix, out: Path) -> Path:
    """A real `harness run` SIGKILLed while the endless Loop holds its worker (add_one's cells are in)."""
    shard = shard_path(out, matrix.runtime(onnxruntime.__version__), "cpu")
    cmd = [sys.executable, "-m", "harness", "run", "--matrix", str(matrix.path), "--profile", PROFILE, "--out", str(out)]
    proc = subprocess.Popen([*cmd, "--runtime", onnxruntime.__version__, "--no-latency"], cwd=ROOT,
                            start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 60
    while b'"endless_loop"' not in (shard.read_bytes() if shard.exists() else b""):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
        time.sleep(0.05)
    time.sleep(0.3)  # the checkpoint follows the line it vouches for
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    return shard


def test_a_killed_run_resumes_only_the_lines_its_last_checkpoint_vouches_for(tmp_path: Path) -> None:
    matrix, first = _matrix(tmp_path), tmp_path / "first"
    fault_corpus(first, only=["add_one", "endless_loop"])
    shard = _killed_mid_shard(matrix, first)
    seal = json.loads(layout.stamp_of(shard).read_text())
    assert seal["state"] == "running" and seal["checkpoint"]["bytes"] == len(shard.read_bytes()), seal
    pin = matrix.runtime(onnxruntime.__version__).pin
    assert "is not sealed" in (layout.problem(shard, pin, "cpu", load_artifacts(first)) or ""), "the report refuses it"
    copies = {}
    for name in ("resumed", "prefix edited", "forged past the checkpoint", "seal deleted"):
        copies[name] = tmp_path / name.replace(" ", "_")
        shutil.copytree(first, copies[name])

    # Untouched: every checkpointed cell is kept; endless_loop's example is in, so it runs only in part.
    resumed = _run(matrix, copies["resumed"])
    assert resumed.returncode == 0 and "2 artifacts, 1 to run (1 only in part" in resumed.stdout, resumed.stdout

    # A line inside the checkpointed prefix edited (its checksum recomputed): the bytes no longer extend it.
    edited = shard_path(copies["prefix edited"], matrix.runtime(onnxruntime.__version__), "cpu")
    _forge(edited, "pass", "mismatch")
    proc = _run(matrix, copies["prefix edited"])
    assert "does not extend its run's last checkpoint: none of its cells is reused" in proc.stdout, proc.stdout
    assert "2 artifacts, 2 to run" in proc.stdout and set(_statuses(edited).values()) <= {"pass", "timeout"}

    # A pass for the hanging probe appended after the last checkpoint: left out, the probe runs (and times out).
    forged = shard_path(copies["forged past the checkpoint"], matrix.runtime(onnxruntime.__version__), "cpu")
    line = next(ln for ln in forged.read_text().splitlines() if '"endless_loop"' in ln)
    data, _ = cache.unseal(line)
    assert data is not None
    data.update(probe="hang", status="pass")
    with open(forged, "a", encoding="utf-8") as f:
        f.write(cache.seal(data) + "\n")
    proc = _run(matrix, copies["forged past the checkpoint"])
    assert proc.returncode == 0 and "1 to run (1 only in part" in proc.stdout, proc.stdout
    assert _statuses(forged)["endless_loop hang"] == "timeout"

    # No seal file at all: evidence of nothing, redone whole.
    gone = shard_path(copies["seal deleted"], matrix.runtime(onnxruntime.__version__), "cpu")
    layout.stamp_of(gone).unlink()
    proc = _run(matrix, copies["seal deleted"])
    assert "has no seal beside it: none of its cells is reused" in proc.stdout and "2 artifacts, 2 to run" in proc.stdout


# Finding 3, the build side: an artifact edited in place, its modification time put back --------------------


def test_an_artifact_edited_in_place_with_its_mtime_put_back_is_exported_again(tmp_path: Path, user_corpus: Path) -> None:  # noqa: F811
    out = tmp_path / "build"
    _export(out, user_corpus)
    assert _plan(out, user_corpus).export is None
    ref = out / "artifacts" / "double.torchscript.op18" / "reference.npz"
    before = ref.stat()
    data = bytearray(ref.read_bytes())
    data[-30] ^= 0xFF  # the same size, other bytes, in place (the store's file is the same inode)
    with open(ref, "r+b") as f:
        f.write(data)
    os.utime(ref, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (ref.stat().st_size, ref.stat().st_mtime_ns, ref.stat().st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino)
    why = _plan(out, user_corpus).export or ""
    assert "double.torchscript.op18: cache entry" in why and "does not match its recorded SHA-256" in why, why
    lines = _export(out, user_corpus)
    assert "export: 3 artifacts, 2 cached, 1 to export" in lines, lines
    assert _plan(out, user_corpus).export is None, "exported again, and the plan trusts it again"
    assert not layout.damaged(out, load_artifacts(out))


def test_the_store_reads_a_file_again_only_after_its_change_time_moved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's own views are linked before their signatures are recorded: a check after the export reads
    nothing; a hard link made elsewhere moves the change time and costs one read, then none."""
    store = cache.ExportStore(tmp_path / "store")
    tmp = store.begin("k")
    (tmp / "model.onnx").write_bytes(b"weights " * 1000)
    store.commit("k", "case.torchscript.op18", tmp)
    store.link("k", tmp_path / "view")
    read: list[str] = []
    real = cache.sha256_file

    def counted(path: Path) -> str:
        read.append(str(path))
        return real(path)

    monkeypatch.setattr(cache, "sha256_file", counted)
    assert store.check("k") is None and read == []
    (tmp_path / "elsewhere").mkdir()
    os.link(tmp_path / "view" / "model.onnx", tmp_path / "elsewhere" / "model.onnx")
    assert store.check("k") is None and len(read) == 1
    assert store.check("k") is None and len(read) == 1


# Finding 7, the lock: a refused writer between a killed job and the next -----------------------------------


def test_the_next_job_says_it_took_over_even_after_a_refused_writer_came_between(tmp_path: Path) -> None:
    from harness.store import lock

    matrix, out = _matrix(tmp_path), tmp_path / "build"
    fault_corpus(out, only=["add_one"])
    job = _holder(out, "nox -s matrix (the job)", stage=False)
    token = json.loads(lock.path_of(out).read_text())["token"]
    stage = _holder(out, "harness run (its stage)", stage=True, env={lock.TOKEN_ENV: f"{out.resolve()}={token}"})
    try:
        job.kill()  # SIGKILL: the job's lock is abandoned, its stage still holds the stage lock
        job.wait()
        assert "in use by a stage still running" in _one_line(_run(matrix, out))  # the refused writer
    finally:
        for proc in (job, stage):
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    took = _run(matrix, out)
    assert took.returncode == 0, took.stderr
    assert f"took over the lock of PID {job.pid}" in took.stderr and "(the job)" in took.stderr, took.stderr
