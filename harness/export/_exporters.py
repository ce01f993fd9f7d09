"""The export of one artifact (export environment, a worker process per artifact): case × exporter × opset.

Builds the case's model and probes, runs torch on every probe, exports with one torch exporter at one opset
and writes, into the folder it is handed (:mod:`harness.store.layout`'s names):

- ``model.onnx`` (and ``model.onnx.data`` for a model too large for one protobuf file),
- ``reference.npz``: every probe's inputs and torch's outputs, so the runtime environments never need torch,
- ``export.json``: the :class:`~harness.core.records.ExportRecord` (time, checker verdict, every warning, graph
  statistics, actual opset and IR version),
- the localization files (:func:`harness.export.node_values.prepare`): what a mismatching cell is compared with.

:mod:`harness.export.stage` hands the tasks out, caches what they write and names the phase a dead or hung worker
was in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import logging
import os
import re
import shutil
import sys
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.cases import corpus as corpus_mod
from harness.core.records import ArtifactKey, ExportRecord, Outcome, first_line
from harness.export._reuse import LOGGERS
from harness.store import cache, layout
from harness.store.layout import DATA

_REGISTRY: corpus_mod.Registry | None = None
_SETTINGS: dict[str, Any] = {}


def init_worker(sources: Sequence[str], root: str, settings: dict[str, Any]) -> None:
    """Worker initializer: quiet torch, load the corpus once."""
    global _REGISTRY, _SETTINGS
    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("PYTHONUTF8", "1")  # the dynamo exporter prints emoji
    _REGISTRY = corpus_mod.load(sources, Path(root))
    _SETTINGS = settings


write_json = cache.write_json
sha256 = cache.sha256_file


def versions() -> dict[str, str]:
    import platform

    import numpy
    import onnx
    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__, "onnx": onnx.__version__, "numpy": numpy.__version__}
    for name in ("onnxscript", "onnxruntime"):  # onnxruntime: the reference runtime
        try:
            out[name] = importlib.import_module(name).__version__
        except ImportError:
            out[name] = "missing"
    return out


# The phases of one export, as its worker announces them: what a timeout or a crash names.
PHASES = {
    "build": "building the model and its probes",
    "torch": "running torch on the probes",
    "export": "the {exporter} exporter",
    "reference": "the reference runtime's pass",
}


def phase_words(phase: str, exporter: str) -> str:
    return PHASES.get(phase, phase).format(exporter=exporter)


@dataclasses.dataclass(frozen=True)
class ExportItem:
    """One artifact of a task: its opset, the store's temporary folder to write it into, its content address."""

    opset: int
    dir: str
    key: str
    """The export's content address (:func:`harness.store.cache.export_key`)."""


@dataclasses.dataclass(frozen=True)
class ExportTask:
    """A case's artifacts for one exporter, as the export stage hands them to a fresh worker process: the model is
    built and run by torch once, then exported at each item's opset in turn (with ``share``, the dynamo exports
    share their capture and decompositions: :mod:`harness.export._reuse`). One item is one artifact alone in its
    process, as a plain export."""

    case: str
    exporter: str
    items: tuple[ExportItem, ...]
    timeout: float
    """Seconds for building the model, torch's outputs and one export together."""
    share: bool = False

    def artifact(self, item: ExportItem) -> ArtifactKey:
        return ArtifactKey(self.case, self.exporter, item.opset)


@dataclasses.dataclass(frozen=True)
class Phase:
    """The export of ``artifact`` enters ``phase``; ``budget``: the seconds it may take (the worker pool's clock
    restarts)."""

    phase: str
    budget: float
    artifact: str = ""


@dataclasses.dataclass(frozen=True)
class Exported:
    """An artifact's record, last of its phases; ``imported``: what its process imported that the fork server had
    not."""

    record: ExportRecord
    imported: tuple[str, ...]


