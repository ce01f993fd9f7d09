"""The export side of localization: what a mismatching cell is later compared with, recorded at export.

Beside ``model.onnx`` (:func:`prepare` does all of it):

- ``model.debug.onnx``: the model with every top-level node output also a graph output (:func:`debug_model`);
- ``nodes.json``: its nodes in graph order (name, op type, outputs);
- ``intermediates.npz``: the *reference* runtime's value of every exposed output for every probe (the export
  environment's onnxruntime, CPU, graph optimizations disabled; :func:`run_reference`), or, for a model too
  large to keep them, none: the run stage has one probe's recorded on demand (:func:`record`);
- ``localization.json``: per probe, whether the reference's own outputs already differ from torch's and, for
  dynamo, the torch-side finding below.

**Torch side** (dynamo exports; the graph itself is wrong: the reference runtime's own output already differs
from torch's). :func:`torch_divergence` runs ``onnx_program.exported_program`` node by node
(:func:`torch_values`, one ``torch.fx.Interpreter`` pass, no onnxruntime session per value as
``verify_onnx_program(compare_intermediates=True)`` opens) and compares each FX value with the reference
runtime's value of the same name. torch 2.13's dynamo exporter names the ONNX value of an FX ``call_function``
node after the node (``relu`` → ``relu``) and its producing node ``node_<name>``; an op with several outputs
gives ``<node>__0``, ``<node>__1``, ..., and a ``getitem`` of such a tuple renames its element to the getitem's
name. Graph inputs and outputs renamed by ``input_names``/``output_names`` keep the FX name in their
``pkg.torch.onnx.original_node_name`` metadata (:func:`fx_aliases`), initializers are renamed to state-dict
names (``conv.weight``), and every node records its FX node in ``pkg.torch.onnx.fx_node``. Values the ONNX
optimizer folded or fused away have no ONNX namesake and are not compared. A probe may also fail the program's
input guards (a specialized dim or Python scalar), or the program may already differ from eager torch (a
Python loop or list unrolled at capture): both are reported as such.

Only top-level nodes are exposed: values computed inside an ``If``/``Loop``/``Scan`` body or a model-local
function are not, so a divergence there is named after the control-flow node or the function call.

Runs in the export environment (onnx, onnxruntime and torch, imported lazily); the run stage's side is
:mod:`harness.numeric.localize`.
"""

from __future__ import annotations

import json
import operator
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from harness.core.records import ExportRecord, error_line, first_line
from harness.numeric.compare import compare, describe
from harness.numeric.localize import (
    ON_DEMAND,
    IntermediatesWriter,
    _compare_one,
    _feeds,
    _torch_outputs,
    first_output_mismatch,
    load_intermediates,
    run_values,
)
from harness.pool.workers import die_with_parent
from harness.store import layout
from harness.store.layout import DEBUG_MODEL, INTERMEDIATES, LOCALIZATION, NODES

if TYPE_CHECKING:
    import onnx
    import torch

_FX_NODE = re.compile(r"^%(\S+) :")

# TensorProto element types numpy (and so onnxruntime's Python API) can hold. Others (bfloat16,
# float8, int4, ...) make InferenceSession.run fail for the whole call: they are never exposed.
_NUMPY_ELEM_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 14, 15})


class GuardFailure(Exception):
    """The probe fails the exported program's input guards (e.g. a dim specialized at export)."""


def op_name(node: onnx.NodeProto) -> str:
    """``op_type``, domain-qualified when the domain is not ai.onnx (``com.microsoft::FusedMatMul``)."""
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"


