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

from harness.core.errors import HarnessError

NAME = ".harness.lock"
STAGE = ".harness.stage.lock"
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
    """Held locks: ``release()`` (or leaving the ``with``) lets the next writer in."""

    def __init__(self, path: Path, files: list[IO[str]], token: str | None) -> None:
        self.path, self._files, self.token = path, files, token

    def env(self) -> dict[str, str]:
        """The environment that hands this lock to a stage started as a child process."""
        if self.token is None:
            return {}
        pairs = [p for p in os.environ.get(TOKEN_ENV, "").split(os.pathsep) if p]
        return {TOKEN_ENV: os.pathsep.join([*pairs, f"{self.path.parent.resolve()}={self.token}"])}

    def release(self) -> None:
        for f in reversed(self._files):
            with contextlib.suppress(OSError):
                f.seek(0)
                f.truncate()  # the file stays (unlinking it would race a writer opening it); its content goes
            f.close()  # closing the descriptor releases the flock
        self._files = []

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _open(folder: Path, name: str) -> IO[str]:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        return open(folder / name, "a+", encoding="utf-8")
    except OSError as exc:
        raise HarnessError(
            f"{folder}: cannot take its lock ({exc.strerror or exc}); check that it is a folder you can write"
        ) from None


def _flock(f: IO[str], folder: Path) -> bool:
    """Take ``f``'s exclusive lock now: True, or False when another holds it."""
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            f.close()
            raise HarnessError(f"{folder}: cannot take its lock ({exc.strerror or exc})") from None
        return False
    return True


def _claim(f: IO[str], what: str, token: str) -> dict[str, Any]:
    """Write who holds ``f`` now; return what a holder that died without releasing it left there."""
    f.seek(0)
    earlier = _read(Path(f.name))
    f.seek(0)
    f.truncate()
    me = {"pid": os.getpid(), "started": dt.datetime.now().astimezone().isoformat(timespec="seconds")}
    f.write(json.dumps({**me, "command": what, "token": token}) + "\n")
    f.flush()
    return earlier


def _restore(f: IO[str], earlier: dict[str, Any]) -> None:
    """Put back what a holder that died without releasing ``f`` left there, and let go of it: a writer refused
    by the stage lock after taking the job's must not be the one that hides the take-over from the next job."""
    with contextlib.suppress(OSError):
        f.seek(0)
        f.truncate()
        f.write(json.dumps(earlier) + "\n")
        f.flush()
    f.close()


def _busy(folder: Path, name: str) -> HarnessError:
    holder = _holder(_read(folder / name))
    if name == STAGE:
        holder = f"a stage still running, {holder}"
    return HarnessError(f"{folder} is in use by {holder}: wait for it to finish, or give this run another --out")


def acquire(folder: Path, what: str, echo: Any = None, *, stage: bool = True) -> Lock:
    """Take ``folder``'s lock for ``what`` (a command line, shown to a writer that is refused).

    Two files: the job's lock (:data:`NAME`), which a job that starts stages (``nox -s matrix``, ``stage``
    False) holds for them all and hands down, and the stage's (:data:`STAGE`), which the writing stage holds
    itself. So a stage that outlives the job that started it (nox killed alone) still keeps a new job out,
    and two stages handed the same job's lock cannot write at once.

    Raises:
        HarnessError: another process holds it (one line: who, since when, what it runs), or the
            folder cannot hold a lock file (permission, a file in the folder's place).
    """
    files: list[IO[str]] = []
    token = None
    earlier: dict[str, Any] = {}
    try:
        if not _held_for_us(path_of(folder)):
            job = _open(folder, NAME)
            if not _flock(job, folder):
                job.close()
                raise _busy(folder, NAME)
            files.append(job)
            token = secrets.token_hex(8)
            earlier = _claim(job, what, token)
        mine = _open(folder, STAGE)
        if not _flock(mine, folder):
            mine.close()
            raise _busy(folder, STAGE)
        if stage:
            files.append(mine)
            _claim(mine, what, token or "")
        else:
            mine.close()  # free now: the job's stages take it one at a time
    except HarnessError:
        if files and earlier:  # refused after claiming the job's lock: the dead holder's word stays for the next job
            _restore(files.pop(0), earlier)
        Lock(path_of(folder), files, None).release()
        raise
    if earlier and echo is not None:
        echo(f"{folder}: took over the lock of {_holder(earlier)}, which ended without releasing it")
    return Lock(path_of(folder), files, token)


def command_line() -> str:
    return " ".join(["harness", *sys.argv[1:]])[:200]