def export_one(task: ExportTask) -> Iterator[Phase | Exported]:
    """Worker entry (a generator): export the task's artifacts, write their files, yield each one's record.

    Yields a :class:`Phase` as each artifact enters each phase (the budget of building, torch's outputs and the
    export together is the task's; the reference pass gets its own), so a worker killed by a timeout or a crash is
    charged to the artifact and phase it was in; then its :class:`Exported`. A record is also written to
    ``export.json`` before the reference pass: a pass that never returns costs the localization data, never the
    export. The task may end before its last item (an export changed the model's state: see :func:`_export`);
    the stage exports what is left, each in a process of its own.
    """
    assert _REGISTRY is not None, "init_worker was not called"
    before = set(sys.modules)
    for item in _export(_REGISTRY[task.case], task, budget=float(task.timeout)):
        if isinstance(item, ExportRecord):
            record = dataclasses.replace(item, peak_rss_mib=_peak_rss_mib())
            write_json(Path(_item_of(task, record.key).dir) / layout.RECORD, record.to_dict())
            # What this process imported that the fork server had not: preloaded for the case next time.
            imported = sorted(n for n in set(sys.modules) - before if library_module(n))
            yield Exported(record, tuple(imported))
        else:
            yield item


def _item_of(task: ExportTask, key: ArtifactKey) -> ExportItem:
    return next(i for i in task.items if i.opset == key.opset)


def library_module(name: str) -> bool:
    """An installed package's module (not the user's or the harness's own files, which may change)."""
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None)
    return not name.startswith("__") and (path is None or not cache.is_project_file(path))


def _peak_rss_mib() -> float:
    """This process's peak resident memory and its children's (the reference pass), in MiB."""
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, children) / 1024, 1)  # KiB on Linux


def base_record(case: corpus_mod.Case, key: ArtifactKey, settings: Mapping[str, Any], **fields: Any) -> ExportRecord:
    """A record of ``key`` carrying what every record of the case carries (card, claims, tolerances,
    versions) whatever became of the export: a crash or timeout record too, so that the report and
    ``recommend --corpus`` know whose case it is."""
    atol = case.atol if case.atol is not None else settings["atol"]
    rtol = case.rtol if case.rtol is not None else settings["rtol"]
    scaled = case.scaled if case.scaled is not None else settings.get("scaled")
    fields.setdefault("ok", False)
    fields.setdefault("seconds", 0.0)
    return ExportRecord(
        case=key.case,
        exporter=key.exporter,
        opset=key.opset,
        atol=atol,
        rtol=rtol,
        scaled=scaled or None,
        output_tolerance={str(i): dict(t) for i, t in sorted(dict(case.output_tolerance).items())},
        versions=settings["versions"],
        card=_card(case),
        claims=tuple(c.to_dict() for c in case.claims),
        **fields,
    )


def _to_numpy(value: Any) -> Any:
    import numpy as np
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _flatten(outputs: Any) -> list[Any]:
    import torch

    if isinstance(outputs, torch.Tensor):
        return [outputs]
    if isinstance(outputs, (list, tuple)):
        return [t for o in outputs for t in _flatten(o)]
    if isinstance(outputs, Mapping):
        return [t for o in outputs.values() for t in _flatten(o)]
    raise TypeError(f"model output of type {type(outputs).__name__} is not a tensor or a tuple of tensors")


