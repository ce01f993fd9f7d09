"""A case's source, by what it does: the digest an export's key holds (:func:`case_digest`).

The walk follows a case's code objects, constants, closures, defaults and every global they name into the
project's own modules (the user's files and the harness); an object of a library (torch, numpy) counts by its
qualified name, its version being part of the key. Line numbers and file names are left out: editing one case
does not move another's key. Standard library only (numpy arrays and torch modules are read, never imported).
"""

from __future__ import annotations

import dataclasses
import dis
import enum
import functools
import importlib
import importlib.util
import os
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness.store.cache import digest, is_project_file, probe_files, sha256_bytes, sha256_file


def _module_file(name: str | None) -> str | None:
    module = sys.modules.get(name or "")
    return getattr(module, "__file__", None)


_SKIP_CLASS_ATTRS = {"__dict__", "__weakref__", "__module__", "__doc__", "__qualname__", "__firstlineno__"}
_SKIP_CLASS_ATTRS |= {"__static_attributes__", "__annotations__", "__parameters__", "__orig_bases__"}


class _SourceHasher:
    """A digest of what an object does: code objects, constants, closures, defaults and every global
    they name, followed into the project's own modules (the user's files and the harness); an object
    of a library (torch, numpy) counts by its qualified name, its version being part of the key.
    Line numbers and file names are left out: editing one case does not move another's key."""

    def __init__(self) -> None:
        self.memo: dict[int, str] = {}
        self.keep: list[Any] = []  # ids stay unique while the walk holds its objects
        self.files: set[str] = set()
        """Project files the walk read (modules named, imported inside a function): the plan watches them."""

    def of(self, obj: Any) -> str:
        key = id(obj)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = f"cycle:{type(obj).__qualname__}"
        self.keep.append(obj)
        try:
            value = digest(self._describe(obj))
        except Exception as exc:  # never a constant key for what cannot be read: a fresh one, so never reused
            value = digest("unhashable", type(obj).__qualname__, type(exc).__name__, os.urandom(16).hex())
        self.memo[key] = value
        return value

    def _describe(self, obj: Any) -> Any:
        if obj is None or isinstance(obj, (bool, int, float, complex, str, bytes)):
            return [type(obj).__name__, repr(obj)]
        if isinstance(obj, enum.Enum):
            return ["enum", type(obj).__qualname__, obj.name]
        if isinstance(obj, (list, tuple)):
            return [type(obj).__name__, [self.of(v) for v in obj]]
        if isinstance(obj, (set, frozenset)):
            return [type(obj).__name__, sorted(self.of(v) for v in obj)]
        if isinstance(obj, Mapping):
            return ["map", sorted((self.of(k), self.of(v)) for k, v in obj.items())]
        if isinstance(obj, types.CodeType):
            return self._code(obj)
        if isinstance(obj, types.FunctionType):
            return self._function(obj)
        if isinstance(obj, functools.partial):
            return ["partial", self.of(obj.func), self.of(obj.args), self.of(obj.keywords)]
        if isinstance(obj, types.MethodType):
            return ["method", self.of(obj.__func__), type(obj.__self__).__qualname__]
        if isinstance(obj, (staticmethod, classmethod)):
            return [type(obj).__name__, self.of(obj.__func__)]
        if isinstance(obj, property):
            return ["property", self.of(obj.fget), self.of(obj.fset), self.of(obj.fdel)]
        if isinstance(obj, types.ModuleType):
            return self._module(obj.__name__, getattr(obj, "__file__", None))
        if isinstance(obj, type):
            return self._class(obj)
        if dataclasses.is_dataclass(obj):
            return ["dataclass", self.of(type(obj)), [(f.name, self.of(getattr(obj, f.name))) for f in dataclasses.fields(obj)]]
        array = _array_bytes(obj)
        if array is not None:
            return ["array", *array]
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is not None and callable(obj):  # functools.cache, lru_cache, wraps
            return ["wrapped", type(obj).__qualname__, self.of(wrapped)]
        if is_project_file(_module_file(type(obj).__module__)) and hasattr(obj, "__dict__"):
            return ["object", self.of(type(obj)), self.of(vars(obj))]
        state = getattr(obj, "state_dict", None)
        if callable(state) and type(obj).__module__.startswith("torch"):  # a library module instance: nn.Linear(4, 8)
            return ["torch-module", type(obj).__qualname__, repr(obj), self.of(dict(state()))]
        if callable(obj) and getattr(obj, "__qualname__", None):  # torch.relu, math.sqrt, numpy ufuncs
            return ["callable", getattr(obj, "__module__", None) or type(obj).__module__, obj.__qualname__]
        text = repr(obj)
        if " at 0x" not in text:  # torch.float16, device(type='cpu'), range(0, 5), PosixPath('...')
            return ["value", type(obj).__module__, type(obj).__qualname__, text]
        return ["opaque", type(obj).__module__, type(obj).__qualname__]

    def _module(self, name: str, path: str | None) -> Any:
        """A module by name; one of the project's by its file's bytes too (``helpers.Net()`` reaches it by attribute)."""
        if path and is_project_file(path):
            self.files.add(str(Path(path).resolve()))
            return ["module", name, sha256_file(path)]
        return ["module", name]

    def _code(self, co: types.CodeType) -> Any:
        consts = [self._code(c) if isinstance(c, types.CodeType) else self.of(c) for c in co.co_consts]
        return [
            "code",
            co.co_code.hex(),
            consts,
            co.co_names,
            co.co_varnames,
            co.co_freevars,
            co.co_cellvars,
            co.co_argcount,
            co.co_kwonlyargcount,
            co.co_flags,
        ]

    def _function(self, fn: types.FunctionType) -> Any:
        lazy = getattr(fn, "__harness_lazy__", None)
        if lazy is not None:  # corpus.lazy(module, name): what it builds is the class it names
            return ["lazy", self._named(*lazy), self._code(fn.__code__), [self.of(c.cell_contents) for c in fn.__closure__ or ()]]
        if not is_project_file(_module_file(fn.__module__)):
            return ["function", fn.__module__, fn.__qualname__]
        names: set[str] = set()
        _names(fn.__code__, names)
        referenced = {n: fn.__globals__[n] for n in sorted(names) if n in fn.__globals__}
        imported = [self._imported(m, fn.__globals__.get("__package__")) for m in sorted(_imports(fn.__code__))]
        closure = []
        for cell in fn.__closure__ or ():
            try:
                closure.append(self.of(cell.cell_contents))
            except ValueError:  # an empty cell
                closure.append("empty")
        return [
            "function",
            self._code(fn.__code__),
            self.of(fn.__defaults__),
            self.of(fn.__kwdefaults__),
            closure,
            [(n, self.of(v)) for n, v in referenced.items()],
            imported,
        ]

    def _imported(self, module: tuple[str, int], package: str | None) -> Any:
        """A module imported inside a function (``from helpers import Net`` in a factory): by its file,
        found without importing it."""
        name, level = module
        try:
            resolved = importlib.util.resolve_name("." * level + name, package) if level else name
        except (ImportError, ValueError):
            return ["import", name, level]
        spec = _find_spec(resolved)
        origin = spec.origin if spec is not None else None
        return ["import", resolved, self._module(resolved, origin) if origin and os.path.isfile(origin) else None]

    def _class(self, cls: type) -> Any:
        if not is_project_file(_module_file(cls.__module__)):
            return ["class", cls.__module__, cls.__qualname__]
        attrs = [(k, self.of(v)) for k, v in sorted(vars(cls).items()) if k not in _SKIP_CLASS_ATTRS]
        return ["class", cls.__qualname__, [self.of(b) for b in cls.__bases__], attrs]

    def _named(self, module: str, name: str) -> Any:
        """``module.name``, imported (the export environment has what it needs); a module that does not
        import counts by its file's bytes, so fixing it changes the key."""
        try:
            return self.of(getattr(importlib.import_module(module), name))
        except Exception as exc:
            spec = _find_spec(module)
            origin = spec.origin if spec is not None else None
            if origin and os.path.isfile(origin):
                self.files.add(str(Path(origin).resolve()))  # not in sys.modules: the plan must watch it by name
            content = sha256_file(origin) if origin and os.path.isfile(origin) else "missing"
            return ["unimportable", module, name, type(exc).__name__, content]


