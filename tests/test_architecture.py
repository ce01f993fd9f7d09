"""The package's layout, checked: which folder may import which, what each environment's code may import, sizes.

The import graph is :mod:`harness.store.code`'s, the one the cache keys follow: every import statement of the
package (inside functions too), and the strings that name harness code for a process to import. So a rule broken
here is an import that really runs, and a module these rules cannot see cannot be missing from a key either.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.store import code

PACKAGE = code.PACKAGE

ALLOWED = {
    "core": set(),
    "config": {"core"},
    "store": {"core", "config"},
    "cases": {"core", "config", "store"},
    "numeric": {"core", "config", "store"},
    "pool": {"core"},
    "answer": {"core", "config", "store"},
    "export": {"core", "config", "store", "cases", "numeric", "pool"},
    "run": {"core", "config", "store", "numeric", "pool"},
    "spec": {"core", "config", "store", "numeric", "pool"},
    "publish": {"core", "config", "store", "numeric", "answer"},
    "transform": {"core", "config", "store", "numeric", "pool", "export"},
    "check": {"core", "config", "store", "numeric", "pool", "export", "transform", "answer"},
}
"""Folder → the folders it may import besides itself. The four stages (export, spec, run, publish) import no other
stage; the transform stage, the step after export, records its files' localization data as the export does (with
``harness.export.node_values``, which imports torch only for a dynamo program, never given here); ``answer`` reads a
published table and is read by the report (the README states the answer); the command line (``cli``, ``__main__``)
may import anything and nothing imports it. ``check`` (``harness check``: a user's own file, or one module) is a
command of its own above the stages: it runs a file on every runtime (its worker, in each runtime's environment, imports
nothing of the harness), asks the specification with the transform stage's evaluator, localizes with the export's
debug model, picks a module's opsets with ``answer``, and runs the export stage as a process for a module spec."""

ENVIRONMENTS = {
    "harness.export.stage": {"pandas", "tabulate"},
    "harness.run.stage": {"torch", "onnx", "onnxscript", "pandas", "tabulate", "transformers"},
    "harness.spec.stage": {"torch", "onnxscript", "onnxruntime", "pandas", "tabulate", "transformers"},
    "harness.transform.stage": {"torch", "onnxscript", "pandas", "tabulate", "transformers"},
    "harness.publish.report": {"torch", "onnxscript", "onnxruntime", "transformers"},
    "harness.answer.recommend": {"torch", "onnx", "onnxscript", "onnxruntime", "pandas", "tabulate", "numpy"},
    "harness.answer.diff": {"torch", "onnx", "onnxscript", "onnxruntime", "pandas", "tabulate", "numpy"},
    "harness.answer.real_models": {"torch", "onnx", "onnxscript", "onnxruntime", "pandas", "tabulate", "numpy"},
    "harness.answer.torch_table": {"torch", "onnx", "onnxscript", "onnxruntime", "pandas", "tabulate", "numpy"},
    "harness.check.worker": {"torch", "onnx", "onnxscript", "pandas", "tabulate", "transformers"},
    "harness.check.stage": {"torch", "onnxscript", "pandas", "tabulate", "transformers"},
}
"""Entry point → the libraries its environment does not hold: the run environments hold one runtime and numpy,
the report's pandas, tabulate and numpy, and ``harness recommend`` and ``harness diff`` answer from the files
alone. No module it imports may import them, even inside a function (:data:`LAZY` aside)."""

LAZY = {
    "harness.store.frontier": {"onnx", "onnxruntime", "numpy"},
    "harness.export.node_values": {"torch"},
}
"""The one module that imports, inside its functions, libraries of two environments: the frontier's models are
written with ``onnx`` in the export environment (``write_models``) and loaded with ``onnxruntime`` in each run
environment (``measure``); the report and ``recommend`` only read its files. ``node_values`` records a file's node
values with onnxruntime in the export environment and in the transform environment, and imports torch only for a
dynamo program's torch side, which only the export hands it. Any other such import is refused."""

MAX_MODULES = 9
"""The most modules (``__init__`` aside) one folder holds."""

ROOT_MODULES = {"harness": "root", "harness.cli": "cli", "harness.__main__": "cli"}
"""The modules at the package's root and the rule each follows: ``harness/__init__.py`` runs before every module
of the package (in every environment), so it imports nothing of the harness; the command line may import anything.
Any other module at the root is refused: a module belongs to a folder, which says what it may import."""

RESOLVERS = {
    "harness.pool.workers": "a task's ``module:function``, a literal string where the task is made (the graph sees it)",
    "harness.run.backends.contract": "a runtime kind's backend, a literal string in the registry (config/runtimes.py)",
    "harness.cases.corpus": "the user's corpus modules and a lazy case's factory: the user's code, keyed by its source",
    "harness.cases.source": "the modules a case's source imports, to digest them: the user's code",
    "harness.export._exporters": "the exporting libraries, for their versions (torch, onnx, onnxscript)",
    "harness.config.matrix": "whether a corpus module matrix.toml names exists (``find_spec``: the user's code)",
    "harness.check.module": "a module spec's module (``pkg.module:factory`` or ``file.py:factory``): the user's code",
}
"""The modules that may import a module whose name is computed, and what each resolves. Anywhere else a computed
name (``import_module("harness.publish." + x)``) would be an import the graph, and so the keys and the rules
above, cannot see; and nowhere may a computed name be built from a harness prefix."""

_IMPORTERS = {"import_module", "__import__", "find_spec", "spec_from_file_location"}


def _modules(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).with_suffix("")
        parts = list(rel.parts[:-1]) if rel.name == "__init__" else list(rel.parts)
        found.append(".".join(parts))
    return found


def _folder(module: str, package: Path = PACKAGE) -> str:
    """The folder whose rules ``module`` follows: its first folder, or for a module at the root its rule
    (:data:`ROOT_MODULES`), or ``"?"`` for a root module no rule knows."""
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and (package / parts[1]).is_dir()):
        return parts[1]
    return ROOT_MODULES.get(module, "?")


