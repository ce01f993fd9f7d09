"""Isolation: a worker killed by a signal, a hang, or a raise costs its own task only.

Real faults in real processes (tests/faults.py), no mocks.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.pool.workers import run_tasks

pytestmark = pytest.mark.slow  # seconds a test: `nox -s tests` runs them, `nox -s unit` leaves them out

ROOT = Path(__file__).resolve().parent.parent


def test_crash_timeout_and_error_each_cost_one_task() -> None:
    tasks = ["ok:1", "segv", "ok:2", "hang", "ok:3", "raise", "abort", "ok:4"]
    t0 = time.monotonic()
    outcomes = {o.task: o for o in run_tasks("tests.faults:act", tasks, workers=2, timeout=3)}
    assert time.monotonic() - t0 < 30
    assert set(outcomes) == set(tasks)
    assert [outcomes[f"ok:{i}"].value for i in range(1, 5)] == [1, 2, 3, 4]
    assert outcomes["segv"].kind == "crash" and outcomes["segv"].value == "worker killed by SIGSEGV"
    assert outcomes["abort"].kind == "crash" and outcomes["abort"].value == "worker killed by SIGABRT"
    assert outcomes["hang"].kind == "timeout" and outcomes["hang"].seconds >= 3
    assert outcomes["raise"].kind == "error" and outcomes["raise"].value[:2] == ("ValueError", "asked to raise")


def test_no_tasks_starts_nothing() -> None:
    assert list(run_tasks("tests.faults:act", [], workers=2, timeout=1)) == []


def test_fresh_gives_every_task_its_own_process_and_still_survives_a_crash() -> None:
    outcomes = list(run_tasks("tests.faults:pid", range(6), workers=2, timeout=30, fresh=True, preload=("json",)))
    assert sorted(o.task for o in outcomes) == list(range(6))
    assert len({o.value for o in outcomes}) == 6
    crashed = {o.task: o for o in run_tasks("tests.faults:act", ["ok:1", "segv", "ok:2"], workers=1, timeout=30, fresh=True)}
    assert crashed["segv"].kind == "crash" and crashed["ok:2"].value == 2


def test_a_stream_delivers_items_before_the_fault_and_the_clock_restarts_per_item() -> None:
    tasks = ["1,2,segv,4", "1,hang", "1,2,3"]
    got: dict[str, list[object]] = {t: [] for t in tasks}
    kinds: dict[str, list[str]] = {t: [] for t in tasks}
    for o in run_tasks("tests.faults:stream", tasks, workers=2, timeout=2):
        kinds[o.task].append(o.kind)
        if o.kind == "item":
            got[o.task].append(o.value)
    assert got == {"1,2,segv,4": [1, 2], "1,hang": [1], "1,2,3": [1, 2, 3]}
    assert kinds["1,2,segv,4"] == ["item", "item", "crash"]
    assert kinds["1,hang"] == ["item", "timeout"]
    assert kinds["1,2,3"] == ["item", "item", "item", "ok"]


def test_each_item_resets_the_timeout() -> None:
    """Five steps of 0.6 s each outlast a 1 s timeout in all, but no single step does."""
    outcomes = list(run_tasks("tests.faults:slow_stream", [5], workers=1, timeout=1))
    assert [o.kind for o in outcomes] == ["item"] * 5 + ["ok"]


def test_workers_die_with_a_sigkilled_parent(tmp_path: Path) -> None:
    """A run killed with SIGKILL leaves no worker behind (PR_SET_PDEATHSIG), even one stuck in a task."""
    script = (
        "import sys; from harness.pool.workers import run_tasks\n"
        "for o in run_tasks('tests.faults:report_pid', [sys.argv[1]], workers=1, timeout=600): pass\n"
    )
    pidfile = tmp_path / "pid"
    proc = subprocess.Popen([sys.executable, "-c", script, str(pidfile)], cwd=ROOT)
    deadline = time.monotonic() + 60
    while not pidfile.exists() or not pidfile.read_text():
        assert time.monotonic() < deadline, "the worker never started"
        time.sleep(0.1)
    worker = int(pidfile.read_text())
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while _alive(worker):
        assert time.monotonic() < deadline, f"worker {worker} outlived its killed parent"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_an_item_sets_the_budget_of_the_phase_it_starts() -> None:
    """A task's own budget bounds its first phase; an item with "budget" sets the next: a phase that
    sleeps 1.5 s passes under a 2 s budget though the task's own is 1 s, and one past its budget is killed."""
    ok = list(run_tasks("tests.faults:phases", ["1:0.2,2:1.5"], workers=1, timeout=1))
    assert [o.kind for o in ok] == ["item", "item", "ok"]
    late = list(run_tasks("tests.faults:phases", ["5:0.2,0.5:3"], workers=1, timeout=1))
    assert [o.kind for o in late] == ["item", "item", "timeout"]
    assert late[-1].value == "no result after 0.5 s"
    per_task = list(run_tasks("tests.faults:act", ["hang"], workers=1, timeout=lambda task: 0.5))
    assert per_task[0].kind == "timeout" and per_task[0].value == "no result after 0.5 s"


def test_the_memory_gate_holds_a_task_back_until_it_fits() -> None:
    """Two workers, a budget that fits one task at a time: the tasks run one after the other, and a task
    too large for the budget on its own still runs (alone)."""
    from harness.pool.workers import MemoryGate

    gate = MemoryGate(lambda task: 600.0 if task != "huge" else 5000.0, budget_mib=1000.0)
    outcomes = list(run_tasks("tests.faults:hold", ["a", "b", "huge", "c"], workers=2, timeout=30, admit=gate.admit))
    spans = sorted((float(s), float(e)) for _, s, e in (o.value.split(":") for o in outcomes))
    assert len(spans) == 4 and all(later[0] >= earlier[1] for earlier, later in itertools.pairwise(spans))
    assert gate.held >= 3
    assert MemoryGate(lambda task: 1.0, budget_mib=1000.0).admit("x", ["y"] * 998)  # fits: admitted


def test_a_heartbeat_names_the_running_tasks() -> None:
    seen: list[list[tuple[object, float]]] = []
    list(run_tasks("tests.faults:slow_stream", [3], workers=1, timeout=5, heartbeat=(0.5, seen.append)))
    assert seen and all(task == 3 and seconds >= 0 for beat in seen for task, seconds in beat)


def test_a_fresh_worker_exits_as_a_process_should_and_leaves_no_semaphore() -> None:
    """tqdm makes a multiprocessing lock inside a dynamo export; a worker killed after its task leaked it
    (the resource tracker's warning at exit). Retired workers exit normally: no warning."""
    code = (
        "from harness.pool.workers import run_tasks\n"
        "print(sorted(o.value for o in run_tasks('tests.faults:tqdm_lock', [1, 2, 3], workers=2, timeout=30, fresh=True)))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[1, 2, 3]", proc.stderr
    assert "leaked semaphore" not in proc.stderr, proc.stderr
