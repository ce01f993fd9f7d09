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
from harness.build import lock, plan, stamps  # noqa: E402
from harness.cases import corpus  # noqa: E402
from harness.cli import check_options, matrix_options  # noqa: E402
from harness.config.matrix import load  # noqa: E402
from harness.core.errors import HarnessError  # noqa: E402
from harness.run.backends.gpu import nvidia_driver_problem  # noqa: E402

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
    except HarnessError as exc:
        raise SystemExit(f"nox: {exc}") from None
    if ns.results is None:  # the default profile is the published table; the others stay in the build folder
        ns.results = str(MATRIX.profile(ns.profile).results(ns.out))
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


def _install_torch(session: nox.Session, *requirements: str) -> None:
    """torch's CPU build, never the multi-GB CUDA build: a local wheel if pip has one, else PyTorch's CPU index.
    ``requirements`` are resolved together with that pin, so none of them can bring another torch."""
    pin = f"torch=={MATRIX.export.torch}+cpu"
    links = _pip_find_links()
    if links and any(Path(p).glob(f"torch-{MATRIX.export.torch}+cpu-*.whl") for p in links.split()):
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
    return ["--matrix", str(ROOT / "matrix.toml"), "--profile", ns.profile, "--out", ns.out]


_LOCKS: list[lock.Lock] = []

# Why the export of this `nox` invocation stopped, if it did: the run and report sessions it queued then
# start nothing (no environment is created for an export that is not there).
_STOPPED: list[str] = []


@nox.session
def export(session: nox.Session) -> None:
    """Export every case × exporter × opset of the profile (torch env, plus the export requirements)."""
    ns = _options(session.posargs)
    try:
        _export_env(session, ns)
    except BaseException:  # a pin that does not exist (torch 9.9.9): nothing of this job may run on the last export
        _STOPPED.append("the export environment did not install (see its error above)")
        raise
    corpus = [a for c in ns.corpus for a in ("--corpus", c)]
    corpus += ["--only-corpus"] if ns.only_corpus else []
    corpus += ["--cases", ns.cases] if ns.cases else []
    corpus += ["--force"] if ns.force else []
    corpus += [a for r in ns.with_ for a in ("--with", r)]
    started = time.time()
    try:
        session.run("harness", "export", *_common(ns), *corpus, env={"PYTHONUTF8": "1"})
    except CommandFailed:
        manifest = ROOT / ns.out / "manifest.json"
        if not manifest.is_file() or manifest.stat().st_mtime < started:  # nothing exported: nothing to run
            _STOPPED.append("the export stopped (see its error above)")
        raise


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
@nox.parametrize(
    "runtime", [nox.param(rt.pin, id=rt.id, tags=["run", rt.package, "gpu" if rt.gpu else "cpu"]) for rt in MATRIX.runtimes]
)
def run(session: nox.Session, runtime: str) -> None:
    """Run the exported artifacts on one pinned runtime (no torch here)."""
    _stopped(session)
    ns = _options(session.posargs)
    rt = MATRIX.runtime(runtime)
    env = {}
    if rt.gpu and (why := nvidia_driver_problem()) is None:
        # NVIDIA's index first for the packages it hosts: PyPI's tensorrt-cu*-libs are placeholders that fetch it.
        session.install(*rt.gpu_install, "--extra-index-url", NVIDIA_INDEX)
        env["LD_LIBRARY_PATH"] = _gpu_library_path(session)
    else:
        if rt.gpu:  # the GPU columns will say why, cell by cell, as `unavailable`; the session succeeds
            skipped = [r for r in rt.gpu_install if r not in rt.requirements]
            session.log(f"{why}: installing {' '.join(rt.requirements)} only, not {' '.join(skipped)}")
        session.install(*rt.requirements)
    _harness(session)
    extra = (["--force"] if ns.force else []) + (["--no-latency"] if ns.no_latency else [])
    session.run("harness", "run", *_common(ns), "--runtime", rt.pin, *extra, env=env)


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
    session.run("harness", "report", *_common(ns), "--results", ns.results, *wall, *partial)
    if (ROOT / ns.results).resolve() == (ROOT / "results").resolve():  # the published table: the README states it
        session.run("harness", "readme", "--results", ns.results, "--readme", str(ROOT / "README.md"))


def _hold(ns: argparse.Namespace, what: str, echo: Any) -> None:
    """One writer per build folder and per results folder: both held by this nox process until it exits (every
    session it queues runs in it) and handed to the stages it starts (:meth:`harness.build.lock.Lock.env`); a second
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
    date (harness.build.plan: same inputs, same files, every cache entry whole) is not started."""
    ns = _options(session.posargs)
    if why := published.results_out_of_tree():
        session.error(why)
    try:
        _hold(ns, " ".join(["nox -s matrix", *session.posargs]), session.log)
    except HarnessError as exc:
        session.error(str(exc))
    os.environ["HARNESS_MATRIX_STARTED"] = str(time.time())
    profile = MATRIX.profile(ns.profile)
    cases = [c.strip() for c in ns.cases.split(",") if c.strip()] if ns.cases else None
    todo = plan.plan(
        MATRIX,
        profile,
        ROOT / ns.out,
        ROOT / ns.results,
        corpus=_corpus(ns),
        cases=cases,
        force=ns.force,
        requirements=ns.requirements,
    )
    for line in todo.lines():
        session.log(line)
    if not todo.export and not any(todo.runs.values()):
        # Only the report runs: this invocation's seconds are not the run's wall time (the report keeps the one
        # its history recorded for these shards, or says none).
        os.environ.pop("HARNESS_MATRIX_STARTED", None)
    if todo.export:
        session.notify("export", session.posargs)
    for rt in profile.runtimes:
        if todo.runs[rt.id]:
            session.notify(f"run({rt.id})", session.posargs)
    if todo.report:
        session.notify("report", session.posargs)
    if todo.idle:
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


ARCHITECTURES = corpus.declared_requirements("models.architectures", ROOT)
"""What the architectures corpus needs (its REQUIREMENTS): the tests session installs it beside torch."""

UNIT_PKGS = [*REFERENCE_PKGS, f"onnx=={MATRIX.export.onnx}", *REPORT_PKGS, "pytest>=8"]
"""What the unit tests need: no torch, no browser, no nox or uv (tests that need one skip or are deselected)."""


@nox.session
def unit(session: nox.Session) -> None:
    """The tests a contributor runs in seconds: no torch, no browser, no real environments (`-- tests/test_x.py`)."""
    session.install(*UNIT_PKGS)
    _harness(session)
    session.run("pytest", "-m", "not e2e and not browser and not torch", *session.posargs, env={"PYTHONUTF8": "1"})


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
