"""The native TensorRT backend: TensorRT's own ONNX parser and builder, an engine per artifact.

Runs in worker processes of a runtime environment holding ``tensorrt``, ``pycuda``, numpy and the
harness (the ``tensorrt==X`` runtimes of matrix.toml). For each artifact it

1. parses ``model.onnx`` with ``trt.OnnxParser``; a refusal is ``load-fail`` with error class
   ``ParserError`` and the parser's own words, naming the node and its operator;
2. builds an engine (fp32, or fp16 with ``BuilderFlag.FP16``) with one optimization profile whose
   min/opt/max shape of each dynamic input come from the artifact's probes (:func:`profile_shapes`);
   a failed build is ``load-fail`` (``EngineBuildError``) with the builder's last errors;
3. keeps the serialized engine in the run stage's cache, keyed by the model's hash, the TensorRT
   version, the GPU (name and compute capability), the precision, the workspace and the profile
   (:func:`engine_key`), so a rerun, the latency phase and another probe load it instead of building;
4. runs each probe (inputs copied to the device, ``execute_async_v3``, outputs back) and compares
   with torch's reference outputs exactly as the onnxruntime backend does.

The cell is the same :class:`~harness.records.CellRecord` as every backend's, with
``engine = {build_seconds, bytes, cached, precision, tensorrt, profile}`` and the latency of the
``example`` probe (device buffers bound once: ``copies == "device"``; with ``[latency] iobinding =
false`` each timed run includes the copies: ``"host"``).

Without a GPU (or without tensorrt or pycuda installed) nothing here is imported by the run
stage's workers: :func:`provider_problem` says why, and the column is one ``unavailable`` record.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from harness import cache, localize
from harness.backends.gpu import cpu_model, gpu_model, nvidia_driver_problem
from harness.backends.onnxruntime import reference_outputs, timed
from harness.compare import compare, describe
from harness.matrix import split_column
from harness.records import CellRecord, ExportRecord, Stage, Status, first_line

_TRT: Any = None
_CUDA: Any = None
_CONTEXT: Any = None
_LOGGER: Any = None
"""The worker's one TensorRT logger: TensorRT keeps the first logger a process gives it while any
builder or runtime lives (NVIDIA/TensorRT#1475), so a logger per build would hear nothing."""
_ENGINES: dict[str, Any] = {}
"""Engines deserialized in this worker, by cache key (a probe rerun after a crash comes back to the
same engine); the newest few only, so a long-lived worker does not hold every engine's weights."""
_KEEP_ENGINES = 4

WORKSPACE_MIB = 4096


class ParseError(Exception):
    """TensorRT's ONNX parser refused the model: one line per parser error."""


class BuildError(Exception):
    """The builder returned no engine."""


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return ""


def environment() -> dict[str, str]:
    """What the environment holds, importing neither tensorrt nor pycuda (either may be absent on a
    machine without a GPU: then nothing of it was installed, and the columns say so)."""
    trt = ""
    with contextlib.suppress(Exception):
        import tensorrt

        trt = str(tensorrt.__version__)
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "tensorrt": trt,
        "pycuda": _version("pycuda"),
        "package": "tensorrt",
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "gpu": gpu_model(),
    }


def provider_problem(provider: str) -> str | None:
    """Why the column (``tensorrt``, ``tensorrt-fp16``) cannot run here, in one line; None when a
    builder can be made on GPU 0 (and, for fp16, the GPU has fast FP16)."""
    base, precision = split_column(provider)
    if base != "tensorrt":
        return f"native TensorRT runs the tensorrt columns only, not {provider!r}"
    driver = nvidia_driver_problem()
    try:
        import tensorrt as trt
    except Exception as exc:  # ImportError, or OSError from its libraries
        why = f"TensorRT is not importable ({type(exc).__name__}: {first_line(str(exc))})"
        if driver:
            why += f"; not installed here: {driver}, so its GPU wheels and pycuda were not installed (gpu_requirements)"
        return why
    try:
        import pycuda.driver as cuda
    except Exception as exc:
        return f"pycuda is not importable ({type(exc).__name__}: {first_line(str(exc))})" + (f"; {driver}" if driver else "")
    if driver:
        return f"tensorrt {trt.__version__} imports, but {driver}"
    try:
        cuda.init()
        if cuda.Device.count() == 0:
            return "pycuda sees no CUDA device"
        builder = trt.Builder(trt.Logger(trt.Logger.ERROR))
    except Exception as exc:
        return f"tensorrt {trt.__version__} cannot make a builder on GPU 0: {type(exc).__name__}: {first_line(str(exc))}"
    if precision == "fp16" and not getattr(builder, "platform_has_fast_fp16", True):
        return f"{gpu_model()} has no fast FP16 (TensorRT's platform_has_fast_fp16 is False)"
    return None


