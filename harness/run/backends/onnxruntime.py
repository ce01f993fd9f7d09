"""The onnxruntime backend: every onnxruntime package and execution provider of the registry.

It runs inside worker processes of a runtime environment that holds one pinned onnxruntime package
(``onnxruntime``, ``onnxruntime-gpu``, ...), numpy and the harness, and nothing else. What differs from
one execution provider to the next (its name, its library, its device, the options a session gives it,
the providers it hands refused nodes to, where IOBinding keeps a timed run's tensors) is data in
:mod:`harness.config.runtimes`; the probe loop, the verdicts and the latency protocol are
:mod:`harness.run.backends.loop`'s.

Beyond the contract it localizes a mismatch (:meth:`OnnxRuntime.localize`): the probe again with graph
optimizations off, and every node's value against the reference runtime's.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import multiprocessing.util
import os
import platform
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from harness.config import runtimes
from harness.core.records import CellRecord, ExportRecord, error_line
from harness.numeric import localize
from harness.numeric.compare import compare
from harness.run.backends.contract import Backend
from harness.run.backends.gpu import cpu_model, gpu_model, nvidia_driver_problem
from harness.run.backends.messages import CellTask, ReferenceSource
from harness.store import layout
from harness.store.cache import digest, sha256_file


class OnnxRuntime(Backend):
    """An onnxruntime package on one of its execution providers."""

    localizes = True

    def __init__(self) -> None:
        self.ort: Any = None

    def init_worker(self) -> None:
        """Import onnxruntime once per worker and quiet its logger."""
        import onnxruntime

        onnxruntime.set_default_logger_severity(3)
        self.ort = onnxruntime

    def environment(self) -> dict[str, str]:
        """The runtime environment as it really is (printed by ``harness env``)."""
        import onnxruntime

        return {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "onnxruntime": onnxruntime.__version__,
            "package": _package(),
            "available_providers": ",".join(onnxruntime.get_available_providers()),
            "platform": platform.platform(),
            "cpu": cpu_model(),
            "gpu": gpu_model(),
            **_gpu_libraries(),
        }

    def problem(self, column: str) -> str | None:
        """Why ``column`` cannot run in this environment, in one line; None when nothing stops it.

        onnxruntime-gpu lists CUDA and TensorRT as available on any machine and then, when their libraries
        do not load, quietly runs the session on the CPU. So a listed provider must also load: its shared
        library is loaded here the way onnxruntime loads it (the loader's own message names the missing
        CUDA, cuDNN or TensorRT library), and a provider of an NVIDIA device needs the driver to initialise
        and show a device.
        """
        import onnxruntime as ort

        p = runtimes.provider(column)
        who = f"{_package()} {ort.__version__}"
        available = ort.get_available_providers()
        if p.ep not in available:
            return f"{p.ep} is not available in {who}; available: {', '.join(available)}"
        if not p.library:
            return None
        capi = Path(ort.__file__).parent / "capi"
        path = capi / f"libonnxruntime_providers_{p.library}.so"
        if not path.exists():
            return f"{p.ep} is listed by {who} but {path.name} is not in {capi}"
        with contextlib.suppress(OSError):  # onnxruntime loads the bridge library first, globally
            ctypes.CDLL(str(capi / "libonnxruntime_providers_shared.so"), mode=ctypes.RTLD_GLOBAL)
        driver = nvidia_driver_problem() if p.nvidia else None
        try:
            ctypes.CDLL(str(path))
        except OSError as exc:
            reason = str(exc).replace(f"{path}: ", "")
            return f"{p.ep} is listed by {who} but cannot load: {reason}" + (f"; {driver}" if driver else "")
        if driver:
            return f"{p.ep} is listed by {who} and its libraries load, but {driver}"
        return None

    def load(
        self, art: Path, rec: ExportRecord, ref: Any, column: str, options: Mapping[str, Any], threads: int, *, placement: bool
    ) -> OrtSession:
        profile = str(Path(_profile_dir()) / art.name) if placement else None
        sess = self.session(art / layout.MODEL, column, threads, profile=profile, options=options)
        return OrtSession(sess, profile is not None)

    def session(
        self,
        path: Path,
        column: str,
        threads: int,
        *,
        optimize: bool = True,
        profile: str | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> Any:
        """An InferenceSession of ``path`` for ``column``."""
        cache = engine_folder(path, options, "optimized" if optimize else "unoptimized")
        so = self.ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        if not optimize:
            so.graph_optimization_level = self.ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        if profile:
            so.enable_profiling = True
            so.profile_file_prefix = profile
        providers = session_providers(column, options, cache, threads)
        return self.ort.InferenceSession(str(path), sess_options=so, providers=providers)

    def internal(self, exc: Exception) -> bool:
        """onnxruntime's RUNTIME_EXCEPTION status: an exception inside the runtime (OpenVINO 1.23.0 now and then reads a
        garbage node index after other sessions in the same process), not a refusal (INVALID_GRAPH, NOT_IMPLEMENTED …)."""
        return "RUNTIME_EXCEPTION" in str(exc)

    def fell_back(self, session: Any, column: str, placement: Mapping[str, int] | None = None) -> str | None:
        """The session dropped the column's provider (its libraries, driver or device failed, or it refused its
        options), or holds it but placed none of the graph's nodes on it: either way the cell ran elsewhere."""
        ep = runtimes.provider(column).ep
        if ep not in session.providers_used:
            return f"{ep} was requested but the session fell back to {', '.join(session.providers_used)}"
        if placement and ep not in placement:
            return f"{ep} took none of the session's {sum(placement.values())} nodes: they ran on {', '.join(placement)}"
        return None

    def localize(self, art: Path, rec: ExportRecord, cell: CellRecord, feeds: Mapping[str, np.ndarray], want: list[np.ndarray],
                 task: CellTask, reuse: dict[str, Any]) -> CellRecord:  # fmt: skip
        """Where a mismatch starts, and whether the graph optimizer is to blame.

        1. The same probe with graph optimizations disabled: passing there puts the blame on the optimizer.
        2. ``model.debug.onnx`` (every node output exposed) on this runtime, compared node by node, in graph
           order, with the reference runtime's values recorded at export (:func:`harness.numeric.localize.localize_cell`):
           the first node that differs; or, where the reference runtime itself differs from torch, where the
           graph parts from torch (the first torch value it disagrees with, for a dynamo export).
        3. Failing both, the first differing output and its node stands.

        ``reuse`` keeps the artifact's extra sessions, made once for all its mismatching probes. The node values
        of a model too large to record at export come from ``task.reference`` (:func:`on_demand`).
        """
        notes = [cell.note] if cell.note else []
        optimizer: bool | None = None
        try:
            if "unoptimized" not in reuse:
                path = art / layout.MODEL
                reuse["unoptimized"] = self.session(path, cell.provider, task.threads, optimize=False, options=task.options)
            optimizer, _ = compare(want, reuse["unoptimized"].run(None, dict(feeds)), **rec.tolerance)
        except Exception as exc:
            notes.append(f"with graph optimizations disabled the probe fails: {error_line(str(exc))}")
        debug = engine_folder(art / layout.DEBUG_MODEL, task.options, "debug")
        found = localize.localize_cell(
            self.ort,
            art,
            cell.probe,
            feeds,
            **rec.tolerance,
            providers=session_providers(cell.provider, task.options, debug, task.threads),
            threads=task.threads,
            reuse=reuse.setdefault("debug", {}),
            reference=on_demand(art, rec, task.reference),
        )
        error = found.pop("error", None)
        where = localize.describe_localization(found)
        if error:
            notes.append(f"no node-by-node comparison: {error}")
        if where and "runtime" in found:
            where = f"{where} (against {rec.reference_runtime}, CPU, optimizations off)"
        return cell.replace(localization=where or cell.localization, optimizer=optimizer, note="; ".join(notes) or None)


