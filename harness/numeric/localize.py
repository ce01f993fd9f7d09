"""Localize a mismatch: name the first node (or torch value) where a cell's values part ways.

A ``mismatch`` cell says *that* a runtime's outputs differ from torch's; this module says *where* it starts,
from what the export recorded beside the model (:mod:`harness.export.node_values`: ``model.debug.onnx``, every node's
value on the reference runtime, and where the graph itself already differs from torch).

In a runtime environment (one pinned onnxruntime, numpy, no onnx, no torch) :func:`localize_cell` runs
``model.debug.onnx`` (every top-level node output exposed) on that runtime and :func:`first_divergence` names
the first node, in graph order, one of whose outputs differs from the reference runtime's; where the reference
runtime itself already differs from torch, the graph is wrong, and the export's torch-side finding (dynamo)
says where it parts from torch. :func:`describe_localization` turns either into the cell's one line.

Also here, for both sides: the format of recorded node values (:class:`IntermediatesWriter`,
:func:`load_intermediates`) and the comparison of one output or value (:func:`first_output_mismatch`).

numpy only at import; :func:`localize_cell` takes the onnxruntime module it runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.core.records import DiffStats, error_line
from harness.numeric.compare import compare, describe, tolerance_of
from harness.store import layout
from harness.store.layout import DEBUG_MODEL, INTERMEDIATES, LOCALIZATION, LOCALIZATION_FILES, NODES

FILES = LOCALIZATION_FILES
"""What :func:`harness.export.node_values.prepare` writes beside ``model.onnx`` (named in :mod:`harness.store.layout`)."""

# onnxruntime's output types numpy can hold: :func:`run_values` leaves the others out (a bfloat16 output would fail
# the whole call).
_ORT_NUMPY_TYPES = frozenset(
    f"tensor({t})"
    for t in (
        "float",
        "uint8",
        "int8",
        "uint16",
        "int16",
        "int32",
        "int64",
        "bool",
        "float16",
        "double",
        "uint32",
        "uint64",
        "complex64",
        "complex128",
    )
)


_NAMES = "__names__"


def unreadable_outputs(session: Any) -> list[str]:
    """Outputs of an onnxruntime session that its Python API cannot return as numpy arrays."""
    return [o.name for o in session.get_outputs() if o.type not in _ORT_NUMPY_TYPES]


def run_values(session: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run an onnxruntime session (of a debug model): value name → array, in the session's output order.

    Only outputs numpy can hold are fetched (a bfloat16 or sequence output would
    fail the whole ``run``): exposed values whose type ONNX shape inference
    did not know are typed by the runtime, and skipped here if need be.
    """
    names = [o.name for o in session.get_outputs() if o.type in _ORT_NUMPY_TYPES]
    outs = session.run(names, dict(feeds))
    return {n: np.asarray(v) for n, v in zip(names, outs) if isinstance(v, np.ndarray)}  # noqa: B905 (one per name asked)


def save_intermediates(path: str | Path, values: Mapping[str, Mapping[str, np.ndarray]]) -> None:
    """Write ``{probe: {value name: array}}`` to one ``.npz`` (see :class:`IntermediatesWriter`)."""
    with IntermediatesWriter(path) as writer:
        for probe, named in values.items():
            writer.add(probe, named)


