"""Any bytes in any build file are one line or redone, never a traceback (issue 26, finding 6).

One small real build (a real torch export of three cases, a real run on the newest onnxruntime, a real
report), then every kind of file in it that a stage reads, damaged every way: random bytes, cut short,
empty, not UTF-8, JSON of the wrong shape (``[]``, ``{}``, a string, ``null``, a number), each key missing
and each field of the wrong type (one level down too), and a folder in its place. Each damaged copy is read
by the real readers in this process (the plan, the layout's checks, the store, the stamps, the frontier,
the second reference, the locks), which may raise a :class:`HarnessError` (one line) and nothing else; and
by real `harness plan`, `harness report` and `harness run` processes, which exit 0 (the file is redone or
left out) or 2 with one line, never with a traceback.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import onnxruntime
import pytest

from harness.config.matrix import Matrix, load
from harness.core.errors import HarnessError
from harness.export import stage as export
from harness.publish import gpu_outputs as gpuref
from harness.run import envprobe
from harness.store import cache, frontier, layout, lock, plan, spec, stamps
from tests.test_cache import CORPUS

pytestmark = pytest.mark.torch  # exports with real torch: `nox -s tests`, not `nox -s unit`


ROOT = Path(__file__).resolve().parent.parent
PROFILE = "fuzz"

Damage = Callable[[Path], None]


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A whole, up-to-date build: export, run (with latency), report, and a second reference file."""
    top = tmp_path_factory.mktemp("fuzz")
    text = (ROOT / "matrix.toml").read_text().replace("workers = 0", "workers = 1")
    text += (
        f'\n[profiles.{PROFILE}]\nruntimes = ["onnxruntime=={onnxruntime.__version__}"]\nproviders = ["cpu"]\n'
        'exporters = ["torchscript"]\nopsets = [18]\n'
    )
    (top / "matrix.toml").write_text(text)
    (top / "my_cases.py").write_text(CORPUS)
    out = top / "build"
    for stage in ("export", "spec", "run"):
        proc = _harness(top, out, stage)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    arts = layout.load_artifacts(out)
    rows = [{"case": a.case, "probe": p, "reference_sha256": a.reference_sha256, "max_abs": 0.0} for a in arts for p in a.probes]
    (out / layout.CUDA_REFERENCE).write_text("".join(json.dumps(r) + "\n" for r in rows))  # read by the report: before it
    proc = _harness(top, out, "report")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _harness(top, out, "plan").stdout.count("up to date") == 4, "the build is whole and up to date"
    return out


def _harness(top: Path, out: Path, command: str) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "-m", "harness", command, "--matrix", str(top / "matrix.toml"), "--profile", PROFILE]
    args += ["--out", str(out)]
    if command in ("export", "plan"):
        args += ["--corpus", str(top / "my_cases.py"), "--only-corpus"]
    if command in ("plan", "report"):
        args += ["--results", str(out.parent / "results")]
    if command == "run":
        args += ["--runtime", onnxruntime.__version__]
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)


# The kinds of file ---------------------------------------------------------------------------------------


def kinds(out: Path) -> dict[str, Path]:
    """Every file of the build a stage reads, by kind (one of each)."""
    rt = load(out.parent / "matrix.toml").runtime(onnxruntime.__version__).id
    art = next((out / layout.ARTIFACTS).iterdir())
    stamp = json.loads((out / layout.EXPORT_STAMP).read_text())
    key = stamp["artifacts"][art.name]["key"]
    entry = out / layout.STORE / key
    found = {
        "export stamp": out / layout.EXPORT_STAMP,
        "manifest": out / layout.MANIFEST,
        "export record": art / layout.RECORD,
        "model": art / layout.MODEL,
        "reference.npz": art / layout.REFERENCE,
        "store cache.json": entry / cache.CACHE_INFO,
        "store record": entry / layout.RECORD,
        "shard": out / layout.SHARDS / f"{rt}-cpu.jsonl",
        "shard seal": out / layout.SHARDS / f"{rt}-cpu.stamp.json",
        "report stamp": layout.report_stamp(out, PROFILE),
        "spec answer": spec.facts_path(out),
        "spec seal": spec.stamp_path(out),
        "spec cache entry": next((out / spec.CACHE).glob("*.json")),
        "frontier index": frontier.models_dir(out) / frontier.INDEX,
        "frontier model": next(frontier.models_dir(out).glob("*.onnx")),
        "frontier result": frontier.result_path(out, rt),
        "second reference": out / layout.CUDA_REFERENCE,
        "build lock": out / lock.NAME,
        "stage lock": out / lock.STAGE,
        "environment probe": next((out / "cache" / "envs").glob("*.json")),
    }
    for name in layout.LOCALIZATION_FILES:
        if (art / name).exists():
            found[f"artifact {name}"] = art / name
    return found


# The damages ---------------------------------------------------------------------------------------------

