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
4. runs each probe (inputs copied to the device, ``execute_async_v3``, outputs back); the verdict,
   like every backend's, is the shared probe loop's (:mod:`harness.run.backends.loop`).

The cell is the same :class:`~harness.core.records.CellRecord` as every backend's, with
``engine = {build_seconds, bytes, cached, precision, tensorrt, profile}`` and the latency of the
``example`` probe (device buffers bound once: ``copies == "device"``; with ``[latency] iobinding =
false`` each timed run includes the copies: ``"host"``).

Without a GPU (or without tensorrt or pycuda installed) nothing here is imported by the run
stage's workers: :meth:`TensorRT.problem` says why, and the column is one ``unavailable`` record.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np

from harness.config import runtimes
from harness.core.records import ExportRecord, first_line
from harness.run.backends.contract import Backend
from harness.run.backends.gpu import cpu_model, gpu_model, nvidia_driver_problem
from harness.store import cache, layout

WORKSPACE_MIB = 4096
KEEP_ENGINES = 4
"""Engines a worker keeps deserialized (a probe rerun after a crash comes back to the same engine); the
newest few only, so a long-lived worker does not hold every engine's weights."""


class ParserError(Exception):
    """TensorRT's ONNX parser refused the model: one line per parser error."""


class EngineBuildError(Exception):
    """The builder returned no engine."""


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return ""


class TensorRT(Backend):
    """Native TensorRT: the ``tensorrt`` and ``tensorrt-fp16`` columns of a ``tensorrt==X`` runtime."""

    def __init__(self) -> None:
        self.trt: Any = None
        self.cuda: Any = None
        self.logger: Any = None
        """The worker's one TensorRT logger: TensorRT keeps the first logger a process gives it while any
        builder or runtime lives (NVIDIA/TensorRT#1475), so a logger per build would hear nothing."""
        self.engines: dict[str, Any] = {}

    def environment(self) -> dict[str, str]:
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

    def problem(self, column: str) -> str | None:
        """Why the column (``tensorrt``, ``tensorrt-fp16``) cannot run here, in one line; None when a
        builder can be made on GPU 0 (and, for fp16, the GPU has fast FP16)."""
        base, precision = runtimes.split_column(column)
        if base != "tensorrt":
            return f"native TensorRT runs the tensorrt columns only, not {column!r}"
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

    def init_worker(self) -> None:
        """Import tensorrt and pycuda once per worker and make GPU 0's primary context current."""
        import atexit

        import pycuda.driver as cuda
        import tensorrt

        cuda.init()
        context = cuda.Device(0).retain_primary_context()
        context.push()
        atexit.register(context.pop)
        self.trt, self.cuda = tensorrt, cuda
        self.logger = _logger(tensorrt)

    def describe_error(self, message: str) -> str:
        return first_line(message)  # the parser's errors are a line each: the first names the first node

    def load(
        self, art: Path, rec: ExportRecord, ref: Any, column: str, options: Mapping[str, Any], threads: int, *, placement: bool
    ) -> EngineSession:
        engine, info = self.engine(art, rec, ref, runtimes.split_column(column)[1], options)
        inputs, outputs = _io(self.trt, engine)
        return EngineSession(self, engine, info, inputs, _graph_outputs(rec, outputs))

    def engine(
        self, art: Path, rec: ExportRecord, ref: Any, precision: str, options: Mapping[str, Any]
    ) -> tuple[Any, dict[str, Any]]:
        """The artifact's engine at ``precision`` (deserialized here already, from the cache, else parsed and
        built) and its record."""
        since = len(self.logger.errors)
        builder = self.trt.Builder(self.logger)
        network, _parser = self._parse(builder, art, since)  # the parser owns what the network refers to: keep it
        plan = _Plan(self, network, rec, ref, precision, options, art)
        if plan.key in self.engines:
            return self.engines[plan.key], {**(cache.read_json(plan.info_path) or plan.info), "cached": True}
        blob, info = plan.cached()
        if blob is None:
            blob, info = plan.build(builder, network, self._errors(since))
        engine = self.trt.Runtime(self.logger).deserialize_cuda_engine(blob)
        if engine is None:
            raise EngineBuildError(self._errors(since)("deserialize_cuda_engine returned None"))
        self.engines[plan.key] = engine
        while len(self.engines) > KEEP_ENGINES:
            self.engines.pop(next(iter(self.engines)))
        return engine, info

    def _parse(self, builder: Any, art: Path, since: int) -> tuple[Any, Any]:
        flags = 0
        if int(self.trt.__version__.split(".")[0]) < 10:  # explicit batch is the only mode from TensorRT 10 on
            flags = 1 << int(self.trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH)
        network = builder.create_network(flags)
        parser = self.trt.OnnxParser(network, self.logger)
        if not parser.parse_from_file(str(art / layout.MODEL)):
            default = "TensorRT's ONNX parser refused the model without an error"
            raise ParserError("\n".join(parser_errors(parser)) or self._errors(since)(default))
        return network, parser

    def _errors(self, since: int) -> Callable[[str], str]:
        """What the logger heard since ``since`` (the last three errors), or a default."""
        return lambda default: " / ".join(dict.fromkeys(self.logger.errors[since:][-3:])) or default


