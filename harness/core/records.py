"""Records that travel between stages: one frozen dataclass each.

Every stage writes files and the next reads them, so every record has an
explicit ``to_dict``/``from_dict`` and nothing untyped crosses a module
boundary. The vocabulary of the table is :class:`Status`; *where* a cell
stopped is :class:`Stage`, a field, not more statuses.

This module imports only the standard library: it is used in the runtime
environments, which hold onnxruntime and numpy and nothing else.
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

try:
    from enum import StrEnum
except ImportError:  # Python 3.9, 3.10 (the run environments of onnxruntime 1.10–1.14): the same str() and format()

    class StrEnum(str, enum.Enum):  # type: ignore[no-redef]  # noqa: UP042
        def __str__(self) -> str:
            return str(self.value)

        def __format__(self, spec: str) -> str:
            return format(str(self.value), spec)


ANY = "*"
"""Case, exporter and probe of a runtime-wide record (:attr:`CellRecord.runtime_wide`)."""


class Status(StrEnum):
    """What happened to a cell. The README's legend explains each one."""

    PASS = "pass"
    MISMATCH = "mismatch"
    EXPORT_FAIL = "export-fail"
    LOAD_FAIL = "load-fail"
    RUN_FAIL = "run-fail"
    CRASH = "crash"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    FALLBACK = "fallback"
    ENV_ERROR = "env-error"
    SKIPPED = "skipped"

    @property
    def symbol(self) -> str:
        return _SYMBOLS[self]

    @property
    def severity(self) -> int:
        """Rank used to fold several probes into one table cell (worst wins)."""
        return _SEVERITY[self]


_SYMBOLS = {
    Status.PASS: "✓",
    Status.MISMATCH: "≠",
    Status.EXPORT_FAIL: "E",
    Status.LOAD_FAIL: "L",
    Status.RUN_FAIL: "R",
    Status.CRASH: "C",
    Status.TIMEOUT: "T",
    Status.UNAVAILABLE: "·",
    Status.FALLBACK: "↩",
    Status.ENV_ERROR: "!",
    Status.SKIPPED: "–",
}

# Folding probes into one cell: a failure that happens before any probe runs
# (export, load, env) outranks per-probe outcomes, and any failure outranks a pass.
_SEVERITY = {
    Status.PASS: 0,
    Status.SKIPPED: 1,
    Status.UNAVAILABLE: 2,
    Status.FALLBACK: 3,
    Status.MISMATCH: 4,
    Status.RUN_FAIL: 5,
    Status.TIMEOUT: 6,
    Status.CRASH: 7,
    Status.LOAD_FAIL: 8,
    Status.EXPORT_FAIL: 9,
    Status.ENV_ERROR: 10,
}


class Stage(StrEnum):
    """The furthest stage a cell reached."""

    ENV = "env"
    EXPORT = "export"
    LOAD = "load"
    RUN = "run"
    COMPARE = "compare"
    LATENCY = "latency"


class Outcome(enum.Enum):
    """How an export, a column or a probe ended: the one vocabulary every stage decides in, and the one mapping to
    a cell's :class:`Status` and published ``error_class`` (:attr:`status`, :attr:`error_class`). An export's
    outcome travels in its record's ``error_class`` (:meth:`ExportRecord.outcome` reads it back); an outcome whose
    error class is None takes the class of the exception that decided it (the exporter's, the runtime's)."""

    PASSED = enum.auto()
    CAPTURE_FALLBACK = enum.auto()
    """A dynamo export torch did not capture with ``torch.export`` that passes: never a dynamo pass."""
    SKIPPED = enum.auto()
    """The case does not apply to the exporter."""
    EXPORT_ERROR = enum.auto()
    EXPORT_TIMEOUT = enum.auto()
    EXPORT_CRASH = enum.auto()
    EXPORT_HARNESS_BUG = enum.auto()
    """The export's worker raised outside the exporter."""
    NO_ENVIRONMENT = enum.auto()
    """The runtime's environment does not import: the whole column."""
    PROVIDER_UNAVAILABLE = enum.auto()
    """The column's provider cannot run on this machine: the whole column."""
    PROVIDER_REFUSED = enum.auto()
    """The session refused the provider with the registry's ``unavailable`` message (a missing library)."""
    PROVIDER_FELL_BACK = enum.auto()
    PROVIDER_TOOK_NO_NODE = enum.auto()
    """The session held the provider but placed no node on it: decided by the artifact and the provider's version."""
    LOAD_ERROR = enum.auto()
    RUN_ERROR = enum.auto()
    MISMATCH = enum.auto()
    WORKER_CRASH = enum.auto()
    WORKER_TIMEOUT = enum.auto()
    HARNESS_ERROR = enum.auto()
    """The backend raised, or returned without every cell: a harness bug, kept visible in the table."""

    @property
    def status(self) -> Status:
        return _OUTCOMES[self][0]

    @property
    def error_class(self) -> str | None:
        return _OUTCOMES[self][1]

    def fields(self, exc: BaseException | None = None) -> dict[str, Any]:
        """A cell's ``status`` and ``error_class`` for this outcome (``exc``: the exception that decided it)."""
        error_class = self.error_class or (type(exc).__name__ if exc is not None else None)
        return {"status": self.status, "error_class": error_class}


