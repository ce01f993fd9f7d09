"""What each runtime loads: the highest IR version and opset, measured, not declared.

The export environment's ``onnx`` writes one-node models (``Add``, whose
newest schema, 14, every runtime of the matrix implements) at every IR
version × default-domain opset it can write (:func:`write_models`, into
``build/frontier/models/``). Each run session loads every one of them on its
runtime's CPU provider and runs it once (:func:`measure`, about a second),
recording which load and, for the first refusal past each frontier, the
runtime's own words, in ``build/frontier/<runtime id>.json``. The report
publishes them (``results/frontier.json``, the README's "What each runtime
loads", the page's column headers) and ``harness recommend`` explains a
refusal with them.

The models depend on ``onnx`` only and the measurement on ``onnxruntime``
only: neither enters an artifact's or a cell's key, and a stale or missing
file is the run session's work (:func:`why_stale`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.records import error_line, first_line
from harness.store import cache

if TYPE_CHECKING:
    from harness.config.matrix import Runtime

FOLDER = "frontier"
INDEX = "index.json"
PUBLISHED = "frontier.json"  # beside matrix.jsonl: {pin: result}
FIRST_IR = 3  # the oldest IR version onnxruntime 1.15 reads; opset_import needs IR 3
FIRST_OPSET = 7  # Add's schema 7: broadcasting; no runtime of the matrix refuses it
LOAD, RUN = "load", "run"
"""When a frontier model was refused: creating its session, or running its one node once it loaded."""


def _code() -> str:
    """The digest of what this module runs: in the index, so changed code writes (and so measures) again."""
    from harness.store import code

    return code.digest(code.files(__name__))


def models_dir(out: Path) -> Path:
    return out / FOLDER / "models"


def result_path(out: Path, runtime_id: str) -> Path:
    return out / FOLDER / f"{runtime_id}.json"


def write_models(out: Path) -> dict[str, Any]:
    """In the export environment: one ``Add`` model per IR × opset this ``onnx`` can write; the index
    names them with their hashes. Rewritten only when a file, ``onnx`` or this module's code changed."""
    import onnx
    from onnx import TensorProto, helper

    folder = models_dir(out)
    index_path = folder / INDEX
    old = cache.read_json(index_path)
    code = _code()
    if isinstance(old, dict) and (old.get("onnx"), old.get("code")) == (onnx.__version__, code) and _files_intact(folder, old):
        return old
    folder.mkdir(parents=True, exist_ok=True)
    irs = list(range(FIRST_IR, onnx.IR_VERSION + 1))
    opsets = list(range(FIRST_OPSET, onnx.defs.onnx_opset_version() + 1))
    files: dict[str, str] = {}
    for ir in irs:
        for opset in opsets:
            x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
            y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
            graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["y"])], "frontier", [x], [y])
            model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir)
            name = f"ir{ir}.op{opset}.onnx"
            (folder / name).write_bytes(model.SerializeToString())
            files[name] = cache.sha256_file(folder / name)
    index = {"onnx": onnx.__version__, "code": code, "op": "Add", "irs": irs, "opsets": opsets, "files": files}
    cache.write_json(index_path, index)
    return index


def _files_intact(folder: Path, index: Mapping[str, Any]) -> bool:
    files = index.get("files")
    if not isinstance(files, dict) or not files:
        return False
    try:
        return all(cache.sha256_file(folder / name) == sha for name, sha in files.items())
    except OSError:
        return False


def models_missing(out: Path) -> str | None:
    """Why the export must write the frontier models again (``None``: they are there, as indexed, by this
    code; another ``onnx`` is the export stamp's to see, in its environment)."""
    folder = models_dir(out)
    index = cache.read_json(folder / INDEX)
    if not isinstance(index, dict) or not _files_intact(folder, index):
        return f"the runtimes' frontier models are not written ({folder})"
    if index.get("code") != _code():
        return f"the runtimes' frontier models were written by other code ({folder})"
    return None


def index_digest(out: Path) -> str | None:
    """The digest of the models' index (``None`` before the export wrote them)."""
    path = models_dir(out) / INDEX
    try:
        return cache.sha256_file(path)
    except OSError:
        return None


def _cell(name: str) -> tuple[int, int]:
    ir, opset = (int(n) for n in re.findall(r"\d+", name))
    return ir, opset


