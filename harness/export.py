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
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness import cache
from harness import corpus as corpus_mod
from harness.errors import HarnessError
from harness.matrix import Matrix, Profile
from harness.records import ArtifactKey, ExportRecord, first_line
from harness.workers import run_tasks

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


def export_one(task: dict[str, Any]) -> dict[str, Any]:
    """Worker entry: export one artifact, write its files, return its record."""
    assert _REGISTRY is not None, "init_worker was not called"
    key = ArtifactKey(task["case"], task["exporter"], task["opset"])
    out_dir = Path(task["dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    record = dataclasses.replace(_export(_REGISTRY[key.case], key, out_dir), cache_key=task["key"])
    write_json(out_dir / "export.json", record.to_dict())
    return record.to_dict()


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


def _export(case: corpus_mod.Case, key: ArtifactKey, out_dir: Path) -> ExportRecord:
    import numpy as np
    import torch

    start = time.perf_counter()
    atol = case.atol if case.atol is not None else _SETTINGS["atol"]
    rtol = case.rtol if case.rtol is not None else _SETTINGS["rtol"]
    base = dict(
        case=key.case,
        exporter=key.exporter,
        opset=key.opset,
        atol=atol,
        rtol=rtol,
        versions=_SETTINGS["versions"],
        card=_card(case),
        claims=tuple(c.to_dict() for c in case.claims),
    )
    for old in ("model.onnx", "reference.npz"):
        (out_dir / old).unlink(missing_ok=True)

    def fail(exc: BaseException, stage_note: str = "", **extra: Any) -> ExportRecord:
        message = f"{stage_note}{type(exc).__name__}: {exc}" if stage_note else str(exc)
        cls, line = _summarize(type(exc).__name__, message)
        return ExportRecord(
            ok=False,
            seconds=time.perf_counter() - start,
            error_class=cls,
            error_line=line,
            error=message[:20000],
            **base,
            **extra,
        )

    # Build the model and torch's references for every probe.
    try:
        model = case.model()
        model.train(case.train_mode)
        example = dict(case.inputs())
        probes = case.all_probes()
        for name, inputs in _batch_probes(case, example, _SETTINGS["batch_sizes"]).items():
            probes.setdefault(name, inputs)  # a probe the case declares wins over the automatic one
    except Exception as exc:
        return fail(exc, _BUILD_FAILED)
    arrays: dict[str, Any] = {}
    probe_errors: dict[str, str] = {}
    n_outputs = 0
    timing: dict[str, float] = {}
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
        return fail(RuntimeError(f"{_EXAMPLE_FAILED}{probe_errors['example']}"), probe_errors=probe_errors, timing=timing)
    np.savez(out_dir / "reference.npz", **arrays)
    base.update(
        probes=tuple(p for p in probes if p not in probe_errors),
        probe_errors=probe_errors,
        reference_sha256=sha256(out_dir / "reference.npz"),
    )

    if key.exporter not in case.exporters:
        return ExportRecord(
            ok=False,
            seconds=0.0,
            error_class="Skipped",
            error_line=case.skip_reason or f"case does not apply to the {key.exporter} exporter",
            timing=timing,
            **base,
        )

    path = out_dir / "model.onnx"
    output_names = [f"out{i}" for i in range(n_outputs)]
    error: Exception | None = None
    program: Any = None
    t_export = time.perf_counter()
    with _capture() as caught:  # filled when the block exits
        try:
            program = _run_exporter(case, key, model, example, output_names, path)
        except Exception as exc:
            error = exc
    timing["export"] = time.perf_counter() - t_export
    if error is None and not path.exists():
        error = RuntimeError("the exporter returned without writing a model")
    if error is not None:
        path.unlink(missing_ok=True)
        return fail(error, warnings=tuple(caught), timing=timing)
    seconds = time.perf_counter() - start
    facts = _inspect(path)
    ran = {p: v for p, v in probes.items() if p not in probe_errors}
    t_reference = time.perf_counter()
    reference = _reference(out_dir, ran, program, atol=atol, rtol=rtol)
    timing["reference"] = time.perf_counter() - t_reference
    return ExportRecord(
        ok=True, seconds=seconds, warnings=tuple(caught), sha256=sha256(path), timing=timing, **facts, **reference, **base
    )


def _run_exporter(
    case: corpus_mod.Case, key: ArtifactKey, model: Any, example: Mapping[str, Any], output_names: list[str], path: Path
) -> Any:
    """Write ``path``; return the dynamo exporter's ONNXProgram (None for TorchScript)."""
    import torch

    args = tuple(example.values())
    # Only tensors are named, as callers do: TorchScript then turns a Python float argument into an
    # anonymous graph input ('onnx::Cast_1') that a caller cannot feed, dynamo bakes it in; both are
    # gotchas the table shows (scalar_temperature).
    input_names = [n for n, v in example.items() if isinstance(v, torch.Tensor)]
    if case.script:
        model = torch.jit.script(model)
    if key.exporter == "torchscript":
        dynamic_axes: dict[str, Any] = {n: dict(d) for n, d in case.dynamic.items()}
        torch.onnx.export(
            model,
            args,
            str(path),
            dynamo=False,
            opset_version=key.opset,
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=dynamic_axes or None,
        )
        return None
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
            external_data=False,
        )
        if program is None:
            raise RuntimeError("torch.onnx.export(dynamo=True) returned no program")
        program.save(str(path), external_data=False)
        return program


def _inspect(path: Path) -> dict[str, Any]:
    """Checker verdict, actual opset, IR version and graph statistics."""
    import onnx

    model = onnx.load(str(path))
    try:
        onnx.checker.check_model(model)
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
    out_dir: Path, probes: Mapping[str, Mapping[str, Any]], program: Any, *, atol: float, rtol: float
) -> dict[str, Any]:
    """Record what a mismatching cell is later compared with, node by node (:func:`harness.localize.prepare`):
    ``model.debug.onnx``, ``nodes.json``, the reference runtime's ``intermediates.npz`` and, per probe,
    where the graph itself already differs from torch (``localization.json``). The reference runs in a
    forked child: a runtime that crashes or hangs on this model costs this record, not the export."""
    from harness import localize

    pin = f"onnxruntime=={_SETTINGS['reference']}"
    for old in localize.FILES:
        (out_dir / old).unlink(missing_ok=True)
    try:
        info = localize.prepare(
            out_dir,
            probes,
            atol=atol,
            rtol=rtol,
            exported_program=program.exported_program if program is not None else None,
            timeout=_SETTINGS["reference_timeout"],
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


def _preload_modules(logs: Path) -> tuple[str, ...]:
    """Modules a fresh export process would import lazily (about 800 for torch 2.13's dynamo exporter).

    The fork server imports them once, so each artifact's fresh process starts
    warm: a small dynamo export then takes about 1 s instead of 2 to 3 s. The
    list is found by a probe export in a child process and cached per version.
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        key = "-".join(version(p) for p in ("torch", "onnx", "onnxscript"))
    except PackageNotFoundError:
        key = "unknown"
    cache = logs / f"preload-{key}.txt"
    if not cache.exists():
        proc = subprocess.run([sys.executable, "-c", _PRELOAD_PROBE], capture_output=True, text=True, timeout=600)
        names = proc.stdout.split() if proc.returncode == 0 else []
        cache.write_text("\n".join(names))
    modules = [n for n in cache.read_text().split() if not n.startswith("__")]
    return ("torch", "torch.onnx", "onnx", "onnxscript", "onnxruntime", "numpy", "harness.export", "harness.localize", *modules)


_BUILD_FAILED = "building the case failed: "
_EXAMPLE_FAILED = "torch cannot run the example inputs: "


def _user_error(rec: ExportRecord) -> bool:
    """The case's factory or example inputs failed in torch: the user's bug, not the exporter's."""
    return not rec.ok and (rec.error_line or "").startswith((_BUILD_FAILED, _EXAMPLE_FAILED))


def _stderr(line: str) -> None:
    print(f"harness: error: {line}", file=sys.stderr)


def plan(registry: corpus_mod.Registry, profile: Profile) -> list[ArtifactKey]:
    """Every artifact the profile needs, in corpus order."""
    return [ArtifactKey(c.name, e, o) for c in registry for e in profile.exporters for o in profile.opsets]


STAMP = "export.stamp.json"
STORE = Path("cache") / "exports"


def settings_of(matrix: Matrix) -> dict[str, Any]:
    """The export settings an artifact's files depend on (besides its case and the versions)."""
    return {
        "atol": matrix.atol,
        "rtol": matrix.rtol,
        "batch_sizes": list(matrix.batch_sizes),
        "reference": matrix.export.onnxruntime,
        # A quarter of the export's own budget: a reference that hangs costs the localization, not the export.
        "reference_timeout": matrix.run.timeout / 4,
    }


def stamp_settings(matrix: Matrix, profile: Profile, corpus: Sequence[str], cases: Sequence[str] | None) -> dict[str, Any]:
    """What decides which artifacts an export writes, from matrix.toml and the command line alone:
    :mod:`harness.plan` compares it with the last export's stamp without starting the environment."""
    reference = next(
        (list(rt.requirements) for rt in matrix.runtimes if rt.pin == f"onnxruntime=={matrix.export.onnxruntime}"),
        [f"onnxruntime=={matrix.export.onnxruntime}"],
    )
    return {
        "settings": settings_of(matrix),
        "pins": dataclasses.asdict(matrix.export),
        "reference_requirements": reference,  # what the export session installs beside torch
        "exporters": list(profile.exporters),
        "opsets": list(profile.opsets),
        "corpus": list(corpus),
        "cases": sorted(cases) if cases is not None else None,
    }


# Failures that depend on the machine or on luck (a crash, a hang): never cached, exported again next time.
_NOT_CACHED = ("ExporterCrash", "ExporterTimeout", "HarnessBug")


def _cacheable(rec: ExportRecord) -> bool:
    """Whether the store may keep this export: not a crash or hang of the exporter, not the user's own
    code failing (a missing package or data file is fixed outside the case's source), not a reference
    pass that ran out of time."""
    timed_out = "timed out" in (rec.reference_runtime or "")
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
    echo: Any = print,
    echo_error: Any = _stderr,
) -> tuple[list[ExportRecord], list[str]]:
    """Export every artifact of ``profile`` that the store does not already hold; write the manifest
    and the stamp; return the records and the corpus problems.

    An artifact is reused when its key (:func:`harness.cache.export_key`) has a whole entry in the
    store (every file's hash checked); ``force`` exports everything again.
    """
    t0 = time.perf_counter()
    (out / STAMP).unlink(missing_ok=True)  # until this export ends, no stage may count on the last one
    registry = corpus_mod.load(corpus, root)  # problems are one line each; the other cases still export
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
    settings = {**settings_of(matrix), "versions": versions()}
    key_settings = {k: v for k, v in settings.items() if k != "reference_timeout"}  # a budget, not an input
    # Every package of this environment, not only the pinned ones (the dynamo exporter runs onnx-ir, sympy, ...).
    key_settings["environment"] = cache.environment()["listing"]
    # The case's source: importing what its factories build (torch, in this environment) is part of it.
    watched: set[str] = set()
    sources = {name: cache.case_digest(registry[name], watched) for name in dict.fromkeys(k.case for k in keys)}
    address = {k.id: cache.export_key(sources[k.case], k.id, k.exporter, k.opset, key_settings) for k in keys}
    records: dict[str, ExportRecord] = {}
    tasks = []
    for k in keys:
        why = "forced" if force else store.check(address[k.id])
        if why is None:
            store.link(address[k.id], art_dir / k.id)
            records[k.id] = ExportRecord.from_dict(json.loads((art_dir / k.id / "export.json").read_text(encoding="utf-8")))
            continue
        if why not in ("forced", "not cached"):  # a damaged entry is said and redone, never used
            echo(f"export {k.id}: cache entry {why}: exporting again")
        tmp = store.begin(address[k.id])
        tasks.append({"case": k.case, "exporter": k.exporter, "opset": k.opset, "dir": str(tmp), "key": address[k.id]})
    echo(f"export: {len(keys)} artifacts, {len(keys) - len(tasks)} cached, {len(tasks)} to export")
    n = workers or matrix.run.worker_count
    for outcome in run_tasks(
        "harness.export:export_one",
        tasks,
        workers=n,
        timeout=matrix.run.timeout,
        init="harness.export:init_worker",
        initargs=(list(corpus), str(root), settings),
        log=str(out / "logs" / "export.log"),
        fresh=True,  # exporters keep per-process caches: each artifact gets a clean process
        preload=_preload_modules(out / "logs"),
    ):
        key = ArtifactKey(outcome.task["case"], outcome.task["exporter"], outcome.task["opset"])
        tmp = Path(outcome.task["dir"])
        if outcome.kind == "ok":
            rec = ExportRecord.from_dict(outcome.value)
        else:
            detail = outcome.value if isinstance(outcome.value, str) else f"{outcome.value[0]}: {outcome.value[1]}"
            cls = {"crash": "ExporterCrash", "timeout": "ExporterTimeout"}.get(outcome.kind, "HarnessBug")
            rec = ExportRecord(
                key.case,
                key.exporter,
                key.opset,
                ok=False,
                seconds=outcome.seconds,
                error_class=cls,
                error_line=first_line(detail),
                error=detail,
                versions=settings["versions"],
                cache_key=outcome.task["key"],
            )
            for old in tmp.iterdir():  # what the dead exporter left behind
                old.unlink()
            write_json(tmp / "export.json", rec.to_dict())
        if not _cacheable(rec):
            store.place(tmp, art_dir / key.id)
        else:
            store.commit(outcome.task["key"], key.id, tmp)
            store.link(outcome.task["key"], art_dir / key.id)
        records[key.id] = rec
        mark = "ok" if rec.ok else (rec.error_class or "fail")
        echo(f"export {key.id:<52} {mark:<24} {rec.seconds:6.2f}s")
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
    }
    write_json(out / MANIFEST, manifest)
    store.prune(address.values())
    done = [records[k.id] for k in keys]
    _stamp(out, root, matrix, profile, corpus, cases, registry, done, watched, len(tasks), time.perf_counter() - t0)
    return [records[k.id] for k in keys], list(registry.problems)


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
            "inputs": stamp_settings(matrix, profile, corpus, cases),
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