def _batch_probes(case: corpus_mod.Case, example: Mapping[str, Any], sizes: Sequence[int]) -> dict[str, Any]:
    """Example inputs tiled to other batch sizes, for every input with a dynamic dim 0."""
    import torch

    batched = [n for n, dims in case.dynamic.items() if 0 in dims]
    if not batched:
        return {}
    probes = {}
    for size in sizes:
        inputs = {}
        for name, value in example.items():
            if name in batched and isinstance(value, torch.Tensor) and value.dim() > 0:
                reps = -(-size // value.shape[0])
                value = value.repeat(reps, *([1] * (value.dim() - 1)))[:size].clone()
                # Distinct rows, so a model that mixes the batch is caught too.
                if value.is_floating_point():
                    value = value + torch.arange(size, dtype=value.dtype).view(-1, *([1] * (value.dim() - 1))) * 0.01
            inputs[name] = value
        probes[f"batch{size}"] = inputs
    return probes


_SUMMARY = re.compile(r"^<class '(?:[\w.]+\.)?(?P<cls>\w+)'>: (?P<msg>.+)$", re.M)

# Warnings about this machine, not about the model: not shown in the table.
_NOISE = ("torchvision is not installed",)


def _summarize(cls: str, message: str) -> tuple[str, str]:
    """The dynamo exporter wraps the real error in a page of advice: find the real one."""
    m = _SUMMARY.search(message)
    if m:
        return m["cls"], first_line(m["msg"])
    return cls, first_line(message)


@contextlib.contextmanager
def _capture() -> Iterator[list[dict[str, str]]]:
    """Collect Python warnings and torch.onnx log warnings; silence prints."""
    caught: list[dict[str, str]] = []

    class Handler(logging.Handler):
        def emit(self, rec: logging.LogRecord) -> None:
            if rec.levelno >= logging.WARNING and not rec.getMessage().startswith(_NOISE):
                message = rec.getMessage()
                # A logged exception is the why of the line (onnxscript's "Failed to convert the model to the target
                # version 26 …" logs the converter's "No Adapter From Version $22 for Attention" as its exc_info).
                if rec.exc_info and rec.exc_info[1] is not None:
                    message += f" ({type(rec.exc_info[1]).__name__}: {first_line(str(rec.exc_info[1]))})"
                caught.append({"category": f"log:{rec.name}", "message": message})

    handler = Handler()
    loggers = [logging.getLogger(n) for n in LOGGERS]
    for lg in loggers:
        lg.addHandler(handler)
    sink = io.StringIO()
    with warnings.catch_warnings(record=True) as ws, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        warnings.simplefilter("always")
        try:
            yield caught
        finally:
            for w in ws:
                caught.append({"category": w.category.__name__, "message": str(w.message)})
            for lg in loggers:
                lg.removeHandler(handler)
    # TracerWarnings first: each one is a shape or value the trace froze.
    caught.sort(key=lambda w: w["category"] != "TracerWarning")


def _export(case: corpus_mod.Case, task: ExportTask, *, budget: float) -> Iterator[Phase | ExportRecord]:
    """The export of a task's artifacts, phase by phase (see :func:`export_one`); each record after its phases.

    The model is built and torch runs the probes once, for the first artifact (``reference.npz`` is copied to the
    others); each artifact then gets the budget that is left of the task's once those are paid, as it would alone.
    The model's state is read before and after each export (every parameter's and buffer's identity and version
    counter, every module's training flag): an export that changed it (a trace that ran a forward updating a
    buffer in place) would hand the next export another model than a fresh process builds, so the task ends there
    and the stage exports the rest each in a process of its own.

    (Over 60 lines, on purpose: a generator that announces each phase as it enters it, so the phases, and what a
    failure in each costs, read top to bottom; each phase's work is a function of its own.)"""
    start = time.perf_counter()
    first = task.items[0]
    keys = {item.opset: task.artifact(item) for item in task.items}
    bases = {item.opset: base_record(case, keys[item.opset], _SETTINGS, cache_key=item.key) for item in task.items}
    for item in task.items:
        for old in (layout.MODEL, DATA, layout.REFERENCE):
            (Path(item.dir) / old).unlink(missing_ok=True)

    def enter(phase: str, item: ExportItem, spent: float) -> Phase:
        return Phase(phase, max(1.0, budget - spent), keys[item.opset].id)

    def fail(item: ExportItem, since: float, exc: BaseException, stage_note: str = "", **extra: Any) -> ExportRecord:
        message = f"{stage_note}{type(exc).__name__}: {exc}" if stage_note else str(exc)
        cls, line = _summarize(type(exc).__name__, message)
        return dataclasses.replace(
            bases[item.opset],
            seconds=time.perf_counter() - since,
            error_class=cls,
            error_line=line,
            error=message[:20000],
            **extra,
        )

    yield enter("build", first, 0.0)
    probe_errors: dict[str, str] = {}  # a probe torch fails on, or whose file cannot be used: no cells for it alone
    try:
        model, example, probes = _build(case, probe_errors)
    except Exception as exc:
        for item in task.items:  # what each artifact's own process would have met
            yield fail(item, start, exc, _BUILD_FAILED)
        return
    timing: dict[str, float] = {"build": time.perf_counter() - start}
    yield enter("torch", first, time.perf_counter() - start)
    reference_npz = Path(first.dir) / layout.REFERENCE
    n_outputs = _torch_outputs(model, probes, probe_errors, reference_npz)
    timing["torch"] = time.perf_counter() - start
    shared = timing["torch"]  # what every artifact of the task would have paid before its export
    if "example" in probe_errors:
        failed = RuntimeError(f"{_EXAMPLE_FAILED}{probe_errors['example']}")
        for item in task.items:
            yield fail(item, start, failed, probe_errors=probe_errors, timing=timing)
        return
    for item in task.items[1:]:
        shutil.copyfile(reference_npz, Path(item.dir) / layout.REFERENCE)
    ran = {p: v for p, v in probes.items() if p not in probe_errors}
    for opset, base in bases.items():
        bases[opset] = dataclasses.replace(
            base, probes=tuple(ran), probe_errors=probe_errors, reference_sha256=sha256(reference_npz)
        )
    if task.exporter not in case.exporters:
        reason = case.skip_reason or f"case does not apply to the {task.exporter} exporter"
        for item in task.items:
            skipped = Outcome.SKIPPED.error_class
            yield dataclasses.replace(bases[item.opset], error_class=skipped, error_line=reason, timing=timing)
        return
    external = _weight_bytes(model) > _SETTINGS["external_data_mib"] * 2**20
    with contextlib.ExitStack() as stack:
        if task.share and task.exporter == "dynamo" and len(task.items) > 1:
            from harness.export import _reuse

            stack.enter_context(_reuse.reuse())
        for n, item in enumerate(task.items):
            state = _state(model)
            yield enter("export", item, shared)
            since = time.perf_counter() - (shared if n == 0 else 0.0)  # the first pays for the build, as one alone
            item_timing = dict(timing) if n == 0 else {"build": 0.0, "torch": 0.0}
            key, out_dir = keys[item.opset], Path(item.dir)
            program, error, caught, strategy, item_timing["export"] = _export_item(
                case, key, out_dir, model, example, n_outputs, external
            )
            if error is not None:
                yield fail(item, since, error, warnings=caught, timing=item_timing)
            else:
                path, data = out_dir / layout.MODEL, out_dir / DATA
                exported = dataclasses.replace(
                    bases[item.opset],
                    ok=True,
                    seconds=time.perf_counter() - since,
                    warnings=caught,
                    sha256=sha256(path),
                    data_sha256=sha256(data) if data.exists() else None,
                    timing=item_timing,
                    capture=strategy.used[-1] if strategy.used else None,
                    capture_note=strategy.note if key.exporter == "dynamo" and not strategy.used else None,
                    reference_runtime=f"not recorded: {phase_words('reference', key.exporter)} did not finish",
                    **_inspect(path),
                )
                write_json(out_dir / layout.RECORD, exported.to_dict())  # the export stands whatever the pass does
                yield Phase("reference", _SETTINGS["reference_timeout"] + 60, key.id)
                t_reference = time.perf_counter()
                reference = _reference(out_dir, ran, program, tolerance=exported.tolerance)
                item_timing["reference"] = time.perf_counter() - t_reference
                yield dataclasses.replace(exported, timing=item_timing, **reference)
            if _state(model) != state:  # the next export would see another model than its own process builds
                return


def _state(model: Any) -> tuple[Any, ...]:
    """What an export must leave as it found it for the next one to export the same model: each parameter's and
    buffer's identity and version counter (bumped by every in-place change), each module's training flag."""
    tensors = (*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False))
    return (
        tuple((name, id(t), getattr(t, "_version", None)) for name, t in tensors),
        tuple(m.training for m in model.modules()),
    )


