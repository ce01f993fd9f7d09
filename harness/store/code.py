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

from harness.store import cache

PACKAGE = cache.PACKAGE
ROOT = PACKAGE.name  # "harness"

EXPORT_ENTRY = "harness.export.stage"
"""What the export stage runs (its workers import :mod:`harness.export._exporters`, which it imports too)."""
RUN_ENTRY = "harness.run.stage"
"""What the run stage runs, besides the backend of each runtime kind."""


def module_path(name: str, package: Path = PACKAGE) -> Path | None:
    """The file of module ``name`` of the package (``harness.a.b`` → ``a/b.py`` or ``a/b/__init__.py``), or None.

    Every function here takes ``package``, the folder of the package's source: this one, or a copy a test edits
    (the keys of an edit computed in-process, without an interpreter per question)."""
    parts = name.split(".")
    if parts[0] != ROOT:
        return None
    base = package.joinpath(*parts[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


_REFERENCE = re.compile(rf"{ROOT}(?:\.\w+)+(?::\w+)?")
"""A string that is nothing but a module of the package (``harness.pool._forkserver``, ``module:function``)."""
_PROGRAM = re.compile(rf"\b(?:from|import) ({ROOT}(?:\.\w+)*)")
"""A module a ``-c`` program imports."""


_DATA = frozenset({"harness.config.runtimes", "harness.store.spec", __name__})
"""Modules whose strings name code as data: the registry names each kind's backend (only that kind's cells' keys
add it: :func:`run_files`), this module and the spec's the stages' entry points (digested, never imported)."""


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
        for alias in node.names:  # ``from harness.store import cache``: a submodule, where one has that name
            self.found.add(f"{base}.{alias.name}")  # (kept by :func:`imports` only where that module exists)


def imports(name: str, package: Path = PACKAGE) -> frozenset[str]:
    """The package's modules that module ``name`` imports directly, and the packages above each (run first)."""
    path = module_path(name, package)
    if path is None:
        return frozenset()
    named = _named(name, path.name == "__init__.py", path.read_bytes())
    return frozenset(m for m in named if module_path(m, package) is not None and m != name)


@functools.cache
def _named(name: str, is_package: bool, source: bytes) -> frozenset[str]:
    """Every module name ``source`` may import, and the packages above each: parsed once per text of a module
    (the keys of every stage, and a test's copy of the package, read the same files)."""
    visitor = _Imports(name, is_package)
    visitor.visit(ast.parse(source))
    found: set[str] = set()
    for module in visitor.found:
        parts = module.split(".")
        found.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(found)


def closure(*entries: str, package: Path = PACKAGE) -> tuple[str, ...]:
    """Every module of the package that importing ``entries`` runs, themselves and their packages included."""
    seen: set[str] = set()
    todo = [".".join(e.split(".")[:i]) for e in entries for i in range(1, len(e.split(".")) + 1)]
    while todo:
        name = todo.pop()
        if name in seen or module_path(name, package) is None:
            continue
        seen.add(name)
        todo.extend(imports(name, package))
    return tuple(sorted(seen))


def files(*entries: str, package: Path = PACKAGE) -> tuple[str, ...]:
    """The files of :func:`closure`, relative to the package (what :func:`harness.store.cache.code_digest` takes)."""
    paths = [module_path(m, package) for m in closure(*entries, package=package)]
    return tuple(sorted(p.relative_to(package).as_posix() for p in paths if p is not None))


def backend_module(backend: str) -> str:
    """The module of a registry's ``module:Class`` backend reference."""
    return backend.partition(":")[0]


def export_files(package: Path = PACKAGE) -> tuple[str, ...]:
    """The harness code an artifact's files depend on: a change to any of it exports again."""
    return files(EXPORT_ENTRY, package=package)


def run_files(backend: str, package: Path = PACKAGE) -> tuple[str, ...]:
    """The harness code a cell's verdict depends on: the run stage's and its runtime kind's backend's."""
    return files(RUN_ENTRY, backend_module(backend), package=package)


def digest(names: tuple[str, ...], package: Path = PACKAGE) -> str:
    """A digest of the files ``names`` by what they do (docstrings and comments aside)."""
    return cache.code_digest(names, package)
