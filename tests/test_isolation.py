"""A fault costs one cell, and nothing is lost: real faults in the real run stage.

The artifacts (tests/artifacts.py) are real ONNX models that make the real
onnxruntime of this environment die or hang: SIGFPE in a Div kernel while
one probe runs, SIGFPE in constant folding while the session is created, and
a Loop of 2**62 iterations. No mocks: the run stage, its worker processes and
the shard on disk are the ones `nox -s run` uses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from harness.config.matrix import Matrix, load
from harness.core.records import CellRecord, ExportRecord, Stage, Status
from harness.numeric.localize import save_intermediates
from harness.run import _dispatch as dispatch
from harness.run.backends.messages import CellTask, LatencyTask
from harness.run.stage import reusable, run_runtime
from harness.store import cache, stamps
from harness.store.cache import sha256_file as sha256
from harness.store.layout import load_artifacts, read_shard, shard_path
from tests.artifacts import div_folded, fault_corpus, write_manifest

pytestmark = pytest.mark.torch  # exports with real torch: `nox -s tests`, not `nox -s unit`


ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 3


def _matrix(tmp_path: Path, workers: int = 2) -> Matrix:
    """The project's matrix with a short per-cell timeout."""
    text = (ROOT / "matrix.toml").read_text()
    text = text.replace("timeout = 120", f"timeout = {TIMEOUT}").replace("workers = 0", f"workers = {workers}")
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    return load(path)


def _by_probe(cells: list[CellRecord]) -> dict[tuple[str, str], CellRecord]:
    return {(c.case, c.probe): c for c in cells}


def test_a_crash_and_a_hang_each_cost_one_cell(tmp_path: Path) -> None:
    matrix = _matrix(tmp_path)
    out = tmp_path / "build"
    fault_corpus(out)
    runtime = matrix.runtime(onnxruntime.__version__)
    t0 = time.monotonic()
    cells = _by_probe(run_runtime(matrix, runtime, ["cpu"], out, latency=False, echo=lambda _: None))
    assert time.monotonic() - t0 < 60

    boom = cells[("div_int_min", "boom")]
    assert boom.status is Status.CRASH and boom.stage is Stage.RUN
    assert boom.error_line == "worker killed by SIGFPE while running this probe"
    hang = cells[("endless_loop", "hang")]
    assert hang.status is Status.TIMEOUT
    assert hang.error_line == f"no result after {TIMEOUT:g} s while running this probe"
    # the probes before and after each fault ran, in the first worker and in a fresh one
    for key in [("div_int_min", "example"), ("div_int_min", "after"), ("endless_loop", "example"), ("endless_loop", "after")]:
        assert cells[key].status is Status.PASS, (key, cells[key].error_line)
    assert {cells[("add_one", p)].status for p in ("example", "second")} == {Status.PASS}
    # a death while the session is created belongs to every probe of that artifact, at the load stage
    folded = cells[("div_folded", "example")]
    assert folded.status is Status.CRASH and folded.stage is Stage.LOAD
    assert folded.error_line == "worker killed by SIGFPE while creating the session"
    assert len(cells) == 9


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _run_cli(matrix: Path, out: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "harness", "run", "--matrix", str(matrix), "--out", str(out)]
    cmd += ["--runtime", onnxruntime.__version__, "--no-latency"]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_sigkilled_run_resumes_with_every_cell_once_and_finished_cells_untouched(tmp_path: Path) -> None:
    matrix = _matrix(tmp_path, workers=1)  # one worker: the order of the cells is known
    out = tmp_path / "build"
    fault_corpus(out)
    shard = shard_path(out, matrix.runtime(onnxruntime.__version__), "cpu")

    # Kill the run with SIGKILL while the endless Loop holds its worker (its example is in: its hang runs, for up to
    # the 3 s timeout). The crashes before it wait for a worker of their own, after the first round.
    proc = _run_cli(matrix.path, out)
    deadline = time.monotonic() + 60
    while not shard.exists() or not any(
        '"case": "endless_loop"' in line and '"probe": "example"' in line for line in shard.read_text().splitlines()
    ):
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, "the run never got halfway"
        time.sleep(0.05)
    time.sleep(0.5)
    workers = _children(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers):
        assert time.monotonic() < deadline, "a worker outlived the killed run"
        time.sleep(0.1)

    before = shard.read_text().splitlines()
    kept = {json.loads(line)["probe"] + "@" + json.loads(line)["case"]: line for line in before}
    assert 4 <= len(before) < 9, before
    assert "hang@endless_loop" not in kept  # it was running when the run was killed

    rerun = _run_cli(matrix.path, out)
    output = rerun.communicate(timeout=120)[0]
    assert rerun.returncode == 0, output
    assert "(2 only in part: their other probes are kept)" in output, output

    after = shard.read_text().splitlines()
    keys = [CellRecord.from_dict(json.loads(line)).key for line in after]
    assert len(keys) == len(set(keys)) == 9  # every cell, exactly once
    for line in before:  # the finished cells were not redone: byte-identical
        assert line in after
    final = _by_probe([CellRecord.from_dict(json.loads(line)) for line in after])
    assert final[("endless_loop", "hang")].status is Status.TIMEOUT
    assert final[("div_int_min", "boom")].status is Status.CRASH


