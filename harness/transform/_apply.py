"""One transformed artifact, in a worker of the transform stage: the export's fp32 file through one transform
(:mod:`harness.config.transforms`), then the specification's answer on the new file, probe by probe, and the files
a mismatch is localized with.

What it writes in the destination folder, as the export writes an artifact's:

- ``model.onnx``: the transformed file (weights inside it);
- ``reference.npz``: the probes' inputs (the export's) and, as the outputs a cell is compared with, the ONNX reference
  evaluator's on this file (:mod:`harness.transform.reference`); a probe it cannot answer is a ``probe_errors`` entry
  (its cells ``skipped``, the reason said), never compared with anything else;
- ``fp32.npz``: torch's fp32 outputs, per probe (the drift is measured from them);
- the localization files (:func:`harness.export.node_values.prepare`: the reference runtime's value of every node on
  this file);
- ``export.json``: the source's record with this file's facts, its tolerance (the transform's) and the transform
  (tool, pinned version, settings, the source's digest).

Runs in the transform environment (onnx, the reference onnxruntime and its quantizer, the float16 converter; no torch).
"""

from __future__ import annotations

import importlib.metadata
import logging
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from harness.config import transforms
from harness.core.records import ExportRecord, Outcome, first_line
from harness.store import cache, layout

NOT_APPLICABLE = Outcome.SKIPPED.error_class or "Skipped"
"""The ``error_class`` of a transform that finds nothing to rewrite in a file: its cells are ``skipped``, the line says
why."""


def warm() -> None:
    """A worker imports the tools once."""
    import onnx.reference  # noqa: F401
    import onnxruntime.quantization
    import onnxruntime.quantization.matmul_nbits_quantizer  # noqa: F401

    # The quantizer's advice and progress go to the root logger and to loggers of its own, artifact after artifact.
    logging.getLogger().setLevel(logging.ERROR)
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("onnxruntime"):
            logging.getLogger(name).setLevel(logging.ERROR)


