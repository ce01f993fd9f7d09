"""Never green by accident: onnxruntime-gpu on this machine, which has no GPU.

onnxruntime-gpu installs anywhere, lists CUDA and TensorRT among its
available providers, and when their libraries do not load it quietly runs the
session on the CPU. These tests install the real onnxruntime-gpu wheel into a
real environment (uv) and run the real run stage there: every CUDA and
TensorRT cell must come out `unavailable`, with the loader's own reason, and
never `pass`. No GPU is faked: the machine simply has none, as CI's has none.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from harness.core.records import CellRecord, Status
from tests.artifacts import fault_corpus, runtime_env

ROOT = Path(__file__).resolve().parent.parent
GPU = "1.31.1"  # the newest onnxruntime-gpu with a Python 3.11 wheel (CUDA 13, cuDNN 9)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def gpu_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding onnxruntime-gpu, numpy and the harness (no torch), as a `run` session would."""
    return runtime_env(tmp_path_factory.mktemp("ortgpu"), f"onnxruntime-gpu=={GPU}", "numpy")


@pytest.fixture(scope="module")
def shards(gpu_env: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[CellRecord]]:
    tmp = tmp_path_factory.mktemp("gpu")
    out = tmp / "build"
    fault_corpus(out, only=["add_one", "div_int_min"])
    matrix = tmp / "matrix.toml"
    text = (ROOT / "matrix.toml").read_text()
    profile = f'[profiles.gpu-test]\nruntimes = ["onnxruntime-gpu=={GPU}"]\nproviders = ["cpu", "cuda", "tensorrt"]\n'
    profile += 'precisions = ["fp32", "fp16"]\nexporters = ["torchscript"]\nopsets = [17]\n\n'
    matrix.write_text(text.replace("[profiles.default]", f"{profile}[profiles.default]"))
    cmd = [str(gpu_env), "-m", "harness", "run", "--matrix", str(matrix), "--profile", "gpu-test", "--out", str(out)]
    proc = subprocess.run([*cmd, "--runtime", f"onnxruntime-gpu=={GPU}"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    found = {}
    for provider in ("cpu", "cuda", "tensorrt", "tensorrt-fp16"):
        path = out / "shards" / f"ortgpu-{GPU}-{provider}.jsonl"
        found[provider] = [CellRecord.from_dict(json.loads(line)) for line in path.read_text().splitlines()]
    found["out"] = out  # type: ignore[assignment]
    return found


def test_cuda_and_tensorrt_are_unavailable_with_the_loaders_reason(shards: dict[str, list[CellRecord]]) -> None:
    for provider, ep, library in (
        ("cuda", "CUDAExecutionProvider", "libcublasLt.so.13"),
        ("tensorrt", "TensorrtExecutionProvider", "libcublas.so.13"),
        ("tensorrt-fp16", "TensorrtExecutionProvider", "libcublas.so.13"),  # the precision axis: a column of its own
    ):
        cells = shards[provider]
        assert [c.status for c in cells] == [Status.UNAVAILABLE]  # one record for the whole column
        (cell,) = cells
        assert cell.runtime_wide and cell.error_class == "ProviderUnavailable"
        assert cell.error_line is not None
        assert cell.error_line.startswith(
            f"{ep} is listed by onnxruntime-gpu {GPU} but cannot load: {library}: cannot open shared object"
        )
        assert "no NVIDIA driver (libcuda.so.1 not found)" in cell.error_line


def test_cpu_cells_of_the_gpu_package_run_and_record_their_placement(shards: dict[str, list[CellRecord]]) -> None:
    cells = {(c.case, c.probe): c for c in shards["cpu"]}
    assert cells[("add_one", "example")].status is Status.PASS
    assert cells[("div_int_min", "boom")].status is Status.CRASH
    for c in cells.values():
        if c.status is Status.PASS:
            assert c.providers_used == ("CPUExecutionProvider",)
            assert c.placement == {"CPUExecutionProvider": 1}  # one node (Add or Div), all on the CPU
            assert c.env["package"] == "onnxruntime-gpu" and c.env["onnxruntime"] == GPU


def test_a_session_that_drops_cuda_is_unavailable_not_a_pass(gpu_env: Path, shards: dict[str, list[CellRecord]]) -> None:
    """Past the run stage's check, the backend itself: onnxruntime-gpu creates a CUDA session here,
    logs an error and runs it on the CPU; the cell must say so."""
    art = Path(shards["out"]) / "artifacts" / "add_one.torchscript.op17"  # type: ignore[arg-type]
    script = (
        "import json, sys; from harness.run.backends import entry, messages\n"
        "entry.init_worker('harness.run.backends.onnxruntime:OnnxRuntime')\n"
        "task = messages.CellTask(sys.argv[1], 'onnxruntime-gpu==1.31.1', 'cuda', '', {}, {}, ('example', 'second'), {})\n"
        "print(json.dumps([e.cell.to_dict() for e in entry.run_cells(task) if isinstance(e, messages.Cell)]))\n"
    )
    proc = subprocess.run([str(gpu_env), "-c", script, str(art)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cells = [CellRecord.from_dict(c) for c in json.loads(proc.stdout.strip().splitlines()[-1])]
    assert [c.probe for c in cells] == ["example", "second"]
    for c in cells:
        assert c.status is Status.UNAVAILABLE and c.error_class == "ProviderFellBack"
        assert c.error_line == "CUDAExecutionProvider was requested but the session fell back to CPUExecutionProvider"
        assert c.providers_used == ("CPUExecutionProvider",)


def test_matrix_toml_records_the_majors_the_real_wheel_links_against(gpu_env: Path) -> None:
    """matrix.toml's cuda / cudnn / tensorrt for the newest GPU runtime are what its provider libraries
    ask the loader for (their ELF NEEDED entries), read from the installed wheel."""
    from harness.config.matrix import load
    from harness.run.backends.gpu import majors, needed_libraries

    rt = load(ROOT / "matrix.toml").runtime(f"onnxruntime-gpu=={GPU}")
    (capi,) = gpu_env.parent.parent.glob("lib/python*/site-packages/onnxruntime/capi")
    cuda = majors(needed_libraries(capi / "libonnxruntime_providers_cuda.so"))
    trt = majors(needed_libraries(capi / "libonnxruntime_providers_tensorrt.so"))
    assert cuda["cuda"] == trt["cuda"] == rt.cuda
    assert trt["tensorrt"] == rt.tensorrt
    assert trt["cudnn"] == rt.cudnn  # the CUDA provider of 1.31 loads cuDNN at run time; TensorRT's links it