def debug_model(model: onnx.ModelProto, exclude: Sequence[str] = ()) -> tuple[onnx.ModelProto, list[dict[str, Any]]]:
    """A copy of ``model`` in which every top-level node output is also a graph output.

    The original outputs stay first and in order, so ``run(None, ...)[:n]`` are
    the model's own outputs. New outputs get their type from ONNX shape
    inference where it knows it, and none otherwise (onnxruntime 1.15 and
    later infer it). Values of a type numpy cannot hold (bfloat16, float8,
    int4, sequences, ...) are not exposed: onnxruntime's Python API would fail
    the whole run. Nodes inside subgraphs (``If``/``Loop`` bodies) and
    model-local functions are not looked into. The IR version, opsets and
    functions are unchanged, so the copy loads wherever the original does.

    Args:
        model: The model as exported.
        exclude: Value names not to expose (e.g. ones the runtime reports of a
            non-numpy type).

    Returns:
        The copy, and its top-level nodes in graph order:
        ``{"name": node name or "#<index>", "op": op type, "outputs": [...]}``
        (plus ``"fx"``, the FX node a dynamo export made it from, when the
        node says so). ``outputs`` lists every non-empty output name, exposed
        or not.
    """
    import onnx

    debug = onnx.ModelProto()
    debug.CopyFrom(model)
    graph = debug.graph
    types: dict[str, onnx.TypeProto] = {}
    try:  # types only: a model shape inference chokes on still gets its outputs, untyped
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
        for vi in (*inferred.graph.value_info, *inferred.graph.output):
            if vi.type.WhichOneof("value") is not None:
                types[vi.name] = vi.type
    except Exception:
        pass
    for vi in (*model.graph.value_info, *model.graph.output):
        if vi.type.WhichOneof("value") is not None:
            types.setdefault(vi.name, vi.type)
    taken = {o.name for o in graph.output} | {i.name for i in graph.input} | {i.name for i in graph.initializer}
    skip = set(exclude)
    nodes: list[dict[str, Any]] = []
    for index, node in enumerate(graph.node):
        entry: dict[str, Any] = {"name": node.name or f"#{index}", "op": op_name(node), "outputs": [o for o in node.output if o]}
        fx = next((p.value for p in node.metadata_props if p.key == "pkg.torch.onnx.fx_node"), None)
        if fx and (m := _FX_NODE.match(fx)):
            entry["fx"] = m.group(1)
        nodes.append(entry)
        for name in entry["outputs"]:
            if name in taken or name in skip:
                continue
            taken.add(name)
            vi = onnx.ValueInfoProto(name=name)
            known = types.get(name)
            if known is not None:
                kind = known.WhichOneof("value")
                if kind != "tensor_type" or known.tensor_type.elem_type not in _NUMPY_ELEM_TYPES:
                    continue
                vi.type.CopyFrom(known)
            graph.output.append(vi)
    return debug, nodes


def reference_weights(model: onnx.ModelProto, path: str | Path, minimum: int = 1024) -> int:
    """Point every initializer of ``model`` (loaded from ``path``) whose ``raw_data`` holds ``minimum``
    bytes or more at those bytes in ``path`` itself, as ONNX external data (``location`` the file's name,
    its ``offset`` and ``length``), instead of holding a copy: a model written from it next to ``path``
    (the debug model) costs its graph, not another copy of the weights. Initializers already in external
    data keep pointing where they point (``model.onnx.data``). Returns the bytes no longer held.

    Raises:
        ValueError: ``path``'s initializers do not line up with ``model``'s (it was not loaded from it).
    """
    import onnx

    from harness.core.onnxfile import initializer_spans

    spans = initializer_spans(path)
    inits = model.graph.initializer
    if len(spans) != len(inits):
        raise ValueError(f"{path} holds {len(spans)} initializers, the model {len(inits)}")
    moved = 0
    for init, span in zip(inits, spans, strict=True):
        if span is None or init.data_location == onnx.TensorProto.EXTERNAL or span[1] < minimum:
            continue
        if len(init.raw_data) != span[1]:
            raise ValueError(f"initializer {init.name!r} does not match its bytes in {path}")
        init.ClearField("raw_data")
        init.data_location = onnx.TensorProto.EXTERNAL
        del init.external_data[:]
        for key, value in (("location", Path(path).name), ("offset", str(span[0])), ("length", str(span[1]))):
            entry = init.external_data.add()
            entry.key, entry.value = key, value
        moved += span[1]
    return moved


