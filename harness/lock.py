"""One writer per folder: the build folder (``--out``) and the report's folder (``--results``).

Two runs writing one build folder at once tear each other's files (an export's temporary folder
removed under the other, a report holding only the other run's cases). Every stage that writes
takes the folder's lock first; a second writer is refused at once with one line naming the holder.

The lock is ``fcntl.flock`` on ``<folder>/.harness.lock``: the kernel releases it when its holder
dies, however it dies, so a lock left by a killed run is never in the way (the next writer takes it
over and says so). The file's content only tells who holds it: PID, start time, command.

``nox -s matrix`` holds the build folder's lock for the whole job and hands it to the stages it starts
through the environment (:data:`TOKEN_ENV`): a stage that finds the lock held by the job that
started it goes on; any other writer is refused.

Standard library only (the noxfile takes the lock before any environment exists).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import fcntl
import json
import os
import secrets
import sys
from pathlib import Path
from typing import IO, Any

from harness.errors import HarnessError

NAME = ".harness.lock"
TOKEN_ENV = "HARNESS_LOCKS"
"""``folder=token`` pairs, ``os.pathsep``-separated: the locks the process that started this one holds for it."""


def path_of(folder: Path) -> Path:
    return folder / NAME


def _held_for_us(path: Path) -> bool:
    """Whether the process that started this one holds ``path`` and handed it down."""
    handed = dict(p.rpartition("=")[::2] for p in os.environ.get(TOKEN_ENV, "").split(os.pathsep) if "=" in p)
    token = handed.get(str(path.parent.resolve()))
    if not token:
        return False
    holder = _read(path)
    return holder.get("token") == token and _alive(holder.get("pid"))


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8", errors="replace") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _holder(data: dict[str, Any]) -> str:
    if not data:
        return "another process (it has not said which yet)"
    return f"PID {data.get('pid')} since {data.get('started', '?')} ({data.get('command', '?')})"


class Lock:
    """A held lock: ``release()`` (or leaving the ``with``) lets the next writer in."""

    def __init__(self, path: Path, f: IO[str] | None, token: str | None, took_over: dict[str, Any]) -> None:
        self.path, self._f, self.token, self.took_over = path, f, token, took_over

    def env(self) -> dict[str, str]:
        """The environment that hands this lock to a stage started as a child process."""
        if self.token is None:
            return {}
        pairs = [p for p in os.environ.get(TOKEN_ENV, "").split(os.pathsep) if p]
        return {TOKEN_ENV: os.pathsep.join([*pairs, f"{self.path.parent.resolve()}={self.token}"])}

    def release(self) -> None:
        if self._f is None:
            return
        with contextlib.suppress(OSError):
            self._f.seek(0)
            self._f.truncate()  # the file stays (unlinking it would race a writer opening it); its content goes
        self._f.close()  # closing the descriptor releases the flock
        self._f = None

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def acquire(folder: Path, what: str, echo: Any = None) -> Lock:
    """Take ``folder``'s lock for ``what`` (a command line, shown to a writer that is refused).

    Raises:
        HarnessError: another process holds it (one line: who, since when, what it runs), or the
            folder cannot hold a lock file (permission, a file in the folder's place).
    """
    path = path_of(folder)
    if _held_for_us(path):
        return Lock(path, None, None, {})
    try:
        folder.mkdir(parents=True, exist_ok=True)
        f = open(path, "a+", encoding="utf-8")  # noqa: SIM115 (held open as long as the lock is)
    except OSError as exc:
        raise HarnessError(
            f"{folder}: cannot take its lock ({exc.strerror or exc}); check that it is a folder you can write"
        ) from None
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        f.close()
        if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            raise HarnessError(f"{folder}: cannot take its lock ({exc.strerror or exc})") from None
        raise HarnessError(
            f"{folder} is in use by {_holder(_read(path))}: wait for it to finish, or give this run another --out"
        ) from None
    f.seek(0)
    earlier = _read(path)  # what a holder that died without releasing left: taken over
    token = secrets.token_hex(8)
    me = {
        "pid": os.getpid(),
        "started": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": what,
        "token": token,
    }
    f.seek(0)
    f.truncate()
    f.write(json.dumps(me) + "\n")
    f.flush()
    if earlier and echo is not None:
        echo(f"{folder}: took over the lock of {_holder(earlier)}, which ended without releasing it")
    return Lock(path, f, token, earlier)


def command_line() -> str:
    return " ".join(["harness", *sys.argv[1:]])[:200]
