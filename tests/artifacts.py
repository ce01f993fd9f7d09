"""Real ONNX models that make real onnxruntime crash or hang, written as export artifacts.

The run stage reads what the export stage wrote (``manifest.json`` and
``artifacts/<id>/{model.onnx,reference.npz,export.json}``); this module writes
the same layout without torch, from models built with :mod:`onnx.helper`, so
tests can drive the real run stage over faults that really happen:

- :func:`add_one`: ``y = x + 1``, passes everywhere.
- :func:`div_int_min`: int32 ``Div``; probe ``boom`` divides ``INT_MIN`` by ``-1``,
  which raises SIGFPE inside onnxruntime's Div kernel during ``run``.
- :func:`div_folded`: the same division on constants, so onnxruntime's constant
  folding raises SIGFPE while the ``InferenceSession`` is being created.
- :func:`endless_loop`: a ``Loop`` whose trip count is an input; probe ``hang``
  asks for ``2**62`` iterations and never returns (without growing memory).

Every model is IR version 8 at opset 17, which every onnxruntime from 1.15 on loads.
Only onnx and numpy are needed (and the harness, whose modules import only the
standard library at import time).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import onnx
from onnx import TensorProto, helper

from harness.core.records import ArtifactKey, ExportRecord
from harness.export._exporters import graph_stats
from harness.store import cache
from harness.store.cache import sha256_file as sha256
from harness.store.cache import write_json
from harness.store.layout import MANIFEST

IR_VERSION = 8
OPSET = 17
INT_MIN = np.iinfo(np.int32).min
HANG_TRIPS = 2**62
"""Loop trip count of the ``hang`` probe: at any speed, longer than any test waits."""


# --- writing artifacts --------------------------------------------------------------------------


def write_artifact(
    out: Path,
    case: str,
    model: onnx.ModelProto,
    probes: Mapping[str, Mapping[str, np.ndarray]],
    expected: Mapping[str, list[np.ndarray]],
    *,
    exporter: str = "torchscript",
    opset: int = OPSET,
    atol: float = 1e-4,
    rtol: float = 1e-3,
) -> ExportRecord:
    """Write ``model`` as the artifact ``<case>.<exporter>.op<opset>`` under ``out/artifacts``.

    ``probes`` maps a probe name to its graph inputs by name; ``expected`` maps the same
    probe names to the outputs the run stage compares against. ``example`` must be one of
    the probes; it is stored first, the others keep their order. Returns the record that
    was written to ``export.json``.
    """
    if "example" not in probes:
        raise ValueError(f"{case}: probes need an 'example' (have {sorted(probes)})")
    if set(probes) != set(expected):
        raise ValueError(f"{case}: probes {sorted(probes)} and expected outputs {sorted(expected)} differ")
    names = ["example", *(p for p in probes if p != "example")]
    key = ArtifactKey(case, exporter, opset)
    art = out / "artifacts" / key.id
    art.mkdir(parents=True, exist_ok=True)

    onnx.checker.check_model(model)
    onnx.save(model, str(art / "model.onnx"))
    arrays: dict[str, np.ndarray] = {}
    for probe in names:
        for name, value in probes[probe].items():
            arrays[f"{probe}/in/{name}"] = np.asarray(value)
        for i, value in enumerate(expected[probe]):
            arrays[f"{probe}/out/{i}"] = np.asarray(value)
    tmp = art / "reference.tmp.npz"
    np.savez(tmp, **arrays)  # type: ignore[arg-type]
    tmp.replace(art / "reference.npz")

    record = ExportRecord(
        case=case,
        exporter=exporter,
        opset=opset,
        ok=True,
        seconds=0.0,
        opset_actual=next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None),
        ir_version=model.ir_version,
        checker="ok",
        graph=graph_stats(model),
        probes=tuple(names),
        atol=atol,
        rtol=rtol,
        sha256=sha256(art / "model.onnx"),
        reference_sha256=sha256(art / "reference.npz"),
        versions={},
    )
    write_json(art / "export.json", record.to_dict())
    return record


def write_manifest(out: Path, ids: list[str]) -> None:
    """Write ``out/manifest.json`` listing ``ids``, and the runtimes' frontier models (real ones: the run stage measures
    what each runtime loads on them, and a report refuses a runtime whose frontier is not measured), as the export
    stage does (profile ``faults``)."""
    from harness.store import frontier

    out.mkdir(parents=True, exist_ok=True)
    write_json(out / MANIFEST, {"profile": "faults", "artifacts": list(ids), "versions": {}, "seconds": 0, "problems": []})
    frontier.write_models(out)


# --- models ---------------------------------------------------------------------------------------


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    """IR 8, opset 17: loadable by onnxruntime 1.15 (max IR 9, opset 19) and every later one."""
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION, producer_name="tests.artifacts"
    )
    onnx.checker.check_model(model)
    return model


def add_one() -> onnx.ModelProto:
    """``y = x + 1`` on float32 ``[3]``: a model that passes on every runtime."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "one"], ["y"])],
        "add_one",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        initializer=[helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])],
    )
    return _model(graph)