class _Plan:
    """An engine to have: its optimization profile from the probes, its content address, its files."""

    def __init__(
        self, be: TensorRT, network: Any, rec: ExportRecord, ref: Any, precision: str, options: Mapping[str, Any], art: Path
    ) -> None:
        trt = be.trt
        example = probe_shapes(ref, ["example"])
        inputs = [network.get_input(i) for i in range(network.num_inputs)]
        shape_inputs = [t.name for t in inputs if getattr(t, "is_shape_tensor", False)]
        dims = {t.name: tuple(t.shape) for t in inputs if t.name not in shape_inputs}
        self.profile = profile_shapes(dims, probe_shapes(ref, rec.probes), {k: v[0] for k, v in example.items()})
        self.values = profile_values(shape_inputs, ref, rec.probes)
        device = be.cuda.Device(0)
        gpu = f"{device.name()} (sm_{''.join(map(str, device.compute_capability()))})"
        self.trt, self.precision = trt, precision
        self.workspace = int(options.get("workspace_mib", WORKSPACE_MIB))
        self.key = engine_key(rec.sha256, trt.__version__, gpu, precision, self.workspace, {**self.profile, **self.values})
        self.path = Path(options.get("engine_cache") or art / "engines") / f"{art.name}.{self.key}.engine"
        self.info_path = self.path.with_suffix(".json")
        shapes = {k: [list(s) for s in v] for k, v in self.profile.items()}
        self.info: dict[str, Any] = {"precision": precision, "tensorrt": trt.__version__, "gpu": gpu, "profile": shapes}
        if self.values:
            self.info["shape_values"] = {k: [list(s) for s in v] for k, v in self.values.items()}

    def cached(self) -> tuple[bytes | None, dict[str, Any]]:
        """The serialized engine from the cache, whole as written, or None."""
        saved = cache.read_json(self.info_path) if self.path.is_file() else None
        if isinstance(saved, dict) and saved.get("sha256") == cache.sha256_file(self.path):
            return self.path.read_bytes(), {**saved, "cached": True}
        return None, self.info

    def build(self, builder: Any, network: Any, errors: Callable[[str], str]) -> tuple[bytes, dict[str, Any]]:
        """Build the engine (fp16 with ``BuilderFlag.FP16``, the optimization profile of the probes) into the cache."""
        trt = self.trt
        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, self.workspace << 20)
        if self.precision == "fp16":
            config.set_flag(trt.BuilderFlag.FP16)
        if self.profile or self.values:
            prof = builder.create_optimization_profile()
            for name, (lo, mid, hi) in self.profile.items():
                prof.set_shape(name, lo, mid, hi)
            for name, (lo, mid, hi) in self.values.items():
                prof.set_shape_input(name, lo, mid, hi)
            config.add_optimization_profile(prof)
        t0 = time.perf_counter()
        serialized = builder.build_serialized_network(network, config)
        seconds = time.perf_counter() - t0
        if serialized is None:
            raise EngineBuildError(errors("build_serialized_network returned None"))
        blob = bytes(serialized)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, self.path)
        info = {**self.info, "build_seconds": round(seconds, 3), "bytes": len(blob), "sha256": cache.sha256_file(self.path)}
        cache.write_json(self.info_path, info)
        return blob, {**info, "cached": False}


