"""What a republish from another folder leaves unchanged: reproducer models without the checkout's paths
(harness.publish.repro._portable), case pages without the timings each run measures again (results/timing.md).

The rewrite is checked with the real ``onnx`` (it parses the bytes, its checker accepts them, and nothing but
the stack-trace paths differs), on real dynamo exports of one module from two folders, and in a real report.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper

from harness.core.errors import HarnessError
from harness.core.records import Status
from harness.publish.markdown import TIMING
from harness.publish.repro import ZEROS, write_repros
from harness.publish.repro._portable import ROOT, portable, portable_path
from tests.artifacts import fault_corpus
from tests.test_reliability import _harness, _matrix, _report
from tests.test_repro import NEW, _artifact, _cells, _model

STACK = "pkg.torch.onnx.stack_trace"
FRAME = re.compile(r'File "([^"]*)"')


def _trace(*paths: str) -> str:
    """A stack trace as the dynamo exporter writes it: one ``File "<path>", line N, in f`` line per frame."""
    return "\n".join(f'File "{p}", line {i + 3}, in forward\n    return self.f(x)' for i, p in enumerate(paths))


def _meta(node: onnx.NodeProto, *paths: str) -> onnx.NodeProto:
    node.metadata_props.add(key=STACK, value=_trace(*paths))
    node.metadata_props.add(key="pkg.torch.onnx.name_scopes", value="['', 'fc']")
    return node


def _crafted(path: Callable[[str], str], root: Path) -> onnx.ModelProto:
    """A model with a stack trace wherever a dynamo export (or a later one) can put one: the nodes of the graph,
    of an ``If``'s branches, of a list of subgraphs, of a function; the metadata and doc strings of the model, the
    graph and the function. Each path goes through ``path`` (the identity: as exported; :func:`portable_path`: as
    published). Raw data that happens to spell a path is weights, left alone."""
    paths = (
        f"{root}/models/_dtypes_nets.py",
        f"{root}/.nox/export/lib/python3.11/site-packages/torch/nn/modules/linear.py",
        "/opt/conda/lib/python3.11/site-packages/transformers/modeling_utils.py",
        "/elsewhere/my_models.py",
        "C:\\Users\\me\\site-packages\\torch\\nn\\functional.py",
        "torch/fx/passes/runtime_assert.py",
        "<eval_with_key>.3",
    )
    mine = [path(p) for p in paths]
    f32, b = TensorProto.FLOAT, TensorProto.BOOL

    def branch(name: str) -> onnx.GraphProto:
        out = helper.make_tensor_value_info(f"{name}_y", f32, [2])
        return helper.make_graph([_meta(helper.make_node("Identity", ["h"], [f"{name}_y"]), *mine[:2])], name, [], [out])

    body = [
        _meta(helper.make_node("Relu", ["x"], ["h"], name="relu", doc_string=_trace(mine[0])), *mine),
        _meta(helper.make_node("If", ["c"], ["y"], then_branch=branch("then"), else_branch=branch("else")), mine[3]),
        helper.make_node("F", ["h"], ["z"], domain="custom"),
        _meta(helper.make_node("Loops", ["h"], ["w"], domain="other", bodies=[branch("b1"), branch("b2")]), mine[1]),
    ]
    weights = helper.make_tensor("raw", TensorProto.UINT8, [18], b'File "/abs/p.py" x', raw=True)
    graph = helper.make_graph(
        body,
        "g",
        [helper.make_tensor_value_info("x", f32, [2]), helper.make_tensor_value_info("c", b, [])],
        [helper.make_tensor_value_info(n, f32, [2]) for n in ("y", "z", "w")],
        [weights],
        doc_string=_trace(mine[2]),
    )
    graph.metadata_props.add(key=STACK, value=_trace(mine[4]))
    function = helper.make_function(
        "custom",
        "F",
        ["a"],
        ["b"],
        [_meta(helper.make_node("Neg", ["a"], ["b"]), mine[0], mine[5])],
        [helper.make_opsetid("", 18)],
    )
    function.metadata_props.add(key="note", value=_trace(mine[3]))
    opsets = [helper.make_opsetid(d, v) for d, v in (("", 18), ("custom", 1), ("other", 1))]
    model = helper.make_model(graph, opset_imports=opsets, functions=[function], doc_string=_trace(mine[6]))
    model.ir_version = 10
    model.metadata_props.add(key=STACK, value=_trace(mine[0]))
    return model


# ---------------------------------------------------------------------------------------------------------------------
# The rewrite


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("{root}/models/_dtypes_nets.py", "models/_dtypes_nets.py"),
        ("{root}/.nox/export/lib/python3.11/site-packages/torch/x.py", ".nox/export/lib/python3.11/site-packages/torch/x.py"),
        ("/usr/lib/python3.11/site-packages/a/site-packages/torch/x.py", "site-packages/torch/x.py"),
        ("/home/someone/elsewhere/net.py", "net.py"),
        ("{root}other/net.py", "net.py"),  # a sibling folder whose name begins with the root's is not under it
        ("C:\\work\\venv\\Lib\\site-packages\\torch\\x.py", "site-packages/torch/x.py"),
        ("torch/fx/passes/runtime_assert.py", "torch/fx/passes/runtime_assert.py"),
        ("<eval_with_key>.3", "<eval_with_key>.3"),
    ],
)
def test_a_path_under_the_root_is_relative_one_elsewhere_keeps_from_site_packages_on_or_its_name(path: str, said: str) -> None:
    assert portable_path(path.format(root=ROOT), (str(ROOT),)) == said


def test_every_stack_trace_path_is_rewritten_and_every_other_byte_kept(tmp_path: Path) -> None:
    """Through subgraphs (an attribute's graph and graphs), functions, and the model's and graph's own metadata: the
    result is what onnx itself serializes for the same model with the portable paths, so nothing else moved."""
    exported = _crafted(lambda p: p, tmp_path).SerializeToString()
    published = portable(exported, tmp_path)
    assert published == _crafted(lambda p: portable_path(p, (str(tmp_path),)), tmp_path).SerializeToString()
    model = onnx.load_from_string(published)
    onnx.checker.check_model(model)
    said = next(p.value for p in model.graph.node[0].metadata_props if p.key == STACK)
    assert FRAME.findall(said) == [
        "models/_dtypes_nets.py",
        ".nox/export/lib/python3.11/site-packages/torch/nn/modules/linear.py",
        "site-packages/transformers/modeling_utils.py",
        "my_models.py",
        "site-packages/torch/nn/functional.py",
        "torch/fx/passes/runtime_assert.py",
        "<eval_with_key>.3",
    ]
    assert str(tmp_path).encode() not in published and b'File "/abs/p.py" x' in published  # weights left alone
    assert portable(published, tmp_path) == published  # published once is published


def test_a_model_without_such_paths_comes_back_the_same_bytes() -> None:
    """A TorchScript export holds no stack trace: its reproducer is the measured artifact, byte for byte."""
    f32 = TensorProto.FLOAT
    model = _model(
        [helper.make_node("Relu", ["x"], ["y"], name="/fc/Relu", doc_string="/fc/Relu")],
        [helper.make_tensor_value_info("x", f32, [2])],
        [helper.make_tensor_value_info("y", f32, [2])],
    )
    data = model.SerializeToString()
    assert portable(data) is data


def test_bytes_that_are_no_protobuf_are_a_value_error() -> None:
    with pytest.raises(ValueError, match="protobuf"):
        portable(b"\x0a\xff\xff")
    with pytest.raises(ValueError, match="protobuf"):
        portable(b"\x3a\x05\x0a\x03\x4a")  # a graph whose node is cut short


# ---------------------------------------------------------------------------------------------------------------------
# In a reproducer


def _traced(build: Path, case: str, size: int = 0) -> Any:
    """A dynamo artifact whose node's stack trace names this checkout (``y = x + w`` with ``size`` weights, or
    ``y = -x``)."""
    f32, n = TensorProto.FLOAT, size or 2
    x = np.ones(n, np.float32)
    node = helper.make_node("Add", ["x", "w"], ["y"]) if size else helper.make_node("Neg", ["x"], ["y"])
    value = [helper.make_tensor_value_info(name, f32, [n]) for name in ("x", "y")]
    model = _model([_meta(node, f"{ROOT}/models/n.py", "/a/b.py")], value[:1], value[1:])
    if size:
        model.graph.initializer.append(helper.make_tensor("w", f32, [n], x.tobytes(), raw=True))
    return _artifact(build, case, model, {"example": ({"x": x}, [x + 1 if size else -x])})


def test_a_reproducer_publishes_the_model_without_the_checkout_s_paths_and_says_so(tmp_path: Path) -> None:
    build, results = tmp_path / "build", tmp_path / "results"
    ran, refused = _traced(build, "ran"), _traced(build, "refused", size=1024)
    cells = [
        *_cells(ran, NEW, {"example": Status.MISMATCH}),
        *_cells(refused, NEW, {"example": Status.LOAD_FAIL}),  # weightless: its model is stripped, and portable too
    ]
    written = write_repros(build, results, cells, [ran, refused], {})
    for art_id in ("ran.dynamo.op17", "refused.dynamo.op17"):
        folder = results / written[art_id]
        data = (folder / "model.onnx").read_bytes()
        assert str(ROOT).encode() not in data and b'File "models/n.py"' in data and b'File "b.py"' in data
        onnx.checker.check_model(str(folder / "model.onnx"))
        text = " ".join((folder / "README.txt").read_text().split())
        assert "stack-trace paths in its node metadata made relative to the project" in text
    assert (results / written["refused.dynamo.op17"] / ZEROS).stat().st_size == 4096
    model = build / "artifacts" / "ran.dynamo.op17" / "model.onnx"
    model.write_bytes(model.read_bytes() + b"\x00")  # an edit in place: still refused before any rewrite
    with pytest.raises(HarnessError, match=r"ran\.dynamo\.op17/model\.onnx changed since the export wrote it"):
        write_repros(build, results, cells, [ran, refused], {})


# ---------------------------------------------------------------------------------------------------------------------
# Real dynamo exports

NET = """
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.fc(x)) * 2
"""


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """The exporter's prints and warnings are the export record's business, not this test's."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _export_from(folder: Path) -> bytes:
    """``NET`` written into ``folder``, imported from there and exported by dynamo: its traces name ``folder``."""
    torch = pytest.importorskip("torch")
    folder.mkdir(parents=True)
    (folder / "net.py").write_text(NET)
    spec = importlib.util.spec_from_file_location("portable_net", folder / "net.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.manual_seed(0)
    with _quiet():
        program = torch.onnx.export(module.Net().eval(), (torch.randn(2, 4),), dynamo=True, opset_version=18)
    assert program is not None
    return bytes(program.model_proto.SerializeToString())


@pytest.mark.torch
def test_one_module_exported_from_two_folders_publishes_the_same_bytes(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "elsewhere" / "deeper"
    exported = [_export_from(first), _export_from(second)]
    assert str(first).encode() in exported[0] and str(second).encode() in exported[1] and exported[0] != exported[1]
    published = [portable(exported[0], first), portable(exported[1], second)]
    assert published[0] == published[1]
    assert not re.search(rb'File "(/|[A-Za-z]:\\)', published[0]) and str(tmp_path).encode() not in published[0]
    # Only the stack traces moved: onnx reads the same model once they are put back, and its checker accepts it.
    before, after = onnx.load_from_string(exported[0]), onnx.load_from_string(published[0])
    onnx.checker.check_model(after)
    traces = 0
    for node in before.graph.node:
        for prop in node.metadata_props:
            if prop.key == STACK:
                prop.value = FRAME.sub(lambda m: f'File "{portable_path(m.group(1), (str(first),))}"', prop.value)
                traces += 1
    assert traces and before.SerializeToString() == published[0]
    assert b'File "net.py"' in published[0] and b'File "site-packages/torch/nn/modules/linear.py"' in published[0]


# ---------------------------------------------------------------------------------------------------------------------
# Timing out of the case pages


def test_case_pages_hold_no_timing_and_timing_md_holds_it_all(tmp_path: Path) -> None:
    """A real report of a real run (latency measured): no export seconds or latency on a case page, which links
    its section of results/timing.md, where they are, a section per case in the corpus's order."""
    matrix = _matrix(tmp_path)
    out, results = tmp_path / "build", tmp_path / "results"
    cases = ["add_one", "div_int_min"]
    fault_corpus(out, only=cases)
    run = _harness(matrix, out, "run", "--runtime", onnxruntime.__version__)
    assert run.returncode == 0, run.stdout + run.stderr
    assert (proc := _report(matrix, out, results)).returncode == 0, proc.stderr
    timing = (results / TIMING).read_text()
    assert [line[3:] for line in timing.splitlines() if line.startswith("## ")] == cases
    column = onnxruntime.__version__
    for case in cases:
        page = (results / "cases" / f"{case}.md").read_text()
        assert f"[{TIMING}](../{TIMING}#{case})" in page
        assert "Latency" not in page and "µs" not in page and not re.search(r"\|\s+s\s+\|", page)
        section = timing.split(f"## {case}\n", 1)[1].split("\n## ", 1)[0]
        assert f"[{case}](cases/{case}.md)" in section
        header = next(line for line in section.splitlines() if line.startswith("| exporter"))
        assert "export s" in header
        if case == "add_one":  # it passes: the example probe was timed
            assert column in header
            row = next(line for line in section.splitlines() if line.startswith("| torchscript"))
            assert all(re.fullmatch(r"\d+(\.\d+)?", v.strip()) for v in row.strip("|").split("|")[2:]), row