_OUTCOMES: dict[Outcome, tuple[Status, str | None]] = {
    Outcome.PASSED: (Status.PASS, None),
    Outcome.CAPTURE_FALLBACK: (Status.FALLBACK, None),
    Outcome.SKIPPED: (Status.SKIPPED, "Skipped"),
    Outcome.EXPORT_ERROR: (Status.EXPORT_FAIL, None),
    Outcome.EXPORT_TIMEOUT: (Status.TIMEOUT, "ExporterTimeout"),
    Outcome.EXPORT_CRASH: (Status.EXPORT_FAIL, "ExporterCrash"),
    Outcome.EXPORT_HARNESS_BUG: (Status.EXPORT_FAIL, "HarnessBug"),
    Outcome.NO_ENVIRONMENT: (Status.ENV_ERROR, "EnvironmentError"),
    Outcome.PROVIDER_UNAVAILABLE: (Status.UNAVAILABLE, "ProviderUnavailable"),
    Outcome.PROVIDER_REFUSED: (Status.UNAVAILABLE, None),
    Outcome.PROVIDER_FELL_BACK: (Status.UNAVAILABLE, "ProviderFellBack"),
    Outcome.PROVIDER_TOOK_NO_NODE: (Status.UNAVAILABLE, "ProviderTookNoNode"),
    Outcome.LOAD_ERROR: (Status.LOAD_FAIL, None),
    Outcome.RUN_ERROR: (Status.RUN_FAIL, None),
    Outcome.MISMATCH: (Status.MISMATCH, "Mismatch"),
    Outcome.WORKER_CRASH: (Status.CRASH, "Crash"),
    Outcome.WORKER_TIMEOUT: (Status.TIMEOUT, "Timeout"),
    Outcome.HARNESS_ERROR: (Status.CRASH, "HarnessError"),
}
"""Outcome → (the cell's status, its error class): the one place an outcome becomes a status."""

_EXPORT_OUTCOMES = {o.error_class: o for o in Outcome if o.name.startswith(("EXPORT_", "SKIPPED")) and o.error_class}