def write_debug_model(art_dir: str | Path) -> tuple[onnx.ModelProto, list[dict[str, Any]]]:
    """``model.debug.onnx`` and ``nodes.json`` beside ``model.onnx``: every node output exposed, the
    weights referenced in ``model.onnx`` (or its ``model.onnx.data``), not copied. Returns the model as
    loaded (its weights referenced, not held) and the nodes."""
    import onnx

    art = Path(art_dir)
    model = onnx.load(str(art / layout.MODEL), load_external_data=False)
    try:
        reference_weights(model, art / layout.MODEL)
    except (ValueError, IndexError):  # a file this cannot read the layout of: the debug model holds a copy
        model = onnx.load(str(art / layout.MODEL), load_external_data=False)
    debug, nodes = debug_model(model)
    onnx.save(debug, str(art / DEBUG_MODEL))
    (art / NODES).write_text(json.dumps(nodes, indent=1) + "\n", encoding="utf-8")
    return model, nodes


def fx_aliases(model: onnx.ModelProto) -> dict[str, str]:
    """FX node name → ONNX name of the graph inputs and outputs a dynamo export renamed.

    ``torch.onnx.export(..., input_names=, output_names=)`` renames graph
    inputs and outputs after translation and records the FX name in the
    value's ``pkg.torch.onnx.original_node_name`` metadata (IR 10).
    """
    aliases: dict[str, str] = {}
    for vi in (*model.graph.input, *model.graph.output):
        for prop in getattr(vi, "metadata_props", ()):
            if prop.key == "pkg.torch.onnx.original_node_name" and prop.value != vi.name:
                aliases[prop.value] = vi.name
    return aliases


def _tensor_to_numpy(value: torch.Tensor) -> np.ndarray | None:
    import torch

    value = value.detach().cpu()
    if value.is_complex():  # the dynamo exporter represents complex tensors as [..., 2] floats
        value = torch.view_as_real(value)
    if value.dtype in (torch.bfloat16,) or (value.dtype.is_floating_point and value.element_size() == 1):
        return None  # numpy has no such dtype, and the runtime cannot return one either
    try:
        return value.numpy()
    except (TypeError, RuntimeError):
        return None


