"""Localizing mismatches (harness.numeric.localize): real torch exports, real onnxruntime, no mocks."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest

torch = pytest.importorskip("torch")  # the export side runs here: its environment holds torch

from onnx import TensorProto, helper  # noqa: E402

from harness.cases import corpus  # noqa: E402
from harness.export import node_values as export_side  # noqa: E402
from harness.numeric import localize  # noqa: E402

pytestmark = pytest.mark.torch  # exports with real torch: `nox -s tests`, not `nox -s unit`


ROOT = Path(__file__).resolve().parent.parent
ATOL, RTOL = 1e-4, 1e-3


class Net(torch.nn.Module):
    """Several top-level nodes, a multi-output op (max with indices) and an integer path."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)
        self.lin = torch.nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = torch.relu(self.conv(x)).mean((2, 3))
        y = torch.tanh(self.lin(h)) * 2 - 1
        top, idx = torch.max(y, dim=1)
        return y.softmax(-1), top, idx + 1


class MaskedAttention(torch.nn.Module):
    """Linear → SDPA with a boolean mask → relu → scale → flatten: torch and the dynamo graph part
    ways at the SDPA when a query row is fully masked (the graph turns the mask into a finite bias)."""

    def __init__(self) -> None:
        super().__init__()
        self.q = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        a = torch.nn.functional.scaled_dot_product_attention(self.q(x), x, x, attn_mask=mask)
        return (a.relu() * 2).view(x.shape[0], -1)


