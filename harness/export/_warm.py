"""What every dynamo export of a run shares, done once in the export's fork server before it forks a process per
artifact (:func:`harness.pool.workers.run_tasks` with ``fresh=True``): the one place the harness touches a private
API of torch's exporter.

A plain ``torch.onnx.export(..., dynamo=True)`` in a fresh process spends most of its time on work that does not
depend on the model (torch 2.13, a small module, measured by ``bench/export_bench.py``):

- **the exporter's first use in the process** (lazy initialization across ``torch.export``, fake tensors, the
  decompositions): about 1 s. The server pays it once with a plain, public export of a probe module, and every
  process forked from it starts warm.
- **the operator registry** (``ONNXRegistry.from_torchlib``: onnxscript's ~2,000 torchlib functions, registered and
  filtered for the asked opset), built anew by every call: about 0.5 s. The server builds one per opset the run
  asks dynamo for, and ``from_torchlib`` is replaced, in the server and so in its children, by a lookup that
  hands the prebuilt registry of that opset (any other opset is built as before).

Neither changes what is exported: the registry a call gets holds what the one it would have built holds, and each
artifact still gets a process of its own (no artifact sees another's state; the probe module is the harness's
own). ``tests/test_export_sharing.py`` exports with and without this and compares the files byte for byte; the
default profile's 2,420 artifacts were compared the same way when it was introduced (the closing note of issue 28).

The private API is checked before the run (:func:`unavailable`): where this torch lacks it, the stage says so in one
line and every export builds its own registry, as a plain call does. Whether it is on (``harness export --no-share``
turns it off) is not part of an export's cache key: like the preloaded modules, it changes how fast an artifact
comes, never what it is.
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from collections.abc import Iterable
from typing import Any

ENV = "HARNESS_WARM_DYNAMO_OPSETS"
"""Set by the export stage, in its own environment, to the opsets its dynamo tasks ask for ("18,19,…") just before
the fork server starts; the server (which imports this module first thing) reads it. Unset: nothing is done."""

_PRIVATE = "torch.onnx._internal.exporter._registration.ONNXRegistry.from_torchlib"

status: str = "not warmed"
"""In the server and so in every worker: ``warm: …`` (what was shared) or why nothing was."""


def unavailable() -> str | None:
    """Why the registry cannot be shared with this torch (None: it can). Called by the export stage at start-up."""
    try:
        from torch.onnx._internal.exporter import _constants, _registration
    except ImportError as exc:
        return f"torch has no {_PRIVATE.rsplit('.', 2)[0]} ({exc})"
    method = getattr(_registration.ONNXRegistry, "from_torchlib", None)
    if method is None or not isinstance(getattr(_constants, "TORCHLIB_OPSET", None), int):
        return f"torch has no {_PRIVATE} (or no TORCHLIB_OPSET)"
    import inspect

    try:
        params = inspect.signature(method).parameters
    except (TypeError, ValueError):
        return f"{_PRIVATE} has no signature to check"
    if "opset_version" not in params:
        return f"{_PRIVATE} takes no opset_version"
    return None


def registry_opsets(asked: Iterable[int]) -> list[int]:
    """The opsets whose registry an export asking for ``asked`` builds: below torchlib's own (18) it builds at 18 and
    converts the model down."""
    from torch.onnx._internal.exporter import _constants

    return sorted({max(int(o), _constants.TORCHLIB_OPSET) for o in asked})


def warm(opsets: Iterable[int]) -> str:
    """In the fork server: one public export of a probe module, then a registry per opset and the lookup; the status."""
    global status
    import torch

    try:
        _probe_export(torch)
    except Exception as exc:  # a warm-up that fails costs speed only: each export then initializes itself
        status = f"no warm-up: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return status
    why = unavailable()
    if why is not None:
        status = f"warm; registry not shared: {why}"
        return status
    from torch.onnx._internal.exporter import _registration

    build = _registration.ONNXRegistry.from_torchlib.__func__  # type: ignore[attr-defined]
    built: dict[int, Any] = {}
    with _quiet():
        for opset in registry_opsets(opsets):
            built[opset] = build(_registration.ONNXRegistry, opset_version=opset)

    def from_torchlib(cls: type, opset_version: int | None = None, **kwargs: Any) -> Any:
        if opset_version is None:
            from torch.onnx._internal.exporter import _constants

            opset_version = _constants.TORCHLIB_OPSET
        shared = built.get(opset_version)
        if shared is not None and cls is _registration.ONNXRegistry and not kwargs:
            return shared
        return build(cls, opset_version=opset_version, **kwargs)

    _registration.ONNXRegistry.from_torchlib = classmethod(from_torchlib)  # type: ignore[method-assign,assignment]
    status = f"warm; registry shared for opset {', '.join(map(str, sorted(built)))}"
    return status


def _probe_export(torch: Any) -> None:
    """A public dynamo export of the harness's own small module (convolution, linear, softmax; dynamic batch)."""

    class Probe(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.lin = torch.nn.Conv2d(3, 4, 3), torch.nn.Linear(4, 2)

        def forward(self, x: Any) -> Any:
            return self.lin(torch.relu(self.conv(x)).mean((2, 3))).softmax(-1)

    with _quiet():
        torch.onnx.export(
            Probe().eval(), (torch.randn(2, 3, 8, 8),), dynamo=True, dynamic_shapes=({0: torch.export.Dim.DYNAMIC},)
        )


@contextlib.contextmanager
def _quiet() -> Any:
    import logging

    sink = io.StringIO()
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def _in_server() -> None:
    asked = os.environ.pop(ENV, "")
    if asked:
        warm(int(o) for o in asked.split(",") if o.strip())


_in_server()
