"""``harness check FILE``: one ONNX file on every runtime of a profile, in seconds, answered in one screen.

1. **Predicted** (no runtime started): the file's IR, opsets and op types (:mod:`harness.check.onnxinfo`) against each
   runtime's measured frontier (``results/frontier.json``: what it loads, measured by the table's runs).
2. **Measured**: each runtime's environment (:mod:`harness.check.envs`: made once, kept) runs the file on every probe
   (:mod:`harness.check.worker`), several at once; the specification's answer (:mod:`harness.check.spec`) runs beside
   them.
3. **Compared** with, in this order: the user's expected outputs (``--expected``), else the ONNX reference evaluator
   on the same file, else the runtimes' agreement (the largest group that agrees with each other; said as such).
4. For each runtime that disagrees: the first node where it departs (its every node's value against the reference's,
   :func:`harness.numeric.localize.first_divergence`) and a reproducer folder.

The answer (:mod:`harness.check.answer`) is a screen or ``harness.check/1`` JSON, written to ``<out>/check.json``
too; ``--baseline`` compares with an earlier one.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness.check import envs, inputs
from harness.check.onnxinfo import ModelInfo, read
from harness.config.matrix import Matrix, Runtime
from harness.core.records import DiffStats, error_line
from harness.numeric.compare import compare, describe
from harness.store import frontier as frontier_store

ROOT = Path(__file__).resolve().parents[2]
"""The source tree the workers import ``harness.check.worker`` from (``PYTHONPATH``)."""

SPEC, EXPECTED, AGREEMENT = "specification", "expected", "agreement"

_QUANTIZED_OPS = {
    "QuantizeLinear",
    "DequantizeLinear",
    "QLinearMatMul",
    "QLinearConv",
    "MatMulInteger",
    "ConvInteger",
    "DynamicQuantizeLinear",
    "com.microsoft::DynamicQuantizeMatMul",
    "com.microsoft::MatMulIntegerToFloat",
    "com.microsoft::QLinearAdd",
    "com.microsoft::DynamicQuantizeLSTM",
}


@dataclasses.dataclass(frozen=True)
class Options:
    target: str
    runtimes: tuple[Runtime, ...]
    input_files: tuple[str, ...] = ()
    dims: Mapping[str, int] = dataclasses.field(default_factory=dict)
    expected_files: tuple[str, ...] = ()
    atol: float | None = None
    rtol: float | None = None
    scaled: float | None = None
    results: Path = Path("results")
    out: Path | None = None
    envs: Path = Path("build/check/envs")
    timeout: float = 120.0
    workers: int = 0
    predict_only: bool = False
    spec_timeout: float = 120.0
    platforms: tuple[str, ...] = ()
    """The CPUs to run on (``x86-64-v3``, ``aarch64``: :mod:`harness.config.platforms`), each runtime once per
    platform, natively or under qemu-user; empty: this machine."""


def tolerance(info: ModelInfo, matrix: Matrix, opts: Options) -> dict[str, Any]:
    """``atol``, ``rtol`` and ``scaled`` of the comparison, and why: the options, else matrix.toml's
    ``[tolerance]``, widened for a quantized or float16 file to the transforms' rules (docs/quantized.md)."""
    from harness.config import transforms

    atol, rtol, scaled = matrix.atol, matrix.rtol, matrix.scaled
    why = "matrix.toml [tolerance]"
    rules = transforms.CATALOG
    if any(op in _QUANTIZED_OPS for op in info.ops):
        scaled, why = rules["int8-dynamic"].scaled, f"int8 ops: {rules['int8-dynamic'].rule}"
    elif "com.microsoft::MatMulNBits" in info.ops:
        scaled, why = rules["int4-sym-a4"].scaled, f"MatMulNBits: {rules['int4-sym-a4'].rule}"
    elif any(v.dtype == "float16" for v in (*info.inputs, *info.outputs)) or ("Cast" in info.ops and _has_half(info)):
        scaled, why = rules["fp16"].scaled, f"float16: {rules['fp16'].rule}"
    if opts.atol is not None or opts.rtol is not None or opts.scaled is not None:
        why = "the options given"
    return {
        "atol": opts.atol if opts.atol is not None else atol,
        "rtol": opts.rtol if opts.rtol is not None else rtol,
        "scaled": opts.scaled if opts.scaled is not None else scaled,
        "why": why,
    }