def init_worker() -> None:
    """Import tensorrt and pycuda once per worker and make GPU 0's primary context current."""
    global _TRT, _CUDA, _CONTEXT, _LOGGER
    import pycuda.driver as cuda
    import tensorrt

    cuda.init()
    _CONTEXT = cuda.Device(0).retain_primary_context()
    _CONTEXT.push()
    _TRT, _CUDA = tensorrt, cuda
    _LOGGER = _Logger()

    import atexit

    atexit.register(_CONTEXT.pop)


# ---- pure parts (no TensorRT): tested on any machine ----


def probe_shapes(ref: Any, probes: Sequence[str]) -> dict[str, list[tuple[int, ...]]]:
    """Each graph input's shape in every probe, from ``reference.npz`` (``<probe>/in/<name>``)."""
    shapes: dict[str, list[tuple[int, ...]]] = {}
    for probe in probes:
        prefix = f"{probe}/in/"
        for key in ref.files:
            if key.startswith(prefix):
                shapes.setdefault(key[len(prefix) :], []).append(tuple(int(d) for d in ref[key].shape))
    return shapes


def profile_shapes(
    dynamic: Mapping[str, Sequence[int]], shapes: Mapping[str, Sequence[tuple[int, ...]]], opt: Mapping[str, tuple[int, ...]]
) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """The optimization profile: for each input whose network shape has a dynamic dim (``-1`` in
    ``dynamic``), the smallest, the ``opt`` (the ``example`` probe's) and the largest shape the probes
    give it, dim by dim; static dims stay as the network has them.

    Raises:
        ValueError: a dynamic input that no probe gives a value, or probes of different rank.
    """
    out = {}
    for name, dims in dynamic.items():
        if all(d >= 0 for d in dims):
            continue
        seen = list(shapes.get(name, ()))
        if not seen:
            raise ValueError(f"input {name!r} has dynamic dims {list(dims)} but no probe gives it a value")
        if any(len(s) != len(dims) for s in seen):
            ranks = sorted({len(s) for s in seen})
            raise ValueError(f"input {name!r} has rank {len(dims)} in the network but probes give {ranks}")
        lo = tuple(min(s[i] for s in seen) if d < 0 else d for i, d in enumerate(dims))
        hi = tuple(max(s[i] for s in seen) if d < 0 else d for i, d in enumerate(dims))
        mid = tuple(opt.get(name, seen[0]))
        out[name] = (lo, mid, hi)
    return out


def profile_values(
    shape_inputs: Sequence[str], ref: Any, probes: Sequence[str], example: str = "example"
) -> dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
    """For shape-tensor inputs (an int tensor the network uses as a shape or a count), the optimization
    profile is of their values: min/opt/max element by element over the probes, opt the example's.

    Raises:
        ValueError: a shape input no probe gives, or probes giving it different lengths.
    """
    out = {}
    for name in shape_inputs:
        seen = {
            p: tuple(int(v) for v in np.asarray(ref[f"{p}/in/{name}"]).reshape(-1))
            for p in probes
            if f"{p}/in/{name}" in ref.files
        }
        if not seen:
            raise ValueError(f"shape input {name!r} has no value in any probe")
        if len({len(v) for v in seen.values()}) != 1:
            raise ValueError(f"shape input {name!r} has values of different lengths across probes: {sorted(seen.values())}")
        values = list(seen.values())
        lo = tuple(min(v[i] for v in values) for i in range(len(values[0])))
        hi = tuple(max(v[i] for v in values) for i in range(len(values[0])))
        out[name] = (lo, seen.get(example, values[0]), hi)
    return out


def engine_key(
    model_sha256: str | None,
    trt_version: str,
    gpu: str,
    precision: str,
    workspace_mib: int,
    profile: Mapping[str, Any],
) -> str:
    """An engine's content address: the model, the TensorRT version, the GPU, the precision, the
    workspace and the optimization profile. An engine is valid only for the TensorRT and GPU that
    built it; any of the others changes what is built."""
    shapes = {k: [list(s) for s in v] for k, v in sorted(profile.items())}
    return cache.digest("trt-engine", model_sha256, trt_version, gpu, precision, workspace_mib, shapes)[:32]