def versions() -> dict[str, str]:
    """The versions of the tools this environment holds (recorded on every artifact it makes)."""
    found = {}
    for name in ("onnx", "onnxruntime", "onnxconverter-common", "onnx-ir", "ml-dtypes", "numpy"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "missing"
    return found


def apply(task: tuple[str, str, str, float, int | None, str]) -> dict[str, Any]:
    """``(source folder, destination folder, transform, reference timeout, intermediates budget, reference pin)`` →
    the transformed artifact's record (as a dict), every file written.

    (Over 60 lines, on purpose: the files in the order each needs the one before — the transformed model, the spec's
    answer on it, the references, the localization files, then the record that hashes them all.)"""
    src, dest, name, timeout, budget, reference_pin = Path(task[0]), Path(task[1]), task[2], task[3], task[4], task[5]
    t = transforms.get(name)
    rec = layout.read_record(src)
    tools = versions()
    t0 = time.perf_counter()
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    made = dict(t.record(tools[t.package]), source=rec.digest)
    base = _base(rec, t, made, tools)
    try:
        model, before = _transform(t, src, rec)
    except Exception as exc:  # the tool's own failure on this file: the transformed artifact's verdict
        line = f"{t.tool} failed on this file: {type(exc).__name__}: {first_line(str(exc), 300)}"
        return _failed(dest, base, type(exc).__name__, line, t0)  # its cells: export-fail, the tool's words
    if model is None:
        why = f"{name}: nothing to transform (no {', '.join(t.ops)} with constant weights): the file stays fp32"
        return _failed(dest, base, NOT_APPLICABLE, why, t0)
    import onnx

    onnx.save(model, str(dest / layout.MODEL))
    answers, errors = _spec_answers(model, src, rec)
    if not answers:  # nothing to compare any probe with: its cells are skipped, with the evaluator's words
        why = f"{name}: no probe has the specification's answer: {next(iter(errors.values()), 'no probe ran')}"
        return _failed(dest, base, NOT_APPLICABLE, why, t0)
    with np.load(src / layout.REFERENCE) as ref:
        arrays = {k: ref[k] for k in ref.files if "/in/" in k}
        fp32 = {k: ref[k] for k in ref.files if "/in/" not in k}
    for probe, outs in answers.items():
        arrays.update({layout.output_key(probe, i): o for i, o in enumerate(outs)})
    np.savez(dest / layout.REFERENCE, **arrays)
    np.savez(dest / layout.FP32, **fp32)
    made["fp32_sha256"] = cache.sha256_file(dest / layout.FP32)
    made["reference"] = "the ONNX reference evaluator (onnx " + tools["onnx"] + ") on this file"
    made["ops_before"] = before
    probe_errors = {**rec.probe_errors, **errors}
    from harness.export import node_values

    tol = {"atol": base["atol"], "rtol": base["rtol"], "scaled": base["scaled"]}
    ran: dict[str, dict[str, Any]] = {p: {} for p in rec.probes if p not in probe_errors}
    t1 = time.perf_counter()
    try:
        info = node_values.prepare(dest, ran, **tol, outputs=rec.output_tolerance, timeout=timeout, budget=budget)
        reference_runtime = reference_pin if info.get("error") is None else f"failed: {reference_pin}: {info['error']}"
        if info.get("intermediates") == "recorded" and _spec_values(dest, model, ran, tools["onnx"]):
            reference_runtime = f"the ONNX reference evaluator (onnx {tools['onnx']})"
    except Exception as exc:  # localization data is a help, never the verdict: the artifact stands without it
        reference_runtime = f"failed: {reference_pin}: {type(exc).__name__}: {first_line(str(exc))}"
    localized = all((dest / n).exists() for n in layout.LOCALIZATION_FILES)
    graph = _graph(model)
    record = {
        **base,
        "ok": True,
        "probe_errors": probe_errors,
        "probes": [p for p in rec.probes if p in answers],  # a probe the specification cannot answer has no cells
        "sha256": cache.sha256_file(dest / layout.MODEL),
        "data_sha256": None,
        "reference_sha256": cache.sha256_file(dest / layout.REFERENCE),
        "intermediates_sha256": layout.localization_sha256(dest) if localized else None,
        "reference_runtime": reference_runtime,
        "ir_version": model.ir_version,
        "opset_actual": next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), rec.opset_actual),
        "checker": _checker(dest),
        "graph": graph,
        "transform": made,
        "seconds": round(time.perf_counter() - t0, 4),
        "timing": {"transform": round(t1 - t0, 4), "reference": round(time.perf_counter() - t1, 4)},
    }
    return _write(dest, record)


def _base(rec: ExportRecord, t: transforms.Transform, made: dict[str, Any], tools: dict[str, str]) -> dict[str, Any]:
    """The source's record as the transformed artifact's starting point: its tolerance the transform's (never looser
    than the case's own scaled bound), its versions with the tools'."""
    data = rec.to_dict()
    data.update(
        scaled=max(t.scaled, rec.scaled or 0.0),
        output_tolerance={
            k: {**v, "scaled": max(t.scaled, float(v.get("scaled") or 0.0))} for k, v in rec.output_tolerance.items()
        },
        versions={**rec.versions, **{f"transform:{k}": v for k, v in tools.items()}},
        transform=made,
        cache_key=None,
        peak_rss_mib=None,
        warnings=[],
    )
    return data


def _failed(dest: Path, base: dict[str, Any], error_class: str, line: str, t0: float) -> dict[str, Any]:
    for name in list(dest.iterdir()):
        if name.is_file():
            name.unlink()
    record = {
        **base,
        "ok": False,
        "error_class": error_class,
        "error_line": line,
        "error": line,
        "sha256": None,
        "data_sha256": None,
        "reference_sha256": None,
        "intermediates_sha256": None,
        "seconds": round(time.perf_counter() - t0, 4),
    }
    return _write(dest, record)


def _write(dest: Path, record: dict[str, Any]) -> dict[str, Any]:
    rec = ExportRecord.from_dict(record)
    cache.write_json(dest / layout.RECORD, rec.to_dict())
    return rec.to_dict()


