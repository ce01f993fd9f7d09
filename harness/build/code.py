"""The code each stage runs, found by following its imports: what its cache keys hold, with no list kept by hand.

A stage's code digest (an artifact's export key, a cell's run key, the frontier's index) covers every module of
the package its entry point imports, transitively: top-level imports and those inside functions (they run too),
and each package's ``__init__`` on the way (Python runs it first). Imports under ``if TYPE_CHECKING:`` never run
and do not count. A runtime kind's backend is named by a string in the registry, never imported statically, so
a run key adds the closure of its kind's backend (:func:`run_files`): an edit of one backend moves only its
own cells. Every other string that names harness code for a process to import counts as an import of the module
that holds it: a ``"module:function"`` task of the worker pool, a preloaded module, a ``-c`` program.

Standard library only: the noxfile and the run environments read it.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from harness.build import cache

PACKAGE = cache.PACKAGE
ROOT = PACKAGE.name  # "harness"

EXPORT_ENTRY = "harness.export.stage"
"""What the export stage runs (its workers import :mod:`harness.export._exporters`, which it imports too)."""
RUN_ENTRY = "harness.run.stage"
"""What the run stage runs, besides the backend of each runtime kind."""


def module_path(name: str) -> Path | None:
    """The file of module ``name`` of the package (``harness.a.b`` → ``a/b.py`` or ``a/b/__init__.py``), or None."""
    parts = name.split(".")
    if parts[0] != ROOT:
        return None
    base = PACKAGE.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


_REFERENCE = re.compile(rf"{ROOT}(?:\.\w+)+(?::\w+)?")
"""A string that is nothing but a module of the package (``harness.pool._forkserver``, ``module:function``)."""
_PROGRAM = re.compile(rf"\b(?:from|import) ({ROOT}(?:\.\w+)*)")
"""A module a ``-c`` program imports."""


_DATA = frozenset({"harness.config.runtimes", __name__})
"""Modules whose strings name code as data: the registry names each kind's backend (only that kind's cells' keys
add it: :func:`run_files`), this module the stages' entry points."""


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    """The package's modules a file imports, wherever the import statement is, but under ``if TYPE_CHECKING``."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.data = module in _DATA
        self.package = module if is_package else module.rpartition(".")[0]
        self.found: set[str] = set()

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            for stmt in node.orelse:
                self.visit(stmt)
            return
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if not isinstance(node.value, str) or self.data:
            return
        if _REFERENCE.fullmatch(node.value):
            self.found.add(node.value.partition(":")[0])
        elif node.value.startswith(("from ", "import ")):
            self.found.update(_PROGRAM.findall(node.value))

    def visit_Import(self, node: ast.Import) -> None:
        self.found.update(a.name for a in node.names if a.name.split(".")[0] == ROOT)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            anchor = self.package.split(".")[: len(self.package.split(".")) - (node.level - 1)]
            base = ".".join([*anchor, *([base] if base else [])])
        if base.split(".")[0] != ROOT:
            return
        self.found.add(base)
        for alias in node.names:  # ``from harness.build import cache``: a submodule, where one has that name
            if module_path(f"{base}.{alias.name}") is not None:
                self.found.add(f"{base}.{alias.name}")


@functools.cache
def imports(name: str) -> frozenset[str]:
    """The package's modules that module ``name`` imports directly, and the packages above each (run first)."""
    path = module_path(name)
    if path is None:
        return frozenset()
    visitor = _Imports(name, path.name == "__init__.py")
    visitor.visit(ast.parse(path.read_bytes(), str(path)))
    found: set[str] = set()
    for module in visitor.found:
        parts = module.split(".")
        found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(m for m in found if module_path(m) is not None and m != name)


def closure(*entries: str) -> tuple[str, ...]:
    """Every module of the package that importing ``entries`` runs, themselves and their packages included."""
    seen: set[str] = set()
    todo = [".".join(e.split(".")[:i]) for e in entries for i in range(1, len(e.split(".")) + 1)]
    while todo:
        name = todo.pop()
        if name in seen or module_path(name) is None:
            continue
        seen.add(name)
        todo.extend(imports(name))
    return tuple(sorted(seen))


def files(*entries: str) -> tuple[str, ...]:
    """The files of :func:`closure`, relative to the package (what :func:`harness.build.cache.code_digest` takes)."""
    return tuple(sorted(module_path(m).relative_to(PACKAGE).as_posix() for m in closure(*entries)))  # type: ignore[union-attr]


def backend_module(backend: str) -> str:
    """The module of a registry's ``module:Class`` backend reference."""
    return backend.partition(":")[0]


def export_files() -> tuple[str, ...]:
    """The harness code an artifact's files depend on: a change to any of it exports again."""
    return files(EXPORT_ENTRY)


def run_files(backend: str) -> tuple[str, ...]:
    """The harness code a cell's verdict depends on: the run stage's and its runtime kind's backend's."""
    return files(RUN_ENTRY, backend_module(backend))


def digest(names: tuple[str, ...]) -> str:
    """A digest of the files ``names`` by what they do (docstrings and comments aside)."""
    return cache.code_digest(names)
