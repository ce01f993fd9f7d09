"""Real models at their real sizes: how long, how much memory, how much disk, what verdicts.

Drives ``nox -s matrix`` as a user does on ``examples/hf_models.py`` (BERT-base, GPT-2 small,
ViT-base, ResNet-50, Whisper-tiny's encoder; random weights from their configs, ``transformers``
installed from the file's ``REQUIREMENTS``) through a profile (default ``quick``: 4 runtimes, both
exporters, 4 opsets), in a scratch folder with its own build, results and nox environments, and prints:

- **env creation** (``--install-only``, uv's download cache warm), then a **cold** run (empty caches)
  with the wall time of each stage (export, each run session, the report) and a **warm** rerun with
  nothing changed;
- **peak memory of the whole process tree** (nox, uv, every worker and child), sampled twice a
  second: the sum of each process's PSS (its share of pages it shares, so the export's fork server
  and its children are not counted twice), also per stage;
- **disk**: the build folder and the results folder as ``du`` counts them (allocated blocks, a hard
  link once), against the models' own size: build per artifact over the model per artifact, results
  over the models of the artifacts that have a failing cell (what their reproducers hold);
- **cells** and, per model × exporter × opset × runtime, the status and the largest error (absolute,
  and relative to the output's largest magnitude).

Targets (issue 14): BERT-base alone < 10 min cold, the five < 45 min, peak < 8 GB, build < 3x the
models' size per artifact, results < 2x the failing artifacts' models, warm rerun < 5 s.

    python bench/real_models_bench.py                     # the five models (about 40 min on 2 cores)
    python bench/real_models_bench.py --cases bert        # BERT-base alone
    python bench/real_models_bench.py --keep build/hf-bench --json build/hf-bench.json

Needs nox and uv on PATH (the README's set-up); run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.pool.progress import clock  # noqa: E402

CORPUS = "examples/hf_models.py"
FAILING = {"mismatch", "run-fail", "load-fail", "crash", "timeout"}


class TreeMemory:
    """Samples the memory of a process and all its descendants (PSS, from /proc/<pid>/smaps_rollup)."""

    def __init__(self, root: int, every: float = 0.5) -> None:
        self.root, self.every = root, every
        self.peak = 0
        self.stage = "start"
        self.by_stage: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _tree(self) -> list[int]:
        children: dict[int, list[int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
        out, todo = [], [self.root]
        while todo:
            pid = todo.pop()
            out.append(pid)
            todo += children.get(pid, [])
        return out

    @staticmethod
    def _pss(pid: int) -> int:
        try:
            with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        return int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        return 0

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            total = sum(self._pss(p) for p in self._tree())
            self.peak = max(self.peak, total)
            self.by_stage[self.stage] = max(self.by_stage.get(self.stage, 0), total)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _nox(args: list[str], *, envdir: Path, log: Path, sample: bool = False) -> dict[str, Any]:
    """Run nox; return its wall time, each session's wall time (from when nox announced it) and, with
    ``sample``, the peak memory of its process tree. Fails loudly with the log's tail."""
    cmd = [shutil.which("nox") or "nox", "-f", str(ROOT / "noxfile.py"), "--envdir", str(envdir), *args]
    t0 = time.perf_counter()
    stages: dict[str, float] = {}
    current, since = None, t0
    with open(log, "a", encoding="utf-8") as f:
        f.write(f"\n$ {' '.join(cmd)}\n")
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        memory = TreeMemory(proc.pid) if sample else None
        assert proc.stdout is not None
        for line in proc.stdout:
            f.write(line)
            f.flush()
            m = re.match(r"nox > Running session (\S+)", line)
            if m:
                now = time.perf_counter()
                if current:
                    stages[current] = now - since
                current, since = m.group(1), now
                if memory:
                    memory.stage = current
        proc.wait()
    wall = time.perf_counter() - t0
    if current:
        stages[current] = time.perf_counter() - since
    if memory:
        memory.stop()
    if proc.returncode != 0:
        tail = log.read_text(encoding="utf-8").splitlines()[-30:]
        said = "\n".join(tail)
        raise SystemExit(f"real_models_bench: `{' '.join(cmd)}` failed (exit {proc.returncode}); see {log}:\n{said}")
    out: dict[str, Any] = {"wall": wall, "stages": stages}
    if memory:
        out["peak_bytes"] = memory.peak
        out["peak_by_stage"] = memory.by_stage
    return out