def _export_item(
    case: corpus_mod.Case,
    key: ArtifactKey,
    out_dir: Path,
    model: Any,
    example: Mapping[str, Any],
    n_outputs: int,
    external: bool,
) -> tuple[Any, Exception | None, tuple[dict[str, str], ...], _Strategies, float]:
    """One artifact's export into ``out_dir``: (the dynamo exporter's program, the error, the warnings, the capture
    strategies, the seconds). A failed export leaves no model file behind."""
    path = out_dir / layout.MODEL
    t_export = time.perf_counter()
    with _capture() as caught, _capture_strategy(key.exporter == "dynamo") as strategy:  # filled as the export runs
        try:
            program = _run_exporter(case, key, model, example, [f"out{i}" for i in range(n_outputs)], path, external=external)
            error: Exception | None = None if path.exists() else RuntimeError("the exporter returned without writing a model")
        except Exception as exc:
            program, error = None, exc
    seconds = time.perf_counter() - t_export
    if error is not None:
        path.unlink(missing_ok=True)
        (out_dir / DATA).unlink(missing_ok=True)
    return program, error, tuple(caught), strategy, seconds


@dataclasses.dataclass
class _Strategies:
    used: list[str] = dataclasses.field(default_factory=list)
    """The capture strategies that returned a graph, in order (the exporter translates the first)."""
    note: str | None = None
    """Why none could be recorded."""


