"""A publication: a report's folder written whole beside it, then swapped in by one rename, or not at all.

A report is many files read together (the README, the page, every case page and reproducer). A reader (a
person, ``harness recommend``, a nightly's ``harness diff``, git) sees either the whole previous report or
the whole new one, whatever happens while it is written: a full disk, a rename the kernel refuses, a
SIGKILL at any instant. So the report never writes into the published folder:

1. :class:`Publication` writes every file into ``.<name>.<pid>.publish.tmp`` beside the folder (a write
   that fails for want of space or permission fails there, before anything published changed);
2. what the folder holds that is not the report's own (:func:`carried`: its lock files, the folders of
   profiles published inside it, a GPU machine's facts) is hard-linked in;
3. one ``renameat2(RENAME_EXCHANGE)`` swaps the two folders: the kernel makes the new folder the published
   one in a single step, and the old one, now under the temporary name, is removed.

Where the file system cannot exchange two names, two renames do it: the published folder is first moved
aside to ``.<name>.<pid>.previous.tmp``. A reader then sees the previous report, none, or the new one,
never a torn one, and the next writer that finds the folder missing beside such a folder puts the previous
one back (:func:`recover`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import os
import shutil
import sys
from collections.abc import Collection, Iterator
from pathlib import Path

from harness.core.errors import HarnessError
from harness.store import cache, lock
from harness.store.lock import NAME, STAGE

PUBLISHING, PREVIOUS = "publish.tmp", "previous.tmp"
"""The suffixes of a publication's two temporary folders beside the published one: ``.<name>.<pid>.<suffix>``."""

_LOCKS = frozenset({NAME, STAGE})
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2
_CANNOT_EXCHANGE = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV}


def _beside(folder: Path, suffix: str, pid: int | str = "*") -> Path:
    return folder.parent / f".{folder.name}.{pid}.{suffix}"


def recover(folder: Path) -> list[str]:
    """Undo what a publication killed part-way left beside ``folder`` (call it holding the folder's lock):
    a previous report moved aside with no new one in its place goes back (into the place of a folder that
    holds only the lock files of the writer now calling, which keep being its locks); temporary folders go.
    Returns what it did, one line each."""
    said: list[str] = []
    previous = sorted(folder.parent.glob(_beside(folder, PREVIOUS).name), key=lambda p: p.stat().st_mtime_ns)
    if previous and _locks_only(folder):
        _put_back(previous.pop(), folder)
        said.append(f"{folder}: put back the previous report, which a publication killed part-way had moved aside")
    for leftover in [*previous, *folder.parent.glob(_beside(folder, PUBLISHING).name)]:
        try:
            shutil.rmtree(leftover)
        except FileNotFoundError:
            pass
        except OSError as exc:  # an immutable file, a folder of another owner: it stays, and each writer says so
            said.append(
                f"{leftover}: left by an earlier publication and not published, but it cannot be removed "
                f"({exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''}); remove it by hand"
            )
    return said


def _locks_only(folder: Path) -> bool:
    return not folder.exists() or (folder.is_dir() and all(e.name in _LOCKS for e in folder.iterdir()))


def _put_back(previous: Path, folder: Path) -> None:
    if not folder.exists():
        os.rename(previous, folder)
        return
    for entry in folder.iterdir():  # the locks held now stay the folder's: the same files, linked in
        link = previous / f".{entry.name}.{os.getpid()}.tmp"
        os.link(entry, link)
        os.replace(link, previous / entry.name)
    if exchange(previous, folder):
        shutil.rmtree(previous)
        return
    aside = _beside(folder, PUBLISHING, os.getpid())
    os.rename(folder, aside)
    os.rename(previous, folder)
    shutil.rmtree(aside)


