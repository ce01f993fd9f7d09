"""Standalone reproducers (harness.publish.repro): hand-encoded TensorProtos that onnx parses, and one script,
a module of the package, that reruns each failing cell with onnxruntime and numpy alone, on real models and a
real onnxruntime."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from harness.core.errors import HarnessError
from harness.core.records import CellRecord, ExportRecord, Stage, Status
from harness.publish import repro as repro_package
from harness.publish.repro import FAILING, MARKER, ONNX_TYPES, SCRIPT, encode_tensor, write_repros
from harness.store.cache import sha256_file

CONSTRAINTS = {"onnxruntime==1.17.3": ("numpy<2",)}
NEW, OLD = "onnxruntime==1.32.0", "onnxruntime==1.17.3"


# ---------------------------------------------------------------------------------------------------------------------
# TensorProto by hand


def _samples(dtype: np.dtype[Any]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    if dtype.kind == "b":
        full = np.array([[True, False, True], [False, False, True]])
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        full = np.array([[info.min, info.max, 0], [1, info.max - 1, info.min + 1]], dtype=dtype)
    elif dtype.kind == "f":
        full = np.array([[np.nan, np.inf, -np.inf], [-0.0, 1.5, -3.25]], dtype=dtype)
    else:
        full = (rng.standard_normal((2, 3)) + 1j * rng.standard_normal((2, 3))).astype(dtype)
        full[0, 0] = complex(np.nan, np.inf)
    return {
        "matrix": full.astype(dtype),
        "scalar": np.array(full.flat[1], dtype=dtype),
        "empty": np.zeros((0, 3), dtype=dtype),
        "empty_3d": np.zeros((2, 0, 1), dtype=dtype),
        "big_endian": full.astype(dtype.newbyteorder(">")),
        "noncontiguous": np.asfortranarray(np.tile(full, (2, 2)))[:, ::2],
        "long": rng.integers(0, 2, size=300).astype(dtype),  # dims and raw_data lengths past one varint byte
    }


DTYPES = sorted(ONNX_TYPES, key=str)


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    """Same shape, dtype (byte order aside) and bits."""
    le = a.dtype.newbyteorder("<")
    return (
        a.shape == b.shape
        and a.dtype.newbyteorder("=") == b.dtype.newbyteorder("=")
        and np.ascontiguousarray(a, dtype=le).tobytes() == np.ascontiguousarray(b, dtype=le).tobytes()
    )


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_hand_encoded_tensor_parses_with_onnx(dtype: np.dtype[Any]) -> None:
    for kind, arr in _samples(dtype).items():
        data = encode_tensor(arr, f"in_{kind}")
        proto = TensorProto()
        proto.ParseFromString(data)
        assert proto.name == f"in_{kind}"
        assert proto.data_type == helper.np_dtype_to_tensor_dtype(dtype.newbyteorder("="))
        assert list(proto.dims) == list(arr.shape)
        back = numpy_helper.to_array(proto)
        assert _same(back, arr), (dtype, kind)
        # Byte for byte what onnx itself writes.
        assert data == numpy_helper.from_array(arr.astype(arr.dtype.newbyteorder("=")), f"in_{kind}").SerializeToString()


def test_unnamed_and_unsupported() -> None:
    proto = TensorProto()
    proto.ParseFromString(encode_tensor(np.arange(3, dtype=np.int32), ""))
    assert proto.name == "" and list(numpy_helper.to_array(proto)) == [0, 1, 2]
    for bad in (np.array(["a"]), np.array([object()]), np.array(["2020-01-01"], dtype="datetime64[D]")):
        with pytest.raises(TypeError, match="no ONNX raw-data encoding"):
            encode_tensor(bad, "x")


# ---------------------------------------------------------------------------------------------------------------------
# Artifacts: real models, references, export records


def _model(nodes: list[Any], inputs: list[Any], outputs: list[Any], *, ir_version: int = 8, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def _artifact(
    build: Path,
    case: str,
    model: onnx.ModelProto | None,
    probes: dict[str, tuple[dict[str, np.ndarray], list[np.ndarray]]],
    exporter: str = "dynamo",
    opset: int = 17,
    **fields: Any,
) -> ExportRecord:
    """Write build/artifacts/<id>/{model.onnx, reference.npz, export.json} the way the export stage does."""
    art = build / "artifacts" / f"{case}.{exporter}.op{opset}"
    art.mkdir(parents=True)
    arrays: dict[str, np.ndarray] = {}
    for probe, (ins, outs) in probes.items():
        arrays.update({f"{probe}/in/{k}": v for k, v in ins.items()})
        arrays.update({f"{probe}/out/{i}": v for i, v in enumerate(outs)})
    np.savez(art / "reference.npz", **arrays)
    graph: dict[str, Any] = {}
    if model is not None:
        onnx.save(model, art / "model.onnx")
        graph = {
            "inputs": [{"name": v.name, "elem_type": v.type.tensor_type.elem_type, "shape": []} for v in model.graph.input],
            "outputs": [{"name": v.name, "elem_type": v.type.tensor_type.elem_type, "shape": []} for v in model.graph.output],
        }
    rec = ExportRecord(
        case=case,
        exporter=exporter,
        opset=opset,
        ok=model is not None,
        seconds=0.1,
        opset_actual=opset,
        ir_version=model.ir_version if model is not None else None,
        graph=graph,
        probes=tuple(probes),
        sha256=sha256_file(art / "model.onnx") if model is not None else None,  # as the export records them
        reference_sha256=sha256_file(art / "reference.npz"),
        **fields,
    )
    (art / "export.json").write_text(json.dumps(rec.to_dict(), indent=1, sort_keys=True))
    return rec


def _cells(
    rec: ExportRecord,
    runtime: str,
    statuses: dict[str, Status],
    error_line: str | None = None,
    localization: str | None = None,
    optimizer: bool | None = None,
) -> list[CellRecord]:
    base = rec.cell(runtime, "cpu", {"onnxruntime": runtime.split("==")[1]})
    out: list[CellRecord] = []
    for probe, status in statuses.items():
        cell = base.replace(probe=probe, status=status, stage=Stage.RUN)
        if status is not Status.PASS:
            cell = cell.replace(error_line=error_line or f"{status.value} on {probe}")
        out.append(cell.replace(localization=localization, optimizer=optimizer))
    return out


def _floor_div(build: Path) -> ExportRecord:
    """Integer division: torch floors, ONNX Div truncates toward zero: negatives really mismatch."""
    i64 = TensorProto.INT64
    model = _model(
        [helper.make_node("Div", ["a", "b"], ["q"])],
        [helper.make_tensor_value_info("a", i64, ["n"]), helper.make_tensor_value_info("b", i64, ["n"])],
        [helper.make_tensor_value_info("q", i64, ["n"])],
    )
    a_pos, a_neg, b = np.array([7, 8, 9]), np.array([-7, 8, -1]), np.array([2, 3, 2])
    probes = {
        "example": ({"a": a_pos, "b": b}, [np.floor_divide(a_pos, b)]),
        "negative": ({"a": a_neg, "b": b}, [np.floor_divide(a_neg, b)]),
    }
    return _artifact(
        build,
        "floor_div",
        model,
        probes,
        atol=0.0,
        rtol=0.0,
        card={"symptom": 'a // b of negatives; """quotes""" \\d'},
        reference_runtime="onnxruntime==1.32.0",
    )


def _frozen_batch(build: Path) -> ExportRecord:
    """Batch dim exported as 1: a batch of 3 is refused at run time."""
    f32 = TensorProto.FLOAT
    model = _model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", f32, [1, 3])],
        [helper.make_tensor_value_info("y", f32, [1, 3])],
    )
    x1, x3 = np.array([[-1.0, 0.5, 2.0]], np.float32), np.arange(-4, 5, dtype=np.float32).reshape(3, 3)
    probes = {
        "example": ({"x": x1}, [np.maximum(x1, 0)]),
        "batch3": ({"x": x3, "unused_flag": np.array(True)}, [np.maximum(x3, 0)]),  # a frozen input: not a graph input
    }
    return _artifact(build, "frozen_batch", model, probes, exporter="torchscript", opset=13)


def _future_ir(build: Path) -> ExportRecord:
    """An IR version no onnxruntime knows: refused at load."""
    f32 = TensorProto.FLOAT
    model = _model(
        [helper.make_node("Neg", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", f32, [2])],
        [helper.make_tensor_value_info("y", f32, [2])],
        ir_version=99,
    )
    x = np.array([1.0, -2.0], np.float32)
    return _artifact(build, "future_ir", model, {"example": ({"x": x}, [-x])})


def _identity_all(build: Path) -> ExportRecord:
    """Every dtype onnxruntime runs, as 0-d scalars, empty and ordinary tensors: passes on today's runtime."""
    nodes, inputs, outputs = [], [], []
    example: dict[str, np.ndarray] = {}
    refs: list[np.ndarray] = []
    for dtype in DTYPES:
        if dtype.kind == "c":
            continue  # onnxruntime has no complex kernels
        for kind in ("matrix", "scalar", "empty"):
            arr = _samples(dtype)[kind]
            name = f"x_{dtype}_{kind}"
            et = helper.np_dtype_to_tensor_dtype(dtype)
            nodes.append(helper.make_node("Identity", [name], [f"y_{dtype}_{kind}"]))
            inputs.append(helper.make_tensor_value_info(name, et, list(arr.shape)))
            outputs.append(helper.make_tensor_value_info(f"y_{dtype}_{kind}", et, list(arr.shape)))
            example[name] = arr
            refs.append(arr)
    model = _model(nodes, inputs, outputs)
    return _artifact(build, "identity_all", model, {"example": (example, refs), "again": (example, refs)})