def _run_program(exported_program: Any, args: tuple[Any, ...]) -> tuple[dict[str, np.ndarray], dict[str, str], list[str]]:
    """Run the program's module node by node: (values, targets, output value names)."""
    import torch

    values: dict[str, np.ndarray] = {}
    targets: dict[str, str] = {}
    outputs: list[str] = []

    def keep(name: str, target: str, result: Any) -> None:
        if isinstance(result, torch.Tensor):
            arr = _tensor_to_numpy(result)
            if arr is not None:
                values[name] = arr
                targets[name] = target
        elif isinstance(result, (tuple, list)):  # a multi-output op: ONNX values <name>__<i>
            for i, item in enumerate(result):
                if isinstance(item, torch.Tensor):
                    keep(f"{name}__{i}", target, item)

    class Collector(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            if n.op == "call_module" and str(n.target).startswith("_guards_fn"):
                try:
                    return super().run_node(n)
                except Exception as exc:
                    raise GuardFailure(first_line(str(exc))) from exc
            result = super().run_node(n)
            if n.op == "call_function":
                target = str(n.target)
                src = n.args[0] if n.args else None
                if n.target is operator.getitem and isinstance(src, torch.fx.Node) and len(n.args) > 1:
                    target = f"{src.target}[{n.args[1]}]"  # the op whose output it is, not 'getitem'
                keep(n.name, target, result)
            elif n.op == "output":
                flat = n.args[0] if isinstance(n.args[0], (tuple, list)) else (n.args[0],)
                outputs.extend(a.name if isinstance(a, torch.fx.Node) else "" for a in flat)
            return result

    module = exported_program.module()
    torch.manual_seed(0)
    with torch.no_grad():
        try:
            Collector(module).run(*args)
        except GuardFailure:
            raise
        except Exception as exc:
            if str(exc).startswith("Guard failed"):
                raise GuardFailure(first_line(str(exc))) from exc
            raise
    return values, targets, outputs


def torch_values(
    exported_program: torch.export.ExportedProgram, args: tuple[Any, ...], aliases: Mapping[str, str] | None = None
) -> dict[str, np.ndarray]:
    """Every tensor value the exported program computes for ``args``, in FX order, by ONNX name.

    A ``call_function`` node's value is named after the node; a tuple-valued
    node's elements ``<node>__<i>``. ``aliases`` (:func:`fx_aliases`) adds
    the renamed graph outputs under their ONNX names too.

    Args:
        exported_program: ``onnx_program.exported_program`` (the decomposed
            program the ONNX graph was translated from).
        args: The probe's inputs, positional, as the model takes them.
        aliases: FX name → ONNX name.

    Raises:
        GuardFailure: The probe fails the program's input guards.
    """
    values, _, _ = _run_program(exported_program, args)
    for fx, onnx_name in (aliases or {}).items():
        if fx in values:
            values[onnx_name] = values[fx]
    return values


def torch_divergence(
    exported_program: torch.export.ExportedProgram,
    args: tuple[Any, ...],
    reference: Mapping[str, np.ndarray],
    *,
    atol: float,
    rtol: float,
    scaled: float | None = None,
    outputs: Any = None,
    aliases: Mapping[str, str] | None = None,
    eager: Sequence[np.ndarray] | None = None,
) -> dict[str, Any] | None:
    """The first FX value (in FX order) whose torch value differs from the reference runtime's.

    Args:
        exported_program: ``onnx_program.exported_program``.
        args: The probe's inputs, positional.
        reference: The reference runtime's values by ONNX name (one probe of
            ``intermediates.npz``).
        atol: Absolute tolerance.
        rtol: Relative tolerance.
        aliases: FX name → ONNX name of renamed graph inputs/outputs
            (:func:`fx_aliases`). None: the program's outputs are matched by
            position with the first entries of ``reference``, which holds when
            it is in the debug model's output order (as :func:`run_values` and
            :func:`load_intermediates` give it: the graph outputs first).
        eager: torch's eager outputs for the probe (``reference.npz``). When
            every shared value agrees, the program's own outputs are compared
            with them: a difference there is torch.export's capture, not the
            ONNX translation.

    Returns:
        ``{"value", "target", "detail"}`` (the ONNX value name, the FX node's
        target, and the difference in :func:`harness.numeric.compare.describe`'s words,
        torch's value as the reference), ``{"guard": message}`` when the probe
        fails the program's input guards, ``{"error": message}`` when the
        program raises on the probe, ``{"capture": detail}`` when the program
        agrees with the graph but not with eager torch, or None.
    """
    try:
        values, targets, names = _run_program(exported_program, args)
    except GuardFailure as exc:
        return {"guard": first_line(str(exc))}
    except Exception as exc:
        return {"error": f"the exported program fails on this probe: {type(exc).__name__}: {first_line(str(exc))}"}
    if aliases is None:  # the graph outputs come first in the debug model's order
        first = list(reference)[: len(names)]
        aliases = {fx: name for fx, name in zip(names, first, strict=False) if fx and fx not in reference and name not in values}
    alias = dict(aliases)
    for fx, value in values.items():
        name = fx if fx in reference else alias.get(fx, fx)
        if name not in reference:
            continue
        ok, detail = _compare_one(value, reference[name], atol=atol, rtol=rtol, scaled=scaled, loose_shape=True)
        if not ok:
            found = {"value": name, "target": targets[fx], "detail": detail}
            if name != fx:
                found["fx"] = fx
            return found
    if eager is not None:
        program_outs = [values.get(n) for n in names]
        if all(v is not None for v in program_outs):
            ok, stats = compare(list(eager), program_outs, atol=atol, rtol=rtol, scaled=scaled, outputs=outputs)  # type: ignore[arg-type]
            if not ok:
                return {"capture": describe(stats).replace("torch", "eager").replace("runtime", "program")}
    return None


def reference_session(path: str | Path) -> Any:
    """An onnxruntime CPU session with graph optimizations disabled, one thread: the reference."""
    import onnxruntime

    onnxruntime.set_default_logger_severity(3)  # a failing probe is recorded, not printed
    so = onnxruntime.SessionOptions()
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    return onnxruntime.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])