def _fields(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """Keep the keys that ``cls`` declares, so old readers accept new files."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclasses.dataclass(frozen=True)
class DiffStats:
    """How far the runtime's outputs are from torch's, over all outputs of a probe."""

    max_abs: float | None
    """Largest ``|out - ref|`` over finite elements; None when nothing was comparable."""
    max_rel: float | None
    """Largest ``|out - ref| / |ref|`` over finite elements with ``ref != 0``."""
    mismatched: int
    """Elements outside ``atol + rtol * |ref|``, NaN/inf disagreements included. On a passing probe it
    may be above 0: an output whose error is within ``scaled`` of its scale passes (:mod:`harness.numeric.compare`)."""
    total: int
    """Elements compared."""
    nan_ref: int = 0
    nan_out: int = 0
    inf_ref: int = 0
    inf_out: int = 0
    shape_mismatch: str | None = None
    """Set when an output's count, shape or dtype differs from torch's: says which and how."""
    scaled_error: float | None = None
    """``max|out - ref| / max|ref|`` of the worst floating output (of the failing ones, on a mismatch): the
    error in units of the output's own scale; None when no floating output was compared."""
    scaled_output: int | None = None
    """Which output :attr:`scaled_error` is of."""
    scaled_limit: float | None = None
    """The ``scaled`` tolerance that output had (None: element-wise only)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DiffStats:
        return cls(**_fields(cls, data))


@dataclasses.dataclass(frozen=True)
class Latency:
    """Serial, fixed-thread latency of one probe on one session."""

    median_ms: float
    p90_ms: float
    runs: int
    warmup: int
    threads: int
    session_ms: float
    """Wall time of creating the InferenceSession."""
    stable: bool = False
    """The median of the last window of ``min_runs`` runs was within ``[latency] stability`` of the
    window before it; False when a cap (``max_runs``, ``budget_seconds``) stopped the timing first."""
    copies: str = "host"
    """Where the inputs and outputs live while timed: ``host`` means every run includes the
    host/device copies (``session.run`` with numpy arrays)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Latency:
        return cls(**_fields(cls, data))


@dataclasses.dataclass(frozen=True)
class ArtifactKey:
    """One export: a case through one exporter at one requested opset."""

    case: str
    exporter: str
    opset: int

    @property
    def id(self) -> str:
        """Directory name under ``build/artifacts``."""
        return f"{self.case}.{self.exporter}.op{self.opset}"


TORCH_EXPORT_CAPTURES = frozenset({"TorchExportStrategy", "TorchExportNonStrictStrategy", "TorchExportStrictStrategy"})
"""The capture strategies of ``torch.onnx.export(dynamo=True)`` that are ``torch.export`` itself (strict or not, by
torch release): any other that produced the graph is a fallback (:attr:`ExportRecord.fell_back`)."""

CAPTURE_WORDS = {
    "JitTraceConvertStrategy": "torch.jit.trace (its graph converted to an ExportedProgram)",
    "LegacyDynamoStrategy": "torch._dynamo.export",
    "TorchExportDraftExportStrategy": "torch.export's draft_export (guards it could not prove left out)",
}
"""How a fallback capture strategy is named to a reader."""


def capture_words(strategy: str) -> str:
    """A capture strategy as a reader is told it: what captured the graph."""
    return "torch.export" if strategy in TORCH_EXPORT_CAPTURES else CAPTURE_WORDS.get(strategy, strategy)


def fallback_note(rec: ExportRecord) -> str:
    """What a cell of a fallback export says: the exporter asked, what really captured the graph."""
    torch = rec.versions.get("torch", "this torch")
    return (
        f"dynamo fallback: torch.export failed and torch {torch}'s dynamo exporter fell back to "
        f"{capture_words(rec.capture or '')}; the file holds the traced path only, not a dynamo export"
    )


@dataclasses.dataclass(frozen=True)
class ExportRecord:
    """What the export stage produced for one :class:`ArtifactKey`."""

    case: str
    exporter: str
    opset: int
    ok: bool
    seconds: float
    error_class: str | None = None
    error_line: str | None = None
    error: str | None = None
    opset_actual: int | None = None
    ir_version: int | None = None
    opset_asked: int | None = None
    """Set in a published table only (:func:`by_written_opset`): the opset the exporter was asked for, when
    it wrote another (then :attr:`opset` is the one written). The artifact's files are under the asked one."""
    checker: str | None = None
    """``"ok"`` or onnx.checker's first error line."""
    warnings: tuple[dict[str, str], ...] = ()
    """Every warning the exporter raised, TracerWarnings first: ``{category, message}``."""
    graph: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Node count, Constant nodes, initializers, op-type histogram, inputs, outputs."""
    probes: tuple[str, ...] = ()
    probe_errors: dict[str, str] = dataclasses.field(default_factory=dict)
    """Probes torch itself could not run, with torch's error: those cells are skipped."""
    atol: float = 1e-4
    rtol: float = 1e-3
    scaled: float | None = None
    """Bound on a floating output's ``max|out - ref| / max|ref|`` (:func:`harness.numeric.compare.compare`); None:
    element-wise only."""
    output_tolerance: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """Per-output overrides of ``atol``, ``rtol`` and ``scaled``, by output index (``{"1": {"atol": 0.01}}``)."""
    sha256: str | None = None
    """Of model.onnx."""
    data_sha256: str | None = None
    """Of ``model.onnx.data``, the weights of a model saved with ONNX external data (one too large to be
    one protobuf file, see ``[export] external_data_mib``); None when the weights are inside model.onnx."""
    peak_rss_mib: float | None = None
    """The export process's peak resident memory (MiB): what the next export of the case is scheduled by."""
    reference_sha256: str | None = None
    """Of reference.npz (probe inputs and torch's outputs)."""
    intermediates_sha256: str | None = None
    """Of the files a mismatch is localized with (:data:`harness.numeric.localize.FILES`: the debug model, its
    nodes, the reference runtime's value of every node output per probe, and where the graph itself
    differs from torch); None when they could not be recorded."""
    reference_runtime: str | None = None
    """The reference runtime (newest onnxruntime, CPU, optimizations off) that recorded them, or why it
    could not (``"onnxruntime==1.32.0"`` / ``"failed: onnxruntime==1.32.0: ..."``)."""
    versions: dict[str, str] = dataclasses.field(default_factory=dict)
    capture: str | None = None
    """The dynamo exporter only: how torch.onnx.export(dynamo=True) captured the graph, as the name of the capture
    strategy whose graph it translated (``TorchExportNonStrictStrategy``: ``torch.export``). On torch 2.5.1 and
    2.7.1 (measured) it silently falls back, when ``torch.export`` fails, to tracing (``JitTraceConvertStrategy``:
    ``torch.jit.trace``), and still reports success (:attr:`fell_back`). None:
    TorchScript, or a torch whose exporter this could not be read from (then said in :attr:`capture_note`)."""
    capture_note: str | None = None
    """Why :attr:`capture` could not be recorded for a dynamo export (a torch without the capture strategies)."""
    card: dict[str, str] = dataclasses.field(default_factory=dict)
    claims: tuple[dict[str, Any], ...] = ()
    """The case's :class:`~harness.cases.corpus.Claim` s, as dicts: where its gotcha was reproduced."""
    cache_key: str | None = None
    """The export's content address (:func:`harness.store.cache.export_key`): the case's source, the versions,
    the exporter, the opset and the settings. Equal keys, equal artifacts."""
    transform: dict[str, Any] = dataclasses.field(default_factory=dict)
    """A transformed artifact only (:mod:`harness.transform.stage`): the transform that made it from the export's
    fp32 file (``name``, ``tool``, ``package``, ``version``, ``settings``) and that file's ``source`` digest. Its
    reference outputs are then the ONNX specification's answer on this file (``reference``: how they were had), and
    torch's fp32 outputs are kept beside them (``fp32.npz``) for the drift. Empty: the export's own file."""
    timing: dict[str, float] = dataclasses.field(default_factory=dict)
    """Seconds of the work itself, the floor a benchmark compares the wall time with: ``torch`` (building
    the model and torch's reference outputs), ``export`` (the exporter call), ``reference`` (the
    reference runtime's pass over every node, in its child process)."""

    @property
    def key(self) -> ArtifactKey:
        return ArtifactKey(self.case, self.exporter, self.opset_asked or self.opset)

    @property
    def digest(self) -> str:
        """Everything a cell's verdict depends on from the export side: model, references,
        probes and tolerance. A cell whose ``inputs`` equals it need not run again."""
        parts = (
            self.sha256,
            self.data_sha256,
            self.reference_sha256,
            self.intermediates_sha256,
            self.reference_runtime,
            ",".join(self.probes),
            repr(self.atol),
            repr(self.rtol),
            repr(self.scaled),
            sorted(self.output_tolerance.items()),
            self.capture,
        )
        return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:16]

    @property
    def fell_back(self) -> bool:
        """A dynamo export whose graph was not captured by ``torch.export`` (:attr:`capture`): its every cell that
        passes is :attr:`Status.FALLBACK`, never a dynamo pass."""
        return self.capture is not None and self.capture not in TORCH_EXPORT_CAPTURES

    @property
    def tolerance(self) -> dict[str, Any]:
        """The keyword arguments of :func:`harness.numeric.compare.compare` for this artifact's outputs."""
        return {"atol": self.atol, "rtol": self.rtol, "scaled": self.scaled, "outputs": self.output_tolerance}

    def cell(self, runtime: str, provider: str, env: dict[str, str], **fields: Any) -> CellRecord:
        """A cell of this artifact on ``runtime`` × ``provider``; ``fields`` set the rest (probe, status, ...)."""
        fields.setdefault("probe", "")
        fields.setdefault("status", Status.PASS)
        fields.setdefault("stage", Stage.ENV)
        return CellRecord(
            case=self.case,
            exporter=self.exporter,
            opset=self.opset,
            runtime=runtime,
            provider=provider,
            opset_actual=self.opset_actual,
            ir_version=self.ir_version,
            opset_asked=self.opset_asked,
            sha256=self.sha256,
            inputs=self.digest,
            env=env,
            **fields,
        )

    @property
    def outcome(self) -> Outcome:
        """How the export ended, read back from its ``error_class``."""
        if self.ok:
            return Outcome.PASSED
        return _EXPORT_OUTCOMES.get(self.error_class or "", Outcome.EXPORT_ERROR)

    def each_probe(self, base: CellRecord, probes: Iterable[str] | None = None, **changes: Any) -> list[CellRecord]:
        """``base`` once per probe of this artifact (``example`` when torch gave none), or of ``probes``, with ``changes``."""
        return [base.replace(probe=p, **changes) for p in (self.probes or ("example",)) if probes is None or p in probes]

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["warnings"] = list(self.warnings)
        data["probes"] = list(self.probes)
        data["claims"] = list(self.claims)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExportRecord:
        kw = _fields(cls, data)
        kw["warnings"] = tuple(kw.get("warnings", ()))
        kw["probes"] = tuple(kw.get("probes", ()))
        kw["claims"] = tuple(kw.get("claims", ()))
        return cls(**kw)


