"""Tasks that fail for real, for the isolation tests."""

from __future__ import annotations

import os
import signal
import time


def act(task: str) -> int:
    if task == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    if task == "abort":
        os.abort()
    if task == "hang":
        time.sleep(600)
    if task == "raise":
        raise ValueError("asked to raise")
    return int(task.split(":")[1])


def pid(task: int) -> int:
    return os.getpid()