def _reference_values(
    debug_path: str,
    feeds: Mapping[str, Mapping[str, np.ndarray]],
    out_path: str,
    plain: tuple[str, str] | None,
    budget: int | None = None,
) -> dict[str, Any]:
    errors: dict[str, str] = {}
    if plain is not None:  # the model as it is, on the same reference: does it differ from torch? does exposing every value?
        model_path, plain_out = plain
        try:
            psess = reference_session(model_path)
        except Exception as exc:
            return {"problem": f"cannot load the model: {type(exc).__name__}: {error_line(str(exc))}"}
        names = [o.name for o in psess.get_outputs()]
        with IntermediatesWriter(plain_out) as outs:
            for probe, given in feeds.items():
                try:
                    run = psess.run(None, {i.name: given[i.name] for i in psess.get_inputs()})
                    outs.add(probe, dict(zip(names, run, strict=True)))
                except Exception as exc:
                    errors[probe] = f"{type(exc).__name__}: {first_line(str(exc))}"
        del psess
    if budget == 0:
        return {"problem": None, "errors": errors}
    try:
        sess = reference_session(debug_path)
    except Exception as exc:
        return {"problem": f"cannot load the debug model: {type(exc).__name__}: {error_line(str(exc))}"}
    inputs = [i.name for i in sess.get_inputs()]
    writer = IntermediatesWriter(out_path)
    try:
        for probe, given in feeds.items():
            try:
                values = run_values(sess, {n: given[n] for n in inputs})
            except Exception as exc:  # a probe the graph cannot run (a run-fail cell): no values for it
                errors.setdefault(probe, f"{type(exc).__name__}: {first_line(str(exc))}")
                continue
            if budget is not None and writer.bytes + sum(v.nbytes for v in values.values()) > budget:
                writer.abandon()  # too large to keep for every probe: recorded on demand, for a probe that mismatches
                return {"problem": None, "errors": errors, "over_budget": True}
            writer.add(probe, values)
            del values
    except BaseException:
        writer.abandon()
        raise
    writer.close()
    return {"problem": None, "errors": errors}