def _export_fail(build: Path) -> ExportRecord:
    x = np.zeros(2, np.float32)
    return _artifact(build, "no_model", None, {"example": ({"x": x}, [x])}, error_class="Unsupported", error_line="no")


@pytest.fixture
def matrix(tmp_path: Path) -> tuple[Path, Path, list[CellRecord], list[ExportRecord]]:
    build, results = tmp_path / "build", tmp_path / "results"
    div, frozen, future, ident, nomodel = (f(build) for f in (_floor_div, _frozen_batch, _future_ir, _identity_all, _export_fail))
    err = "[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got invalid dimensions for input: x for the following indices"
    cells = [
        *_cells(
            div,
            NEW,
            {"example": Status.PASS, "negative": Status.MISMATCH},
            error_line="2/3 elements differ, max abs 1",
            localization="first diverging node /Div (Div)",
            optimizer=False,
        ),
        *_cells(
            div,
            OLD,
            {"example": Status.PASS, "negative": Status.MISMATCH},
            error_line="2/3 elements differ, max abs 1",
            localization="first diverging node /Div (Div)",
            optimizer=False,
        ),
        *_cells(frozen, NEW, {"example": Status.PASS, "batch3": Status.RUN_FAIL}, error_line=err),
        *_cells(future, NEW, {"example": Status.LOAD_FAIL}, error_line="Unsupported model IR version: 99"),
        # Failed on an old runtime only (fixed since): the script passes on today's.
        *_cells(ident, OLD, {"example": Status.MISMATCH, "again": Status.CRASH}, optimizer=True),
        *_cells(ident, NEW, {"example": Status.PASS, "again": Status.PASS}),
        *_cells(nomodel, NEW, {"example": Status.EXPORT_FAIL}),
    ]
    return build, results, cells, [div, frozen, future, ident, nomodel]


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _run(script: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=120, cwd=script.parent.parent
    )


