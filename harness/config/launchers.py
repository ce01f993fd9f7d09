"""How a platform column's processes start: natively, or through Debian's ``qemu-user`` (made here, for the noxfile).

A launcher is a shell script in the build folder, ``<out>/platforms/<runtime-id>/<platform>/python``, that starts the
column's Python the way the platform needs: ``qemu-x86_64 -cpu Haswell-noTSX <env>/bin/python`` for an x86-64 level
this machine is not, ``qemu-aarch64 -L <arm64 userland> <userland>/usr/bin/python3.11`` with PyPI's aarch64 wheels on
``PYTHONPATH`` for ARM64. There is no binfmt_misc here: a process the emulated one starts (a worker, the fork server,
the environment probe) would run natively or not at all, so the run stage starts every one through the launcher
(:func:`harness.pool.workers.launch_through`). ``launcher.json`` beside it says how it runs (the cells' ``how``).

The ARM64 userland is built from Debian's packages (``debootstrap --foreign``, then every ``.deb`` extracted: no second
stage, no emulated package scripts), the wheels come from PyPI (``uv pip install --target --python-platform``); both
are kept with the SHA-256 of what they were made of (each package; each distribution's RECORD), so a second run
builds nothing and a package or wheel that changed is built again (the extracted files themselves are not hashed).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform as _platform
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness.config import platforms

QEMU_MIN = (10, 0)
"""bookworm's qemu-user 7.2 crashes onnxruntime's aarch64 wheels from 1.30 at import; 10.0 (bookworm-backports) runs them."""
INSTALL = "apt-get install -t bookworm-backports qemu-user (Debian; 10.0 or newer)"
SUITE = "bookworm"
"""The Debian release the ARM64 userland is built from: its python3 is 3.11, the project's."""
MIRROR = "http://deb.debian.org/debian"
USERLAND_PYTHON = "usr/bin/python3.11"
WHEEL_PLATFORM = {"aarch64": "aarch64-manylinux_2_28"}
"""uv's --python-platform per machine: glibc 2.28 wheels (onnxruntime's aarch64 wheels are manylinux_2_27/_2_28)."""


@dataclasses.dataclass(frozen=True)
class Launch:
    path: Path | None
    """The launcher script; None: the column runs natively in the runtime's own environment."""
    how: str
    """``native``, or ``emulated: qemu-user 10.0.2 -cpu Haswell-noTSX``."""


def host() -> tuple[str, set[str]]:
    """This machine: ``platform.machine()`` and its ``/proc/cpuinfo`` flags."""
    try:
        info = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        info = ""
    return _platform.machine(), platforms.host_flags(info)


def qemu_version(machine: str) -> tuple[tuple[int, ...] | None, str]:
    """``qemu-<machine> --version`` as numbers and as it reads (None: not installed or not answering)."""
    exe = shutil.which(f"qemu-{machine}")
    if exe is None:
        return None, ""
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None, ""
    found = re.search(r"version (\d+)\.(\d+)(?:\.(\d+))?", out)
    if not found:
        return None, ""
    numbers = tuple(int(g) for g in found.groups() if g is not None)
    return numbers, ".".join(map(str, numbers))


def problem(name: str) -> str | None:
    """Why platform ``name`` cannot run on this machine (one line with the fix), or None."""
    p = platforms.get(name)
    machine, flags = host()
    if platforms.native(name, machine, flags):
        return None
    if not p.qemu_cpu:
        return f"{name} runs natively only (no emulator has AVX-512) and this machine is not {name}: run its column on one"
    if p.machine != machine and p.machine not in WHEEL_PLATFORM:
        return f"{name} is emulated on an x86-64 machine only (this one is {machine}): run its column on an x86-64 one"
    if p.machine != machine and machine != "x86_64":
        return f"{name} is emulated on an x86-64 machine only (this one is {machine}): run its column on one, or natively"
    numbers, words = qemu_version(p.machine)
    if numbers is None:
        return f"qemu-{p.machine} is not installed, which the {name} column runs under: {INSTALL}"
    if numbers < QEMU_MIN:
        least = ".".join(map(str, QEMU_MIN))
        return f"qemu-{p.machine} is {words}, older than {least} (onnxruntime's newer wheels crash under it): {INSTALL}"
    if p.machine != "x86_64" and shutil.which("debootstrap") is None:
        return f"debootstrap is not installed, which builds the {name} userland: apt-get install debootstrap"
    return None


