"""The backend contract: what one runtime implements (a :class:`Backend` and its :class:`Session`), nothing more.

Polygraphy's runners are the model: a public call that checks its inputs, a small implementation per
backend, and runners that never compare. A :class:`Backend` knows its runtime (what the environment holds,
why a column cannot run, how to load an artifact into a :class:`Session`, how to localize a mismatch) and a
:class:`Session` runs feeds and makes the timed call. Everything else is done once, for every backend: the
verdict of each probe by :mod:`harness.run.backends.loop`, the latency protocol by
:mod:`harness.run.backends.latency`, in the worker processes of :mod:`harness.run.backends.entry`.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from harness.core.records import CellRecord, ExportRecord, error_line
from harness.run.backends.messages import CellTask


class Session(Protocol):
    """An artifact loaded for one column."""

    @property
    def providers_used(self) -> tuple[str, ...]:
        """What really runs it (``session.get_providers()``)."""

    @property
    def facts(self) -> Mapping[str, Any]:
        """Fields of every cell it runs, beyond the verdict (native TensorRT: ``engine``, the engine's record)."""

    def inputs(self) -> list[str]: ...

    def outputs(self) -> list[str]:
        """Output names in the ONNX graph's order (the order of torch's outputs)."""

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]: ...

    def placement(self) -> dict[str, int]:
        """Nodes per execution provider, asked once after the first run ({} where nothing says)."""

    def timed_call(self, feeds: Mapping[str, np.ndarray], device: str) -> Callable[[], Any]:
        """The unit a latency times: ``device`` empty, a run with host arrays (copies included); else a run whose
        inputs and outputs stay on that device (``cuda``), returning once the outputs are ready."""


class Backend(abc.ABC):
    """One runtime's implementation of the contract. An instance is made per worker (and per probe child);
    making one imports nothing: :meth:`init_worker` imports the runtime."""

    localizes = False
    """It can localize a mismatch beyond the first differing output (:meth:`localize`)."""

    @abc.abstractmethod
    def environment(self) -> dict[str, str]:
        """What the environment holds: ``package``, the version under its kind's ``version_key``, python,
        numpy, platform, CPU, GPU. Called in a child process; must not fail where the runtime is absent
        and its kind is ``bare``."""

    @abc.abstractmethod
    def problem(self, column: str) -> str | None:
        """Why ``column`` cannot run here, in one line (None: nothing stops it). Called in a child process:
        loading a GPU provider's libraries can kill the process that loads them."""

    @abc.abstractmethod
    def init_worker(self) -> None:
        """Import the runtime, once per worker."""

    @abc.abstractmethod
    def load(
        self, art: Path, rec: ExportRecord, ref: Any, column: str, options: Mapping[str, Any], threads: int, *, placement: bool
    ) -> Session:
        """The artifact's session for ``column`` (``placement``: make :meth:`Session.placement` answer)."""

    def fell_back(self, session: Session, column: str, placement: Mapping[str, int] | None = None) -> str | None:
        """Why the session is not the column's, having silently fallen back (one line), or None: at load, and again
        once its first run has placed the nodes (``placement``: a session can hold the provider and hand it none)."""
        return None

    def describe_error(self, message: str) -> str:
        """An error's line for the table (the same refusal reads the same on every machine)."""
        return error_line(message)

    def internal(self, exc: Exception) -> bool:
        """Whether a session-creation error is the runtime's own internal fault rather than its refusal of the model:
        such a fault can be what earlier sessions left in the worker, so it is charged only once it repeats in a
        worker of its own. None is, by default."""
        return False

    def localize(self, art: Path, rec: ExportRecord, cell: CellRecord, feeds: Mapping[str, np.ndarray], want: list[np.ndarray],
                 task: CellTask, reuse: dict[str, Any]) -> CellRecord:  # fmt: skip
        """Where a mismatch starts, beyond its first differing output (``reuse`` keeps extra sessions per artifact)."""
        return cell


def backend(ref: str) -> Backend:
    """The backend ``module:Class`` names (:attr:`harness.config.runtimes.Kind.backend`)."""
    module, _, name = ref.partition(":")
    made = getattr(importlib.import_module(module), name)()
    assert isinstance(made, Backend)
    return made
