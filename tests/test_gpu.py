"""The GPU half on a machine without a GPU: what can be proved here, proved for real.

- matrix.toml's GPU runtimes, provider options and precision axis, and their refusals;
- native TensorRT through the real run stage: with no driver nothing of TensorRT is installed, and
  every cell of its columns is ``unavailable`` with the precise reason, never a pass;
- the backend's own logic that needs no GPU: the optimization profile from the probes, the engine
  cache key, the parser's errors (read from a stand-in object, ``FakeParserError``: TensorRT
  itself cannot be installed on this machine);
- ``harness gather``: idempotent, and each refusal (another export's artifacts, a damaged line, a
  shard of no profile, two different copies, nothing to gather) one line.

The real onnxruntime-gpu wheel is in tests/test_providers.py; several real shard processes
gathered against one real single run are in tests/test_e2e.py.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.config import runtimes
from harness.config.matrix import load
from harness.core.errors import HarnessError
from harness.core.records import CellRecord, Status
from harness.run.backends import tensorrt as trt_backend
from harness.run.backends.gpu import nvidia_driver_problem
from harness.run.envprobe import wrong_environment
from harness.run.stage import run_runtime
from harness.store import cache, layout
from harness.store.layout import read_shard, shard_path, stamp_path
from harness.store.nightly import gather
from tests.artifacts import fault_corpus

pytestmark = pytest.mark.torch  # exports with real torch: `nox -s tests`, not `nox -s unit`


ROOT = Path(__file__).resolve().parent.parent
MATRIX = load(ROOT / "matrix.toml")
TRT = next(rt for rt in MATRIX.runtimes if rt.package == "tensorrt")
NEWEST = MATRIX.profile("default").runtimes[-1]


def _toml(tmp_path: Path, old: str, new: str) -> Path:
    text = (ROOT / "matrix.toml").read_text()
    assert old in text
    path = tmp_path / "matrix.toml"
    path.write_text(text.replace(old, new, 1))
    return path


# ---- matrix.toml ----


def test_gpu_runtimes_record_their_majors_and_install_gpu_wheels_only_with_a_driver() -> None:
    gpu = [rt for rt in MATRIX.runtimes if rt.gpu]
    assert {rt.package for rt in gpu} == {"onnxruntime-gpu", "tensorrt"}
    for rt in gpu:
        assert rt.cuda.isdigit() and rt.tensorrt.isdigit(), rt.pin
        assert set(rt.gpu_requirements) <= set(rt.gpu_install)
        assert not set(rt.gpu_requirements) & set(rt.requirements), rt.pin  # never on a machine without a driver
    assert TRT.pin not in TRT.requirements and TRT.pin in TRT.gpu_install  # its wheels are GBs of CUDA libraries
    assert [rt.id for rt in gpu] == ["ortgpu-1.18.1", "ortgpu-1.23.2", "ortgpu-1.31.1", f"trt-{TRT.version}"]
    assert all(not rt.cuda and not rt.gpu_requirements for rt in MATRIX.runtimes if not rt.gpu)


def test_a_profile_runs_each_provider_where_the_package_offers_it_and_tensorrt_per_precision() -> None:
    nightly = MATRIX.profile("nightly")
    columns = {rt.package: nightly.columns(rt) for rt in nightly.runtimes}
    assert columns == {
        "onnxruntime": ("cpu",),
        "onnxruntime-openvino": ("cpu", "openvino"),  # no fp16: OpenVINO's CPU device takes FP32 only
        "onnxruntime-gpu": ("cpu", "cuda", "tensorrt", "tensorrt-fp16"),
        "tensorrt": ("tensorrt", "tensorrt-fp16"),
    }
    ep = runtimes.kind("onnxruntime-gpu")
    assert MATRIX.options("tensorrt-fp16", ep)["trt_fp16_enable"] is True
    assert MATRIX.options("tensorrt", ep)["trt_fp16_enable"] is False
    assert MATRIX.options("tensorrt", TRT.kind) == {"workspace_mib": 4096}  # native TensorRT: [providers.tensorrt] native
    assert "cudnn_conv_algo_search" in MATRIX.options("cuda", ep)
    assert MATRIX.options("cpu", ep) == {}
    assert MATRIX.profile("default").shards() == [(rt, "cpu") for rt in MATRIX.profile("default").runtimes]
    assert set(runtimes.packages()) == {rt.package for rt in MATRIX.runtimes}  # every kind of the registry is declared


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'pin = "onnxruntime-gpu==1.23.2"\ncuda = "12"',
            'pin = "onnxruntime-gpu==1.23.2"',
            r'runtimes\[\d+\]\.cuda: onnxruntime-gpu==1.23.2 is a GPU runtime: record the CUDA major it needs \(cuda = "12"\)',
        ),
        (
            'pin = "onnxruntime==1.19.2"',
            'pin = "onnxruntime==1.19.2"\ncuda = "12"',
            r"runtimes\[\d+\]\.cuda: onnxruntime==1.19.2 is not a GPU runtime: it needs no CUDA, cuDNN or TensorRT; "
            "remove the key",
        ),
        (
            'pin = "onnxruntime-gpu==1.23.2"\ncuda = "12"',
            'pin = "onnxruntime-gpu==1.23.2"\ncuda = "12.4"',
            r'runtimes\[\d+\]\.cuda: must be a major version such as "12", got \'12.4\'',
        ),
        (
            'precisions = ["fp32", "fp16"]',
            'precisions = ["fp32", "fp61"]',
            r"profiles\.gpu\.precisions: unknown precision 'fp61' \(did you mean 'fp16'\?\); use fp32, fp16",
        ),
        (
            "native = { workspace_mib = 4096 }",
            "native = { workspace_mib = 4096, tactics = 3 }",
            r"providers\.tensorrt\.native: unknown key\(s\) tactics; allowed: workspace_mib",
        ),
        (
            'options = { cudnn_conv_algo_search = "EXHAUSTIVE"',
            'options = { cudnn_conv_algo_search = ["EXHAUSTIVE"]',
            r"providers\.cuda\.options: cudnn_conv_algo_search: must be a string, number or boolean",
        ),
        (
            'runtimes = ["onnxruntime-gpu==1.31.1", "tensorrt==10.13.3.9"]\nproviders = ["cpu", "cuda", "tensorrt"]',
            'runtimes = ["onnxruntime-gpu==1.31.1", "tensorrt==10.13.3.9"]\nproviders = ["cpu", "cuda"]',
            r"profiles\.gpu\.providers: tensorrt==10.13.3.9 offers none of the providers cpu, cuda \(it offers tensorrt\)",
        ),
        (
            'runtimes = ["onnxruntime==1.17.3", "onnxruntime==1.32.0"]\nproviders = ["cpu"]',
            'runtimes = ["onnxruntime==1.17.3", "onnxruntime==1.32.0"]\nproviders = ["cpu"]\nprecisions = ["fp16"]',
            r"profiles\.smoke\.precisions: precisions apply to tensorrt only, which providers does not list; add it",
        ),
        (
            'runtimes = ["onnxruntime==1.17.3", "onnxruntime==1.32.0"]\nproviders = ["cpu"]',
            'runtimes = ["onnxruntime==1.17.3", "onnxruntime==1.32.0"]\nproviders = ["cpu", "cuda"]',
            r"profiles\.smoke\.providers: no runtime of the profile offers provider 'cuda'; add a runtime that does or remove it",
        ),
        (
            "native = { workspace_mib = 4096 }",
            'native = { workspace_mib = "lots" }',
            r"providers\.tensorrt\.native: workspace_mib must be an integer of MiB within 1\.\.1048576 \(1 TiB\), got 'lots'",
        ),
        (
            "options = { trt_max_workspace_size",
            "options = { trt_fp16_enable = true, trt_max_workspace_size",
            r"providers\.tensorrt\.options: trt_fp16_enable is set per column by the profile's precisions",
        ),
    ],
)
def test_gpu_settings_are_refused_with_one_line(tmp_path: Path, old: str, new: str, message: str) -> None:
    with pytest.raises(HarnessError, match=message) as info:
        load(_toml(tmp_path, old, new))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("column", ["cpu-fp16", "tensorrt-fp32", "cuda-", "cuda-fp16"])
def test_run_refuses_a_column_that_does_not_exist(tmp_path: Path, column: str) -> None:
    gpu = "onnxruntime-gpu==1.31.1"
    cmd = [sys.executable, "-m", "harness", "run", "--out", str(tmp_path), "--runtime", gpu, "--provider", column]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"harness: error: --provider '{column}' is not a column {gpu} runs; use cpu, cuda, tensorrt")


def test_run_refuses_a_column_the_runtime_does_not_run(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "run", "--out", str(tmp_path), "--runtime", TRT.pin, "--provider", "cuda"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    want = f"harness: error: --provider 'cuda' is not a column {TRT.pin} runs; use tensorrt, tensorrt-fp16\n"
    assert proc.stderr == want


def test_an_environment_that_is_not_the_runtimes_is_an_env_error() -> None:
    gpu = MATRIX.runtime("onnxruntime-gpu==1.31.1")
    assert wrong_environment({"onnxruntime": "1.31.1", "package": "onnxruntime-gpu"}, gpu) is None
    assert wrong_environment({"onnxruntime": "1.31.1", "package": "onnxruntime"}, gpu) == (
        "environment has onnxruntime 1.31.1, expected onnxruntime-gpu; reinstall the session"
    )
    assert wrong_environment({"tensorrt": ""}, TRT) is None  # nothing installed: its columns say why
    assert wrong_environment({"tensorrt": "10.0.1"}, TRT) == f"environment has tensorrt 10.0.1, expected {TRT.version}"


# ---- native TensorRT on a machine without a GPU ----


@pytest.mark.skipif(nvidia_driver_problem() is None, reason="this machine has an NVIDIA driver: bench/gpu_check.sh covers it")
def test_native_tensorrt_columns_are_unavailable_with_the_reason_never_a_pass(tmp_path: Path) -> None:
    """The real run stage in an environment that holds what the nox session installs without a driver
    (numpy and the harness, no tensorrt, no pycuda): one `unavailable` record per column, saying so."""
    out = tmp_path / "build"
    fault_corpus(out, only=["add_one", "div_int_min"])
    profile = MATRIX.profile("gpu")
    lines: list[str] = []
    cells = run_runtime(MATRIX, TRT, profile.columns(TRT), out, echo=lines.append)
    assert [(c.provider, c.status) for c in cells] == [("tensorrt", Status.UNAVAILABLE), ("tensorrt-fp16", Status.UNAVAILABLE)]
    for c in cells:
        assert c.runtime_wide and c.error_class == "ProviderUnavailable"
        assert c.error_line == (
            "TensorRT is not importable (ModuleNotFoundError: No module named 'tensorrt'); not installed here: "
            "no NVIDIA driver (libcuda.so.1 not found), so its GPU wheels and pycuda were not installed (gpu_requirements)"
        )
        assert c.env["tensorrt"] == "" and c.env["gpu"] == "none"
        assert [x.status for x in read_shard(shard_path(out, TRT, c.provider)).values()] == [Status.UNAVAILABLE]
        # Sealed (the report may publish the column), but checked again next time: a driver can appear.
        assert json.loads(stamp_path(out, TRT, c.provider).read_text())["redo"] == "unavailable here: checked again every run"
    assert trt_backend.TensorRT().problem("cuda") == "native TensorRT runs the tensorrt columns only, not 'cuda'"


def test_the_optimization_profile_spans_every_probe(tmp_path: Path) -> None:
    """min/opt/max per dynamic dim from reference.npz's probe inputs: opt is the example's shape."""
    path = tmp_path / "reference.npz"
    arrays = {
        "example/in/x": np.zeros((2, 3, 5), np.float32),
        "example/in/mask": np.zeros((4,), bool),
        "batch1/in/x": np.zeros((1, 3, 7), np.float32),
        "batch1/in/mask": np.zeros((4,), bool),
        "batch8/in/x": np.zeros((8, 3, 6), np.float32),
        "batch8/in/mask": np.zeros((4,), bool),
        "batch8/out/0": np.zeros((8,), np.float32),
    }
    np.savez(path, **arrays)
    ref = np.load(path)
    shapes = trt_backend.probe_shapes(ref, ["example", "batch1", "batch8"])
    assert shapes == {"x": [(2, 3, 5), (1, 3, 7), (8, 3, 6)], "mask": [(4,), (4,), (4,)]}
    example = {k: v[0] for k, v in trt_backend.probe_shapes(ref, ["example"]).items()}
    profile = trt_backend.profile_shapes({"x": (-1, 3, -1), "mask": (4,)}, shapes, example)
    assert profile == {"x": ((1, 3, 5), (2, 3, 5), (8, 3, 7))}  # mask is static: no profile entry
    with pytest.raises(ValueError, match=r"input 'y' has dynamic dims \[-1\] but no probe gives it a value"):
        trt_backend.profile_shapes({"y": (-1,)}, shapes, example)
    with pytest.raises(ValueError, match=r"input 'x' has rank 2 in the network but probes give \[3\]"):
        trt_backend.profile_shapes({"x": (-1, 3)}, shapes, example)


def test_the_engine_cache_key_follows_model_tensorrt_gpu_precision_workspace_and_profile() -> None:
    parts: dict[str, Any] = {
        "model_sha256": "ab" * 32,
        "trt_version": "10.13.3.9",
        "gpu": "NVIDIA H200 (sm_90)",
        "precision": "fp32",
        "workspace_mib": 4096,
        "profile": {"x": ((1, 3), (2, 3), (8, 3))},
    }
    key = trt_backend.engine_key(**parts)
    assert key == trt_backend.engine_key(**parts)
    changed = {
        "model_sha256": "cd" * 32,
        "trt_version": "10.16.1.11",
        "gpu": "NVIDIA L4 (sm_89)",
        "precision": "fp16",
        "workspace_mib": 1024,
        "profile": {"x": ((1, 3), (2, 3), (16, 3))},
    }
    for name, value in changed.items():
        assert trt_backend.engine_key(**{**parts, name: value}) != key, name


def test_shape_tensor_inputs_get_a_profile_of_their_values(tmp_path: Path) -> None:
    """An int input the network uses as a shape (a reshape target, a count) is profiled by value."""
    path = tmp_path / "reference.npz"
    np.savez(
        path,
        **{
            "example/in/n": np.array(4, np.int64),
            "big/in/n": np.array(9, np.int64),
            "example/in/shape": np.array([2, 6], np.int64),
            "big/in/shape": np.array([3, 4], np.int64),
        },
    )
    ref = np.load(path)
    values = trt_backend.profile_values(["n", "shape"], ref, ["example", "big"])
    assert values == {"n": ((4,), (4,), (9,)), "shape": ((2, 4), (2, 6), (3, 6))}
    with pytest.raises(ValueError, match="shape input 'm' has no value in any probe"):
        trt_backend.profile_values(["m"], ref, ["example"])


def test_gpu_columns_share_the_gpu_between_fewer_workers() -> None:
    run = MATRIX.run
    assert run.workers_for(runtimes.provider("cpu")) == run.worker_count
    assert run.workers_for(runtimes.provider("tensorrt-fp16")) == min(run.worker_count, run.gpu_workers) >= 1
    assert run.workers_for(runtimes.provider("cuda")) == min(run.worker_count, run.gpu_workers)


def test_the_tensorrt_provider_caches_engines_per_artifact_and_session(tmp_path: Path) -> None:
    """onnxruntime names a cached TensorRT engine by the model's file name and tensor names, not its
    weights: every artifact is a model.onnx, so each gets a folder of its own (and the unoptimized
    session another), and no timing cache is shared between workers."""
    from harness.run.backends.onnxruntime import session_providers

    gpu = runtimes.kind("onnxruntime-gpu")
    options = {**MATRIX.options("tensorrt-fp16", gpu), "engine_cache": str(tmp_path / "trt")}
    (ep, opts), cuda = session_providers("tensorrt-fp16", options, "add_one.torchscript.op17/unoptimized")
    assert ep == "TensorrtExecutionProvider" and cuda == ("CUDAExecutionProvider", {"device_id": 0})
    assert opts["trt_engine_cache_path"] == str(tmp_path / "trt" / "add_one.torchscript.op17" / "unoptimized")
    assert Path(opts["trt_engine_cache_path"]).is_dir()
    assert opts["trt_fp16_enable"] is True and opts["trt_engine_cache_enable"] is True
    assert not any(k.startswith("trt_timing_cache") for k in opts) and "engine_cache" not in opts
    assert session_providers("cuda", MATRIX.options("cuda", gpu))[0][1]["cudnn_conv_algo_search"] == "EXHAUSTIVE"
    assert session_providers("cpu") == ["CPUExecutionProvider"]


class FakeParserError:
    """Stands in for ``tensorrt.ParserError`` (TensorRT cannot be installed without a GPU here): the
    methods TensorRT 10 gives it."""

    def __init__(self, node: int, name: str, op: str, desc: str) -> None:
        self._node, self._name, self._op, self._desc = node, name, op, desc

    def node(self) -> int:
        return self._node

    def node_name(self) -> str:
        return self._name

    def node_operator(self) -> str:
        return self._op

    def desc(self) -> str:
        return self._desc


class FakeOldParserError:
    """TensorRT before 8.6: no node_name, no node_operator."""

    def node(self) -> int:
        return -1

    def desc(self) -> str:
        return "Unsupported ONNX data type: UINT8 (2)\nmore detail"


class FakeOnnxParser:
    def __init__(self, errors: list[Any]) -> None:
        self.errors = errors
        self.num_errors = len(errors)

    def get_error(self, i: int) -> Any:
        return self.errors[i]


def test_parser_errors_name_the_node_and_its_operator() -> None:
    parser = FakeOnnxParser(
        [
            FakeParserError(12, "/NonZero", "NonZero", "This version of TensorRT does not support NonZero"),
            FakeOldParserError(),
        ]
    )
    assert trt_backend.parser_errors(parser) == [
        "node 12 (/NonZero, NonZero): This version of TensorRT does not support NonZero",
        "the model: Unsupported ONNX data type: UINT8 (2)",
    ]


# ---- harness gather ----


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real run of the reference runtime on the fault corpus, as one run job would upload it."""
    runner = tmp_path_factory.mktemp("runner") / "build"
    fault_corpus(runner, only=["add_one", "div_int_min"])
    run_runtime(MATRIX, NEWEST, ["cpu"], runner, echo=lambda _: None)
    return runner