def du(path: Path) -> int:
    """Bytes allocated under ``path`` (``du -sb``'s blocks, a hard-linked file once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for p in [path, *path.rglob("*")]:
        try:
            st = p.lstat()
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        total += st.st_blocks * 512
    return total


def _model_bytes(art: Path) -> int:
    return sum(f.stat().st_size for f in (art / "model.onnx", art / "model.onnx.data") if f.is_file())


def verdicts(results: Path) -> list[dict[str, Any]]:
    """Per case × exporter × opset × runtime × provider: the worst status, its probes, the largest errors."""
    from harness.core.records import Status

    order = [s.value for s in sorted(Status, key=lambda s: s.severity)]  # the table's folding rule
    rows: dict[tuple[str, str, int, str, str], dict[str, Any]] = {}
    for line in (results / "matrix.jsonl").read_text(encoding="utf-8").splitlines():
        c = json.loads(line)
        key = (c["case"], c["exporter"], c["opset"], c["runtime"], c["provider"])
        row = rows.setdefault(key, {"status": "pass", "probes": [], "max_abs": 0.0, "scaled": 0.0, "line": ""})
        if order.index(c["status"]) > order.index(row["status"]):
            row["status"], row["line"] = c["status"], c.get("error_line") or ""
        if c["status"] != "pass":
            row["probes"].append(c["probe"])
        diff = c.get("diff") or {}
        row["max_abs"] = max(row["max_abs"], diff.get("max_abs") or 0.0)
        row["scaled"] = max(row["scaled"], diff.get("scaled_error") or 0.0)
    names = ("case", "exporter", "opset", "runtime", "provider")
    return [{**dict(zip(names, k, strict=True)), **v} for k, v in sorted(rows.items())]


def failing_models(build: Path, rows: Iterable[dict[str, Any]]) -> int:
    arts = {f"{r['case']}.{r['exporter']}.op{r['opset']}" for r in rows if r["status"] in FAILING}
    return sum(_model_bytes(build / "artifacts" / a) for a in arts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default=None, help="only these cases of examples/hf_models.py (e.g. bert)")
    ap.add_argument("--profile", default="quick", help="profile of matrix.toml (default: quick)")
    ap.add_argument("--keep", default=None, help="work in this folder and keep it (default: a temporary folder, removed)")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    if not shutil.which("nox") or not shutil.which("uv"):
        print("real_models_bench: nox and uv must be on PATH: pip install 'nox>=2025.2.9' 'uv>=0.4'", file=sys.stderr)
        return 2
    work = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="real-models-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    envdir, log, build, results = work / "envs", work / "nox.log", work / "build", work / "results"
    opts = ["--profile", args.profile, "--corpus", CORPUS, "--only-corpus", "--out", str(build), "--results", str(results)]
    opts += ["--cases", args.cases] if args.cases else []
    print(f"real_models_bench: {os.cpu_count()} cores; working in {work} (log: {log})", flush=True)
    try:
        figures: dict[str, Any] = {"profile": args.profile, "cases": args.cases or "all"}
        print("creating environments …", flush=True)
        figures["env_creation"] = _nox(["-s", "matrix", "--install-only", "--", *opts], envdir=envdir, log=log)["wall"]
        print("cold run …", flush=True)
        cold = _nox(["-s", "matrix", "--", *opts], envdir=envdir, log=log, sample=True)
        print("warm rerun …", flush=True)
        warm = _nox(["-s", "matrix", "--", *opts], envdir=envdir, log=log)
        rows = verdicts(results)
        arts = [a for a in (build / "artifacts").iterdir() if a.is_dir()]
        models = sum(_model_bytes(a) for a in arts)
        exported = sum(1 for a in arts if (a / "model.onnx").is_file())
        figures |= {
            "cold": cold["wall"],
            "stages": cold["stages"],
            "peak_bytes": cold["peak_bytes"],
            "peak_by_stage": cold["peak_by_stage"],
            "warm": warm["wall"],
            "build_bytes": du(build),
            "results_bytes": du(results),
            "models_bytes": models,
            "artifacts": len(arts),
            "exported": exported,
            "failing_models_bytes": failing_models(build, rows),
            "cells": sum(1 for _ in (results / "matrix.jsonl").open(encoding="utf-8")),
            "verdicts": rows,
        }
        _print(figures)
        if args.json:
            Path(args.json).write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return 0


def _print(f: dict[str, Any]) -> None:
    gib = 2**30
    per_model = f["models_bytes"] / max(1, f["exported"])
    per_artifact = f["build_bytes"] / max(1, f["artifacts"])
    print()
    print(f"profile {f['profile']}, cases {f['cases']}: {f['artifacts']} artifacts ({f['exported']} exported), "
          f"{f['cells']} cells")  # fmt: skip
    print(f"env creation {clock(f['env_creation'])}; cold {clock(f['cold'])}; warm rerun {f['warm']:.1f} s")
    print("cold, per stage: " + ", ".join(f"{name} {clock(s)}" for name, s in f["stages"].items()))
    print(f"peak memory of the process tree (PSS): {f['peak_bytes'] / gib:.2f} GiB; per stage: " +
          ", ".join(f"{k} {v / gib:.2f}" for k, v in f["peak_by_stage"].items()))  # fmt: skip
    print(
        f"build {f['build_bytes'] / gib:.2f} GiB: {per_artifact / 2**20:.0f} MiB per artifact, the model "
        f"{per_model / 2**20:.0f} MiB per exported artifact: {per_artifact / max(1, per_model):.2f}x"
    )
    fail = f["failing_models_bytes"]
    ratio = f"{f['results_bytes'] / fail:.2f}x" if fail else "no failing artifact"
    print(f"results {f['results_bytes'] / 2**20:.1f} MiB; the failing artifacts' models {fail / 2**20:.0f} MiB: {ratio}")
    print()
    head = f"{'case':<16} {'exporter':<11} {'opset':>5} {'runtime':<22} {'status':<11} {'max abs':>9} {'scaled':>9}"
    print(f"{head}  probes / first error")
    for r in f["verdicts"]:
        tail = ",".join(r["probes"]) if r["status"] != "pass" else ""
        if r["line"]:
            tail += f": {r['line'][:90]}"
        print(
            f"{r['case']:<16} {r['exporter']:<11} {r['opset']:>5} {r['runtime']:<22} {r['status']:<11} "
            f"{r['max_abs']:>9.2g} {r['scaled']:>9.2g}  {tail}"
        )


if __name__ == "__main__":
    sys.exit(main())
