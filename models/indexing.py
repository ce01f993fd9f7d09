"""Gotchas of indexing and scatter, each with its fixed twin.

Duplicate indices, reductions ONNX lacks, ``include_self`` and negative
indices: torch defines each, the ONNX graph the exporter writes does
something else. The modules live in :mod:`models._indexing_nets`, imported
only when a case builds its model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.cases import Card, Case, Claim, lazy, randint, randn, register

if TYPE_CHECKING:
    import torch


def _net(cls: str, seed: int = 0) -> Callable[[], torch.nn.Module]:
    """A factory for ``models._indexing_nets.<cls>`` with seeded weights."""
    return lazy("models._indexing_nets", cls, seed=seed)


def _index(values: list[int]) -> torch.Tensor:
    """An int64 index tensor (imports torch only when called)."""
    import torch

    return torch.tensor(values, dtype=torch.int64)


# index_put(accumulate=True) with duplicate indices ---------------------------------


def _put_inputs() -> dict[str, Any]:
    return {"x": randn(6, 3), "idx": _index([5, 0, 3, 1]), "v": randn(4, 3, seed=1)}


def _put_probes() -> dict[str, dict[str, Any]]:
    return {"duplicates": {"x": randn(6, 3, seed=2), "idx": _index([2, 2, 4, 2]), "v": randn(4, 3, seed=3)}}


register(
    Case(
        name="index_put_accumulate_duplicates",
        model=_net("IndexPutAccumulate"),
        inputs=_put_inputs,
        probes=_put_probes,
        card=Card(
            symptom="x.index_put((idx,), v, accumulate=True) (x[idx] += v, index_add_) matches torch while the "
            "indices are distinct, and silently differs when an index repeats: the torchscript export adds only "
            "one of the rows that land on the same place (probe duplicates), at every opset.",
            cause="The torchscript symbolic scatters v into a zeros tensor with ScatterND (no reduction) and adds the "
            "result to x; ScatterND without reduction keeps one update per index, so the duplicates are lost. "
            "The dynamo exporter uses ScatterND(reduction='add').",
            fix="Export with dynamo=True, or write the accumulation as a one-hot matmul: "
            "x + (idx[:, None] == arange(n)[None]).T.float() @ v (or scatter_add at opset >= 16).",
            source="pytorch/pytorch#61034; pytorch/pytorch#111159 (index_add_ with duplicate indices)",
        ),
        claims=(Claim("mismatch", exporter="torchscript", probe="duplicates"),),
    )
)
register(
    Case(
        name="index_put_accumulate_onehot",
        model=_net("OneHotAccumulate"),
        inputs=_put_inputs,
        probes=_put_probes,
        fixes="index_put_accumulate_duplicates",
    )
)

# scatter_reduce(reduce="mean") ----------------------------------------------------------


def _scatter_inputs() -> dict[str, Any]:
    return {"x": randn(4, 3), "idx": randint(0, 4, 5, 3, seed=1), "src": randn(5, 3, seed=2)}


def _scatter_probes() -> dict[str, dict[str, Any]]:
    return {"other_index": {"x": randn(4, 3, seed=3), "idx": randint(0, 2, 5, 3, seed=4), "src": randn(5, 3, seed=5)}}


register(
    Case(
        name="scatter_reduce_mean",
        model=_net("ScatterMean"),
        inputs=_scatter_inputs,
        probes=_scatter_probes,
        card=Card(
            symptom="scatter_reduce(reduce='mean'): torchscript refuses it ('ONNX does not support mean reduction "
            "for scatter_reduce'; at opset 13 'aten::scatter_reduce ... not supported'); dynamo exports it without "
            "a word and the result is wrong: every scattered position holds one src value, not the mean.",
            cause="ONNX ScatterElements has reductions none/add/mul/max/min but no mean. The dynamo exporter's "
            "torchlib maps 'mean' to reduction='none', i.e. plain last-write scatter.",
            fix="Compute the mean explicitly: total = x.scatter_add(0, idx, src); "
            "count = ones_like(x).scatter_add(0, idx, ones_like(src)); total / count (include_self=True semantics).",
            source="pytorch/pytorch#101535; microsoft/onnxscript#582 (torchlib maps 'mean' to 'none'); onnx/onnx#5100",
        ),
        claims=(
            Claim("mismatch", exporter="dynamo", probe="example"),
            Claim("export-fail", exporter="torchscript", match="mean"),
        ),
    )
)
register(
    Case(
        name="scatter_reduce_mean_explicit",
        model=_net("ScatterMeanExplicit"),
        inputs=_scatter_inputs,
        probes=_scatter_probes,
        fixes="scatter_reduce_mean",
    )
)

# scatter_reduce(reduce="amax", include_self=False) -----------------------------------------

register(
    Case(
        name="scatter_reduce_amax_exclude_self",
        model=_net("ScatterAmaxExcludeSelf"),
        inputs=_scatter_inputs,
        probes=_scatter_probes,
        card=Card(
            symptom="torchscript export fails: 'ONNX does not support include_self=False for scatter_reduce' (at "
            "opset 13: 'aten::scatter_reduce ... not supported'). Common in GNN pooling (torch_geometric's "
            "scatter max).",
            cause="ONNX ScatterElements(reduction='max') always reduces into the existing value (include_self=True); "
            "there is no attribute for excluding it, and the torchscript symbolic does not emulate it.",
            fix="Set the scattered-to positions to -inf first, then reduce with include_self=True: "
            "touched = zeros_like(x).scatter_add(0, idx, ones_like(src)) > 0; "
            "x.masked_fill(touched, -inf).scatter_reduce(0, idx, src, 'amax') (opset >= 18 for ScatterElements "
            "max). Or export with dynamo=True (torchlib emulates include_self=False).",
            source="pytorch/pytorch#106373; pyg-team/pytorch_geometric#8415 (fixed in #9587 by the -inf canvas)",
        ),
        claims=(Claim("export-fail", exporter="torchscript", match="include_self"),),
    )
)
register(
    Case(
        name="scatter_reduce_amax_masked",
        model=_net("ScatterAmaxMasked"),
        inputs=_scatter_inputs,
        probes=_scatter_probes,
        fixes="scatter_reduce_amax_exclude_self",
    )
)

# x[i, :, j] with negative indices ---------------------------------------------------


def _pair_inputs() -> dict[str, Any]:
    return {"x": randn(4, 5, 6), "i": _index([0, 2, 3]), "j": _index([1, 4, 3])}


def _pair_probes() -> dict[str, dict[str, Any]]:
    return {"negative": {"x": randn(4, 5, 6, seed=1), "i": _index([0, 2, -1]), "j": _index([1, -2, 3])}}


register(
    Case(
        name="multi_index_negative",
        model=_net("PairIndex"),
        inputs=_pair_inputs,
        probes=_pair_probes,
        card=Card(
            symptom="x[i, :, j] with two index tensors is exact for non-negative indices, and silently picks wrong "
            "elements under torchscript as soon as an index is negative (probe negative); no error, since the "
            "flattened index stays in range.",
            cause="For several index tensors the torchscript exporter flattens the indexed dims and gathers at "
            "i * size_j + j. Python-style negative indices are only valid per dimension: in the flat index -1 "
            "means the last element of the flattened axis, not of its own dim. (A single index tensor is exported "
            "as Gather, which does accept negatives.)",
            fix="Wrap negative indices before indexing: i = where(i < 0, i + x.shape[0], i) (same for j); or export "
            "with dynamo=True.",
            source="pytorch/pytorch#21716 (index export: 'not supporting advanced indexing with negative indices')",
        ),
        claims=(Claim("mismatch", exporter="torchscript", probe="negative"),),
    )
)
register(
    Case(
        name="multi_index_normalized",
        model=_net("PairIndexNormalized"),
        inputs=_pair_inputs,
        probes=_pair_probes,
        fixes="multi_index_negative",
    )
)