def _has_half(info: ModelInfo) -> bool:
    """Whether the file computes in float16 (read with onnx where it is here; without it, only its signature)."""
    try:
        import onnx
    except ImportError:
        return False
    model = onnx.load(info.path, load_external_data=False)
    return any(t.data_type == onnx.TensorProto.FLOAT16 for t in model.graph.initializer)


def predicted(info: ModelInfo, found: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"loads": bool | None, "why": words}`` of one runtime from its measured frontier."""
    if not found:
        return {"loads": None, "why": "no measured frontier for this runtime in the table"}
    if found.get("max_ir") is None:
        return {"loads": False, "why": frontier_store.describe(found)}
    ir, opset = info.ir_version, info.opset or frontier_store.FIRST_OPSET
    if ir in found.get("irs", ()) and opset in found.get("opsets", ()):
        loads = [ir, opset] not in found.get("refused", [])
    else:
        loads = ir <= found["max_ir"] and opset <= found["max_opset"]
    if loads:
        return {"loads": True, "why": f"{frontier_store.describe(found)}; the file is IR {ir} / opset {opset}"}
    why = frontier_store.explain(found, ir, opset)
    if why is None:
        reason = next((r["text"] for r in found.get("reasons") or () if r.get("opset") == opset), "")
        why = f"the frontier model of IR {ir} / opset {opset} was refused" + (f": {reason}" if reason else "")
    return {"loads": False, "why": why}


def frontiers(results: Path) -> dict[str, Any]:
    try:
        data = json.loads((results / frontier_store.PUBLISHED).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _digest(path: Path, info: ModelInfo) -> str:
    """SHA-256 of the file and its external data, read in chunks (a model of GBs is not held in memory)."""
    h = hashlib.sha256()
    for part in [path, *(path.parent / loc for loc in info.external)]:
        with open(part, "rb") as f:
            while chunk := f.read(1 << 24):
                h.update(chunk)
    return h.hexdigest()


def _workers(opts: Options, info: ModelInfo) -> int:
    """Processes at once: one per core (``--workers``), fewer where each one's share of memory (the model's size
    four times over, and an interpreter) would not fit what is free."""
    wanted = opts.workers or os.cpu_count() or 1
    try:
        with open("/proc/meminfo") as f:
            free = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return wanted
    each = 4 * info.size + 300 * 2**20
    return max(1, min(wanted, free // each))


def _python_run(argv: Sequence[str], timeout: float) -> tuple[int | None, str, str]:
    """A process that prints one JSON line: ``(exit status or None past the timeout, stdout, stderr)``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env.update(OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return None, out, ""
    return done.returncode, done.stdout, done.stderr


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                found = json.loads(line)
            except ValueError:
                return None
            return found if isinstance(found, dict) else None
    return None


def _request(folder: Path, **fields: Any) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "request.json"
    path.write_text(json.dumps(fields))
    return str(path)


def run_worker(
    python: Path, model: str, probe_files: Sequence[tuple[str, str]], folder: Path, timeout: float, debug: str = ""
) -> dict[str, Any]:
    """One runtime's worker on the probes; a crash or a timeout is the answer too."""
    request = _request(folder, model=model, inputs=list(probe_files), out=str(folder), debug=debug)
    rc, out, err = _python_run([str(python), "-m", "harness.check.worker", request], timeout)
    if rc is None:
        return {"status": "timeout", "error": f"no answer within {timeout:.0f} s (--timeout)"}
    found = _last_json(out)
    if rc != 0 or found is None:
        said = error_line(err.strip().splitlines()[-1]) if err.strip() else ""
        signal = f"killed by signal {-rc}" if rc is not None and rc < 0 else f"exit status {rc}"
        return {"status": "crash", "error": f"the worker died ({signal})" + (f": {said}" if said else "")}
    return found


def run_spec(
    model: str, probe_files: Sequence[tuple[str, str]], folder: Path, timeout: float, values: bool = False
) -> dict[str, Any]:
    request = _request(folder, model=model, inputs=list(probe_files), out=str(folder), values=values)
    rc, out, err = _python_run([sys.executable, "-m", "harness.check.spec", request], timeout)
    if rc is None:
        return {"error": f"the reference evaluator gave no answer within {timeout:.0f} s"}
    found = _last_json(out)
    if rc != 0 or found is None:
        return {
            "error": "the reference evaluator died: "
            + (error_line(err.strip().splitlines()[-1]) if err.strip() else f"exit {rc}")
        }
    return found


def _arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` a worker or the evaluator wrote, by key."""
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def _outputs(path: Path) -> list[np.ndarray]:
    """A probe's outputs (keys ``0``, ``1``, …) in the model's order."""
    found = _arrays(path)
    return [found[str(i)] for i in range(len(found))]


@dataclasses.dataclass
class Row:
    """One runtime's answer."""

    runtime: Runtime
    predicted: dict[str, Any]
    status: str = "not-run"
    stage: str = ""
    error: str = ""
    version: str | None = None
    probes: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    outputs: dict[str, list[np.ndarray]] = dataclasses.field(default_factory=dict)
    seconds: float = 0.0
    localization: str = ""
    repro: str = ""
    python: Path | None = None
    platform: str = ""
    """The CPU it runs on (empty: this machine)."""
    how: str = "native"
    """``native``, or ``emulated: qemu-user 10.0.2 -cpu Haswell-noTSX``."""

    @property
    def folder(self) -> str:
        """Its folders' name (runs, node values, reproducer): ``ort-1.20.1``, ``ort-1.20.1@x86-64-v3``."""
        return self.runtime.id + (f"@{self.platform}" if self.platform else "")

    @property
    def label(self) -> str:
        """``onnxruntime==1.20.1``, or ``onnxruntime==1.20.1@x86-64-v3`` on a platform."""
        return f"{self.runtime.pin}@{self.platform}" if self.platform else self.runtime.pin

    @property
    def loads(self) -> bool | None:
        """Measured: whether a session was made (None: the environment or the worker never got that far)."""
        return True if self.stage == "run" else False if self.status == "load-fail" else None

    def worst(self) -> DiffStats | None:
        found = [p["stats"] for p in self.probes.values() if p.get("stats") is not None]
        return max(found, key=lambda s: s.max_abs or 0.0) if found else None


def _measure(row: Row, info: ModelInfo, probe_files: Sequence[tuple[str, str]], work: Path, timeout: float) -> None:
    assert row.python is not None
    t0 = time.perf_counter()
    folder = work / "runs" / row.folder
    shutil.rmtree(folder, ignore_errors=True)
    found = run_worker(row.python, info.path, probe_files, folder, timeout)
    row.seconds = time.perf_counter() - t0
    row.version = found.get("version")
    if "status" in found:  # crash or timeout
        row.status, row.error = found["status"], found["error"]
        return
    stage = found.get("stage")
    if stage == "import":
        row.status, row.stage, row.error = "env-error", "import", error_line(found.get("error", ""))
        return
    if row.platform:  # a platform's row counts only where its process saw that CPU (the run stage's proof)
        from harness.config import platforms

        wrong = platforms.contradiction(row.platform, found.get("features") or {}, found.get("machine") or "")
        if wrong is not None:
            row.status, row.error = "unavailable", wrong
            return
    if stage == "load":
        row.status, row.stage, row.error = "load-fail", "load", error_line(found.get("error", ""))
        return
    row.stage = "run"
    for name, said in (found.get("probes") or {}).items():
        row.probes[name] = dict(said, **({"error": error_line(said["error"])} if said.get("error") else {}))
        if said.get("ok"):
            row.outputs[name] = _outputs(folder / f"{name}.npz")


def _judge(row: Row, reference: Mapping[str, list[np.ndarray]], tol: Mapping[str, Any]) -> None:
    """The row's status from its probes against the reference outputs."""
    if row.stage != "run":
        return
    failed = [n for n, p in row.probes.items() if not p.get("ok")]
    if failed:
        row.status, row.error = "run-fail", f"{failed[0]}: {error_line(row.probes[failed[0]].get('error', ''))}"
        return
    row.status = "pass"
    for name, outs in row.outputs.items():
        if name not in reference:  # never green without a comparison (no reference answered this probe)
            row.status, row.error = "mismatch", f"{name}: no reference answer to compare with"
            continue
        ok, stats = compare(reference[name], outs, atol=tol["atol"], rtol=tol["rtol"], scaled=tol["scaled"])
        row.probes[name].update(stats=stats, agrees=ok)
        if not ok and row.status == "pass":
            row.status, row.error = "mismatch", f"{name}: {describe(stats)}"


def _agreement(rows: Sequence[Row], tol: Mapping[str, Any]) -> tuple[Row | None, int]:
    """With no independent answer: the runtime that the most others agree with (ties: the newest), and how many."""
    ran = [r for r in rows if r.stage == "run" and r.outputs and all(p.get("ok") for p in r.probes.values())]
    best: tuple[int, int, Row | None] = (-1, -1, None)
    for index, candidate in enumerate(ran):
        agree = 0
        for other in ran:
            if all(
                compare(candidate.outputs[n], other.outputs.get(n, []), atol=tol["atol"], rtol=tol["rtol"], scaled=tol["scaled"])[
                    0
                ]
                for n in candidate.outputs
            ):
                agree += 1
        if (agree, index) > best[:2]:
            best = (agree, index, candidate)
    return best[2], max(best[0], 0)


def _localize(
    row: Row,
    info: ModelInfo,
    probe_files: Mapping[str, str],
    work: Path,
    tol: Mapping[str, Any],
    want: Callable[[str], dict[str, np.ndarray] | None],
    expected: Mapping[str, list[np.ndarray]] | None = None,
) -> str:
    """The first node where this runtime's values depart from the reference's, on its first mismatching probe."""
    probe = next((n for n, p in row.probes.items() if p.get("agrees") is False), None)
    if probe is None or row.python is None:
        return ""
    debug = _debug_model(info, work)
    if isinstance(debug, str):
        return debug
    path, nodes = debug
    folder = work / "values" / row.folder
    shutil.rmtree(folder, ignore_errors=True)
    found = run_worker(row.python, str(path), [(probe, probe_files[probe])], folder, 300.0, debug=str(path))
    if (found.get("probes") or {}).get(probe, {}).get("ok") is not True:
        return f"not localized: the model with every node's value exposed did not run here ({found.get('error', '')})"
    reference = want(probe)
    if reference is None:
        return "not localized: the reference has no node values"
    from harness.numeric.localize import first_divergence

    got = _arrays(folder / "values.npz")
    where = first_divergence(nodes, got, reference, atol=tol["atol"], rtol=tol["rtol"], scaled=tol["scaled"])
    if where is None and expected is not None and probe in expected:
        spec_outs = [reference[o.name] for o in info.outputs if o.name in reference]
        if len(spec_outs) == len(info.outputs):
            agrees, stats = compare(expected[probe], spec_outs, atol=tol["atol"], rtol=tol["rtol"], scaled=tol["scaled"])
            if not agrees:
                return (
                    "the file itself computes something else: the ONNX reference evaluator's answer on it differs from "
                    f"the expected outputs too ({describe(stats)}), and this runtime agrees with the evaluator node by "
                    "node (the export's fault, not the runtime's)"
                )
    if where is None:
        return "no single node: every node agrees once each value is a graph output (a fusion the optimizer makes)"
    return f"first node that differs: {where['node']} ({where['op']}), output {where['output']}: {where['detail']}"


def _place(info: ModelInfo, folder: Path, name: str) -> Path:
    """The file, as ``name``, and its external data in ``folder``: hard links where the file system allows, else
    copies (the user's folder is never written to)."""
    source = Path(info.path)
    for src, dest in [(source, name), *((source.parent / loc, loc) for loc in info.external)]:
        target = folder / dest
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(src, target)
        except OSError:
            shutil.copyfile(src, target)
    return folder / name


def _debug_model(info: ModelInfo, work: Path) -> tuple[Path, list[dict[str, Any]]] | str:
    """The file with every node's output exposed (the export's :func:`debug_model`), written beside a link to the file
    whose weights it points into (:func:`reference_weights`, as the export's ``model.debug.onnx`` does): its graph, not
    another copy of the weights, and none of them held in memory."""
    folder = work / "debug"
    path = folder / f"debug-{Path(info.path).name}"
    nodes_path = folder / "nodes.json"
    if path.exists() and nodes_path.exists():
        return path, json.loads(nodes_path.read_text())
    try:
        import onnx

        from harness.export.node_values import debug_model, reference_weights
    except ImportError:
        return "not localized: onnx is not installed where harness check runs (nox -s check installs it)"
    placed = _place(info, folder, Path(info.path).name)
    model = onnx.load(str(placed), load_external_data=False)
    try:
        reference_weights(model, placed)
    except (ValueError, IndexError):  # a file this cannot read the layout of: the debug model holds a copy
        model = onnx.load(str(placed))
        if model.ByteSize() > 2**31 - 2**20:
            return "not localized: the model is larger than one protobuf file holds (2 GB)"
    debug, nodes = debug_model(model)
    onnx.save(debug, str(path))
    nodes_path.write_text(json.dumps(nodes))
    return path, nodes


_REPRO = '''"""Reproduce: {pin} on {model} ({status}). Needs: pip install "{pin}" numpy"""
import numpy as np
import onnxruntime as ort

print("onnxruntime", ort.__version__)
session = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
with np.load("inputs.npz") as data:
    feeds = {{k: data[k] for k in data.files}}
outs = session.run(None, feeds)
try:
    expected = np.load("expected.npz")
except OSError:
    raise SystemExit("ran; no expected outputs to compare with")
for i, out in enumerate(outs):
    want = expected[str(i)]
    ok = out.shape == want.shape and np.allclose(out, want, atol={atol}, rtol={rtol}, equal_nan=True)
    err = float(np.max(np.abs(out.astype(np.float64) - want))) if out.shape == want.shape and out.size else float("nan")
    print(f"output {{i}}: {{'agrees' if ok else 'DIFFERS'}} (max abs {{err:.3g}}, {reference})")
'''


def _repro(
    row: Row,
    info: ModelInfo,
    probe_files: Mapping[str, str],
    reference: Mapping[str, list[np.ndarray]],
    out: Path,
    tol: Mapping[str, Any],
    said: str,
) -> str:
    """A folder that shows the failure with nothing but the runtime: the file, the failing probe's inputs, the
    reference outputs, a script and its command."""
    folder = out / "repro" / row.folder
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    source = Path(info.path)
    _place(info, folder, "model.onnx")
    probe = next((n for n, p in row.probes.items() if not p.get("ok") or p.get("agrees") is False), next(iter(probe_files)))
    shutil.copyfile(probe_files[probe], folder / "inputs.npz")
    if probe in reference:
        kept: dict[str, Any] = {str(i): a for i, a in enumerate(reference[probe])}
        np.savez(folder / "expected.npz", **kept)
    (folder / "repro.py").write_text(
        _REPRO.format(
            pin=row.runtime.pin, model=source.name, status=row.status, atol=tol["atol"], rtol=tol["rtol"], reference=said
        )
    )
    pip = row.runtime.kind.pip(row.runtime.pin)
    wanted = envs.requirements(row.runtime)
    where = f"\n\n{row.localization}" if row.localization else ""
    if row.platform:
        where += f"\n\nOn a {row.platform} CPU (here: {row.how}); on another CPU it may not reproduce."
    (folder / "README.md").write_text(
        f"# {row.runtime.pin}: {row.status}\n\n{row.error}{where}\n\nIn this folder:\n\n```bash\n"
        f"{pip} install {' '.join(repr(r).replace(chr(39), chr(34)) for r in wanted)}\npython{row.runtime.python} repro.py\n```\n"
    )
    return str(folder)