@contextlib.contextmanager
def _capture_strategy(dynamo: bool) -> Iterator[_Strategies]:
    """Which capture strategy gave ``torch.onnx.export(dynamo=True)`` its graph: ``torch.export`` (strict or not), or a
    fallback torch takes silently when ``torch.export`` fails (``torch.jit.trace``: measured on 2.5.1 and 2.7.1).
    Read by wrapping ``CaptureStrategy.__call__`` of torch's exporter for the one call (a private API, the only way
    torch tells it: the result it returns names no strategy before 2.9, and its printout is off). Where this torch has
    no such API, :attr:`_Strategies.note` says so and the record says "not recorded"."""
    found = _Strategies()
    if not dynamo:
        yield found
        return
    try:
        from torch.onnx._internal.exporter import _capture_strategies as strategies

        base = strategies.CaptureStrategy
        original = base.__call__
    except (ImportError, AttributeError) as exc:
        found.note = f"not recorded: this torch has no torch.onnx._internal.exporter._capture_strategies ({exc})"
        yield found
        return

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if getattr(result, "exported_program", None) is not None:
            found.used.append(type(self).__name__)
        return result

    base.__call__ = call  # type: ignore[method-assign]
    try:
        yield found
    finally:
        base.__call__ = original  # type: ignore[method-assign]


def default_opsets() -> dict[str, int | str]:
    """The opset each exporter of this torch writes when it is given none (``opset_version`` left out), measured on a
    one-layer module: what a user gets without choosing. An exporter that fails here is named with its error."""
    import tempfile

    import onnx
    import torch

    found: dict[str, int | str] = {}
    with tempfile.TemporaryDirectory() as tmp, _capture():
        for exporter in ("torchscript", "dynamo"):
            path = Path(tmp) / f"{exporter}.onnx"
            try:
                model, args = torch.nn.Linear(4, 2).eval(), (torch.randn(2, 4),)
                if exporter == "torchscript":
                    torch.onnx.export(model, args, str(path), dynamo=False)
                else:
                    program = torch.onnx.export(model, args, dynamo=True)
                    if program is None:
                        raise RuntimeError("torch.onnx.export(dynamo=True) returned no program")
                    program.save(str(path))
                found[exporter] = next(o.version for o in onnx.load(str(path)).opset_import if o.domain in ("", "ai.onnx"))
            except Exception as exc:
                found[exporter] = f"{type(exc).__name__}: {first_line(str(exc))}"
    return found


def _build(case: corpus_mod.Case, probe_errors: dict[str, str]) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """The case's model (in the mode it asks for), its example inputs and every probe (the batch probes after the
    case's own: a probe the case declares wins over the automatic one)."""
    model = case.model()
    model.train(case.train_mode)
    example = dict(case.inputs())
    probes = case.all_probes(probe_errors)
    for name, inputs in _batch_probes(case, example, _SETTINGS["batch_sizes"]).items():
        probes.setdefault(name, inputs)
    return model, example, probes


def _torch_outputs(model: Any, probes: Mapping[str, Any], probe_errors: dict[str, str], path: Path) -> int:
    """torch's outputs of every probe, with its inputs, into ``reference.npz`` (a probe torch fails on goes into
    ``probe_errors`` instead); the number of outputs."""
    import numpy as np
    import torch

    arrays: dict[str, Any] = {}
    n_outputs = 0
    for probe, inputs in probes.items():
        try:
            torch.manual_seed(0)
            with torch.no_grad():
                outs = _flatten(model(*inputs.values()))
        except Exception as exc:
            probe_errors[probe] = f"{type(exc).__name__}: {first_line(str(exc))}"
            continue
        for name, value in inputs.items():
            arrays[layout.input_key(probe, name)] = _to_numpy(value)
        for i, value in enumerate(outs):
            arrays[layout.output_key(probe, i)] = _to_numpy(value)
        n_outputs = len(outs)
    if "example" not in probe_errors:
        np.savez(path, **arrays)
    return n_outputs


