"""Writes that land together or not at all: how the report replaces a published folder.

Every file is first written beside its place (``.<name>.<pid>.tmp``, so a write that fails for want
of space or permission fails before anything published has changed); only when all are written are
they renamed into place, which needs no space. A failure while staging removes every temporary file
and folder and leaves the previous results as they were.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

_TEMPORARY = re.compile(r"^\..+\.\d+\.tmp$")
"""The name :meth:`Staged.write_bytes` writes beside a file: ``.<name>.<pid>.tmp``."""


def sweep(folder: Path) -> None:
    """Remove the temporaries a writer killed while staging left under ``folder`` (none of anything else)."""
    if folder.is_dir():
        for path in folder.rglob(".*.tmp"):
            if path.is_file() and _TEMPORARY.match(path.name):
                with contextlib.suppress(OSError):
                    path.unlink()


class Staged:
    def __init__(self) -> None:
        self._moves: list[tuple[Path, Path]] = []
        self._later: list[Callable[[], None]] = []
        self._undo: list[Callable[[], None]] = []
        self._made: list[Path] = []

    def folder(self, path: Path) -> Path:
        """``path`` as a folder (made now, removed again on abort if it is still empty)."""
        missing = [p for p in (path, *path.parents) if not p.exists()]
        path.mkdir(parents=True, exist_ok=True)
        self._made.extend(missing)
        return path

    def write_text(self, path: Path, text: str) -> None:
        self.write_bytes(path, text.encode("utf-8"))

    def write_bytes(self, path: Path, data: bytes) -> None:
        self.folder(path.parent)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self._moves.append((tmp, path))
        with open(tmp, "wb") as f:
            f.write(data)

    def later(self, step: Callable[[], None], undo: Callable[[], None] | None = None) -> None:
        """Run ``step`` at commit (after the files are in place); ``undo`` on abort."""
        self._later.append(step)
        if undo is not None:
            self._undo.append(undo)

    def remove(self, path: Path) -> None:
        """Remove ``path`` (a file or a folder) at commit."""
        self.later(lambda: shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True))

    def commit(self) -> None:
        for tmp, path in self._moves:
            os.replace(tmp, path)
        for step in self._later:
            step()
        self._moves, self._later, self._undo, self._made = [], [], [], []

    def abort(self) -> None:
        for tmp, _ in self._moves:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
        for undo in self._undo:
            with contextlib.suppress(OSError):
                undo()
        for made in sorted(self._made, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                made.rmdir()  # only when empty
        self._moves, self._later, self._undo, self._made = [], [], [], []