def _ops(model: Any) -> dict[str, int]:
    found: dict[str, int] = {}
    for node in model.graph.node:
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        found[key] = found.get(key, 0) + 1
    return dict(sorted(found.items()))


def _graph(model: Any) -> dict[str, Any]:
    return {
        "nodes": len(model.graph.node),
        "initializers": len(model.graph.initializer),
        "ops": _ops(model),
        "constants": sum(1 for n in model.graph.node if n.op_type == "Constant"),
        "functions": len(model.functions),
    }


def _checker(dest: Path) -> str:
    import onnx

    try:
        onnx.checker.check_model(str(dest / layout.MODEL), full_check=True)  # strict shape inference, as the spec stage
        return "ok"
    except Exception as exc:  # the checker's verdict is its answer
        return first_line(str(exc)) or type(exc).__name__


def _transform(t: transforms.Transform, src: Path, rec: ExportRecord) -> tuple[Any, dict[str, int]]:
    """The transformed model (None: nothing in it for ``t``) and the source's op histogram."""
    import onnx

    source = onnx.load(str(src / layout.MODEL))
    before = _ops(source)
    weights = {i.name for i in source.graph.initializer}
    constants = {o for n in source.graph.node if n.op_type == "Constant" for o in n.output}
    if t.ops and not any(
        n.op_type in t.ops and any(i in weights or i in constants for i in n.input) for n in source.graph.node
    ):
        return None, before
    with tempfile.TemporaryDirectory(prefix="transform-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dst = Path(tmp) / "model.onnx"
        if t.name == "int8-dynamic":
            from onnxruntime.quantization import QuantType, quantize_dynamic

            quantize_dynamic(
                str(src / layout.MODEL), str(dst), weight_type=QuantType.QInt8, per_channel=False, reduce_range=False
            )
            model = onnx.load(str(dst))
        elif t.name.startswith("int8-qdq"):
            from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

            activation = QuantType.QUInt8 if t.settings["activation_type"] == "QUInt8" else QuantType.QInt8
            quantize_static(
                str(src / layout.MODEL),
                str(dst),
                _Calibration(src, rec, source),
                quant_format=QuantFormat.QDQ,
                activation_type=activation,
                weight_type=QuantType.QInt8,
                per_channel=True,
                reduce_range=False,
                calibrate_method=CalibrationMethod.MinMax,
            )
            model = onnx.load(str(dst))
        elif t.name.startswith("int4"):
            from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

            config = DefaultWeightOnlyQuantConfig(
                block_size=t.settings["block_size"], is_symmetric=t.settings["is_symmetric"],
                accuracy_level=t.settings["accuracy_level"],
            )  # fmt: skip
            quantizer = MatMulNBitsQuantizer(source, algo_config=config)
            quantizer.process()
            model = quantizer.model.model
        elif t.name == "fp16":
            from onnxconverter_common import float16

            model = float16.convert_float_to_float16(source, keep_io_types=True)
        else:  # the catalog names a transform this stage does not know: a harness bug, said as one
            raise RuntimeError(f"no implementation of transform {t.name!r}")
    if _ops(model) == before and all(
        a.data_type == b.data_type for a, b in zip(model.graph.initializer, source.graph.initializer, strict=False)
    ) and len(model.graph.initializer) == len(source.graph.initializer):
        return None, before
    return model, before


class _Calibration:
    """quantize_static's calibration data: the case's own inputs, every probe torch ran (a user's ``probe_files``
    among them), in the record's order."""

    def __init__(self, src: Path, rec: ExportRecord, model: Any) -> None:
        takes = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
        with np.load(src / layout.REFERENCE) as ref:
            self.feeds = [
                {n: ref[layout.input_key(p, n)] for n in takes if layout.input_key(p, n) in ref.files}
                for p in rec.probes
                if p not in rec.probe_errors
            ]
        self.feeds = [f for f in self.feeds if len(f) == len(takes)]
        self.left = iter(self.feeds)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self.left, None)

    def rewind(self) -> None:
        self.left = iter(self.feeds)