def _weight_bytes(model: Any) -> int:
    """Bytes of the module's parameters and buffers: what the exported model holds as initializers."""
    seen: set[int] = set()
    total = 0
    for tensor in (*model.parameters(), *model.buffers()):
        if id(tensor) not in seen:
            seen.add(id(tensor))
            total += tensor.numel() * tensor.element_size()
    return total


def _run_exporter(
    case: corpus_mod.Case,
    key: ArtifactKey,
    model: Any,
    example: Mapping[str, Any],
    output_names: list[str],
    path: Path,
    *,
    external: bool = False,
) -> Any:
    """Write ``path`` (and, with ``external``, its weights as ``model.onnx.data`` beside it); return the
    dynamo exporter's ONNXProgram (None for TorchScript)."""
    import torch

    # Only tensors are named, as callers do: TorchScript then turns a Python float argument into an
    # anonymous graph input ('onnx::Cast_1') that a caller cannot feed, dynamo bakes it in; both are
    # gotchas the table shows (scalar_temperature).
    input_names = [n for n, v in example.items() if isinstance(v, torch.Tensor)]
    if case.script:
        model = torch.jit.script(model)
    # Into a folder of its own: an exporter writing a large model may leave a file per tensor beside it.
    scratch = path.parent / ".export"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    target = scratch / path.name
    try:
        program = _call_exporter(case, key, model, example, input_names, output_names, target, external)
        if not target.exists():
            return program
        written = sorted(p.name for p in scratch.iterdir())
        if written == [path.name] and not external:
            os.replace(target, path)
        elif written == sorted([path.name, DATA]):  # the dynamo exporter's own layout (onnx-ir saves <name>.data)
            os.replace(scratch / DATA, path.parent / DATA)
            os.replace(target, path)
        else:  # TorchScript: weights inline, or a file per tensor beyond 2 GiB
            _one_data_file(target, path)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return program


def _call_exporter(
    case: corpus_mod.Case,
    key: ArtifactKey,
    model: Any,
    example: Mapping[str, Any],
    input_names: list[str],
    output_names: list[str],
    target: Path,
    external: bool,
) -> Any:
    """One torch exporter at the artifact's opset, writing ``target``: the dynamo exporter's ONNXProgram, or None."""
    import torch

    args = tuple(example.values())
    if key.exporter == "torchscript":
        dynamic_axes: dict[str, Any] = {n: dict(d) for n, d in case.dynamic.items()}
        torch.onnx.export(
            model,
            args,
            str(target),
            dynamo=False,
            opset_version=key.opset,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes or None,
        )
        return None
    shapes = tuple(
        {d: _dynamic_dim(torch, label) for d, label in case.dynamic[n].items()} if n in case.dynamic else None for n in example
    )
    program = torch.onnx.export(
        model,
        args,
        dynamo=True,
        opset_version=key.opset,
        input_names=input_names,
        output_names=output_names,
        dynamic_shapes=shapes if case.dynamic else None,
        external_data=external,
    )
    if program is None:
        raise RuntimeError("torch.onnx.export(dynamo=True) returned no program")
    program.save(str(target), external_data=external)
    return program


def _dynamic_dim(torch: Any, label: str) -> Any:
    """A dynamic axis for ``torch.export``: ``Dim.DYNAMIC`` where torch has it (2.7 and newer); before it (2.5), a
    named ``Dim`` of the axis's label, which, as the exporter's own conversion of ``dynamic_axes`` does there, makes
    axes that share a label one dimension. Measured: before torch 2.9 the ONNX exporter still fixes such an axis at
    the example's size when that size is 1 (torch.export's 0/1 specialization), silently; from 2.9 it stays
    dynamic. The table shows it as the batch probes' run-fail, which is what a user on that torch gets."""
    dynamic = getattr(torch.export.Dim, "DYNAMIC", None)
    if dynamic is not None:
        return dynamic
    return torch.export.Dim(re.sub(r"\W", "_", str(label)) if re.match(r"[A-Za-z_]", str(label)) else f"d_{label}")


def _one_data_file(src: Path, path: Path) -> None:
    """Save the model at ``src`` (and whatever external data files it uses) as ``path`` with every
    initializer of 1 KiB or more in one ``model.onnx.data``: the layout every later stage expects."""
    import onnx

    model = onnx.load(str(src), load_external_data=True)
    onnx.save(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=DATA, size_threshold=1024)