def parser_errors(parser: Any) -> list[str]:
    """One line per error of a ``trt.OnnxParser``: the node's index, name and operator, and what TensorRT said."""
    lines = []
    for i in range(parser.num_errors):
        err = parser.get_error(i)
        node, name, op = _call(err, "node", -1), _call(err, "node_name", ""), _call(err, "node_operator", "")  # 10.0+
        where = f"node {node}" if node is not None and node >= 0 else "the model"
        if name or op:
            where += f" ({', '.join(p for p in (name, op) if p)})"
        lines.append(f"{where}: {first_line(str(_call(err, 'desc', err)))}")
    return lines


def _call(obj: Any, method: str, default: Any) -> Any:
    """``obj.method()``, or ``default`` where this TensorRT has no such method (node_name came in 10.0)."""
    fn = getattr(obj, method, None)
    if fn is None:
        return default
    try:
        return fn()
    except Exception:
        return default


# ---- TensorRT ----


class _Logger:
    """Collects TensorRT's errors for the cells (it prints to stderr otherwise): one per worker, read
    from the index a build started at."""

    def __new__(cls) -> Any:
        trt = _TRT

        class Logger(trt.ILogger):  # type: ignore[name-defined]
            def __init__(self) -> None:
                trt.ILogger.__init__(self)
                self.errors: list[str] = []

            def log(self, severity: Any, msg: str) -> None:
                if severity <= trt.ILogger.Severity.ERROR:
                    self.errors.append(msg)

        return Logger()


def _workspace(options: Mapping[str, Any]) -> int:
    return int(options.get("workspace_mib", WORKSPACE_MIB))


def _network_inputs(network: Any) -> dict[str, tuple[int, ...]]:
    return {network.get_input(i).name: tuple(network.get_input(i).shape) for i in range(network.num_inputs)}


def load_engine(art: Path, rec: ExportRecord, ref: Any, precision: str, options: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The artifact's engine at ``precision`` (from the cache, else parsed and built) and its record."""
    trt, logger = _TRT, _LOGGER
    since = len(logger.errors)

    def errors(default: str) -> str:
        return " / ".join(dict.fromkeys(logger.errors[since:][-3:])) or default

    builder = trt.Builder(logger)
    flags = 0
    if int(trt.__version__.split(".")[0]) < 10:  # explicit batch is the only mode from TensorRT 10 on
        flags = 1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(art / "model.onnx")):
        raise ParseError("\n".join(parser_errors(parser)) or errors("TensorRT's ONNX parser refused the model without an error"))
    example = probe_shapes(ref, ["example"])
    inputs = [network.get_input(i) for i in range(network.num_inputs)]
    shape_inputs = [t.name for t in inputs if getattr(t, "is_shape_tensor", False)]
    dims = {name: d for name, d in _network_inputs(network).items() if name not in shape_inputs}
    profile = profile_shapes(dims, probe_shapes(ref, rec.probes), {k: v[0] for k, v in example.items()})
    values = profile_values(shape_inputs, ref, rec.probes)
    device = _CUDA.Device(0)
    gpu = f"{device.name()} (sm_{''.join(map(str, device.compute_capability()))})"
    key = engine_key(rec.sha256, trt.__version__, gpu, precision, _workspace(options), {**profile, **values})
    folder = Path(options.get("engine_cache") or art / "engines")
    path = folder / f"{art.name}.{key}.engine"
    info_path = path.with_suffix(".json")
    shapes = {k: [list(s) for s in v] for k, v in profile.items()}
    info: dict[str, Any] = {"precision": precision, "tensorrt": trt.__version__, "gpu": gpu, "profile": shapes}
    if values:
        info["shape_values"] = {k: [list(s) for s in v] for k, v in values.items()}
    blob: bytes | None = None
    if key in _ENGINES:
        return _ENGINES[key], {**(cache.read_json(info_path) or info), "cached": True}
    saved = cache.read_json(info_path) if path.is_file() else None
    if isinstance(saved, dict) and saved.get("sha256") == cache.sha256_file(path):  # whole, as written
        blob, info = path.read_bytes(), {**saved, "cached": True}
    if blob is None:
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, _workspace(options) << 20)
        if precision == "fp16":
            config.set_flag(trt.BuilderFlag.FP16)
        if profile or values:
            prof = builder.create_optimization_profile()
            for name, (lo, mid, hi) in profile.items():
                prof.set_shape(name, lo, mid, hi)
            for name, (lo, mid, hi) in values.items():
                prof.set_shape_input(name, lo, mid, hi)
            config.add_optimization_profile(prof)
        t0 = time.perf_counter()
        serialized = builder.build_serialized_network(network, config)
        seconds = time.perf_counter() - t0
        if serialized is None:
            raise BuildError(errors("build_serialized_network returned None"))
        blob = bytes(serialized)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, path)
        info = {**info, "build_seconds": round(seconds, 3), "bytes": len(blob), "sha256": cache.sha256_file(path)}
        cache.write_json(info_path, info)
        info = {**info, "cached": False}
    engine = trt.Runtime(logger).deserialize_cuda_engine(blob)
    if engine is None:
        raise BuildError(errors("deserialize_cuda_engine returned None"))
    _ENGINES[key] = engine
    while len(_ENGINES) > _KEEP_ENGINES:
        _ENGINES.pop(next(iter(_ENGINES)))
    return engine, info


