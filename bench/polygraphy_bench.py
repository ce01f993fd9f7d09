"""Is the harness's run stage faster than Polygraphy on the same cells, and do the two agree?

For a seeded sample of exported artifacts (spread across cases, exporters and opsets), every
cell (artifact × probe, onnxruntime CPU) is checked two ways:

- Polygraphy, the way users run it: one ``polygraphy run model.onnx --onnxrt --load-inputs in.json
  --load-outputs ref.json --atol A --rtol R --check-error-stat elemwise --infinities-compare-equal``
  process per artifact, each probe one iteration of it. ``in.json`` is a list of feed dicts (the
  graph's inputs by name, as ``harness.run.backends.loop.feeds_for`` picks them) and ``ref.json`` a
  ``RunResults`` of torch's outputs under the graph's output names, both written with Polygraphy's
  own serializer. A cell passes when the exit status is 0, or else when its iteration's comparison
  logged ``PASSED``: an invocation that dies on one probe keeps the verdicts logged before it, and
  the probes after it fail (Polygraphy never ran them).
- The harness: :func:`harness.run.stage.run_runtime` in this process over a build folder holding only the
  sampled artifacts (copies), ``force=True``, no latency phase.

Measured: wall seconds of the Polygraphy loop (serial, as a user's shell loop runs) and of the
``run_runtime`` call (its environment probe, worker processes and the localization of each
mismatch included); preparing the files for either side is not timed. Printed: cells/s for both,
the ratio harness/Polygraphy (target: at least 100), the median seconds per Polygraphy invocation
(mostly start-up) and the cells where the verdicts differ.

Polygraphy's elementwise test is not the harness's (:mod:`harness.numeric.compare`):

- an element fails for Polygraphy when ``|out - ref| > atol`` *and* ``|out - ref| / |ref| > rtol``,
  i.e. it passes ``|out - ref| <= max(atol, rtol * |ref|)``, up to twice as loose as
  ``atol + rtol * |ref|`` (a zero in the reference is divided as 2.2e-16);
- NaN meeting NaN is a mismatch for Polygraphy (the difference is NaN; no flag changes that) and
  equal for the harness; an inf meeting the same inf is equal for both (with the flag above);
- Polygraphy casts both sides up and compares, where the harness fails another dtype than torch's;
  it compares only the outputs it finds by name in both, where the harness fails another number of
  outputs; a complex value is one ``|difference|``, not real and imaginary parts.

    python bench/polygraphy_bench.py --build build --sample 40 --json polygraphy.json
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.config.matrix import Matrix, Runtime, load  # noqa: E402
from harness.core.errors import HarnessError  # noqa: E402
from harness.core.records import ExportRecord, Status  # noqa: E402
from harness.run.stage import run_runtime  # noqa: E402
from harness.store.layout import MANIFEST, load_artifacts, probe_inputs, probe_outputs  # noqa: E402

_VERDICT = re.compile(r"^\[I\] Iteration: (\d+)\s*$|(PASSED|FAILED) \| simple \|")


@dataclasses.dataclass
class Invocation:
    """One ``polygraphy run`` process: an artifact's probes as its iterations."""

    art: str
    probes: list[str]
    argv: list[str]
    dir: Path
    seconds: float = 0.0
    rc: int | None = None
    log: str = ""
    passed: dict[str, bool] = dataclasses.field(default_factory=dict)


def fail(message: str) -> NoReturn:
    print(f"polygraphy_bench: {message}", file=sys.stderr)
    sys.exit(2)


def sample(records: list[ExportRecord], n: int, seed: int) -> list[ExportRecord]:
    """``n`` ok artifacts, each pick the least represented case, then exporter, then opset; ties by a seeded shuffle."""
    pool = sorted((r for r in records if r.ok), key=lambda r: r.key.id)
    random.Random(seed).shuffle(pool)
    seen: Counter[object] = Counter()
    picked: list[ExportRecord] = []
    while pool and len(picked) < n:
        best = min(pool, key=lambda r: (seen[r.case], seen[r.exporter], seen[r.opset]))
        pool.remove(best)
        picked.append(best)
        seen.update([best.case, best.exporter, best.opset])
    return picked