def run_reference(
    debug_path: str | Path,
    feeds: Mapping[str, Mapping[str, np.ndarray]],
    out_path: str | Path,
    timeout: float = 120.0,
    plain: tuple[str | Path, str | Path] | None = None,
    budget: int | None = None,
) -> str | None:
    """Export stage: the reference runtime's values of every exposed output, per probe, into ``out_path``.

    Runs in a forked child (``os.fork``: export workers are daemonic, which
    ``multiprocessing`` forbids children of), so an onnxruntime that crashes or
    hangs on this model costs the localization, not the export. A probe the
    reference cannot run gets no values (:func:`load_intermediates` returns
    ``{}`` for it). Values are written a probe at a time; a child killed on the
    way leaves no partial file behind.

    Args:
        debug_path: ``model.debug.onnx``.
        feeds: Probe → graph input name → array (extra names are ignored).
        out_path: Where to write ``intermediates.npz``.
        timeout: Seconds before the child is killed.
        plain: ``(model.onnx, where to write its outputs)``: the plain model's outputs per probe on the
            same reference, in the same child (saved like the intermediates), before the values.
        budget: At most this many bytes of values; past it ``out_path`` is not written (the values are
            recorded on demand). 0 runs the plain model only; None records every probe.

    Returns:
        None when the values were written (or were over ``budget``); otherwise why not, in one line.
    """
    import os
    import select
    import signal

    read, write = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the caller's code
        code = 0
        try:
            os.close(read)
            die_with_parent(parent)  # a killed export must not leave the runtime spinning
            paths = (str(plain[0]), str(plain[1])) if plain is not None else None
            result = _reference_values(str(debug_path), feeds, str(out_path), paths, budget)
            os.write(write, json.dumps(result).encode())
        except BaseException as exc:
            os.write(write, json.dumps({"problem": f"{type(exc).__name__}: {first_line(str(exc))}"}).encode())
            code = 1
        finally:
            os._exit(code)
    os.close(write)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([read], [], [], left)[0]:
                timed_out = True
                break
            chunk = os.read(read, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read)
        if timed_out:
            os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
    if timed_out or os.WIFSIGNALED(status):  # what the dead child was writing
        for partial in (Path(out_path), *([Path(plain[1])] if plain is not None else [])):
            partial.with_name(partial.name + ".tmp.npz").unlink(missing_ok=True)
    if timed_out:
        return f"not recorded: the reference pass exceeded {timeout:g} s ([export] reference_timeout)"
    if os.WIFSIGNALED(status):
        return f"the reference runtime crashed ({signal.Signals(os.WTERMSIG(status)).name})"
    try:
        problem = json.loads(b"".join(chunks).decode())["problem"]
    except (ValueError, KeyError):
        return f"the reference runtime exited with status {os.waitstatus_to_exitcode(status)} and no result"
    return str(problem) if problem else None


PLAIN_OUTPUTS = ".plain-outputs.npz"


TORCH_SIDE = ".torch-side.npz"


TEMPORARY = (PLAIN_OUTPUTS, TORCH_SIDE, *(f"{n}.tmp.npz" for n in (INTERMEDIATES, PLAIN_OUTPUTS, TORCH_SIDE)))
"""What :func:`prepare` writes only while it runs (and a killed pass may leave): removed after it."""


