"""The environments ``harness check`` runs a file in: one per runtime, made on demand and kept.

Each holds exactly what the runtime's ``run`` session installs (its pin and constraints, numpy; the Python its
wheels need: :attr:`harness.config.matrix.Runtime.requirements`, :func:`harness.config.pythons.find`) and nothing
of the harness: the worker (:mod:`harness.check.worker`) is started with the source tree on ``PYTHONPATH``, as the
run stage is on an older Python. An environment ``nox -s matrix`` already made for the runtime
(``.nox/run-ort-1-17-3``) is used as it is; otherwise one is made under ``--envs`` (default
``build/check/envs/<runtime id>``) with uv (else venv and pip), once, and said when it is made. A marker file
records what was installed: another pin or constraint makes it again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.config import pythons
from harness.config.matrix import Runtime
from harness.core.records import first_line

MARKER = "harness-check.json"


def _nox_env(root: Path, rt: Runtime) -> Path:
    """Where nox keeps the runtime's run session environment (``run(ort-1.17.3)`` → ``.nox/run-ort-1-17-3``)."""
    return root / ".nox" / re.sub(r"[^\w]+", "-", f"run({rt.id})").strip("-")


def _holds(env: Path, rt: Runtime) -> bool:
    """Whether the environment has the runtime's package at its version, and numpy (read from the installed
    distributions' folders: no interpreter started)."""
    dist = rt.package.replace("-", "_")
    found = list(env.glob(f"lib/python*/site-packages/{dist}-{rt.version}.dist-info"))
    numpy = list(env.glob("lib/python*/site-packages/numpy-*.dist-info"))
    return bool(found) and bool(numpy) and (env / "bin" / "python").exists()


def requirements(rt: Runtime) -> list[str]:
    """What the runtime's environment installs: its pins and constraints (:attr:`Runtime.requirements`), and numpy
    where they do not name it (the worker's one other import). The reproducers' ``pip install`` line says the same."""
    return [*rt.requirements, *(() if any(r.startswith("numpy") for r in rt.requirements) else ("numpy",))]


def _wanted(rt: Runtime) -> dict[str, Any]:
    """What the marker records: the pins, the Python, and that the modules are byte-compiled (each worker is a fresh
    interpreter that imports numpy and onnxruntime: from source, without .pyc files, every time)."""
    return {"requirements": list(rt.requirements), "python": rt.python, "compiled": True}


def ready(rt: Runtime, envs: Path, root: Path) -> Path | None:
    """The python of an environment that holds the runtime, or None when one must be made."""
    own = envs / rt.id
    marker = own / MARKER
    try:
        if json.loads(marker.read_text()) == _wanted(rt) and _holds(own, rt):
            return own / "bin" / "python"
    except (OSError, ValueError):
        pass
    nox = _nox_env(root, rt)
    if _holds(nox, rt):
        return nox / "bin" / "python"
    return None


def make(rt: Runtime, envs: Path, echo: Callable[[str], Any]) -> tuple[Path | None, str]:
    """Make the runtime's environment under ``envs``; ``(python, "")``, or ``(None, why)`` when it cannot be made
    (its Python is missing, the index is out of reach): that runtime's row says why, the others go on."""
    interpreter = pythons.find(rt.python) if rt.python else sys.executable
    if interpreter is None:
        return None, pythons.missing(rt.pin, rt.python)
    env = envs / rt.id
    shutil.rmtree(env, ignore_errors=True)
    env.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    uv = shutil.which("uv")
    wanted = requirements(rt)
    if uv:
        steps = [
            [uv, "venv", "--quiet", "--python", interpreter, str(env)],
            [uv, "pip", "install", "--quiet", "--python", str(env / "bin" / "python"), *wanted],
        ]
    else:
        steps = [
            [interpreter, "-m", "venv", str(env)],
            [str(env / "bin" / "python"), "-m", "pip", "install", "-q", *wanted],
        ]
    for step in steps:  # byte-compiled at install, as the noxfile's environments are (UV_COMPILE_BYTECODE)
        done = subprocess.run(step, capture_output=True, text=True, env={**os.environ, "UV_COMPILE_BYTECODE": "1"})
        if done.returncode != 0:
            shutil.rmtree(env, ignore_errors=True)
            said = first_line(done.stderr or done.stdout) or f"exit status {done.returncode}"
            return None, f"its environment could not be made ({' '.join(wanted)}): {said}"
    (env / MARKER).write_text(json.dumps(_wanted(rt)))
    echo(f"{rt.pin}: environment made in {time.perf_counter() - t0:.0f} s ({env})")
    return env / "bin" / "python", ""