def prepare(
    name: str,
    requirements: Sequence[str],
    python: str,
    folder: Path,
    *,
    source: Path,
    userland: Path,
    echo: Callable[[str], Any] = print,
) -> Launch:
    """The launcher of platform ``name`` for a runtime whose environment's Python is ``python`` (``requirements``: what
    that environment holds, installed again for another machine), written in ``folder``. Raises on a failed build
    (:func:`problem` first says what is missing)."""
    p = platforms.get(name)
    machine, flags = host()
    if platforms.native(name, machine, flags):
        return Launch(None, "native")
    _, version = qemu_version(p.machine)
    qemu = shutil.which(f"qemu-{p.machine}") or f"qemu-{p.machine}"
    how = f"emulated: qemu-user {version} -cpu {p.qemu_cpu}"
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["#!/bin/sh", f"# {name}: {how}"]
    if p.machine == machine:  # the same machine, another level: the runtime's own environment under the emulator
        lines.append(f'exec {qemu} -cpu {p.qemu_cpu} {python} "$@"')
    else:
        root = build_userland(userland, p.machine, echo=echo)
        site = install_site(folder / "site", p.machine, requirements, echo=echo)
        path = os.pathsep.join([str(source), str(site)])
        lines += [f"PYTHONPATH={path}", "HARNESS_SITE=" + str(site), "export PYTHONPATH HARNESS_SITE"]
        lines.append(f'exec {qemu} -L {root} -cpu {p.qemu_cpu} {root / USERLAND_PYTHON} "$@"')
    script = folder / "python"
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    script.chmod(0o755)
    (folder / "launcher.json").write_text(json.dumps({"platform": name, "how": how}) + "\n", encoding="utf-8")
    return Launch(script, how)


def how_of(launcher: Path) -> str:
    """What ``launcher.json`` beside a launcher says of it (``emulated: …``); ``native`` for none."""
    try:
        return str(json.loads((launcher.parent / "launcher.json").read_text(encoding="utf-8"))["how"])
    except (OSError, ValueError, KeyError, TypeError):
        return "launched by " + str(launcher)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _arch(machine: str) -> str:
    return {"aarch64": "arm64"}.get(machine, machine)


def build_userland(root: Path, machine: str, *, echo: Callable[[str], Any] = print) -> Path:
    """Debian's minimal userland for ``machine`` with python3, under ``root``: built once (``userland.json`` holds the
    SHA-256 of every package it was made of; a root whose packages are missing or changed, or whose Python is missing,
    is built again)."""
    stamp = root / "userland.json"
    tree = root / "root"
    try:
        held = json.loads(stamp.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        held = None
    if isinstance(held, dict) and held.get("suite") == SUITE and (tree / USERLAND_PYTHON).is_file():
        archives = tree / "var/cache/apt/archives"
        kept = held.get("debs") or {}
        if kept and all((archives / n).is_file() and _sha256(archives / n) == sha for n, (_, sha) in kept.items()):
            return tree  # every package it was made of, unchanged (the extracted files themselves are not hashed)
    echo(f"building the {machine} userland from Debian {SUITE}'s packages under {tree} (once)")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    first = ["debootstrap", f"--arch={_arch(machine)}", "--variant=minbase", "--foreign", "--include=python3"]
    subprocess.run([*first, SUITE, str(tree), MIRROR], check=True, capture_output=True)
    archives = tree / "var/cache/apt/archives"
    debs: dict[str, tuple[int, str]] = {}
    for deb in sorted(archives.glob("*.deb")):  # the first stage unpacks only the required ones: python3 and the rest
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
        debs[deb.name] = (deb.stat().st_size, _sha256(deb))
    if not (tree / USERLAND_PYTHON).is_file():
        raise RuntimeError(f"the {machine} userland has no {USERLAND_PYTHON} after extracting {len(debs)} packages")
    stamp.write_text(json.dumps({"suite": SUITE, "mirror": MIRROR, "machine": machine, "debs": debs}, indent=1) + "\n")
    return tree


def install_site(site: Path, machine: str, requirements: Sequence[str], *, echo: Callable[[str], Any] = print) -> Path:
    """PyPI's ``machine`` wheels of ``requirements`` for CPython 3.11, unpacked in ``site`` (``uv pip install --target``):
    installed once per requirement set (``site.json``: the requirements and the SHA-256 of each installed
    distribution's RECORD, the list of its files with their hashes; another set, or a RECORD changed or gone, installs
    them again)."""
    stamp = site.with_name("site.json")
    want = sorted(requirements)
    try:
        held = json.loads(stamp.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        held = None
    if isinstance(held, dict) and held.get("requirements") == want and held.get("records") == _records(site):
        return site
    echo(f"installing {' '.join(want)} for {machine} (PyPI's wheels) under {site}")
    shutil.rmtree(site, ignore_errors=True)
    uv = shutil.which("uv") or "uv"
    cmd = [uv, "pip", "install", "--quiet", "--target", str(site), "--python-platform", WHEEL_PLATFORM[machine]]
    subprocess.run([*cmd, "--python-version", "3.11", "--only-binary", ":all:", *want], check=True)
    stamp.write_text(json.dumps({"requirements": want, "machine": machine, "records": _records(site)}, indent=1) + "\n")
    return site


def _records(site: Path) -> dict[str, str]:
    """SHA-256 of each installed distribution's RECORD (which lists every file with its own hash)."""
    return {r.parent.name: _sha256(r) for r in sorted(site.glob("*.dist-info/RECORD"))}