@dataclasses.dataclass(frozen=True)
class CellRecord:
    """One cell: case × exporter × opset × runtime × provider × probe."""

    case: str
    exporter: str
    opset: int
    runtime: str
    """``onnxruntime==X.Y.Z`` (the pin)."""
    provider: str
    probe: str
    status: Status
    stage: Stage
    error_class: str | None = None
    error_line: str | None = None
    error: str | None = None
    diff: DiffStats | None = None
    providers_used: tuple[str, ...] = ()
    """``session.get_providers()``: the execution providers the session really holds."""
    placement: dict[str, int] = dataclasses.field(default_factory=dict)
    """Nodes per execution provider in the session's (optimized) graph, from session profiling of its
    first run: shows a provider that took only part of the graph."""
    localization: str | None = None
    """Where a mismatch starts: the first node whose outputs differ from the reference runtime's, the
    first torch value the graph disagrees with, or the first differing output."""
    optimizer: bool | None = None
    """For a mismatch: True when the probe passes with graph optimizations disabled (the optimizer is
    to blame), False when it mismatches there too; None when not checked."""
    opset_actual: int | None = None
    ir_version: int | None = None
    opset_asked: int | None = None
    """As :attr:`ExportRecord.opset_asked`: in a published table, the opset asked when the exporter wrote
    :attr:`opset` instead."""
    latency: Latency | None = None
    engine: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Native TensorRT: the engine this cell ran (``build_seconds``, ``bytes``, ``cached``, ``precision``,
    ``tensorrt``, ``profile``: min/opt/max shape per dynamic input, from the probes); empty elsewhere."""
    sha256: str | None = None
    """Of the artifact's model.onnx."""
    inputs: str | None = None
    """:attr:`ExportRecord.digest` of the artifact this cell ran."""
    cache_key: str | None = None
    """The cell's content address (:func:`harness.store.cache.cell_key`): the artifact's digest, the runtime's
    requirements, the provider, the probe, the run settings and the harness code that runs it. A rerun
    reuses a cell whose key is unchanged."""
    note: str | None = None
    seconds: float = 0.0
    env: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def artifact(self) -> ArtifactKey:
        """The export this cell ran (its files are under the opset asked)."""
        return ArtifactKey(self.case, self.exporter, self.opset_asked or self.opset)

    @property
    def runtime_wide(self) -> bool:
        """One record standing for every cell of its runtime × provider (an ``env-error``)."""
        return self.case == ANY

    @property
    def key(self) -> str:
        """Identifies the cell across runs (shards, resume, diff)."""
        return "|".join((self.case, self.exporter, f"op{self.opset}", self.runtime, self.provider, self.probe))

    def replace(self, **changes: Any) -> CellRecord:
        return dataclasses.replace(self, **changes)

    def noted(self, note: str) -> CellRecord:
        """This cell with ``note`` added after the notes it has."""
        return self.replace(note=f"{self.note}; {note}" if self.note else note)

    def to_dict(self) -> dict[str, Any]:
        # By hand, not dataclasses.asdict (a recursive deep copy): the run stage writes a cell per probe.
        data = {name: getattr(self, name) for name in _CELL_FIELDS}
        data["status"] = self.status.value
        data["stage"] = self.stage.value
        data["providers_used"] = list(self.providers_used)
        data["placement"] = dict(self.placement)
        data["engine"] = dict(self.engine)
        data["env"] = dict(self.env)
        data["diff"] = self.diff.to_dict() if self.diff is not None else None
        data["latency"] = self.latency.to_dict() if self.latency is not None else None
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CellRecord:
        kw = _fields(cls, data)
        kw["status"] = Status(kw["status"])
        kw["stage"] = Stage(kw["stage"])
        kw["providers_used"] = tuple(kw.get("providers_used") or ())
        kw["placement"] = dict(kw.get("placement") or {})
        kw["engine"] = dict(kw.get("engine") or {})
        if kw.get("diff") is not None:
            kw["diff"] = DiffStats.from_dict(kw["diff"])
        if kw.get("latency") is not None:
            kw["latency"] = Latency.from_dict(kw["latency"])
        return cls(**kw)


