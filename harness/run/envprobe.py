"""What a run environment holds and which columns can run in it, asked of its backend in child processes.

A broken environment (the runtime does not import) is one ``env-error`` record for a column, and a column
that cannot run here one ``unavailable`` record, never a crashed session or one identical failure per cell:
the run stage asks here before it starts a worker.
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.pool.workers import describe_exit
from harness.store import cache

if TYPE_CHECKING:
    from harness.config.matrix import Runtime

_PROBE = "from harness.run.backends.environment import probe_main; probe_main()"


def _sound(hit: Any, key: str) -> bool:
    """Whether a cached probe is one this code wrote for ``key`` (anything else is asked again)."""
    if not (isinstance(hit, dict) and hit.get("key") == key and "cpu" in hit and isinstance(hit.get("env"), dict)):
        return False
    return hit["cpu"] is None or isinstance(hit["cpu"], str)


def probe_environment(backend: str) -> tuple[dict[str, str] | None, str, str | None]:
    """Ask ``backend`` (``module:Class``) in a child process what the environment holds: (environment, '', why the
    CPU column cannot run or None) or (None, what went wrong, None).

    The message's first line is the diagnosis; the child's stderr follows it.
    """
    proc = subprocess.run([sys.executable, "-c", _PROBE, backend, "env"], capture_output=True, text=True, timeout=300)
    numpy_abi = "_ARRAY_API" in proc.stderr or "numpy.core.multiarray failed to import" in proc.stderr
    # onnxruntime 1.15 beside numpy 2 imports "fine" (exit status 0, the error only printed) and then
    # crashes on every run: an import that complains about numpy's ABI is a broken env either way.
    if proc.returncode == 0 and not numpy_abi:
        found = json.loads(proc.stdout.strip().splitlines()[-1])
        return found["env"], "", found["cpu"]
    lines = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.match(r"^\w+(Error|Exception)\b", ln)]
    what = " / ".join(dict.fromkeys(errors)) or (lines[-1] if lines else f"exit status {proc.returncode}")
    name = backend.partition(":")[0].rsplit(".", 1)[-1]
    line = f"{name} fails to import: {what}"
    if numpy_abi:
        line += ' (built for numpy 1.x: add constraints = ["numpy<2"] to its [[runtimes]] entry)'
    return None, line + "\n" + proc.stderr[-4000:], None


def environment(out: Path, force: bool, backend: str) -> tuple[dict[str, str] | None, str, str | None]:
    """:func:`probe_environment`, remembered per environment and machine: the same packages on the
    same host import the same way, so a rerun starts no child for it. A failed import is never
    remembered; GPU columns are checked every time (a driver can come and go)."""
    ident = cache.environment()
    if ident["listing"] is None:
        return probe_environment(backend)
    nvidia = Path("/proc/driver/nvidia/version")
    # How the probe's process starts is part of what it finds: a platform's launcher (harness/config/launchers.py)
    # runs the same packages on another CPU.
    launcher = Path(sys.executable)
    script = launcher.read_bytes()[:4096] if launcher.is_file() and launcher.stat().st_size < 4096 else b""
    nv = nvidia.read_text() if nvidia.is_file() else None
    processor = _cpu_identity()  # what the probe records of the CPU (its instruction sets): another CPU, probed again
    key = cache.digest(backend, ident["listing"], platform.node(), nv, sys.executable, script.decode(errors="replace"), processor)
    path = out / "cache" / "envs" / f"{key[:32]}.json"
    hit = {} if force else cache.read_json(path)
    if _sound(hit, key):
        return hit["env"], "", hit["cpu"]
    env, error, cpu = probe_environment(backend)
    if env is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        cache.write_json(path, {"key": key, "env": env, "cpu": cpu})
    return env, error, cpu


def _cpu_identity() -> str:
    """This machine's CPU as ``/proc/cpuinfo`` names it: the first processor's model and flags."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return platform.machine()
    wanted = ("model name", "flags", "Features", "CPU part")
    return "\n".join(ln for ln in text.split("\n\n")[0].splitlines() if ln.partition(":")[0].strip() in wanted)


def probe_column(column: str, runtime: Runtime) -> str | None:
    """Why ``column`` cannot run in this environment (one line), or None; asked in a child process, because
    loading a GPU provider's libraries can kill the process that loads them."""
    who = runtime.kind.column_words(column)
    cmd = [sys.executable, "-c", _PROBE, runtime.kind.backend, "column", column]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return f"{who}: checking whether it loads took over 300 s"
    if proc.returncode != 0:
        how = describe_exit(proc.returncode) if proc.returncode < 0 else f"exit status {proc.returncode}"
        tail = (proc.stderr.strip().splitlines() or [""])[-1]
        return f"{who}: checking whether it loads crashed ({how})" + (f": {tail}" if tail else "")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return str(found) if found else None


def wrong_environment(env: Mapping[str, str], runtime: Runtime) -> str | None:
    """Why the environment is not the runtime's (another version, another package of the same module), or
    None. A ``bare`` kind (native TensorRT) may lack its package entirely (no driver, nothing installed): its
    columns then say so as ``unavailable``."""
    kind = runtime.kind
    have = env.get(kind.version_key) or ""
    if kind.bare and not have:
        return None
    if have != runtime.version:
        return f"environment has {kind.version_key} {env.get(kind.version_key)}, expected {runtime.version}"
    if env.get("package", runtime.package) != runtime.package:
        return f"environment has {env.get('package')} {runtime.version}, expected {runtime.package}; reinstall the session"
    return None