def prepare(
    art_dir: str | Path,
    probes: Mapping[str, Mapping[str, Any]],
    *,
    atol: float,
    rtol: float,
    scaled: float | None = None,
    outputs: Any = None,
    exported_program: Any = None,
    timeout: float = 120.0,
    budget: int | None = None,
) -> dict[str, Any]:
    """Export stage, all of it: ``model.debug.onnx``, ``nodes.json``, ``localization.json`` and, within
    ``budget``, ``intermediates.npz``.

    Needs onnx and onnxruntime (the reference) and, for the torch side, torch.
    The reference runs in a forked child (:func:`run_reference`): the plain
    model once per probe, to tell whether the graph itself differs from torch,
    then the debug model (every value exposed, its weights the model's own,
    referenced) probe by probe, streamed into ``intermediates.npz``, as long as
    the values stay within ``budget`` bytes. A larger model's values are not
    kept (``"intermediates": "on demand"``): the run stage has the probe of a
    cell that mismatches recorded then (:func:`on_demand`). A dynamo export
    whose graph differs from torch on a probe still gets its torch-side
    finding: that probe's values are recorded for the comparison and dropped.
    Comparing a value exposed and unexposed tells whether exposing every value
    changed the result (``"unfaithful"``: fp16 chains that onnxruntime
    otherwise runs in float32 between merged Casts).

    Args:
        art_dir: The artifact folder (``model.onnx`` and ``reference.npz`` written).
        probes: Probe name → the probe's inputs as the model takes them (tensors
            and Python scalars); probes torch could not run (no outputs in
            ``reference.npz``) are skipped.
        atol: The case's absolute tolerance.
        rtol: The case's relative tolerance.
        scaled: The case's tolerance relative to an output's largest magnitude.
        outputs: The case's per-output tolerances.
        exported_program: ``onnx_program.exported_program`` of a dynamo export;
            None for TorchScript (no torch-side localization).
        timeout: Seconds the reference runtime may take (both passes together).
        budget: Bytes of node values recorded for every probe at most; None: no limit. A model whose
            weights alone exceed it is not run with every value exposed at all.

    Returns:
        What ``localization.json`` holds: ``{"error": None or why there are no
        values, "exposed": n, "intermediates": "recorded" or "on demand",
        "probes": {probe: {"reference": "ok" or how it differs from torch,
        "where": the first differing output (graph side), "torch":
        torch_divergence(...), "unfaithful": ..., "error": ...}}, "seconds": {...}}``.
    """
    art = Path(art_dir)
    t0 = time.perf_counter()
    model, nodes = write_debug_model(art)
    t1 = time.perf_counter()
    with np.load(art / layout.REFERENCE) as ref:
        ran = [p for p in probes if _torch_outputs(ref, p)]
        feeds = {p: _feeds(ref, p) for p in ran}
        eager = {p: _torch_outputs(ref, p) for p in ran}
    work = _Prepare(art, model, nodes, eager, {"atol": atol, "rtol": rtol, "scaled": scaled, "outputs": outputs})
    info: dict[str, Any] = {"error": None, "exposed": sum(len(n["outputs"]) for n in nodes), "probes": work.summary}
    weights = sum(f.stat().st_size for f in (art / layout.MODEL, art / layout.DATA) if f.exists())
    within = budget is None or weights <= budget
    deadline = time.monotonic() + timeout
    plain_files = (art / layout.MODEL, art / PLAIN_OUTPUTS)
    info["error"] = run_reference(
        art / DEBUG_MODEL, feeds, art / INTERMEDIATES, timeout, plain=plain_files, budget=budget if within else 0
    )
    recorded = (art / INTERMEDIATES).exists()
    info["intermediates"] = "recorded" if recorded else ON_DEMAND
    t_torch = 0.0
    if info["error"] is None:
        differing = work.graph_side(ran)
        side = art / INTERMEDIATES
        if not recorded and exported_program is not None and differing:
            side = art / TORCH_SIDE  # the probes where the graph itself is wrong, for the torch-side finding only
            left = max(1.0, deadline - time.monotonic())
            info["error"] = run_reference(art / DEBUG_MODEL, {p: feeds[p] for p in differing}, side, left)
        if info["error"] is None:
            t_torch = work.value_side(ran, side, recorded, differing, probes, exported_program)
    for name in TEMPORARY:
        (art / name).unlink(missing_ok=True)
    info["seconds"] = {
        "debug_model": round(t1 - t0, 4),
        "reference": round(time.perf_counter() - t1 - t_torch, 4),
        "torch": round(t_torch, 4),
    }
    # Timings stay out of the file: it is hashed into the artifact's digest, which must not change when
    # the same model is exported again.
    (art / LOCALIZATION).write_text(
        json.dumps({k: v for k, v in info.items() if k != "seconds"}, indent=1, default=str) + "\n", encoding="utf-8"
    )
    return info