_CELL_FIELDS = tuple(f.name for f in dataclasses.fields(CellRecord))


def runtime_wide(runtime: str, provider: str, env: dict[str, str], **fields: Any) -> CellRecord:
    """One record for a whole runtime × provider column (a broken environment): not one per cell."""
    fields.setdefault("stage", Stage.ENV)
    return CellRecord(case=ANY, exporter=ANY, opset=0, runtime=runtime, provider=provider, probe=ANY, env=env, **fields)


def spread(cells: Iterable[CellRecord], exports: Iterable[ExportRecord]) -> list[CellRecord]:
    """``cells`` with each runtime-wide record replaced by one cell per artifact × probe of ``exports``,
    so a table shows the broken column cell by cell."""
    out: list[CellRecord] = []
    exports = list(exports)
    for c in cells:
        if not c.runtime_wide:
            out.append(c)
            continue
        changes = {f.name: getattr(c, f.name) for f in dataclasses.fields(CellRecord) if f.name not in _CELL_KEYS}
        for rec in exports:
            out.extend(rec.each_probe(rec.cell(c.runtime, c.provider, c.env), **changes))
    return out


_CELL_KEYS = {"case", "exporter", "opset", "probe", "runtime", "provider", "env"}
_CELL_KEYS |= {"opset_actual", "ir_version", "opset_asked", "sha256", "inputs"}


