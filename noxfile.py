"""Nox sessions: the matrix as isolated environments.

    nox -s matrix                      # export → every runtime of the default profile → report
    nox -s matrix -- --profile quick   # another profile of matrix.toml
    nox -s matrix -- --corpus my.py    # add your own models
    nox -s tests                       # lint, types, unit + integration + end-to-end tests

Each ``run`` session holds one pinned onnxruntime (plus the constraints
matrix.toml gives it), numpy and the harness installed with ``--no-deps``:
no torch. The export session holds torch (the CPU build), onnx, onnxscript.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nox
from nox.command import CommandFailed

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from harness.answer import published  # noqa: E402
from harness.cases import corpus  # noqa: E402
from harness.cli import check_options, matrix_options  # noqa: E402
from harness.config import launchers, platforms, pythons  # noqa: E402
from harness.config.matrix import Runtime, load, version_tuple  # noqa: E402
from harness.core.errors import HarnessError  # noqa: E402
from harness.run.backends.gpu import nvidia_driver_problem  # noqa: E402
from harness.store import lock, plan, stamps  # noqa: E402

nox.needs_version = ">=2025.2.9"
nox.options.default_venv_backend = "uv"
nox.options.sessions = ["matrix"]
nox.options.error_on_missing_interpreters = True
# Environments are kept between runs (each session still installs its pins, a no-op when they hold):
# a rerun then costs what changed, not 20 environments. `nox -s matrix --reuse-venv=no` rebuilds them.
nox.options.reuse_venv = "yes"
# Wheels are byte-compiled once, at install: where PYTHONDONTWRITEBYTECODE is set (these machines set it),
# Python would otherwise compile torch's ~1,800 modules again in every process that imports it (~3 s each).
os.environ.setdefault("UV_COMPILE_BYTECODE", "1")

try:
    MATRIX = load(ROOT / "matrix.toml")
except HarnessError as exc:  # one line, not a traceback from inside nox
    sys.exit(f"nox: {exc}")

# The export env also holds the reference runtime: it records every node's value per probe (CPU,
# optimizations off), which a mismatching cell of any runtime is compared with, node by node.
REFERENCE_PKGS = stamps.reference_requirements(MATRIX)
EXPORT_PKGS = [f"onnx=={MATRIX.export.onnx}", f"onnxscript=={MATRIX.export.onnxscript}", *REFERENCE_PKGS, "numpy"]
REPORT_PKGS = ["pandas>=2.2", "tabulate>=0.9", "numpy"]
# The spec stage: the export's onnx (its checker and reference evaluator) and numpy, nothing else.
SPEC_PKGS = [f"onnx=={MATRIX.export.onnx}", "numpy"]
# The transform stage: the export's onnx, its reference onnxruntime (whose onnxruntime.quantization is the quantizer)
# and [transforms] requirements (the float16 converter, what the quantizer imports); no torch.
TRANSFORM_PKGS = [f"onnx=={MATRIX.export.onnx}", *REFERENCE_PKGS, *MATRIX.transform_requirements, "numpy"]
NVIDIA_INDEX = "https://pypi.nvidia.com"  # TensorRT's libraries (GPU machines only)
# The tests run on the reference runtime (the newest). Playwright drives the system's Chromium (Debian's
# `chromium`, which .ci/run installs); its own browser download is never used.
# check-jsonschema validates the nightly workflow against its vendored GitHub Actions schema (offline).
TEST_PKGS = ["pytest>=8", "ruff>=0.6", "mypy>=1.10", "nox>=2025.2.9", "uv>=0.4", "playwright>=1.40", "check-jsonschema>=0.29"]


def _options(posargs: list[str]) -> argparse.Namespace:
    """``nox -s matrix -- ...``: the options the stages declare (:func:`harness.cli.matrix_options`)."""
    ap = matrix_options()
    ns, rest = ap.parse_known_args(posargs)
    if rest:
        known = ", ".join(a.option_strings[0] for a in ap._actions if a.option_strings)
        raise SystemExit(f"nox: unknown option(s) {' '.join(rest)}; use {known}")
    try:
        check_options(ns, ROOT)  # an empty --cases, an --out that is the project itself: one line before anything runs
        MATRIX.profile(ns.profile)
        ns.requirements = corpus.requirements_of(MATRIX, ns.with_, _corpus(ns), ROOT)
        if ns.cases is None and MATRIX.profile(ns.profile).cases:  # the profile's own selection, unless --cases
            ns.cases = ",".join(MATRIX.profile(ns.profile).cases)
        if ns.results is None:  # the default profile is the published table; the others stay in the build folder
            ns.results = str(MATRIX.profile(ns.profile).results(ns.out))
        published.kept(ROOT / ns.results)  # a folder that is no results folder: refused before a lock is put in it
    except HarnessError as exc:
        raise SystemExit(f"nox: {exc}") from None
    return ns


def _corpus(ns: argparse.Namespace) -> list[str]:
    """The run's corpus: the profile's own (or matrix.toml's modules), then --corpus files."""
    return plan.corpus_sources(MATRIX, ns.corpus, ns.only_corpus, MATRIX.profile(ns.profile))


def _pip_find_links() -> str | None:
    """Where pip finds local wheels (this machine's torch CPU wheel); uv does not read pip's config."""
    links = os.environ.get("PIP_FIND_LINKS")
    if not links:
        try:
            links = subprocess.run(
                [sys.executable, "-m", "pip", "config", "get", "global.find-links"], capture_output=True, text=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            links = ""
    return links or None


def _has_wheel(links: str, pattern: str) -> bool:
    """Whether a find-links folder holds a wheel matching ``pattern``."""
    return any(next(Path(p).glob(pattern), None) is not None for p in links.split())


def _install_torch(session: nox.Session, *requirements: str) -> None:
    """torch's CPU build, never the multi-GB CUDA build: a local wheel if pip has one, else PyTorch's CPU index.
    ``requirements`` are resolved together with that pin, so none of them can bring another torch."""
    pin = f"torch=={MATRIX.export.torch}+cpu"
    links = _pip_find_links()
    if links and _has_wheel(links, f"torch-{MATRIX.export.torch}+cpu-*.whl"):
        session.install(pin, *requirements, env={"UV_FIND_LINKS": links})
    else:
        session.install(
            pin,
            *requirements,
            "--index-url",
            "https://download.pytorch.org/whl/cpu",
            "--extra-index-url",
            "https://pypi.org/simple",
            "--index-strategy",
            "unsafe-best-match",
        )


def _harness(session: nox.Session) -> None:
    """The harness, editable: reinstalled only when this env lacks it or pyproject.toml changed since
    (an editable install already sees every code change; rebuilding it costs ~0.7 s per session)."""
    if not _has_editable_harness(session):
        session.install("--no-deps", "-e", str(ROOT))


def _has_editable_harness(session: nox.Session) -> bool:
    location = getattr(session.virtualenv, "location", None)
    if not location:
        return False
    for record in Path(location).glob("lib/python*/site-packages/harness-*.dist-info/direct_url.json"):
        try:
            url = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        same = url.get("url") == ROOT.as_uri() and url.get("dir_info", {}).get("editable")
        if same and record.stat().st_mtime >= (ROOT / "pyproject.toml").stat().st_mtime:
            return True
    return False


def _common(ns: argparse.Namespace) -> list[str]:
    release = ["--torch", ns.torch] if getattr(ns, "torch", None) else []
    # transforms' build folders (run: each in turn, in one process) or one transform's table (report)
    within = [a for name in getattr(ns, "within", None) or () for a in ("--transform", name)]
    return ["--matrix", str(ROOT / "matrix.toml"), "--profile", ns.profile, "--out", ns.out, *release, *within]


def _transforms(ns: argparse.Namespace) -> list[str]:
    """The transforms of this run: the profile's, or those ``--transform`` names."""
    listed = list(MATRIX.profile(ns.profile).transforms)
    named = [t for t in getattr(ns, "transform", None) or () if t in listed]
    return named or listed


def _within(ns: argparse.Namespace, *names: str) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(ns), "within": list(names)})