def prepare(rec: ExportRecord, art: Path, work: Path, polygraphy: str) -> Invocation:
    """Write one artifact's ``in.json`` and ``ref.json`` with Polygraphy's API; return its command."""
    import onnxruntime as ort
    from polygraphy.comparator import IterationResult, RunResults
    from polygraphy.json import save_json

    ref = np.load(art / "reference.npz")
    probes = list(rec.probes or ("example",))
    try:  # the graph's own names, as the harness's worker sees them
        so = ort.SessionOptions()
        so.log_severity_level = 3
        sess = ort.InferenceSession(str(art / "model.onnx"), sess_options=so, providers=["CPUExecutionProvider"])
        inputs: list[str] | None = [i.name for i in sess.get_inputs()]
        outputs = [o.name for o in sess.get_outputs()]
    except Exception:  # onnxruntime refuses the model: Polygraphy will too, whatever the feeds
        inputs, outputs = None, []
    feeds, iterations = [], []
    for probe in probes:
        given = probe_inputs(ref, probe)
        # Graph inputs by name, probe inputs the graph lacks dropped; a missing one stays missing, as in feeds_for.
        feeds.append(OrderedDict((k, v) for k, v in given.items() if inputs is None or k in inputs))
        want = probe_outputs(ref, probe)
        names = [outputs[i] if i < len(outputs) else f"torch_output_{i}" for i in range(len(want))]
        iterations.append(IterationResult(OrderedDict(zip(names, want, strict=True)), runner_name="torch"))
    d = work / "polygraphy" / rec.key.id
    d.mkdir(parents=True)
    save_json(feeds, str(d / "in.json"))
    save_json(RunResults([("torch", iterations)]), str(d / "ref.json"))
    argv = [polygraphy, "run", str(art / "model.onnx"), "--onnxrt", "--load-inputs", str(d / "in.json")]
    argv += ["--load-outputs", str(d / "ref.json"), "--atol", repr(rec.atol), "--rtol", repr(rec.rtol)]
    argv += ["--check-error-stat", "elemwise", "--infinities-compare-equal"]
    return Invocation(rec.key.id, probes, argv, d)


def run_polygraphy(inv: Invocation) -> None:
    t0 = time.perf_counter()
    proc = subprocess.run(inv.argv, capture_output=True, text=True)
    inv.seconds = time.perf_counter() - t0
    inv.rc, inv.log = proc.returncode, proc.stdout + proc.stderr
    (inv.dir / "polygraphy.log").write_text(inv.log)
    iteration: int | None = None
    for line in inv.log.splitlines():
        m = _VERDICT.search(line)
        if m and m[1] is not None:
            iteration = int(m[1])
        elif m and iteration is not None and iteration < len(inv.probes):
            inv.passed.setdefault(inv.probes[iteration], m[2] == "PASSED")
    inv.passed = {p: inv.rc == 0 or inv.passed.get(p, False) for p in inv.probes}


def run_harness(
    matrix: Matrix, runtime: Runtime, picked: list[ExportRecord], build: Path, out: Path
) -> tuple[float, dict[tuple[str, str], Any]]:
    """The run stage over a build folder of just ``picked``: (wall seconds, cell by (artifact, probe))."""

    for rec in picked:
        shutil.copytree(build / "artifacts" / rec.key.id, out / "artifacts" / rec.key.id)
    (out / MANIFEST).write_text(json.dumps({"artifacts": [r.key.id for r in picked]}))
    t0 = time.perf_counter()
    cells = run_runtime(matrix, runtime, ["cpu"], out, force=True, latency=False, echo=lambda s: None)
    seconds = time.perf_counter() - t0
    wide = [c for c in cells if c.runtime_wide]
    if wide:
        fail(f"the harness could not run {runtime.pin}: {wide[0].error_line}")
    return seconds, {(c.artifact.id, c.probe): c for c in cells}