@dataclasses.dataclass(frozen=True)
class Rewrite:
    """A requested opset the exporter did not write: recorded once, under the opset written."""

    case: str
    exporter: str
    asked: int
    wrote: int
    kept: bool
    """True: its cells are the row of the opset written (relabelled); False: that row came from another
    request (the one that asked for it), so these cells, the same export again, are left out."""
    reason: str = ""
    """The exporter's own words for it, where it logged any (:func:`rewrite_reason`); "" where it said nothing."""


_ASSERTION = re.compile(r"\S+:\d+: \w+: Assertion `[^`]*` failed: ")
"""A C++ assertion's source location and condition (``/project/onnx/…/BaseConverter.h:66: adapter_lookup: Assertion
`false` failed: ``): what follows it is the message."""


def rewrite_reason(rec: ExportRecord) -> str:
    """Why the exporter wrote another opset than ``rec`` asked, in its own words: the last warning it logged about
    converting the version (onnxscript's ``Failed to convert the model to the target version 26 using the ONNX C API.
    The model was not modified (RuntimeError: No Adapter From Version $22 for Attention)``); "" where none says."""
    said = [w["message"] for w in rec.warnings if "convert" in w["message"].lower() and "version" in w["message"].lower()]
    return _ASSERTION.sub("", said[-1]) if said else ""


