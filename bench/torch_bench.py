"""What the torch profile costs: time per torch release and the disk it takes at its peak.

Runs ``nox -s matrix -- --profile torch`` as a user does (the repository's build folder and ``results/torch``, so a
cold bench is also a publication of the table), while a thread samples the file system's used bytes every 0.5 s.
Prints:

- per release: its export environment made (``uv pip install``, from uv's cache once downloaded), its export, its
  environment removed (``build/torch/torch-timings.json``, written by the noxfile);
- per session: what nox says each took (the run sessions cover every release);
- **cold**: the whole job (target: <= 20 minutes once the releases are in uv's cache);
- **disk**: the peak of the file system's used bytes above what was used before the job, and uv's cache before and
  after (what the cache grew by is downloads, not the job's own disk; target: <= 8 GB beyond the cache).

    python bench/torch_bench.py --cold     # empty build/torch first: every release exported again (~15-20 min)
    python bench/torch_bench.py            # as it stands (a warm rerun: seconds)

Needs nox and uv on PATH (the README's set-up); run it on an otherwise idle machine. The releases' wheels are
downloaded on their first install (2.5-4 GB each for the CUDA builds): run it once before timing a cold job, or
pre-fill uv's cache (``uv pip install torch==X.Y.Z`` in a scratch environment).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GB = 1e9


def _used() -> int:
    st = os.statvfs(ROOT)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


def _uv_cache() -> Path:
    found = subprocess.run(["uv", "cache", "dir"], capture_output=True, text=True, check=False).stdout.strip()
    return Path(found or Path.home() / ".cache" / "uv")


def _size(path: Path) -> int:
    """Bytes of the files under ``path`` (each hard-linked file once), as du counts them."""
    done = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=False)
    return int(done.stdout.split()[0]) if done.returncode == 0 and done.stdout else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cold", action="store_true", help="remove build/torch first (the releases' tables are kept until replaced)")
    ap.add_argument("--profile", default="torch", help="a profile with torch releases (default: torch)")
    args = ap.parse_args()
    if args.cold:
        shutil.rmtree(ROOT / "build" / "torch", ignore_errors=True)
    cache = _uv_cache()
    cache_before = _size(cache)
    base = _used()
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            peak[0] = max(peak[0], _used())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    nox = shutil.which("nox") or str(Path(sys.executable).parent / "nox")
    t0 = time.perf_counter()
    done = subprocess.run([nox, "-s", "matrix", "--", "--profile", args.profile], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    cache_after = _size(cache)
    said = done.stdout + done.stderr
    (ROOT / "build" / "torch").mkdir(parents=True, exist_ok=True)
    (ROOT / "build" / "torch" / "bench.log").write_text(said)
    timings = json.loads((ROOT / "build" / "torch" / "torch-timings.json").read_text()) if args.cold else {}
    print(f"nox -s matrix -- --profile {args.profile}: exit {done.returncode}, {wall:.0f} s ({wall / 60:.1f} min)")
    for release, t in timings.items():
        parts = ", ".join(f"{k} {v:.1f} s" for k, v in sorted(t.items()))
        print(f"  torch {release}: {parts}")
    for name, took in re.findall(r"\* (\S+): success, took ([^\n]+)", said):
        print(f"  session {name}: {took}")
    grown = cache_after - cache_before
    print(
        f"disk: peak {(peak[0] - base) / GB:.2f} GB above the start (file system used bytes, sampled every 0.5 s); "
        f"uv cache {cache_before / GB:.1f} GB before, {cache_after / GB:.1f} GB after (grew {grown / GB:.2f} GB: downloads); "
        f"beyond the cache at most {max(peak[0] - base - max(grown, 0), 0) / GB:.2f} GB"
    )
    if done.returncode != 0:
        print(said[-3000:], file=sys.stderr)
    return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
