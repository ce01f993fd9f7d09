"""The device check's helpers on the machine it runs on (bench/device_check.sh remote); standard library only.

    python3 bench/device_env.py --site ORT_SITE --venv VENV --facts FILE   # make the run environment; print its python
    python3 bench/device_env.py --library-path                              # `export LD_LIBRARY_PATH=...` for CUDA 13
    python3 bench/device_env.py --smoke-model M.onnx                        # the smoke test's model (with onnx)
    VENV/bin/python bench/device_env.py --smoke M.onnx                      # a Conv on CUDA against the CPU
    python3 bench/device_env.py --summary SHARDS                            # one line per shard
    python3 bench/device_env.py --pack A.tar.xz DIR NAME... | --unpack A DIR   # tar.xz with Python's lzma

The run environment is what a nox `run` session would make, from what the machine has (no network there): a venv
of its own (not the machine's site-packages, whose onnxruntime 1.30 CPU build would sit beside onnxruntime-gpu
and be refused as two packages of one module), holding the carried onnxruntime-gpu, the interpreter's own numpy,
protobuf, flatbuffers and packaging (linked, not copied), and the harness from this checkout.
"""

from __future__ import annotations

import argparse
import glob
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# onnxruntime-gpu's own requirements (its METADATA's Requires-Dist without extras), as distributions.
DEPENDENCIES = ("numpy", "flatbuffers", "packaging", "protobuf")


def _site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _top_level(dist: importlib.metadata.Distribution) -> set[str]:
    """The names a distribution puts at the top of site-packages (its packages, its dist-info)."""
    names = {f.parts[0] for f in dist.files or () if f.parts and f.parts[0] not in ("..", "__pycache__")}
    return {n for n in names if not n.endswith(".pth")}


def make_env(site: Path, venv: Path) -> Path:
    """A venv holding ``site`` (the unpacked onnxruntime-gpu), :data:`DEPENDENCIES` from this interpreter and the
    harness; returns its python. Raises SystemExit with one line when a piece is missing."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--clear", str(venv)], check=True)
    target = _site_packages(venv)
    if not target.is_dir():
        raise SystemExit(f"device_env: {target} was not made by `python -m venv`")
    for name in DEPENDENCIES:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise SystemExit(
                f"device_env: {sys.executable} has no {name}, which onnxruntime-gpu needs; carry its wheel"
            ) from None
        base = Path(str(dist.locate_file("")))
        for top in sorted(_top_level(dist)):
            if (base / top).exists() and not (target / top).exists():
                (target / top).symlink_to(base / top)
    found = sorted(p.name for p in site.iterdir())
    if "onnxruntime" not in found or not any(n.startswith("onnxruntime_gpu-") for n in found):
        raise SystemExit(f"device_env: {site} holds {found[:6]}, not onnxruntime and onnxruntime_gpu-*.dist-info")
    for name in found:
        (target / name).symlink_to(site / name)
    (target / "harness-checkout.pth").write_text(f"{ROOT}\n")
    return venv / "bin" / "python"


def library_path() -> str:
    """Folders of the CUDA 13 and cuDNN 9 libraries that this interpreter's torch came with (``nvidia/*/lib``),
    before any LD_LIBRARY_PATH already set: onnxruntime-gpu >= 1.27 links CUDA 13 and dlopens cuDNN."""
    folders: list[str] = []
    for entry in sys.path:
        folders += sorted(glob.glob(os.path.join(entry, "nvidia", "*", "lib")))
    folders = [f for f in dict.fromkeys(folders) if glob.glob(os.path.join(f, "lib*.so*"))]
    return os.pathsep.join([*folders, *filter(None, [os.environ.get("LD_LIBRARY_PATH")])])


def facts() -> dict[str, object]:
    """The machine: GPU, driver, CUDA and cuDNN as nvidia-smi and torch see them; Python and packages."""
    found: dict[str, object] = {"host": platform.node(), "python": platform.python_version(), "machine": platform.machine()}
    found["measured"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    if shutil.which("nvidia-smi"):
        query = "name,driver_version,memory.total,compute_cap"
        proc = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True, text=True, timeout=60
        )
        rows = [
            dict(zip(query.split(","), (v.strip() for v in line.split(",")), strict=False)) for line in proc.stdout.splitlines()
        ]
        found["gpus"] = rows or proc.stderr.strip()[-300:]
    else:
        found["gpus"] = "no nvidia-smi: no NVIDIA driver on this machine"
    try:
        import torch

        found["torch"] = torch.__version__
        found["torch_cuda"] = torch.version.cuda
        found["cudnn"] = torch.backends.cudnn.version() if torch.cuda.is_available() else None
        found["cuda_available"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            found["gpu"] = torch.cuda.get_device_name(0)
    except Exception as exc:  # a machine without torch: said, not fatal
        found["torch"] = f"{type(exc).__name__}: {exc}"
    for name in ("numpy", "onnx", "onnxruntime", "onnxruntime-gpu", "tensorrt", "pycuda", "cuda-bindings"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def smoke_model(path: Path) -> None:
    """Write the smoke test's model (a 3x3 Conv, 3 to 8 channels): with onnx, which the run environment lacks."""
    import numpy as np
    from onnx import TensorProto, helper

    w = np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
        "smoke",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 32, 32])],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel())],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())