class _Bound:
    """An execution context with device buffers for one probe's inputs and outputs."""

    def __init__(self, engine: Any, feeds: Mapping[str, np.ndarray], outputs: Sequence[str]) -> None:
        trt, cuda = _TRT, _CUDA
        self.context = engine.create_execution_context()
        self.stream = cuda.Stream()
        self.inputs: list[tuple[Any, np.ndarray]] = []
        self.host_inputs: list[np.ndarray] = []  # shape tensors: TensorRT reads them from the host
        for name, value in feeds.items():
            host = np.asarray(value, dtype=trt.nptype(engine.get_tensor_dtype(name)), order="C")  # 0-d stays 0-d
            if engine.is_shape_inference_io(name):
                self.context.set_tensor_address(name, host.ctypes.data)
                self.host_inputs.append(host)
                continue
            if not self.context.set_input_shape(name, host.shape):
                raise RuntimeError(f"input {name!r}: shape {list(host.shape)} is outside the engine's optimization profile")
            dev = cuda.mem_alloc(max(host.nbytes, 1))
            self.context.set_tensor_address(name, int(dev))
            self.inputs.append((dev, host))
        self.outputs: list[tuple[Any, np.ndarray]] = []
        for name in outputs:
            shape = tuple(self.context.get_tensor_shape(name))
            if any(d < 0 for d in shape):
                raise RuntimeError(
                    f"output {name!r} has a data-dependent shape {list(shape)}: this backend allocates outputs before the run"
                )
            host = np.empty(shape, dtype=trt.nptype(engine.get_tensor_dtype(name)))
            dev = cuda.mem_alloc(max(host.nbytes, 1))
            self.context.set_tensor_address(name, int(dev))
            self.outputs.append((dev, host))

    def copy_in(self) -> None:
        for dev, host in self.inputs:
            _CUDA.memcpy_htod_async(dev, host, self.stream)

    def execute(self) -> None:
        if not self.context.execute_async_v3(self.stream.handle):
            raise RuntimeError("execute_async_v3 returned False")

    def copy_out(self) -> list[np.ndarray]:
        for dev, host in self.outputs:
            _CUDA.memcpy_dtoh_async(host, dev, self.stream)
        self.stream.synchronize()
        return [host.copy() for _, host in self.outputs]

    def run(self) -> list[np.ndarray]:
        self.copy_in()
        self.execute()
        return self.copy_out()


def _io(engine: Any) -> tuple[list[str], list[str]]:
    trt = _TRT
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
    return inputs, [n for n in names if n not in inputs]


def _feeds(ref: Any, probe: str, inputs: Sequence[str]) -> dict[str, np.ndarray]:
    prefix = f"{probe}/in/"
    given = {k[len(prefix) :]: ref[k] for k in ref.files if k.startswith(prefix)}
    missing = [n for n in inputs if n not in given]
    if missing:
        raise KeyError(f"engine input(s) {', '.join(missing)} have no value in probe {probe!r} (probe has {sorted(given)})")
    return {n: given[n] for n in inputs}