def div_int_min() -> onnx.ModelProto:
    """``y = a / b`` on int32 ``[2]``. Fed ``INT_MIN / -1`` the x86 ``idiv`` in onnxruntime's
    Div kernel traps: SIGFPE kills the process inside ``InferenceSession.run``."""
    graph = helper.make_graph(
        [helper.make_node("Div", ["a", "b"], ["y"])],
        "div_int_min",
        [
            helper.make_tensor_value_info("a", TensorProto.INT32, [2]),
            helper.make_tensor_value_info("b", TensorProto.INT32, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [2])],
    )
    return _model(graph)


def div_folded() -> onnx.ModelProto:
    """``y = x + INT_MIN / -1`` with the division on two Constant nodes (int32 ``[2]``).

    onnxruntime's constant folding (on by default) evaluates that Div while the
    ``InferenceSession`` is created, and SIGFPE kills the process there, before any probe
    runs. The Div does not produce a graph output, so folding it is not skipped.
    """
    graph = helper.make_graph(
        [
            helper.make_node("Constant", [], ["num"], value=helper.make_tensor("num_v", TensorProto.INT32, [2], [INT_MIN, 6])),
            helper.make_node("Constant", [], ["den"], value=helper.make_tensor("den_v", TensorProto.INT32, [2], [-1, 3])),
            helper.make_node("Div", ["num", "den"], ["q"]),
            helper.make_node("Add", ["x", "q"], ["y"]),
        ],
        "div_folded",
        [helper.make_tensor_value_info("x", TensorProto.INT32, [2])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, [2])],
    )
    return _model(graph)


def endless_loop() -> onnx.ModelProto:
    """``y = x + n`` computed by a ``Loop`` of ``n`` iterations, ``n`` an int64 scalar input.

    The body adds 1.0 to one loop-carried float32 ``[1]`` and has no scan outputs, so a huge
    ``n`` (:data:`HANG_TRIPS`) spins for ever at constant memory.
    """
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Constant", [], ["step"], value=helper.make_tensor("step_v", TensorProto.FLOAT, [1], [1.0])),
            helper.make_node("Add", ["acc_in", "step"], ["acc_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, [1]),
        ],
        [
            helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [1]),
        ],
    )
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "keep_going", "x"], ["y"], body=body)],
        "endless_loop",
        [
            helper.make_tensor_value_info("n", TensorProto.INT64, []),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        initializer=[helper.make_tensor("keep_going", TensorProto.BOOL, [], [True])],
    )
    return _model(graph)


# --- the corpus -----------------------------------------------------------------------------------


class Fault(NamedTuple):
    """A model with its probes and the outputs the run stage expects of them."""

    model: onnx.ModelProto
    probes: dict[str, dict[str, np.ndarray]]
    expected: dict[str, list[np.ndarray]]


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C's int division (truncates toward zero), which ONNX Div on integers follows."""
    return (np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))).astype(a.dtype)