def test_a_rerun_with_nothing_changed_runs_nothing(tmp_path: Path) -> None:
    matrix = _matrix(tmp_path)
    out = tmp_path / "build"
    fault_corpus(out, only=["add_one", "div_int_min"])
    runtime = matrix.runtime(onnxruntime.__version__)
    run_runtime(matrix, runtime, ["cpu"], out, latency=False, echo=lambda _: None)
    shard = shard_path(out, runtime, "cpu")
    before = shard.read_bytes()
    lines: list[str] = []
    run_runtime(matrix, runtime, ["cpu"], out, latency=False, echo=lines.append)
    assert ", 0 to run," in lines[0]
    assert shard.read_bytes() == before
    assert len(read_shard(shard)) == 5


def test_a_fault_while_localizing_costs_only_the_localization(tmp_path: Path) -> None:
    """A mismatch is decided before the extra sessions that localize it run: a worker that dies
    there leaves the mismatch standing, with a note, and the probes after it still run."""
    matrix = _matrix(tmp_path)
    out = tmp_path / "build"
    fault_corpus(out, only=["div_int_min"])
    art = out / "artifacts" / "div_int_min.torchscript.op17"
    ref = dict(np.load(art / "reference.npz"))
    ref["example/out/0"] = ref["example/out/0"] + 1  # torch "said" otherwise: a mismatch
    np.savez(art / "reference.npz", **ref)
    # The node-by-node comparison then loads a debug model whose constant folding dies of SIGFPE.
    (art / "model.debug.onnx").write_bytes(div_folded().SerializeToString())
    (art / "nodes.json").write_text(json.dumps([{"name": "#0", "op": "Div", "outputs": ["y"]}]))
    save_intermediates(art / "intermediates.npz", {"example": {"y": ref["example/out/0"]}})
    rec = json.loads((art / "export.json").read_text())
    rec["reference_sha256"] = sha256(art / "reference.npz")
    (art / "export.json").write_text(json.dumps(rec))

    cells = _by_probe(
        run_runtime(matrix, matrix.runtime(onnxruntime.__version__), ["cpu"], out, latency=False, echo=lambda _: None)
    )
    example = cells[("div_int_min", "example")]
    assert example.status is Status.MISMATCH
    assert example.localization == "output y of node #0 (Div): 2/2 elements differ, max abs 1, max rel 1"
    assert example.note == "localizing this mismatch was cut short: worker killed by SIGFPE"
    assert cells[("div_int_min", "boom")].status is Status.CRASH
    assert cells[("div_int_min", "after")].status is Status.PASS


def test_a_worker_that_dies_after_its_last_cell_costs_nothing(tmp_path: Path) -> None:
    """Every cell is in when the worker dies on its way out (the real backend, whose session kills the worker
    when it is let go: tests.faults.DiesOnItsWayOut): the cells stand, nothing is charged."""
    matrix = _matrix(tmp_path)
    out = tmp_path / "build"
    fault_corpus(out, only=["add_one"])
    records = {r.key.id: r for r in load_artifacts(out)}
    backend = "tests.faults:DiesOnItsWayOut"
    pin = "onnxruntime==1.32.0"
    tasks = [CellTask(str(out / "artifacts" / a), pin, "cpu", backend, {}, {}, r.probes, {}) for a, r in records.items()]
    log = tmp_path / "log"
    cells = list(dispatch.correctness(tasks, records, workers=1, timeout=matrix.run.timeout, log=log, stats=dispatch.Stats()))
    assert sorted((c.case, c.probe) for c in cells) == [("add_one", "example"), ("add_one", "second")]
    assert {c.status for c in cells} == {Status.PASS}
    assert "dying on the way out" in log.read_text()  # it did die, after its last cell