class IntermediatesWriter:
    """One ``.npz`` of ``{probe: {value name: array}}``, written a probe at a time: each array goes to the
    archive as it is added, so no more than one probe's values are ever held (a transformer's are
    hundreds of MB a probe). Readable by ``np.load`` and :func:`load_intermediates`.

    Value names are kept in an index per probe (``<probe>/__names__``) and the arrays stored by position
    (``<probe>/<i>``), so any name (with ``/``, ``:``, ``.``) round-trips. Arrays numpy cannot save
    without pickling (strings, objects) are left out. The file appears under its name only once it is
    complete (written as ``<name>.tmp.npz``, then renamed); :meth:`abandon` removes the partial file.
    """

    def __init__(self, path: str | Path) -> None:
        import zipfile

        self.path = Path(path)
        self.tmp = self.path.with_name(self.path.name + ".tmp.npz")
        self.zip = zipfile.ZipFile(self.tmp, "w", zipfile.ZIP_STORED, allowZip64=True)
        self.bytes = 0

    def add(self, probe: str, named: Mapping[str, np.ndarray]) -> int:
        """Write one probe's values; returns the bytes written so far."""
        if "/" in probe:
            raise ValueError(f"probe name {probe!r} contains '/'")
        kept = [(n, np.asarray(v)) for n, v in named.items() if np.asarray(v).dtype.kind not in "OUSV"]
        self._array(f"{probe}/{_NAMES}", np.array([n for n, _ in kept], dtype=str))
        for i, (_, v) in enumerate(kept):
            self._array(f"{probe}/{i}", v)
        return self.bytes

    def _array(self, name: str, array: np.ndarray) -> None:
        with self.zip.open(f"{name}.npy", "w", force_zip64=True) as f:
            np.lib.format.write_array(f, np.asanyarray(array), allow_pickle=False)
        self.bytes += array.nbytes

    def close(self) -> None:
        self.zip.close()
        self.tmp.replace(self.path)

    def abandon(self) -> None:
        self.zip.close()
        self.tmp.unlink(missing_ok=True)

    def __enter__(self) -> IntermediatesWriter:
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        self.abandon() if kind is not None else self.close()


def load_intermediates(path: str | Path, probe: str) -> dict[str, np.ndarray]:
    """One probe's values from :func:`save_intermediates`' file (empty when the probe is absent)."""
    with np.load(path, allow_pickle=False) as data:
        key = f"{probe}/{_NAMES}"
        if key not in data.files:
            return {}
        names = [str(n) for n in data[key]]
        return {n: data[f"{probe}/{i}"] for i, n in enumerate(names)}


def _compare_one(
    want: np.ndarray, got: np.ndarray, *, atol: float, rtol: float, scaled: float | None = None, loose_shape: bool = False
) -> tuple[bool, str]:
    """Compare one value with :func:`harness.numeric.compare.compare`; ``want`` plays torch's part."""
    ok, stats = _compare_value(want, got, atol=atol, rtol=rtol, scaled=scaled, loose_shape=loose_shape)
    return ok, _value_words(stats)


def _value_words(stats: DiffStats) -> str:
    """:func:`harness.numeric.compare.describe` of one value (it says "output 0" of the only thing compared)."""
    return describe(stats).replace("output 0: ", "").replace("output 0's", "its")


def _compare_value(
    want: np.ndarray, got: np.ndarray, *, atol: float, rtol: float, scaled: float | None = None, loose_shape: bool = False
) -> tuple[bool, DiffStats]:
    want, got = np.asarray(want), np.asarray(got)
    if loose_shape and want.shape != got.shape and want.size == got.size and np.squeeze(want).shape == np.squeeze(got).shape:
        got = got.reshape(want.shape)  # () vs (1,): the same value, kept as an ONNX 1-d tensor
    return compare([want], [got], atol=atol, rtol=rtol, scaled=scaled)