def _inspect(path: Path) -> dict[str, Any]:
    """Checker verdict, actual opset, IR version and graph statistics."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)  # the graph; the weights are not needed here
    try:
        # A model with external data is checked from its file (its weights stay on disk, and one over 2 GiB
        # cannot be checked in memory); one without, as it is.
        onnx.checker.check_model(str(path) if (path.parent / DATA).exists() else model)
        checker = "ok"
    except Exception as exc:
        checker = first_line(str(exc)) or type(exc).__name__
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    return {"checker": checker, "opset_actual": opset, "ir_version": model.ir_version, "graph": graph_stats(model)}


def graph_stats(model: Any) -> dict[str, Any]:
    """The ``graph`` of an :class:`ExportRecord`: node, Constant and initializer counts, the op-type
    histogram, the graph inputs (initializers left out) and outputs, local functions."""
    ops: dict[str, int] = {}
    for node in model.graph.node:
        op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"
        ops[op] = ops.get(op, 0) + 1
    inits = {i.name for i in model.graph.initializer}
    return {
        "nodes": len(model.graph.node),
        "constants": ops.get("Constant", 0),
        "initializers": len(model.graph.initializer),
        "ops": dict(sorted(ops.items())),
        "inputs": [_value_info(v) for v in model.graph.input if v.name not in inits],
        "outputs": [_value_info(v) for v in model.graph.output],
        "functions": len(model.functions),
    }


def _reference(
    out_dir: Path, probes: Mapping[str, Mapping[str, Any]], program: Any, *, tolerance: Mapping[str, Any]
) -> dict[str, Any]:
    """Record what a mismatching cell is later compared with, node by node (:func:`harness.export.node_values.prepare`):
    ``model.debug.onnx`` (its weights are model.onnx's, referenced, not copied), ``nodes.json``, where the
    graph itself already differs from torch per probe (``localization.json``) and, for a model within
    ``[export] intermediates_mib``, the reference runtime's value of every node (``intermediates.npz``; a
    larger model's are recorded on demand, one probe at a time, for a cell that mismatches). The reference
    runs in a forked child: a runtime that crashes or hangs on this model costs this record, not the export."""
    from harness.export import node_values as reference

    pin = f"onnxruntime=={_SETTINGS['reference']}"
    for old in layout.LOCALIZATION_FILES:
        (out_dir / old).unlink(missing_ok=True)
    try:
        info = reference.prepare(
            out_dir,
            probes,
            **tolerance,
            exported_program=program.exported_program if program is not None else None,
            timeout=_SETTINGS["reference_timeout"],
            budget=int(_SETTINGS["intermediates_mib"] * 2**20),
        )
    except Exception as exc:  # an exporter's odd graph costs the localization, never the artifact
        return {"reference_runtime": f"failed: {pin}: {type(exc).__name__}: {first_line(str(exc))}"}
    if info["error"]:
        return {"reference_runtime": f"failed: {pin}: {info['error']}"}
    return {"reference_runtime": pin, "intermediates_sha256": layout.localization_sha256(out_dir)}


def _value_info(v: Any) -> dict[str, Any]:
    t = v.type.tensor_type
    dims = [d.dim_param or (d.dim_value if d.HasField("dim_value") else "?") for d in t.shape.dim]
    return {"name": v.name, "elem_type": t.elem_type, "shape": dims}


def _card(case: corpus_mod.Case) -> dict[str, str]:
    card = case.card.to_dict() if case.card else {}
    if case.fixes:
        card["fixes"] = case.fixes
    if case.title:
        card["title"] = case.title
    if case.about:
        card["about"] = case.about
    if tuple(case.exporters) != corpus_mod.EXPORTERS:  # applies to these only: the others' cells are `skipped`
        card["exporters"] = ",".join(case.exporters)
        card["skip_reason"] = case.skip_reason
    card["source_file"] = case.source_file
    return card


_BUILD_FAILED = "building the case failed: "
_EXAMPLE_FAILED = "torch cannot run the example inputs: "


def user_error(rec: ExportRecord) -> bool:
    """The case's factory or example inputs failed in torch: the user's bug, not the exporter's."""
    return not rec.ok and (rec.error_line or "").startswith((_BUILD_FAILED, _EXAMPLE_FAILED))
