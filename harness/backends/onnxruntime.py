"""The onnxruntime backend: load an artifact, run its probes, compare.

These functions run inside worker processes of a runtime environment that
holds one pinned onnxruntime, numpy and the harness, and nothing else. Every
exception is turned into a status here, in one place (:func:`_cells`), the
way nox's ``SessionRunner.execute`` does it.
"""

from __future__ import annotations

import json
import platform
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from harness.compare import compare, describe
from harness.matrix import PROVIDERS
from harness.records import CellRecord, ExportRecord, Latency, Stage, Status

_ORT: Any = None


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
        "available_providers": ",".join(onnxruntime.get_available_providers()),
        "platform": platform.platform(),
        "cpu": cpu_model(),
    }


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


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


def _session(path: Path, provider: str, threads: int, optimize: bool = True) -> Any:
    so = _ORT.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if not optimize:
        so.graph_optimization_level = _ORT.GraphOptimizationLevel.ORT_DISABLE_ALL
    return _ORT.InferenceSession(str(path), sess_options=so, providers=[PROVIDERS[provider]])


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


def _outputs(ref: Any, probe: str) -> list[np.ndarray]:
    prefix = f"{probe}/out/"
    return [ref[k] for k in sorted((k for k in ref.files if k.startswith(prefix)), key=lambda k: int(k.rsplit("/", 1)[1]))]


def run_artifact(task: dict[str, Any]) -> list[dict[str, Any]]:
    """Worker entry: every probe of one artifact on one provider → cell records."""
    return [c.to_dict() for c in _cells(task)]


def _cells(task: dict[str, Any]) -> list[CellRecord]:
    art = Path(task["dir"])
    rec = ExportRecord.from_dict(json.loads((art / "export.json").read_text()))
    provider = task["provider"]
    ep = PROVIDERS[provider]
    base = rec.cell(task["runtime"], provider, task["env"], stage=Stage.LOAD)

    available = _ORT.get_available_providers()
    if ep not in available:
        return rec.each_probe(
            base,
            status=Status.UNAVAILABLE,
            stage=Stage.ENV,
            error_class="ProviderUnavailable",
            error_line=f"{ep} is not available in onnxruntime {_ORT.__version__}; available: {', '.join(available)}",
        )
    t0 = time.perf_counter()
    try:
        sess = _session(art / "model.onnx", provider, task["threads"])
    except Exception as exc:
        msg = str(exc)
        return rec.each_probe(
            base,
            status=Status.LOAD_FAIL,
            stage=Stage.LOAD,
            error_class=type(exc).__name__,
            error_line=error_line(msg),
            error=msg[:20000],
            seconds=time.perf_counter() - t0,
        )
    used = tuple(sess.get_providers())
    base = base.replace(providers_used=used)
    if ep not in used:  # the session silently dropped the requested provider
        return rec.each_probe(
            base,
            status=Status.UNAVAILABLE,
            stage=Stage.LOAD,
            error_class="ProviderFellBack",
            error_line=f"requested {ep}, session runs on {', '.join(used)}",
        )

    ref = np.load(art / "reference.npz")
    cells = []
    for probe in rec.probes:
        t1 = time.perf_counter()
        cell = base.replace(probe=probe, stage=Stage.RUN)
        try:
            feeds, ignored = _feeds(sess, ref, probe)
            outs = sess.run(None, feeds)
        except Exception as exc:
            msg = str(exc)
            cells.append(
                cell.replace(
                    status=Status.RUN_FAIL,
                    error_class=type(exc).__name__,
                    error_line=error_line(msg),
                    error=msg[:20000],
                    seconds=time.perf_counter() - t1,
                )
            )
            continue
        ok, stats = compare(_outputs(ref, probe), outs, atol=rec.atol, rtol=rec.rtol)
        note = None
        if ignored:
            note = f"probe input(s) {', '.join(ignored)} are not graph inputs: the export froze them"
        cell = cell.replace(stage=Stage.COMPARE, diff=stats, note=note, seconds=time.perf_counter() - t1)
        if ok:
            cells.append(cell)
        else:
            line = describe(stats)
            cells.append(cell.replace(status=Status.MISMATCH, error_class="Mismatch", error_line=line, error=line))
    return cells


def measure_latency(task: dict[str, Any]) -> dict[str, Any]:
    """Worker entry: serial latency of the ``example`` probe of one artifact."""
    art = Path(task["dir"])
    lat = task["latency"]
    t0 = time.perf_counter()
    sess = _session(art / "model.onnx", task["provider"], lat["threads"])
    session_ms = (time.perf_counter() - t0) * 1e3
    feeds, _ = _feeds(sess, np.load(art / "reference.npz"), "example")
    for _ in range(lat["warmup"]):
        sess.run(None, feeds)
    times: list[float] = []
    deadline = time.perf_counter() + lat["budget_seconds"]
    while len(times) < lat["max_runs"] and (len(times) < lat["min_runs"] or time.perf_counter() < deadline):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t)
    ms = np.array(times) * 1e3
    return Latency(
        median_ms=float(np.median(ms)),
        p90_ms=float(np.percentile(ms, 90)),
        runs=len(times),
        warmup=lat["warmup"],
        threads=lat["threads"],
        session_ms=session_ms,
    ).to_dict()
