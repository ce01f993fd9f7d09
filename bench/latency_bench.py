"""Does the harness report the latency a user would measure?

For a few exported artifacts, in one process and with the harness's own
session settings (``[latency] threads`` intra-op threads, one inter-op
thread), this alternates two measurements of the same session on the
``example`` probe:

- the harness's timing function (:func:`harness.run.backends.latency.time_runs`:
  warm-up, then windows of ``min_runs`` until the median settles), and
- a bare loop: ``t = perf_counter(); session.run(None, feeds)`` as many times
  as the harness timed,

and prints, per artifact, both medians and the median of the per-round
ratios (harness / bare, each round's two measurements taken side by side in
ABBA order), then the geometric mean and the worst ratio. A ratio near 1.0 means the
harness's number is the number a user gets from ``session.run``.

    nox -s latency_bench                       # after `nox -s matrix` (or `nox -s export`)
    python bench/latency_bench.py --out build --rounds 41
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.config.matrix import load  # noqa: E402
from harness.core.records import error_line  # noqa: E402
from harness.run.backends.latency import time_runs  # noqa: E402
from harness.run.backends.loop import feeds_for  # noqa: E402
from harness.run.backends.onnxruntime import OnnxRuntime  # noqa: E402

# Small to medium graphs of different kinds; the first that exist in the build folder are used.
DEFAULT = (
    "frozen_batch_fixed.torchscript.op18",
    "nan_chain_fixed.dynamo.op18",
    "max_pool_ceil_mode_fixed.torchscript.op18",
    "transformer_encoder_padding_zeroed.dynamo.op18",
    "lstm_h0_omitted.torchscript.op18",
    "rope_real.dynamo.op18",
    "sdpa_3d_as_4d.torchscript.op18",
    "grid_sample_explicit.torchscript.op18",
)


def bare_median(sess: object, feeds: dict[str, np.ndarray], runs: int) -> float:
    run = sess.run  # type: ignore[attr-defined]
    perf = time.perf_counter
    times = []
    for _ in range(runs):
        t = perf()
        run(None, feeds)
        times.append(perf() - t)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build", help="build folder of an export (default: build)")
    ap.add_argument("--matrix", default=str(ROOT / "matrix.toml"))
    ap.add_argument("--artifacts", default=None, help="comma-separated artifact ids (default: a built-in selection)")
    ap.add_argument("--count", type=int, default=6, help="how many artifacts from the built-in selection")
    ap.add_argument("--rounds", type=int, default=41, help="paired rounds per artifact")
    args = ap.parse_args()

    matrix = load(args.matrix)
    lat = dataclasses.asdict(matrix.latency)
    backend = OnnxRuntime()
    backend.init_worker()
    art_root = Path(args.out) / "artifacts"
    if args.artifacts:
        ids = [a.strip() for a in args.artifacts.split(",")]
    else:
        ids = [a for a in DEFAULT if (art_root / a / "model.onnx").exists()][: args.count]
        if len(ids) < args.count:  # top up with any passing artifacts
            others = sorted(p.parent.name for p in art_root.glob("*/model.onnx") if p.parent.name not in ids)
            ids += others[: args.count - len(ids)]
    if not ids:
        print(f"latency_bench: no artifacts in {art_root}; run `nox -s export` first", file=sys.stderr)
        return 2

    import onnxruntime

    print(f"onnxruntime {onnxruntime.__version__}, {lat['threads']} intra-op thread(s), {args.rounds} paired rounds")
    print(f"{'artifact':<50} {'harness µs':>11} {'bare µs':>9} {'ratio':>7} {'stable':>7}")
    ratios = []
    for art_id in ids:
        art = art_root / art_id
        try:
            sess = backend.session(art / "model.onnx", "cpu", lat["threads"])
            feeds, _ = feeds_for([i.name for i in sess.get_inputs()], np.load(art / "reference.npz"), "example")
        except Exception as exc:  # an artifact this runtime cannot load is not a latency figure
            print(f"{art_id:<50} skipped: {error_line(str(exc))[:60]}")
            continue
        harness_medians, bare_medians, stable = [], [], 0
        runs = 2 * lat["min_runs"]  # the bare loop times as many runs as the harness last did
        for i in range(args.rounds):
            # ABBA order: neither measurement always goes first (caches, allocator, clock).
            for which in ("harness", "bare") if i % 2 == 0 else ("bare", "harness"):
                if which == "bare":
                    bare_medians.append(bare_median(sess, feeds, runs))
                    continue
                sample, runs, settled, _ = time_runs(lambda: sess.run(None, feeds), lat)  # noqa: B023 (called at once)
                harness_medians.append(statistics.median(sample))
                stable += settled
        h, b = statistics.median(harness_medians), statistics.median(bare_medians)
        # Each round's two medians were taken side by side: their ratio cancels the machine's drift.
        ratio = statistics.median(x / y for x, y in zip(harness_medians, bare_medians, strict=True))
        ratios.append(ratio)
        print(f"{art_id:<50} {h * 1e6:11.1f} {b * 1e6:9.1f} {ratio:7.3f} {stable:>4}/{args.rounds}")
    if not ratios:
        return 2
    gmean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    worst = max(ratios, key=lambda r: abs(math.log(r)))
    print(f"geometric mean ratio {gmean:.3f}, worst {worst:.3f} over {len(ratios)} artifacts (target: within 5%)")
    print(json.dumps({"gmean": round(gmean, 4), "worst": round(worst, 4), "artifacts": len(ratios)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