def layering(package: Path = PACKAGE) -> list[str]:
    """Every import, direct or through others (a module's computed closure), that breaks :data:`ALLOWED`."""
    broken = []
    for module in _modules(package):
        mine = _folder(module, package)
        if mine == "?":
            broken.append(f"{module} is a module at the package's root: only cli and __main__ live there")
            continue
        if mine == "cli":
            continue
        if mine not in ALLOWED and mine != "root":
            broken.append(f"{module} is in a folder the rules do not know ({mine})")
            continue
        allowed = {mine, "root"} | ALLOWED.get(mine, set())
        for dep in code.closure(module, package=package):
            theirs = _folder(dep, package)
            if theirs == "cli":
                broken.append(f"{module} imports the command line ({dep})")
            elif theirs not in allowed:
                how = "imports" if dep in code.imports(module, package) else "runs, through its imports,"
                broken.append(f"{module} ({mine}) {how} {dep} ({theirs})")
    return broken


def _computed(call: ast.Call) -> str | None:
    """What is wrong with a call that imports a module by name, or None: a literal name is an import the graph
    sees (and checks); a computed one is allowed only in :data:`RESOLVERS`, and never built from a harness
    prefix."""
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in _IMPORTERS or not call.args:
        return None
    arg = call.args[0]
    if isinstance(arg, ast.Constant):
        return None
    parts = [n.value for n in ast.walk(arg) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    if any(p.startswith(code.ROOT) for p in parts):
        return "a harness module by a computed name"
    return "a module by a computed name"


def computed_imports(package: Path = PACKAGE) -> list[str]:
    """Every import of a computed name outside :data:`RESOLVERS`, and every one built from a harness prefix."""
    broken = []
    for module in _modules(package):
        path = code.module_path(module, package)
        assert path is not None
        for node in ast.walk(ast.parse(path.read_bytes())):
            what = _computed(node) if isinstance(node, ast.Call) else None
            if what is not None and (module not in RESOLVERS or what.startswith("a harness")):
                broken.append(f"{module}:{node.lineno} imports {what}: name it in a literal string")
    return broken


def test_every_folder_imports_only_the_folders_below_it_directly_or_through_others() -> None:
    assert not layering(), "\n".join(layering())


def test_no_module_imports_a_computed_name_but_the_resolvers() -> None:
    assert not computed_imports(), "\n".join(computed_imports())


INJECTED = {
    "a computed harness name in core": (
        "core/errors.py",
        "def _late(x):\n    import importlib\n    return importlib.import_module('harness.publish.' + x)\n",
        computed_imports,
        "harness.core.errors:",
    ),
    "the package's __init__ importing publish": (
        "__init__.py",
        "def _late():\n    from harness.publish import report\n    return report\n",
        layering,
        "harness (root) imports harness.publish",
    ),
    "core reaching answer through a new root module": (
        "shared.py",
        "from harness.answer import published\n",
        layering,
        "harness.core.errors (core) runs, through its imports, harness.answer",
    ),
}
"""Imports the first layering test let through, each injected into a copy of the package: every one is refused."""


@pytest.mark.parametrize("name", sorted(INJECTED))
def test_an_injected_forbidden_import_is_refused(tmp_path: Path, name: str) -> None:
    rel, source, check, expected = INJECTED[name]
    package = tmp_path / code.ROOT
    shutil.copytree(PACKAGE, package, ignore=shutil.ignore_patterns("__pycache__"))
    assert not check(package)
    path = package / rel
    path.write_text((path.read_text() if path.exists() else "") + "\n" + source)
    if rel == "shared.py":  # and core imports it: core → a root module → answer
        errors = package / "core" / "errors.py"
        errors.write_text(errors.read_text() + "\n\ndef _shared():\n    from harness import shared\n    return shared\n")
    found = check(package)
    assert any(line.startswith(expected) for line in found), found
    if rel == "shared.py":
        assert "harness.shared is a module at the package's root: only cli and __main__ live there" in found


def _external(module: str, top_level_only: bool) -> set[str]:
    """The top-level names of the libraries ``module`` imports (not the standard library's, not the package)."""
    path = code.module_path(module)
    assert path is not None
    tree = ast.parse(path.read_bytes())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("harness", "__future__", *BACKPORTS)}


