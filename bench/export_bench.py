"""What a dynamo export costs per artifact, with the export stage's shared warm start and without it, and where the
rest of its time goes.

Drives the real export stage (``harness export`` in the export environment, ``nox -s export`` made it) twice over the
same cases at the same dynamo opsets, into scratch folders, ``--force`` each time:

- **plain** (``--no-share``): each artifact in a process forked from a server that only imported the libraries, as
  before the sharing: the exporter's first use and its operator registry are paid by every artifact;
- **shared** (the default): the server did one public export of a probe module, built the registry of every opset the
  run asks for (harness/export/_warm.py) and froze its objects out of the children's garbage collections
  (harness/pool/_freeze.py); each case's exports run in one process, sharing one capture and one decomposition per
  class of opsets (harness/export/_reuse.py).

It prints the median and total of the exporter call per artifact (``timing.export`` of each ``export.json``) and the
stage's wall time for each, checks that both wrote the same files byte for byte, and then, in one warmed process,
splits a plain dynamo export into its steps (``torch.export``, the decompositions, the translation to ONNX, the opset
conversion, the optimizer, the rest) by timing the exporter's own functions.

    python bench/export_bench.py                         # 12 cases × dynamo 18, 22, 28 (about 3 minutes on 2 cores)
    python bench/export_bench.py --cases all --opsets 18,19,20,21,22,23,24,25,26,27,28

Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ROOT / ".nox" / "export" / "bin" / "python"
SAMPLE = (
    "frozen_batch,view_reshape_fixed,inplace_residual,interpolate_explicit,nan_chain_fixed,argmax_nan_fixed,"
    "lstm_h0_omitted,scatter_reduce_mean_explicit,transformer_encoder_padding_zeroed,sdpa_3d_as_4d,rms_norm,rope_real"
)

def _export(tmp: Path, mode: str, cases: str, opsets: str) -> dict[str, object]:
    """One run of the export stage over ``cases`` × dynamo ``opsets``; its records and wall time."""
    matrix = tmp / "matrix.toml"
    if not matrix.exists():
        text = (ROOT / "matrix.toml").read_text(encoding="utf-8")
        text += '\n[profiles.export-bench]\nruntimes = ["onnxruntime==1.32.0"]\nproviders = ["cpu"]\n'
        text += f'exporters = ["dynamo"]\nopsets = [{opsets}]\n'
        matrix.write_text(text, encoding="utf-8")
        (tmp / "models").symlink_to(ROOT / "models")  # the corpus, beside the matrix file
    out = tmp / mode
    cmd = [str(PYTHON), "-m", "harness", "export", "--matrix", str(matrix), "--profile", "export-bench"]
    cmd += ["--out", str(out), "--force", "--workers", "2", *([] if cases == "all" else ["--cases", cases])]
    cmd += ["--no-share"] if mode == "plain" else []
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"export_bench: {mode} export failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    records = {}
    for folder in sorted((out / "artifacts").iterdir()):
        rec = json.loads((folder / "export.json").read_text(encoding="utf-8"))
        model = folder / "model.onnx"
        records[folder.name] = (rec, model.read_bytes() if model.exists() else None)
    return {"wall": wall, "records": records}


def _figures(run: dict[str, object]) -> tuple[float, float, int]:
    seconds = [r["timing"]["export"] for r, _ in run["records"].values() if "export" in (r.get("timing") or {})]  # type: ignore[union-attr]
    return statistics.median(seconds), sum(seconds), len(seconds)


STEPS = r'''
import contextlib, io, logging, sys, tempfile, time, warnings
from pathlib import Path
import torch
torch.set_num_threads(1)
from harness.export import _warm
opsets = [int(o) for o in sys.argv[2].split(",")]
_warm.warm(opsets)
import harness.pool._freeze  # noqa: F401  (what the fork server does last)
from torch.onnx._internal.exporter import _core, _onnx_program
from harness.cases import corpus
from harness.config.matrix import load
from harness.core.records import ArtifactKey
from harness.export import _exporters
spent = {}
def timed(owner, name, step):
    real = getattr(owner, name)
    def wrapper(*a, **k):
        t = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            spent[step] = spent.get(step, 0.0) + time.perf_counter() - t
    setattr(owner, name, wrapper)
from torch.onnx._internal.exporter import _capture_strategies
timed(_capture_strategies.CaptureStrategy, "__call__", "torch.export (capture)")
timed(_core, "_prepare_exported_program_for_export", "decompositions")
timed(_core, "_exported_program_to_onnx_program", "translation to ONNX")
timed(_core.onnxscript_apis, "convert_version", "opset conversion")
timed(_onnx_program.ONNXProgram, "optimize", "optimizer")
matrix = load(Path("matrix.toml"))
registry = corpus.load(list(matrix.corpus), Path("."))
total, n = 0.0, 0
logging.disable(logging.WARNING)
warnings.simplefilter("ignore")
for name in ([c.name for c in registry] if sys.argv[1] == "all" else sys.argv[1].split(",")):
    case = registry[name]
    if "dynamo" not in case.exporters:
        continue
    for opset in opsets:
        model = case.model(); model.train(case.train_mode)
        example = dict(case.inputs())
        quiet = io.StringIO()
        with tempfile.TemporaryDirectory() as d, contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            before = dict(spent)
            t = time.perf_counter()
            try:
                key = ArtifactKey(name, "dynamo", opset)
                _exporters._run_exporter(case, key, model, example, ["out0"], Path(d) / "model.onnx")
            except Exception:  # a failed export's steps are not a shared export's cost
                spent.clear()
                spent.update(before)
                continue
            total += time.perf_counter() - t
            n += 1
print(n, total)
for step, s in spent.items():
    print(step, s, sep="\t")
'''


def _steps(cases: str, opsets: str) -> None:
    """One warmed process, as a worker forked from the shared server is: each exporter step's share of the time."""
    proc = subprocess.run([str(PYTHON), "-c", STEPS, cases, opsets], cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"  (the step breakdown failed: {proc.stderr.strip().splitlines()[-1:]})")
        return
    lines = proc.stdout.strip().splitlines()
    n, total = lines[0].split()
    n_i, total_f = int(n), float(total)
    each = total_f / max(n_i, 1) * 1000
    print(f"\nwhere one dynamo export's time goes ({n_i} plain calls in one warmed process, {each:.0f} ms each):")
    accounted = 0.0
    for line in lines[1:]:
        step, seconds = line.split("\t")
        accounted += float(seconds)
        print(f"  {step:<24} {float(seconds) / max(n_i, 1) * 1000:7.0f} ms  {float(seconds) / total_f:6.1%}")
    rest = total_f - accounted
    print(f"  {'the rest (the call, saving)':<24} {rest / max(n_i, 1) * 1000:7.0f} ms  {rest / total_f:6.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=SAMPLE, help="comma-separated case names, or all (default: a sample of 12)")
    ap.add_argument("--opsets", default="18,22,28", help="dynamo opsets (default: 18,22,28)")
    args = ap.parse_args()
    if not PYTHON.exists():
        sys.exit("export_bench: no export environment: run `nox -s export` first (the README's set-up)")
    with tempfile.TemporaryDirectory(prefix="export-bench-") as scratch:
        tmp = Path(scratch)
        runs = {mode: _export(tmp, mode, args.cases, args.opsets) for mode in ("plain", "shared")}
    print(f"dynamo exports of {args.cases if args.cases == 'all' else len(args.cases.split(','))} cases at opset {args.opsets}:")
    print(f"{'':8} {'artifacts':>9} {'median':>8} {'total':>8} {'stage wall':>11}")
    for mode, run in runs.items():
        median, total, n = _figures(run)
        print(f"{mode:8} {n:9d} {median:7.2f}s {total:7.1f}s {run['wall']:10.1f}s")
    plain, shared = (_figures(runs[m])[0] for m in ("plain", "shared"))
    print(f"median per artifact: {plain:.2f} s → {shared:.2f} s ({plain / shared:.1f}× faster)")
    a, b = runs["plain"]["records"], runs["shared"]["records"]  # type: ignore[index]
    same = sum(a[k][1] == b[k][1] for k in a)  # type: ignore[index]
    print(f"the same files: {same} of {len(a)} model.onnx byte-identical")  # type: ignore[arg-type]
    _steps(args.cases, args.opsets)


if __name__ == "__main__":
    main()