class EngineSession:
    """An engine under the contract's :class:`~harness.run.backends.contract.Session`; the engine's record rides
    on every cell (:attr:`~harness.core.records.CellRecord.engine`)."""

    providers_used = ("TensorRT",)

    def __init__(self, be: TensorRT, engine: Any, info: dict[str, Any], inputs: list[str], outputs: list[str]) -> None:
        self.be, self.engine = be, engine
        self.facts = {"engine": info}
        self._inputs, self._outputs = inputs, outputs

    def inputs(self) -> list[str]:
        return list(self._inputs)

    def outputs(self) -> list[str]:
        return list(self._outputs)

    def bind(self, feeds: Mapping[str, np.ndarray]) -> _Bound:
        return _Bound(self.be.trt, self.be.cuda, self.engine, feeds, self._outputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Inputs copied to the device, ``execute_async_v3``, outputs back."""
        return self.bind(feeds).run()

    def placement(self) -> dict[str, int]:
        return {}

    def timed_call(self, feeds: Mapping[str, np.ndarray], device: str) -> Callable[[], Any]:
        """With ``device``, inputs on the device once and each timed run the engine alone, synchronized;
        else each run copies in and out."""
        bound = self.bind(feeds)
        if not device:
            return bound.run
        bound.copy_in()

        def call() -> Any:
            bound.execute()
            bound.stream.synchronize()

        return call


# ---- pure parts (no TensorRT): tested on any machine ----


def probe_shapes(ref: Any, probes: Sequence[str]) -> dict[str, list[tuple[int, ...]]]:
    """Each graph input's shape in every probe, from ``reference.npz`` (``<probe>/in/<name>``)."""
    shapes: dict[str, list[tuple[int, ...]]] = {}
    for probe in probes:
        for name, value in layout.probe_inputs(ref, probe).items():
            shapes.setdefault(name, []).append(tuple(int(d) for d in value.shape))
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
            p: tuple(int(v) for v in np.asarray(ref[layout.input_key(p, name)]).reshape(-1))
            for p in probes
            if layout.input_key(p, name) in ref.files
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


def _logger(trt: Any) -> Any:
    """A logger that collects TensorRT's errors for the cells (it prints to stderr otherwise): one per
    worker, read from the index a build started at."""

    class Logger(trt.ILogger):
        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, severity: Any, msg: str) -> None:
            if severity <= trt.ILogger.Severity.ERROR:
                self.errors.append(msg)

    return Logger()


class _Bound:
    """An execution context with device buffers for one probe's inputs and outputs."""

    def __init__(self, trt: Any, cuda: Any, engine: Any, feeds: Mapping[str, np.ndarray], outputs: Sequence[str]) -> None:
        self.cuda = cuda
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
            self.cuda.memcpy_htod_async(dev, host, self.stream)

    def execute(self) -> None:
        if not self.context.execute_async_v3(self.stream.handle):
            raise RuntimeError("execute_async_v3 returned False")

    def copy_out(self) -> list[np.ndarray]:
        for dev, host in self.outputs:
            self.cuda.memcpy_dtoh_async(host, dev, self.stream)
        self.stream.synchronize()
        return [host.copy() for _, host in self.outputs]

    def run(self) -> list[np.ndarray]:
        self.copy_in()
        self.execute()
        return self.copy_out()


def _io(trt: Any, engine: Any) -> tuple[list[str], list[str]]:
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    inputs = [n for n in names if engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
    return inputs, [n for n in names if n not in inputs]


def _graph_outputs(rec: ExportRecord, engine_outputs: Sequence[str]) -> list[str]:
    """The engine's outputs in the ONNX graph's order (the order of torch's outputs)."""
    order = [o["name"] for o in rec.graph.get("outputs", [])]
    return sorted(engine_outputs, key=lambda n: order.index(n) if n in order else len(order))