def first_divergence(
    nodes: Sequence[Mapping[str, Any]],
    got: Mapping[str, np.ndarray],
    want: Mapping[str, np.ndarray],
    *,
    atol: float,
    rtol: float,
    scaled: float | None = None,
    outputs: Any = None,
    noise: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The first node, in graph order, one of whose outputs differs between ``got`` and ``want``.

    Only outputs present in both are compared, with :func:`harness.numeric.compare.compare`'s
    rules: ``|got - want| <= atol + rtol * |want|`` or, for a floating value,
    ``max|got - want| <= scaled * max|want|``; NaN must meet NaN, inf an inf of
    the same sign, and a shape or dtype difference counts.

    Args:
        nodes: The debug model's nodes (:func:`debug_model`, ``nodes.json``).
        got: Values from the runtime under test.
        want: Values from the reference runtime.
        atol: Absolute tolerance.
        rtol: Relative tolerance.
        scaled: The tolerance relative to each value's largest magnitude (None: element-wise only).
        outputs: Per-output tolerances of the model's outputs: not used for node values.
        noise: Filled, when given, with the first node whose value differs element-wise but only within
            ``scaled`` (fp32 rounding): ``{"node", "op", "output", "index", "error"}``.

    Returns:
        ``{"node", "op", "output", "index", "detail"}`` (``detail`` in
        :func:`harness.numeric.compare.describe`'s words, with "reference" for its
        "torch": ``"3/24 elements differ, NaN: reference 3, runtime 0"``),
        plus ``"fx"`` when the node records its FX node; None when every
        shared output agrees.
    """
    for index, node in enumerate(nodes):
        for name in node["outputs"]:
            if name not in got or name not in want:
                continue
            ok, stats = _compare_value(want[name], got[name], atol=atol, rtol=rtol, scaled=scaled)
            where = {"node": node["name"], "op": node["op"], "output": name, "index": index}
            if "fx" in node:
                where["fx"] = node["fx"]
            if ok:
                if noise is not None and not noise and stats.mismatched and stats.scaled_error is not None:
                    noise.update(where, error=stats.scaled_error)
                continue
            return {**where, "detail": re.sub(r"\btorch\b", "reference", _value_words(stats))}  # describe() says torch
    return None


def first_output_mismatch(
    nodes: Sequence[Mapping[str, Any]],
    names: Sequence[str],
    got: Sequence[np.ndarray],
    want: Sequence[np.ndarray],
    *,
    atol: float,
    rtol: float,
    scaled: float | None = None,
    outputs: Any = None,
) -> str | None:
    """The first graph output that differs from torch's, and the node that computes it, in one line.

    The graph side when nothing finer is known (TorchScript exports): the
    reference runtime's own output differs from torch's.

    Args:
        nodes: :func:`debug_model`'s node list.
        names: The graph's output names, in order.
        got: The reference runtime's outputs, in that order.
        want: torch's outputs.
        atol: Absolute tolerance.
        rtol: Relative tolerance.
        scaled: The tolerance relative to each output's largest magnitude.
        outputs: Per-output tolerances, by index.

    Returns:
        ``"output out0 of node /Max (Max): 3/24 elements differ, ..."``, or None when all agree.
    """
    if len(got) != len(want):
        return f"the graph has {len(got)} outputs, torch {len(want)}"
    producers = {o: f"{n['name']} ({n['op']})" for n in nodes for o in n["outputs"]}
    for i, (name, out, ref) in enumerate(zip(names, got, want)):  # noqa: B905 (run closure: Python 3.9)
        a, r, q = tolerance_of(i, atol, rtol, scaled, outputs)
        ok, detail = _compare_one(ref, out, atol=a, rtol=r, scaled=q)
        if not ok:
            node = f" of node {producers[name]}" if name in producers else ""
            return f"output {name}{node}: {detail}"
    return None


def describe_torch(found: Mapping[str, Any] | None) -> str:
    """One line for :func:`torch_divergence`'s result: where the graph parts from torch."""
    if not found:
        return ""
    if "guard" in found:
        return f"the probe breaks the export's guards: {found['guard']}"
    if "value" in found:
        name = f"{found['fx']} ({found['value']})" if found.get("fx") else found["value"]
        return f"the graph differs from torch from FX value {name} = {found['target']}: {found['detail']}"
    if "capture" in found:
        return f"torch.export's program already differs from eager torch: {found['capture']}"
    return str(found.get("error", ""))


def _feeds(ref: Any, probe: str) -> dict[str, np.ndarray]:
    return layout.probe_inputs(ref, probe)


def _torch_outputs(ref: Any, probe: str) -> list[np.ndarray]:
    return layout.probe_outputs(ref, probe)


ON_DEMAND = "on demand"
"""``localization.json``'s ``intermediates`` for a model whose node values were too large to record for
every probe at export: the run stage has them recorded for a mismatching probe (:func:`on_demand`)."""


def on_demand(
    art_dir: str | Path, probe: str, *, cache: str | Path, python: str | None, timeout: float, runtime: str = ""
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Run stage: the reference runtime's values of one probe of a large model, recorded once by the export
    environment's interpreter (``python``, :func:`record`) and kept in ``cache``; ``({}, {"error": why})``
    where they cannot be had (that interpreter is not on this machine, it failed)."""
    import subprocess

    dest = Path(cache) / f"{probe}.npz"
    meta_path = dest.with_name(dest.name + ".json")
    if not meta_path.exists():
        if not python or not Path(python).exists():
            where = f" ({python})" if python else ""
            return {}, {
                "error": f"not recorded: this model's node values are recorded on demand by the export environment's "
                f"reference runtime{where}, which this machine lacks; run the stage where the export ran"
            }
        cmd = [python, "-m", "harness", "reference", str(art_dir), probe, "--out", str(dest), "--timeout", f"{timeout:g}"]
        if runtime:
            cmd += ["--runtime", runtime]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 60)
        except subprocess.TimeoutExpired:
            _remove_partial(dest)
            return {}, {"error": f"not recorded: the reference pass exceeded {timeout:g} s ([export] reference_timeout)"}
        if proc.returncode != 0 or not meta_path.exists():
            _remove_partial(dest)
            said = (proc.stderr.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
            return {}, {"error": f"not recorded: the reference pass failed: {said}"}
    from harness.store.cache import read_json

    meta = read_json(meta_path) or {}
    return (load_intermediates(dest, probe) if dest.exists() else {}), meta


def _remove_partial(dest: Path) -> None:
    """What a killed :func:`record` leaves: its values half-written, the plain outputs it compared them with."""
    for name in (f"{dest.name}.tmp.npz", f"{dest.name}.plain.npz", f"{dest.name}.plain.npz.tmp.npz"):
        dest.with_name(name).unlink(missing_ok=True)


def localize_cell(
    ort: Any,
    art_dir: str | Path,
    probe: str,
    feeds: Mapping[str, np.ndarray],
    *,
    atol: float,
    rtol: float,
    scaled: float | None = None,
    outputs: Any = None,
    providers: Sequence[str] = ("CPUExecutionProvider",),
    threads: int = 1,
    reuse: dict[str, Any] | None = None,
    reference: Callable[[str], tuple[dict[str, np.ndarray], dict[str, Any]]] | None = None,
) -> dict[str, Any]:
    """Run stage: where does a mismatching cell start? numpy and the given onnxruntime module only.

    Runs ``model.debug.onnx`` on ``ort`` (default graph optimizations, as the
    cell ran) and compares it node by node with the reference runtime's values.

    Args:
        ort: The ``onnxruntime`` module of this environment.
        art_dir: The artifact folder (with :func:`prepare`'s files).
        probe: The mismatching probe.
        feeds: The probe's graph inputs.
        atol: The case's absolute tolerance.
        rtol: The case's relative tolerance.
        scaled: The case's tolerance relative to a value's largest magnitude.
        outputs: The case's per-output tolerances.
        providers: Execution providers, as the cell used them.
        threads: Intra-op threads.
        reuse: A dict kept across the probes of one artifact: its debug session and files are
            loaded once, however many of its probes mismatch.
        reference: Where the probe's reference values come from when the export did not record them
            (a large model): ``probe -> (values, {"unfaithful" or "error": ...})`` (:func:`on_demand`).

    Returns:
        A dict :func:`describe_localization` turns into one line, with any of:
        ``"runtime"`` (:func:`first_divergence`'s result: the first node whose
        output differs from the reference runtime's); ``"noise"`` (the first
        node before it that differs only within fp32 rounding); ``"graph"``
        (the reference runtime disagrees with torch as well, so the graph is
        wrong: the first differing output) and ``"torch"``
        (:func:`torch_divergence`'s result from export time, dynamo only);
        ``"across_nodes"`` (the mismatch goes away once every value is
        exposed: not one node's doing); ``"error"`` (it could not run).
    """
    art = Path(art_dir)
    if not (art / NODES).exists() or not (art / DEBUG_MODEL).exists():
        return {"error": "no debug model for this artifact"}
    reuse = {} if reuse is None else reuse
    if "nodes" not in reuse:
        reuse["nodes"] = json.loads((art / NODES).read_text(encoding="utf-8"))
        reuse["meta"] = json.loads((art / LOCALIZATION).read_text(encoding="utf-8")) if (art / LOCALIZATION).exists() else {}
    nodes, meta = reuse["nodes"], reuse["meta"]
    export_side = dict(meta.get("probes", {}).get(probe, {}))
    out: dict[str, Any] = {}
    if export_side.get("reference", "ok") != "ok":
        out["graph"] = export_side.get("where") or export_side["reference"]
        if export_side.get("torch") is not None:
            out["torch"] = export_side["torch"]
    want = load_intermediates(art / INTERMEDIATES, probe) if (art / INTERMEDIATES).exists() else {}
    if not want and meta.get("intermediates") == ON_DEMAND and reference is not None and "error" not in export_side:
        want, found_meta = reference(probe)
        export_side.update(found_meta)
    if not want:
        out["error"] = export_side.get("error") or meta.get("error") or f"no reference values for probe {probe!r}"
        return out
    try:
        got = _debug_values(ort, art, feeds, providers, threads, reuse)
    except Exception as exc:
        out["error"] = f"debug model: {type(exc).__name__}: {error_line(str(exc))}"
        return out
    noise: dict[str, Any] = {}
    found = first_divergence(nodes, got, want, atol=atol, rtol=rtol, scaled=scaled, noise=noise)
    if found is not None:
        out["runtime"] = found
    if noise and (found is None or noise["index"] < found["index"]):
        out["noise"] = noise
    reproduced = _reproduces(art, probe, got, {"atol": atol, "rtol": rtol, "scaled": scaled, "outputs": outputs})
    if not reproduced or export_side.get("unfaithful") or (found is None and "graph" not in out):
        # The values disagree with torch only while they stay inside the runtime: exposing them changed the result.
        out["across_nodes"] = export_side.get("unfaithful") or "the debug model does not reproduce the mismatch"
    return out


def _debug_values(
    ort: Any, art: Path, feeds: Mapping[str, np.ndarray], providers: Sequence[Any], threads: int, reuse: dict[str, Any]
) -> dict[str, np.ndarray]:
    """Every exposed value of ``model.debug.onnx`` on this runtime (default graph optimizations, as the cell ran);
    its session made once per artifact."""
    if "debug" not in reuse:
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        so.log_severity_level = 3
        reuse["debug"] = ort.InferenceSession(str(art / DEBUG_MODEL), sess_options=so, providers=list(providers))
    return run_values(reuse["debug"], feeds)


def _reproduces(art: Path, probe: str, got: Mapping[str, np.ndarray], tol: Mapping[str, Any]) -> bool:
    """Whether the debug model's outputs (its first values) still differ from torch's, as the cell's did."""
    if not (art / layout.REFERENCE).exists():
        return True
    with np.load(art / layout.REFERENCE) as ref:
        eager = _torch_outputs(ref, probe)
    finals = list(got.values())[: len(eager)]  # the graph outputs come first
    if eager and len(finals) == len(eager):
        return not compare(eager, finals, **tol)[0]
    return True


_SUBGRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})


def describe_localization(loc: Mapping[str, Any] | None) -> str:
    """One line for a table: where a mismatch starts (:func:`localize_cell`'s result)."""
    if not loc:
        return ""
    parts = []
    if "runtime" in loc:
        r = loc["runtime"]
        fx = f" (FX {r['fx']})" if r.get("fx") else ""
        inside = ", inside its subgraph" if r["op"] in _SUBGRAPH_OPS else ""
        parts.append(f"starts at node {r['node']} ({r['op']}){fx}{inside}, output {r['output']!r}: {r['detail']}")
    if "noise" in loc:
        n = loc["noise"]
        at = f"node {n['node']} ({n['op']}): error {n['error']:.2g} of its largest |value|"
        if "runtime" in loc:
            parts[-1] += f" (the nodes before it differ only within fp32 noise, the first at {at})"
        else:
            parts.append(f"every node is within fp32 noise of the reference (the first to differ at all: {at})")
    if "across_nodes" in loc:
        parts.append(
            "no single node: the mismatch goes away once every value is a graph output, so it comes from how the runtime "
            "computes across nodes (fp16 ops run in float32 between merged Casts, or a fusion)"
        )
    elif "graph" in loc:
        parts.append(describe_torch(loc.get("torch")) or f"the graph itself differs from torch: {loc['graph']}")
    if "error" in loc:
        parts.append(str(loc["error"]))
    return "; ".join(p for p in parts if p)
