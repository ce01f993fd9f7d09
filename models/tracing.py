"""Gotchas of shapes and values frozen by tracing, each with its fixed twin.

Python ints taken from tensor shapes, list lengths, Python scalars, loops
over the batch and the module's training flag are read once, at export, and
the graph keeps what they were. The modules live in
:mod:`models._tracing_nets`, imported only when a case builds its model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.cases import Card, Case, Claim, lazy, randn, register

if TYPE_CHECKING:
    import torch

BATCH = {"x": {0: "batch"}}
BATCH_WIDTH = {"x": {0: "batch", 1: "width"}}
BATCH_SEQ = {"x": {0: "batch", 1: "seq"}}


def _net(cls: str, seed: int = 0) -> Callable[[], torch.nn.Module]:
    """A factory for ``models._tracing_nets.<cls>`` with seeded weights."""
    return lazy("models._tracing_nets", cls, seed=seed)


def _tensor(values: list[int]) -> torch.Tensor:
    """An int64 tensor of ``values`` (imports torch only when called)."""
    import torch

    return torch.tensor(values, dtype=torch.int64)


def _scalar(value: float) -> torch.Tensor:
    """A 0-d float32 tensor holding ``value``."""
    import torch

    return torch.tensor(value, dtype=torch.float32)


# int(x.size(0)) sizes an LSTM's initial state -------------------------------------


def _lstm_probes() -> dict[str, dict[str, Any]]:
    return {"seq9": {"x": randn(2, 9, 4, seed=1)}, "batch3_seq2": {"x": randn(3, 2, 4, seed=2)}}


register(
    Case(
        name="lstm_h0_int_batch",
        model=_net("LstmH0Int"),
        inputs=lambda: {"x": randn(2, 5, 4)},
        probes=_lstm_probes,
        dynamic=BATCH_SEQ,
        card=Card(
            symptom="An LSTM exported with dynamic batch and sequence axes runs at other sequence lengths, but any "
            "other batch fails: 'Non-zero status code returned while running Expand node ... invalid expand shape' "
            "(torchscript). The export only prints a TracerWarning.",
            cause="h0/c0 are built with torch.zeros(1, int(x.size(0)), hidden): int() turns the traced size into a "
            "Python constant, so the initial state is a fixed-batch tensor no matter what dynamic_axes says "
            "(torch.export would keep int() of a dynamic dim symbolic).",
            fix="Pass no initial state (ONNX LSTM defaults it to zeros of the runtime batch), or size it without "
            "int(): torch.zeros(1, x.size(0), hidden), or make h0/c0 model inputs.",
            source="microsoft/onnxruntime#11830; torch's own export warning 'Exporting a model to ONNX with a "
            "batch_size other than 1 ... define the initial states (h0/c0) as inputs of the model'",
        ),
        claims=(Claim("run-fail", exporter="torchscript", probe="batch3_seq2", match="Expand"),),
    )
)
register(
    Case(
        name="lstm_h0_omitted",
        model=_net("LstmH0Omitted"),
        inputs=lambda: {"x": randn(2, 5, 4)},
        probes=_lstm_probes,
        dynamic=BATCH_SEQ,
        fixes="lstm_h0_int_batch",
    )
)

# torch.chunk on a dynamic dimension -------------------------------------------------


def _width_probes() -> dict[str, dict[str, Any]]:
    return {"width12": {"x": randn(2, 12, seed=1)}, "width4": {"x": randn(3, 4, seed=2)}}


register(
    Case(
        name="chunk_dynamic_dim",
        model=_net("ChunkGate"),
        inputs=lambda: {"x": randn(2, 8)},
        probes=_width_probes,
        dynamic=BATCH_WIDTH,
        card=Card(
            symptom="dynamo=True fails while optimizing the ONNX graph: 'PassError: An error occurred when running "
            "the <onnx_ir.passes.PassManager ...> pass' (underneath: 'Error during constant folding for node "
            "node_split (::SplitToSequence)', AttributeError: 'NoneType' object has no attribute 'ndim'). "
            "The torchscript exporter handles the same model.",
            cause="torch.chunk on a dim declared dynamic becomes a split with symbolic sizes, translated to "
            "SplitToSequence; onnxscript's constant folder assumes the split input has a static shape.",
            fix="Slice instead of chunking: half = x.shape[1] // 2; x[:, :half], x[:, half:] "
            "(or F.glu for the gated case); or keep that dim static.",
            source="microsoft/onnxscript#2543 ('SplitToSequence const folding only works for static shapes')",
        ),
        claims=(Claim("export-fail", exporter="dynamo", match="PassManager"),),
    )
)
register(
    Case(
        name="chunk_dynamic_dim_sliced",
        model=_net("SliceGate"),
        inputs=lambda: {"x": randn(2, 8)},
        probes=_width_probes,
        dynamic=BATCH_WIDTH,
        fixes="chunk_dynamic_dim",
    )
)

# x.split(4): the number of parts is a list length ----------------------------------


register(
    Case(
        name="split_count_frozen",
        model=_net("SplitCount"),
        inputs=lambda: {"x": randn(2, 8)},
        probes=_width_probes,
        dynamic=BATCH_WIDTH,
        card=Card(
            symptom="Exported at width 8 (two groups of 4) with the width dynamic, width 12 fails under torchscript "
            "('Cannot split using values in 'split' attribute ... Sum of sizes in 'split' ... was 8') and "
            "silently returns 2 group sums instead of 3 under dynamo (output shape (2, 2), torch (2, 3)).",
            cause="x.split(4, dim=1) returns a Python list; the list comprehension over it runs once at export, so "
            "the number of groups (and under torchscript the split sizes) is fixed at the example's. "
            "Declaring the dim dynamic does not make a Python list length dynamic.",
            fix="Express the grouping as a tensor op: x.reshape(b, -1, 4).sum(-1); keep Python lists out of any "
            "dimension that varies.",
            source="pytorch/vision#2994 (split sizes frozen at the traced value); TracerWarning 'Iterating over a "
            "tensor might cause the trace to be incorrect'",
        ),
        claims=(
            Claim("run-fail", exporter="torchscript", probe="width12", match="split"),
            Claim("mismatch", exporter="dynamo", probe="width12", match="shape"),
        ),
    )
)
register(
    Case(
        name="split_count_reshape",
        model=_net("SplitReshape"),
        inputs=lambda: {"x": randn(2, 8)},
        probes=_width_probes,
        dynamic=BATCH_WIDTH,
        fixes="split_count_frozen",
    )
)

# A Python float argument (temperature) ---------------------------------------------


register(
    Case(
        name="scalar_temperature",
        model=_net("ScaledSoftmax"),
        inputs=lambda: {"x": randn(2, 8), "temperature": 2.0},
        probes=lambda: {"temperature0_5": {"x": randn(2, 8, seed=1), "temperature": 0.5}},
        card=Card(
            symptom="dynamo: the model ignores the temperature it is given and always divides by the export's 2.0 "
            "(probe temperature0_5 mismatches; the graph has no temperature input). torchscript: the float "
            "becomes an extra double graph input with a generated name ('onnx::Cast_1'), which input_names did not "
            "cover, so feeding {'x': ...} fails with a missing input.",
            cause="A Python scalar is not a tensor: torch.export specializes it into the graph as a constant, while "
            "the torchscript tracer turns it into an anonymous graph input. Neither keeps the argument as the "
            "named float the caller expects.",
            fix="Pass scalars that vary as 0-d tensors (torch.tensor(0.5)) and name them; pass scalars that are "
            "really constant as module attributes.",
            source="pytorch/pytorch#190199 (dynamo embeds non-tensor arguments into the ONNX graph); pytorch/pytorch#100252",
        ),
        claims=(
            Claim("mismatch", exporter="dynamo", probe="temperature0_5"),
            Claim("run-fail", exporter="torchscript", match="onnx::Cast"),
        ),
    )
)
register(
    Case(
        name="scalar_temperature_tensor",
        model=_net("ScaledSoftmax"),
        inputs=lambda: {"x": randn(2, 8), "temperature": _scalar(2.0)},
        probes=lambda: {"temperature0_5": {"x": randn(2, 8, seed=1), "temperature": _scalar(0.5)}},
        fixes="scalar_temperature",
    )
)

# Exported in training mode: BatchNorm ---------------------------------------------


def _bn_probes() -> dict[str, dict[str, Any]]:
    return {"batch6_shifted": {"x": randn(6, 8, seed=1, scale=3.0, shift=1.0)}}


register(
    Case(
        name="train_mode_batchnorm",
        model=_net("LinearBatchNorm"),
        inputs=lambda: {"x": randn(4, 8)},
        probes=_bn_probes,
        dynamic=BATCH,
        train_mode=True,
        card=Card(
            symptom="A model left in train() mode exports without error (dynamo only warns 'Exporting a model while "
            "it is in training mode'), and the ONNX model disagrees with torch on every input.",
            cause="In training mode BatchNorm normalizes with the statistics of the current batch (and updates its "
            "running stats on every call); the exported graph normalizes with the stored running stats "
            "(torchscript exports in TrainingMode.EVAL by default; the dynamo graph's batch-norm is run in "
            "inference mode by onnxruntime). Dropout likewise is active in torch and absent in the graph.",
            fix="Call model.eval() before exporting (and before computing reference outputs).",
            source="pytorch/pytorch#52867 (exporter overrides the training mode of batch_norm/dropout); "
            "microsoft/onnxscript#1791",
        ),
        claims=(
            Claim("mismatch", exporter="torchscript", probe="example"),
            Claim("mismatch", exporter="dynamo", probe="example"),
        ),
    )
)
register(
    Case(
        name="train_mode_batchnorm_eval",
        model=_net("LinearBatchNorm"),
        inputs=lambda: {"x": randn(4, 8)},
        probes=_bn_probes,
        dynamic=BATCH,
        fixes="train_mode_batchnorm",
    )
)

# A Python loop over the batch, slicing by per-sample lengths ----------------------


def _lengths_inputs() -> dict[str, Any]:
    return {"x": randn(2, 5, 4), "lengths": _tensor([3, 5])}


def _lengths_probes() -> dict[str, dict[str, Any]]:
    return {
        "other_lengths": {"x": randn(2, 5, 4, seed=1), "lengths": _tensor([1, 4])},
        "batch3": {"x": randn(3, 5, 4, seed=2), "lengths": _tensor([1, 4, 2])},
    }


LENGTHS_DYNAMIC = {"x": {0: "batch"}, "lengths": {0: "batch"}}

register(
    Case(
        name="batch_loop_lengths",
        model=_net("LoopOverBatch"),
        inputs=_lengths_inputs,
        probes=_lengths_probes,
        dynamic=LENGTHS_DYNAMIC,
        card=Card(
            symptom="torchscript: with a dynamic batch declared, a batch of 3 silently returns 2 rows (output shape "
            "(2, 4), torch (3, 4)). dynamo: export fails in torch.export on the data-dependent slice "
            "x[i, :lengths[i]].",
            cause="`for i in range(x.shape[0])` is a Python loop: the trace unrolls it for the example's batch of 2. "
            "The slice end lengths[i] is a tensor value, which torch.export refuses to turn into a shape.",
            fix="Replace the loop with a mask: keep = arange(T)[None] < lengths[:, None]; (x * keep[..., None]).sum(1).",
            source="microsoft/onnxruntime#11672 (loop over x.size(0) in an exported model); roboflow/rf-detr#871",
        ),
        claims=(
            Claim("mismatch", exporter="torchscript", probe="batch3", match="shape"),
            Claim("export-fail", exporter="dynamo"),
        ),
    )
)
register(
    Case(
        name="batch_loop_mask",
        model=_net("MaskedSum"),
        inputs=_lengths_inputs,
        probes=_lengths_probes,
        dynamic=LENGTHS_DYNAMIC,
        fixes="batch_loop_lengths",
    )
)