def by_written_opset(
    cells: Iterable[CellRecord], exports: Iterable[ExportRecord]
) -> tuple[list[CellRecord], list[ExportRecord], list[Rewrite]]:
    """Label every artifact, and its cells, by the opset the exporter wrote (``opset_actual``), keeping the
    request in ``opset_asked``: dynamo asked for 13 mostly writes 18, and is then a row of opset 18, not a
    second "opset 13" row. Where two requests wrote the same opset for a case, the row is the one that asked
    for it (else the highest request); the others are left out, each said in the returned rewrites. An
    export that failed wrote nothing and stays under the opset asked."""
    exports = list(exports)
    rows: dict[tuple[str, str, int], list[ExportRecord]] = {}
    for r in exports:
        rows.setdefault((r.case, r.exporter, r.opset_actual or r.opset), []).append(r)
    keep: dict[tuple[str, str, int], ExportRecord] = {}  # by the asked key → the relabelled record
    rewrites: list[Rewrite] = []
    for (case, exporter, wrote), recs in rows.items():
        chosen = max(recs, key=lambda r: (r.opset == wrote, r.opset))
        for r in recs:
            if r.opset != wrote:
                rewrites.append(Rewrite(case, exporter, r.opset, wrote, r is chosen, rewrite_reason(r)))
        relabelled = chosen if chosen.opset == wrote else dataclasses.replace(chosen, opset=wrote, opset_asked=chosen.opset)
        keep[(case, exporter, chosen.opset)] = relabelled
    asked = {(r.case, r.exporter, r.opset) for r in exports}
    out_cells = []
    for c in cells:
        if c.runtime_wide:
            out_cells.append(c)
            continue
        rec = keep.get((c.case, c.exporter, c.opset))
        if rec is None:
            if (c.case, c.exporter, c.opset) in asked:
                continue  # a request whose row another request holds
            out_cells.append(c)  # no export record (a shard of another export): as it is
        elif rec.opset_asked is None:
            out_cells.append(c)
        else:
            out_cells.append(c.replace(opset=rec.opset, opset_asked=rec.opset_asked))
    kept = [keep[k] for k in ((r.case, r.exporter, r.opset) for r in exports) if k in keep]
    return out_cells, kept, sorted(rewrites, key=lambda w: (w.exporter, w.asked, w.case))


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # object reprs: the same error reads the same in every run


def first_line(message: str, limit: int = 300) -> str:
    """The first non-empty line of an error message, shortened for a table."""
    for line in _ADDRESS.sub(" at 0x…", _ANSI.sub("", message)).splitlines():
        line = line.strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


_LOAD_PREFIX = re.compile(r"Load model from .*? failed:\s*")
_SOURCE_LOC = re.compile(r"\S+\.(?:cc|cpp|h):\d+ (?:(?:[\w:<>*&]+ )?[\w:~<>]+\(.*?\)(?: const)? )?")


def error_line(message: str) -> str:
    """onnxruntime's message without the file path and C++ source location, so the same
    refusal reads the same on every machine and runtime (``[ONNXRuntimeError] : 1 : FAIL :
    Unsupported model IR version: 10, max supported IR version: 9``)."""
    text = " ".join(_SOURCE_LOC.sub("", _LOAD_PREFIX.sub("", message)).split())  # detail lines belong to it
    if len(text) > 300:  # onnxruntime often puts the verdict last ("... support ... is till opset 19.")
        text = text[:180] + " … " + text[-117:]
    return text
