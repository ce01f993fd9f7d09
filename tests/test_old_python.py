"""The run stage on the oldest Python a runtime names: onnxruntime 1.10 and 1.11 were built up to CPython 3.9, 1.12 to
1.14 up to 3.10 (matrix.toml's ``python = "3.9"``), so everything a run environment imports (the run stage's computed
closure, :func:`harness.store.code.run_files`, and the command line that starts it) must compile and import there,
and the run stage must work there on a real onnxruntime of that era. The export and report stay on 3.11.

The interpreter is found as the noxfile finds it (:func:`harness.config.pythons.find`: PATH, uv, pyenv); a machine
without it skips these tests with the line that says what to install (the matrix then labels those columns).
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from harness.config import pythons, runtimes
from harness.config.matrix import Runtime, load, version_tuple
from harness.core.records import CellRecord, Status
from harness.store import code, frontier, layout
from tests.artifacts import add_one, div_int_min, write_artifact, write_manifest

ROOT = Path(__file__).resolve().parent.parent
MATRIX = load(ROOT / "matrix.toml")
OLD = sorted((rt for rt in MATRIX.runtimes if rt.python), key=lambda rt: (version_tuple(rt.python), version_tuple(rt.version)))
"""The runtimes that name an older Python, oldest Python first (then oldest release)."""
COMMAND_LINE = ("harness.cli", "harness.__main__")
"""What ``python -m harness run`` imports besides the run closure (the command line imports the rest lazily)."""
REPRODUCER = "publish/repro/_script.py"
"""Copied as ``repro.py`` into every reproducer folder: a user of those runtimes runs it on their Python (compiled
here; importing it reads its folder's repro.json)."""

pytestmark = pytest.mark.skipif(not OLD, reason="no runtime of matrix.toml names an older Python")

CHECK = r"""
import importlib, sys
root, files, modules = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
bad = []
for name in files:
    path = root + "/harness/" + name
    try:
        compile(open(path, encoding="utf-8").read(), path, "exec")
    except SyntaxError as exc:
        bad.append("harness/%s:%s: SyntaxError: %s" % (name, exc.lineno, exc.msg))
for module in modules:
    try:
        importlib.import_module(module)
    except Exception as exc:
        bad.append("%s: %s: %s" % (module, type(exc).__name__, exc))
print("\n".join(bad))
sys.exit(1 if bad else 0)
"""
"""Run by the old interpreter: compile every file, import every module, one line per failure."""


def _oldest() -> Runtime:
    return OLD[0]


def _venv(folder: Path, python: str, *requirements: str) -> Path:
    """A venv of ``python`` holding ``requirements`` (no harness: it runs from the source tree, as the noxfile runs it)."""
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    venv = folder / "venv"
    subprocess.run([uv, "venv", "-q", "-p", python, str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    subprocess.run([uv, "pip", "install", "-q", "-p", str(py), *requirements], check=True, timeout=900)
    return py


@pytest.fixture(scope="module")
def old_python(tmp_path_factory: pytest.TempPathFactory) -> tuple[Runtime, Path]:
    """The oldest Python a runtime names, with that runtime installed as its run session installs it."""
    rt = _oldest()
    found = pythons.find(rt.python)
    if found is None:
        pytest.skip(pythons.missing(rt.pin, rt.python))
    return rt, _venv(tmp_path_factory.mktemp("oldpy"), found, *rt.requirements)


def _check(py: Path, package_root: Path, rt: Runtime) -> subprocess.CompletedProcess[str]:
    package = package_root / "harness"
    files = [*code.run_files(rt.kind.backend, package=package), REPRODUCER]
    modules = [*code.closure(code.RUN_ENTRY, code.backend_module(rt.kind.backend), package=package), *COMMAND_LINE]
    return subprocess.run(
        [str(py), "-c", CHECK, str(package_root), ",".join(files), ",".join(modules)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(package_root), "PATH": "/usr/bin:/bin"},
        cwd=package_root,
    )


def test_the_oldest_python_named_is_one_the_run_stage_supports() -> None:
    assert version_tuple(_oldest().python) >= version_tuple(runtimes.RUN_PYTHON)


@pytest.mark.e2e  # uv makes the old Python's environment
def test_the_run_closure_compiles_and_imports_on_the_oldest_python(old_python: tuple[Runtime, Path]) -> None:
    rt, py = old_python
    said = _check(py, ROOT, rt)
    assert said.returncode == 0, said.stdout + said.stderr
    started = subprocess.run(
        [str(py), "-m", "harness", "run", "--help"], capture_output=True, text=True, env={"PYTHONPATH": str(ROOT)}, timeout=120
    )
    assert started.returncode == 0 and "--runtime" in started.stdout, started.stderr


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("module", "added", "said"),
    [
        # a statement Python 3.10 introduced: the old interpreter cannot compile the file
        ("run/_dispatch.py", "\n\ndef _kind(x):\n    match x:\n        case _:\n            return x\n", "SyntaxError"),
        # an annotation evaluated when the module runs (an alias), ``X | Y`` of types: 3.10's
        ("run/envprobe.py", "\n\nMaybePath = Path | None\n", "TypeError: unsupported operand type(s) for |"),
        # a module without postponed annotations: a signature's annotation is evaluated at definition
        ("pool/_freeze.py", "\n\ndef _later(x: int | None) -> None:\n    pass\n", "TypeError: unsupported operand type(s) for |"),
    ],
)
def test_the_check_fails_on_newer_python_in_the_run_closure(
    old_python: tuple[Runtime, Path], tmp_path: Path, module: str, added: str, said: str
) -> None:
    rt, py = old_python
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "harness", copy / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    path = copy / "harness" / module
    assert module in code.run_files(rt.kind.backend, package=copy / "harness")
    text = path.read_text()
    if module == "pool/_freeze.py":
        assert "from __future__ import annotations" not in text  # the point of this case
    path.write_text(text + added)
    result = _check(py, copy, rt)
    assert result.returncode == 1
    assert said in result.stdout, result.stdout


def _older(model: onnx.ModelProto, opset: int, ir: int) -> onnx.ModelProto:
    """``model`` written at ``opset`` and IR ``ir`` (its ops are the same at both)."""
    del model.opset_import[:]
    model.opset_import.append(helper.make_opsetid("", opset))
    model.ir_version = ir
    onnx.checker.check_model(model)
    return model


@pytest.mark.e2e
def test_the_run_stage_runs_on_the_oldest_python(old_python: tuple[Runtime, Path], tmp_path: Path) -> None:
    """A real run of the oldest runtime on its own Python: a pass, a mismatch (localized), a process killed by a probe,
    an opset beyond it refused at load, its frontier measured, its environment recorded."""
    rt, py = old_python
    out = tmp_path / "build"
    f32, i32 = np.float32, np.int32
    x = {"example": {"x": np.array([1.0, 2.0, 3.0], f32)}}
    div = {
        "example": {"a": np.array([7, -9], i32), "b": np.array([2, 4], i32)},
        "boom": {"a": np.array([-(2**31), 1], i32), "b": np.array([-1, 1], i32)},
    }
    divided = {"example": [np.array([3, -2], i32)], "boom": [np.zeros(2, i32)]}
    ids = [
        write_artifact(out, "add13", _older(add_one(), 13, 7), x, {"example": [x["example"]["x"] + 1]}, opset=13),
        write_artifact(out, "wrong13", _older(add_one(), 13, 7), x, {"example": [x["example"]["x"] + 2]}, opset=13),
        write_artifact(out, "div13", _older(div_int_min(), 13, 7), div, divided, opset=13),
        write_artifact(out, "add17", add_one(), x, {"example": [x["example"]["x"] + 1]}, opset=17),
    ]
    write_manifest(out, [r.key.id for r in ids])
    profile = next(p for p in MATRIX.profiles.values() if rt in p.runtimes and not p.torch)
    command = [str(py), "-m", "harness", "run", "--matrix", str(ROOT / "matrix.toml"), "--profile", profile.name]
    done = subprocess.run(
        [*command, "--out", str(out), "--runtime", rt.pin, "--provider", "cpu"],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    cells = [CellRecord.from_dict(json.loads(line)) for line in layout.shard_path(out, rt, "cpu").read_text().splitlines()]
    by = {(c.case, c.probe): c for c in cells}
    assert by[("add13", "example")].status is Status.PASS
    assert by[("wrong13", "example")].status is Status.MISMATCH
    assert by[("div13", "example")].status is Status.PASS
    assert by[("div13", "boom")].status is Status.CRASH
    refused = by[("add17", "example")]
    assert refused.status is Status.LOAD_FAIL, refused.error_line
    env = by[("add13", "example")].env
    assert env["onnxruntime"] == rt.version and env["python"].startswith(rt.python + "."), env
    measured = frontier.read(out, [(rt.id, rt.pin)])[rt.pin]
    assert measured["max_opset"] is not None and measured["max_opset"] < 17, measured


def test_a_missing_python_is_found_nowhere_and_its_columns_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No interpreter of that version anywhere (an empty pyenv root, a PATH without it, no uv): None, and the run
    records each column as not measured with the line saying what to install; its frontier says the same."""
    from harness.run.stage import run_runtime

    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "no-pyenv"))
    monkeypatch.setenv("PATH", "/nonexistent")
    pythons.find.cache_clear()
    try:
        assert pythons.find("3.9") is None
    finally:
        pythons.find.cache_clear()
    rt = _oldest()
    why = pythons.missing(rt.pin, rt.python)
    assert f"uv python install {rt.python}" in why and "not measured" in why and "\n" not in why
    out = tmp_path / "build"
    write_manifest(out, [write_artifact(out, "add13", _older(add_one(), 13, 7), *_add_probes(), opset=13).key.id])
    (cell,) = run_runtime(MATRIX, rt, ["cpu"], out, unmeasured=why, echo=lambda _: None)
    assert cell.status is Status.ENV_ERROR and cell.runtime_wide and cell.error_line == why
    measured = frontier.read(out, [(rt.id, rt.pin)])[rt.pin]
    assert measured["max_opset"] is None and measured["error"] == why


def test_the_oldest_python_is_found_where_pyenv_keeps_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pyenv root with two patches of the version: the newest that answers is taken (a fake interpreter that says
    another version is not)."""
    version = _oldest().python
    real = pythons.find(version)
    if real is None:
        pytest.skip(pythons.missing(_oldest().pin, version))
    for patch, target in (("1", real), ("99", "/bin/false")):
        folder = tmp_path / "versions" / f"{version}.{patch}" / "bin"
        folder.mkdir(parents=True)
        (folder / f"python{version}").symlink_to(target)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    pythons.find.cache_clear()
    try:
        assert pythons.find(version) == str(tmp_path / "versions" / f"{version}.1" / "bin" / f"python{version}")
    finally:
        pythons.find.cache_clear()


def _add_probes() -> tuple[dict[str, dict[str, np.ndarray]], dict[str, list[np.ndarray]]]:
    x = np.array([1.0, 2.0, 3.0], np.float32)
    return {"example": {"x": x}}, {"example": [x + 1]}


NEWER = {
    ("sys", "stdlib_module_names"): "3.10",
    ("itertools", "pairwise"): "3.10",
    ("types", "UnionType"): "3.10",
    ("types", "NoneType"): "3.10",
    ("types", "EllipsisType"): "3.10",
    ("typing", "TypeAlias"): "3.10",
    ("typing", "ParamSpec"): "3.10",
    ("typing", "TypeGuard"): "3.10",
    ("typing", "Self"): "3.11",
    ("datetime", "UTC"): "3.11",
    ("contextlib", "chdir"): "3.11",
    ("hashlib", "file_digest"): "3.11",
    ("asyncio", "TaskGroup"): "3.11",
    ("enum", "StrEnum"): "3.11",
}
"""Standard-library names newer than 3.9, used at call time (an import test cannot see them): ``module.name``."""
NEWER_CALLS = {"aiter": "3.10", "anext": "3.10", "ExceptionGroup": "3.11"}
NEWER_KEYWORDS = {("zip", "strict"): "3.10", ("dataclass", "slots"): "3.10", ("dataclass", "kw_only"): "3.10"}
KNOWN: set[str] = set()
"""Uses the run stage reaches only on input no committed matrix.toml gives (a corpus entry naming no local module),
left for the next change that moves every key (it is in the export's closure too): this list only shrinks."""


def _guarded(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    """Inside a ``try`` that catches what the older Python raises instead (ImportError, AttributeError, NameError)."""
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.Try):
            types = [h.type for h in node.handlers if h.type is not None]
            caught = {n.id for t in types for n in ast.walk(t) if isinstance(n, ast.Name)}
            if caught & {"ImportError", "ModuleNotFoundError", "AttributeError", "NameError"}:
                return True
    return False


def _newer_uses(package: Path, files: list[str]) -> set[str]:
    found = set()
    for name in files:
        tree = ast.parse((package / name).read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            said = None
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if (node.value.id, node.attr) in NEWER:
                    said = f"{node.value.id}.{node.attr} ({NEWER[node.value.id, node.attr]})"
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if (node.module, alias.name) in NEWER:
                        said = f"{node.module}.{alias.name} ({NEWER[node.module, alias.name]})"
            elif isinstance(node, ast.Call):
                callee = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                if callee in NEWER_CALLS:
                    said = f"{callee}() ({NEWER_CALLS[callee]})"
                for kw in node.keywords:
                    if (callee, kw.arg) in NEWER_KEYWORDS:
                        said = f"{callee}({kw.arg}=) ({NEWER_KEYWORDS[callee, kw.arg]})"
            if said and not _guarded(node, parents):
                found.add(f"{name}: {said}")
    return found


def test_no_call_time_feature_newer_than_the_oldest_python_in_the_run_closure() -> None:
    """What compiling and importing cannot see: a name or keyword the older Python lacks, met only when the line runs
    (``zip(strict=True)`` is a TypeError on 3.9 when called). Guarded uses (a ``try`` that falls back) are fine."""
    rt = _oldest()
    package = ROOT / "harness"
    files = [*code.run_files(rt.kind.backend, package=package), "cli.py", "__main__.py", REPRODUCER]
    assert _newer_uses(package, files) == KNOWN


def test_the_call_time_check_sees_a_strict_zip_and_a_newer_name(tmp_path: Path) -> None:
    package = tmp_path / "harness"
    package.mkdir()
    (package / "x.py").write_text(
        "import itertools, sys\n"
        "def f(a, b):\n    return list(zip(a, b, strict=True)), itertools.pairwise(a)\n"
        "try:\n    from enum import StrEnum\nexcept ImportError:\n    StrEnum = None\n"
    )
    assert _newer_uses(package, ["x.py"]) == {"x.py: zip(strict=) (3.10)", "x.py: itertools.pairwise (3.10)"}
