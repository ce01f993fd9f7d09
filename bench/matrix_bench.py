"""How fast is the matrix, cold and warm, and how close to the work it must do?

For each profile (default: ``default`` and ``full``) this drives ``nox -s matrix`` exactly as a user
does, in a scratch folder (its own build folder, results folder and nox environments, so the
repository's are left alone), and prints:

- **env creation**: ``nox -s matrix --install-only`` into empty environments (uv's download cache
  stays warm: a first run on a new machine also downloads the wheels);
- **cold**: the whole job with empty caches (environments made);
- **warm**: the same command again with nothing changed (target: under 5 s for the default profile);
- **touched**: after one case changes (a one-line edit of a case in a corpus file of the bench's own,
  added to every run with ``--corpus``): that case's artifacts and cells are redone, nothing else;
- **cells/s** of the cold run, and its **floor**: the work itself, summed over every process as
  measured inside them. ``run floor`` is what the issue calls the floor (onnxruntime session
  creation and inference, mismatch localization and the latency runs included); ``export floor`` is
  torch's share (building models and their reference outputs, the exporter calls, the reference
  runtime's pass). On N cores the wall time can be below a floor summed over processes.

Then, for the same artifacts on the same runtime, the harness against NVIDIA Polygraphy
(``polygraphy run model.onnx --onnxrt``, one process per artifact as users run it), through
``nox -s polygraphy_bench`` (bench/polygraphy_bench.py).

    python bench/matrix_bench.py                          # both profiles, then Polygraphy (about 25 min on 2 cores)
    python bench/matrix_bench.py --profiles default --polygraphy-sample -1
    python bench/matrix_bench.py --json build/bench.json  # also write the figures

Needs nox and uv on PATH (the README's set-up); run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.config.matrix import load  # noqa: E402
from harness.store import cache  # noqa: E402
from harness.store.layout import EXPORT_STAMP as STAMP  # noqa: E402
from harness.store.layout import stamp_path  # noqa: E402

# The bench's own case, added to every run: "touching one case" edits its forward.
CASE = '''"""matrix_bench's own case: one small model whose forward the bench edits between runs."""

import torch

from harness.cases.corpus import Case, randn, register


class BenchScale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.lin(x) * 2.0


