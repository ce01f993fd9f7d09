"""Isolation: a worker killed by a signal, a hang, or a raise costs its own task only.

Real faults in real processes (tests/faults.py), no mocks.
"""

from __future__ import annotations

import time

from harness.workers import run_tasks


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