def exchange(a: Path, b: Path) -> bool:
    """Swap the names ``a`` and ``b`` in one step (Linux ``renameat2(RENAME_EXCHANGE)``): True, or False
    where the system or the file system has no such call (then nothing happened).

    Raises:
        OSError: the kernel refused it (a permission, an immutable folder): nothing happened either.
    """
    call = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if call is None:
        return False
    if call(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in _CANNOT_EXCHANGE:
        return False
    raise OSError(err, os.strerror(err), str(b))


@contextlib.contextmanager
def publishing(folder: Path, command: str) -> Iterator[Publication]:
    """The one way a folder of published files is written (``report``, ``torch-report``): the folder's leftovers
    of a killed publication undone (:func:`recover`), the folder checked to be a results folder
    (:func:`harness.answer.published.kept`: nothing else in it is replaced), a :class:`Publication` yielded to write
    into, then swapped in at once, the folders of profiles published inside it held still while they are carried
    over. Whatever stops the body or the swap (a refusal, a full disk, Ctrl-C) leaves the published folder as it
    was. Call it holding the folder's lock.

    Raises:
        HarnessError: ``folder`` is not a results folder, or cannot be written (one line, with the fix); whatever
            the body raises, unchanged.
    """
    from harness.answer import published  # the one rule of what a results folder holds

    try:
        for line in recover(folder):  # what a publication killed part-way left
            print(line, file=sys.stderr)
    except OSError as exc:
        raise HarnessError(
            f"{command}: {folder} is missing and the previous report beside it cannot be put back "
            f"({exc.strerror or exc}): fix the folder's permissions, then run it again"
        ) from None
    keep = published.kept(folder)
    stage: Publication | None = None
    try:
        stage = Publication(folder, keep)
        yield stage
        with contextlib.ExitStack() as held:  # the profiles published inside it keep still while they are carried over
            for name in keep:
                if (folder / name).is_dir():
                    held.enter_context(lock.acquire(folder / name, lock.command_line()))
            if note := stage.commit():
                print(f"{command}: {note}", file=sys.stderr)
    except OSError as exc:
        if stage is not None:
            stage.abort()
        where = f" ({exc.filename})" if exc.filename else ""
        raise HarnessError(
            f"{command}: cannot write {folder}: {exc.strerror or exc}{where}; the previous report is left as it was: "
            "free some space or fix the folder's permissions, then run it again"
        ) from None
    except BaseException:  # a refusal, Ctrl-C, a bug: the published folder was never touched
        if stage is not None:
            stage.abort()
        raise


def changed_since_export(path: Path) -> HarnessError:
    """The refusal of a build file whose bytes are not the ones the export recorded: nothing is published."""
    return HarnessError(
        f"report: {path} changed since the export wrote it (its SHA-256 is not the one recorded): nothing is "
        "published; run `nox -s matrix` (it exports it again)"
    )


class Publication:
    """The next report of ``folder``, written beside it (:meth:`write_bytes`, :meth:`copy`, ...) under the
    paths it will have once published, and put in its place by :meth:`commit`, or dropped by :meth:`abort`.

    ``carry`` names what the published folder holds that the report does not write and keeps (see
    :func:`carried`), hard-linked into the new folder at commit.
    """

    def __init__(self, folder: Path, carry: Collection[str] = ()) -> None:
        self.target, self.carry = folder, tuple(carry)
        self.staging = _beside(folder, PUBLISHING, os.getpid())
        self._made = [p for p in (folder.parent, *folder.parent.parents) if not p.exists()]
        shutil.rmtree(self.staging, ignore_errors=True)
        self.staging.mkdir(parents=True)

    def _at(self, path: Path) -> Path:
        return self.staging / path.relative_to(self.target)

    def folder(self, path: Path) -> Path:
        """``path`` as a folder of the new report (returned as published, for the paths under it)."""
        self._at(path).mkdir(parents=True, exist_ok=True)
        return path

    def write_text(self, path: Path, text: str) -> None:
        self.write_bytes(path, text.encode("utf-8"))

    def write_bytes(self, path: Path, data: bytes, mode: int | None = None) -> None:
        at = self._at(path)
        at.parent.mkdir(parents=True, exist_ok=True)
        at.write_bytes(data)
        if mode is not None:
            at.chmod(mode)

    def write_zeros(self, path: Path, size: int) -> None:
        """A file of ``size`` zero bytes, sparse where the file system allows."""
        at = self._at(path)
        at.parent.mkdir(parents=True, exist_ok=True)
        with open(at, "wb") as f:
            f.truncate(size)

    def sha256(self, path: Path) -> str:
        """The SHA-256 of a file of the new report, as written."""
        return cache.sha256_file(self._at(path))

    def copy(self, path: Path, src: Path, sha256: str | None) -> None:
        """A copy of ``src`` (never a link: the published file is its own), checked against ``sha256`` as
        it is read: what is published is what was recorded, whatever ``src`` holds a moment later.

        Raises:
            HarnessError: ``src``'s bytes are not those recorded.
        """
        at = self._at(path)
        at.parent.mkdir(parents=True, exist_ok=True)
        h = hashlib.sha256()
        with open(src, "rb") as f, open(at, "wb") as dst:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
                dst.write(chunk)
        if sha256 is not None and h.hexdigest() != sha256:
            raise changed_since_export(src)

    def commit(self) -> str | None:
        """Carry over what the report keeps, then put the new folder in the published one's place at once.
        Returns a line to show (after the command's name) when the previous folder could not be removed afterwards
        (it is published no more; each next writer tries again and says so while it stays), else None.

        Raises:
            OSError: the swap was refused; the published folder is as it was.
        """
        if self.target.is_dir():
            for name in self.carry:
                _link_tree(self.target / name, self.staging / name)
        if not self.target.exists():
            os.rename(self.staging, self.target)
            return None
        if not exchange(self.staging, self.target):
            aside = _beside(self.target, PREVIOUS, os.getpid())
            os.rename(self.target, aside)
            try:
                os.rename(self.staging, self.target)
            except OSError:
                os.rename(aside, self.target)
                raise
            self.staging = aside
        try:
            shutil.rmtree(self.staging)
        except OSError as exc:
            return (
                f"published {self.target}; the previous report, moved to {self.staging}, could not be removed "
                f"({exc.strerror or exc}): it is published no more; remove it by hand (`rm -rf {self.staging}`, after "
                "`chattr -i` where a file is immutable)"
            )
        return None

    def abort(self) -> None:
        """Drop the new report: the published folder was never touched."""
        shutil.rmtree(self.staging, ignore_errors=True)
        for made in sorted(self._made, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                made.rmdir()  # only when empty


def _link_tree(src: Path, dst: Path) -> None:
    """``src`` at ``dst`` by hard links (a lock file linked stays the same lock; nothing is copied)."""
    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True, copy_function=os.link, dirs_exist_ok=True)
    elif src.exists() or src.is_symlink():
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.link(src, dst, follow_symlinks=False)
