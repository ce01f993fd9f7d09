"""Worker processes that survive what a cell does to them.

A segfault, an abort or a hang in one task costs that task alone: the pool
notices the dead process (its sentinel) or the missed deadline, reports the
task as crashed or timed out, and starts a fresh worker for the rest. Unlike
``concurrent.futures.ProcessPoolExecutor``, one death does not break the pool.

Workers are spawned (not forked from the caller), run an initializer once
(import the runtime, load the corpus) and then take tasks: ``(function,
payload)`` where function is ``"module:name"`` resolved in the worker and
payload is picklable.

With ``fresh=True`` every task gets a new process, forked from a fork server
that has imported ``preload`` once: no task sees state an earlier one left
behind. The export stage needs this: torch's exporters cache per process (a
second dynamo export of an ``nn.LSTM`` with a dynamic sequence length fails
where the first succeeds), and a table cell must not depend on which cells
its worker happened to export before it.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import importlib
import inspect
import multiprocessing as mp
import os
import signal
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from multiprocessing.connection import Connection, wait
from typing import Any

_SPAWN = mp.get_context("spawn")
_FORKSERVER = mp.get_context("forkserver")


@dataclasses.dataclass(frozen=True)
class TaskResult:
    """What became of one task."""

    task: Any
    kind: str
    """``item`` (a generator task yielded; more follows), ``ok`` (done), ``error`` (the function
    raised), ``crash`` (the worker died) or ``timeout``."""
    value: Any = None
    """The yielded item for ``item``; the return value for ``ok`` (None for a generator); a description otherwise."""
    seconds: float = 0.0
    """Since the task was handed over (``ok``, ``error``) or since its last item (``crash``, ``timeout``)."""


def launch_through(launcher: str) -> None:
    """Start every later process of this one through ``launcher`` (an executable that runs Python as a platform needs:
    :mod:`harness.config.launchers`): the spawned workers, the fork server and the resource tracker (multiprocessing's
    executable), and what reads ``sys.executable`` (the environment probe). Without binfmt_misc a process that an
    emulated one starts by exec would run natively, or not at all: a platform column would measure another CPU."""
    sys.executable = launcher
    mp.set_executable(launcher)


def _resolve(ref: str) -> Callable[..., Any]:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None) -> None:
    """Linux: the kernel kills this process when its parent dies, even by SIGKILL, so a killed run
    leaves no worker spinning in a hung kernel behind it. A fork does not inherit it: call it in
    every child, with ``parent`` the pid the child was forked from (taken before the fork), to exit
    at once if that parent is already gone."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def _worker_main(conn: Connection, init: str | None, initargs: tuple[Any, ...], log: str | None) -> None:
    die_with_parent()
    if log:  # native libraries print to fd 1/2; keep the parent's terminal clean
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    if init:
        _resolve(init)(*initargs)
    conn.send(("ready", None))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg is None:
            return
        ref, payload = msg
        try:
            result = _resolve(ref)(payload)
            if inspect.isgenerator(result):  # stream: each item reaches the parent before the next starts
                for item in result:
                    conn.send(("item", item))
                result = None
            conn.send(("ok", result))
        except BaseException as exc:  # report, never die on a Python error
            conn.send(("error", (type(exc).__name__, str(exc), traceback.format_exc())))


class _Worker:
    def __init__(self, init: str | None, initargs: tuple[Any, ...], log: str | None, ctx: Any) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, init, initargs, log), daemon=True)
        self.proc.start()
        child.close()
        self.ready = False
        self.task: Any = None
        self.started = 0.0
        self.budget = 0.0
        """Seconds the task may go from ``started`` without a result (an item can set it anew)."""
        self.since = 0.0
        """When the task was handed over (``started`` moves with each item)."""

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()

    def retire(self) -> None:
        """Ask an idle worker to exit on its own, without waiting for it: its exit handlers run (a semaphore
        a library made, tqdm's lock say, is unlinked rather than reported leaked). :func:`run_tasks` reaps it
        later, or kills it if it does not go within :data:`_RETIRE_SECONDS`."""
        with contextlib.suppress(OSError):
            self.conn.send(None)