class OrtSession:
    """An InferenceSession under the contract's :class:`~harness.run.backends.contract.Session`."""

    def __init__(self, sess: Any, profiling: bool) -> None:
        self.sess = sess
        self.providers_used = tuple(sess.get_providers())
        self.facts: dict[str, Any] = {}
        self.profiling = profiling

    def inputs(self) -> list[str]:
        return [i.name for i in self.sess.get_inputs()]

    def outputs(self) -> list[str]:
        return [o.name for o in self.sess.get_outputs()]

    def run(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return list(self.sess.run(None, dict(feeds)))

    def placement(self) -> dict[str, int]:
        """Stop the session's profiling and count its nodes per provider; the profile file is removed."""
        if not self.profiling:
            return {}
        self.profiling = False
        path = ""
        try:
            path = self.sess.end_profiling()
            return placement(path) if path else {}
        except (OSError, ValueError):
            return {}
        finally:
            if path:
                with contextlib.suppress(OSError):
                    os.unlink(path)

    def timed_call(self, feeds: Mapping[str, np.ndarray], device: str) -> Callable[[], Any]:
        """``session.run`` with host arrays, or (``device``) a run whose inputs were copied to device 0 once and
        whose outputs stay there (IOBinding): timing it leaves the host/device copies out."""
        sess, given = self.sess, dict(feeds)
        if not device:
            return lambda: sess.run(None, given)
        import onnxruntime

        binding = sess.io_binding()
        for name, value in given.items():
            array = np.asarray(value, order="C")
            binding.bind_ortvalue_input(name, onnxruntime.OrtValue.ortvalue_from_numpy(array, device, 0))
        for out in sess.get_outputs():
            binding.bind_output(out.name, device, 0)
        binding.synchronize_inputs()

        def call() -> Any:
            sess.run_with_iobinding(binding)
            binding.synchronize_outputs()

        return call


def _gpu_libraries() -> dict[str, str]:
    """onnxruntime-gpu's CUDA, cuDNN, cuBLAS and TensorRT wheels as installed (``gpu_requirements`` pins
    ranges): a newer libnvinfer is another measurement, so it is in every cell's environment and key."""
    from importlib.metadata import distributions

    found = {}
    for dist in distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith(("nvidia-", "tensorrt")):
            found[name] = dist.version
    return {"gpu_libraries": ", ".join(f"{k}=={v}" for k, v in sorted(found.items()))} if found else {}


def _package() -> str:
    """Which distribution installed the module ``onnxruntime`` here (``onnxruntime-gpu``); several joined by
    ``+`` (two packages writing one module: an environment to make again)."""
    names = sorted({re.sub(r"[-_.]+", "-", d).lower() for d in _distributions_of("onnxruntime")})
    return "+".join(names) or "onnxruntime"


def _distributions_of(module: str) -> list[str]:
    """The distributions that install top-level ``module``: :func:`importlib.metadata.packages_distributions`, which
    Python 3.9 lacks (the environments of onnxruntime 1.10, 1.11); there, read as it reads them."""
    try:
        from importlib.metadata import packages_distributions
    except ImportError:
        from importlib.metadata import distributions

        found = []
        for dist in distributions():
            top = (dist.read_text("top_level.txt") or "").split()
            top = top or [f.parts[0] if len(f.parts) > 1 else f.stem for f in dist.files or () if f.suffix == ".py"]
            if module in top:
                found.append(dist.metadata["Name"])
        return found
    return list(packages_distributions().get(module, []))


def engine_folder(path: Path, options: Mapping[str, Any] | None, kind: str) -> str:
    """Where, under the run stage's engine cache, a provider that builds engines keeps those of the model at
    ``path``: by artifact, session kind, model content and options (onnxruntime names a TensorRT engine by
    file and tensor names only, and every artifact is a ``model.onnx``). Empty without a cache."""
    if not options or not options.get("engine_cache") or not path.is_file():
        return ""
    content = digest(sha256_file(path), sorted((k, str(v)) for k, v in options.items() if k != "engine_cache"), kind)
    return f"{path.parent.name}/{kind}-{content[:16]}"


def session_providers(column: str, options: Mapping[str, Any] | None = None, cache: str = "", threads: int = 0) -> list[Any]:
    """The ``providers`` argument of an InferenceSession for a column: its execution provider with matrix.toml's
    options, the registry's defaults (``device_id`` 0), the thread count where the provider keeps threads of its
    own, its engine cache in a folder of its own (``cache``, under the folder the run stage names), then the
    providers it hands refused nodes to (TensorRT's to CUDA, so they run on the GPU too: the cell's placement
    shows the split). No timing cache: the workers would write one file at once."""
    p = runtimes.provider(column)
    given = dict(options or {})
    cache_dir = given.pop("engine_cache", None)
    opts = {**p.session_options, **given}
    if p.threads_option and threads:
        opts.setdefault(p.threads_option, threads)
    if cache_dir and p.cache_options:
        path = os.path.join(cache_dir, cache) if cache else cache_dir
        os.makedirs(path, exist_ok=True)
        opts.update({k: path if v == "{path}" else v for k, v in p.cache_options.items()})
    chain: list[Any] = [(p.ep, opts) if opts else p.ep]
    for name in p.then:
        after = runtimes.provider(name)
        chain.append((after.ep, {k: opts.get(k, v) for k, v in after.session_options.items()}))
    return chain


def placement(profile_json: str | os.PathLike[str]) -> dict[str, int]:
    """Nodes per execution provider in a session profile (``cat == "Node"`` events carry the provider)."""
    nodes: dict[str, set[str]] = {}
    for event in json.loads(Path(profile_json).read_text()):
        args = event.get("args") or {}
        if event.get("cat") == "Node" and args.get("provider"):
            name = re.sub(r"_(kernel_time|fence_before|fence_after)$", "", event.get("name", ""))
            nodes.setdefault(args["provider"], set()).add(name)
    return {ep: len(names) for ep, names in sorted(nodes.items())}


_PROFILES: str | None = None


def _profile_dir() -> str:
    """This worker's folder for session profiles, made once and removed when the worker exits (a folder per
    artifact cost 0.2 ms each to make and remove: 7% of a small model's cell)."""
    global _PROFILES
    if _PROFILES is None or not os.path.isdir(_PROFILES):
        _PROFILES = tempfile.mkdtemp(prefix="harness-profile-")
        atexit.register(shutil.rmtree, _PROFILES, True)  # a process of its own
        multiprocessing.util.Finalize(None, shutil.rmtree, args=(_PROFILES, True), exitpriority=0)  # a worker
    return _PROFILES


def on_demand(
    art: Path, rec: ExportRecord, reference: ReferenceSource | None
) -> Callable[[str], tuple[dict[str, np.ndarray], dict[str, Any]]] | None:
    """The source of a large model's node values for :func:`harness.numeric.localize.localize_cell`: recorded by the
    export environment's reference runtime on demand, once per artifact and probe, under the run stage's cache."""
    if reference is None:
        return None

    def values(probe: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return localize.on_demand(
            art,
            probe,
            cache=Path(reference.cache) / rec.digest,
            python=reference.python,
            timeout=float(reference.timeout),
            runtime=pin if (pin := rec.reference_runtime or "").startswith("onnxruntime==") else "",
        )

    return values
