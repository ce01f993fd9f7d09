"""Finding the interpreter a runtime's environment runs on (``python = "3.10"`` in its matrix.toml entry).

In order: pyenv's installed versions (``$PYENV_ROOT``, else ``pyenv root``), the newest patch; a ``pythonX.Y`` on PATH
that runs (pyenv's shims are there but answer only for the versions pyenv has selected); uv's own (``uv python
find``: its managed Pythons and the system's). Nothing is downloaded here: where none is found the
runtime's column is not measured, and :func:`missing` says what to install.

Standard library only: the noxfile reads it with nothing installed.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path


def _answers(executable: str, version: str) -> bool:
    """Whether ``executable`` runs and is CPython ``version`` (a shim that answers for another, or none, is not; nor is
    another implementation: the wheels are CPython's)."""
    try:
        said = subprocess.run(
            [executable, "-c", "import sys; print('%s %d.%d' % ((sys.implementation.name,) + sys.version_info[:2]))"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return said.returncode == 0 and said.stdout.strip() == f"cpython {version}"  # the wheels are CPython's


def _on_path(version: str) -> str | None:
    found = shutil.which(f"python{version}")
    return found if found and _answers(found, version) else None


def _uv(version: str) -> str | None:
    uv = shutil.which("uv")
    if uv is None:
        return None
    try:
        said = subprocess.run(
            [uv, "python", "find", "--no-python-downloads", version], capture_output=True, text=True, timeout=60
        )
    except (OSError, subprocess.SubprocessError):
        return None
    found = said.stdout.strip()
    return found if said.returncode == 0 and found and _answers(found, version) else None


def _pyenv_root() -> Path | None:
    if root := os.environ.get("PYENV_ROOT"):
        return Path(root)
    pyenv = shutil.which("pyenv")
    if pyenv is None:
        return None
    try:
        said = subprocess.run([pyenv, "root"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return Path(said.stdout.strip()) if said.returncode == 0 and said.stdout.strip() else None


def _pyenv(version: str) -> str | None:
    root = _pyenv_root()
    if root is None:
        return None
    patches = []
    for folder in (root / "versions").glob(f"{version}.*"):
        m = re.fullmatch(rf"{re.escape(version)}\.(\d+)", folder.name)
        if m and (folder / "bin" / f"python{version}").is_file():
            patches.append((int(m[1]), folder / "bin" / f"python{version}"))
    for _, executable in sorted(patches, reverse=True):
        if _answers(str(executable), version):
            return str(executable)
    return None


@functools.cache
def find(version: str) -> str | None:
    """The path of an interpreter of Python ``version`` (``"3.10"``) on this machine, or None."""
    for finder in (_pyenv, _on_path, _uv):
        if found := finder(version):
            return found
    return None


def missing(pin: str, version: str) -> str:
    """One line: the runtime's interpreter is not here, what to install, and what that costs the table."""
    return (
        f"{pin} runs on Python {version} (its wheels stop there) and no Python {version} was found "
        f"(pyenv, PATH, uv python find): install one (`uv python install {version}` or `pyenv install {version}`); "
        "its column is not measured"
    )
