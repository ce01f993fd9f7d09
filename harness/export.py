"""Export stage (torch environment): case × exporter × opset → artifacts.

For each artifact it writes, under ``build/artifacts/<case>.<exporter>.op<N>/``:

- ``model.onnx`` (when the export succeeded),
- ``reference.npz``: every probe's inputs and torch's outputs, so the runtime
  environments never need torch,
- ``export.json``: the :class:`~harness.records.ExportRecord` (time, checker
  verdict, every warning, graph statistics, actual opset and IR version).

Each export runs in a worker process (:mod:`harness.workers`): an exporter
that crashes or hangs costs its own artifact only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import cache, frontier
from harness import corpus as corpus_mod
from harness.errors import HarnessError
from harness.matrix import Matrix, Profile
from harness.progress import Progress
from harness.records import ArtifactKey, ExportRecord, first_line
from harness.workers import MemoryGate, run_tasks

MANIFEST = "manifest.json"

# State of an export worker: the corpus, loaded once per process.
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


def export_one(task: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Worker entry (a generator): export one artifact, write its files, yield its record last.

    Yields ``{"phase": ..., "budget": seconds}`` as it enters each phase (the budget of building, torch's
    outputs and the export together is the task's; the reference pass gets its own), so a worker killed by
    a timeout or a crash is charged to the phase it was in; then ``{"record": ...}``. The record is also
    written to ``export.json`` before the reference pass: a pass that never returns costs the
    localization data, never the export.
    """
    assert _REGISTRY is not None, "init_worker was not called"
    key = ArtifactKey(task["case"], task["exporter"], task["opset"])
    out_dir = Path(task["dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    before = set(sys.modules)
    for item in _export(_REGISTRY[key.case], key, out_dir, budget=float(task["timeout"]), cache_key=task["key"]):
        if isinstance(item, ExportRecord):
            record = dataclasses.replace(item, peak_rss_mib=_peak_rss_mib())
            write_json(out_dir / "export.json", record.to_dict())
            # What this process imported that the fork server had not: preloaded for the case next time.
            imported = sorted(n for n in set(sys.modules) - before if _library_module(n))
            yield {"record": record.to_dict(), "imported": imported}
        else:
            yield item


def _library_module(name: str) -> bool:
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
                caught.append({"category": f"log:{rec.name}", "message": rec.getMessage()})

    handler = Handler()
    loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript")]
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


def _export(
    case: corpus_mod.Case, key: ArtifactKey, out_dir: Path, *, budget: float, cache_key: str | None = None
) -> Iterator[dict[str, Any] | ExportRecord]:
    """The export of one artifact, phase by phase (see :func:`export_one`); the record comes last."""
    import numpy as np
    import torch

    start = time.perf_counter()

    def enter(phase: str) -> dict[str, Any]:
        return {"phase": phase, "budget": max(1.0, budget - (time.perf_counter() - start))}

    base = base_record(case, key, _SETTINGS, cache_key=cache_key)
    for old in ("model.onnx", DATA, "reference.npz"):
        (out_dir / old).unlink(missing_ok=True)

    def fail(exc: BaseException, stage_note: str = "", **extra: Any) -> ExportRecord:
        message = f"{stage_note}{type(exc).__name__}: {exc}" if stage_note else str(exc)
        cls, line = _summarize(type(exc).__name__, message)
        return dataclasses.replace(
            base, seconds=time.perf_counter() - start, error_class=cls, error_line=line, error=message[:20000], **extra
        )

    # Build the model and torch's references for every probe.
    yield enter("build")
    probe_errors: dict[str, str] = {}  # a probe torch fails on, or whose file cannot be used: no cells for it alone
    try:
        model = case.model()
        model.train(case.train_mode)
        example = dict(case.inputs())
        probes = case.all_probes(probe_errors)
        for name, inputs in _batch_probes(case, example, _SETTINGS["batch_sizes"]).items():
            probes.setdefault(name, inputs)  # a probe the case declares wins over the automatic one
    except Exception as exc:
        yield fail(exc, _BUILD_FAILED)
        return
    timing: dict[str, float] = {"build": time.perf_counter() - start}
    yield enter("torch")
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
            arrays[f"{probe}/in/{name}"] = _to_numpy(value)
        for i, value in enumerate(outs):
            arrays[f"{probe}/out/{i}"] = _to_numpy(value)
        n_outputs = len(outs)
    timing["torch"] = time.perf_counter() - start
    if "example" in probe_errors:
        yield fail(RuntimeError(f"{_EXAMPLE_FAILED}{probe_errors['example']}"), probe_errors=probe_errors, timing=timing)
        return
    np.savez(out_dir / "reference.npz", **arrays)
    del arrays
    base = dataclasses.replace(
        base,
        probes=tuple(p for p in probes if p not in probe_errors),
        probe_errors=probe_errors,
        reference_sha256=sha256(out_dir / "reference.npz"),
    )

    if key.exporter not in case.exporters:
        yield dataclasses.replace(
            base,
            error_class="Skipped",
            error_line=case.skip_reason or f"case does not apply to the {key.exporter} exporter",
            timing=timing,
        )
        return

    path = out_dir / "model.onnx"
    output_names = [f"out{i}" for i in range(n_outputs)]
    error: Exception | None = None
    program: Any = None
    yield enter("export")
    t_export = time.perf_counter()
    external = _weight_bytes(model) > _SETTINGS["external_data_mib"] * 2**20
    with _capture() as caught:  # filled when the block exits
        try:
            program = _run_exporter(case, key, model, example, output_names, path, external=external)
        except Exception as exc:
            error = exc
    timing["export"] = time.perf_counter() - t_export
    if error is None and not path.exists():
        error = RuntimeError("the exporter returned without writing a model")
    if error is not None:
        path.unlink(missing_ok=True)
        (out_dir / DATA).unlink(missing_ok=True)
        yield fail(error, warnings=tuple(caught), timing=timing)
        return
    del model
    seconds = time.perf_counter() - start
    data = out_dir / DATA
    exported = dataclasses.replace(
        base,
        ok=True,
        seconds=seconds,
        warnings=tuple(caught),
        sha256=sha256(path),
        data_sha256=sha256(data) if data.exists() else None,
        timing=timing,
        reference_runtime=f"not recorded: {phase_words('reference', key.exporter)} did not finish",
        **_inspect(path),
    )
    write_json(out_dir / "export.json", exported.to_dict())  # the export stands whatever the reference pass does
    ran = {p: v for p, v in probes.items() if p not in probe_errors}
    yield {"phase": "reference", "budget": _SETTINGS["reference_timeout"] + 60}
    t_reference = time.perf_counter()
    reference = _reference(out_dir, ran, program, tolerance=exported.tolerance)
    timing["reference"] = time.perf_counter() - t_reference
    yield dataclasses.replace(exported, timing=timing, **reference)


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

    args = tuple(example.values())
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
    program = None
    try:
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
        else:
            dyn = torch.export.Dim.DYNAMIC
            shapes = tuple({d: dyn for d in case.dynamic[n]} if n in case.dynamic else None for n in example)
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


DATA = "model.onnx.data"
"""The weights of a model saved with ONNX external data, beside ``model.onnx``."""


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
    """Record what a mismatching cell is later compared with, node by node (:func:`harness.localize.prepare`):
    ``model.debug.onnx`` (its weights are model.onnx's, referenced, not copied), ``nodes.json``, where the
    graph itself already differs from torch per probe (``localization.json``) and, for a model within
    ``[export] intermediates_mib``, the reference runtime's value of every node (``intermediates.npz``; a
    larger model's are recorded on demand, one probe at a time, for a cell that mismatches). The reference
    runs in a forked child: a runtime that crashes or hangs on this model costs this record, not the export."""
    from harness import localize

    pin = f"onnxruntime=={_SETTINGS['reference']}"
    for old in localize.FILES:
        (out_dir / old).unlink(missing_ok=True)
    try:
        info = localize.prepare(
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
    h = hashlib.sha256()
    for name in localize.FILES:
        h.update(sha256(out_dir / name).encode() if (out_dir / name).exists() else b"-")
    return {"reference_runtime": pin, "intermediates_sha256": h.hexdigest()}


def _value_info(v: Any) -> dict[str, Any]:
    t = v.type.tensor_type
    dims = [d.dim_param or (d.dim_value if d.HasField("dim_value") else "?") for d in t.shape.dim]
    return {"name": v.name, "elem_type": t.elem_type, "shape": dims}


def _card(case: corpus_mod.Case) -> dict[str, str]:
    card = case.card.to_dict() if case.card else {}
    if case.fixes:
        card["fixes"] = case.fixes
    if tuple(case.exporters) != corpus_mod.EXPORTERS:  # applies to these only: the others' cells are `skipped`
        card["exporters"] = ",".join(case.exporters)
        card["skip_reason"] = case.skip_reason
    card["source_file"] = case.source_file
    return card


_PRELOAD_PROBE = """
import contextlib, io, sys, warnings
import torch, onnx, onnxscript
warnings.simplefilter("ignore")
before = set(sys.modules)
class Probe(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.lin = torch.nn.Conv2d(3, 4, 3), torch.nn.Linear(4, 2)
    def forward(self, x):
        return self.lin(torch.relu(self.conv(x)).mean((2, 3))).softmax(-1)
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    x = torch.randn(2, 3, 8, 8)
    for opset in (17, 18):
        torch.onnx.export(Probe().eval(), (x,), dynamo=True, opset_version=opset,
                          dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))
    torch.onnx.export(Probe().eval(), (x,), io.BytesIO(), dynamo=False, opset_version=17)
print("\\n".join(sorted(set(sys.modules) - before)))
"""


class Preload:
    """What the export's fork server imports before it forks a process per artifact, remembered per
    environment (the same packages import the same modules, whatever ``--out`` is).

    - The modules a fresh export process would import lazily (about 800 for torch 2.13's dynamo
      exporter), found once by a probe export in a child process: a small dynamo export then takes
      about 1 s instead of 2 to 3 s.
    - Per case, the modules its last export imported that the server had not (a corpus of
      ``transformers`` models: ``transformers`` and its modeling modules, ~6 s each time otherwise):
      only the cases of the run at hand add theirs, so a run without them imports nothing of them.

    Importing a module changes no exported graph, so what is preloaded is not part of an export's key.
    Kept in the environment itself (``<prefix>/harness-preload.json``), or under ``--out`` where the
    environment is not writable.
    """

    def __init__(self, out: Path) -> None:
        listing = cache.environment()["listing"] or "unknown"
        own = Path(sys.prefix) / "harness-preload.json"
        self.path = own if os.access(sys.prefix, os.W_OK) else out / "cache" / "preload.json"
        data = cache.read_json(self.path)
        if not isinstance(data, dict) or data.get("environment") != listing:
            data = {"environment": listing, "probe": None, "cases": {}}
        self.data: dict[str, Any] = data

    def modules(self, cases: Sequence[str]) -> tuple[str, ...]:
        if self.data.get("probe") is None:
            proc = subprocess.run([sys.executable, "-c", _PRELOAD_PROBE], capture_output=True, text=True, timeout=600)
            self.data["probe"] = proc.stdout.split() if proc.returncode == 0 else []
            self.save()
        learned = [m for c in cases for m in self.data["cases"].get(c, ())]
        names = [n for n in (*self.data["probe"], *learned) if not n.startswith("__")]
        base = ("torch", "torch.onnx", "onnx", "onnxscript", "onnxruntime", "numpy", "harness.export", "harness.localize")
        return tuple(dict.fromkeys((*base, *names)))

    def learn(self, case: str, imported: Sequence[str]) -> None:
        """Remember what an export of ``case`` imported (top-level packages' modules, at most 4,000)."""
        known = set(self.data["cases"].get(case, ()))
        merged = sorted(known | set(imported))[:4000]
        if merged != sorted(known):
            self.data["cases"][case] = merged
            self.dirty = True

    def save(self) -> None:
        self.dirty = False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            cache.write_json(self.path, self.data)
        except OSError:
            pass  # a cache: the next export probes again

    dirty = False


_BUILD_FAILED = "building the case failed: "
_EXAMPLE_FAILED = "torch cannot run the example inputs: "


def _user_error(rec: ExportRecord) -> bool:
    """The case's factory or example inputs failed in torch: the user's bug, not the exporter's."""
    return not rec.ok and (rec.error_line or "").startswith((_BUILD_FAILED, _EXAMPLE_FAILED))


def _stderr(line: str) -> None:
    print(f"harness: error: {line}", file=sys.stderr)


def plan(registry: corpus_mod.Registry, profile: Profile) -> list[ArtifactKey]:
    """Every artifact the profile needs, in corpus order."""
    return [ArtifactKey(c.name, e, o) for c in registry for e, o in profile.exports()]


STAMP = "export.stamp.json"
STORE = Path("cache") / "exports"


# Budgets, not inputs: an artifact exported within them is the same artifact whatever they are.
BUDGETS = ("timeout", "reference_timeout")


def settings_of(matrix: Matrix, requirements: Sequence[str] = ()) -> dict[str, Any]:
    """The export settings an artifact's files depend on (besides its case and the versions), and its
    budgets (:data:`BUDGETS`)."""
    return {
        "atol": matrix.atol,
        "rtol": matrix.rtol,
        "scaled": matrix.scaled,
        "batch_sizes": list(matrix.batch_sizes),
        "reference": matrix.export.onnxruntime,
        "intermediates_mib": matrix.export.intermediates_mib,
        "external_data_mib": matrix.export.external_data_mib,
        "requirements": list(requirements),
        "timeout": matrix.export.timeout,
        "reference_timeout": matrix.export.reference_timeout,
    }


def requirements_of(matrix: Matrix, extra: Sequence[str], corpus: Sequence[str], root: Path) -> list[str]:
    """What the export environment installs beyond the pins: ``[export] requirements``, then ``--with``,
    then what each corpus file declares (``REQUIREMENTS = [...]``), each once."""
    from harness.matrix import parse_requirements

    declared = [r for source in corpus for r in corpus_mod.declared_requirements(source, root)]
    given = parse_requirements("--with", list(extra))
    return list(dict.fromkeys([*matrix.export.requirements, *given, *declared]))


def stamp_settings(
    matrix: Matrix, profile: Profile, corpus: Sequence[str], cases: Sequence[str] | None, requirements: Sequence[str] = ()
) -> dict[str, Any]:
    """What decides which artifacts an export writes, from matrix.toml and the command line alone:
    :mod:`harness.plan` compares it with the last export's stamp without starting the environment."""
    reference = next(
        (list(rt.requirements) for rt in matrix.runtimes if rt.pin == f"onnxruntime=={matrix.export.onnxruntime}"),
        [f"onnxruntime=={matrix.export.onnxruntime}"],
    )
    return {
        "settings": settings_of(matrix, requirements),
        "pins": json.loads(json.dumps(dataclasses.asdict(matrix.export))),  # as the stamp reads it back (lists)
        "reference_requirements": reference,  # what the export session installs beside torch
        "exporters": list(profile.exporters),
        "opsets": {e: list(profile.opsets_of(e)) for e in profile.exporters},
        "corpus": list(corpus),
        "cases": sorted(cases) if cases is not None else None,
    }


# Failures that depend on the machine or on luck (a crash, a hang): never cached, exported again next time.
_NOT_CACHED = ("ExporterCrash", "ExporterTimeout", "HarnessBug")


def _cacheable(rec: ExportRecord) -> bool:
    """Whether the store may keep this export: not a crash or hang of the exporter, not the user's own
    code failing (a missing package or data file is fixed outside the case's source), not a reference
    pass that ran out of time."""
    timed_out = "not recorded" in (rec.reference_runtime or "")
    return rec.error_class not in _NOT_CACHED and not _user_error(rec) and not timed_out


def export_all(
    matrix: Matrix,
    profile: Profile,
    corpus: Sequence[str],
    out: Path,
    *,
    root: Path,
    workers: int | None = None,
    cases: Sequence[str] | None = None,
    force: bool = False,
    requirements: Sequence[str] = (),
    echo: Any = print,
    echo_error: Any = _stderr,
) -> tuple[list[ExportRecord], list[str]]:
    """Export every artifact of ``profile`` that the store does not already hold; write the manifest
    and the stamp; return the records and the corpus problems.

    An artifact is reused when its key (:func:`harness.cache.export_key`) has a whole entry in the
    store (every file's hash checked); ``force`` exports everything again. ``requirements`` are what the
    environment was given beyond the pins (:func:`requirements_of`): part of every key.

    Raises:
        HarnessError: A corpus file failed to import (its cases cannot be exported, and a table without
            them would not say so), or ``cases`` names an unknown case.
    """
    t0 = time.perf_counter()
    (out / STAMP).unlink(missing_ok=True)  # until this export ends, no stage may count on the last one
    loaded = set(sys.modules)
    registry = corpus_mod.load(corpus, root)  # a bad case is one line; the other cases still export
    if registry.import_failures:
        (out / MANIFEST).unlink(missing_ok=True)  # no stage may run on the last export's list as if it were this one
        lines = registry.import_failures
        raise HarnessError(lines[0] if len(lines) == 1 else f"{len(lines)} corpus files fail to import: " + "; ".join(lines))
    for problem in registry.problems:
        echo_error(problem)
    keys = plan(registry, profile)
    if cases is not None:
        unknown = [c for c in cases if c not in registry]
        if unknown:
            raise HarnessError(f"--cases: no case named {', '.join(unknown)}; `harness list` shows the corpus")
        keys = [k for k in keys if k.case in cases]
    art_dir = out / "artifacts"
    art_dir.mkdir(parents=True, exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    store = cache.ExportStore(out / STORE)
    settings = {**settings_of(matrix, requirements), "versions": versions()}
    key_settings = {k: v for k, v in settings.items() if k not in BUDGETS}
    # Every package of this environment, not only the pinned ones (the dynamo exporter runs onnx-ir, sympy, ...).
    key_settings["environment"] = cache.environment()["listing"]
    # The case's source: importing what its factories build (torch, in this environment) is part of it.
    watched: set[str] = set()
    sources = {name: cache.case_digest(registry[name], watched) for name in dict.fromkeys(k.case for k in keys)}
    address = {k.id: cache.export_key(sources[k.case], k.id, k.exporter, k.opset, key_settings) for k in keys}
    records: dict[str, ExportRecord] = {}
    tasks: list[dict[str, Any]] = []
    for k in keys:
        why = "forced" if force else store.check(address[k.id])
        if why is None:
            store.link(address[k.id], art_dir / k.id)
            records[k.id] = ExportRecord.from_dict(json.loads((art_dir / k.id / "export.json").read_text(encoding="utf-8")))
            continue
        if why not in ("forced", "not cached"):  # a damaged entry is said and redone, never used
            echo(f"export {k.id}: cache entry {why}: exporting again")
        tmp = store.begin(address[k.id])
        budget = registry[k.case].export_timeout or matrix.export.timeout
        task = {"case": k.case, "exporter": k.exporter, "opset": k.opset, "dir": str(tmp), "key": address[k.id]}
        tasks.append({**task, "timeout": budget})
    echo(f"export: {len(keys)} artifacts, {len(keys) - len(tasks)} cached, {len(tasks)} to export")
    n = workers or matrix.run.worker_count
    preload = Preload(out)
    # What the corpus files imported when the parent loaded them is imported once by the fork server too.
    corpus_modules = tuple(sorted(m for m in set(sys.modules) - loaded if _library_module(m)))
    peaks = _known_peaks(store, {str(t["case"]) for t in tasks})
    memory = MemoryGate(lambda task: peaks.get(task["case"], DEFAULT_EXPORT_MIB))
    progress = Progress("export", len(tasks), echo, workers=n)
    progress.expect(t["case"] for t in tasks)
    phase: dict[str, str] = {}
    begun: dict[str, float] = {}
    for outcome in run_tasks(
        "harness.export:export_one",
        tasks,
        workers=n,
        timeout=lambda task: task["timeout"],
        init="harness.export:init_worker",
        initargs=(list(corpus), str(root), settings),
        log=str(out / "logs" / "export.log"),
        fresh=True,  # exporters keep per-process caches: each artifact gets a clean process
        preload=(*preload.modules(list(sources)), *corpus_modules),
        admit=memory.admit,
        heartbeat=(30.0, lambda running: progress.running((_artifact_id(t), s) for t, s in running)),
    ):
        key = ArtifactKey(outcome.task["case"], outcome.task["exporter"], outcome.task["opset"])
        tmp = Path(outcome.task["dir"])
        if outcome.kind == "item":
            if "phase" in outcome.value:
                phase[key.id] = outcome.value["phase"]
                begun.setdefault(key.id, time.monotonic() - outcome.seconds)  # handed over, process start included
                continue
            rec = ExportRecord.from_dict(outcome.value["record"])
            preload.learn(key.case, outcome.value.get("imported", ()))
        elif outcome.kind == "ok":
            continue  # the record came as the generator's last item
        else:
            rec = _lost(outcome, key, registry[key.case], settings, phase.get(key.id, "build"), tmp)
        if not _cacheable(rec):
            store.place(tmp, art_dir / key.id)
        else:
            store.commit(outcome.task["key"], key.id, tmp)
            store.link(outcome.task["key"], art_dir / key.id)
        records[key.id] = rec
        if rec.peak_rss_mib:
            peaks[key.case] = max(peaks.get(key.case, 0.0), rec.peak_rss_mib)
        mark = "ok" if rec.ok else (rec.error_class or "fail")
        wall = time.monotonic() - begun.get(key.id, time.monotonic() - rec.seconds)
        progress.done(f"export {key.id:<52} {mark:<24} {rec.seconds:6.2f}s", kind=key.case, seconds=wall)
    if preload.dirty:
        preload.save()
    broken: set[str] = set()
    for k in keys:
        rec = records[k.id]
        if _user_error(rec) and k.case not in broken:  # the case's own code failed: say so once, by name
            broken.add(k.case)
            registry.problems.append(f"{registry[k.case].source_file}: case {k.case!r}: {rec.error_line}")
            echo_error(registry.problems[-1])
    manifest = {
        "profile": profile.name,
        "artifacts": [k.id for k in keys],
        "versions": settings["versions"],
        "problems": registry.problems,
        "requirements": list(requirements),
        # The reference runtime's interpreter: the run stage asks it for a large model's node values on demand.
        "reference_python": sys.executable,
    }
    write_json(out / MANIFEST, manifest)
    index = frontier.write_models(out)  # what each run session loads to measure its runtime's frontier
    echo(f"frontier: {len(index['files'])} one-node models, IR {index['irs'][0]}–{index['irs'][-1]} × opset "
         f"{index['opsets'][0]}–{index['opsets'][-1]} (onnx {index['onnx']})")
    store.prune(address.values())
    done = [records[k.id] for k in keys]
    _stamp(
        out, root, matrix, profile, corpus, cases, registry, done, watched, len(tasks), time.perf_counter() - t0, requirements
    )
    return [records[k.id] for k in keys], list(registry.problems)


DEFAULT_EXPORT_MIB = 1024.0
"""What an export of a case never exported before is expected to need (a gotcha takes ~600 MiB, most of
it torch, shared with the fork server); once one of its artifacts is done, its measured peak counts."""


def _known_peaks(store: cache.ExportStore, cases: set[str]) -> dict[str, float]:
    """Each case's highest peak memory recorded by an earlier export of it in the store (any version)."""
    peaks: dict[str, float] = {}
    if not cases or not store.root.is_dir():
        return peaks
    for entry in store.root.iterdir():
        info = cache.read_json(entry / cache.CACHE_INFO)
        if not isinstance(info, dict) or str(info.get("artifact", "")).split(".")[0] not in cases:
            continue
        rec = cache.read_json(entry / "export.json")
        peak = rec.get("peak_rss_mib") if isinstance(rec, dict) else None
        if isinstance(peak, (int, float)):
            case = rec["case"]
            peaks[case] = max(peaks.get(case, 0.0), float(peak))
    return peaks


def _artifact_id(task: Mapping[str, Any]) -> str:
    return ArtifactKey(task["case"], task["exporter"], task["opset"]).id


def _lost(
    outcome: Any, key: ArtifactKey, case: corpus_mod.Case, settings: Mapping[str, Any], phase: str, tmp: Path
) -> ExportRecord:
    """The record of an export whose process died or ran out of time in ``phase``. In the reference pass
    the export itself stands (its record was written before the pass): only the localization data is
    lost, and the record says why. Before that, nothing of it is kept."""
    detail = outcome.value if isinstance(outcome.value, str) else f"{outcome.value[0]}: {outcome.value[1]}"
    what = phase_words(phase, key.exporter)
    written = cache.read_json(tmp / "export.json")
    if phase == "reference" and isinstance(written, dict) and written.get("ok"):
        from harness import localize

        for name in (*localize.FILES, *localize.TEMPORARY):  # half-written localization data
            (tmp / name).unlink(missing_ok=True)
        rec = ExportRecord.from_dict(written)
        if outcome.kind == "timeout":
            why = f"{what} exceeded {settings['reference_timeout'] + 60:g} s ([export] reference_timeout)"
        else:
            why = f"{what} failed ({detail})"
        rec = dataclasses.replace(rec, reference_runtime=f"failed: onnxruntime=={settings['reference']}: not recorded: {why}")
        write_json(tmp / "export.json", rec.to_dict())
        return rec
    for old in tmp.iterdir():  # what the dead exporter left behind
        shutil.rmtree(old) if old.is_dir() else old.unlink()
    if outcome.kind == "timeout":
        budget = case.export_timeout or settings["timeout"]
        where = f"the case's export_timeout ({budget:g} s)" if case.export_timeout else f"[export] timeout ({budget:g} s)"
        raise_it = "raise the case's export_timeout" if case.export_timeout else "raise [export] timeout in matrix.toml"
        line = (
            f"{what} did not finish within {where}, the budget of building the model, torch's outputs and the "
            f"export together; {raise_it} (or set Case(export_timeout=...))"
        )
        cls = "ExporterTimeout"
    else:
        line = f"{detail} during {what}"
        cls = "ExporterCrash" if outcome.kind == "crash" else "HarnessBug"
    rec = base_record(case, key, settings, seconds=outcome.seconds, error_class=cls, error_line=first_line(line), error=line)
    write_json(tmp / "export.json", rec.to_dict())
    return rec


def _stamp(
    out: Path,
    root: Path,
    matrix: Matrix,
    profile: Profile,
    corpus: Sequence[str],
    cases: Sequence[str] | None,
    registry: corpus_mod.Registry,
    records: list[ExportRecord],
    watched: set[str],
    exported: int,
    seconds: float,
    requirements: Sequence[str] = (),
) -> None:
    """What this export read (files, settings, environment) and wrote, for :mod:`harness.plan`. It is
    ``complete`` when a rerun would do nothing: no corpus problem, every artifact in the store."""
    extra = [str(corpus_mod.source_file(c, root)) for c in corpus] + [str(cache.PACKAGE / n) for n in cache.EXPORT_CODE]
    extra += sorted(watched)
    globs = []
    for case in registry:
        extra += [str(p) for p in cache.probe_files(case)]
        globs += [[case.source_dir, pattern, cache.glob_names(case.source_dir, pattern)] for pattern in case.probe_files]
    cache.write_json(
        out / STAMP,
        {
            "inputs": stamp_settings(matrix, profile, corpus, cases, requirements),
            "files": cache.project_files(extra),
            "globs": globs,
            "env": cache.environment(),
            "complete": not registry.problems and all(_cacheable(r) for r in records),
            "artifacts": {r.key.id: {"key": r.cache_key, "digest": r.digest} for r in records},
            "stats": {
                "seconds": round(seconds, 3),
                "artifacts": len(records),
                "exported": exported,
                "floor": {k: round(sum(r.timing.get(k, 0.0) for r in records), 3) for k in ("torch", "export", "reference")},
            },
        },
    )