BACKPORTS = {"tomli": "tomllib"}
"""The standard library's modules as older Pythons install them (a run environment on Python 3.9 or 3.10 installs
``tomli``: :attr:`harness.config.matrix.Runtime.requirements`), imported only where the standard one is missing."""


@pytest.mark.parametrize("entry", sorted(ENVIRONMENTS))
def test_no_module_an_entry_point_runs_imports_what_its_environment_lacks(entry: str) -> None:
    absent = ENVIRONMENTS[entry]
    found = {m: (_external(m, top_level_only=False) - LAZY.get(m, set())) & absent for m in code.closure(entry)}
    assert not {m: libs for m, libs in found.items() if libs}


def test_the_run_stage_and_every_backend_import_only_numpy_at_the_top() -> None:
    """A run environment holds one runtime package and numpy: anything else at the top of a module it imports is an
    ImportError before the first cell (the backends import their runtime inside their functions)."""
    from harness.config import runtimes

    entries = [code.RUN_ENTRY, *(code.backend_module(k.backend) for k in runtimes.KINDS)]
    found = {m: _external(m, top_level_only=True) - {"numpy"} for m in code.closure(*entries)}
    assert not {m: libs for m, libs in found.items() if libs}


def test_core_is_the_standard_library_alone() -> None:
    found = {m: _external(m, top_level_only=False) for m in _modules() if _folder(m) in ("core", "root")}
    assert not {m: libs for m, libs in found.items() if libs}


def test_no_folder_holds_more_than_a_screenful_of_modules() -> None:
    for folder in [PACKAGE, *(p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__")]:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        assert len(modules) <= MAX_MODULES, (folder, len(modules))


def test_an_internal_module_is_imported_only_inside_its_own_folder() -> None:
    """``_x.py`` is a folder's own business: another folder reaching into it is a missing public name."""
    broken = []
    for module in _modules():
        for dep in code.imports(module):
            folder, _, name = dep.rpartition(".")
            if name.startswith("_") and module != folder and not module.startswith(folder + "."):
                broken.append(f"{module} imports {dep}")
    assert not broken, "\n".join(broken)


def test_every_string_that_names_harness_code_names_a_module_that_exists() -> None:
    """A ``"module:function"`` task or a preloaded module that no longer exists would fail only in a worker: the
    import graph (and so the keys) would not see it either."""
    missing = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and code._REFERENCE.fullmatch(node.value):
                name = node.value.partition(":")[0]
                if code.module_path(name) is None:
                    missing.append(f"{path.relative_to(PACKAGE)}: {node.value}")
    assert not missing, "\n".join(missing)


def test_the_graph_sees_an_import_inside_a_function_and_a_string_reference_but_not_type_checking() -> None:
    assert "harness.pool._forkserver" in code.imports("harness.pool.workers")  # only named in a string
    assert "harness.store.frontier" in code.imports("harness.store.stamps")  # imported inside a function
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from harness.publish import report\nelse:\n    from harness.store import lock\n"
        "def f():\n    from harness.numeric import compare\n"
        "TASK = 'harness.pool.workers:run_tasks'\n"
        "PROGRAM = 'import sys; from harness.run.envprobe import probe_environment'\n"
        "PROSE = 'see harness.answer.diff for more'\n"
    )
    visitor = code._Imports("harness.x.y", is_package=False)
    visitor.visit(ast.parse(source))
    assert visitor.found == {
        "harness.store",
        "harness.store.lock",
        "harness.numeric",
        "harness.numeric.compare",
        "harness.pool.workers",
        "harness.run.envprobe",
    }


_EFFECTS = """
import json, os, signal, sys, sysconfig, threading
for library in ("numpy", "onnx", "onnxruntime", "pandas", "tabulate"):  # their own import effects are theirs
    try:
        __import__(library)
    except ImportError:
        pass
STDLIB = sysconfig.get_paths()["stdlib"]
def ours():
    \"\"\"Whether the code that asked is the harness's: the first frame outside the standard library.\"\"\"
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith("<") or name.startswith(STDLIB)):
            return os.path.basename(os.path.dirname(name)) != "site-packages" and "site-packages" not in name
        frame = frame.f_back
    return False
EVENTS = ("subprocess.Popen", "os.system", "os.fork", "os.forkpty", "os.exec", "os.posix_spawn", "os.spawn",
          "socket.connect", "socket.bind", "os.chdir", "os.putenv", "os.unsetenv", "os.remove", "os.rename",
          "os.mkdir", "os.rmdir", "os.chmod", "os.truncate", "os.kill", "shutil.rmtree", "shutil.move", "ctypes.dlopen")
said = []
def hook(event, args):
    writing = event == "open" and ((isinstance(args[1], str) and any(c in args[1] for c in "wax+"))
                                   or (isinstance(args[2], int) and args[2] & (os.O_WRONLY | os.O_RDWR)))
    itself = event == "ctypes.dlopen" and args[0] is None  # ``import ctypes`` opens the process itself
    if (writing or event in EVENTS) and not itself and ours():
        said.append(f"{event} {str(args)[:200]}")
before = (dict(os.environ), os.getcwd(), list(sys.path), threading.active_count(),
          {s: signal.getsignal(s) for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)})
sys.addaudithook(hook)
import importlib
for name in sys.argv[1:]:  # the command line first: what the fork servers preload as ``__main__``
    importlib.import_module(name)
after = (dict(os.environ), os.getcwd(), list(sys.path), threading.active_count(),
         {s: signal.getsignal(s) for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)})
names = ("environment", "working directory", "sys.path", "threads", "signal handlers")
said += [f"changed the {n}" for n, b, a in zip(names, before, after) if b != a]
print(json.dumps(said))
"""


def _effects(top: Path) -> list[str]:
    """What importing every module of the package at ``top`` did (its libraries present: the run stage's backends
    import theirs inside their functions)."""
    modules = ["harness.__main__", *(m for m in _modules(top / code.ROOT) if m != "harness.__main__")]
    proc = subprocess.run(
        [sys.executable, "-c", _EFFECTS, *modules],
        cwd=top,
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(top), "PYTHONDONTWRITEBYTECODE": "1"},
    )
    return list(json.loads(proc.stdout))


