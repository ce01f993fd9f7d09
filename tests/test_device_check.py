"""bench/device_check.sh, everything but the device call, on this machine without a GPU:

- ``dry-run``: the export of profile gpu, packed; ``remote`` as the GPU machine runs it (the carried package
  unpacked into a run environment of its own, the smoke test, the run stage's correctness and latency passes,
  the second reference, $OUT within what the host returns: a few small files); ``collect``: the shards gathered and reported.
  The package is the real onnxruntime-gpu 1.31.1 wheel, which here finds no CUDA: its GPU columns must say why.
- ``prepare`` in a clone of this checkout: results/ leaves the tree that travels (and comes back), the 64 MiB a
  call carries is checked, and `nox -s matrix` refuses to publish while results/ is out.
- :mod:`harness.publish.gpu_outputs`: a mismatch of an NVIDIA column says what torch on the GPU says about it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.answer import lookup, published
from harness.core.records import CellRecord, ExportRecord, Stage, Status
from harness.publish import gpu_outputs as gpuref
from harness.publish.markdown import _beside_lines
from harness.run.backends.gpu import nvidia_driver_problem
from harness.store import layout

pytestmark = pytest.mark.torch  # exports with real torch: `nox -s tests`, not `nox -s unit`


ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "device_check.sh"
CASES = "argmax_nan,argmax_nan_fixed"
PY = sys.executable


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DEVICE_CHECK_EXPORT=f"{PY} -m harness export",
        DEVICE_CHECK_PYTHON=PY,
        DEVICE_CHECK_HARNESS=f"{PY} -m harness",
        DEVICE_CHECK_REPORT=f"{PY} -m harness report",
        DEVICE_CHECK_CASES=CASES,
        DEVICE_CHECK_TORCH_DEVICE="cpu",  # no CUDA here: the script's own check of the second reference
    )
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def dry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if nvidia_driver_problem() is None:
        pytest.skip("this machine has an NVIDIA driver: run the real check (bench/device_check.sh)")
    folder = tmp_path_factory.mktemp("device")
    proc = subprocess.run(["bash", str(SCRIPT), "dry-run", str(folder)], env=_env(), capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return folder


def _cells(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_host_returns_a_few_small_files(dry: Path) -> None:
    files = sorted((dry / "out").iterdir())
    assert [f.name for f in files] == ["device_check.log", "device_check.tar.xz", "environment.json"]
    for f in files:  # at most 8 files, 16 MiB each, named in letters, digits, '.', '_' and '-'
        assert f.is_file() and f.stat().st_size < 16 * 2**20 and re.fullmatch(r"[A-Za-z0-9._-]+", f.name)
    facts = json.loads((dry / "out" / "environment.json").read_text())
    assert facts["run_environment"].startswith("1.31.1 ")  # the carried onnxruntime-gpu imports in the run env
    assert "no NVIDIA driver" in str(facts["gpus"]) and facts["python"] and facts["torch"]
    log = (dry / "out" / "device_check.log").read_text()
    assert "smoke: the session holds ['CPUExecutionProvider']" in log and "NOT ON CUDA" in log


def test_the_gpu_columns_say_why_and_the_cpu_column_of_the_same_package_runs(dry: Path) -> None:
    shards = dry / "build-gpu" / "shards"
    for name in ("ortgpu-1.31.1-cuda", "ortgpu-1.31.1-tensorrt", "ortgpu-1.31.1-tensorrt-fp16"):
        (cell,) = _cells(shards / f"{name}.jsonl")
        assert cell["status"] == "unavailable" and cell["case"] == "*"
        assert "cannot load: libcublas" in cell["error_line"] and "no NVIDIA driver" in cell["error_line"]
    for name in ("trt-10.13.3.9-tensorrt", "trt-10.13.3.9-tensorrt-fp16"):
        (cell,) = _cells(shards / f"{name}.jsonl")
        assert cell["status"] == "unavailable" and "TensorRT is not importable" in cell["error_line"]
    cpu = _cells(shards / "ortgpu-1.31.1-cpu.jsonl")
    manifest = json.loads((dry / "build-gpu" / "manifest.json").read_text())
    assert {c["case"] for c in cpu} == set(CASES.split(",")) and len(manifest["artifacts"]) == 4
    assert {c["runtime"] for c in cpu} == {"onnxruntime-gpu==1.31.1"}
    assert all(c["env"]["package"] == "onnxruntime-gpu" for c in cpu)  # not the machine's onnxruntime beside it
    fixed = [c for c in cpu if c["case"] == "argmax_nan_fixed"]
    assert fixed and all(c["status"] == "pass" for c in fixed)
    assert any(c["latency"] for c in fixed)  # the second pass timed what the first found correct


def test_the_second_reference_ran_against_the_carried_export_and_the_report_is_published(dry: Path) -> None:
    rows = _cells(dry / "build-gpu" / "cuda_reference.jsonl")
    assert {(r["case"], r["status"]) for r in rows} == {(c, "pass") for c in CASES.split(",")}
    refs = {json.loads((a / "export.json").read_text())["reference_sha256"] for a in (dry / "build-gpu" / "artifacts").iterdir()}
    assert {r["reference_sha256"] for r in rows} <= refs
    published = dry / "results" / "gpu"
    assert json.loads((published / "device.json").read_text())["run_environment"].startswith("1.31.1")
    statuses = {(c["runtime"], c["provider"], c["status"]) for c in _cells(published / "matrix.jsonl")}
    assert ("onnxruntime-gpu==1.31.1", "cuda", "unavailable") in statuses
    assert ("onnxruntime-gpu==1.31.1", "cpu", "pass") in statuses
    assert "not measured here" in (published / "README.md").read_text()


def test_collect_refuses_a_cut_short_shard_or_a_gpu_that_ran_nothing_and_publishes_nothing(dry: Path, tmp_path: Path) -> None:
    """A shard the deadline cut (its last line half written, its seal not matching) is refused by gather."""
    import tarfile

    got = tmp_path / "got"
    with tarfile.open(dry / "out" / "device_check.tar.xz") as tar:
        tar.extractall(got, filter="data")
    shard = got / "shards" / "ortgpu-1.31.1-cpu.jsonl"
    shard.write_bytes(shard.read_bytes()[:-40])
    call = tmp_path / "call"
    call.mkdir()
    with tarfile.open(call / "device_check.tar.xz", "w:xz") as tar:
        for part in got.iterdir():
            tar.add(part, arcname=part.name)
    for name in ("environment.json", "device_check.log"):
        shutil.copy(dry / "out" / name, call / name)
    build = tmp_path / "build-gpu"
    shutil.copytree(dry / "build-gpu", build, ignore=shutil.ignore_patterns("shards"))
    results = tmp_path / "results" / "gpu"
    proc = subprocess.run(
        ["bash", str(SCRIPT), "collect", str(call)],
        env=_env(DEVICE_CHECK_DRY="1", DEVICE_CHECK_BUILD=str(build), DEVICE_CHECK_RESULTS=str(results)),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "ortgpu-1.31.1-cpu.jsonl" in proc.stdout + proc.stderr and "nothing published" in proc.stderr
    assert not results.exists() and not (build / "shards").exists()

    # The whole shards of a machine where CUDA did not run: gathered, but not published as the GPU's table.
    shutil.copy(dry / "out" / "device_check.tar.xz", call / "device_check.tar.xz")
    proc = subprocess.run(
        ["bash", str(SCRIPT), "collect", str(call)],
        env=_env(DEVICE_CHECK_BUILD=str(build), DEVICE_CHECK_RESULTS=str(results)),
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2 and "no CUDA cell passed on the device" in proc.stderr, proc.stdout + proc.stderr
    assert not results.exists()


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_prepare_takes_results_out_of_the_tree_that_travels_and_restore_brings_it_back(tmp_path: Path) -> None:
    """In a clone: the package is a stand-in file (the real one takes 9 minutes and a 244 MiB download to
    build); everything else is real: the export, the sparse checkout, the size a call would carry."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    for name in ("bench/device_check.sh", "bench/device_env.py", ".gitignore"):  # this checkout's, committed or not
        shutil.copy(ROOT / name, clone / name)
    _git(clone, "add", "bench", ".gitignore")
    _git(clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "bench", "--allow-empty")
    tracked = int(_git(clone, "ls-files", "results").count("\n"))
    assert tracked > 100 and (clone / "results" / "README.md").is_file()

    big = tmp_path / "too-big.tar.xz"
    big.write_bytes(os.urandom(63 * 2**20))
    env = _env(DEVICE_CHECK_ORT=str(big), DEVICE_CHECK_CASES="argmax_nan_fixed")
    proc = subprocess.run(
        ["bash", "bench/device_check.sh", "prepare"], cwd=clone, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 2 and "over the 64 MiB a call carries" in proc.stderr, proc.stdout + proc.stderr
    assert (clone / "results" / "README.md").is_file()  # a refused prepare leaves results/ where it was

    small = tmp_path / "stand-in.tar.xz"
    small.write_bytes(os.urandom(2**20))
    env["DEVICE_CHECK_ORT"] = str(small)
    proc = subprocess.run(
        ["bash", "bench/device_check.sh", "prepare"], cwd=clone, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    carried = re.search(r"carries ([\d.]+) MiB of tree and ([\d.]+) MiB", proc.stdout)
    assert carried and float(carried[1]) < 8, proc.stdout
    assert "command: bash bench/device_check.sh remote" in proc.stdout and 'carry: [".device"]' in proc.stdout
    assert not (clone / "results").exists() and _git(clone, "status", "--porcelain") == ""
    assert int(_git(clone, "ls-files", "results").count("\n")) == tracked  # still committed, only not in the tree
    assert sorted(p.name for p in (clone / ".device").iterdir()) == ["export.tar.xz", "ort-site.tar.xz"]

    why = published.results_out_of_tree(clone)  # what `nox -s matrix` and `nox -s report` refuse with
    assert why is not None and "bash bench/device_check.sh restore" in why

    proc = subprocess.run(
        ["bash", "bench/device_check.sh", "restore"], cwd=clone, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and (clone / "results" / "README.md").is_file()
    assert (
        _git(clone, "status", "--porcelain") == "" and _git(clone, "config", "--bool", "core.sparseCheckout").strip() == "false"
    )
    assert published.results_out_of_tree(clone) is None and published.results_out_of_tree(ROOT) is None


def _cell(provider: str, status: Status, probe: str = "example", case: str = "softmax") -> CellRecord:
    return CellRecord(case, "dynamo", 18, "onnxruntime-gpu==1.31.1", provider, probe, status, Stage.RUN)


def _export(case: str, sha: str) -> ExportRecord:
    return ExportRecord(case, "dynamo", 18, ok=True, seconds=1.0, reference_sha256=sha)


def test_a_gpu_mismatch_says_what_torch_on_the_gpu_says(tmp_path: Path) -> None:
    """Rows as bench/cuda_reference.py writes them (no GPU here to write them: the rows are written by hand and
    named so); the join itself is the report's real code."""
    h200 = {"case": "softmax", "device": "NVIDIA H200", "reference_sha256": "a"}
    rows = [
        {**h200, "probe": "example", "status": "pass", "max_abs": 1e-7},
        {**h200, "probe": "batch3", "status": "mismatch", "error": "max abs diff 0.01"},
        {**h200, "probe": "batch5", "status": "pass", "max_abs": 0.0, "reference_sha256": "old"},
    ]  # fmt: skip
    (tmp_path / layout.CUDA_REFERENCE).write_text("".join(json.dumps(r) + "\n" for r in rows) + "{cut")
    found, left = gpuref.read(tmp_path, [_export("softmax", "a")])
    assert set(found) == {("softmax", "example"), ("softmax", "batch3")}
    assert left is not None and "1 damaged line(s)" in left and "1 row(s) of another export" in left
    cells = [
        _cell("cuda", Status.MISMATCH),
        _cell("cuda", Status.MISMATCH, "batch3"),
        _cell("cuda", Status.MISMATCH, "batch5"),  # its row is of another export: no verdict
        _cell("tensorrt-fp16", Status.MISMATCH),
        _cell("cpu", Status.MISMATCH),  # the CPU column's reference is the CPU: nothing to add
        _cell("cuda", Status.PASS),
    ]
    notes = [c.note for c in gpuref.join(cells, found)]
    assert (
        notes[0] is not None and "torch on NVIDIA H200 agrees with the CPU reference" in notes[0] and "the runtime's" in notes[0]
    )
    assert notes[1] is not None and "differs from the CPU reference too" in notes[1] and "not an export bug" in notes[1]
    assert notes[2] is None and notes[3] is not None and notes[4] is None and notes[5] is None


def test_the_default_table_lists_the_columns_published_beside_it_and_recommend_finds_them(dry: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    shutil.copytree(dry / "results" / "gpu", results / "gpu")
    default = _cells(dry / "results" / "gpu" / "matrix.jsonl")[0] | {"runtime": "onnxruntime==1.32.0", "provider": "cpu"}
    (results / "matrix.jsonl").write_text(json.dumps(default) + "\n")
    rows = published.published_beside(results)
    columns = {(r["runtime"], r["column"]): r for r in rows}
    assert set(columns) == {("onnxruntime-gpu==1.31.1", c) for c in ("cpu", "cuda", "tensorrt", "tensorrt-fp16")} | {
        ("tensorrt==10.13.3.9", c) for c in ("tensorrt", "tensorrt-fp16")
    }
    cuda, cpu = columns[("onnxruntime-gpu==1.31.1", "cuda")], columns[("onnxruntime-gpu==1.31.1", "cpu")]
    assert cuda["not_measured"].startswith("unavailable: CUDAExecutionProvider") and cuda["device"] == "none"  # no GPU here
    assert cpu["not_measured"] is None and cpu["counts"]["pass"] > 0 and cpu["device"] not in ("?", "none")
    assert cuda["measured"] == json.loads((results / "gpu" / "device.json").read_text())["measured"]  # the machine's date
    text = "\n".join(_beside_lines(rows))
    assert "[onnxruntime-gpu==1.31.1](gpu/README.md) | `cuda`" in text and "not measured: unavailable" in text
    for cell in _cells(results / "gpu" / "matrix.jsonl"):  # every record of an NVIDIA column names its GPU
        assert ("gpu" in cell) == (cell["provider"] != "cpu")
    table = str(results / "matrix.jsonl")
    assert lookup.runtime_table("ortgpu-1.31.1", table) == str(results / "gpu" / "matrix.jsonl")
    assert lookup.runtime_table("1.32.0", table) == table and lookup.runtime_table("ortgpu-9.9.9", table) == table
