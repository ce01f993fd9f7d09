"""The specification's answer for ``harness check``: the ONNX reference evaluator on the same file, in a process of
its own (the parent bounds its time: the evaluator is plain numpy and a large model can take minutes).

    python -m harness.check.spec REQUEST.json

The evaluator is :func:`harness.transform.reference.evaluator`'s: onnx's ``ReferenceEvaluator`` with the contrib and
quantization ops a quantized file holds (``MatMulNBits``, saturating ``QuantizeLinear``, opset-13 QDQ) and float16
ops computed exactly and rounded once, each tested against its documentation. It writes each probe's outputs
(``<probe>.npz``, keys ``0``, ``1``, …) or, with ``"values"``, every value of one probe (``values.npz``) for
localization; the answer is one JSON line: per probe ``ok`` or the evaluator's words.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import numpy as np

from harness.core.records import first_line


def main(request_path: str) -> int:
    with open(request_path) as f:
        request = json.load(f)
    t0 = time.perf_counter()
    result: dict[str, Any] = {}
    try:
        import onnx

        from harness.transform.reference import evaluator

        session = evaluator(onnx.load(request["model"]))
        result["onnx"] = onnx.__version__
    except Exception as exc:  # the evaluator cannot take the file at all: no probe has an answer from it
        result["error"] = f"{type(exc).__name__}: {first_line(str(exc))}"
        print(json.dumps(result))
        return 0
    probes: dict[str, Any] = {}
    for name, path in request["inputs"]:
        with np.load(path) as data:
            feeds = {k: data[k] for k in data.files}
        try:
            if request.get("values"):
                found = session.run(None, feeds, intermediate=True)
                arrays: dict[str, Any] = {k: np.asarray(v) for k, v in found.items() if isinstance(v, np.ndarray)}
                np.savez(f"{request['out']}/values.npz", **arrays)
            else:
                outs = session.run(None, feeds)
                arrays = {str(i): np.asarray(v) for i, v in enumerate(outs)}
                np.savez(f"{request['out']}/{name}.npz", **arrays)
        except Exception as exc:
            probes[name] = {"ok": False, "error": f"{type(exc).__name__}: {first_line(str(exc))}"}
            continue
        probes[name] = {"ok": True}
    result.update(probes=probes, seconds=round(time.perf_counter() - t0, 3))
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