SHAPES: dict[str, Any] = {"[]": [], "{}": {}, '"str"': "str", "null": None, "42": 42, "-1.5": -1.5, "true": True}


def _write(data: bytes) -> Damage:
    def write(p: Path) -> None:
        p.unlink()  # a copy of the build shares its files with the build (hard links): a new file, not an edit
        p.write_bytes(data)

    return write


def _copy(build: Path, out: Path) -> None:
    """A copy of ``build`` to damage: hard links (the readers write by replacing a file, never in place), but
    the locks, which are written in place, copied."""
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(build, out, symlinks=True, copy_function=os.link)
    for name in (lock.NAME, lock.STAGE):
        if (out / name).exists():
            (out / name).unlink()
            shutil.copyfile(build / name, out / name)


def _folder(p: Path) -> None:
    p.unlink(missing_ok=True)
    p.mkdir()
    (p / "inside").write_text("x")


def _bytes_damages(original: bytes) -> dict[str, Damage]:
    rng = random.Random(len(original))
    return {
        "random bytes": _write(bytes(rng.randrange(256) for _ in range(300))),
        "cut short": _write(original[: len(original) // 2]),
        "empty": _write(b""),
        "not UTF-8": _write(original[:10] + b"\xff\xfe\x80" + original[10:]),
        "a folder in its place": _folder,
    }


def _wrong(value: Any) -> list[Any]:
    """Values of another type than ``value`` (a NUL where a string is: no path may hold one)."""
    options: list[Any] = ["wrong\x00type", [], {}, None, 7]
    return [o for o in options if type(o) is not type(value)]


def _json_damages(data: Any) -> dict[str, Any]:
    """Valid JSON of the wrong shape: the whole, each key missing or of another type, one level down too."""
    found: dict[str, Any] = {f"JSON {k}": v for k, v in SHAPES.items()}
    if not isinstance(data, dict):
        return found
    for key, value in data.items():
        found[f"without {key!r}"] = {k: v for k, v in data.items() if k != key}
        for wrong in _wrong(value):
            found[f"{key!r} as {json.dumps(wrong)}"] = {**data, key: wrong}
        inner = next(iter(value.items()), None) if isinstance(value, dict) else None
        if inner is None:
            continue
        name, sub = inner
        for wrong in _wrong(sub):
            found[f"{key!r}[{name!r}] as {json.dumps(wrong)}"] = {**data, key: {**value, name: wrong}}
        if isinstance(sub, dict) and sub:
            first = next(iter(sub))
            found[f"{key!r}[{name!r}] without {first!r}"] = {
                **data,
                key: {**value, name: {k: v for k, v in sub.items() if k != first}},
            }
    return found


def _lines_damages(original: bytes) -> dict[str, Damage]:
    """A JSON-lines file: its first line replaced by each wrong shape, and by a line of another type's fields."""
    lines = original.splitlines(keepends=True)
    found: dict[str, Damage] = {}
    first = json.loads(lines[0])
    for label, value in _json_damages(first).items():
        found[f"first line {label}"] = _write(json.dumps(value).encode() + b"\n" + b"".join(lines[1:]))
    return found


def damages(path: Path) -> dict[str, Damage]:
    original = path.read_bytes()
    found = _bytes_damages(original)
    if path.suffix == ".jsonl":
        found.update(_lines_damages(original))
        return found
    try:
        data = json.loads(original)
    except ValueError:
        return found  # a binary file (a model, reference.npz) or a lock released (empty)
    for label, value in _json_damages(data).items():
        found[label] = _write(json.dumps(value).encode())
    return found


def cases(out: Path) -> Iterator[tuple[str, str, Path, Damage]]:
    for kind, path in kinds(out).items():
        for label, damage in damages(path).items():
            yield kind, label, path.relative_to(out), damage


# The readers ---------------------------------------------------------------------------------------------


def _read_everything(out: Path, matrix: Matrix) -> None:
    """Every reader of the build that a stage runs before it writes, as the stage calls it (the corpus and the
    results folder the build's, so that a reader is not spared by an earlier difference)."""
    profile = matrix.profile(PROFILE)
    (rt,) = profile.runtimes
    results = matrix.path.parent / "results"
    corpus = [str(matrix.path.parent / "my_cases.py")]
    plan.plan(matrix, profile, out, results, corpus=corpus)
    stamp = cache.read_json(out / layout.EXPORT_STAMP)
    if plan._export_why(out, stamp, stamps.export_inputs(matrix, profile, corpus, None)) is None:
        plan._run_why(out, matrix, rt, "cpu", stamp)
    plan._report_why(out, profile, results, matrix.corpus)
    stamps.report_inputs(out, profile, results, matrix.corpus)
    store = cache.ExportStore(out / layout.STORE)
    for entry in (out / layout.STORE).iterdir():
        store.check(entry.name)
    export._known_peaks(store, {"double", "shift", "negate"})
    store.prune(keep=())
    shard = layout.shard_path(out, rt, "cpu")
    layout.resume(shard)
    frontier.models_missing(out)
    frontier.why_stale(out, rt.id)
    frontier.read(out, [(rt.id, rt.pin)])
    for name in (lock.NAME, lock.STAGE):
        lock._read(out / name)
    with lock.acquire(out, "the fuzz test"):
        pass
    envprobe.environment(out, False, rt.kind.backend)
    arts = layout.load_artifacts(out)
    layout.damaged(out, arts)
    spec.read(out, arts)
    spec.why_stale(out, stamp, "1.23.2")
    plan._spec_why(out, stamp, "1.23.2")
    layout.check(shard, rt.pin, "cpu", arts)
    gpuref.read(out, arts)


ELSEWHERE = ("gpuref.py", "envprobe.py")
"""Readers outside the build side's modules (the report's second reference, the run's environment probe): their
tracebacks are counted apart, and :func:`test_the_readers_outside_the_build_side_too` expects them mended."""


@pytest.fixture(scope="module")
def fuzzed(build: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every kind × every damage, read by every reader: the count, and each traceback by the module it ends in."""
    matrix = load(build.parent / "matrix.toml")
    out = tmp_path_factory.mktemp("damaged") / "build"
    found: dict[str, Any] = {"count": 0, "one_line": 0, "kinds": set(), "tracebacks": [], "elsewhere": []}
    for kind, label, rel, damage in cases(build):
        _copy(build, out)
        damage(out / rel)
        found["count"] += 1
        found["kinds"].add(kind)
        try:
            _read_everything(out, matrix)
        except HarnessError as exc:
            found["one_line"] += 1
            assert "\n" not in str(exc), (kind, label, str(exc))
        except Exception as exc:  # a traceback: what this test is for
            where = Path(traceback.extract_tb(exc.__traceback__)[-1].filename).name
            line = f"{kind} / {label}: {type(exc).__name__}: {exc} ({where})"
            found["elsewhere" if where in ELSEWHERE else "tracebacks"].append(line)
    return found


def test_any_bytes_in_any_build_file_are_one_line_or_redone(fuzzed: dict[str, Any]) -> None:
    count, kinds_seen = fuzzed["count"], fuzzed["kinds"]
    said = f"{fuzzed['one_line']} one line, the rest redone or left out"
    print(f"\nbuild fuzz: {len(kinds_seen)} kinds of file, {count} damaged files: {said}")
    assert not fuzzed["tracebacks"], f"{len(fuzzed['tracebacks'])} of {count}:\n" + "\n".join(fuzzed["tracebacks"])
    assert len(kinds_seen) >= 17 and count > 300


def test_the_readers_outside_the_build_side_too(fuzzed: dict[str, Any]) -> None:
    assert not fuzzed["elsewhere"], "\n".join(fuzzed["elsewhere"])


CLI_DAMAGES = ("random bytes", "JSON []", "a folder in its place")


def test_the_real_commands_over_a_damaged_build_say_one_line_or_redo_it(build: Path, tmp_path: Path) -> None:
    """`harness plan` and `harness report` over each kind damaged three ways; `harness run` and `harness spec` over
    random bytes."""
    bad: list[str] = []
    count = 0
    for kind, path in kinds(build).items():
        for label, damage in damages(path).items():
            if label not in CLI_DAMAGES:
                continue
            out = tmp_path / "build"
            _copy(build, out)
            shutil.rmtree(tmp_path / "results", ignore_errors=True)
            shutil.copytree(build.parent / "results", tmp_path / "results", symlinks=True)
            damage(out / path.relative_to(build))
            for command in ("plan", "report", "run", "spec") if label == "random bytes" else ("plan", "report"):
                count += 1
                proc = _in(tmp_path, build.parent, out, command)
                said = proc.stdout + proc.stderr
                errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("harness: error:")]
                if "Traceback" in said or proc.returncode not in (0, 2) or (proc.returncode == 2 and len(errors) != 1):
                    bad.append(f"{command} / {kind} / {label}: exit {proc.returncode}: {said[-600:]}")
    print(f"\nbuild fuzz, real commands: {count} runs")
    assert not bad, "\n".join(bad)


def _in(tmp_path: Path, top: Path, out: Path, command: str) -> subprocess.CompletedProcess[str]:
    """A real command over the damaged copy, its results folder the copy's."""
    args = [sys.executable, "-m", "harness", command, "--matrix", str(top / "matrix.toml"), "--profile", PROFILE]
    args += ["--out", str(out)]
    if command == "plan":
        args += ["--corpus", str(top / "my_cases.py"), "--only-corpus"]
    if command in ("plan", "report"):
        args += ["--results", str(tmp_path / "results")]
    if command == "run":
        args += ["--runtime", onnxruntime.__version__, "--no-latency"]
    env = {**os.environ, "PYTHONUTF8": "1"}
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