def _export_copy(ran: Path, dest: Path) -> Path:
    """What the gather job downloads: the export alone, no shards."""
    dest.mkdir(parents=True)
    shutil.copy(ran / "manifest.json", dest / "manifest.json")
    shutil.copytree(ran / "artifacts", dest / "artifacts")
    return dest


def _profile() -> Any:
    return MATRIX.profile("default")


def test_gather_writes_the_shard_and_its_stamp_and_is_idempotent(ran: Path, tmp_path: Path) -> None:
    out = _export_copy(ran, tmp_path / "build")
    uploaded = ran / "shards"
    lines: list[str] = []
    (written,) = gather(out, _profile(), [uploaded], echo=lines.append)
    assert written == shard_path(out, NEWEST, "cpu")
    assert written.read_bytes() == shard_path(ran, NEWEST, "cpu").read_bytes()
    assert stamp_path(out, NEWEST, "cpu").read_bytes() == stamp_path(ran, NEWEST, "cpu").read_bytes()
    first = {p.name: p.read_bytes() for p in (out / "shards").iterdir()}
    gather(out, _profile(), [uploaded, uploaded / written.name], echo=lines.append)  # again, and the same file twice
    assert {p.name: p.read_bytes() for p in (out / "shards").iterdir()} == first
    assert lines[0] == f"gather: {written.name}: 5 cells"
    oldest = _profile().runtimes[0]  # a runtime of the profile that uploaded no shard: said, not invented
    assert any(line.startswith(f"gather: no whole shard for {oldest.id}-cpu.jsonl") for line in lines)