def _graph_outputs(rec: ExportRecord, engine_outputs: Sequence[str]) -> list[str]:
    """The engine's outputs in the ONNX graph's order (the order of torch's outputs)."""
    order = [o["name"] for o in rec.graph.get("outputs", [])]
    return sorted(engine_outputs, key=lambda n: order.index(n) if n in order else len(order))


def _failed(cell: CellRecord, exc: BaseException, started: float, status: Status, error_class: str | None = None) -> CellRecord:
    msg = str(exc)
    return cell.replace(
        status=status,
        error_class=error_class or type(exc).__name__,
        error_line=first_line(msg),
        error=msg[:20000],
        seconds=time.perf_counter() - started,
    )


def run_artifact(task: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Worker entry (a generator), as the onnxruntime backend's: ``loaded`` once the engine exists,
    then a cell per probe. A mismatch is localized to the first output that differs (node-by-node
    comparison needs every node's value, which an engine does not expose)."""
    art = Path(task["dir"])
    rec = ExportRecord.from_dict(json.loads((art / "export.json").read_text()))
    column = task["provider"]
    _, precision = split_column(column)
    probes = [p for p in rec.probes if p in task.get("probes", rec.probes)]
    base = rec.cell(task["runtime"], column, task["env"], stage=Stage.LOAD, providers_used=("TensorRT",))
    ref = np.load(art / "reference.npz")
    t0 = time.perf_counter()
    try:
        engine, info = load_engine(art, rec, ref, precision, task.get("options") or {})
    except Exception as exc:
        error_class = {ParseError: "ParserError", BuildError: "EngineBuildError"}.get(type(exc))
        for cell in rec.each_probe(base, probes):
            yield {"cell": _failed(cell, exc, t0, Status.LOAD_FAIL, error_class).to_dict()}
        return
    base = base.replace(engine=info)
    yield {"event": "loaded", "seconds": time.perf_counter() - t0}
    inputs, outputs = _io(engine)
    outputs = _graph_outputs(rec, outputs)
    inference = 0.0
    for probe in probes:
        t1 = time.perf_counter()
        cell = base.replace(probe=probe, stage=Stage.RUN)
        try:
            bound = _Bound(engine, _feeds(ref, probe, inputs), outputs)
            t_run = time.perf_counter()
            outs = bound.run()
            inference += time.perf_counter() - t_run
        except Exception as exc:
            yield {"cell": _failed(cell, exc, t1, Status.RUN_FAIL).to_dict()}
            continue
        want = reference_outputs(ref, probe)
        ok, stats = compare(want, outs, **rec.tolerance)
        cell = cell.replace(stage=Stage.COMPARE, diff=stats, seconds=time.perf_counter() - t1)
        if not ok:
            line = describe(stats)
            nodes_path = art / localize.NODES
            nodes = json.loads(nodes_path.read_text()) if nodes_path.exists() else []
            found = localize.first_output_mismatch(nodes, outputs, outs, want, **rec.tolerance)
            cell = cell.replace(
                status=Status.MISMATCH,
                error_class="Mismatch",
                error_line=line,
                error=line,
                localization=found or "every output is within tolerance on its own",
            )
        yield {"cell": cell.to_dict()}
    yield {"event": "timing", "inference": inference, "localize": 0.0}


def measure_latency(task: dict[str, Any]) -> dict[str, Any]:
    """Worker entry: serial latency of the ``example`` probe on the artifact's engine (from the cache)."""

    art = Path(task["dir"])
    lat = task["latency"]
    rec = ExportRecord.from_dict(json.loads((art / "export.json").read_text()))
    ref = np.load(art / "reference.npz")
    t0 = time.perf_counter()
    engine, _ = load_engine(art, rec, ref, split_column(task["provider"])[1], task.get("options") or {})
    inputs, outputs = _io(engine)
    bound = _Bound(engine, _feeds(ref, "example", inputs), _graph_outputs(rec, outputs))
    session_ms = (time.perf_counter() - t0) * 1e3
    device = bool(lat.get("iobinding", True))
    call: Callable[[], Any]
    if device:  # inputs on the device once; each timed run is the engine alone, synchronized
        bound.copy_in()

        def call() -> Any:
            bound.execute()
            bound.stream.synchronize()

    else:
        call = bound.run
    return timed(None, {}, lat, session_ms, "device" if device else "host", call)