def measure(out: Path, runtime_pin: str) -> dict[str, Any]:
    """In a run environment: load and run every frontier model on the CPU provider. The result says
    the highest IR and opset that loaded, and every refusal once per distinct reason. The models must be
    the ones indexed; which code wrote them is the export's to check (:func:`models_missing`), in its own
    environment: a run on another Python (the GPU machine's 3.12) digests the same code differently."""
    folder = models_dir(out)
    index = cache.read_json(folder / INDEX)
    if not isinstance(index, dict) or not _files_intact(folder, index):
        raise RuntimeError(f"the frontier models are missing or changed ({folder}); `nox -s export` writes them")
    t0 = time.perf_counter()
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    feed = {"x": np.ones(2, dtype=np.float32)}
    loads: dict[tuple[int, int], bool] = {}
    refusals: dict[tuple[int, int], tuple[str, str]] = {}
    for name in sorted(index["files"], key=_cell):
        cell = _cell(name)
        loads[cell] = False
        try:
            session = ort.InferenceSession(str(folder / name), options, providers=["CPUExecutionProvider"])
        except Exception as exc:
            refusals[cell] = (LOAD, error_line(str(exc)))
            continue
        try:
            loads[cell] = bool(np.array_equal(session.run(None, feed)[0], feed["x"] * 2))
        except Exception as exc:  # loaded, then failed at its first (and only) node
            refusals[cell] = (RUN, error_line(str(exc)))
            continue
        if not loads[cell]:
            refusals[cell] = (RUN, "loaded, but computed a wrong x + x")
    loaded = [c for c, ok in loads.items() if ok]
    return _record(out, runtime_pin, ort.__version__, index) | {
        "max_ir": max((ir for ir, _ in loaded), default=None),
        "max_opset": max((op for _, op in loaded), default=None),
        "refused": [[ir, op] for (ir, op), ok in sorted(loads.items()) if not ok],
        "reasons": _reasons(refusals),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def _record(out: Path, runtime_pin: str, version: str | None, index: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What every frontier record says of the models it was measured on (a failed one too)."""
    if index is None:
        index = cache.read_json(models_dir(out) / INDEX) or {}
    return {
        "runtime": runtime_pin,
        "version": version,
        "models": index_digest(out),
        "onnx": index.get("onnx"),
        "irs": index.get("irs", []),
        "opsets": index.get("opsets", []),
    }


def _reasons(refusals: Mapping[tuple[int, int], tuple[str, str]]) -> list[dict[str, Any]]:
    """Each distinct refusal (numbers and paths folded) once, with the first model it was given for and when it came:
    ``load`` (creating the session refused the file) or ``run`` (it loaded, then its node failed or computed wrong)."""
    seen: dict[tuple[str, str], dict[str, Any]] = {}
    for (ir, op), (at, text) in sorted(refusals.items()):
        shape = (at, re.sub(r"\d+", "N", re.sub(r"\S+\.onnx", "MODEL", text)))
        if shape not in seen:
            seen[shape] = {"ir": ir, "opset": op, "at": at, "text": re.sub(r"\S*ir\d+\.op\d+\.onnx", "model.onnx", text)}
    return list(seen.values())


def refused_at(result: Mapping[str, Any]) -> str:
    """When this runtime refuses what is past its frontier: ``at load`` (creating the session refuses the file: nothing
    runs), ``at run`` (it loads, then the node fails: the first run fails), or both; empty where it refused nothing."""
    stages = {r.get("at") for r in result.get("reasons") or () if r.get("ir") is not None}
    if not stages:
        return ""
    if stages == {LOAD}:
        return "at load"
    if stages == {RUN}:
        return "at run"
    return "at load and at run"


def failed(out: Path, runtime_pin: str, why: str) -> dict[str, Any]:
    """The record of an environment that could not measure (its onnxruntime does not import)."""
    return _record(out, runtime_pin, None) | {
        "max_ir": None,
        "max_opset": None,
        "refused": [],
        "reasons": [{"ir": None, "opset": None, "text": why}],
        "error": why,
    }


def measure_if_stale(
    out: Path, runtime: Runtime, *, force: bool = False, unmeasured: str = "", echo: Callable[[str], Any] = print
) -> None:
    """The run stage's last step: what this runtime loads, unless measured on the current models already.
    An environment that cannot measure (its onnxruntime does not import; ``unmeasured``: there is none, and why) is
    recorded as such."""
    if not runtime.kind.frontier or index_digest(out) is None:
        return
    if not force and not unmeasured and why_stale(out, runtime.id) is None:
        return
    if unmeasured:
        result = failed(out, runtime.pin, unmeasured)
    else:
        try:
            result = measure(out, runtime.pin)
        except Exception as exc:  # the refusal of a broken environment is a fact, as its cells' env-error is
            result = failed(out, runtime.pin, f"{type(exc).__name__}: {first_line(str(exc))}")
    cache.write_json(result_path(out, runtime.id), result)
    echo(f"{runtime.pin}: {describe(result)} (frontier: {len(result['refused'])} of the models refused)")


def why_stale(out: Path, runtime_id: str) -> str | None:
    """Why this runtime's frontier must be measured again (``None``: it is current)."""
    digest = index_digest(out)
    if digest is None:
        return None  # nothing to measure against yet: the export writes the models first
    mine = cache.read_json(result_path(out, runtime_id))
    if not isinstance(mine, dict):
        return "its frontier is not measured"
    if mine.get("models") != digest:
        return "its frontier was measured on other models"
    return None


def read(out: Path, runtime_ids: Iterable[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """``{pin: result}`` for each (runtime id, pin) whose frontier is measured on the current models."""
    digest = index_digest(out)
    found: dict[str, dict[str, Any]] = {}
    for runtime_id, pin in runtime_ids:
        mine = cache.read_json(result_path(out, runtime_id))
        if isinstance(mine, dict) and mine.get("models") == digest and mine.get("runtime") == pin:
            found[pin] = mine
    return found


def describe(result: Mapping[str, Any]) -> str:
    """``loads up to IR 9 / opset 19`` (or why nothing loaded)."""
    if result.get("max_ir") is None:
        reasons = result.get("reasons") or [{"text": "no reason"}]
        return f"loads none of the frontier models ({reasons[0]['text']})"
    return f"loads up to IR {result['max_ir']} / opset {result['max_opset']}"


def explain(result: Mapping[str, Any], ir: int | None, opset: int | None) -> str | None:
    """Why a model of this IR and opset is refused here, if the frontier says so."""
    if result.get("max_ir") is None:
        return None
    past = []
    if ir is not None and ir > result["max_ir"]:
        past.append(f"IR {ir}")
    if opset is not None and opset > result["max_opset"]:
        past.append(f"opset {opset}")
    if not past:
        return None
    return f"{result['runtime'].split('==')[-1]} {describe(result)}; the model is {' and '.join(past)}"