def faults() -> dict[str, Fault]:
    """Every case of the fault corpus by name; a crashing or hanging probe's expected output is
    a placeholder of the right shape and dtype."""
    f32, i32, i64 = np.float32, np.int32, np.int64
    div: dict[str, dict[str, np.ndarray]] = {
        "example": {"a": np.array([7, -9], i32), "b": np.array([2, 4], i32)},
        "boom": {"a": np.array([INT_MIN, 1], i32), "b": np.array([-1, 1], i32)},
        "after": {"a": np.array([100, -5], i32), "b": np.array([-7, 5], i32)},
    }
    loop: dict[str, dict[str, np.ndarray]] = {
        "example": {"n": np.array(3, i64), "x": np.array([0.5], f32)},
        "hang": {"n": np.array(HANG_TRIPS, i64), "x": np.array([0.5], f32)},
        "after": {"n": np.array(5, i64), "x": np.array([-1.0], f32)},
    }
    add: dict[str, dict[str, np.ndarray]] = {
        "example": {"x": np.array([1.0, 2.0, 3.0], f32)},
        "second": {"x": np.array([-1.0, 0.0, 0.25], f32)},
    }
    folded: dict[str, dict[str, np.ndarray]] = {"example": {"x": np.array([1, 2], i32)}}
    return {
        "add_one": Fault(add_one(), add, {p: [v["x"] + f32(1)] for p, v in add.items()}),
        "div_int_min": Fault(
            div_int_min(),
            div,
            {p: [np.zeros(2, i32) if p == "boom" else _int_div(v["a"], v["b"])] for p, v in div.items()},
        ),
        "div_folded": Fault(div_folded(), folded, {"example": [np.zeros(2, i32)]}),
        "endless_loop": Fault(
            endless_loop(),
            loop,
            {p: [np.zeros(1, f32) if p == "hang" else (v["x"] + v["n"]).astype(f32)] for p, v in loop.items()},
        ),
    }


def fault_corpus(out: Path, only: Iterable[str] | None = None, **kwargs: Any) -> list[str]:
    """Write the fault cases (all, or those named in ``only``) and a manifest listing them under
    ``out``; ``kwargs`` go to :func:`write_artifact` (``exporter``, ``opset``, ...). Returns the ids."""
    cases = faults()
    names = list(cases) if only is None else list(only)
    ids = []
    for name in names:
        fault = cases[name]
        ids.append(write_artifact(out, name, fault.model, fault.probes, fault.expected, **kwargs).key.id)
    write_manifest(out, ids)
    return ids


# --- a run environment ----------------------------------------------------------------------------


def runtime_env(folder: Path, *requirements: str) -> Path:
    """A venv under ``folder`` holding ``requirements`` (a runtime package, numpy) and the harness installed with
    ``--no-deps``, as a `run` session makes it (no torch); returns its python."""
    import shutil
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    venv = folder / "venv"
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    subprocess.run([uv, "venv", "-q", "-p", sys.executable, str(venv)], check=True)
    py = str(venv / "bin" / "python")
    subprocess.run([uv, "pip", "install", "-q", "-p", py, *requirements], check=True, timeout=900)
    subprocess.run([uv, "pip", "install", "-q", "-p", py, "--no-deps", "-e", str(root)], check=True)
    return Path(py)


# --- damage ---------------------------------------------------------------------------------------


def forge(shard: Path, status: str, to: str) -> str:
    """Turn the first ``status`` line of ``shard`` into ``to`` with its own checksum recomputed (the line holds,
    the seal does not); returns the forged cell's key."""
    lines = shard.read_text(encoding="utf-8").splitlines()
    i = next(i for i, line in enumerate(lines) if f'"status": "{status}"' in line)
    data, state = cache.unseal(lines[i])
    assert data is not None and state == "ok"
    data.update(status=to, error_class=None, error_line=None, error=None)
    lines[i] = cache.seal(data)
    shard.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return f"{data['case']} {data['probe']}"
