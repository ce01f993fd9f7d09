"""One artifact judged by the ONNX specification, in a worker process of the spec stage: the full ``onnx.checker``
(strict shape inference) and the ONNX reference evaluator (``onnx.reference.ReferenceEvaluator``) on every probe,
its outputs compared with torch's by the rule of a cell (:func:`harness.numeric.compare.compare`).

The evaluator is a third opinion, not an oracle: where it cannot run a probe (an op it lacks, a type it does not
handle, an error of its own) the probe says ``failed`` with the evaluator's words, and nothing is concluded from it.
An output whose type is not the one the file declares is the evaluator's slip, not the file's: ``failed`` too.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.records import first_line
from harness.numeric.compare import compare, describe
from harness.store import layout


def warm() -> None:
    """A worker imports onnx and its evaluator once (its start-up is not counted against an artifact's budget)."""
    import onnx.reference  # noqa: F401


def evaluate(task: tuple[str, tuple[str, ...], dict[str, Any]]) -> dict[str, Any]:
    """The fact of one artifact: ``(folder, probes, tolerance)`` → checker, per-probe verdicts, what stopped it."""
    import onnx
    from onnx.reference import ReferenceEvaluator

    folder, probes, tolerance = Path(task[0]), task[1], task[2]
    t0 = time.perf_counter()
    fact: dict[str, Any] = {"checker": "ok", "probes": {}, "unanswered": None}
    try:
        onnx.checker.check_model(str(folder / layout.MODEL), full_check=True)
    except Exception as exc:  # the checker's verdict: any of its errors is its answer
        fact["checker"] = first_line(str(exc)) or type(exc).__name__
    try:
        model = onnx.load(str(folder / layout.MODEL))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            session = ReferenceEvaluator(model)
    except Exception as exc:  # an op it lacks, a function it cannot expand: no probe is answered
        fact["unanswered"] = f"the reference evaluator cannot load it: {_said(exc)}"
        fact["seconds"] = time.perf_counter() - t0
        return fact
    declared = _declared(model.graph.output)
    inputs = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    ref = np.load(folder / layout.REFERENCE)
    for probe in probes:  # torch's probes only (one torch could not run is a skipped cell)
        given = layout.probe_inputs(ref, probe)
        fact["probes"][probe] = _signature(inputs, given, probe) or _probe(
            session, inputs, declared, ref, given, probe, tolerance
        )
    fact["seconds"] = time.perf_counter() - t0
    return fact


def _signature(inputs: list[Any], given: dict[str, Any], probe: str) -> dict[str, Any] | None:
    """Where the file's own signature refuses torch's inputs (a graph input the model does not take, a dimension the
    export froze, another type), the spec's answer without running it: the file disagrees with the model."""
    for spec_input in inputs:
        name = spec_input.name
        if name not in given:
            return {
                "verdict": "disagrees",
                "signature": True,
                "line": f"the file asks for input {name!r}, which the model does not take",
            }
        value = np.asarray(given[name])
        (dtype,) = _declared([spec_input])
        if dtype is not None and value.dtype != dtype:
            line = f"the file declares input {name!r} {dtype}; torch takes {value.dtype}"
            return {"verdict": "disagrees", "signature": True, "line": line}
        if not spec_input.type.HasField("tensor_type") or not spec_input.type.tensor_type.HasField("shape"):
            continue
        # A symbolic, unknown or negative dimension is free; a positive one is fixed.
        shape = spec_input.type.tensor_type.shape.dim
        dims = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in shape]
        fixed = len(dims) != value.ndim or any(d is not None and d != n for d, n in zip(dims, value.shape, strict=False))
        if fixed:
            shown = "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
            return {
                "verdict": "disagrees",
                "signature": True,
                "line": f"the file declares input {name!r} as {shown}; probe {probe!r} gives {list(value.shape)} "
                "(the export froze it)",
            }
    return None


def _probe(
    session: Any, inputs: list[Any], declared: list[Any], ref: Any, given: dict[str, Any], probe: str, tolerance: dict[str, Any]
) -> dict[str, Any]:
    names = [i.name for i in inputs]
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            outs = [np.asarray(o) for o in session.run(None, {n: given[n] for n in names})]
    except Exception as exc:  # the evaluator's own error: not the file's verdict
        return {"verdict": "failed", "line": f"the reference evaluator fails: {_said(exc)}"}
    for i, (out, dtype) in enumerate(zip(outs, declared, strict=False)):
        if dtype is not None and out.dtype != dtype:
            return {
                "verdict": "failed",
                "line": f"the reference evaluator returns {out.dtype} for output {i}, which the file declares {dtype}",
            }
    ok, stats = compare(layout.probe_outputs(ref, probe), outs, **tolerance)
    said: dict[str, Any] = {"verdict": "agrees" if ok else "disagrees", "max_abs": stats.max_abs}
    if not ok:  # the comparison's words name the other side "runtime": here it is the evaluator
        said["line"] = describe(stats).replace(", runtime ", ", evaluator ")
    return said


def _declared(values: Any) -> list[Any]:
    """Each graph input's or output's numpy dtype as the file declares it (None where it declares none or numpy has
    none)."""
    from onnx import helper

    found = []
    for out in values:
        elem = out.type.tensor_type.elem_type if out.type.HasField("tensor_type") else 0
        try:
            found.append(np.dtype(helper.tensor_dtype_to_np_dtype(elem)) if elem else None)
        except (KeyError, TypeError, ValueError):
            found.append(None)
    return found


def _said(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {first_line(str(exc), 200)}" if str(exc) else type(exc).__name__