def tail(log: str, n: int = 3) -> str:
    """Polygraphy's first errors and its last log line (without the command it echoes)."""
    lines = [ln.strip().split(" | Command: ")[0] for ln in log.splitlines() if ln.startswith("[") and "'colored'" not in ln]
    errors = [ln for ln in lines if ln.startswith(("[E]", "[!]"))]
    return " / ".join(dict.fromkeys(errors[:2] + lines[-1:] if errors else lines[-n:]))[:400]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, default=Path("build"), help="build folder of an export (default: build)")
    ap.add_argument("--sample", type=int, default=40, help="ok artifacts to run (default: 40; 0: every one)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=5, help="harness runs over the same cells; the median counts (default: 5)")
    ap.add_argument("--runtime-pin", default="onnxruntime==1.32.0", help="must be the onnxruntime installed here")
    ap.add_argument("--keep", type=Path, help="work here (kept) instead of a temporary folder")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON to this path")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        fail(f"--repeats {args.repeats}: give at least 1")

    missing = [m for m in ("onnxruntime", "polygraphy") if importlib.util.find_spec(m) is None]
    if missing:
        fail(f"{' and '.join(missing)} not installed in {sys.executable}; pip install onnxruntime polygraphy")
    polygraphy = shutil.which("polygraphy", path=str(Path(sys.executable).parent)) or shutil.which("polygraphy")
    if polygraphy is None:
        fail(f"polygraphy imports but its `polygraphy` command is not in {Path(sys.executable).parent} or on PATH")
    if not (args.build / MANIFEST).exists():
        fail(f"{args.build / MANIFEST}: no export found; run `nox -s export` first or pass --build")
    import onnxruntime
    import polygraphy as pg

    matrix = load(ROOT / "matrix.toml")
    runtime = matrix.runtime(args.runtime_pin)
    if onnxruntime.__version__ != runtime.version:
        fail(f"{sys.executable} has onnxruntime {onnxruntime.__version__}, not {runtime.pin}; install it or pass --runtime-pin")

    records = load_artifacts(args.build)
    every = [r for r in records if r.ok]
    picked = sample(records, args.sample or len(every), args.seed)
    if not picked:
        fail(f"{args.build}: no artifact exported ok")
    if args.keep:
        shutil.rmtree(args.keep, ignore_errors=True)
        args.keep.mkdir(parents=True)
    work = args.keep or Path(tempfile.mkdtemp(prefix="polygraphy-bench-"))
    try:
        t0 = time.perf_counter()
        invocations = [prepare(r, args.build / "artifacts" / r.key.id, work, polygraphy) for r in picked]
        prep = time.perf_counter() - t0
        t0 = time.perf_counter()
        for inv in invocations:
            run_polygraphy(inv)
        pg_seconds = time.perf_counter() - t0
        # A harness run takes seconds, so one measurement is at the mercy of the machine's noise: the median
        # of --repeats runs (each on a fresh copy, environment probe and workers included) is the figure.
        runs = [run_harness(matrix, runtime, picked, args.build, work / f"harness-build-{i}") for i in range(args.repeats)]
        h_seconds, harness = statistics.median(r[0] for r in runs), runs[0][1]
        h_spread = (min(r[0] for r in runs), max(r[0] for r in runs))
        # The harness's start-up (an environment probe, two workers) is fixed: its rate over a whole
        # export is the one a matrix run sees. Polygraphy's cost is per invocation, the same at any size.
        at_scale = run_harness(matrix, runtime, every, args.build, work / "harness-all") if len(picked) < len(every) else None
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    disagree = []
    for inv in invocations:
        for probe in inv.probes:
            cell = harness.get((inv.art, probe))
            if cell is None or (cell.status is Status.PASS) != inv.passed[probe]:
                disagree.append((inv, probe, cell))
    cells = sum(len(inv.probes) for inv in invocations)
    pg_rate, h_rate = cells / pg_seconds, cells / h_seconds
    figures = {
        "cells": cells,
        "polygraphy_seconds": round(pg_seconds, 3),
        "polygraphy_cells_per_s": round(pg_rate, 3),
        "harness_seconds": round(h_seconds, 3),
        "harness_cells_per_s": round(h_rate, 3),
        "harness_repeats": args.repeats,
        "harness_seconds_range": [round(h_spread[0], 3), round(h_spread[1], 3)],
        "ratio": round(h_rate / pg_rate, 2),
        "agree": cells - len(disagree),
        "disagree": len(disagree),
        "invocations": len(invocations),
        "median_invocation_s": round(statistics.median(inv.seconds for inv in invocations), 3),
        "harness_all_cells": len(at_scale[1]) if at_scale else cells,
        "harness_all_seconds": round(at_scale[0], 3) if at_scale else round(h_seconds, 3),
        "polygraphy_version": pg.__version__,
        "onnxruntime_version": onnxruntime.__version__,
    }
    print(f"{len(picked)} artifacts from {args.build}, {cells} cells on {args.runtime_pin} CPU (seed {args.seed})")
    print(f"polygraphy {pg.__version__}: one `polygraphy run` per artifact, probes as iterations ({prep:.1f}s to write inputs)")
    print(f"{'':12} {'cells':>6} {'wall s':>8} {'cells/s':>9}")
    print(f"{'polygraphy':12} {cells:>6} {pg_seconds:>8.2f} {pg_rate:>9.2f}")
    spread = f"median of {args.repeats}: {h_spread[0]:.2f}–{h_spread[1]:.2f} s"
    print(f"{'harness':12} {cells:>6} {h_seconds:>8.2f} {h_rate:>9.2f}   ({spread})")
    all_rate = figures["harness_all_cells"] / figures["harness_all_seconds"]
    figures["harness_all_cells_per_s"] = round(all_rate, 3)
    figures["ratio_at_scale"] = round(all_rate / pg_rate, 2)
    if at_scale:
        print(f"{'harness, all':12} {figures['harness_all_cells']:>6} {figures['harness_all_seconds']:>8.2f} {all_rate:>9.2f}")
    print(f"ratio harness/polygraphy on the same cells: {figures['ratio']:.1f}x")
    if at_scale:
        print(f"ratio with the harness over all {len(every)} ok artifacts: {figures['ratio_at_scale']:.1f}x")

    def verdict(x: float) -> str:
        return "meets" if x >= 100 else "misses"

    print(f"target 100x: {verdict(figures['ratio'])} it on the same cells, {verdict(figures['ratio_at_scale'])} it at scale")
    print(f"median polygraphy invocation: {figures['median_invocation_s']:.2f}s ({len(invocations)} invocations)")
    only_harness = sum(1 for inv, probe, _ in disagree if not inv.passed[probe])
    print(f"verdicts agree on {figures['agree']}/{cells} cells; {len(disagree)} differ", end="")
    print(f" ({only_harness} pass for the harness only, {len(disagree) - only_harness} for polygraphy only)" if disagree else "")
    for inv, probe, cell in disagree[:10]:
        mine = (cell.status.value + (f": {cell.error_line}" if cell.error_line else "")) if cell else "no cell"
        theirs = "pass" if inv.passed[probe] else f"fail (exit {inv.rc})"
        print(f"  {inv.art} {probe}: harness {mine}\n    polygraphy {theirs}: {tail(inv.log)}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1) + "\n")
        print(f"figures written to {args.json}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except HarnessError as exc:
        fail(str(exc))