register(Case(name="bench_scale", model=BenchScale, inputs=lambda: {"x": randn(2, 8)}, dynamic={"x": {0: "batch"}}))
'''


def _nox(args: list[str], *, envdir: Path, log: Path) -> float:
    """Run nox from the repository; return its wall time; fail loudly with the log's tail."""
    cmd = [shutil.which("nox") or "nox", "-f", str(ROOT / "noxfile.py"), "--envdir", str(envdir), *args]
    t0 = time.perf_counter()
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, timeout=7200)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8").splitlines()[-25:]
        raise SystemExit(f"matrix_bench: `{' '.join(cmd)}` failed (exit {proc.returncode}); see {log}:\n" + "\n".join(tail))
    return wall


def _floor(out: Path, profile: Any) -> dict[str, float]:
    """The work of the run that wrote ``out``, from the stamps its stages left: seconds summed over processes."""
    export = (cache.read_json(out / STAMP) or {}).get("stats", {})
    runs = [cache.read_json(stamp_path(out, rt, p)) or {} for rt, p in profile.shards()]
    stats = [r.get("stats", {}) for r in runs]
    return {
        "export_wall": export.get("seconds", 0.0),
        "export_floor": sum(export.get("floor", {}).values()),
        "run_floor": sum(s.get("floor", 0.0) for s in stats),
        "run_wall": sum(s.get("wall", 0.0) for s in stats),
        "cells": sum(s.get("cells", 0) for s in stats),
        "ran": sum(s.get("ran", 0) for s in stats),
    }


def bench_profile(name: str, work: Path, envdir: Path, log: Path, *, make_envs: bool) -> dict[str, Any]:
    matrix = load(ROOT / "matrix.toml")
    profile = matrix.profile(name)
    out, results = work / name / "build", work / name / "results"
    case_file = work / name / "bench_case.py"
    case_file.parent.mkdir(parents=True, exist_ok=True)
    case_file.write_text(CASE, encoding="utf-8")
    args = ["-s", "matrix", "--", "--profile", name, "--out", str(out), "--results", str(results), "--corpus", str(case_file)]
    figures: dict[str, Any] = {"profile": name, "runtimes": len(profile.runtimes)}
    if make_envs:
        print(f"{name}: creating environments …", flush=True)
        figures["env_creation"] = _nox([*args[:2], "--install-only", *args[2:]], envdir=envdir, log=log)
    print(f"{name}: cold run …", flush=True)
    figures["cold"] = _nox(args, envdir=envdir, log=log)
    figures |= _floor(out, profile)
    for step in ("warm", "touched"):
        if step == "touched":
            case_file.write_text(CASE.replace("* 2.0", "* 3.0"), encoding="utf-8")
        print(f"{name}: {'warm rerun' if step == 'warm' else 'after touching one case'} …", flush=True)
        before = _stamps(out, profile)
        figures[step] = _nox(args, envdir=envdir, log=log)
        figures[f"{step}_exported"], figures[f"{step}_ran"] = _done_since(before, _stamps(out, profile))
    figures["build"] = str(out)
    return figures


def _stamps(out: Path, profile: Any) -> dict[Path, Any]:
    paths = [out / STAMP, *(stamp_path(out, rt, p) for rt, p in profile.shards())]
    return {p: cache.read_json(p) for p in paths}


def _done_since(before: dict[Path, Any], after: dict[Path, Any]) -> tuple[int, int]:
    """Artifacts exported and cells run by the stages that ran in between (a stage that was not
    started left its stamp as it was)."""
    exported = ran = 0
    for path, stamp in after.items():
        if stamp is None or stamp == before.get(path):
            continue
        stats = stamp.get("stats", {})
        exported += stats.get("exported", 0) if path.name == STAMP else 0
        ran += stats.get("ran", 0)
    return exported, ran


def _polygraphy(build: Path, sample: int, envdir: Path, log: Path, work: Path) -> dict[str, Any] | None:
    if sample < 0:
        return None
    print(f"polygraphy: {sample or 'every'} artifact(s) …", flush=True)
    target = work / "polygraphy.json"
    _nox(
        ["-s", "polygraphy_bench", "--", "--build", str(build), "--sample", str(sample), "--json", str(target)],
        envdir=envdir,
        log=log,
    )
    return json.loads(target.read_text(encoding="utf-8"))


def _print(rows: list[dict[str, Any]], poly: dict[str, Any] | None) -> None:
    print()
    print(
        f"{'profile':<8} {'cells':>7} {'env':>7} {'cold':>7} {'floor':>7} {'run fl.':>7} {'cold/fl':>7} "
        f"{'warm':>6} {'touched':>8} {'cells/s':>8}"
    )
    for r in rows:
        floor = r["export_floor"] + r["run_floor"]
        env = f"{r['env_creation']:.0f}s" if "env_creation" in r else "shared"
        print(
            f"{r['profile']:<8} {r['cells']:>7} {env:>7} {r['cold']:>6.0f}s {floor:>6.0f}s {r['run_floor']:>6.0f}s "
            f"{r['cold'] / floor:>7.2f} {r['warm']:>5.1f}s {r['touched']:>7.1f}s {r['cells'] / r['cold']:>8.0f}"
        )
    for r in rows:
        print(
            f"  {r['profile']}: {r['runtimes']} runtimes; cold = export {r['export_wall']:.0f}s (floor {r['export_floor']:.0f}s) "
            f"+ runs {r['run_wall']:.0f}s (floor {r['run_floor']:.0f}s) + nox, env checks and the report; "
            f"warm: {r['warm_exported']} artifacts exported, {r['warm_ran']} cells ran; "
            f"touched: {r['touched_exported']} exported, {r['touched_ran']} ran"
        )
    if poly:
        print(
            f"\nsame {poly['cells']} cells on onnxruntime {poly['onnxruntime_version']}: "
            f"harness {poly['harness_cells_per_s']:.0f} cells/s, "
            f"polygraphy {poly['polygraphy_version']} {poly['polygraphy_cells_per_s']:.2f} cells/s "
            f"({poly['median_invocation_s']:.2f}s per invocation): ratio {poly['ratio']:.0f}x; "
            f"verdicts agree on {poly['agree']}/{poly['agree'] + poly['disagree']}"
        )
        if poly["harness_all_cells"] != poly["cells"]:
            print(
                f"  the harness over every ok artifact of the export ({poly['harness_all_cells']} cells, its start-up spread "
                f"over them): {poly['harness_all_cells_per_s']:.0f} cells/s, {poly['ratio_at_scale']:.0f}x Polygraphy's rate"
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profiles", default="default,full", help="comma-separated profiles of matrix.toml (default: default,full)")
    ap.add_argument(
        "--polygraphy-sample", type=int, default=40, help="artifacts for the Polygraphy comparison (0: every one; -1: skip it)"
    )
    ap.add_argument("--keep", default=None, help="work in this folder and keep it (default: a temporary folder, removed)")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    if not shutil.which("nox") or not shutil.which("uv"):
        print("matrix_bench: nox and uv must be on PATH: python -m pip install 'nox>=2025.2.9' 'uv>=0.4'", file=sys.stderr)
        return 2
    matrix = load(ROOT / "matrix.toml")
    names = [n.strip() for n in args.profiles.split(",") if n.strip()]
    for n in names:
        matrix.profile(n)  # one line naming the profiles if it is not one
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="matrix-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    envdir, log = work / "envs", work / "nox.log"
    print(f"matrix_bench: {os.cpu_count()} cores; working in {work} (log: {log})", flush=True)
    try:
        rows = [bench_profile(n, work, envdir, log, make_envs=i == 0) for i, n in enumerate(names)]
        poly = _polygraphy(Path(rows[0]["build"]), args.polygraphy_sample, envdir, log, work)
        _print(rows, poly)
        if args.json:
            Path(args.json).write_text(json.dumps({"profiles": rows, "polygraphy": poly}, indent=1) + "\n", encoding="utf-8")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