def smoke(path: Path) -> int:
    """The smoke model on the CUDA provider against the CPU provider: CUDA is what the session holds, and agrees."""
    import numpy as np
    import onnxruntime as ort

    print(f"onnxruntime {ort.__version__} from {Path(ort.__file__).parent}; available: {ort.get_available_providers()}")
    blob = path.read_bytes()
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    cpu = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    sess = ort.InferenceSession(blob, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    held = sess.get_providers()
    diff = float(np.abs(sess.run(None, {"x": x})[0] - cpu).max())
    ok = held[0] == "CUDAExecutionProvider" and diff < 1e-3
    print(f"smoke: the session holds {held}; Conv max abs diff CUDA vs CPU {diff:.3g}: {'ok' if ok else 'NOT ON CUDA'}")
    return 0 if ok else 1


def pack(archive: Path, folder: Path, names: list[str]) -> None:
    """``names`` (under ``folder``, those that exist) into ``archive`` as tar.xz, written beside it and renamed: the
    standard library's lzma, so neither machine needs the xz program."""
    import tarfile

    part = archive.with_name(archive.name + ".part")
    with tarfile.open(part, "w:xz", preset=6) as tar:
        for name in names:
            if (folder / name).exists():
                tar.add(folder / name, arcname=name)
    part.replace(archive)


def unpack(archive: Path, folder: Path) -> None:
    """A tar archive (any compression) into ``folder``, nothing outside it (the ``data`` filter)."""
    import tarfile

    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder, filter="data")


def summary(shards: Path) -> None:
    """One line per shard: its cells by status, how many were timed and with which copies; a column that is one
    runtime-wide record, its reason. A line a deadline cut short is skipped."""
    for shard in sorted(shards.glob("*.jsonl")):
        cells = []
        for line in shard.read_text().splitlines():
            try:
                cells.append(json.loads(line))
            except ValueError:  # a line cut short by a deadline
                continue
        counts = Counter(c["status"] for c in cells)
        timed = [c["latency"] for c in cells if c.get("latency")]
        line = f"{shard.name}: {len(cells)} cells {dict(counts)}, {len(timed)} timed"
        if timed:  # host: numpy arrays in and out of every run; device: IOBinding kept them on the GPU
            line += f" (copies: {', '.join(sorted({t.get('copies', 'host') for t in timed}))})"
        if len(cells) == 1 and cells[0]["case"] == "*":
            line += f": {cells[0].get('error_line')}"
        print(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", type=Path, help="the unpacked onnxruntime-gpu (with its dist-info)")
    ap.add_argument("--venv", type=Path, help="the run environment to make")
    ap.add_argument("--facts", type=Path, help="write the machine's facts here (JSON)")
    ap.add_argument("--library-path", action="store_true")
    ap.add_argument("--smoke-model", type=Path, help="write the smoke test's model here (needs onnx)")
    ap.add_argument("--smoke", type=Path, help="run the smoke test's model on CUDA and the CPU")
    ap.add_argument("--summary", type=Path)
    ap.add_argument("--pack", nargs="+", metavar=("ARCHIVE", "FOLDER"), help="ARCHIVE FOLDER NAME...: tar.xz of those names")
    ap.add_argument("--unpack", nargs=2, type=Path, metavar=("ARCHIVE", "FOLDER"))
    args = ap.parse_args()
    if args.pack:
        pack(Path(args.pack[0]), Path(args.pack[1]), args.pack[2:])
    elif args.unpack:
        unpack(*args.unpack)
    elif args.library_path:
        print(f"export LD_LIBRARY_PATH='{library_path()}'")
    elif args.smoke_model:
        smoke_model(args.smoke_model)
    elif args.smoke:
        return smoke(args.smoke)
    elif args.summary:
        summary(args.summary)
    elif args.site and args.venv:
        py = make_env(args.site, args.venv)
        if args.facts:
            found = facts()
            found["run_environment"] = (
                subprocess.run(
                    [str(py), "-c", "import onnxruntime, numpy; print(onnxruntime.__version__, numpy.__version__)"],
                    capture_output=True,
                    text=True,
                    timeout=120,
                ).stdout.strip()
                or "onnxruntime does not import there"
            )
            args.facts.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
            print(json.dumps(found, sort_keys=True), file=sys.stderr)
        print(py)
    else:
        ap.error("give --site and --venv, --library-path, --smoke or --summary")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