def _cells(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _write(path: Path, cells: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(cache.seal({k: v for k, v in c.items() if k != "checksum"}) + "\n" for c in cells))
    layout.seal(path, {})  # as a run job that ended writes it: the gather judges what it holds


def test_gather_refuses_a_shard_that_ran_other_artifacts(ran: Path, tmp_path: Path) -> None:
    """The export was redone with another tolerance for div_int_min (so another digest) after the run
    job ran: its cells do not describe this export."""
    out = _export_copy(ran, tmp_path / "build")
    record = out / "artifacts" / "div_int_min.torchscript.op17" / "export.json"
    data = json.loads(record.read_text())
    data["atol"] = 0.5
    record.write_text(json.dumps(data))
    with pytest.raises(HarnessError) as info:
        gather(out, _profile(), [ran / "shards"], echo=lambda _: None)
    line = str(info.value)
    assert line.startswith(f"gather: {shard_path(ran, NEWEST, 'cpu')}: cell div_int_min.torchscript.op17 [")
    assert "ran other artifacts than this export's" in line and line.endswith("rerun its run job on this export's artifacts")
    assert "\n" not in line
    assert not shard_path(out, NEWEST, "cpu").exists()  # nothing half-gathered


def test_gather_refuses_damaged_stray_and_conflicting_shards(ran: Path, tmp_path: Path) -> None:
    out = _export_copy(ran, tmp_path / "build")
    name = shard_path(ran, NEWEST, "cpu").name
    cells = _cells(shard_path(ran, NEWEST, "cpu"))

    damaged = tmp_path / "damaged" / name
    damaged.parent.mkdir()
    lines = shard_path(ran, NEWEST, "cpu").read_text().splitlines()
    lines[0] = lines[0].replace('"status": "pass"', '"status": "mismatch"').replace('"status":"pass"', '"status":"mismatch"')
    assert lines[0] != shard_path(ran, NEWEST, "cpu").read_text().splitlines()[0]
    damaged.write_text("\n".join(lines) + "\n")
    layout.seal(damaged, {})
    with pytest.raises(HarnessError, match=rf"^gather: {damaged}: 1 line\(s\) are cut short or fail their checksum; upload or"):
        gather(out, _profile(), [damaged], echo=lambda _: None)

    stray = tmp_path / "stray" / "ortgpu-1.31.1-cuda.jsonl"
    _write(stray, cells)
    with pytest.raises(HarnessError, match=rf"^gather: {stray} is not a shard of profile 'default'; gather with the --profile"):
        gather(out, _profile(), [stray], echo=lambda _: None)

    other = tmp_path / "other" / name  # another run of the same shard: one latency differs
    changed = [dict(c) for c in cells]
    timed = next(c for c in changed if c.get("latency"))
    timed["latency"] = {**timed["latency"], "median_ms": timed["latency"]["median_ms"] * 2}
    _write(other, changed)
    for order in ([ran / "shards", other], [other, ran / "shards"]):
        with pytest.raises(HarnessError, match=r"are two different runs of one shard; keep one of them$"):
            gather(out, _profile(), order, echo=lambda _: None)

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(HarnessError, match=r"^gather: no shards \(\*\.jsonl\) under .*empty; did the run jobs upload any\?$"):
        gather(out, _profile(), [empty], echo=lambda _: None)


def test_gather_refuses_a_shard_of_another_export_or_another_column(ran: Path, tmp_path: Path) -> None:
    """A shard whose every cell is of artifacts this export does not hold (another profile's opsets) would
    gather as an empty column; a shard renamed to another column holds that column's cells under a lie."""
    name = shard_path(ran, NEWEST, "cpu").name
    cells = _cells(shard_path(ran, NEWEST, "cpu"))
    out = _export_copy(ran, tmp_path / "build")
    foreign = tmp_path / "foreign" / name
    _write(foreign, [{**c, "opset": 99} for c in cells])
    with pytest.raises(HarnessError, match=r"none of its 5 cells is of an artifact of this export; gather it into the export"):
        gather(out, _profile(), [foreign], echo=lambda _: None)
    renamed = tmp_path / "renamed" / shard_path(ran, MATRIX.runtime("1.31.1"), "cpu").name
    _write(renamed, cells)
    with pytest.raises(HarnessError, match=rf"holds cells of {NEWEST.pin} cpu, not of onnxruntime==1.31.1 cpu as its name says"):
        gather(out, _profile(), [renamed], echo=lambda _: None)


def test_gather_depends_only_on_the_shards_it_is_given(ran: Path, tmp_path: Path) -> None:
    """Every copy must be sealed by its run job (a copy without its stamp is a job that did not finish), in
    any order; the seal comes along; a shard an earlier gather wrote, which this one is not given, is
    removed rather than reported as if this run had it."""
    out = _export_copy(ran, tmp_path / "build")
    unstamped = tmp_path / "unstamped"
    unstamped.mkdir()
    shutil.copy(shard_path(ran, NEWEST, "cpu"), unstamped)
    for order in ([ran / "shards", unstamped], [unstamped, ran / "shards"]):
        with pytest.raises(HarnessError, match=r"has no seal beside it \(ort-.*-cpu.stamp.json\): its run job did not finish"):
            gather(out, _profile(), order, echo=lambda _: None)
    shutil.copy(stamp_path(ran, NEWEST, "cpu"), unstamped)
    for order in ([ran / "shards", unstamped], [unstamped, ran / "shards"]):
        gather(out, _profile(), order, echo=lambda _: None)
        assert stamp_path(out, NEWEST, "cpu").read_bytes() == stamp_path(ran, NEWEST, "cpu").read_bytes()
    earlier = shard_path(out, MATRIX.runtime("1.31.1"), "cpu")
    shutil.copy(shard_path(ran, NEWEST, "cpu"), earlier)  # as if an earlier gather had written it
    gather(out, _profile(), [ran / "shards"], echo=lambda _: None)
    assert not earlier.exists()
    kept = sorted(p.name for p in (out / "shards").iterdir())
    assert kept == [shard_path(ran, NEWEST, "cpu").name, stamp_path(ran, NEWEST, "cpu").name]


def test_gather_on_the_command_line_says_one_line_and_exits_2(ran: Path, tmp_path: Path) -> None:
    out = _export_copy(ran, tmp_path / "build")
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "gather", "--out", str(out), str(tmp_path / "nowhere")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"harness: error: gather: {tmp_path / 'nowhere'}: no such file or folder\n"
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "gather", "--out", str(out), str(ran / "shards")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.endswith(f"gathered 1 shards into {out / 'shards'}\n")
    assert [CellRecord.from_dict(c).status for c in _cells(shard_path(out, NEWEST, "cpu"))].count(Status.PASS) >= 1


def test_page_columns_tell_the_packages_apart_and_reproduce_each_its_own_way(tmp_path: Path) -> None:
    """onnxruntime 1.31.1's CPU column and onnxruntime-gpu 1.31.1's are two columns with two labels; a GPU
    column's reproducer names its provider, a native TensorRT column's runs Polygraphy's TensorRT runner."""
    from harness.publish import page
    from harness.store.layout import load_artifacts

    out = tmp_path / "build"
    fault_corpus(out, only=["add_one"])
    (rec,) = load_artifacts(out)
    pins = [("onnxruntime==1.31.1", "cpu"), ("onnxruntime-gpu==1.31.1", "cpu"), ("onnxruntime-gpu==1.31.1", "tensorrt-fp16")]
    pins.append((TRT.pin, "tensorrt-fp16"))
    cells = [rec.cell(pin, provider, {}, probe="example") for pin, provider in pins]
    legend = {s: s.value for s in Status}
    data = page.data(cells, [rec], repros={}, constraints={}, environment={}, legend=legend, counts={})
    columns = {(c["runtime"], c["provider"]): c for c in data["columns"]}
    assert [c["label"] for c in data["columns"]] == [
        "1.31.1 cpu",
        "gpu-1.31.1 cpu",
        "gpu-1.31.1 tensorrt-fp16",
        f"trt-{TRT.version} tensorrt-fp16",
    ]
    assert columns[("onnxruntime==1.31.1", "cpu")]["reproduce"] == "python results/{repro}/repro.py"
    assert columns[("onnxruntime-gpu==1.31.1", "tensorrt-fp16")]["reproduce"] == (
        "python results/{repro}/repro.py --provider tensorrt-fp16"
    )
    native = columns[(TRT.pin, "tensorrt-fp16")]
    assert native["reproduce"] == "polygraphy run results/{repro}/model.onnx --trt --fp16"
    assert native["install"] == f'"{TRT.pin}" "polygraphy"'
