"""One runtime's side of ``harness check``: run in that runtime's environment (its onnxruntime and numpy, on the
Python its wheels need: 3.8 for 1.10, so no syntax newer than 3.8 here and nothing of the harness imported).

    python -m harness.check.worker REQUEST.json

The request names the model, the input files (one ``.npz`` per probe, keys = input names) and the folder to write
each probe's outputs to (``<probe>.npz``, keys ``0``, ``1``, … in the model's output order); with ``"debug"``, the
model with every node's output exposed is run on one probe instead, for localization (``values.npz``, keys = value
names). The answer is one JSON line on stdout: the version that ran, the providers the session really used, and per
probe ``ok`` or the stage and the first line of the error. A crash is the parent's to see (the exit status).
"""

from __future__ import annotations

import json
import platform
import sys
import time
from typing import Any


def _line(text: str) -> str:
    """The message whole (the parent shortens it the way the table does: without paths and C++ locations)."""
    return str(text).strip()[:20000]


def main(request_path: str) -> int:
    with open(request_path) as f:
        request = json.load(f)
    t0 = time.perf_counter()
    result = {"stage": "import"}  # type: dict
    try:
        import numpy as np
        import onnxruntime as ort
    except Exception as exc:  # the environment itself is broken: every probe is env-error
        result.update(error=type(exc).__name__ + ": " + _line(str(exc)))
        print(json.dumps(result))
        return 0
    result.update(version=ort.__version__, numpy=np.__version__, import_s=round(time.perf_counter() - t0, 3))
    result.update(machine=platform.machine(), features=_features())
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = int(request.get("threads") or 1)
    model = request["debug"] if request.get("debug") else request["model"]
    result["stage"] = "load"
    t1 = time.perf_counter()
    try:
        session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        result.update(error=_line(str(exc)), error_class=type(exc).__name__)
        print(json.dumps(result))
        return 0
    result.update(load_s=round(time.perf_counter() - t1, 3), providers=session.get_providers())
    result["stage"] = "run"
    probes = {}
    for name, path in request["inputs"]:
        with np.load(path) as data:
            feeds = {k: data[k] for k in data.files}
        t2 = time.perf_counter()
        try:
            if request.get("debug"):
                names = [o.name for o in session.get_outputs() if o.type in _NUMPY_TYPES]
                outs = session.run(names, feeds)
                arrays: dict[str, Any] = {n: np.asarray(v) for n, v in zip(names, outs) if isinstance(v, np.ndarray)}  # noqa: B905 (3.8)
            else:
                outs = session.run(None, feeds)
                arrays = {str(i): np.asarray(v) for i, v in enumerate(outs)}
        except Exception as exc:
            probes[name] = {"ok": False, "error": _line(str(exc)), "error_class": type(exc).__name__}
            continue
        target = request["out"] + "/" + (("values") if request.get("debug") else name) + ".npz"
        np.savez(target, **arrays)
        probes[name] = {"ok": True, "seconds": round(time.perf_counter() - t2, 4)}
    result.update(stage="done", probes=probes, seconds=round(time.perf_counter() - t0, 3))
    print(json.dumps(result))
    return 0


def _features() -> dict[str, bool]:
    """numpy's ``__cpu_features__``: the instruction sets this process sees (a platform's proof, as the run stage's)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as found  # numpy 2
    except ImportError:
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as found  # type: ignore[no-redef]  # numpy 1.x
        except ImportError:
            return {}
    return {str(k): bool(v) for k, v in dict(found).items()}


_NUMPY_TYPES = frozenset(
    f"tensor({t})"
    for t in ("float", "uint8", "int8", "uint16", "int16", "int32", "int64", "bool", "float16", "double", "uint32", "uint64")
)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