class _Prepare:
    """One artifact's localization data as :func:`prepare` reads it back from the reference pass, probe by probe."""

    def __init__(
        self, art: Path, model: onnx.ModelProto, nodes: list[dict[str, Any]], eager: Mapping[str, list[np.ndarray]],
        tol: dict[str, Any],
    ) -> None:  # fmt: skip
        self.art, self.model, self.nodes, self.eager, self.tol = art, model, nodes, eager, tol
        self.names = [o.name for o in model.graph.output]
        self.summary: dict[str, dict[str, Any]] = {}

    def graph_side(self, ran: Sequence[str]) -> dict[str, list[np.ndarray]]:
        """Whether the reference runtime's own outputs (the plain model's) differ from torch's, per probe; the
        outputs of the probes where they do (the graph itself is wrong there)."""
        differing = {}
        for probe in ran:
            plain = load_intermediates(self.art / PLAIN_OUTPUTS, probe)
            if not plain:
                self.summary[probe] = {"error": "the reference runtime cannot run this probe"}
                continue
            outs = [plain[o] for o in self.names]
            ok, stats = compare(self.eager[probe], outs, **self.tol)
            self.summary[probe] = {"reference": "ok" if ok else describe(stats)}
            if not ok:
                self.summary[probe]["where"] = first_output_mismatch(self.nodes, self.names, outs, self.eager[probe], **self.tol)
                differing[probe] = outs
        return differing

    def value_side(
        self, ran: Sequence[str], side: Path, recorded: bool, differing: Mapping[str, list[np.ndarray]],
        probes: Mapping[str, Mapping[str, Any]], exported_program: Any,
    ) -> float:  # fmt: skip
        """Whether exposing every value changed the outputs, and where the program parts from torch on the probes
        where the graph is wrong (dynamo); the seconds the torch side took."""
        aliases = fx_aliases(self.model)
        values_tol = {k: self.tol[k] for k in ("atol", "rtol", "scaled")}
        t_torch = 0.0
        for probe in ran:
            entry = self.summary[probe]
            values = load_intermediates(side, probe) if side.exists() else {}
            if "error" in entry or not values:
                if recorded and "error" not in entry:
                    entry["error"] = "the reference runtime cannot run this probe with every value exposed"
                continue
            plain_outs = differing.get(probe) or [load_intermediates(self.art / PLAIN_OUTPUTS, probe)[o] for o in self.names]
            same, diff = compare(plain_outs, [values[o] for o in self.names if o in values], **self.tol)
            if not same:  # exposing the values changed the result
                entry["unfaithful"] = describe(diff).replace("torch", "model").replace("runtime", "debug model")
            if probe in differing and exported_program is not None:
                t = time.perf_counter()
                args = tuple(probes[probe].values())
                entry["torch"] = torch_divergence(
                    exported_program, args, values, **values_tol, aliases=aliases, eager=self.eager[probe]
                )
                t_torch += time.perf_counter() - t
        return t_torch


def record(art_dir: str | Path, probe: str, dest: str | Path, timeout: float, runtime: str = "") -> dict[str, Any]:
    """Export environment, on demand: the reference runtime's value of every node of one probe into
    ``dest`` (an ``intermediates.npz`` of that probe), and beside it ``<dest>.json`` with whether exposing
    every value changed the model's outputs. What the run stage asks for when a cell of a model too large
    to record at export mismatches (:func:`on_demand`).

    Raises:
        RuntimeError: The reference runtime here is not ``runtime`` (the export's), or it failed.
    """
    import onnxruntime

    from harness.store.cache import write_json

    if runtime and runtime != f"onnxruntime=={onnxruntime.__version__}":
        raise RuntimeError(f"this environment holds onnxruntime {onnxruntime.__version__}, the export's reference was {runtime}")
    art, dest = Path(art_dir), Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    rec = ExportRecord.from_dict(json.loads((art / layout.RECORD).read_text(encoding="utf-8")))
    with np.load(art / layout.REFERENCE) as ref:
        feeds = {probe: _feeds(ref, probe)}
    plain = dest.with_name(dest.name + ".plain.npz")
    problem = run_reference(art / DEBUG_MODEL, feeds, dest, timeout, plain=(art / layout.MODEL, plain))
    try:
        if problem:
            raise RuntimeError(problem)
        values, outs = load_intermediates(dest, probe), load_intermediates(plain, probe)
        meta: dict[str, Any] = {"probe": probe}
        if not values or not outs:
            meta["error"] = "the reference runtime cannot run this probe"
        else:
            same, diff = compare(list(outs.values()), [values[n] for n in outs if n in values], **rec.tolerance)
            if not same:
                meta["unfaithful"] = describe(diff).replace("torch", "model").replace("runtime", "debug model")
        write_json(dest.with_name(dest.name + ".json"), meta)
        return meta
    finally:
        plain.unlink(missing_ok=True)