def test_importing_any_module_of_the_package_has_no_effect() -> None:
    """The export's and the run's fork servers preload ``__main__`` (the command line): the modules it imports run in
    every worker, in no stage's key, and the command line may import any module. Importing every one writes nothing,
    starts nothing, changes no process state (the environment, the working directory, ``sys.path``, threads,
    signal handlers)."""
    assert _effects(PACKAGE.parent) == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("effect", "said"),
    [("import os\nos.environ['HARNESS_EFFECT'] = '1'\n", "changed the environment"), ("open('x.log', 'w')\n", "open")],
)
def test_an_import_time_effect_in_a_module_only_the_command_line_imports_is_found(tmp_path: Path, effect: str, said: str) -> None:
    shutil.copytree(PACKAGE, tmp_path / code.ROOT, ignore=shutil.ignore_patterns("__pycache__"))
    markdown = tmp_path / code.ROOT / "publish" / "markdown.py"
    markdown.write_text(markdown.read_text() + "\n" + effect)
    assert any(line.startswith(said) for line in _effects(tmp_path))


def test_a_status_is_set_only_through_the_one_outcome_mapping() -> None:
    """Every cell's status comes from :class:`harness.core.records.Outcome` (its ``status``): a ``status=Status.X``
    anywhere else is a second mapping, free to drift from the first."""
    found = []
    for module in _modules():
        if module == "harness.core.records":
            continue
        path = code.module_path(module)
        assert path is not None
        for node in ast.walk(ast.parse(path.read_bytes())):
            values = []
            if isinstance(node, ast.keyword) and node.arg == "status":
                values = [node.value]
            elif isinstance(node, ast.Dict):
                pairs = zip(node.keys, node.values, strict=True)
                values = [v for k, v in pairs if isinstance(k, ast.Constant) and k.value == "status"]
            for v in values:
                if isinstance(v, ast.Attribute) and isinstance(v.value, ast.Name) and v.value.id == "Status":
                    found.append(f"{module}:{v.lineno} sets status=Status.{v.attr}: use an Outcome")
    assert not found, "\n".join(found)


LONG = 60
"""Lines of a function's body (its docstring aside) past which its docstring says why it is one piece."""


def test_a_function_over_sixty_lines_says_why_it_is_one_piece() -> None:
    found = []
    for module in _modules():
        path = code.module_path(module)
        assert path is not None
        for node in ast.walk(ast.parse(path.read_bytes())):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node) or ""
            body = node.body[1:] if doc else node.body
            lines = (node.end_lineno or 0) - body[0].lineno + 1 if body else 0
            if lines > LONG and "over 60 lines" not in doc.lower():
                found.append(f"{module}.{node.name}: {lines} lines, and no why")
    assert not found, "\n".join(found)
