"""What the architectures profile costs: cold, warm, one architecture changed, peak memory, the published size.

Drives ``nox -s matrix -- --profile architectures`` exactly as a user does, in a scratch build and results folder
(the nox environments are the repository's, ``.nox/``: "environments present"), with one architecture of the bench's
own added (``--corpus``): a BERT built like the corpus's, whose width the bench changes between runs. Prints:

- **cold**: the whole job with an empty build folder;
- **warm**: the same command again, nothing changed (target: <= 5 s);
- **1 changed**: after the bench's architecture changes (its FFN width): its artifacts exported and its cells run
  again, nothing else (target: <= 120 s);
- **memory**: the peak of the machine's memory in use during the cold run, above what was in use before it
  (``/proc/meminfo``'s MemAvailable, sampled every 0.2 s; target: <= 8 GB);
- **results**: the size of the published folder (target: <= 100 MB).

    python bench/architectures_bench.py                       # about 30-40 min on 2 cores
    python bench/architectures_bench.py --reuse build   # on an existing run's build folder: its first run adds only the
                                                        # bench's architecture; then warm, 1 changed, size

Needs nox and uv on PATH (the README's set-up); run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from matrix_bench import _done_since, _floor, _nox, _stamps  # noqa: E402

from harness.config.matrix import load  # noqa: E402

CASE = '''"""architectures_bench's own architecture: a BERT built as models/architectures builds one; the bench edits its width."""

from harness.cases import Case, lazy, randint, register

CONFIG = {"vocab_size": 128, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 64, "max_position_embeddings": 64}


def _inputs():
    import torch

    return {"input_ids": randint(1, 128, 2, 16), "attention_mask": torch.ones(2, 16, dtype=torch.int64)}


register(Case(
    name="bench_bert",
    model=lazy("models._architectures_nets", "Encoder", "BertModel", "BertConfig", CONFIG, add_pooling_layer=False),
    inputs=_inputs,
    dynamic={"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "sequence"}},
    title="Bench BERT",
    about="The bench's own architecture.",
))
'''

TARGETS = {"cold": 1800.0, "warm": 5.0, "changed": 120.0, "memory_gb": 8.0, "results_mb": 100.0}


class MemoryPeak:
    """The peak of the machine's memory in use while it runs, above what was in use when it started."""

    def __init__(self) -> None:
        self.base = self.peak = _used()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            self.peak = max(self.peak, _used())

    def __enter__(self) -> MemoryPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def gb(self) -> float:
        return (self.peak - self.base) / 1e9


def _used() -> int:
    info = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, value = line.partition(":")
        info[key] = int(value.split()[0]) * 1024
    return info["MemTotal"] - info["MemAvailable"]


def _size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reuse", metavar="BUILD", help="skip the cold run: an existing run's build folder (results go to scratch)")
    ap.add_argument("--keep", default=None, help="work in this folder and keep it (default: a temporary folder, removed)")
    args = ap.parse_args(argv)
    if not shutil.which("nox") or not shutil.which("uv"):
        print("architectures_bench: nox and uv must be on PATH: python -m pip install 'nox>=2025.2.9' 'uv>=0.4'", file=sys.stderr)
        return 2
    profile = load(ROOT / "matrix.toml").profile("architectures")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="architectures-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    out, results = (Path(args.reuse) if args.reuse else work / "build"), work / "results"
    case_file, log, envdir = work / "bench_architecture.py", work / "nox.log", ROOT / ".nox"
    case_file.write_text(CASE, encoding="utf-8")
    command = ["-s", "matrix", "--", "--profile", "architectures", "--out", str(out), "--results", str(results)]
    command += ["--corpus", str(case_file)]
    figures: dict[str, float | str] = {}
    print(f"architectures_bench: {os.cpu_count()} cores; working in {work} (log: {log})", flush=True)
    try:
        print("cold run (or the first run on --reuse: the bench's architecture) …", flush=True)
        with MemoryPeak() as memory:
            figures["cold"] = _nox(command, envdir=envdir, log=log)
        figures["memory_gb"] = memory.gb
        floor = _floor(out, profile)
        for step in ("warm", "changed"):
            if step == "changed":
                case_file.write_text(CASE.replace('"intermediate_size": 64', '"intermediate_size": 72'), encoding="utf-8")
            print(f"{step} …", flush=True)
            before = _stamps(out, profile)
            figures[step] = _nox(command, envdir=envdir, log=log)
            exported, ran = _done_since(before, _stamps(out, profile))
            figures[f"{step}_work"] = f"{exported} exported, {ran} cells ran"
        figures["results_mb"] = _size_mb(results)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    cold = "cold" if not args.reuse else "first (reuse)"
    print()
    print(f"  {cold:<12} {figures['cold']:>7.1f} s   (target <= {TARGETS['cold']:.0f} s): export {floor['export_wall']:.0f} s, "
          f"runs {floor['run_wall']:.0f} s summed over {len(profile.runtimes)} runtimes, {floor['cells']} cells")  # fmt: skip
    print(f"  {'warm':<12} {figures['warm']:>7.1f} s   (target <= {TARGETS['warm']:.0f} s): {figures['warm_work']}")
    print(f"  {'1 changed':<12} {figures['changed']:>7.1f} s   (target <= {TARGETS['changed']:.0f} s): {figures['changed_work']}")
    print(f"  {'memory':<12} {figures['memory_gb']:>7.2f} GB  (target <= {TARGETS['memory_gb']:.0f} GB): peak in use above the start, during the {cold} run")  # fmt: skip
    print(f"  {'results':<12} {figures['results_mb']:>7.1f} MB  (target <= {TARGETS['results_mb']:.0f} MB) with the bench's own case")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