def describe_exit(exitcode: int | None) -> str:
    """``killed by SIGSEGV`` / ``exited with status 3``."""
    if exitcode is None:
        return "worker died"
    if exitcode < 0:
        try:
            return f"worker killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"worker killed by signal {-exitcode}"
    return f"worker exited with status {exitcode}"


def run_tasks(
    ref: str,
    tasks: Iterable[Any],
    *,
    workers: int,
    timeout: float | Callable[[Any], float],
    init: str | None = None,
    initargs: tuple[Any, ...] = (),
    log: str | None = None,
    fresh: bool = False,
    preload: tuple[str, ...] = (),
    admit: Callable[[Any, list[Any]], bool] | None = None,
    heartbeat: tuple[float, Callable[[list[tuple[Any, float]]], None]] | None = None,
) -> Iterator[TaskResult]:
    """Run ``ref(task)`` for every task in ``workers`` processes; yield outcomes as they come.

    (Over 60 lines, on purpose: the pool's one event loop, which hands out tasks, waits on pipes, sentinels and
    deadlines together, and replaces a dead worker, reads best in one piece.)

    ``ref`` may be a generator function: each item it yields is an ``item``
    outcome at once, then ``ok`` ends the task. A crash or hang after some
    items is still one ``crash``/``timeout`` outcome; the items before it stand.

    ``timeout`` (seconds, or a function of the task) bounds each task, counted
    from when it was handed to a worker or from its last item, whichever is
    later (worker start-up, which imports the runtime, is not counted against
    it). An item with a number as its ``budget`` (an attribute, or a mapping's key) sets the
    seconds allowed until the next item: a task whose phases need different
    bounds says so as it enters each (the export, then the reference pass).
    ``fresh`` gives each task its own process, forked from a server that has
    imported ``preload``. ``admit(task, running)`` holds the next task back
    until it returns True for the tasks running now (a memory budget); with
    nothing running a task always starts. ``heartbeat = (seconds, call)``
    calls ``call`` with each running task and its seconds so far, every
    ``seconds`` while any runs.
    """
    queue = deque(tasks)
    if not queue:
        return
    budget_of = timeout if callable(timeout) else (lambda _task: float(timeout))
    ctx: Any = _SPAWN
    if fresh:
        ctx = _FORKSERVER
        # First: the server dies with this process. Then the main module (multiprocessing's own default, which a list
        # replaces): imported once by the server, so a child does not run it again from disk (the CLI's imports, each
        # task; a file edited while the export runs would fail every later task's start). Last: what the server holds
        # is frozen out of its children's garbage collections.
        ctx.set_forkserver_preload(["harness.pool._forkserver", "__main__", *preload, "harness.pool._freeze"])
    pool = [_Worker(init, initargs, log, ctx) for _ in range(max(1, min(workers, len(queue))))]
    retiring: list[tuple[_Worker, float]] = []  # fresh workers whose task is done, exiting on their own
    beat = time.monotonic()
    try:
        while queue or any(w.task is not None for w in pool):
            for w in pool:
                if w.ready and w.task is None and queue:
                    running = [v.task for v in pool if v.task is not None]
                    if running and admit is not None and not admit(queue[0], running):
                        break
                    w.task, w.started = queue.popleft(), time.monotonic()
                    w.since, w.budget = w.started, float(budget_of(w.task))
                    w.conn.send((ref, w.task))
            deadlines = [w.started + w.budget for w in pool if w.task is not None]
            if heartbeat is not None and deadlines:
                deadlines.append(beat + heartbeat[0])
            wait_for = max(0.0, min(deadlines) - time.monotonic()) if deadlines else None
            ready = wait([w.conn for w in pool] + [w.proc.sentinel for w in pool], wait_for)
            now = time.monotonic()
            if heartbeat is not None and now >= beat + heartbeat[0]:
                beat = now
                active = [(w.task, now - w.since) for w in pool if w.task is not None]
                if active:
                    heartbeat[1](active)
            survivors: list[_Worker] = []
            for w in pool:
                outcome, dead = _poll(w, ready, now, log)
                done = fresh and not dead and outcome is not None and outcome.kind in ("ok", "error")
                if outcome is not None:
                    yield outcome
                if done:  # its one task is over: it exits as a process should (its semaphores, temp folders go)
                    w.retire()
                    retiring.append((w, now + _RETIRE_SECONDS))
                if dead or done:
                    if dead:
                        w.kill()
                    if queue:
                        survivors.append(_Worker(init, initargs, log, ctx))
                else:
                    survivors.append(w)
            pool = survivors
            retiring = [(w, by) for w, by in retiring if not _gone(w, by, now)]
    finally:
        for w in pool:
            with contextlib.suppress(OSError):
                w.conn.send(None)
        for w in pool:
            w.proc.join(2)
            w.kill()
        for w, by in retiring:
            w.proc.join(max(0.0, by - time.monotonic()))
            w.kill()