def _seeded(module: torch.nn.Module) -> torch.nn.Module:
    torch.manual_seed(0)
    for p in module.parameters():
        p.data = torch.randn_like(p) * 0.5
    return module.eval()


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """What the export stage does around an exporter: its prints and warnings (the TorchScript exporter's
    deprecation, TracerWarnings) are the export record's business, not these tests'."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _export(model: torch.nn.Module, inputs: dict[str, torch.Tensor], exporter: str, path: Path, dynamic: Any = None) -> Any:
    """Export as the harness does (inputs named after forward()'s parameters, outputs out0, out1, ...);
    return the ONNXProgram for dynamo, None for TorchScript."""
    args = tuple(inputs.values())
    with torch.no_grad():
        outs = model(*args)
    names = [f"out{i}" for i in range(len(outs) if isinstance(outs, tuple) else 1)]
    with _quiet():
        if exporter == "torchscript":
            torch.onnx.export(
                model, args, str(path), dynamo=False, opset_version=18, input_names=list(inputs), output_names=names
            )
            return None
        program = torch.onnx.export(
            model,
            args,
            dynamo=True,
            opset_version=18,
            input_names=list(inputs),
            output_names=names,
            dynamic_shapes=dynamic,
            external_data=False,
        )
        assert program is not None
        program.save(str(path), external_data=False)
        return program


def _session(path: Path | bytes) -> Any:
    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    src = path if isinstance(path, bytes) else str(path)
    return onnxruntime.InferenceSession(src, sess_options=so, providers=["CPUExecutionProvider"])


def _feeds(sess: Any, args: tuple[Any, ...]) -> dict[str, np.ndarray]:
    return {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args, strict=True)}


def _write_reference(art: Path, probes: dict[str, dict[str, torch.Tensor]], model: torch.nn.Module) -> None:
    """reference.npz as the export stage writes it: every probe's inputs and torch's outputs."""
    arrays = {}
    for probe, inputs in probes.items():
        with torch.no_grad():
            outs = model(*inputs.values())
        outs = outs if isinstance(outs, tuple) else (outs,)
        arrays.update({f"{probe}/in/{n}": v.numpy() for n, v in inputs.items()})
        arrays.update({f"{probe}/out/{i}": v.numpy() for i, v in enumerate(outs)})
    np.savez(art / "reference.npz", **arrays)  # type: ignore[arg-type]


# --- the module itself --------------------------------------------------------------------------


def test_imports_in_a_numpy_only_environment() -> None:
    code = (
        "import sys, harness.numeric.localize; print(sorted({'torch', 'onnx', 'onnxruntime', 'onnxscript'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- debug_model ----------------------------------------------------------------------------------


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_debug_model_exposes_every_node_output(exporter: str, tmp_path: Path) -> None:
    model = _seeded(Net())
    x = torch.randn(2, 3, 8, 8)
    _export(model, {"x": x}, exporter, tmp_path / "model.onnx")
    plain = onnx.load(str(tmp_path / "model.onnx"))
    debug, nodes = export_side.debug_model(plain)

    # The original is untouched, the copy keeps its IR version, opsets and outputs (first, in order).
    assert len(plain.graph.output) == 3
    assert debug.ir_version == plain.ir_version and list(debug.opset_import) == list(plain.opset_import)
    assert [o.name for o in debug.graph.output[:3]] == [o.name for o in plain.graph.output]
    exposed = [o.name for o in debug.graph.output[3:]]
    assert exposed and len(exposed) == len(set(exposed))
    # nodes: graph order, one entry per top-level node, every exposed value listed under its producer.
    assert [n["outputs"] for n in nodes] == [[o for o in node.output if o] for node in plain.graph.node]
    assert [n["op"] for n in nodes] == [node.op_type for node in plain.graph.node]
    listed = {o for n in nodes for o in n["outputs"]}
    assert set(exposed) <= listed
    assert {o.name for o in plain.graph.output} <= listed
    if exporter == "dynamo":  # the FX node each ONNX node came from
        assert "relu" in {n.get("fx") for n in nodes}

    # It loads and runs; its own outputs are exactly the plain model's.
    want = _session(tmp_path / "model.onnx").run(None, {"x": x.numpy()})
    sess = _session(debug.SerializeToString())
    got = localize.run_values(sess, _feeds(sess, (x,)))
    assert set(got) == {o.name for o in debug.graph.output}
    for w, o in zip(want, plain.graph.output, strict=True):
        np.testing.assert_array_equal(got[o.name], w)
    # And an exposed intermediate is what it claims to be: the relu's output is non-negative, not all zero.
    relu = next(n["outputs"][0] for n in nodes if n["op"] == "Relu")
    assert (got[relu] >= 0).all() and got[relu].any()


def test_debug_model_names_types_and_skips() -> None:
    """Unnamed nodes, non-ai.onnx domains, empty optional outputs, bfloat16 values, types unknown to onnx."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),  # no name
        helper.make_node("Dropout", ["a"], ["b", ""], name="drop"),  # empty optional output
        helper.make_node("Gelu", ["b"], ["g"], name="gelu", domain="com.microsoft"),  # onnx does not know its type
        helper.make_node("Cast", ["g"], ["h16"], name="to_bf16", to=TensorProto.BFLOAT16),  # numpy cannot hold it
        helper.make_node("Cast", ["h16"], ["h"], name="back", to=TensorProto.FLOAT),
        helper.make_node("Neg", ["h"], ["y"], name="neg"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    debug, listed = export_side.debug_model(model)

    assert [n["name"] for n in listed] == ["#0", "drop", "gelu", "to_bf16", "back", "neg"]
    assert listed[2]["op"] == "com.microsoft::Gelu"
    assert listed[1]["outputs"] == ["b"]
    outputs = {o.name: o for o in debug.graph.output}
    assert list(outputs) == ["y", "a", "b", "g", "h"]  # h16 (bfloat16) is not exposed
    assert outputs["a"].type.tensor_type.elem_type == TensorProto.FLOAT  # typed from shape inference
    assert not outputs["g"].HasField("type")  # unknown to onnx: left to the runtime
    sess = _session(debug.SerializeToString())
    assert localize.unreadable_outputs(sess) == []
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    got = localize.run_values(sess, {"x": x})
    np.testing.assert_array_equal(got["a"], np.maximum(x, 0))
    assert export_side.debug_model(model, exclude=["a"])[0].graph.output[1].name == "b"


def test_debug_model_leaves_functions_and_subgraphs_closed() -> None:
    """A model-local function call and an If are nodes like any other: their outputs are exposed, their insides not."""
    add_relu = helper.make_function(
        "custom",
        "AddRelu",
        ["a", "b"],
        ["c"],
        [helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["c"])],
        [helper.make_opsetid("", 18)],
    )
    info = helper.make_tensor_value_info
    then = helper.make_graph([helper.make_node("Identity", ["z"], ["t"])], "then", [], [info("t", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Neg", ["z"], ["e"])], "else", [], [info("e", TensorProto.FLOAT, None)])
    nodes = [
        helper.make_node("AddRelu", ["x", "x"], ["y"], domain="custom", name="call"),
        helper.make_node("Neg", ["y"], ["z"], name="neg"),
        helper.make_node("If", ["cond"], ["w"], name="branch", then_branch=then, else_branch=other),
    ]
    inputs = [info("x", TensorProto.FLOAT, [2]), info("cond", TensorProto.BOOL, [])]
    graph = helper.make_graph(nodes, "g", inputs, [info("w", TensorProto.FLOAT, None)])
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("custom", 1)]
    model = helper.make_model(graph, opset_imports=opsets, functions=[add_relu])
    model.ir_version = 8
    debug, listed = export_side.debug_model(model)
    assert [(n["name"], n["op"]) for n in listed] == [("call", "custom::AddRelu"), ("neg", "Neg"), ("branch", "If")]
    assert [o.name for o in debug.graph.output] == ["w", "y", "z"]
    got = localize.run_values(_session(debug.SerializeToString()), {"x": np.array([1, -2], np.float32), "cond": np.array(False)})
    np.testing.assert_array_equal(got["y"], [2, 0])
    np.testing.assert_array_equal(got["w"], [2, 0])


# --- intermediates.npz ----------------------------------------------------------------------------


def test_intermediates_round_trip(tmp_path: Path) -> None:
    values = {
        "example": {
            "/conv/Conv_output_0": np.arange(6, dtype=np.float32).reshape(2, 3),
            "onnx::Mul_3": np.array(2.5, dtype=np.float16),
            "lin.weight.T": np.array([[True, False]]),
            "val_7:0": np.array([-(2**40)], dtype=np.int64),
            "__names__": np.zeros(0),
        },
        "batch3": {"x": np.ones((3, 1), dtype=np.float64)},
    }
    path = tmp_path / "intermediates.npz"
    localize.save_intermediates(path, values)
    for probe, named in values.items():
        back = localize.load_intermediates(path, probe)
        assert list(back) == list(named)
        for name, arr in named.items():
            assert back[name].dtype == arr.dtype and back[name].shape == arr.shape
            np.testing.assert_array_equal(back[name], arr)
    assert localize.load_intermediates(path, "missing") == {}
    with pytest.raises(ValueError, match="contains '/'"):
        localize.save_intermediates(path, {"a/b": {}})


def _tiny(tmp_path: Path, op: str = "Relu") -> Path:
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["a"], name="first"), helper.make_node("Neg", ["a"], ["y"], name="second")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    debug, _ = export_side.debug_model(model)
    path = tmp_path / f"{op}.debug.onnx"
    onnx.save(debug, str(path))
    return path


def test_run_reference_writes_every_probe_it_can_run(tmp_path: Path) -> None:
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    feeds = {"example": {"x": x, "unused": x}, "wrong_shape": {"x": np.ones((3, 3), dtype=np.float32)}}
    out = tmp_path / "intermediates.npz"
    assert export_side.run_reference(_tiny(tmp_path), feeds, out, timeout=60) is None
    values = localize.load_intermediates(out, "example")
    assert list(values) == ["y", "a"]
    np.testing.assert_array_equal(values["a"], np.maximum(x, 0))
    np.testing.assert_array_equal(values["y"], -np.maximum(x, 0))
    assert localize.load_intermediates(out, "wrong_shape") == {}  # the reference cannot run it: no values, no failure
    # A model the reference refuses: one line, no file.
    problem = export_side.run_reference(_tiny(tmp_path, "NoSuchOp"), feeds, tmp_path / "none.npz", timeout=60)
    assert problem is not None and problem.startswith("cannot load the debug model: ") and "NoSuchOp" in problem
    assert not (tmp_path / "none.npz").exists()


def test_first_output_mismatch_names_the_output_and_its_node() -> None:
    nodes = [{"name": "first", "op": "Relu", "outputs": ["a"]}, {"name": "second", "op": "Neg", "outputs": ["y"]}]
    want = [np.ones(3, dtype=np.float32), np.zeros(2, dtype=np.float32)]
    assert localize.first_output_mismatch(nodes, ["a", "y"], want, want, atol=ATOL, rtol=RTOL) is None
    got = [want[0], np.array([0.0, np.nan], dtype=np.float32)]
    line = localize.first_output_mismatch(nodes, ["a", "y"], got, want, atol=ATOL, rtol=RTOL)
    assert line == "output y of node second (Neg): 1/2 elements differ, NaN: torch 0, runtime 1, max abs 0"
    assert localize.first_output_mismatch(nodes, ["a"], got[:1], want, atol=ATOL, rtol=RTOL) == "the graph has 1 outputs, torch 2"


# --- first_divergence (numpy only) ----------------------------------------------------------------


NODES = [
    {"name": "n0", "op": "MatMul", "outputs": ["a"]},
    {"name": "n1", "op": "TopK", "outputs": ["v", "i"]},
    {"name": "n2", "op": "Max", "outputs": ["m"]},
    {"name": "n3", "op": "Add", "outputs": ["out0"]},
]


def _values(**changes: np.ndarray) -> dict[str, np.ndarray]:
    base = {
        "a": np.array([1.0, 2.0, 3.0], dtype=np.float32),
        "v": np.array([3.0, np.nan], dtype=np.float32),
        "i": np.array([2, 0], dtype=np.int64),
        "m": np.array([np.inf, 1.0], dtype=np.float32),
        "out0": np.array([4.0, 5.0], dtype=np.float32),
    }
    return {**base, **changes}


def test_first_divergence_semantics() -> None:
    want = _values()
    assert localize.first_divergence(NODES, _values(), want, atol=ATOL, rtol=RTOL) is None  # NaN meets NaN, inf meets inf
    # Within tolerance is not a divergence; the first differing node in graph order wins.
    got = _values(a=want["a"] + 1e-5, i=np.array([2, 1]), out0=np.array([0.0, 0.0], dtype=np.float32))
    found = localize.first_divergence(NODES, got, want, atol=ATOL, rtol=RTOL)
    assert found == {"node": "n1", "op": "TopK", "output": "i", "index": 1, "detail": "1/2 elements differ, max abs 1, max rel 0"}
    # NaN on one side only, however loose the tolerance.
    found = localize.first_divergence(NODES, _values(v=np.array([3.0, 7.0], dtype=np.float32)), want, atol=1e9, rtol=1e9)
    assert found is not None and found["output"] == "v" and "NaN: reference 1, runtime 0" in found["detail"]
    # inf of the other sign; shape and dtype differences count.
    found = localize.first_divergence(NODES, _values(m=np.array([-np.inf, 1.0], dtype=np.float32)), want, atol=ATOL, rtol=RTOL)
    assert found is not None and found["node"] == "n2"
    found = localize.first_divergence(NODES, _values(a=np.ones((1, 3), dtype=np.float32)), want, atol=ATOL, rtol=RTOL)
    assert found is not None and found["detail"] == "shape (1, 3), reference (3,)"
    found = localize.first_divergence(NODES, _values(i=np.array([2, 0], dtype=np.int32)), want, atol=ATOL, rtol=RTOL)
    assert found is not None and found["detail"] == "dtype int32, reference int64"
    # Values missing on either side are not compared; 0-d values are.
    assert localize.first_divergence(NODES, {"a": want["a"] + 1}, {"v": want["v"]}, atol=ATOL, rtol=RTOL) is None
    found = localize.first_divergence(NODES, {"m": np.float32(2.0)}, {"m": np.float32(1.0)}, atol=ATOL, rtol=RTOL)
    assert found is not None and found["node"] == "n2"


def test_a_node_within_fp32_noise_is_not_where_a_mismatch_starts() -> None:
    """n0's output is off by 2e-3 on values up to 1000 (2e-6 of its scale): beyond atol + rtol * |ref| near zero,
    within `scaled`. The mismatch starts at n1; the line says the nodes before it differ only within fp32 noise."""
    want = _values(a=np.array([1000.0, 0.0, 3.0], dtype=np.float32))
    got = _values(a=np.array([1000.0, 2e-3, 3.0], dtype=np.float32), i=np.array([2, 1]))
    assert localize.first_divergence(NODES, got, want, atol=ATOL, rtol=RTOL)["node"] == "n0"  # element-wise only
    noise: dict[str, object] = {}
    found = localize.first_divergence(NODES, got, want, atol=ATOL, rtol=RTOL, scaled=1e-5, noise=noise)
    assert found is not None and found["node"] == "n1"
    assert noise["node"] == "n0" and noise["error"] == pytest.approx(2e-6, rel=1e-3)
    line = localize.describe_localization({"runtime": found, "noise": noise})
    assert line.endswith(
        "(the nodes before it differ only within fp32 noise, the first at node n0 (MatMul): error 2e-06 of its largest |value|)"
    )
    only = localize.describe_localization({"noise": noise, "across_nodes": "x"})
    assert only.startswith("every node is within fp32 noise of the reference (the first to differ at all: node n0 (MatMul)")


# --- the runtime side, end to end: prepare() at export time, localize_cell() at run time ----------


def _lower_relu(model: onnx.ModelProto) -> onnx.ModelProto:
    """The same graph with its Relu made a LeakyRelu: a planted difference at a known node."""
    changed = onnx.ModelProto()
    changed.CopyFrom(model)
    relu = next(n for n in changed.graph.node if n.op_type == "Relu")
    relu.op_type = "LeakyRelu"
    relu.attribute.append(helper.make_attribute("alpha", 0.5))
    return changed


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_localize_cell_names_the_planted_node(exporter: str, tmp_path: Path) -> None:
    model = _seeded(Net())
    probes = {"example": {"x": torch.randn(2, 3, 8, 8)}, "other": {"x": torch.randn(2, 3, 8, 8) + 1}}
    program = _export(model, probes["example"], exporter, tmp_path / "model.onnx")
    _write_reference(tmp_path, probes, model)

    info = export_side.prepare(
        tmp_path, probes, atol=ATOL, rtol=RTOL, exported_program=program.exported_program if program else None
    )
    assert info["error"] is None and info["exposed"] > 3
    assert info["probes"] == {"example": {"reference": "ok"}, "other": {"reference": "ok"}}  # no torch side needed
    assert json.loads((tmp_path / localize.LOCALIZATION).read_text())["probes"] == info["probes"]
    nodes = json.loads((tmp_path / localize.NODES).read_text())
    assert nodes == export_side.debug_model(onnx.load(str(tmp_path / "model.onnx")))[1]
    assert (
        {"out0", "out1", "out2", *(o for n in nodes for o in n["outputs"])}
        >= set(localize.load_intermediates(tmp_path / localize.INTERMEDIATES, "other"))
        >= {"out0", "out1", "out2"}
    )

    ref = np.load(tmp_path / "reference.npz")
    feeds = {n: ref[f"other/in/{n}"] for n in probes["other"]}
    relu = next(n for n in nodes if n["op"] == "Relu")
    # The unchanged debug model on this runtime agrees with the reference everywhere.
    assert "runtime" not in localize.localize_cell(onnxruntime, tmp_path, "other", feeds, atol=ATOL, rtol=RTOL)

    # A "runtime" that computes the Relu differently: the first divergence is the Relu, not what follows.
    changed, _ = export_side.debug_model(_lower_relu(onnx.load(str(tmp_path / "model.onnx"))))
    onnx.save(changed, str(tmp_path / localize.DEBUG_MODEL))
    loc = localize.localize_cell(onnxruntime, tmp_path, "other", feeds, atol=ATOL, rtol=RTOL)
    assert set(loc) == {"runtime"}
    assert loc["runtime"]["node"] == relu["name"] and loc["runtime"]["output"] == relu["outputs"][0]
    assert loc["runtime"]["op"] == "Relu" and "elements differ" in loc["runtime"]["detail"]
    line = localize.describe_localization(loc)
    assert line.startswith(f"starts at node {relu['name']} (Relu)")
    if exporter == "dynamo":
        assert loc["runtime"]["fx"] == "relu" and "(FX relu)" in line


# --- the torch side (dynamo) ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def attention(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, onnx.ModelProto, Any]:
    """MaskedAttention exported by dynamo (batch dynamic, the rest static) and its debug model's reference session."""
    path = tmp_path_factory.mktemp("attention") / "model.onnx"
    x = torch.randn(2, 1, 4, 8)
    mask = torch.ones(4, 4, dtype=torch.bool)
    dynamic = ({0: torch.export.Dim.DYNAMIC}, None)
    program = _export(_seeded(MaskedAttention()), {"x": x, "mask": mask}, "dynamo", path, dynamic=dynamic)
    plain = onnx.load(str(path))
    debug, _ = export_side.debug_model(plain)
    return program, plain, _session(debug.SerializeToString())


def test_fx_names_are_onnx_value_names(attention: tuple[Any, onnx.ModelProto, Any]) -> None:
    """On a probe where graph and torch agree, every FX value with an ONNX namesake agrees with it."""
    program, plain, sess = attention
    x, mask = torch.randn(3, 1, 4, 8), torch.ones(4, 4, dtype=torch.bool)
    reference = localize.run_values(sess, _feeds(sess, (x, mask)))
    aliases = export_side.fx_aliases(plain)
    assert aliases == {"view": "out0"}  # output_names renamed the FX output 'view'; the metadata remembers
    values = export_side.torch_values(program.exported_program, (x, mask), aliases)
    shared = [n for n in values if n in reference]
    # FX order; values the optimizer folded away (the constant 2) have no ONNX namesake.
    assert shared == ["linear", "scaled_dot_product_attention", "relu", "mul_6", "out0"]
    found = export_side.torch_divergence(program.exported_program, (x, mask), reference, atol=ATOL, rtol=RTOL, aliases=aliases)
    assert found is None


def test_torch_divergence_matches_renamed_outputs_by_position(attention: tuple[Any, onnx.ModelProto, Any]) -> None:
    """Without aliases, the program's outputs meet the reference's first values (the debug model's graph outputs)."""
    program, _, sess = attention
    x, mask = torch.randn(2, 1, 4, 8), torch.ones(4, 4, dtype=torch.bool)
    reference = localize.run_values(sess, _feeds(sess, (x, mask)))
    assert next(iter(reference)) == "out0"
    reference["out0"] = reference["out0"] + 1  # only the final view differs
    found = export_side.torch_divergence(program.exported_program, (x, mask), reference, atol=ATOL, rtol=RTOL)
    assert found is not None and (found["value"], found["fx"], found["target"]) == ("out0", "view", "aten.view.default")
    assert localize.describe_torch(found).startswith("the graph differs from torch from FX value view (out0) = aten.view.default")


def test_torch_divergence_names_the_first_differing_value(attention: tuple[Any, onnx.ModelProto, Any]) -> None:
    program, plain, sess = attention
    x, mask = torch.randn(2, 1, 4, 8), torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False  # query row 1 attends to nothing: torch gives zeros, the graph a uniform average
    reference = localize.run_values(sess, _feeds(sess, (x, mask)))
    found = export_side.torch_divergence(
        program.exported_program, (x, mask), reference, atol=ATOL, rtol=RTOL, aliases=export_side.fx_aliases(plain)
    )
    assert found is not None
    assert found["value"] == "scaled_dot_product_attention"  # not linear before it, not relu/mul/view after it
    assert found["target"] == "aten.scaled_dot_product_attention.default"
    assert found["detail"].startswith("16/64 elements differ")


def test_torch_divergence_reports_a_failed_guard(attention: tuple[Any, onnx.ModelProto, Any]) -> None:
    program, _, sess = attention
    x, mask = torch.randn(2, 1, 4, 8), torch.ones(4, 4, dtype=torch.bool)
    reference = localize.run_values(sess, _feeds(sess, (x, mask)))
    wide = torch.randn(2, 3, 4, 8)  # dim 1 was not declared dynamic: the export specialized it to 1
    found = export_side.torch_divergence(program.exported_program, (wide, mask), reference, atol=ATOL, rtol=RTOL)
    assert found == {"guard": "Guard failed: x.size()[1] == 1"}
    with pytest.raises(export_side.GuardFailure):
        export_side.torch_values(program.exported_program, (wide, mask))
    line = localize.describe_localization({"graph": "8/8 elements differ", "torch": found})
    assert line == "the probe breaks the export's guards: Guard failed: x.size()[1] == 1"


def _corpus_artifact(name: str, art: Path) -> tuple[corpus.Case, dict[str, Any]]:
    """A corpus case exported by dynamo at opset 18 as the harness does, with prepare() run on it."""
    case = corpus.load(["models.articles", "models.tracing", "models.attention"], ROOT)[name]
    model = case.model().eval()
    example = dict(case.inputs())
    probes = case.all_probes()
    dyn = torch.export.Dim.DYNAMIC
    shapes = tuple({d: dyn for d in case.dynamic[n]} if n in case.dynamic else None for n in example) if case.dynamic else None
    with _quiet():
        program = torch.onnx.export(
            model, tuple(example.values()), dynamo=True, opset_version=18, output_names=["out0"], dynamic_shapes=shapes
        )
    assert program is not None
    program.save(str(art / "model.onnx"), external_data=False)
    _write_reference(art, probes, model)
    # The tolerance as the export stage hands it on (ExportRecord.tolerance): per-output settings included.
    tolerance = {"atol": ATOL, "rtol": RTOL, "scaled": 1e-5, "outputs": {}}
    return case, export_side.prepare(art, probes, **tolerance, exported_program=program.exported_program)


def test_prepare_localizes_nan_chain_to_the_division(tmp_path: Path) -> None:
    """Corpus case nan_chain, probe constant_row: torch's std is exactly 0, so its division gives inf
    (then NaN); the graph's std keeps a rounding residue and stays finite. The first differing value
    is the division, upstream of the masked_fill and softmax where the NaN shows."""
    _, info = _corpus_artifact("nan_chain", tmp_path)
    row = info["probes"]["constant_row"]
    assert row["reference"] != "ok"
    assert row["torch"]["value"] == "div" and row["torch"]["target"] == "aten.div.Tensor"
    assert "inf: torch" in row["torch"]["detail"]
    assert info["probes"]["example"] == {"reference": "ok"}
    # A runtime that agrees with the reference: the cell's line says the graph is wrong, and where.
    ref = np.load(tmp_path / "reference.npz")
    feeds = {n: ref[f"constant_row/in/{n}"] for n in ("x", "mask")}
    loc = localize.localize_cell(onnxruntime, tmp_path, "constant_row", feeds, atol=ATOL, rtol=RTOL)
    assert "runtime" not in loc and loc["torch"]["value"] == "div"
    assert localize.describe_localization(loc).startswith("the graph differs from torch from FX value div = aten.div.Tensor")


def test_prepare_blames_the_capture_when_the_program_differs_from_eager(tmp_path: Path) -> None:
    """Corpus case split_count_frozen, probe width12: torch.export unrolled the Python list of splits at
    the example's width, so the exported program itself returns 2 groups; the graph agrees with it."""
    _, info = _corpus_artifact("split_count_frozen", tmp_path)
    assert info["probes"]["width12"]["torch"] == {"capture": "output 0: shape (2, 2), eager (2, 3)"}
    assert "error" in info["probes"]["width4"]  # the reference runtime cannot run that probe at all (a run-fail cell)


def test_prepare_blames_the_capture_of_values_the_same_shape_as_eagers(tmp_path: Path) -> None:
    """Corpus case transformer_encoder_padding: torch.export traces the encoder's fast path off, so the program
    (and the graph, which agrees with it) pad where eager torch's nested tensors do not: same shapes, other values."""
    _, info = _corpus_artifact("transformer_encoder_padding", tmp_path)
    found = info["probes"]["example"]["torch"]
    assert set(found) == {"capture"} and "elements differ" in found["capture"], found