def test_a_crash_that_a_fresh_worker_does_not_repeat_is_not_charged_to_the_cell(tmp_path: Path) -> None:
    """A worker that dies creating a session after running another artifact: the probes run again in a worker of
    their own, pass there, and say what happened first; a crash that repeats in a fresh worker is the cell's."""
    matrix = _matrix(tmp_path)
    out = tmp_path / "build"
    ids = fault_corpus(out, only=["add_one"]) + fault_corpus(out, only=["add_one"], opset=18)
    write_manifest(out, ids)
    records = {r.key.id: r for r in load_artifacts(out)}
    backend, pin = "tests.faults:DiesAfterItsFirstSession", "onnxruntime==1.32.0"
    tasks = [CellTask(str(out / "artifacts" / a), pin, "cpu", backend, {}, {}, records[a].probes, {}) for a in ids]
    stats, log = dispatch.Stats(), tmp_path / "log"
    cells = list(dispatch.correctness(tasks, records, workers=1, timeout=matrix.run.timeout, log=log, stats=stats))
    assert len(cells) == 4 and {c.status for c in cells} == {Status.PASS}
    first, second = ([c for c in cells if c.artifact.id == a] for a in ids)
    assert all(c.note is None for c in first)
    assert {c.note for c in second} == {
        "a worker died here first (worker killed by SIGSEGV while creating the session); a fresh worker ran it"
    }
    # A crash that repeats in a fresh worker is the artifact's own, as before (test_a_crash_and_a_hang_each_cost_one_cell).

    # The latency phase likewise: its one worker dies timing the second artifact; a worker of its own times it.
    lat = {"iobinding": True, "threads": 1, "warmup": 1, "min_runs": 3, "max_runs": 6, "budget_seconds": 0.2, "stability": 0.5}
    timing = [LatencyTask(str(out / "artifacts" / a), "cpu", backend, lat, {}) for a in ids]
    todo = {c.artifact.id: c for c in cells if c.probe == "example"}
    timed = list(dispatch.latency(timing, todo, timeout=matrix.run.timeout, log=log, stats=stats))
    assert sorted(c.artifact.id for c in timed) == sorted(ids) and all(c.latency and c.latency.runs >= 3 for c in timed)


def test_an_internal_fault_of_the_runtime_at_load_is_charged_only_once_a_fresh_worker_repeats_it(tmp_path: Path) -> None:
    """onnxruntime's RUNTIME_EXCEPTION creating a session after other sessions in the worker (OpenVINO 1.23.0 read a
    garbage node index so, now and then; tests.faults raises that very exception): the probes run again in a worker
    of their own and pass there, saying so; a fault that repeats there is the artifact's load-fail."""
    matrix = _matrix(tmp_path)
    out = tmp_path / "build"
    ids = fault_corpus(out, only=["add_one"]) + fault_corpus(out, only=["add_one"], opset=18)
    write_manifest(out, ids)
    records = {r.key.id: r for r in load_artifacts(out)}
    stats, log, pin = dispatch.Stats(), tmp_path / "log", "onnxruntime==1.32.0"

    def run(backend: str) -> list[CellRecord]:
        tasks = [CellTask(str(out / "artifacts" / a), pin, "cpu", backend, {}, {}, records[a].probes, {}) for a in ids]
        return list(dispatch.correctness(tasks, records, workers=1, timeout=matrix.run.timeout, log=log, stats=stats))

    cells = run("tests.faults:FaultsAfterItsFirstSession")
    assert len(cells) == 4 and {c.status for c in cells} == {Status.PASS}
    first, second = ([c for c in cells if c.artifact.id == a] for a in ids)
    assert all(c.note is None for c in first)
    (note,) = {c.note for c in second}
    assert note.startswith("its session failed to load in a worker that ran others first ([ONNXRuntimeError] : 6 : ")
    assert note.endswith("); a fresh worker ran it")

    cells = run("tests.faults:AlwaysFaults")
    assert len(cells) == 4 and {c.status for c in cells} == {Status.LOAD_FAIL}
    assert all("RUNTIME_EXCEPTION" in (c.error_line or "") and (c.note or "").endswith("a fresh worker ran it") for c in cells)


def _mismatch(**changes: object) -> tuple[CellRecord, str]:
    rec = ExportRecord("c", "dynamo", 18, ok=True, seconds=0, probes=("example",), sha256="m", reference_sha256="r")
    key = cache.cell_key(
        rec.digest,
        ["onnxruntime==1.32.0"],
        "cpu",
        "example",
        {},
        stamps.run_code(load(ROOT / "matrix.toml").runtime("onnxruntime==1.32.0")),
    )
    cell = rec.cell("onnxruntime==1.32.0", "cpu", {}, probe="example", status=Status.MISMATCH, stage=Stage.COMPARE, cache_key=key)
    return cell.replace(**changes), key


def test_resume_redoes_a_mismatch_whose_localization_a_killed_run_left_undone() -> None:
    done, key = _mismatch(localization="starts at node /Max (Max)", optimizer=False)
    assert reusable(done, key)
    assert not reusable(done.replace(optimizer=None), key)  # streamed, then the run was killed while localizing
    assert not reusable(done.replace(note="localizing this mismatch was cut short: no result after 3 s"), key)
    assert not reusable(done.replace(status=Status.CRASH, error_class="HarnessError"), key)  # a harness bug, since fixed
    assert not reusable(done.replace(cache_key="another key"), key)  # another artifact, runtime or setting
    assert reusable(done.replace(status=Status.CRASH, error_class="Crash"), key)  # a real fault of this artifact stands
    assert not reusable(done.replace(status=Status.TIMEOUT, error_class="Timeout"), key)  # maybe the machine's load
