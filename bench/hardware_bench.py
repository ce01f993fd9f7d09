"""What the hardware profile costs, and where the emulated time goes.

Drives ``nox -s matrix -- --profile hardware`` exactly as a user does. With ``--cold`` it runs in a scratch build
folder (``--out``, by default ``build/hardware-bench``, emptied first: the export, the arm64 userland, the aarch64
wheels and every cell are made again; uv's cache and the repository's nox environments are kept). Then, from the shard
stamps the run stage writes (its ``stats``), per platform column: the cells it ran, the seconds of its correctness
phase (two workers) and per cell; and the start-up of one interpreter under each launcher (``-c "import numpy,
onnxruntime"``, the median of 3), which a column pays once per worker, not once per cell.

    python bench/hardware_bench.py --cold        # the whole profile from nothing (about 10-20 min on 2 cores)
    python bench/hardware_bench.py --out build   # the figures of an existing run (the published one's build folder)

Needs nox and uv on PATH and qemu-user 10 (the README's set-up); run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.config import platforms  # noqa: E402
from harness.config.matrix import load  # noqa: E402
from harness.store import layout  # noqa: E402


def _columns(out: Path) -> list[tuple[str, str, dict]]:  # type: ignore[type-arg]
    """(runtime, column, stamp stats) of every platform shard of the hardware profile under ``out``."""
    profile = load(ROOT / "matrix.toml").profile("hardware")
    found = []
    for rt, column in profile.shards():
        stamp = layout.stamp_of(layout.shard_path(out, rt, column))
        try:
            stats = json.loads(stamp.read_text(encoding="utf-8")).get("stats") or {}
        except (OSError, ValueError):
            stats = {}
        found.append((rt.pin, column, stats))
    return found


def _startup(launcher: Path) -> float:
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([str(launcher), "-c", "import numpy, onnxruntime"], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cold", action="store_true", help="empty --out first and run the whole profile")
    ap.add_argument("--out", default=None, help="the build folder (default: build/hardware-bench with --cold, else build)")
    args = ap.parse_args()
    out = Path(args.out or ("build/hardware-bench" if args.cold else "build"))
    out = out if out.is_absolute() else ROOT / out
    if args.cold:
        shutil.rmtree(out, ignore_errors=True)
        results = out / "results"
        t0 = time.perf_counter()
        cmd = ["nox", "-s", "matrix", "--", "--profile", "hardware", "--out", str(out), "--results", str(results)]
        subprocess.run(cmd, cwd=ROOT, check=True)
        print(f"cold: {time.perf_counter() - t0:.0f} s for `nox -s matrix -- --profile hardware` from an empty {out}")
    print("| runtime | column | how | cells run | correctness phase | per cell | sessions + runs inside the workers |")
    print("|---|---|---|---|---|---|---|")
    for pin, column, stats in _columns(out):
        ran, wall = stats.get("ran", 0), stats.get("correctness_wall", 0.0)
        name = platforms.of(column)
        launcher = out / "platforms" / f"ort-{pin.partition('==')[2]}" / name / "launcher.json"
        how = json.loads(launcher.read_text())["how"] if launcher.is_file() else "native"
        each = f"{wall / ran * 1000:.0f} ms" if ran else "—"
        inside = stats.get("session", 0.0) + stats.get("inference", 0.0) + stats.get("localize", 0.0)
        print(f"| {pin} | {column} | {how} | {ran} | {wall:.1f} s | {each} | {inside:.1f} s |")
    print()
    print("| launcher | interpreter + numpy + onnxruntime start-up (median of 3) |")
    print("|---|---|")
    for launcher in sorted(out.glob("platforms/ort-*/*/python")):
        print(f"| {launcher.relative_to(out)} | {_startup(launcher):.2f} s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
