"""How fast `harness check` answers for a file, against Polygraphy on the same file.

A small model (a 3x3 convolution, ReLU, an average pool and a Linear head: 6 nodes, 12 KB; written with onnx's
helper at IR 8 / opset 17, a dynamic batch) is checked as a user would check it, each figure the median of
``--rounds`` whole processes (``python -m harness check ...``: the interpreter's start-up included):

- **predicted**: ``harness check FILE --predict`` (the published frontiers; no runtime started);
- **warm**: ``harness check FILE --dim batch=2`` on the default profile's runtimes (23: 1.10–1.32) and on the
  18 of 1.15–1.32, every environment already made (the specification's answer and every runtime, in parallel);
- **cold** (once): the same with an empty ``--envs`` folder, so every environment is made, byte-compiled, one per
  core at once (uv's own cache as it is: a machine that never downloaded the wheels pays the downloads too; an
  environment ``nox -s matrix`` made for a runtime is used, not made, and the row says how many were made);
- **a platform**: 1.32.0 on ``x86-64-v3`` and on ``aarch64`` under qemu-user (``--platform``), launchers made;
- **Polygraphy**: ``polygraphy run FILE --onnxrt --input-shapes x:[2,3,16,16]`` on this environment's onnxruntime
  (1.32.0): one runtime, nothing to compare with, the least a user's Polygraphy check does.

    nox -s check_bench -- --rounds 5
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _model(path: Path) -> None:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.standard_normal((8, 10)).astype(np.float32), "fc")
    shape = numpy_helper.from_array(np.array([0, -1], np.int64), "shape")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Reshape", ["p", "shape"], ["f"]),
        helper.make_node("MatMul", ["f", "fc"], ["m"]),
        helper.make_node("Softmax", ["m"], ["y"], axis=-1),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 16, 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])
    graph = helper.make_graph(nodes, "small", [x], [y], [w, fc, shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))


def _timed(command: list[str]) -> tuple[float, int, str]:
    t0 = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    return time.perf_counter() - t0, done.returncode, done.stdout + done.stderr


def _median(command: list[str], rounds: int) -> tuple[float, list[float], str]:
    walls = []
    out = ""
    for _ in range(rounds):
        wall, _, out = _timed(command)
        walls.append(wall)
    return statistics.median(walls), walls, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--envs", default=str(ROOT / "build" / "check" / "envs"), help="the kept environments (warm)")
    args = ap.parse_args()
    from harness.config.matrix import load

    matrix = load(ROOT / "matrix.toml")
    pins = [rt for rt in matrix.profile("default").runtimes]
    eighteen = [a for rt in pins if rt.version.split(".")[:2] >= ["1", "15"] for a in ("--runtime", rt.version)]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "small.onnx"
        _model(path)
        harness = [sys.executable, "-m", "harness", "check", str(path), "--envs", args.envs, "--out", str(Path(tmp) / "out")]
        _timed([*harness, "--dim", "batch=2"])  # makes what is missing: the warm figures start warm
        rows = []
        wall, walls, _ = _median([*harness, "--predict"], args.rounds)
        rows.append(("predicted (--predict), 23 runtimes", wall, walls))
        wall, walls, out = _median([*harness, "--dim", "batch=2"], args.rounds)
        rows.append(("warm, 23 runtimes (1.10–1.32)", wall, walls))
        wall, walls, _ = _median([*harness, "--dim", "batch=2", *eighteen], args.rounds)
        rows.append((f"warm, {len(eighteen) // 2} runtimes (1.15–1.32)", wall, walls))
        wall, walls, _ = _median([*harness, "--dim", "batch=2", "--runtime", "1.32.0"], args.rounds)
        rows.append(("warm, 1 runtime (1.32.0)", wall, walls))
        for name in ("x86-64-v3", "aarch64"):  # under qemu-user (its launcher made by the warm-up run below, once)
            _timed([*harness, "--dim", "batch=2", "--runtime", "1.32.0", "--platform", name])
            wall, walls, _ = _median([*harness, "--dim", "batch=2", "--runtime", "1.32.0", "--platform", name], args.rounds)
            rows.append((f"warm, 1 runtime (1.32.0) on {name}, emulated", wall, walls))
        cold_envs = Path(tmp) / "cold-envs"
        cold = [*harness[:-4], "--envs", str(cold_envs), "--out", str(Path(tmp) / "cold"), "--dim", "batch=2"]
        wall, _, said = _timed(cold)
        made = said.count("environment made in")  # an environment nox made for the matrix is used, not made
        rows.append((f"cold: {made} environments made (uv's cache warm), then the check", wall, [wall]))
        polygraphy = shutil.which("polygraphy") or str(Path(sys.executable).parent / "polygraphy")
        wall, walls, said = _median([polygraphy, "run", str(path), "--onnxrt", "--input-shapes", "x:[2,3,16,16]"], args.rounds)
        rows.append(("polygraphy run --onnxrt, 1 runtime (this environment's)", wall, walls))
    print("| what | median wall s | rounds |\n|---|---|---|")
    for what, wall, each in rows:
        print(f"| {what} | {wall:.2f} | {', '.join(f'{w:.2f}' for w in each)} |")
    print("\nthe warm answer:\n" + "\n".join(line for line in out.splitlines() if not line.startswith("harness:"))[-1600:])
    if "PASSED" not in said:
        print("\npolygraphy said:\n" + said[-800:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