_RETIRE_SECONDS = 5.0
"""How long a retired worker may take to exit before it is killed."""


def _gone(w: _Worker, by: float, now: float) -> bool:
    """Whether a retired worker has exited (reaped), or overstayed ``by`` (killed)."""
    if w.proc.is_alive() and now < by:
        return False
    w.kill()  # reaps an exited process; kills one that overstayed
    return True


def _poll(w: _Worker, ready: list[Any], now: float, log: str | None) -> tuple[TaskResult | None, bool]:
    """What one worker has to say: (finished task's outcome, whether the worker is gone)."""
    if w.conn in ready:
        try:
            kind, value = w.conn.recv()
        except (EOFError, OSError):
            kind, value = "dead", None
        if kind == "ready":
            w.ready = True
            return None, False
        if kind == "item":  # the task goes on; its clock restarts, with the budget the item sets if it sets one
            outcome = TaskResult(w.task, kind, value, now - w.started)
            w.started = now
            budget = value.get("budget") if isinstance(value, Mapping) else getattr(value, "budget", None)
            if isinstance(budget, (int, float)) and not isinstance(budget, bool):
                w.budget = float(budget)
            return outcome, False
        if kind != "dead":
            outcome = TaskResult(w.task, kind, value, now - w.started)
            w.task = None
            return outcome, False
    if w.conn in ready or w.proc.sentinel in ready:
        w.proc.join(5)
        reason = describe_exit(w.proc.exitcode)
        if w.task is None:
            if not w.ready:
                raise RuntimeError(f"worker failed to start ({reason}); see {log or 'stderr'}")
            return None, True
        return TaskResult(w.task, "crash", reason, now - w.started), True
    if w.task is not None and now >= w.started + w.budget:
        return TaskResult(w.task, "timeout", f"no result after {w.budget:g} s", now - w.started), True
    return None, False


def available_mib() -> float | None:
    """The memory the kernel says new work can take without swapping (``MemAvailable``), in MiB."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


class MemoryGate:
    """Workers sized by memory as well as by cores: ``admit`` (for :func:`run_tasks`) lets a task start
    only while the memory expected of it and of the tasks already running fits ``fraction`` of what was
    available when the stage began. ``expected(task)`` is in MiB (a model's measured peak, say). Where
    the machine does not say what is available, every task is admitted."""

    def __init__(self, expected: Callable[[Any], float], *, budget_mib: float | None = None, fraction: float = 0.85) -> None:
        self.expected = expected
        available = available_mib() if budget_mib is None else budget_mib
        self.budget = None if available is None else available * (fraction if budget_mib is None else 1.0)
        self.held = 0
        """How many times a task was held back (for a test or a benchmark to see that it bit)."""

    def admit(self, task: Any, running: list[Any]) -> bool:
        if self.budget is None:
            return True
        fits = sum(self.expected(t) for t in running) + self.expected(task) <= self.budget
        self.held += not fits
        return fits