TORCH_RELEASES = sorted({r for p in MATRIX.profiles.values() for r in p.torch}, key=version_tuple)
"""Every torch release a profile lists: an export session each (``export_torch``), its environment made when its
export runs and removed when it ends."""

_TORCH_FAILED: list[str] = []
"""The torch releases whose export did not finish in this `nox` invocation: their runs and report are not started."""

TORCH_TIMINGS = "torch-timings.json"
"""``<out>/torch/torch-timings.json``: per release, the seconds of its environment, its export and its removal
(``bench/torch_bench.py`` prints them)."""


def _with_release(ns: argparse.Namespace, release: str) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(ns), "torch": release})


def _plan(ns: argparse.Namespace, release: str | None = None) -> plan.Plan:
    """What ``nox -s matrix`` has to do for the profile, or for one torch release of it (its own matrix, build folder
    and table; an extra release's environment is removed after its export)."""
    profile = MATRIX.profile(ns.profile)
    cases = [c.strip() for c in ns.cases.split(",") if c.strip()] if ns.cases else None
    return plan.plan(
        MATRIX.for_torch(profile, release),
        profile,
        profile.torch_out(ROOT / ns.out, release) if release else ROOT / ns.out,
        ROOT / ns.results / release if release else ROOT / ns.results,
        corpus=_corpus(ns),
        cases=cases,
        force=ns.force,
        requirements=ns.requirements,
        removed_env=release is not None and release != MATRIX.export.torch,
    )


