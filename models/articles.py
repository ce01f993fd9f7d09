"""Gotcha cases from the two seed articles, each with its fixed twin.

* Article 1: "ONNX Export Pitfalls: 7 PyTorch → Production Gotchas".
* Article 2: "What Actually Breaks When You Export PyTorch Models to ONNX"
  (PyTorch 2.6.0, onnxruntime 1.20).

A card says what the article claims; the table says what happened with the
pinned torch and runtimes, and where they disagree the table is the news.
Importing this module does not import torch: the modules live in
:mod:`models._articles_nets`, imported only when a case builds its model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.cases import Card, Case, Claim, lazy, randint, randn, register

if TYPE_CHECKING:
    import torch

A1 = "seed article 1 '7 PyTorch → Production Gotchas'"
A2 = "seed article 2 'What Actually Breaks When You Export PyTorch Models to ONNX'"
TORCH_ONNX_DOCS = "https://pytorch.org/docs/stable/onnx.html"

IMG = (3, 16, 16)
BATCH = {"x": {0: "batch"}}
IMAGE = {"x": {0: "batch", 2: "height", 3: "width"}}


def _net(cls: str, seed: int = 0) -> Callable[[], torch.nn.Module]:
    """A factory for ``models._articles_nets.<cls>`` with seeded weights."""
    return lazy("models._articles_nets", cls, seed=seed)


def _count(n: int) -> torch.Tensor:
    """A 0-d int64 tensor holding ``n``: a loop count that stays a graph input."""
    return randint(n, n + 1)


def _mask(rows: int, cols: int, seed: int, masked_row: int | None = None) -> torch.Tensor:
    """A random int64 keep-mask (1 = keep) whose first column is always kept.

    Args:
        rows: Number of rows.
        cols: Number of columns.
        seed: Seed of the random part.
        masked_row: A row to mask out entirely (every entry 0), or None.
    """
    mask = randint(0, 2, rows, cols, seed=seed)
    mask[:, 0] = 1
    if masked_row is not None:
        mask[masked_row] = 0
    return mask


def _constant_row(rows: int, cols: int, seed: int, row: int, value: float = 0.1) -> torch.Tensor:
    """Normal rows except ``row``, which holds ``value`` everywhere (its std is 0)."""
    x = randn(rows, cols, seed=seed)
    x[row] = value
    return x


def _grid(n: int, h: int, w: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    """A ``grid_sample`` grid of shape ``(n, h, w, 2)`` in ``(-scale, scale)``."""
    return randn(n, h, w, 2, seed=seed).tanh() * scale


# Article 1 §1 / article 2 §1: batch size frozen at the example's -------------

FROZEN_BATCH = Card(
    symptom="Exported without dynamic axes, the model loads and runs at batch 1, then a batch of 8 fails with "
    "'INVALID_ARGUMENT : Got invalid dimensions for input ... index: 0 Got: 8 Expected: 1'.",
    cause="Export traces with the example input; every dimension not named in dynamic_axes (torchscript) or "
    "dynamic_shapes (dynamo) is fixed at the example's size, the batch included.",
    fix="Name every dimension that varies in deployment: dynamic_axes={'x': {0: 'batch'}} or "
    "dynamic_shapes={'x': {0: torch.export.Dim.DYNAMIC}}.",
    source=f"{A2}, §1; {A1}, §1; {TORCH_ONNX_DOCS} (dynamic_axes)",
)

register(
    Case(
        name="frozen_batch",
        claims=(
            Claim("run-fail", "torchscript", "batch8", match="Got: 8 Expected: 1"),
            Claim("run-fail", "dynamo", "batch8", match="Got: 8 Expected: 1"),
        ),
        model=_net("SmallCNN"),
        inputs=lambda: {"x": randn(1, *IMG)},
        probes=lambda: {"batch8": {"x": randn(8, *IMG, seed=1)}},
        card=FROZEN_BATCH,
    )
)
register(
    Case(
        name="frozen_batch_fixed",
        model=_net("SmallCNN"),
        inputs=lambda: {"x": randn(1, *IMG)},
        probes=lambda: {"batch8": {"x": randn(8, *IMG, seed=1)}},
        dynamic=BATCH,
        fixes="frozen_batch",
    )
)

# Article 1 §1: view(-1, 16) after the pool --------------------------------------

register(
    Case(
        name="view_reshape",
        model=_net("ConvClassifierView"),
        inputs=lambda: {"x": randn(1, *IMG)},
        probes=lambda: {f"batch{b}": {"x": randn(b, *IMG, seed=b)} for b in (4, 7, 16, 32)},
        dynamic=BATCH,
        card=Card(
            symptom="The article claims: exported with a dynamic batch at batch 1, the model validates at 1, 8 and 32 "
            "but fails with a shape mismatch 'six ops deep' (or gives wrong results) at batch 7.",
            cause="The article blames x.view(-1, 16) for baking the export-time batch into a Reshape. A literal "
            "-1 usually exports as Reshape(shape=[-1, 16]), which is batch-agnostic; sizes read from x.shape "
            "and turned into Python ints are what freeze.",
            fix="torch.flatten(x, 1) (or x.reshape(x.shape[0], -1)); validate at batch 1, 4, 7, 16 and 32.",
            source=f"{A1}, §1",
        ),
    )
)
register(
    Case(
        name="view_reshape_fixed",
        model=_net("ConvClassifierFlatten"),
        inputs=lambda: {"x": randn(1, *IMG)},
        probes=lambda: {f"batch{b}": {"x": randn(b, *IMG, seed=b)} for b in (4, 7, 16, 32)},
        dynamic=BATCH,
        fixes="view_reshape",
    )
)

# Article 1 §2: in-place residual add ---------------------------------------------

register(
    Case(
        name="inplace_residual",
        model=_net("ResidualInplace"),
        inputs=lambda: {"x": randn(1, 8, 16, 16)},
        probes=lambda: {"batch4": {"x": randn(4, 8, 16, 16, seed=1)}},
        dynamic=BATCH,
        card=Card(
            symptom="The article claims: export warns about aten::add_ and completes, and the model may give subtly "
            "wrong outputs after runtime graph optimisation (the residual 'optimized away').",
            cause="In-place ops (x += residual, relu_) create aliasing in the traced graph; the exporter has to "
            "rewrite them functionally, and the article suspects that rewrite or later optimisation.",
            fix="Use out-of-place ops in exported models: out = out + residual.",
            source=f"{A1}, §2",
        ),
    )
)
register(
    Case(
        name="inplace_residual_fixed",
        model=_net("ResidualOutOfPlace"),
        inputs=lambda: {"x": randn(1, 8, 16, 16)},
        probes=lambda: {"batch4": {"x": randn(4, 8, 16, 16, seed=1)}},
        dynamic=BATCH,
        fixes="inplace_residual",
    )
)

# Article 1 §3: opset newer than the runtime --------------------------------------

register(
    Case(
        name="opset_baseline",
        claims=(
            Claim("load-fail", "torchscript", opset=20, runtime="onnxruntime==1.16.3", match="till opset 19"),
            Claim("load-fail", "dynamo", runtime="onnxruntime==1.17.3", match="Unsupported model IR version: 10"),
            # The article's own example, measured: opset 17 on 1.12 runs; the runtime that stops at 16 (1.11) refuses
            # the file when the session is created, before any node runs.
            Claim("pass", "torchscript", opset=17, runtime="onnxruntime==1.12.1"),
            Claim("load-fail", "torchscript", opset=17, runtime="onnxruntime==1.11.1", match="Opset 17 is under development"),
        ),
        model=_net("MLP"),
        inputs=lambda: {"x": randn(2, 16)},
        probes=lambda: {"batch7": {"x": randn(7, 16, seed=1)}},
        dynamic=BATCH,
        card=Card(
            symptom="The export succeeds, then an older runtime refuses the file: loading fails with an unsupported "
            "opset or IR version, or a ShapeInferenceError / unsupported operator on some node.",
            cause="Each onnxruntime release supports opsets and ONNX IR versions up to a ceiling; a newer opset "
            "(or a newer onnx package writing a newer IR version) is beyond an older runtime. This model is "
            "deliberately plain, so a load-fail in its row is the opset/IR axis itself, not the model.",
            fix="Export at the highest opset your deployment runtime supports (read this row across runtimes); "
            "the article defaults to opset 13. The article's example is not what happens: ONNX Runtime 1.12 does "
            "support opset 17 (1.12.1 loads and runs this model exported at 17: its ceiling is IR 8 / opset 17), and "
            "the release that stops at opset 16, 1.11.1, refuses the file at load ('Opset 17 is under development … "
            "support for domain ai.onnx is till opset 16'), not at the first opset-17 node. Reproduce both with "
            "results/repro/frontier/ir8.op17/ (a one-node model at IR 8, opset 17): its repro.py exits 1 on 1.11.1 "
            "(refused at load) and 0 on 1.12.1.",
            source=f"{A1}, §3; https://github.com/microsoft/onnxruntime/blob/main/docs/Versioning.md",
        ),
    )
)

# Article 1 §4: loops unrolled by tracing ------------------------------------------

register(
    Case(
        name="loop_unrolled",
        claims=(Claim("mismatch", "torchscript", "n5"), Claim("mismatch", "dynamo", "n5")),
        model=_net("LoopPythonInt"),
        inputs=lambda: {"x": randn(1, 10), "n": 3},
        probes=lambda: {
            "n5": {"x": randn(1, 10, seed=1), "n": 5},
            "n1": {"x": randn(1, 10, seed=2), "n": 1},
        },
        dynamic=BATCH,
        card=Card(
            symptom="Exported with n=3, the model always runs 3 iterations: n is not even a graph input, so n=5 or "
            "n=1 at runtime silently gives the 3-iteration result.",
            cause="A Python int argument is a constant to tracing (and specialised by torch.export): range(n) is "
            "unrolled into n copies of the loop body.",
            fix="Make the count a tensor and script the module (torch.jit.script → ONNX Loop, torchscript exporter "
            "only), or keep the count fixed and document it.",
            source=f"{A1}, §4; {TORCH_ONNX_DOCS} (tracing vs scripting)",
        ),
    )
)
register(
    Case(
        name="loop_scripted",
        model=_net("LoopTensorCount"),
        inputs=lambda: {"x": randn(1, 10), "n": _count(3)},
        probes=lambda: {
            "n5": {"x": randn(1, 10, seed=1), "n": _count(5)},
            "n1": {"x": randn(1, 10, seed=2), "n": _count(1)},
            "n0": {"x": randn(1, 10, seed=3), "n": _count(0)},
        },
        dynamic=BATCH,
        script=True,
        fixes="loop_unrolled",
        exporters=("torchscript",),
        skip_reason="a ScriptModule's Loop is exported by the torchscript exporter only (torch.export does not consume "
        "TorchScript); the dynamo fix is torch.cond/while_loop or a fixed count",
        card=Card(
            symptom="The dynamo exporter cannot take a ScriptModule; only the torchscript exporter emits a Loop.",
            cause="torch.jit.script keeps range(int(n)) as prim::Loop, which the torchscript exporter maps to ONNX "
            "Loop with n as its trip count; torch.export does not consume TorchScript.",
            fix="Torchscript exporter for this twin; for dynamo, rewrite the loop with torch export control-flow "
            "operators or keep the count fixed.",
            source=f"{A1}, §4",
        ),
    )
)

# Article 1 §5: custom autograd Function / custom op ------------------------------

CUSTOM_FUNCTION = Card(
    symptom="The article claims: export fails with \"RuntimeError: ONNX export failed: Couldn't export operator "
    '..." for a torch.autograd.Function that has no ONNX symbolic.',
    cause="An autograd.Function is a prim::PythonOp to the torchscript exporter; without a symbolic() it can only be "
    "exported if the exporter inlines its forward. Newer torch inlines it, and dynamo traces through it.",
    fix="Give the Function a symbolic(g, x) staticmethod emitting ONNX ops, or unwrap it into plain torch ops.",
    source=f"{A1}, §5; {TORCH_ONNX_DOCS}",
)

register(
    Case(
        name="custom_function",
        model=_net("CustomFunction"),
        inputs=lambda: {"x": randn(2, 10)},
        probes=lambda: {"batch5": {"x": randn(5, 10, seed=1)}},
        dynamic=BATCH,
        card=CUSTOM_FUNCTION,
    )
)
register(
    Case(
        name="custom_function_symbolic",
        model=_net("CustomFunctionSymbolic"),
        inputs=lambda: {"x": randn(2, 10)},
        probes=lambda: {"batch5": {"x": randn(5, 10, seed=1)}},
        dynamic=BATCH,
        fixes="custom_function",
    )
)
register(
    Case(
        name="custom_function_plain",
        model=_net("CustomFunctionPlain"),
        inputs=lambda: {"x": randn(2, 10)},
        probes=lambda: {"batch5": {"x": randn(5, 10, seed=1)}},
        dynamic=BATCH,
        fixes="custom_function",
    )
)
register(
    Case(
        name="custom_library_op",
        claims=(Claim("export-fail", "torchscript"), Claim("export-fail", "dynamo")),
        model=_net("CustomLibraryOp"),
        inputs=lambda: {"x": randn(2, 10)},
        probes=lambda: {"batch5": {"x": randn(5, 10, seed=1)}},
        dynamic=BATCH,
        card=Card(
            symptom="Export fails. Torchscript: 'ONNX export failed on an operator with unrecognized namespace "
            "onnx_matrix::square_plus_one'; dynamo: 'No ONNX function found for <OpOverload(op="
            "'onnx_matrix.square_plus_one', ...)>'.",
            cause="A torch.library.custom_op is opaque by design (the stand-in for a fused CUDA kernel): neither "
            "exporter can look inside, and nothing maps it to ONNX.",
            fix="Register a translation (torch.onnx.register_custom_op_symbolic for torchscript; custom_translation_"
            "table for dynamo) to standard ONNX ops or to a custom-domain op the runtime implements, or refactor.",
            source=f"{A1}, §5; https://pytorch.org/docs/stable/library.html",
        ),
    )
)

# Article 1 §6: constants built in forward vs buffers -----------------------------

register(
    Case(
        name="constants_in_forward",
        model=_net("NormalizeInForward"),
        inputs=lambda: {"x": randn(1, *IMG)},
        probes=lambda: {"batch2_odd": {"x": randn(2, 3, 15, 17, seed=1)}},
        dynamic=IMAGE,
        card=Card(
            symptom="The article claims: mean/std built with torch.tensor() inside forward() become Constant nodes "
            "(plus Reshape shape constants), which some runtimes fail to fold, costing time every batch (8% in "
            "its case). Outputs are expected to match; latency is the column to read.",
            cause="Tensors created in forward are traced as graph constants rather than module state.",
            fix="register_buffer('mean', ...) so they are stored as ONNX initializers.",
            source=f"{A1}, §6",
        ),
    )
)
register(
    Case(
        name="constants_as_buffers",
        model=_net("NormalizeBuffers"),
        inputs=lambda: {"x": randn(1, *IMG)},
        probes=lambda: {"batch2_odd": {"x": randn(2, 3, 15, 17, seed=1)}},
        dynamic=IMAGE,
        fixes="constants_in_forward",
    )
)

# Article 1 §7: ambiguous defaults (interpolate, grid_sample, pad) -----------------

ODD_IMAGES: dict[str, tuple[int, ...]] = {"odd_15x17": (1, 3, 15, 17), "batch2_9x13": (2, 3, 9, 13)}


def _image_probes() -> dict[str, dict[str, Any]]:
    return {name: {"x": randn(*shape, seed=i + 1)} for i, (name, shape) in enumerate(ODD_IMAGES.items())}


register(
    Case(
        name="interpolate_default",
        model=_net("InterpolateDefault"),
        inputs=lambda: {"x": randn(1, *IMG)},
        probes=_image_probes,
        dynamic=IMAGE,
        card=Card(
            symptom="The article claims: bilinear F.interpolate with align_corners unspecified differs from ONNX "
            "Runtime by ~3e-4, small but compounding through deeper models (and into NaN/extreme values "
            "downstream of sensitive ops).",
            cause="torch's default (align_corners=None, treated as False) must be mapped to Resize's "
            "coordinate_transformation_mode; the article says the defaults differ.",
            fix="Spell out ambiguous arguments before export: align_corners=False.",
            source=f"{A1}, §7; https://onnx.ai/onnx/operators/onnx__Resize.html",
        ),
    )
)
register(
    Case(
        name="interpolate_explicit",
        model=_net("InterpolateExplicit"),
        inputs=lambda: {"x": randn(1, *IMG)},
        probes=_image_probes,
        dynamic=IMAGE,
        fixes="interpolate_default",
    )
)


def _grid_inputs() -> dict[str, Any]:
    return {"x": randn(1, *IMG), "grid": _grid(1, 8, 8, seed=10)}


def _grid_probes() -> dict[str, dict[str, Any]]:
    return {
        "odd_15x17": {"x": randn(1, 3, 15, 17, seed=1), "grid": _grid(1, 5, 7, seed=11)},
        "batch2_outside": {"x": randn(2, *IMG, seed=2), "grid": _grid(2, 6, 9, seed=12, scale=1.5)},
    }


GRID_DYNAMIC = {"x": {0: "batch", 2: "height", 3: "width"}, "grid": {0: "batch", 1: "grid_h", 2: "grid_w"}}

register(
    Case(
        name="grid_sample_default",
        claims=(Claim("export-fail", "torchscript", opset=13, match="Support for this operator was added in version 16"),),
        model=_net("GridSampleDefault"),
        inputs=_grid_inputs,
        probes=_grid_probes,
        dynamic=GRID_DYNAMIC,
        card=Card(
            symptom="The article claims: F.grid_sample's defaults (mode, padding_mode, align_corners) need not "
            "match ONNX GridSample's, giving small silent differences, most visible at the borders and for "
            "grid points outside [-1, 1] (probe batch2_outside).",
            cause="Defaults are mapped between two specifications (torch: bilinear, zeros, align_corners=False; "
            "ONNX GridSample needs opset 16 and its mode names change in opset 20).",
            fix="Pass mode, padding_mode and align_corners explicitly.",
            source=f"{A1}, §7; https://onnx.ai/onnx/operators/onnx__GridSample.html",
        ),
    )
)
register(
    Case(
        name="grid_sample_explicit",
        model=_net("GridSampleExplicit"),
        inputs=_grid_inputs,
        probes=_grid_probes,
        dynamic=GRID_DYNAMIC,
        fixes="grid_sample_default",
    )
)

register(
    Case(
        name="pad_default",
        model=_net("PadDefault"),
        inputs=lambda: {"x": randn(1, *IMG)},
        probes=_image_probes,
        dynamic=IMAGE,
        card=Card(
            symptom="The article claims: F.pad with mode/value left at their defaults may export to a Pad whose "
            "defaults differ, changing the border.",
            cause="torch pads (left, right, top, bottom) from the last dimension backwards with mode='constant', "
            "value=0; ONNX Pad takes per-axis begins then ends, and the exporter must reorder them.",
            fix="Pass mode and value explicitly (mode='constant', value=0.0).",
            source=f"{A1}, §7",
        ),
    )
)
register(
    Case(
        name="pad_explicit",
        model=_net("PadExplicit"),
        inputs=lambda: {"x": randn(1, *IMG)},
        probes=_image_probes,
        dynamic=IMAGE,
        fixes="pad_default",
    )
)

# Article 2 §2: data-dependent Python branch --------------------------------------

register(
    Case(
        name="data_dependent_branch",
        claims=(
            Claim("mismatch", "torchscript", "negative"),
            Claim("export-fail", "dynamo", match="data-dependent"),
        ),
        model=_net("Branchy"),
        inputs=lambda: {"x": randn(2, 8, shift=2.0)},
        probes=lambda: {"negative": {"x": randn(2, 8, seed=1, shift=-2.0)}},
        card=Card(
            symptom="Exported with a positive example, the model returns x * 2 for every input: on negative input "
            "torch gives x - 100 (-101) and ONNX gives x * 2 (-2). No error; only a TracerWarning.",
            cause="`if x.mean() > 0` is evaluated once while tracing and the branch taken is baked in. The article "
            "found dynamo=True (torch 2.6) baked it too, instead of rejecting the model.",
            fix="Express both branches as tensor ops: torch.where(x.mean() > 0, x * 2, x - 100) (or torch.cond).",
            source=f"{A2}, §2; {A1}, §4",
        ),
    )
)
register(
    Case(
        name="data_dependent_branch_fixed",
        model=_net("BranchyWhere"),
        inputs=lambda: {"x": randn(2, 8, shift=2.0)},
        probes=lambda: {"negative": {"x": randn(2, 8, seed=1, shift=-2.0)}},
        fixes="data_dependent_branch",
    )
)

# Article 2 §3: FFT unsupported by the legacy exporter ----------------------------

register(
    Case(
        name="fft_rfft",
        claims=(
            Claim("export-fail", "torchscript", match="aten::fft_rfft"),
            Claim("load-fail", "dynamo", opset=17, match="Unrecognized attribute"),
        ),
        model=_net("RfftMagnitude"),
        inputs=lambda: {"x": randn(2, 32)},
        probes=lambda: {"batch5": {"x": randn(5, 32, seed=1)}},
        dynamic=BATCH,
        card=Card(
            symptom="Torchscript exporter: \"UnsupportedOperatorError: Exporting the operator 'aten::fft_rfft' to "
            'ONNX opset version 17 is not supported" (also at 13). The article found dynamo=True exports it '
            "and matches torch to ~3e-6.",
            cause="The two exporters are different programs with different operator coverage; dynamo decomposes "
            "rfft to ONNX DFT (opset 17+).",
            fix="Try dynamo=True before rewriting; otherwise compute the DFT as a matmul with cos/sin buffers.",
            source=f"{A2}, §3 and §4",
        ),
    )
)
register(
    Case(
        name="fft_rfft_matmul",
        model=_net("RfftMatmul"),
        inputs=lambda: {"x": randn(2, 32)},
        probes=lambda: {"batch5": {"x": randn(5, 32, seed=1)}},
        dynamic=BATCH,
        fixes="fft_rfft",
    )
)

# Article 1 §7 and FAQ: NaN chains --------------------------------------------------


def _nan_inputs() -> dict[str, Any]:
    return {"x": randn(4, 7), "mask": _mask(4, 7, seed=2)}


def _nan_probes() -> dict[str, dict[str, Any]]:
    # A row of seven 0.1s: torch's mean leaves a residue (x - mean = -7.5e-9) while its std kernel returns exactly
    # 0, so the row becomes -inf and softmax NaN; the exported graph computes std from that same residue (~8e-9)
    # and the row comes out finite. Width 7 matters: with 8 columns both sides agree on NaN.
    return {
        "constant_row": {"x": _constant_row(4, 7, seed=1, row=1), "mask": _mask(4, 7, seed=3)},
        "masked_row": {"x": randn(4, 7, seed=4), "mask": _mask(4, 7, seed=5, masked_row=2)},
    }


register(
    Case(
        name="nan_chain",
        claims=(Claim("mismatch", "torchscript", "constant_row"), Claim("mismatch", "dynamo", "constant_row")),
        model=_net("NanChain"),
        inputs=_nan_inputs,
        probes=_nan_probes,
        card=Card(
            symptom="NaN on one side only: for a constant row, torch returns NaN while the exported model returns "
            "finite values (probe constant_row); for a fully masked row both sides give NaN (probe masked_row).",
            cause="Division by a ~zero std and softmax over a row of -inf are undefined, so the result hangs on "
            "rounding: torch's std kernel returns exactly 0 while its mean leaves a 7e-9 residue (→ -inf → NaN), "
            "whereas the graph's ReduceMean/Sub/Sqrt computes std from that residue and stays finite.",
            fix="Add an epsilon to the denominator and mask with a large finite negative (-1e9), not -inf.",
            source=f"{A1}, §7 and FAQ ('Common culprits: division by zero in normalization layers, softmax overflow')",
        ),
    )
)
register(
    Case(
        name="nan_chain_fixed",
        model=_net("NanChainFixed"),
        inputs=_nan_inputs,
        probes=_nan_probes,
        fixes="nan_chain",
    )
)