def _load(script: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"repro_{abs(hash(script))}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------------------------------------------------------------
# write_repros


def test_folders_of_failing_artifacts_only(matrix: tuple[Path, Path, list[CellRecord], list[ExportRecord]]) -> None:
    build, results, cells, exports = matrix
    written = write_repros(build, results, cells, exports, CONSTRAINTS)
    assert written == {
        "floor_div.dynamo.op17": "repro/floor_div.dynamo.op17",
        "frozen_batch.torchscript.op13": "repro/frozen_batch.torchscript.op13",
        "future_ir.dynamo.op17": "repro/future_ir.dynamo.op17",
        "identity_all.dynamo.op17": "repro/identity_all.dynamo.op17",
    }  # no_model: an export-fail has nothing to run
    assert sorted(p.name for p in (results / "repro").iterdir()) == sorted(written)
    for art_id, rel in written.items():
        folder = results / rel
        assert (folder / "model.onnx").read_bytes() == (build / "artifacts" / art_id / "model.onnx").read_bytes()

    frozen = results / "repro/frozen_batch.torchscript.op13"
    assert sorted(_tree(frozen)) == [
        "ISSUE.md",  # without the faults: each cell "undetermined", nothing to file
        "README.txt",
        "model.onnx",
        "repro.json",
        "repro.py",
        "test_data_set_0/input_0.pb",
        "test_data_set_0/output_0.pb",
        "test_data_set_0/probe.txt",
        "test_data_set_1/input_0.pb",  # unused_flag is not a graph input: not written
        "test_data_set_1/output_0.pb",
        "test_data_set_1/probe.txt",
    ]
    assert (frozen / "test_data_set_1/probe.txt").read_text() == "batch3\n"


def test_test_sets_parse_with_onnx_to_the_references(matrix: tuple[Path, Path, list[CellRecord], list[ExportRecord]]) -> None:
    build, results, cells, exports = matrix
    written = write_repros(build, results, cells, exports, CONSTRAINTS)
    for art_id, rel in written.items():
        rec = next(r for r in exports if r.key.id == art_id)
        model = onnx.load(results / rel / "model.onnx")
        graph_inputs = [v.name for v in model.graph.input]
        with np.load(build / "artifacts" / art_id / "reference.npz") as npz:
            ref = {k: npz[k] for k in npz.files}
        for k, probe in enumerate(rec.probes):
            folder = results / rel / f"test_data_set_{k}"
            assert (folder / "probe.txt").read_text().strip() == probe
            given = [n for n in graph_inputs if f"{probe}/in/{n}" in ref]
            for i, name in enumerate(given):
                proto = TensorProto()
                proto.ParseFromString((folder / f"input_{i}.pb").read_bytes())
                assert proto.name == name
                assert _same(numpy_helper.to_array(proto), ref[f"{probe}/in/{name}"])
            assert not (folder / f"input_{len(given)}.pb").exists()
            for i, out in enumerate(model.graph.output):
                proto = TensorProto()
                proto.ParseFromString((folder / f"output_{i}.pb").read_bytes())
                assert proto.name == out.name
                assert _same(numpy_helper.to_array(proto), ref[f"{probe}/out/{i}"])


def test_script_reads_onnx_written_tensors(
    matrix: tuple[Path, Path, list[CellRecord], list[ExportRecord]], tmp_path: Path
) -> None:
    """The script's own decoder, on what onnx writes (and on packed dims, which onnx's parser also takes)."""
    build, results, cells, exports = matrix
    write_repros(build, results, cells, exports, CONSTRAINTS)
    repro = _load(results / "repro/floor_div.dynamo.op17/repro.py")
    for dtype in DTYPES:
        for kind, arr in _samples(dtype).items():
            path = tmp_path / "t.pb"
            path.write_bytes(numpy_helper.from_array(arr.astype(arr.dtype.newbyteorder("=")), kind).SerializeToString())
            name, back = repro.read_tensor(path)
            assert name == kind and _same(back, arr) and back.flags.writeable, (dtype, kind)
    packed = bytes([0x0A, 3, 0x80, 0x01, 0, 0x10, 7, 0x42, 1, 0x70, 0x4A, 0])  # dims [128, 0] packed, int64, name "p"
    proto = TensorProto()
    proto.ParseFromString(packed)
    assert list(proto.dims) == [128, 0] and proto.name == "p"
    path = tmp_path / "packed.pb"
    path.write_bytes(packed)
    name, back = repro.read_tensor(path)
    assert name == "p" and _same(back, numpy_helper.to_array(proto))


def test_mismatch_reproduces_and_exits_1(matrix: tuple[Path, Path, list[CellRecord], list[ExportRecord]]) -> None:
    build, results, cells, exports = matrix
    write_repros(build, results, cells, exports, CONSTRAINTS)
    proc = _run(results / "repro/floor_div.dynamo.op17/repro.py")
    import onnxruntime

    lines = proc.stdout.splitlines()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"onnxruntime {onnxruntime.__version__}" in lines[0] and "atol 0.0, rtol 0.0" in lines[0]
    assert "graph optimizations on (the default)" in lines[0]
    assert lines[1] == "example: PASS"
    assert lines[2] == "negative: MISMATCH 2/3 elements differ, max abs diff 1"
    assert lines[3] == f"1 of 2 probes fail on onnxruntime {onnxruntime.__version__}: reproduced"
    # The graph optimizer is not to blame here, as the cell says.
    off = _run(results / "repro/floor_div.dynamo.op17/repro.py", "--disable-optimizations")
    assert off.returncode == 1 and "graph optimizations off (ORT_DISABLE_ALL)" in off.stdout.splitlines()[0]  # said


def test_run_fail_and_load_fail_reproduce(matrix: tuple[Path, Path, list[CellRecord], list[ExportRecord]]) -> None:
    build, results, cells, exports = matrix
    write_repros(build, results, cells, exports, CONSTRAINTS)
    proc = _run(results / "repro/frozen_batch.torchscript.op13/repro.py")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    assert out[1] == "example: PASS"
    assert out[2].startswith("batch3: RUN-FAIL ") and "Got invalid dimensions for input: x" in out[2]
    proc = _run(results / "repro/future_ir.dynamo.op17/repro.py")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[1].startswith("LOAD-FAIL: ") and "IR version" in proc.stdout


def test_fixed_on_this_runtime_exits_0(matrix: tuple[Path, Path, list[CellRecord], list[ExportRecord]]) -> None:
    """identity_all failed on an old runtime only: every dtype, scalar and empty tensor round-trips and passes here."""
    build, results, cells, exports = matrix
    write_repros(build, results, cells, exports, CONSTRAINTS)
    proc = _run(results / "repro/identity_all.dynamo.op17/repro.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[1:3] == ["example: PASS", "again: PASS"]
    assert "0 of 2 probes fail" in proc.stdout
    unavailable = _run(results / "repro/identity_all.dynamo.op17/repro.py", "--provider", "tensorrt")
    assert unavailable.returncode == 2 and "UNAVAILABLE" in unavailable.stdout


def test_readme_lists_the_cells_and_install_commands(matrix: tuple[Path, Path, list[CellRecord], list[ExportRecord]]) -> None:
    build, results, cells, exports = matrix
    write_repros(build, results, cells, exports, CONSTRAINTS)
    div = _load(results / "repro/floor_div.dynamo.op17/repro.py")
    doc = (results / "repro/floor_div.dynamo.op17/README.txt").read_text(encoding="utf-8")
    assert MARKER in doc
    assert "Probes (test_data_set_0, 1, ...): example, negative." in doc
    assert 'Gotcha: a // b of negatives; """quotes""" \\d' in doc  # intact in README.txt
    assert "- onnxruntime==1.17.3, onnxruntime==1.32.0 (cpu), probe negative: mismatch: 2/3 elements differ, max abs 1" in doc
    assert "    localization: first diverging node /Div (Div)" in doc
    assert "    optimizer: fails with graph optimizations disabled too" in doc
    assert '    pip install "onnxruntime==1.17.3" "numpy<2"\n    python repro.py\n' in doc
    assert '    pip install "onnxruntime==1.32.0" "numpy"\n    python repro.py\n' in doc  # the script imports numpy
    assert (div.ATOL, div.RTOL, div.ARTIFACT) == (0.0, 0.0, "floor_div.dynamo.op17")
    ident = (results / "repro/identity_all.dynamo.op17/README.txt").read_text(encoding="utf-8")
    assert "- onnxruntime==1.17.3 (cpu), probe again: crash: crash on again" in ident
    assert "optimizer: passes with graph optimizations disabled (the optimizer is to blame)" in ident
    assert "onnxruntime==1.32.0" not in ident  # it passed there: not a failing cell
    assert "A crash kills this process" in ident


def test_gpu_cells_reproduce_with_their_provider_and_native_tensorrt_with_polygraphy(tmp_path: Path) -> None:
    """A TensorRT-EP fp16 cell reproduces with `--provider tensorrt-fp16` (trt_fp16_enable); a native TensorRT
    cell, which onnxruntime cannot run, with Polygraphy's TensorRT runner at the engine's profile."""
    build, results = tmp_path / "build", tmp_path / "results"
    frozen = _frozen_batch(build)
    ep = frozen.cell("onnxruntime-gpu==1.31.1", "tensorrt-fp16", {})
    native = frozen.cell("tensorrt==10.13.3.9", "tensorrt-fp16", {}, engine={"profile": {"x": [[1, 3], [1, 3], [3, 3]]}})
    cells = [
        ep.replace(probe="batch3", status=Status.RUN_FAIL, stage=Stage.RUN, error_line="bad batch"),
        native.replace(probe="example", status=Status.MISMATCH, stage=Stage.COMPARE, error_line="1/3 elements differ"),
    ]
    write_repros(build, results, cells, [frozen], {})
    script = results / "repro/frozen_batch.torchscript.op13/repro.py"
    doc = (script.parent / "README.txt").read_text(encoding="utf-8")
    assert '    pip install "onnxruntime-gpu==1.31.1" "numpy"\n    python repro.py --provider tensorrt-fp16\n' in doc
    assert (
        '    pip install "tensorrt==10.13.3.9" "polygraphy"\n    polygraphy run model.onnx --trt --fp16'
        " --trt-min-shapes x:[1,3] --trt-opt-shapes x:[1,3] --trt-max-shapes x:[3,3]\n"
    ) in doc
    assert _load(script).PROVIDERS["tensorrt-fp16"] == ("TensorrtExecutionProvider", {"trt_fp16_enable": True})
    proc = _run(script, "--provider", "tensorrt-fp16")  # this onnxruntime has no TensorRT: said, exit 2
    assert proc.returncode == 2 and "UNAVAILABLE: TensorrtExecutionProvider is not in this onnxruntime" in proc.stdout


def test_scripts_are_one_module(matrix: tuple[Path, Path, list[CellRecord], list[ExportRecord]]) -> None:
    """Every repro.py is harness/publish/repro/_script.py byte for byte: what differs per folder is in repro.json
    and README.txt beside it."""
    build, results, cells, exports = matrix
    write_repros(build, results, cells, exports, CONSTRAINTS)
    module = Path(repro_package.__file__).parent / "_script.py"
    scripts = sorted((results / "repro").glob("*/repro.py"))
    assert len(scripts) == 4
    assert {p.read_bytes() for p in scripts} == {SCRIPT} == {module.read_bytes()}
    assert all(os.access(p, os.X_OK) for p in scripts)
    assert MARKER in SCRIPT.decode("utf-8")
    params = json.loads((results / "repro/floor_div.dynamo.op17/repro.json").read_text(encoding="utf-8"))
    assert (params["artifact"], params["atol"], params["rtol"], params["scaled"]) == ("floor_div.dynamo.op17", 0.0, 0.0, None)


def test_the_script_is_a_checked_module_of_the_package() -> None:
    """ruff and mypy check harness/, so they check the script; it imports nothing of the harness, and out of a
    reproducer folder (no repro.json beside it) it runs nothing and says so, exit 2."""
    from harness.publish.repro import _script

    module = Path(_script.__file__)
    assert module.read_bytes() == SCRIPT and module.is_relative_to(Path(repro_package.__file__).parent)
    assert "harness" not in {name.split(".")[0] for name in _imports(SCRIPT.decode("utf-8"))}
    assert (_script.ARTIFACT, _script.PROVIDERS, _script.main()) == ("", {}, 2)
    bin_dir = str(Path(sys.executable).parent)
    for tool, args in (("ruff", ["check", "--show-files", str(module.parent.parent.parent)]), ("mypy", [str(module)])):
        found = shutil.which(tool) or shutil.which(tool, path=bin_dir)
        if found is None:
            continue
        proc = subprocess.run([found, *args], capture_output=True, text=True, cwd=module.parents[3], timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert tool == "mypy" or str(module) in proc.stdout.splitlines()


def _imports(source: str) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_generated_script_is_ruff_clean(matrix: tuple[Path, Path, list[CellRecord], list[ExportRecord]]) -> None:
    ruff = shutil.which("ruff") or shutil.which("ruff", path=str(Path(sys.executable).parent))
    if ruff is None:
        pytest.skip("ruff is not installed")
    build, results, cells, exports = matrix
    write_repros(build, results, cells, exports, CONSTRAINTS)
    scripts = sorted(str(p) for p in (results / "repro").glob("*/repro.py"))
    rules = ["--select", "E,F,W,I,UP,B,SIM,RUF", "--ignore", "RUF001,RUF002,RUF003", "--target-version", "py38"]
    proc = subprocess.run([ruff, "check", "--isolated", "--line-length", "130", *rules, *scripts], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_rerun_is_byte_identical(matrix: tuple[Path, Path, list[CellRecord], list[ExportRecord]]) -> None:
    build, results, cells, exports = matrix
    write_repros(build, results, cells, exports, CONSTRAINTS)
    first = _tree(results)
    shuffled = list(cells)
    random.Random(1).shuffle(shuffled)
    assert write_repros(build, results, shuffled + shuffled[:3], list(reversed(exports)), dict(CONSTRAINTS))
    assert _tree(results) == first
    assert not [p for p in (results / "repro").iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_a_rerun_writes_the_same_folders_and_restores_edits(
    matrix: tuple[Path, Path, list[CellRecord], list[ExportRecord]],
) -> None:
    build, results, cells, exports = matrix
    write_repros(build, results, cells, exports, CONSTRAINTS)
    first = _tree(results)
    script = results / "repro/floor_div.dynamo.op17/repro.py"
    script.write_text("edited")
    (script.parent / "stray.txt").write_text("x")
    write_repros(build, results, cells, exports, CONSTRAINTS)
    assert _tree(results) == first


def test_a_reproducer_shares_no_inode_with_the_build_and_publishes_only_recorded_bytes(
    matrix: tuple[Path, Path, list[CellRecord], list[ExportRecord]],
) -> None:
    """Issue 26: reproducers hard-linked the artifact's files, so an edit in place of model.onnx reached the
    published folder; now each is a copy of bytes checked against the export's hashes as they are read."""
    build, results, cells, exports = matrix
    written = write_repros(build, results, cells, exports, CONSTRAINTS)
    for art_id, rel in written.items():
        src, published = build / "artifacts" / art_id / "model.onnx", results / rel / "model.onnx"
        assert published.read_bytes() == src.read_bytes() and not os.path.samefile(src, published)
    before = _tree(results)
    model = build / "artifacts" / "floor_div.dynamo.op17" / "model.onnx"
    model.write_bytes(model.read_bytes() + b"\x00")  # an edit in place, after the export recorded its hash
    with pytest.raises(HarnessError, match=r"floor_div\.dynamo\.op17/model\.onnx changed since the export wrote it"):
        write_repros(build, results, cells, exports, CONSTRAINTS)
    assert _tree(results) == before  # nothing published


def test_a_case_that_stopped_failing_loses_its_folder(matrix: tuple[Path, Path, list[CellRecord], list[ExportRecord]]) -> None:
    build, results, cells, exports = matrix
    write_repros(build, results, cells, exports, CONSTRAINTS)
    root = results / "repro"
    fixed = [c.replace(status=Status.PASS) if c.case == "floor_div" else c for c in cells]
    written = write_repros(build, results, fixed, exports, CONSTRAINTS)
    assert "floor_div.dynamo.op17" not in written
    assert sorted(p.name for p in root.iterdir()) == sorted(written)
    passing = [c.replace(status=Status.PASS) if c.status in FAILING else c for c in cells]
    assert write_repros(build, results, passing, exports, CONSTRAINTS) == {}
    assert not root.exists()  # no empty results/repro/ either
    assert not [p for p in results.parent.iterdir() if p.name.endswith(".tmp")]  # nor a temporary folder


def test_artifact_without_model_or_record_is_skipped(matrix: tuple[Path, Path, list[CellRecord], list[ExportRecord]]) -> None:
    build, results, cells, exports = matrix
    (build / "artifacts" / "frozen_batch.torchscript.op13" / "model.onnx").unlink()
    written = write_repros(build, results, cells, [r for r in exports if r.case != "future_ir"], CONSTRAINTS)
    assert sorted(written) == ["floor_div.dynamo.op17", "identity_all.dynamo.op17"]


def test_script_compare_rule(matrix: tuple[Path, Path, list[CellRecord], list[ExportRecord]]) -> None:
    """The same rule as harness.numeric.compare: tolerance on finite values, NaN meets NaN, inf meets inf of its sign."""
    build, results, cells, exports = matrix
    write_repros(build, results, cells, exports, CONSTRAINTS)
    repro = _load(results / "repro/identity_all.dynamo.op17/repro.py")
    f = np.float32
    nan, inf = np.nan, np.inf
    assert repro.compare([np.array([1.0, nan, inf, -inf], f)], [np.array([1.00005, nan, inf, -inf], f)]) is None
    assert repro.compare([np.array(2.0, f)], [np.array(2.0, f)]) is None  # 0-d
    assert repro.compare([np.zeros((0, 3), f)], [np.zeros((0, 3), f)]) is None
    assert (
        repro.compare([np.array([1.0, 2.0], f)], [np.array([nan, 2.0], f)])
        == "1/2 elements differ, NaN: expected 0, got 1, max abs diff 0"
    )
    assert repro.compare([np.array([inf], f)], [np.array([-inf], f)]) == "1/1 elements differ"
    assert repro.compare([np.array([100.0], f)], [np.array([100.25], f)]) == "1/1 elements differ, max abs diff 0.25"
    assert repro.compare([np.zeros(2, f)], [np.zeros(3, f)]) == "output 0: shape (3,), expected (2,)"
    assert repro.compare([np.zeros(2, np.int64)], [np.zeros(2, np.int32)]) == "output 0: dtype int32, expected int64"
    assert repro.compare([np.zeros(2, f)], []) == "0 outputs, expected 1"
    assert (
        repro.compare([np.array([1 + 1j], np.complex64)], [np.array([1 + 2j], np.complex64)])
        == "1/2 elements differ, max abs diff 1"
    )


def test_a_refusal_the_frontier_explains_shares_the_frontiers_own_model(
    matrix: tuple[Path, Path, list[CellRecord], list[ExportRecord]],
) -> None:
    """Two artifacts of IR 13 / opset 17, refused at load only where the runtime loads up to IR 10 (the frontier says
    so), share ``repro/frontier/ir13.op17/``: the frontier's one-node model, no copy of theirs; an artifact that also
    fails for another reason keeps a folder of its own, and so does one whose refusal the frontier does not explain."""
    from harness.store import frontier

    build, results, cells, exports = matrix
    frontier.write_models(build)
    f32 = TensorProto.FLOAT
    io_ = ([helper.make_tensor_value_info("x", f32, [2])], [helper.make_tensor_value_info("y", f32, [2])])
    x = np.array([1.0, -2.0], np.float32)
    newer = [
        _artifact(
            build, name, _model([helper.make_node("Neg", ["x"], ["y"])], *io_, ir_version=13), {"example": ({"x": x}, [-x])}
        )
        for name in ("newer_a", "newer_b")
    ]
    refused = "Unsupported model IR version: 13, max supported IR version: 10"
    more = [c for rec in newer for c in _cells(rec, OLD, {"example": Status.LOAD_FAIL}, error_line=refused)]
    loads = {OLD: {"runtime": OLD, "max_ir": 10, "max_opset": 21}, NEW: {"runtime": NEW, "max_ir": 11, "max_opset": 25}}
    written = write_repros(build, results, [*cells, *more], [*exports, *newer], CONSTRAINTS, loads=loads)

    assert written["newer_a.dynamo.op17"] == written["newer_b.dynamo.op17"] == "repro/frontier/ir13.op17"
    assert written["future_ir.dynamo.op17"] == "repro/future_ir.dynamo.op17", "IR 99: no frontier model stands for it"
    assert written["floor_div.dynamo.op17"] == "repro/floor_div.dynamo.op17", "a mismatch keeps its own model"
    shared = results / "repro" / "frontier" / "ir13.op17"
    assert (shared / "model.onnx").read_bytes() == (frontier.models_dir(build) / "ir13.op17.onnx").read_bytes()
    assert not (results / "repro" / "newer_a.dynamo.op17").exists()
    text = (shared / "README.txt").read_text()
    assert "newer_a.dynamo.op17, newer_b.dynamo.op17" in text and f"- {OLD}: 2 artifacts" in text
    assert 'pip install "onnxruntime==1.17.3" "numpy<2"' in text
    # the folder is a reproducer like the others: its script runs its model on the installed runtime
    proc = _run(shared / "repro.py")
    assert proc.returncode in (0, 1) and ("LOAD-FAIL" in proc.stdout) == (proc.returncode == 1), proc.stdout + proc.stderr