def _reused(ns: argparse.Namespace) -> str | None:
    """The torch release of the profile that the default table measured (the torch ``[export]`` pins): not exported,
    run or reported again; the table across releases reads the default table for it. A run with its own corpus or
    cases measures every release itself (the default table did not measure those)."""
    from harness.answer import torch_table

    custom = bool(ns.corpus or ns.only_corpus or ns.cases)
    return torch_table.reuses_default(MATRIX, MATRIX.profile(ns.profile), custom=custom)


def _timing(ns: argparse.Namespace, release: str, **seconds: float) -> None:
    path = ROOT / ns.out / "torch" / TORCH_TIMINGS
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    data.setdefault(release, {}).update({k: round(v, 1) for k, v in seconds.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


_LOCKS: list[lock.Lock] = []

# Why the export of this `nox` invocation stopped, if it did: the run and report sessions it queued then
# start nothing (no environment is created for an export that is not there).
_STOPPED: list[str] = []


@nox.session
def export(session: nox.Session) -> None:
    """Export every case × exporter × opset of the profile (torch env, plus the export requirements)."""
    ns = _options(session.posargs)
    started = time.time()
    try:
        _export_env(session, ns)
    except BaseException:  # a pin that does not exist (torch 9.9.9): nothing of this job may run on the last export
        _stop(ns, "the export environment did not install (see its error above)")
        raise
    installed = time.time()
    try:
        session.run("harness", "export", *_common(ns), *_export_args(ns), env={"PYTHONUTF8": "1"})
    except CommandFailed:
        out = MATRIX.profile(ns.profile).torch_out(ROOT / ns.out, ns.torch) if ns.torch else ROOT / ns.out
        manifest = out / "manifest.json"
        if not manifest.is_file() or manifest.stat().st_mtime < installed:  # nothing exported: nothing to run
            _stop(ns, "the export stopped (see its error above)")
        raise
    if ns.torch:
        _timing(ns, ns.torch, environment=installed - started, export=time.time() - installed)


def _export_args(ns: argparse.Namespace) -> list[str]:
    """What ``harness export`` is handed of ``nox -s matrix -- ...``: the corpus, the cases, --force, --with."""
    args = [a for c in ns.corpus for a in ("--corpus", c)]
    args += ["--only-corpus"] if ns.only_corpus else []
    args += ["--cases", ns.cases] if ns.cases else []
    args += ["--force"] if ns.force else []
    return args + [a for r in ns.with_ for a in ("--with", r)]


def _stop(ns: argparse.Namespace, why: str) -> None:
    """An export that did not finish: nothing of this job runs on it (of one torch release: only that release's)."""
    if ns.torch:
        _TORCH_FAILED.append(ns.torch)
    else:
        _STOPPED.append(why)


@nox.session
@nox.parametrize("release", [nox.param(r, id=r) for r in TORCH_RELEASES])
def export_torch(session: nox.Session, release: str) -> None:
    """Export one torch release of a profile that lists them, in an environment of its own: created for this export
    and removed when it ends (``--keep-torch-envs`` keeps it), so that at most one extra torch is installed at a time.
    The default torch (``[export] torch``) is exported by the ``export`` session instead."""
    ns = _with_release(_options(session.posargs), release)
    location = Path(getattr(session.virtualenv, "location", "") or "")
    started = time.time()
    try:
        _install_release(session, release, ns.requirements)
        _harness(session)
        installed = time.time()
        session.run("harness", "export", *_common(ns), *_export_args(ns), env={"PYTHONUTF8": "1"})
        _timing(ns, release, environment=installed - started, export=time.time() - installed)
    except BaseException:
        manifest = MATRIX.profile(ns.profile).torch_out(ROOT / ns.out, release) / "manifest.json"
        if not manifest.is_file() or manifest.stat().st_mtime < started:  # a corpus problem still exports the rest
            _TORCH_FAILED.append(release)
        raise
    finally:
        if not ns.keep_torch_envs and location.name.startswith("export_torch") and location.is_dir():
            removing = time.time()
            shutil.rmtree(location, ignore_errors=True)
            session.log(f"torch {release}: removed its environment {location} (--keep-torch-envs keeps it)")
            _timing(ns, release, removal=time.time() - removing)


def _install_release(session: nox.Session, release: str, requirements: list[str]) -> None:
    """torch ``release`` with the export pins: the CPU wheel where pip's find-links hold one, else the index's default
    build (on Linux x86-64 PyPI's is the CUDA build: it imports and exports on a CPU, and needs no GPU)."""
    links = _pip_find_links()
    if links and _has_wheel(links, f"torch-{release}+cpu-*.whl"):
        session.install(f"torch=={release}+cpu", *EXPORT_PKGS, *requirements, env={"UV_FIND_LINKS": links})
    else:
        session.install(f"torch=={release}", *EXPORT_PKGS, *requirements)


def _export_env(session: nox.Session, ns: argparse.Namespace) -> None:
    """The export environment: torch's CPU build, the export pins, the export requirements, the harness."""
    _install_torch(session)
    session.install(*EXPORT_PKGS)
    if ns.requirements:  # [export] requirements, --with, the corpus files' REQUIREMENTS: this env only, never a run env
        _install_torch(session, *ns.requirements)
    _harness(session)


def _stopped(session: nox.Session) -> None:
    if _STOPPED:
        session.skip(f"{_STOPPED[0]}: not running {session.name}")


@nox.session
def spec(session: nox.Session) -> None:
    """The ONNX specification's answer on every exported file: the full checker and the reference evaluator on every
    probe (the export's onnx, numpy; no torch, no runtime) → build/spec.json, cached per artifact."""
    _stopped(session)
    ns = _options(session.posargs)
    session.install(*SPEC_PKGS)
    _harness(session)
    force = ["--force"] if ns.force else []
    releases = MATRIX.profile(ns.profile).torch
    for release in releases:  # a profile with torch releases: each release's build in turn, where it has work
        if release == _reused(ns):
            continue
        if release in _TORCH_FAILED:
            session.log(f"torch {release}: its export did not finish: not judged")
        elif ns.force or _plan(ns, release).spec is not None:
            session.run("harness", "spec", *_common(_with_release(ns, release)), *force)
    if not releases:
        session.run("harness", "spec", *_common(ns), *force)


@nox.session
def transform(session: nox.Session) -> None:
    """The step after export: each fp32 file of the profile's export quantized or converted to float16 by the pinned
    tools, and the ONNX specification's answer on each new file (its reference evaluator) → build/transforms/<name>/."""
    _stopped(session)
    ns = _options(session.posargs)
    names = _transforms(ns)
    if not names:
        session.skip(f"profile {ns.profile!r} lists no transforms")
    session.install(*TRANSFORM_PKGS)
    _harness(session)
    force = ["--force"] if ns.force else []
    for name in names:
        session.run("harness", "transform", *_common(ns), "--transform", name, *force)


def _interpreter(rt: Runtime) -> str | None:
    """The interpreter of a runtime's environment: the one its entry names (``python = "3.10"``), found on this
    machine (:func:`harness.config.pythons.find`); None: nox's own, which is also what a runtime whose Python is
    missing gets (its session then records why its column is not measured, and installs nothing of it)."""
    return pythons.find(rt.python) if rt.python else None


@nox.session
@nox.parametrize(
    ["runtime", "python"],
    [
        nox.param(rt.pin, _interpreter(rt), id=rt.id, tags=["run", rt.package, "gpu" if rt.gpu else "cpu"])
        for rt in MATRIX.runtimes
    ],
)
def run(session: nox.Session, runtime: str) -> None:
    """Run the exported artifacts on one pinned runtime (no torch here), on the Python its entry names."""
    _stopped(session)
    ns = _options(session.posargs)
    rt = MATRIX.runtime(runtime)
    command: tuple[str, ...] = ("harness", "run")
    env: dict[str, str] = {}
    extra: list[str] = []
    missing = bool(rt.python) and _interpreter(rt) is None
    if missing:  # its columns say why, as `env-error`; the other runtimes go on
        why = pythons.missing(rt.pin, rt.python)
        session.log(why)
        # Whatever Python this environment has (nox's own, or the runtime's from a run that found it): numpy, the run
        # stage's one import beyond the standard library, and the harness from the source tree; nothing of the runtime.
        session.install("numpy")
        command, env = ("python", "-m", "harness", "run"), {"PYTHONPATH": str(ROOT)}
        extra = ["--unmeasured", why]
    elif rt.python:  # an older Python than the project's (which requires 3.11): the harness from its source tree,
        # not installed; the run stage's own code runs there (RUN_PYTHON and newer, tests/test_old_python.py)
        session.install(*rt.requirements)
        command, env = ("python", "-m", "harness", "run"), {"PYTHONPATH": str(ROOT)}
    elif rt.gpu and (why := nvidia_driver_problem()) is None:
        # NVIDIA's index first for the packages it hosts: PyPI's tensorrt-cu*-libs are placeholders that fetch it.
        session.install(*rt.gpu_install, "--extra-index-url", NVIDIA_INDEX)
        env["LD_LIBRARY_PATH"] = _gpu_library_path(session)
    else:
        if rt.gpu:  # the GPU columns will say why, cell by cell, as `unavailable`; the session succeeds
            skipped = [r for r in rt.gpu_install if r not in rt.requirements]
            session.log(f"{why}: installing {' '.join(rt.requirements)} only, not {' '.join(skipped)}")
        session.install(*rt.requirements)
    if command[0] == "harness":
        _harness(session)
    extra += (["--force"] if ns.force else []) + (["--no-latency"] if ns.no_latency else [])
    releases = MATRIX.profile(ns.profile).torch
    for release in releases:  # a profile with torch releases: each release's build in turn, where it has work
        if release == _reused(ns):
            continue
        if release in _TORCH_FAILED:
            session.log(f"torch {release}: its export did not finish: not run")
        elif ns.force or _plan(ns, release).runs[rt.id] is not None:
            session.run(*command, *_common(_with_release(ns, release)), "--runtime", rt.pin, *extra, env=env)
    if MATRIX.profile(ns.profile).transforms:  # every transform's folder, in one process per column
        _run_platforms(session, _within(ns, *_transforms(ns)), rt, command, extra, env, unmeasured=missing)
    elif not releases:
        _run_platforms(session, ns, rt, command, extra, env, unmeasured=missing)
    location = Path(getattr(session.virtualenv, "location", "") or "")
    if missing and location.name.startswith("run") and location.is_dir():
        # nox reuses an environment whatever Python made it: made again, on the runtime's, once that one is found
        shutil.rmtree(location, ignore_errors=True)
        session.log(f"{rt.pin}: removed {location}, made without Python {rt.python}")


def _run_platforms(
    session: nox.Session,
    ns: argparse.Namespace,
    rt: Runtime,
    command: tuple[str, ...],
    extra: list[str],
    env: dict[str, str],
    *,
    unmeasured: bool,
) -> None:
    """The run stage of one runtime: its plain columns and the platform columns this machine is, in one process; each
    other platform (``cpu@x86-64-v3``, ``cpu@aarch64``) in a process of its own started through the platform's launcher
    (harness/config/launchers.py: qemu-user, and for another machine an arm64 userland with PyPI's wheels), or, where
    this machine cannot run it, recorded as not measured with the one line that says why."""
    columns = MATRIX.profile(ns.profile).columns(rt)
    if ns.platform:  # --platform: this machine's share of the platforms (the nightly's arm64 runner, its x86 one)
        columns = tuple(c for c in columns if not platforms.of(c) or platforms.of(c) in ns.platform)
    machine, flags = launchers.host()
    emulated = [c for c in columns if platforms.of(c) and not platforms.native(platforms.of(c), machine, flags)]
    here = [c for c in columns if c not in emulated]
    chosen = [a for c in here for a in ("--provider", c)] if emulated or ns.platform else []
    if here:
        session.run(*command, *_common(ns), "--runtime", rt.pin, *chosen, *extra, env=env)
    for col in emulated:
        name = platforms.of(col)
        if unmeasured:  # its Python is missing: `extra` says so, for this column too
            session.run(*command, *_common(ns), "--runtime", rt.pin, "--provider", col, *extra, env=env)
            continue
        launch, why = _launcher(session, ns, rt, name)
        if launch is None or launch.path is None:  # its column says why; the others go on
            session.log(f"{rt.pin} {col}: not measured: {why}")
            unavailable = ["--unavailable", f"{name}: {why}"]
            session.run(*command, *_common(ns), "--runtime", rt.pin, "--provider", col, *extra, *unavailable, env=env)
            continue
        session.log(f"{rt.pin} {col}: {launch.how}")
        harness_run = (str(launch.path), "-m", "harness", "run")
        session.run(*harness_run, *_common(ns), "--runtime", rt.pin, "--provider", col, *extra, "--launcher", str(launch.path),
                    env=env, external=True)


def _launcher(session: nox.Session, ns: argparse.Namespace, rt: Runtime, name: str) -> tuple[launchers.Launch | None, str]:
    """The launcher of platform ``name`` for this runtime's environment, or None and why this machine cannot run it."""
    if (why := launchers.problem(name)) is not None:
        return None, why
    location = Path(getattr(session.virtualenv, "location", "") or ".")
    folder = ROOT / ns.out / "platforms" / rt.id / name
    userland = ROOT / ns.out / "platforms" / f"userland-{platforms.get(name).machine}"
    python = str(location / "bin" / "python")
    try:
        return launchers.prepare(name, rt.requirements, python, folder, source=ROOT, userland=userland, echo=session.log), ""
    except (OSError, subprocess.CalledProcessError, RuntimeError) as exc:
        return None, f"its launcher could not be built ({type(exc).__name__}: {exc}); see the log above"


def _gpu_library_path(session: nox.Session) -> str:
    """The CUDA, cuDNN and TensorRT libraries the GPU wheels put in site-packages, for the loader
    (onnxruntime before 1.21 has no preload_dlls, and TensorRT's provider dlopens libnvinfer by name)."""
    location = Path(getattr(session.virtualenv, "location", "") or ".")
    site = "lib/python*/site-packages"
    patterns = ("nvidia/*/lib", "nvidia/cu*/lib", "tensorrt_libs")
    dirs = sorted({str(d) for pattern in patterns for d in location.glob(f"{site}/{pattern}")})
    return os.pathsep.join([*dirs, *filter(None, [os.environ.get("LD_LIBRARY_PATH")])])


@nox.session
def report(session: nox.Session) -> None:
    """Gather the shards into results/ (matrix.jsonl, README.md)."""
    _stopped(session)
    ns = _options(session.posargs)
    if why := published.results_out_of_tree():
        session.error(why)
    session.install(*REPORT_PKGS)
    _harness(session)
    wall = []
    started = os.environ.get("HARNESS_MATRIX_STARTED")
    if started:
        wall = ["--wall", f"{time.time() - float(started):.1f}"]
    partial = ["--partial"] if ns.partial else []
    releases = MATRIX.profile(ns.profile).torch
    for release in releases:  # each release's table, then the table across them
        if release == _reused(ns):
            continue
        if release in _TORCH_FAILED:
            session.log(f"torch {release}: its export did not finish: its table is not reported (the summary says so)")
        elif ns.force or _plan(ns, release).report is not None:
            session.run("harness", "report", *_common(_with_release(ns, release)), "--results", ns.results, *partial)
    if releases:
        session.run("harness", "torch-report", *_common(ns), "--results", ns.results)
    elif MATRIX.profile(ns.profile).transforms:  # each transform's table, then the summary across them
        for name in _transforms(ns):
            session.run("harness", "report", *_common(_within(ns, name)), "--results", ns.results, *partial)
        session.run("harness", "transform-report", *_common(ns), "--results", ns.results)
    else:
        session.run("harness", "report", *_common(ns), "--results", ns.results, *wall, *partial)
    published_root = (ROOT / "results").resolve()
    where = (ROOT / ns.results).resolve()
    if ns.partial:  # the README and docs state a whole table, never a partial one
        session.log("README.md and docs/ are not refreshed from a partial report")
    elif where == published_root or published_root in where.parents:  # a published table: the README and docs state it
        session.run("harness", "readme", "--results", str(published_root), "--readme", str(ROOT / "README.md"))


def _hold(ns: argparse.Namespace, what: str, echo: Any) -> None:
    """One writer per build folder and per results folder: both held by this nox process until it exits (every
    session it queues runs in it) and handed to the stages it starts (:meth:`harness.store.lock.Lock.env`); a second
    `nox -s matrix` on the same --out, or a `harness report` into this job's results, is refused at once."""
    folders = [ROOT / ns.out]
    if (ROOT / ns.results).resolve() != folders[0].resolve():
        folders.append(ROOT / ns.results)
    for folder in folders:
        held = lock.acquire(folder, what, echo=echo, stage=False)
        _LOCKS.append(held)
        atexit.register(held.release)  # said free at a normal exit (a killed nox leaves its line: taken over)
        os.environ.update(held.env())


@nox.session(venv_backend="none")
def matrix(session: nox.Session) -> None:
    """The whole job: export → run on every runtime of the profile → report; a stage that is up to
    date (harness.store.plan: same inputs, same files, every cache entry whole) is not started."""
    ns = _options(session.posargs)
    if why := published.results_out_of_tree():
        session.error(why)
    try:
        _hold(ns, " ".join(["nox -s matrix", *session.posargs]), session.log)
    except HarnessError as exc:
        session.error(str(exc))
    os.environ["HARNESS_MATRIX_STARTED"] = str(time.time())
    profile = MATRIX.profile(ns.profile)
    if profile.torch:
        _matrix_torch(session, ns)
        return
    if profile.transforms:
        _matrix_transforms(session, ns)
        return
    todo = _plan(ns)
    for line in todo.lines():
        session.log(line)
    if not todo.export and not todo.spec and not any(todo.runs.values()):
        # Only the report runs: this invocation's seconds are not the run's wall time (the report keeps the one
        # its history recorded for these shards, or says none).
        os.environ.pop("HARNESS_MATRIX_STARTED", None)
    if todo.export:
        session.notify("export", session.posargs)
    if todo.spec:
        session.notify("spec", session.posargs)
    for rt in profile.runtimes:
        if todo.runs[rt.id]:
            session.notify(f"run({rt.id})", session.posargs)
    if todo.report:
        session.notify("report", session.posargs)
    if todo.idle:
        session.log(f"nothing to do: {ns.results} is up to date (`nox -s matrix -- --force` redoes everything)")


def _matrix_transforms(session: nox.Session, ns: argparse.Namespace) -> None:
    """A profile with transforms: its export where it is not current, then the transform stage (each transformed file
    kept while its inputs are unchanged), each runtime's run over every transform's folder (each cell reused while its
    key is), each transform's table and the summary across them."""
    todo = _plan(ns)
    if todo.export:
        session.log(f"export: {todo.export}")
        session.notify("export", session.posargs)
    session.notify("transform", session.posargs)
    for rt in MATRIX.profile(ns.profile).runtimes:
        session.notify(f"run({rt.id})", session.posargs)
    session.notify("report", session.posargs)


def _matrix_torch(session: nox.Session, ns: argparse.Namespace) -> None:
    """A profile with torch releases: per release, its export (the default torch in the ``export`` session, the others
    each in ``export_torch``), then each runtime's run session over every release that needs it, then the report of
    each release and the table across them."""
    from harness.answer import torch_table

    profile = MATRIX.profile(ns.profile)
    exports, runs, report, judge = [], set(), False, False
    for release in profile.torch:
        if release == _reused(ns):
            session.log(f"torch {release}: the default table's own measurement (the table across releases reads it)")
            own = ROOT / ns.results / release
            if (own / "matrix.jsonl").is_file():  # a narrower table of it, from a run that measured it apart: stale now
                shutil.rmtree(own)
                session.log(f"torch {release}: removed {own}, the table of an earlier run that measured it apart")
            continue
        todo = _plan(ns, release)
        for line in todo.lines():
            session.log(f"torch {release}: {line}")
        if todo.export:
            exports.append(release)
        judge = judge or todo.spec is not None
        runs.update(rt for rt, why in todo.runs.items() if why)
        report = report or todo.report is not None
    stale = torch_table.why_stale(MATRIX, profile, ROOT / ns.results)
    if stale:
        session.log(f"torch-report: runs: {stale}")
    if not exports and not judge and not runs:
        os.environ.pop("HARNESS_MATRIX_STARTED", None)
    for release in exports:
        if release == MATRIX.export.torch:  # the default torch: the export session's environment, kept
            session.notify("export", [*session.posargs, "--torch", release])
        else:
            session.notify(f"export_torch({release})", session.posargs)
    if judge:
        session.notify("spec", session.posargs)
    for rt in profile.runtimes:
        if rt.id in runs:
            session.notify(f"run({rt.id})", session.posargs)
    if report or stale:
        session.notify("report", session.posargs)
    if not (exports or judge or runs or report or stale):
        session.log(f"nothing to do: {ns.results} is up to date (`nox -s matrix -- --force` redoes everything)")


@nox.session
def latency_bench(session: nox.Session) -> None:
    """Harness-reported latency against a bare `session.run` loop, same process and settings (bench/)."""
    session.install(*REFERENCE_PKGS)
    _harness(session)
    session.run("python", str(ROOT / "bench" / "latency_bench.py"), *session.posargs)  # e.g. -- --out build --rounds 41


@nox.session
def page_bench(session: nox.Session) -> None:
    """How fast the published table answers: index.html in headless Chromium, recommend, diff (bench/)."""
    session.install("playwright>=1.40", "pytest>=8")  # pytest: the browser helper lives in tests/
    _harness(session)
    session.run("python", str(ROOT / "bench" / "page_bench.py"), *session.posargs)  # e.g. -- --rounds 7


@nox.session
def polygraphy_bench(session: nox.Session) -> None:
    """The harness against `polygraphy run --onnxrt` on the same artifacts and runtime (bench/; after an export)."""
    session.install(*REFERENCE_PKGS, "polygraphy")
    _harness(session)
    session.run("python", str(ROOT / "bench" / "polygraphy_bench.py"), *session.posargs)  # e.g. -- --build build --sample 40


def _module_spec(target: str) -> bool:
    """``pkg.module:factory`` (or ``file.py:factory``) rather than a path to an ONNX file."""
    return ":" in target and not target.endswith(".onnx") and not Path(target).exists()


@nox.session
def check(session: nox.Session) -> None:
    """`harness check` on your file (or one module): every runtime of the profile, predicted then measured.

    ``nox -s check -- model.onnx [--inputs a.npz] [--json] ...`` (docs/your-models.md). Paths are the caller's (the
    check runs in the folder nox was invoked from); the runtimes' environments are made once under this checkout's
    build/check/envs. A module spec needs torch: this session then installs the export's packages. nox's own exit
    status is 0 or 1; `.nox/check/bin/harness check ...` (after `--install-only`) keeps harness's 0 / 1 / 2.
    """
    args = list(session.posargs)
    target = next((a for a in args if not a.startswith("-")), "")
    if target and _module_spec(target):
        _install_torch(session)
        session.install(*EXPORT_PKGS, "uv>=0.4")
    else:
        session.install(*SPEC_PKGS, "uv>=0.4")
    _harness(session)
    if not args:
        session.log("nothing to check: nox -s check -- model.onnx (docs/your-models.md)")
        return
    defaults = {
        "--matrix": str(ROOT / "matrix.toml"),
        "--results": str(ROOT / "results"),
        "--envs": str(ROOT / "build" / "check" / "envs"),
    }
    given = [f"{k}={v}" for k, v in defaults.items() if not any(a == k or a.startswith(k + "=") for a in args)]
    session.chdir(session.invoked_from)
    session.run("harness", "check", *args, *given)


@nox.session
def check_bench(session: nox.Session) -> None:
    """How fast `harness check` answers (predicted, warm, cold) against `polygraphy run --onnxrt` on the same file."""
    session.install(*SPEC_PKGS, *REFERENCE_PKGS, "polygraphy", "uv>=0.4")
    _harness(session)
    session.run("python", str(ROOT / "bench" / "check_bench.py"), *session.posargs)  # e.g. -- --rounds 5


ARCHITECTURES = corpus.declared_requirements("models.architectures", ROOT)
"""What the architectures corpus needs (its REQUIREMENTS): the tests session installs it beside torch."""

UNIT_PKGS = [*REFERENCE_PKGS, f"onnx=={MATRIX.export.onnx}", *REPORT_PKGS, "pytest>=8", "jsonschema>=4"]
"""What the unit tests need: no torch, no browser, no nox or uv (tests that need one skip or are deselected)."""


@nox.session
def unit(session: nox.Session) -> None:
    """The tests a contributor runs in seconds: no torch, no browser, no real environments (`-- tests/test_x.py`)."""
    session.install(*UNIT_PKGS)
    _harness(session)
    session.run("pytest", "-m", "not e2e and not browser and not torch and not slow", *session.posargs, env={"PYTHONUTF8": "1"})


@nox.session
def tests(session: nox.Session) -> None:
    """ruff, mypy, then pytest (real torch, real onnxruntime, real nox + uv)."""
    _install_torch(session)
    session.install(*EXPORT_PKGS, *REPORT_PKGS, *TEST_PKGS)
    _install_torch(session, *ARCHITECTURES)  # transformers: the tests build every real architecture once
    _harness(session)
    session.run("ruff", "check", "harness", "models", "tests", "noxfile.py")
    session.run("mypy", "harness")
    session.run("pytest", *session.posargs, env={"PYTHONUTF8": "1"})