def _find_spec(module: str) -> Any:
    try:
        return importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None


def _names(co: types.CodeType, into: set[str]) -> None:
    into.update(co.co_names)
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            _names(c, into)


def _imports(co: types.CodeType) -> set[tuple[str, int]]:
    """``(module, level)`` of every ``import`` statement in ``co`` and the code nested in it."""
    found: set[tuple[str, int]] = set()
    level = 0
    for ins in dis.get_instructions(co):
        if ins.opname == "LOAD_CONST" and isinstance(ins.argval, int):
            level = ins.argval
        elif ins.opname == "IMPORT_NAME":
            found.add((str(ins.argval), level))
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            found |= _imports(c)
    return found


def _array_bytes(obj: Any) -> list[str] | None:
    """A numpy array or a torch tensor: dtype, shape and a hash of its bytes (of any dtype: bfloat16 too)."""
    module = type(obj).__module__
    if module.startswith("torch") and hasattr(obj, "detach") and hasattr(obj, "untyped_storage"):
        t = obj.detach().cpu().contiguous()
        return [str(t.dtype), repr(tuple(t.shape)), sha256_bytes(bytes(t.untyped_storage()))]
    if not module.startswith("numpy") or not hasattr(obj, "tobytes") or not hasattr(obj, "dtype"):
        return None
    return [str(obj.dtype), repr(tuple(obj.shape)), sha256_bytes(obj.tobytes())]


def case_digest(case: Any, files: set[str] | None = None) -> str:
    """What one :class:`~harness.cases.corpus.Case` is: every field (``source_dir``, a location, left out) and
    the bytes of its probe files. The project files the walk read are added to ``files``."""
    h = _SourceHasher()
    fields = [(f.name, h.of(getattr(case, f.name))) for f in dataclasses.fields(case) if f.name != "source_dir"]
    probes = [(str(p.relative_to(case.source_dir)), sha256_file(p)) for p in probe_files(case)]
    if files is not None:
        files |= h.files
    return digest("case", fields, probes)
