"""What the quantized profile costs, and where the time goes.

Drives ``nox -s matrix -- --profile quantized`` exactly as a user does. With ``--cold`` it runs in a scratch build
folder (``--out``, by default ``build/quantized-bench``, emptied first: the export of the profile's cases, every
transformed file, the arm64 userland and wheels and every cell are made again; uv's cache and the repository's nox
environments are kept). It prints the wall time, each nox session's (from the moment nox starts it to the next), and,
from the build folder, per transform the files made, kept and skipped with the seconds the transform stage spent on
them, and per transform and column the cells and the seconds of the correctness phase.

    python bench/quantized_bench.py --cold                       # the whole profile from nothing
    python bench/quantized_bench.py --cold --results results/quantized   # ... and publish it (the table's own run)
    python bench/quantized_bench.py --out build/quantized-bench  # the figures of an existing run

Needs nox and uv on PATH and qemu-user 10 (the README's set-up); run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.config.matrix import load  # noqa: E402
from harness.store import layout  # noqa: E402

SESSION = re.compile(r"nox > Running session (\S+)")


def _run(out: Path, results: Path) -> tuple[float, list[tuple[str, float]]]:
    """Wall seconds of ``nox -s matrix`` and each session's, streaming its output."""
    cmd = ["nox", "-s", "matrix", "--", "--profile", "quantized", "--out", str(out), "--results", str(results)]
    t0 = time.monotonic()
    sessions: list[tuple[str, float]] = []
    with subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            if m := SESSION.search(line):
                sessions.append((m.group(1), time.monotonic()))
        rc = proc.wait()
    end = time.monotonic()
    if rc != 0:
        raise SystemExit(f"quantized_bench: nox -s matrix failed (exit {rc})")
    spans = [(name, (sessions[i + 1][1] if i + 1 < len(sessions) else end) - t) for i, (name, t) in enumerate(sessions)]
    return end - t0, spans


def _transforms(out: Path) -> None:
    profile = load(ROOT / "matrix.toml").profile("quantized")
    print("\n| transform | transformed | skipped (nothing to transform, or no answer from the spec) | failed | stage seconds |")
    print("|---|---|---|---|---|")
    for name in profile.transforms:
        folder = profile.transform_out(out, name)
        records = [json.loads((d / layout.RECORD).read_text()) for d in sorted((folder / layout.ARTIFACTS).glob("*"))]
        made = [r for r in records if r["ok"]]
        skipped = [r for r in records if not r["ok"] and r.get("error_class") == "Skipped"]
        seconds = sum(float(r.get("seconds") or 0.0) for r in records)
        print(f"| {name} | {len(made)} | {len(skipped)} | {len(records) - len(made) - len(skipped)} | {seconds:.1f} |")
    print("\n| transform | column | cells | correctness s |")
    print("|---|---|---|---|")
    for name in profile.transforms:
        folder = profile.transform_out(out, name)
        for rt, column in profile.shards():
            stamp = layout.stamp_of(layout.shard_path(folder, rt, column))
            try:
                stats = json.loads(stamp.read_text(encoding="utf-8")).get("stats") or {}
            except (OSError, ValueError):
                continue
            seconds = stats.get("correctness_wall")
            print(f"| {name} | {rt.version} {column} | {stats.get('cells', '?')} | {seconds if seconds is not None else '?'} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cold", action="store_true", help="empty --out first and run the whole profile")
    ap.add_argument("--out", default="build/quantized-bench", help="the build folder (default: build/quantized-bench)")
    ap.add_argument("--results", default=None, help="where to publish (default: <out>/results)")
    args = ap.parse_args()
    out = (ROOT / args.out).resolve()
    results = (ROOT / args.results).resolve() if args.results else out / "results"
    if args.cold:
        if out == ROOT / "build" or ROOT / "build" not in out.parents:
            raise SystemExit(f"quantized_bench: --cold empties --out; give a folder inside build/, not {out}")
        shutil.rmtree(out, ignore_errors=True)
        wall, spans = _run(out, results)
        print(f"\nquantized profile, cold: {wall:.0f} s ({wall / 60:.1f} min) wall")
        print("\n| session | seconds |\n|---|---|")
        for name, seconds in spans:
            print(f"| {name} | {seconds:.0f} |")
    _transforms(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
