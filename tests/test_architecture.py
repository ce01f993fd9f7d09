"""The package's layout, checked: which folder may import which, what each environment's code may import, sizes.

The import graph is :mod:`harness.build.code`'s, the one the cache keys follow: every import statement of the
package (inside functions too), and the strings that name harness code for a process to import. So a rule broken
here is an import that really runs, and a module these rules cannot see cannot be missing from a key either.
"""

from __future__ import annotations

import ast
import sys

import pytest

from harness.build import code

PACKAGE = code.PACKAGE

ALLOWED = {
    "core": set(),
    "config": {"core"},
    "build": {"core", "config"},
    "cases": {"core", "config", "build"},
    "numeric": {"core", "config", "build"},
    "pool": {"core"},
    "answer": {"core", "config", "build"},
    "export": {"core", "config", "build", "cases", "numeric", "pool"},
    "run": {"core", "config", "build", "numeric", "pool"},
    "spec": {"core", "config", "build", "numeric", "pool"},
    "publish": {"core", "config", "build", "numeric", "answer"},
}
"""Folder → the folders it may import besides itself. The four stages (export, spec, run, publish) import no other
stage; ``answer`` reads a published table and is read by the report (the README states the answer); the command
line (``cli``, ``__main__``) may import anything and nothing imports it."""

ENVIRONMENTS = {
    "harness.export.stage": {"pandas", "tabulate"},
    "harness.run.stage": {"torch", "onnx", "onnxscript", "pandas", "tabulate", "transformers"},
    "harness.spec.stage": {"torch", "onnxscript", "onnxruntime", "pandas", "tabulate", "transformers"},
    "harness.publish.report": {"torch", "onnxscript", "onnxruntime", "transformers"},
    "harness.answer.recommend": {"torch", "onnx", "onnxscript", "onnxruntime", "pandas", "tabulate", "numpy"},
    "harness.answer.diff": {"torch", "onnx", "onnxscript", "onnxruntime", "pandas", "tabulate", "numpy"},
    "harness.answer.models": {"torch", "onnx", "onnxscript", "onnxruntime", "pandas", "tabulate", "numpy"},
    "harness.answer.torch_table": {"torch", "onnx", "onnxscript", "onnxruntime", "pandas", "tabulate", "numpy"},
}
"""Entry point → the libraries its environment does not hold: the run environments hold one runtime and numpy,
the report's pandas, tabulate and numpy, and ``harness recommend`` and ``harness diff`` answer from the files
alone. No module it imports may import them, even inside a function (:data:`LAZY` aside)."""

LAZY = {
    "harness.build.frontier": {"onnx", "onnxruntime", "numpy"},
}
"""The one module that imports, inside its functions, libraries of two environments: the frontier's models are
written with ``onnx`` in the export environment (``write_models``) and loaded with ``onnxruntime`` in each run
environment (``measure``); the report and ``recommend`` only read its files. Any other such import is refused."""

MAX_MODULES = 9
"""The most modules (``__init__`` aside) one folder holds."""


def _modules() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = list(rel.parts[:-1]) if rel.name == "__init__" else list(rel.parts)
        found.append(".".join(parts))
    return found


def _folder(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and (PACKAGE / parts[1]).is_dir()) else None


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
    return {n for n in names if n not in sys.stdlib_module_names and n not in ("harness", "__future__")}


def test_every_folder_imports_only_the_folders_below_it() -> None:
    broken = []
    for module in _modules():
        mine = _folder(module)
        for dep in code.imports(module):
            theirs = _folder(dep)
            if dep.split(".")[1:2] == ["cli"] and module != "harness.__main__":
                broken.append(f"{module} imports the command line ({dep})")
            if mine is None or theirs is None or theirs == mine:
                continue
            if mine not in ALLOWED:
                broken.append(f"{module} is in a folder the rules do not know ({mine})")
            elif theirs not in ALLOWED[mine]:
                broken.append(f"{module} ({mine}) imports {dep} ({theirs})")
    assert not broken, "\n".join(broken)


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
    found = {m: _external(m, top_level_only=False) for m in _modules() if _folder(m) == "core"}
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
    assert "harness.build.frontier" in code.imports("harness.build.stamps")  # imported inside a function
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from harness.publish import report\nelse:\n    from harness.build import lock\n"
        "def f():\n    from harness.numeric import compare\n"
        "TASK = 'harness.pool.workers:run_tasks'\n"
        "PROGRAM = 'import sys; from harness.run.envprobe import probe_environment'\n"
        "PROSE = 'see harness.answer.diff for more'\n"
    )
    visitor = code._Imports("harness.x.y", is_package=False)
    visitor.visit(ast.parse(source))
    assert visitor.found == {
        "harness.build",
        "harness.build.lock",
        "harness.numeric",
        "harness.numeric.compare",
        "harness.pool.workers",
        "harness.run.envprobe",
    }
