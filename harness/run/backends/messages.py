"""What crosses between the run stage and its workers: the tasks it hands out and the events they stream back.

Every one is a frozen dataclass, pickled across processes. A worker streams events per probe so that one that
dies or hangs on a probe costs that probe alone (:mod:`harness.run._dispatch`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Union

from harness.core.records import CellRecord, Latency


@dataclasses.dataclass(frozen=True)
class ReferenceSource:
    """Where a worker has the node values of a large model's mismatching probe recorded on demand."""

    python: str | None
    """The export environment's interpreter (it holds the reference runtime)."""
    cache: str
    timeout: float


@dataclasses.dataclass(frozen=True)
class CellTask:
    """The probes of one artifact on one column: what the run stage hands a worker."""

    dir: str
    runtime: str
    """The pin (``onnxruntime==1.20.1``)."""
    column: str
    """``cpu``, ``cuda``, ``tensorrt-fp16``..."""
    backend: str
    """``module:Class`` of the :class:`Backend` (:attr:`harness.config.runtimes.Kind.backend`)."""
    env: Mapping[str, str]
    options: Mapping[str, Any]
    probes: tuple[str, ...]
    keys: Mapping[str, str]
    """Each probe's content address (:func:`harness.store.cache.cell_key`), for the run stage."""
    threads: int = 1
    reference: ReferenceSource | None = None
    fresh_after: str = ""
    """Why these probes run in a worker of their own: the death of the worker that ran them first (its line).
    A crash can be a provider's state from earlier sessions in that worker, not this artifact's doing."""
    outputs: str = ""
    """Where each probe's outputs are kept, as ``<cell key>.npz`` (a platform column's: the report compares them across
    platforms, :mod:`harness.numeric.across`); empty: not kept."""


@dataclasses.dataclass(frozen=True)
class LatencyTask:
    """Serial timing of one artifact's ``example`` probe on one column."""

    dir: str
    column: str
    backend: str
    latency: Mapping[str, Any]
    """``[latency]`` as a mapping (:class:`harness.config.matrix.LatencySettings`)."""
    options: Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Loaded:
    """The session exists (a death from now on belongs to a probe)."""

    seconds: float


@dataclasses.dataclass(frozen=True)
class Cell:
    cell: CellRecord


@dataclasses.dataclass(frozen=True)
class Localizing:
    """Extra sessions for the mismatch of ``probe`` start: a death from now on costs its localization only."""

    probe: str


@dataclasses.dataclass(frozen=True)
class Retry:
    """The session failed to load with the runtime's own internal fault (:meth:`.contract.Backend.internal`) in a
    worker that may have run other sessions: the run stage runs the task again in a worker of its own before charging it."""

    reason: str


@dataclasses.dataclass(frozen=True)
class Timing:
    inference: float
    localize: float


# typing.Union, not ``|``: an alias is evaluated at import, and ``type | type`` is Python 3.10's (the run stage runs on 3.9).
Event = Union[Loaded, Cell, Localizing, Retry, Timing]  # noqa: UP007



@dataclasses.dataclass(frozen=True)
class Timed:
    """A latency, and the seconds the worker was busy making it (for the benchmark)."""

    latency: Latency
    busy_seconds: float