def _spec_answers(model: Any, src: Path, rec: ExportRecord) -> tuple[dict[str, list[np.ndarray]], dict[str, str]]:
    """The reference evaluator's outputs on ``model`` per probe torch ran; the probes it cannot answer, and why."""
    from harness.transform import reference

    errors: dict[str, str] = {}
    answers: dict[str, list[np.ndarray]] = {}
    probes = [p for p in rec.probes if p not in rec.probe_errors]
    try:
        session = reference.evaluator(model)
    except Exception as exc:  # an op neither the evaluator nor harness.transform.reference answers for
        said = f"{type(exc).__name__}: {first_line(str(exc), 200)}"
        why = f"the ONNX specification's answer cannot be computed (reference evaluator: {said})"
        return {}, dict.fromkeys(probes, why)
    takes = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    declared = [o.type.tensor_type.elem_type for o in model.graph.output]
    with np.load(src / layout.REFERENCE) as ref:
        for probe in probes:
            feeds = {n: ref[layout.input_key(probe, n)] for n in takes if layout.input_key(probe, n) in ref.files}
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    outs = [np.asarray(o) for o in session.run(None, feeds)]
            except Exception as exc:  # the evaluator's own failure: no answer, never another opinion in its place
                errors[probe] = f"the reference evaluator cannot run it: {type(exc).__name__}: {first_line(str(exc), 200)}"
                continue
            wrong = _wrong_type(outs, declared)
            if wrong is not None:
                errors[probe] = wrong
                continue
            answers[probe] = outs
    return answers, errors


def _spec_values(dest: Path, model: Any, probes: dict[str, Any], onnx_version: str) -> bool:
    """Replace the reference runtime's node values (``intermediates.npz``) with the specification's, probe by probe
    (the reference evaluator's value of every node output the debug model exposes), so that a mismatching cell is
    localized at the first node where the runtime departs from the specification on this file; the localization
    file then says the reference agrees with itself, and what the reference runtime said is kept beside
    (``runtime_reference``). False, leaving the runtime's values, where the evaluator cannot give every probe's."""
    import json

    from harness.numeric.localize import IntermediatesWriter
    from harness.transform import reference

    nodes = json.loads((dest / layout.NODES).read_text(encoding="utf-8"))
    names = [o for n in nodes for o in n["outputs"]]
    takes = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    try:
        session = reference.evaluator(model)
        writer = IntermediatesWriter(dest / (layout.INTERMEDIATES + ".spec"))
        with np.load(dest / layout.REFERENCE) as ref:
            for probe in probes:
                feeds = {n: ref[layout.input_key(probe, n)] for n in takes}
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    values = session.run(None, feeds, intermediate=True)
                writer.add(probe, {n: values[n] for n in names if n in values})
        writer.close()
    except Exception:  # the evaluator's own failure: the reference runtime's values stay
        (dest / (layout.INTERMEDIATES + ".spec.tmp.npz")).unlink(missing_ok=True)
        return False
    (dest / (layout.INTERMEDIATES + ".spec")).replace(dest / layout.INTERMEDIATES)
    loc = json.loads((dest / layout.LOCALIZATION).read_text(encoding="utf-8"))
    loc["runtime_reference"] = {p: v for p, v in loc.get("probes", {}).items()}
    loc["probes"] = {p: {"reference": "ok"} for p in probes}
    loc["values"] = f"the ONNX reference evaluator (onnx {onnx_version}) on this file"
    (dest / layout.LOCALIZATION).write_text(json.dumps(loc, indent=1, default=str) + "\n", encoding="utf-8")
    return True


def _wrong_type(outs: list[np.ndarray], declared: list[int]) -> str | None:
    from onnx import helper

    for i, (out, elem) in enumerate(zip(outs, declared, strict=False)):
        if not elem:
            continue
        want = np.dtype(helper.tensor_dtype_to_np_dtype(elem))
        if out.dtype != want:
            return f"the reference evaluator returns {out.dtype} for output {i}, which the file declares {want}"
    return None