def check(matrix: Matrix, opts: Options, echo: Callable[[str], Any]) -> dict[str, Any]:
    """The whole check of one file; returns the answer (:func:`harness.check.answer.to_json`'s input)."""
    t0 = time.perf_counter()
    path = Path(opts.target)
    info = read(path)
    found = frontiers(opts.results)
    rows = [Row(rt, predicted(info, found.get(rt.pin)), platform=p) for rt in opts.runtimes for p in opts.platforms or ("",)]
    tol = tolerance(info, matrix, opts)
    answer: dict[str, Any] = {
        "info": info,
        "rows": rows,
        "tolerance": tol,
        "frontier": str(opts.results / frontier_store.PUBLISHED),
        "frontiers": found,
    }
    answer["predict_seconds"] = time.perf_counter() - t0
    if opts.predict_only:
        answer["reference"] = {"kind": "none", "said": "not measured (--predict)"}
        return answer
    feeds = inputs.probes(info, opts.input_files, opts.dims)
    expected = inputs.expected(info, opts.expected_files, list(feeds)) if opts.expected_files else None
    answer["sha256"] = _digest(path, info)
    out = opts.out or Path("build/check") / f"{path.stem}-{answer['sha256'][:12]}"
    out.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(out / "repro", ignore_errors=True)  # this check's failures only
    work = Path(tempfile.mkdtemp(prefix="work-", dir=out))
    try:
        return _measured(matrix, opts, info, rows, tol, feeds, expected, out, work, answer, echo, t0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _measured(
    matrix: Matrix,
    opts: Options,
    info: ModelInfo,
    rows: list[Row],
    tol: Mapping[str, Any],
    feeds: Mapping[str, Mapping[str, np.ndarray]],
    expected: Mapping[str, list[np.ndarray]] | None,
    out: Path,
    work: Path,
    answer: dict[str, Any],
    echo: Callable[[str], Any],
    t0: float,
) -> dict[str, Any]:
    """The measured half of :func:`check`: environments, the runs and the specification side by side, the reference,
    the verdicts, localization and reproducers of the failures. (Over 60 lines, on purpose: one pass in the order the
    answer is built, each step reading what the one before it wrote.)"""
    probe_files = {}
    for name, feed in feeds.items():
        probe_files[name] = str(work / f"input-{name}.npz")
        np.savez(probe_files[name], **dict[str, Any](feed))
    pairs = list(probe_files.items())
    runtimes = list(dict.fromkeys(r.runtime for r in rows))
    pythons: dict[str, tuple[Path | None, str]] = {}
    for rt in runtimes:  # those missing are made below, one per core at once; each says so
        pythons[rt.id] = (envs.ready(rt, opts.envs, ROOT), "")
    cold = [rt for rt in runtimes if pythons[rt.id][0] is None]
    if cold:
        echo(
            f"{len(cold)} of {len(runtimes)} runtime environments to make, once (kept in {opts.envs}): about 1.5 s each "
            "with uv's cache warm, more where the wheels are downloaded"
        )
    workers = _workers(opts, info)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:  # uv's cache takes concurrent installs
        for rt, made in zip(cold, pool.map(lambda r: envs.make(r, opts.envs, echo), cold)):  # noqa: B905
            pythons[rt.id] = made
    for row in rows:
        row.python, why = pythons[row.runtime.id]
        if row.python is None:
            row.status, row.error = "env-error", why
        elif row.platform:
            _launch(row, opts, echo)
    ready = [r for r in rows if r.python is not None]
    spec: dict[str, Any] = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        spec_job = pool.submit(run_spec, info.path, pairs, work / "spec", opts.spec_timeout) if expected is None else None
        jobs = {pool.submit(_measure, row, info, pairs, work, opts.timeout): row for row in ready}
        for done, job in enumerate(concurrent.futures.as_completed(jobs), 1):
            job.result()
            if sys.stderr.isatty() or done == len(jobs) or done % 6 == 0:
                echo(f"[{done}/{len(jobs)}] {jobs[job].runtime.pin} ({time.perf_counter() - t0:.1f} s)")
        if spec_job is not None:
            spec = spec_job.result()
    reference, ref = _reference(rows, expected, spec, work, tol)
    for row in rows:
        _judge(row, reference, tol)
    failing = [r for r in rows if r.status != "pass"]
    answer["notes"] = _doubts(rows, ref, tol)
    values: dict[str, Any] = {}

    def want(probe: str) -> dict[str, np.ndarray] | None:
        if probe in values:
            return values[probe]
        found = None
        if ref["kind"] != AGREEMENT or spec.get("probes", {}).get(probe, {}).get("ok"):
            said = run_spec(info.path, [(probe, probe_files[probe])], work / "spec-values", opts.spec_timeout, values=True)
            if said.get("probes", {}).get(probe, {}).get("ok"):
                found = _arrays(work / "spec-values" / "values.npz")
        # else the node values of a runtime that agrees with the reference: the agreeing group's, or the newest pass
        agreeing = ref.get("row") or next((r for r in reversed(rows) if r.status == "pass"), None)
        if found is None and agreeing is not None:
            folder = work / "values-reference"
            debug = _debug_model(info, work)
            if not isinstance(debug, str) and agreeing.python is not None:
                said = run_worker(
                    agreeing.python, str(debug[0]), [(probe, probe_files[probe])], folder, 300.0, debug=str(debug[0])
                )
                if said.get("probes", {}).get(probe, {}).get("ok"):
                    found = _arrays(folder / "values.npz")
        values[probe] = found
        return found

    for row in failing:
        if row.status == "mismatch":
            row.localization = _localize(row, info, probe_files, work, tol, want, expected)
        if row.status in ("mismatch", "load-fail", "run-fail", "crash", "timeout"):
            row.repro = _repro(row, info, probe_files, reference, out, tol, ref["said"])
    answer.update(reference=ref, out=str(out), probes={n: {k: list(v.shape) for k, v in f.items()} for n, f in feeds.items()})
    answer["workers"] = workers
    answer["seconds"] = time.perf_counter() - t0
    return answer


def _doubts(rows: Sequence[Row], ref: Mapping[str, Any], tol: Mapping[str, Any]) -> list[str]:
    """What the answer must say of itself: the evaluator is a third opinion, not an oracle. When every runtime that
    ran disagrees with it and they all agree with each other, the evaluator may be the one that is wrong."""
    ran = [r for r in rows if r.stage == "run" and r.outputs]
    if ref["kind"] != SPEC or len(ran) < 2 or any(r.status != "mismatch" for r in ran):
        return []
    _, count = _agreement(ran, tol)
    if count < len(ran):
        return []
    return [
        f"every runtime that ran ({len(ran)}) disagrees with the ONNX reference evaluator and all agree with each other: "
        "the evaluator may be the one that is wrong on this file (it is a third opinion, not an oracle); give "
        "--expected outputs to decide"
    ]


def _launch(row: Row, opts: Options, echo: Callable[[str], Any]) -> None:
    """The row's Python on its platform: the environment's own where this machine is that CPU, else a launcher that
    starts it under qemu-user (:mod:`harness.config.launchers`, the run stage's; ARM64 builds a userland and installs
    PyPI's aarch64 wheels once, kept under ``--envs``). Where this machine cannot, the row is ``unavailable``, saying
    why."""
    from harness.config import launchers, platforms

    if (why := launchers.problem(row.platform)) is not None:
        row.python, row.status, row.error = None, "unavailable", why
        return
    machine = platforms.get(row.platform).machine
    try:
        launch = launchers.prepare(
            row.platform,
            row.runtime.requirements,
            str(row.python),
            opts.envs / "platforms" / row.runtime.id / row.platform,
            source=ROOT,
            userland=opts.envs / f"userland-{machine}",
            echo=echo,
        )
    except (OSError, subprocess.CalledProcessError, RuntimeError) as exc:
        row.python, row.status, row.error = None, "unavailable", f"its launcher could not be built: {type(exc).__name__}: {exc}"
        return
    row.how = launch.how
    if launch.path is not None:
        row.python = launch.path


def _reference(
    rows: Sequence[Row],
    expected: Mapping[str, list[np.ndarray]] | None,
    spec: Mapping[str, Any],
    work: Path,
    tol: Mapping[str, Any],
) -> tuple[dict[str, list[np.ndarray]], dict[str, Any]]:
    """The outputs every runtime is compared with, and what they are: the user's, the specification's, or the
    runtimes' agreement."""
    if expected is not None:
        return dict(expected), {"kind": EXPECTED, "said": "the expected outputs given (--expected)"}
    answered = {n: p for n, p in (spec.get("probes") or {}).items() if p.get("ok")}
    if spec and not spec.get("error") and answered and len(answered) == len(spec.get("probes") or {}):
        outs = {n: _outputs(work / "spec" / f"{n}.npz") for n in answered}
        return outs, {"kind": SPEC, "said": f"the ONNX reference evaluator (onnx {spec.get('onnx')}) on the same file"}
    why = spec.get("error") or next((p.get("error") for p in (spec.get("probes") or {}).values() if not p.get("ok")), "")
    best, count = _agreement(rows, tol)
    ran = sum(1 for r in rows if r.stage == "run")
    if best is None:
        return {}, {
            "kind": AGREEMENT,
            "said": f"nothing: no runtime ran every probe and the evaluator could not ({why})",
            "row": None,
        }
    return dict(best.outputs), {
        "kind": AGREEMENT,
        "said": f"agreement among the runtimes: {count} of {ran} that ran agree with {best.label} "
        f"(no independent answer: the reference evaluator {why or 'did not answer'})",
        "row": best,
    }
