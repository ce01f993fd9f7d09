"""One capture and one decomposition per class of opsets, shared by a case's dynamo exports at every opset (a task's
exports, in the one process the task gets): the second place the harness touches a private API of torch's exporter.

``torch.onnx.export(dynamo=True, opset_version=N)`` (torch 2.13, ``torch/onnx/_internal/exporter/_compat.py`` and
``_core.py``) does, in order: capture the model into an ``ExportedProgram`` (the capture strategies: ``torch.export``
non-strict, strict, draft export…), which does not depend on the opset; decompose it for the operator registry of the
opset (``_prepare_exported_program_for_export``: the aten ops the registry implements are kept, the others
decomposed), which depends on the opset only through the set of ops the registry implements (torch 2.13: one set for opsets 18
to 22, another from 23 on, where ``aten.rms_norm`` joins it); then translate, convert the version, optimize and
rename, per opset. Measured by ``bench/export_bench.py``, the capture is about a quarter of a small model's dynamo
export and the decompositions about two thirds.

Within :func:`reuse`, every call still goes through the public ``torch.onnx.export`` (its checks, warnings, errors
and ``ONNXProgram`` are the plain call's), but:

- a capture strategy called again on the same model, arguments and dynamic shapes returns the ``Result`` of its
  first call (a failed capture too: a second ``torch.export`` of the same module in one process is not the first
  one, an ``nn.LSTM`` with a dynamic length fails it), and the warnings and log records its first call emitted are
  emitted again, so each artifact's record holds what a plain call's would;
- a decomposition of the same captured program for a registry implementing the same set of ops returns the program
  of its first call (with its warnings again), or raises its exception again (the exporter reports an exception by
  its text, never its frames).

What it proves, and where: ``tests/test_export_sharing.py`` exports sensitive cases at opsets of every class with
and without it (``harness export --no-share``: a fresh process and a plain call per artifact) and compares files and
records; the default and architectures profiles were compared artifact by artifact when it was introduced (issue
42's closing note). It is used only on torch releases where that comparison was made (:data:`PROVEN`), and only
where the private names it patches exist (:func:`unavailable`); elsewhere each dynamo artifact gets a process and a
plain call of its own, as before.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import warnings
from collections.abc import Iterator
from typing import Any

PROVEN = ("2.13.",)
"""torch releases (prefixes of ``torch.__version__``) whose files were compared byte for byte with plain calls."""

LOGGERS = ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")
"""The loggers whose records an export's record keeps (:func:`harness.export._exporters._capture` reads these)."""


def unavailable() -> str | None:
    """Why a case's dynamo exports cannot share their capture with this torch (None: they can)."""
    import torch

    if not torch.__version__.startswith(PROVEN):
        return f"torch {torch.__version__} is not one whose shared exports were proved identical ({', '.join(PROVEN)})"
    try:
        from torch.onnx._internal.exporter import _capture_strategies, _core, _decomp
    except ImportError as exc:
        return f"torch has no torch.onnx._internal.exporter capture, core and decomposition modules ({exc})"
    for owner, name in (
        (getattr(_capture_strategies, "CaptureStrategy", None), "__call__"),
        (_core, "_prepare_exported_program_for_export"),
        (_decomp, "get_onnx_implemented_overloads"),
    ):
        if owner is None or not callable(getattr(owner, name, None)):
            return f"torch's exporter has no {name}"
    return None


@dataclasses.dataclass
class _Emitted:
    """The warnings and log records one call emitted, to emit again when its result is reused."""

    warnings: list[warnings.WarningMessage]
    records: list[logging.LogRecord]

    def warn_again(self) -> None:
        for w in self.warnings:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)

    def again(self) -> None:
        self.warn_again()
        for rec in self.records:
            logging.getLogger(rec.name).handle(rec)


@contextlib.contextmanager
def _recorded() -> Iterator[_Emitted]:
    """Record what the block emits (and pass it on, so the artifact's own record sees it the first time too)."""
    emitted = _Emitted([], [])

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            emitted.records.append(record)

    handler = Keep(level=logging.NOTSET)
    loggers = [logging.getLogger(n) for n in LOGGERS]
    for lg in loggers:
        lg.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield emitted
            finally:
                emitted.warnings = list(caught)
    finally:
        for lg in loggers:
            lg.removeHandler(handler)
    emitted.warn_again()  # into the caller's own record of warnings, as if never intercepted


def _args_key(model: Any, args: Any, kwargs: Any, dynamic_shapes: Any) -> tuple[Any, ...]:
    """The same model, the same argument objects, equal dynamic shapes."""
    flat = tuple(id(a) for a in (args or ()))
    named = tuple(sorted((k, id(v)) for k, v in (kwargs or {}).items()))
    return id(model), flat, named, repr(dynamic_shapes)


@contextlib.contextmanager
def reuse() -> Iterator[None]:
    """Within the block, dynamo exports of one model share their capture and their decompositions (see the module's
    docstring). Everything patched is put back at the end."""
    from torch.onnx._internal.exporter import _capture_strategies, _core, _decomp

    strategy = _capture_strategies.CaptureStrategy
    call, prepare = strategy.__call__, _core._prepare_exported_program_for_export
    captured: dict[tuple[Any, ...], tuple[Any, _Emitted, tuple[Any, ...]]] = {}
    decomposed: dict[tuple[int, frozenset[Any]], tuple[Any, BaseException | None, _Emitted, Any]] = {}

    def capture(self: Any, model: Any, args: Any, kwargs: Any, dynamic_shapes: Any = None) -> Any:
        key = (type(self), *_args_key(model, args, kwargs, dynamic_shapes))
        if key in captured:
            result, emitted, _ = captured[key]
            emitted.again()
            return result
        with _recorded() as emitted:
            result = call(self, model, args, kwargs, dynamic_shapes)
        captured[key] = (result, emitted, (model, args, kwargs))  # held: the ids in the key stay theirs
        return result

    def decompose(exported_program: Any, *, registry: Any) -> Any:
        key = (id(exported_program), frozenset(_decomp.get_onnx_implemented_overloads(registry)))
        if key in decomposed:
            program, error, emitted, _ = decomposed[key]
            emitted.again()
            if error is not None:
                raise error
            return program
        program, error = None, None
        with _recorded() as emitted:
            try:
                program = prepare(exported_program, registry=registry)
            except Exception as exc:
                error = exc
        decomposed[key] = (program, error, emitted, exported_program)
        if error is not None:
            raise error
        return program

    strategy.__call__ = capture  # type: ignore[method-assign]
    _core._prepare_exported_program_for_export = decompose
    try:
        yield
    finally:
        strategy.__call__ = call  # type: ignore[method-assign]
        _core._prepare_exported_program_for_export = prepare
