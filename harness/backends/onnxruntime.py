"""The onnxruntime backend: load an artifact, run its probes, compare, localize.

These functions run inside worker processes of a runtime environment that
holds one pinned onnxruntime, numpy and the harness, and nothing else. Every
exception is turned into a status here, in one place (:func:`run_artifact`),
the way nox's ``SessionRunner.execute`` does it.

:func:`run_artifact` streams: it yields a ``loaded`` event once the session
exists and then each probe's cell as soon as it is decided, so a worker that
dies or hangs on one probe costs the run stage that probe alone (the run stage
knows which probe was running from what it last received).
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
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from harness import localize
from harness.backends.gpu import cpu_model, gpu_model, nvidia_driver_problem
from harness.cache import digest, sha256_file
from harness.compare import compare, describe
from harness.matrix import PROVIDERS, split_column
from harness.records import CellRecord, ExportRecord, Latency, Stage, Status, error_line, first_line

_ORT: Any = None
_CPU = PROVIDERS["cpu"]
# Provider → the shared library onnxruntime loads for it at session creation (onnxruntime/capi/).
_PROVIDER_LIBS = {PROVIDERS["cuda"]: "cuda", PROVIDERS["tensorrt"]: "tensorrt"}


def init_worker() -> None:
    """Import onnxruntime once per worker and quiet its logger."""
    global _ORT
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)
    _ORT = onnxruntime


def environment() -> dict[str, str]:
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


def provider_problem(provider: str) -> str | None:
    """Why the ``provider`` column (``cpu``, ``cuda``, ``tensorrt-fp16``; or an execution provider's
    name) cannot run in this environment, in one line; None when nothing stops it.

    onnxruntime-gpu lists CUDA and TensorRT as available on any machine and
    then, when their libraries do not load, quietly runs the session on the
    CPU. So a listed provider must also load: its shared library is loaded
    here the way onnxruntime loads it (the loader's own message names the
    missing CUDA, cuDNN or TensorRT library), and for an NVIDIA provider the
    driver must initialise and show a device. Loading GPU libraries can kill
    the process, so the run stage calls this in a child process of its own.
    """
    import onnxruntime as ort

    ep = PROVIDERS.get(split_column(provider)[0], provider)
    who = f"{_package()} {ort.__version__}"
    available = ort.get_available_providers()
    if ep not in available:
        return f"{ep} is not available in {who}; available: {', '.join(available)}"
    lib = _PROVIDER_LIBS.get(ep)
    if lib is None:
        return None
    capi = Path(ort.__file__).parent / "capi"
    path = capi / f"libonnxruntime_providers_{lib}.so"
    if not path.exists():
        return f"{ep} is listed by {who} but {path.name} is not in {capi}"
    with contextlib.suppress(OSError):  # onnxruntime loads the bridge library first, globally
        ctypes.CDLL(str(capi / "libonnxruntime_providers_shared.so"), mode=ctypes.RTLD_GLOBAL)
    driver = nvidia_driver_problem()
    try:
        ctypes.CDLL(str(path))
    except OSError as exc:
        reason = str(exc).replace(f"{path}: ", "")
        return f"{ep} is listed by {who} but cannot load: {reason}" + (f"; {driver}" if driver else "")
    if driver:
        return f"{ep} is listed by {who} and its libraries load, but {driver}"
    return None


def _package() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("onnxruntime-gpu")
        return "onnxruntime-gpu"
    except PackageNotFoundError:
        return "onnxruntime"


# A session-creation error that says the provider's libraries, driver or device failed: the provider is
# unavailable here, not the model refused (onnxruntime falls back to the CPU only once). A provider's
# refusal of the model itself (TensorRT cannot build an engine) stays a load-fail.
_PROVIDER_FAILURE = re.compile(
    r"Failed to load library|cudaSetDevice|CUDA driver version is insufficient|no CUDA-capable device|"
    r"CUDA failure (?:35|100)\b"
)


def engine_folder(path: Path, options: Mapping[str, Any] | None, kind: str) -> str:
    """Where, under the run stage's TensorRT cache, the TensorRT provider keeps the engines of the model at
    ``path``: by artifact, session kind, model content and options (onnxruntime names an engine by file and
    tensor names only). Empty without a cache."""
    if not options or not options.get("engine_cache") or not path.is_file():
        return ""
    content = digest(sha256_file(path), sorted((k, str(v)) for k, v in options.items() if k != "engine_cache"), kind)
    return f"{path.parent.name}/{kind}-{content[:16]}"


def session_providers(provider: str, options: Mapping[str, Any] | None = None, cache: str = "") -> list[Any]:
    """The ``providers`` argument of an InferenceSession for a column: the execution provider with
    matrix.toml's options (device 0). TensorRT gets its engine cache in a folder of its own per
    artifact, session kind, model content and options (``cache``, under the folder the run stage names:
    onnxruntime names a cached engine by the model's file name and tensor names, not its weights or the
    build options, and every artifact is a ``model.onnx``), and the CUDA provider after it, so nodes
    TensorRT refuses run on the GPU too (the cell's placement shows the split). No timing cache: the
    workers would write one file at once."""
    base, _ = split_column(provider)
    ep = PROVIDERS[base]
    if base == "cpu":
        return [ep]
    opts = {k: v for k, v in (options or {}).items() if k != "engine_cache"}
    opts.setdefault("device_id", 0)
    if base == "tensorrt":
        cache_dir = (options or {}).get("engine_cache")
        if cache_dir:
            path = os.path.join(cache_dir, cache) if cache else cache_dir
            os.makedirs(path, exist_ok=True)
            opts.update(trt_engine_cache_enable=True, trt_engine_cache_path=path)
        return [(ep, opts), (PROVIDERS["cuda"], {"device_id": opts["device_id"]})]
    return [(ep, opts)]


def _session(
    path: Path,
    provider: str,
    threads: int,
    *,
    optimize: bool = True,
    profile: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> Any:
    cache = engine_folder(path, options, "optimized" if optimize else "unoptimized")
    so = _ORT.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = _ORT.GraphOptimizationLevel.ORT_DISABLE_ALL
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = profile
    return _ORT.InferenceSession(str(path), sess_options=so, providers=session_providers(provider, options, cache))


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


@contextlib.contextmanager
def _profile_dir() -> Iterator[str]:
    """This worker's folder for session profiles, made once and removed when the worker exits (a
    folder per artifact cost 0.2 ms each to make and remove: 7% of a small model's cell)."""
    global _PROFILES
    if _PROFILES is None or not os.path.isdir(_PROFILES):
        _PROFILES = tempfile.mkdtemp(prefix="harness-profile-")
        atexit.register(shutil.rmtree, _PROFILES, True)  # a process of its own
        multiprocessing.util.Finalize(None, shutil.rmtree, args=(_PROFILES, True), exitpriority=0)  # a worker
    yield _PROFILES


def _end_profiling(sess: Any) -> dict[str, int]:
    """Stop the session's profiling and count its nodes per provider; the profile file is removed."""
    path = ""
    try:
        path = sess.end_profiling()
        return placement(path) if path else {}
    except (OSError, ValueError):
        return {}
    finally:
        if path:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _feeds(sess: Any, ref: Any, probe: str) -> tuple[dict[str, np.ndarray], list[str]]:
    """Graph inputs from the probe; names of probe inputs the graph does not take."""
    prefix = f"{probe}/in/"
    given = {k[len(prefix) :]: ref[k] for k in ref.files if k.startswith(prefix)}
    feeds = {}
    for inp in sess.get_inputs():
        if inp.name not in given:
            raise KeyError(f"graph input {inp.name!r} has no value in probe {probe!r} (probe has {sorted(given)})")
        feeds[inp.name] = given[inp.name]
    ignored = [n for n in given if n not in feeds]
    return feeds, ignored


def reference_outputs(ref: Any, probe: str) -> list[np.ndarray]:
    """torch's outputs of ``probe`` from reference.npz, in output order."""
    prefix = f"{probe}/out/"
    return [ref[k] for k in sorted((k for k in ref.files if k.startswith(prefix)), key=lambda k: int(k.rsplit("/", 1)[1]))]


def _failed(cell: CellRecord, exc: BaseException, started: float, status: Status) -> CellRecord:
    msg = str(exc)
    return cell.replace(
        status=status,
        error_class=type(exc).__name__,
        error_line=error_line(msg),
        error=msg[:20000],
        seconds=time.perf_counter() - started,
    )


def run_artifact(task: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Worker entry (a generator): the probes of one artifact on one provider.

    Yields ``{"event": "loaded"}`` once the session exists, ``{"cell": ...}``
    for each probe in ``task["probes"]`` order, and, before the extra sessions
    that localize a mismatch, ``{"event": "localizing", "probe": ...}``:
    whatever kills the worker from then on costs the localization, not the cell.
    """
    art = Path(task["dir"])
    rec = ExportRecord.from_dict(json.loads((art / "export.json").read_text()))
    provider = task["provider"]
    ep = PROVIDERS[split_column(provider)[0]]
    options = task.get("options") or {}
    probes = [p for p in rec.probes if p in task.get("probes", rec.probes)]
    base = rec.cell(task["runtime"], provider, task["env"], stage=Stage.LOAD)

    with _profile_dir() as tmp:
        t0 = time.perf_counter()
        try:
            sess = _session(art / "model.onnx", provider, task["threads"], profile=str(Path(tmp) / art.name), options=options)
        except Exception as exc:
            status = Status.LOAD_FAIL
            if ep != _CPU and _PROVIDER_FAILURE.search(str(exc)):
                status = Status.UNAVAILABLE
            for cell in rec.each_probe(base, probes):
                yield {"cell": _failed(cell, exc, t0, status).to_dict()}
            return
        session_seconds = time.perf_counter() - t0
        used = tuple(sess.get_providers())
        base = base.replace(providers_used=used)
        if ep not in used:  # the session silently dropped the requested provider
            line = f"{ep} was requested but the session fell back to {', '.join(used)}"
            for cell in rec.each_probe(base, probes, status=Status.UNAVAILABLE, error_class="ProviderFellBack"):
                yield {"cell": cell.replace(error_line=line, error=line).to_dict()}
            return
        yield {"event": "loaded", "seconds": session_seconds}
        ref = np.load(art / "reference.npz")
        profiling = True
        inference = localizing = 0.0
        reuse: dict[str, Any] = {}
        for probe in probes:
            t1 = time.perf_counter()
            cell = base.replace(probe=probe, stage=Stage.RUN)
            try:
                feeds, ignored = _feeds(sess, ref, probe)
            except KeyError as exc:  # the probe lacks a graph input: nothing ran
                yield {"cell": _failed(cell, exc, t1, Status.RUN_FAIL).to_dict()}
                continue
            t_run = time.perf_counter()
            try:
                outs, error = sess.run(None, feeds), None
            except Exception as exc:
                outs, error = None, exc
            inference += time.perf_counter() - t_run
            if profiling:  # the first run places every node: count them per provider, then stop profiling
                profiling = False
                base = base.replace(placement=_end_profiling(sess))
                cell = cell.replace(placement=base.placement)
            if error is not None:
                yield {"cell": _failed(cell, error, t1, Status.RUN_FAIL).to_dict()}
                continue
            want = reference_outputs(ref, probe)
            ok, stats = compare(want, outs, **rec.tolerance)
            note = None
            if ignored:
                note = f"probe input(s) {', '.join(ignored)} are not graph inputs: the export froze them"
            cell = cell.replace(stage=Stage.COMPARE, diff=stats, note=note, seconds=time.perf_counter() - t1)
            if ok:
                yield {"cell": cell.to_dict()}
                continue
            line = describe(stats)
            names = [o.name for o in sess.get_outputs()]
            cell = cell.replace(
                status=Status.MISMATCH,
                error_class="Mismatch",
                error_line=line,
                error=line,
                localization=_output_localization(art, names, want, outs, rec),
            )
            yield {"cell": cell.to_dict()}
            yield {"event": "localizing", "probe": probe}
            t_localize = time.perf_counter()
            try:
                cell = _localize(art, rec, cell, feeds, want, task["threads"], reuse, options, task.get("reference"))
            except Exception as exc:  # a harness bug here costs the localization, never the probes after it
                cell = cell.noted(f"localizing this mismatch failed: {type(exc).__name__}: {first_line(str(exc))}")
            localizing += time.perf_counter() - t_localize
            yield {"cell": cell.to_dict()}
        yield {"event": "timing", "inference": inference, "localize": localizing}


def _nodes(art: Path) -> list[dict[str, Any]]:
    path = art / localize.NODES
    return json.loads(path.read_text()) if path.exists() else []


def _output_localization(art: Path, names: list[str], want: list[np.ndarray], outs: list[Any], rec: ExportRecord) -> str:
    """The first output that differs from torch's, and the node that computes it."""
    found = localize.first_output_mismatch(_nodes(art), names, outs, want, **rec.tolerance)
    return found or "every output is within tolerance on its own"


def _localize(
    art: Path,
    rec: ExportRecord,
    cell: CellRecord,
    feeds: Mapping[str, np.ndarray],
    want: list[np.ndarray],
    threads: int,
    reuse: dict[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    reference: Mapping[str, Any] | None = None,
) -> CellRecord:
    """Where a mismatch starts, and whether the graph optimizer is to blame.

    1. The same probe with graph optimizations disabled: passing there puts
       the blame on the optimizer.
    2. ``model.debug.onnx`` (every node output exposed) on this runtime,
       compared node by node, in graph order, with the reference runtime's
       values recorded at export (:func:`harness.localize.localize_cell`):
       the first node that differs; or, where the reference runtime itself
       differs from torch, where the graph parts from torch (the first torch
       value it disagrees with, for a dynamo export).
    3. Failing both, the first differing output and its node stands.

    ``reference`` says where the node values of a model too large to record at export come from
    (:func:`harness.localize.on_demand`: the export environment's interpreter and a cache folder).
    """
    notes = [cell.note] if cell.note else []
    optimizer: bool | None = None
    reuse = {} if reuse is None else reuse  # the artifact's extra sessions, made once for all its mismatching probes
    try:
        if "unoptimized" not in reuse:
            reuse["unoptimized"] = _session(art / "model.onnx", cell.provider, threads, optimize=False, options=options)
        optimizer, _ = compare(want, reuse["unoptimized"].run(None, dict(feeds)), **rec.tolerance)
    except Exception as exc:
        notes.append(f"with graph optimizations disabled the probe fails: {error_line(str(exc))}")
    found = localize.localize_cell(
        _ORT,
        art,
        cell.probe,
        feeds,
        **rec.tolerance,
        providers=session_providers(cell.provider, options, engine_folder(art / localize.DEBUG_MODEL, options, "debug")),
        threads=threads,
        reuse=reuse.setdefault("debug", {}),
        reference=on_demand(art, rec, reference),
    )
    error = found.pop("error", None)
    where = localize.describe_localization(found)
    if error:
        notes.append(f"no node-by-node comparison: {error}")
    if where and "runtime" in found:
        where = f"{where} (against {rec.reference_runtime}, CPU, optimizations off)"
    return cell.replace(localization=where or cell.localization, optimizer=optimizer, note="; ".join(notes) or None)


def on_demand(
    art: Path, rec: ExportRecord, reference: Mapping[str, Any] | None
) -> Callable[[str], tuple[dict[str, np.ndarray], dict[str, Any]]] | None:
    """The source of a large model's node values for :func:`harness.localize.localize_cell`: recorded by the
    export environment's reference runtime on demand, once per artifact and probe, under the run stage's cache."""
    if not reference:
        return None

    def values(probe: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        return localize.on_demand(
            art,
            probe,
            cache=Path(reference["cache"]) / rec.digest,
            python=reference.get("python"),
            timeout=float(reference["timeout"]),
            runtime=pin if (pin := rec.reference_runtime or "").startswith("onnxruntime==") else "",
        )

    return values


MIN_TIMED = 3
"""Timed runs a latency has at the least, whatever the budget: fewer would give no median and no p90."""


def time_runs(
    sess: Any, feeds: Mapping[str, np.ndarray], lat: Mapping[str, Any], call: Callable[[], Any] | None = None
) -> tuple[list[float], int, bool, int]:
    """The latency protocol: ``warmup`` untimed runs, then timed ``session.run`` calls in windows of
    ``min_runs``, until a window's median is within ``stability`` of the previous window's (or
    ``max_runs`` or ``budget_seconds`` stops it).

    ``budget_seconds`` bounds the whole of it, warm-up included, for any model: warm-up stops once half
    the budget is spent (after one run at least), and timing stops as soon as the budget is spent and
    :data:`MIN_TIMED` runs are in, even inside a window. A real transformer whose one run takes 1.5 s
    then costs a few runs, not ``warmup + 2 * min_runs`` of them; a small model, whose windows settle
    long before the budget, is timed as it always was.

    Returns the sample the figures come from (the last two windows: the settled state, not the first
    runs after warm-up), the number of timed runs, whether the median settled, and the warm-up runs
    made. ``call`` replaces ``session.run(None, feeds)`` as the timed unit (an IOBinding run and its
    synchronization).
    """
    feeds = dict(feeds)
    if call is None:
        run = sess.run

        def call() -> Any:
            return run(None, feeds)

    perf = time.perf_counter
    start = perf()
    budget = lat["budget_seconds"]
    warm = 0
    for _ in range(lat["warmup"]):
        call()
        warm += 1
        if perf() - start > budget / 2:
            break
    deadline = start + budget
    window = lat["min_runs"]
    times: list[float] = []
    previous: float | None = None
    stable = False
    spent = False
    while not spent and len(times) + window <= lat["max_runs"]:
        for _ in range(window):
            t = perf()
            call()
            done = perf()
            times.append(done - t)
            if done > deadline and len(times) >= MIN_TIMED and len(times) % window:
                spent = True  # the budget is gone in the middle of a window: stop here
                break
        else:
            median = float(np.median(times[-window:]))
            if previous is not None and abs(median - previous) <= lat["stability"] * previous:
                stable = True
                break
            previous = median
            spent = perf() > deadline and len(times) >= MIN_TIMED
    return times[-2 * window :], len(times), stable, warm


def measure_latency(task: dict[str, Any]) -> dict[str, Any]:
    """Worker entry: serial latency of the ``example`` probe of one artifact."""
    art = Path(task["dir"])
    lat = task["latency"]
    t0 = time.perf_counter()
    sess = _session(art / "model.onnx", task["provider"], lat["threads"], options=task.get("options"))
    session_ms = (time.perf_counter() - t0) * 1e3
    ep = PROVIDERS[split_column(task["provider"])[0]]
    if ep not in sess.get_providers():  # never time a fallback as the provider's latency
        raise RuntimeError(f"{ep} was requested but the session fell back to {', '.join(sess.get_providers())}")
    feeds, _ = _feeds(sess, np.load(art / "reference.npz"), "example")
    copies, call = "host", None
    if ep != _CPU and lat.get("iobinding", True):
        copies, call = "device", _bound_run(sess, feeds)
    return timed(sess, feeds, lat, session_ms, copies, call)


def timed(
    sess: Any,
    feeds: Mapping[str, np.ndarray],
    lat: Mapping[str, Any],
    session_ms: float,
    copies: str,
    call: Callable[[], Any] | None,
) -> dict[str, Any]:
    """:func:`time_runs`, as the latency record a worker returns (plus ``busy_seconds`` for the benchmark)."""
    t1 = time.perf_counter()
    sample, runs, stable, warm = time_runs(sess, feeds, lat, call)
    busy = session_ms / 1e3 + time.perf_counter() - t1
    ms = np.array(sample) * 1e3
    return {"busy_seconds": busy} | Latency(
        median_ms=float(np.median(ms)),
        p90_ms=float(np.percentile(ms, 90)),
        runs=runs,
        warmup=warm,
        threads=lat["threads"],
        session_ms=session_ms,
        stable=stable,
        copies=copies,
    ).to_dict()


def _bound_run(sess: Any, feeds: Mapping[str, np.ndarray]) -> Callable[[], Any]:
    """A run whose inputs were copied to GPU 0 once and whose outputs stay there (IOBinding): timing
    it leaves the host/device copies out. It returns once the outputs are ready."""
    binding = sess.io_binding()
    for name, value in feeds.items():
        binding.bind_ortvalue_input(name, _ORT.OrtValue.ortvalue_from_numpy(np.asarray(value, order="C"), "cuda", 0))
    for out in sess.get_outputs():
        binding.bind_output(out.name, "cuda", 0)
    binding.synchronize_inputs()

    def call() -> Any:
        sess.run_with_iobinding(binding)
        binding.synchronize_outputs()

    return call
