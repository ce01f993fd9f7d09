"""End to end: real nox + uv sessions over two real onnxruntime versions.

`nox -s matrix -- --profile smoke` exports with torch 2.13 in its own env,
runs onnxruntime 1.17.3 (numpy<2, IR version <= 9) and the newest in two
more envs holding no torch, and writes the report. The assertions are what
the articles and the runtimes promise.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.matrix import Profile, load
from harness.publish.report import build as build_report

ROOT = Path(__file__).resolve().parent.parent
CASES = "frozen_batch,frozen_batch_fixed,data_dependent_branch,data_dependent_branch_fixed,fft_rfft,fft_rfft_matmul,my_classifier"
OUTPUT: dict[str, str] = {}
NEWEST = load(ROOT / "matrix.toml").profile("smoke").runtimes[-1]


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="module")
def smoke(build: Path) -> dict[tuple[str, str, int, str, str], dict]:  # type: ignore[type-arg]
    tmp = build
    proc = subprocess.run(_matrix_cmd(tmp), cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    OUTPUT["stdout"] = proc.stdout + proc.stderr
    cells = [json.loads(line) for line in (tmp / "results" / "matrix.jsonl").read_text().splitlines()]
    assert (tmp / "results" / "README.md").is_file()
    return {(c["case"], c["exporter"], c["opset"], c["runtime"].split("==")[1], c["probe"]): c for c in cells}


def _matrix_cmd(tmp: Path, profile: str = "smoke", results: str = "results") -> list[str]:
    """`nox -s matrix` on the smoke profile, a few cases and the README's example corpus, into ``tmp``."""
    nox = shutil.which("nox") or str(Path(sys.executable).parent / "nox")
    return [
        nox,
        "-f",
        str(ROOT / "noxfile.py"),
        "-s",
        "matrix",
        "--",
        "--profile",
        profile,
        "--cases",
        CASES,
        "--corpus",
        "examples/my_models.py",
        "--out",
        str(tmp / "build"),
        "--results",
        str(tmp / results),
    ]


pytestmark = pytest.mark.e2e


def statuses(cells: dict, case: str, exporter: str, runtime: str) -> set[str]:  # type: ignore[type-arg]
    return {c["status"] for (k, e, _, r, _), c in cells.items() if (k, e, r) == (case, exporter, runtime)}


def test_both_runtimes_ran_in_their_own_envs(smoke: dict, build: Path) -> None:  # type: ignore[type-arg]
    runtimes = {k[3] for k in smoke}
    assert runtimes == {"1.17.3", NEWEST.version}
    env = json.loads((build / "results" / "environment.json").read_text())
    for pin, measured in env["runtimes"].items():
        assert measured["onnxruntime"] == pin.split("==")[1]  # what the env really holds, not what was asked
    assert env["runtimes"]["onnxruntime==1.17.3"]["numpy"].startswith("1."), "1.17.3 needs numpy<2 (constraints)"
    assert env["export"]["torch"] == "2.13.0+cpu"  # the CPU build, never CUDA
    # the runtime envs hold no torch
    for env in ("run-ort-1-17-3", f"run-ort-{NEWEST.version.replace('.', '-')}"):
        py = ROOT / ".nox" / env / "bin" / "python"
        assert subprocess.run([str(py), "-c", "import torch"], capture_output=True).returncode != 0


def test_frozen_batch_fails_at_batch_8(smoke: dict) -> None:  # type: ignore[type-arg]
    for rt in ("1.17.3", NEWEST.version):
        for op in (17, 18):
            cell = smoke[("frozen_batch", "torchscript", op, rt, "batch8")]
            assert cell["status"] == "run-fail"
            assert "Got invalid dimensions" in cell["error_line"]
            assert smoke[("frozen_batch", "torchscript", op, rt, "example")]["status"] == "pass"
    assert smoke[("frozen_batch", "dynamo", 18, NEWEST.version, "batch8")]["status"] == "run-fail"


def test_data_dependent_branch_mismatch_on_negative_inputs(smoke: dict) -> None:  # type: ignore[type-arg]
    for rt in ("1.17.3", NEWEST.version):
        assert smoke[("data_dependent_branch", "torchscript", 17, rt, "negative")]["status"] == "mismatch"
        assert smoke[("data_dependent_branch", "torchscript", 17, rt, "example")]["status"] == "pass"


def test_fft_rfft_is_an_export_fail_for_torchscript(smoke: dict) -> None:  # type: ignore[type-arg]
    cell = smoke[("fft_rfft", "torchscript", 18, NEWEST.version, "example")]
    assert cell["status"] == "export-fail" and "aten::fft_rfft" in cell["error_line"]
    assert smoke[("fft_rfft", "dynamo", 18, NEWEST.version, "example")]["status"] == "pass"


def test_ir_version_10_is_a_load_fail_on_1_17_with_the_runtime_message(smoke: dict, build: Path) -> None:  # type: ignore[type-arg]
    dynamo_old = [c for k, c in smoke.items() if k[1] == "dynamo" and k[3] == "1.17.3" and c.get("ir_version") == 10]
    assert dynamo_old
    for c in dynamo_old:
        assert c["status"] == "load-fail"
        assert "Unsupported model IR version: 10, max supported IR version: 9" in c["error_line"]
    shard = build / "build" / "shards" / "ort-1.17.3-cpu.jsonl"
    full = [json.loads(line) for line in shard.read_text().splitlines()]
    for c in full:  # the runtime's own, full message is kept in the shard
        if c["exporter"] == "dynamo" and c.get("ir_version") == 10:
            assert c["error"].startswith("[ONNXRuntimeError]") and "model.onnx failed:" in c["error"]


def test_each_runtime_s_frontier_is_measured_in_its_own_env(smoke: dict, build: Path) -> None:  # type: ignore[type-arg]
    """The run sessions load the export's one-node models: 1.17.3 loads up to IR 9 / opset 20, as onnxruntime
    documents it, and refuses IR 10 in its own words; the report publishes both and explains the refusals."""
    loads = json.loads((build / "results" / "frontier.json").read_text())
    assert set(loads) == {"onnxruntime==1.17.3", NEWEST.pin}
    old, new = loads["onnxruntime==1.17.3"], loads[NEWEST.pin]
    assert (old["version"], old["max_ir"], old["max_opset"]) == ("1.17.3", 9, 20)
    assert any("Unsupported model IR version: 10, max supported IR version: 9" in r["text"] for r in old["reasons"])
    assert new["version"] == NEWEST.version and new["max_ir"] >= 10 and new["max_opset"] >= 21
    for c in smoke.values():  # every cell that loaded lies inside its runtime's frontier
        f = loads[c["runtime"]]
        if c["status"] in ("pass", "mismatch", "run-fail"):
            assert c["ir_version"] <= f["max_ir"] and (c["opset_actual"] or c["opset"]) <= f["max_opset"]
    readme = (build / "results" / "README.md").read_text()
    assert "## What each runtime loads" in readme and "| onnxruntime==1.17.3 |            9 |              20 |" in readme
    assert "IR≤9 op≤20" in (build / "results" / "index.html").read_text()
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "recommend", "--runtime", "1.17.3", "--all", "--results", str(build / "results")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "1.17.3 loads up to IR 9 / opset 20 (measured)" in proc.stdout
    # Nothing dynamo writes (IR 10) loads there: one line that says why, not a refusal per case and opset.
    assert "dynamo: none: dynamo writes IR 10; 1.17.3 loads up to IR 9" in proc.stdout
    assert "nothing loads here (dynamo writes IR 10; 1.17.3 loads up to IR 9)" in proc.stdout


def test_fixed_twins_pass(smoke: dict) -> None:  # type: ignore[type-arg]
    for case in ("frozen_batch_fixed", "data_dependent_branch_fixed", "fft_rfft_matmul"):
        for rt in ("1.17.3", NEWEST.version):
            assert statuses(smoke, case, "torchscript", rt) == {"pass"}, case
        assert {c["status"] for k, c in smoke.items() if k[:2] == (case, "dynamo") and k[2] == 18 and k[3] == NEWEST.version} == {
            "pass"
        }


def test_every_failing_cell_says_whose_fault_it_is(smoke: dict, build: Path) -> None:  # type: ignore[type-arg]
    """The spec stage ran between the export and the runs: every failing cell carries a fault derived from it, the
    frozen batch is the file's (its signature refuses batch 8), and the README counts them."""
    from harness.answer import fault

    failing = [c for c in smoke.values() if c["status"] in {s.value for s in fault.FAULTED}]
    assert failing and all(c.get("fault") in fault.KINDS and c.get("fault_why") for c in failing)
    frozen = [c for k, c in smoke.items() if k[:2] == ("frozen_batch", "torchscript") and c["status"] == "run-fail"]
    assert frozen and {c["fault"] for c in frozen} == {"exporter"}
    assert all("froze" in c["fault_why"] for c in frozen)
    assert (build / "build" / "spec.json").is_file()
    assert "## Whose fault" in (build / "results" / "README.md").read_text()


def test_a_rerun_with_nothing_changed_starts_no_session(smoke: dict, build: Path) -> None:  # type: ignore[type-arg]
    """The plan finds every stage up to date: no environment starts, no export, no cell, and
    results/ stays byte for byte what the first run wrote."""
    before = {p: p.read_bytes() for p in (build / "results").rglob("*") if p.is_file()}
    proc = subprocess.run(_matrix_cmd(build), cwd=ROOT, capture_output=True, text=True, timeout=600)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-3000:]
    assert "export: up to date" in said and "run: all 2 runtimes: up to date" in said and "report: up to date" in said
    assert "spec: up to date" in said and "nothing to do" in said
    assert "Running session export" not in said and "Running session run(" not in said and "Running session report" not in said
    assert "Running session spec" not in said
    assert {p: p.read_bytes() for p in (build / "results").rglob("*") if p.is_file()} == before


def test_a_broken_runtime_env_is_env_error_not_a_crash(smoke: dict, build: Path, tmp_path: Path) -> None:  # type: ignore[type-arg]
    """onnxruntime 1.18.0 does not declare numpy<2 and fails to import beside numpy 2: a real broken env."""
    matrix = tmp_path / "matrix.toml"
    text = (ROOT / "matrix.toml").read_text()
    matrix.write_text(text.replace("[profiles.default]", '[[runtimes]]\npin = "onnxruntime==1.18.0"\n\n[profiles.default]'))
    venv = tmp_path / "venv"
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    subprocess.run([uv, "venv", "-q", "-p", sys.executable, str(venv)], check=True)
    py = str(venv / "bin" / "python")
    subprocess.run([uv, "pip", "install", "-q", "-p", py, "onnxruntime==1.18.0", "numpy>=2"], check=True)
    subprocess.run([uv, "pip", "install", "-q", "-p", py, "--no-deps", "-e", str(ROOT)], check=True)
    proc = subprocess.run(
        [
            py,
            "-m",
            "harness",
            "run",
            "--matrix",
            str(matrix),
            "--profile",
            "smoke",
            "--out",
            str(build / "build"),
            "--runtime",
            "onnxruntime==1.18.0",
            "--no-latency",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    shard = build / "build" / "shards" / "ort-1.18.0-cpu.jsonl"
    cells = [json.loads(line) for line in shard.read_text().splitlines()]
    assert len(cells) == 1, "one record for the broken runtime, not one per cell"
    assert (cells[0]["status"], cells[0]["case"], cells[0]["probe"]) == ("env-error", "*", "*")
    assert cells[0]["error_line"] == (
        "onnxruntime fails to import: AttributeError: _ARRAY_API not found / ImportError"
        ' (built for numpy 1.x: add constraints = ["numpy<2"] to its [[runtimes]] entry)'
    )
    # The report spreads the one record over its column and publishes it once.
    broken = load(matrix)
    profile = Profile(
        "broken", (broken.runtime("1.17.3"), broken.runtime("1.18.0")), ("cpu",), ("torchscript", "dynamo"), (17, 18)
    )
    results = tmp_path / "results"
    build_report(build / "build", results, profile=profile)
    published = [json.loads(line) for line in (results / "matrix.jsonl").read_text().splitlines()]
    assert [c["case"] for c in published if c["runtime"] == "onnxruntime==1.18.0"] == ["*"]
    readme = (results / "README.md").read_text()
    per_case = "".join(p.read_text() for p in sorted((results / "cases").glob("*.md")))
    tables = [block.split("\n\n")[1] for block in per_case.split("Across runtimes and providers:")[1:]]
    rows = [r for t in tables for r in t.splitlines()[2:]]
    assert rows and all(r.rstrip(" |").endswith("!") for r in rows), "every row's 1.18.0 column shows the env-error"
    summary = readme.split("## Summary per runtime")[1].split("<details>")[0]
    broken_row = next(r for r in summary.splitlines() if r.startswith("| 1.18.0"))
    assert all(c.strip() == "! env-error" for c in broken_row.strip(" |").split("|")[1:]), broken_row
    assert "- **1.18.0** not measured here: ! env-error: onnxruntime fails to import" in readme


def test_diff_between_two_real_runs_with_a_changed_runtime_pin(smoke: dict, build: Path, tmp_path: Path) -> None:  # type: ignore[type-arg]
    """The smoke run again with its newest runtime's pin changed to 1.16.3 (IR version ≤ 9): `harness diff`
    pairs the two pins, lists the dynamo cells that stopped loading as regressions, and exits 1."""
    matrix = load(ROOT / "matrix.toml")
    old_rt, new_rt = NEWEST, matrix.runtime("1.16.3")
    venv = tmp_path / "venv"
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    subprocess.run([uv, "venv", "-q", "-p", sys.executable, str(venv)], check=True)
    py = str(venv / "bin" / "python")
    subprocess.run([uv, "pip", "install", "-q", "-p", py, *new_rt.requirements], check=True)
    subprocess.run([uv, "pip", "install", "-q", "-p", py, "--no-deps", "-e", str(ROOT)], check=True)
    run = [
        py,
        "-m",
        "harness",
        "run",
        "--profile",
        "smoke",
        "--out",
        str(build / "build"),
        "--runtime",
        new_rt.pin,
        "--no-latency",
    ]
    proc = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    smoke_profile = matrix.profile("smoke")
    changed = Profile("smoke-pin", (matrix.runtime("1.17.3"), new_rt), ("cpu",), smoke_profile.exporters, smoke_profile.opsets)
    build_report(build / "build", tmp_path / "results", profile=changed)

    old, new = build / "results" / "matrix.jsonl", tmp_path / "results" / "matrix.jsonl"
    forward = subprocess.run([sys.executable, "-m", "harness", "diff", str(old), str(new), "--limit", "0"],
                             cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert forward.returncode == 1, forward.stdout + forward.stderr
    out = forward.stdout
    assert f"runtime pin changed: {old_rt.pin} → {new_rt.pin}" in out
    regressions = out.split("Regressions")[1].split("\n\n")[0]
    assert re.search(
        rf"fft_rfft dynamo op18 {re.escape(old_rt.pin)} → 1\.16\.3 cpu \[[a-z0-9_,]*example[a-z0-9_,]*\]: pass → load-fail: ",
        regressions,
    )
    assert "Unsupported model IR version: 10, max supported IR version: 9" in regressions
    assert "onnxruntime==1.17.3" not in regressions, "the unchanged runtime's cells did not change"
    backward = subprocess.run([sys.executable, "-m", "harness", "diff", str(new), str(old), "--limit", "0"],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert backward.returncode == 0, "going back to the newest runtime regresses nothing"
    fixes = backward.stdout.split("Fixes")[1]
    assert re.search(
        rf"fft_rfft dynamo op18 {re.escape(new_rt.pin)} → {re.escape(old_rt.version)} "
        r"cpu \[[a-z0-9_,]*example[a-z0-9_,]*\]: load-fail → pass",
        fixes,
    )


def test_the_readme_user_corpus_example(smoke: dict, build: Path) -> None:  # type: ignore[type-arg]
    """`--corpus examples/my_models.py`: its probe file is a probe, the report ends with its rows, and
    `harness recommend --corpus examples/my_models.py` answers for it from that report."""
    mine = {k: c for k, c in smoke.items() if k[0] == "my_classifier"}
    assert {k[4] for k in mine} == {"example", "batch5_odd", "gradients", "batch3"}
    assert {c["status"] for k, c in mine.items() if k[3] == NEWEST.version} == {"pass"}
    said = OUTPUT["stdout"]
    assert "Your models (examples/my_models.py): the exporter and opset to ship on each runtime" in said
    row = next(line for line in said.split("Your models")[1].splitlines() if line.startswith("| my_classifier "))
    old, new = (cell.strip() for cell in row.strip(" |").split("|")[1:])
    assert old == "torchscript 18", row  # 1.17.3 refuses dynamo's IR version 10
    assert new in ("torchscript 18", "dynamo 18"), row
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "recommend", "--runtime", NEWEST.pin, "--corpus", "examples/my_models.py",
         "--results", str(build / "results")],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{NEWEST.pin} on cpu, 1 case from examples/my_models.py (my_classifier):" in proc.stdout
    assert "recommended: " in proc.stdout and "the 1 selected case passes every probe" in proc.stdout


def _nox_python(runtime_id: str) -> Path:
    """The interpreter of the smoke run's `run(<id>)` session (nox names its folder run-ort-1-17-3)."""
    return ROOT / ".nox" / f"run-{runtime_id.replace('.', '-')}" / "bin" / "python"


def _without_timing(path: Path) -> list[dict]:  # type: ignore[type-arg]
    """Published rows without what two runs measure differently (latency)."""
    return [{k: v for k, v in json.loads(line).items() if k != "latency"} for line in path.read_text().splitlines()]


def test_separate_shard_processes_gathered_equal_the_single_run(smoke: dict, build: Path, tmp_path: Path) -> None:  # type: ignore[type-arg]
    """The nightly's shape: each runtime runs in its own process on its own copy of the export (a run
    job), the shards are gathered in either order (twice), and the report equals the single run's."""
    profile = load(ROOT / "matrix.toml").profile("smoke")
    export = build / "build"

    def export_copy(dest: Path) -> Path:
        dest.mkdir(parents=True)
        for name in ("manifest.json", "export.stamp.json", "spec.json", "spec.stamp.json"):  # as the export job uploads
            shutil.copy(export / name, dest / name)
        shutil.copytree(export / "artifacts", dest / "artifacts")
        shutil.copytree(export / "frontier" / "models", dest / "frontier" / "models")  # the export job uploads them too
        return dest

    runners = {rt.id: export_copy(tmp_path / f"runner-{rt.id}" / "build") for rt in profile.runtimes}
    args = ["-m", "harness", "run", "--matrix", str(ROOT / "matrix.toml"), "--profile", "smoke"]
    procs = [  # side by side, as run jobs are
        subprocess.Popen(
            [str(_nox_python(rt.id)), *args, "--out", str(runners[rt.id]), "--runtime", rt.pin],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rt in profile.runtimes
    ]
    for proc in procs:
        said, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, said[-3000:]
    uploads = [runners[rt.id] for rt in profile.runtimes]  # each job's shards/ and frontier/<id>.json, as it uploads them

    gathered = {}
    for name, order in (("forward", uploads), ("backward", uploads[::-1])):
        out = export_copy(tmp_path / name / "build")
        cmd = [sys.executable, "-m", "harness", "gather", "--profile", "smoke", "--out", str(out), *map(str, order)]
        for _ in range(2):  # idempotent: a second gather writes the same bytes
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
            assert proc.returncode == 0, proc.stderr
        gathered[name] = out
    shards = {name: {p.name: p.read_bytes() for p in (out / "shards").iterdir()} for name, out in gathered.items()}
    assert shards["forward"] == shards["backward"]
    assert sorted(shards["forward"]) == sorted(
        f"{rt.id}-cpu{ext}" for rt in profile.runtimes for ext in (".jsonl", ".stamp.json")
    )

    results = tmp_path / "results"
    build_report(gathered["forward"], results, profile=profile)
    assert _without_timing(results / "matrix.jsonl") == _without_timing(build / "results" / "matrix.jsonl")
    assert (results / "cases.json").read_bytes() == (build / "results" / "cases.json").read_bytes()
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "diff", str(build / "results"), str(results)], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "no cell changed status" in proc.stdout, proc.stdout[-2000:]


def test_a_matrix_with_gpu_runtimes_completes_here_with_every_gpu_cell_unavailable(
    smoke: dict,  # type: ignore[type-arg]
    build: Path,
    tmp_path: Path,
) -> None:
    """`nox -s matrix` on the smoke profile plus onnxruntime-gpu (the real wheel) and native TensorRT, on
    this machine without a GPU: it succeeds; every CUDA and TensorRT cell is `unavailable` with the
    loader's or the importer's reason; the CPU cells are the smoke run's, unchanged."""
    out = tmp_path / "build"
    shutil.copytree(build / "build", out)
    cmd = _matrix_cmd(tmp_path, "smoke-gpu", "results-gpu")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-3000:]
    assert "no NVIDIA driver (libcuda.so.1 not found): installing numpy only, not tensorrt==10.13.3.9 pycuda==" in said
    rows = [json.loads(line) for line in (tmp_path / "results-gpu" / "matrix.jsonl").read_text().splitlines()]
    cpu = [r for r in rows if r["runtime"].startswith("onnxruntime==")]
    assert cpu == [json.loads(line) for line in (build / "results" / "matrix.jsonl").read_text().splitlines()]
    gpu = {(r["runtime"], r["provider"]): r for r in rows if r not in cpu and r["provider"] != "cpu"}
    assert sorted(gpu) == [
        ("onnxruntime-gpu==1.31.1", "cuda"),
        ("onnxruntime-gpu==1.31.1", "tensorrt"),
        ("onnxruntime-gpu==1.31.1", "tensorrt-fp16"),
        ("tensorrt==10.13.3.9", "tensorrt"),
        ("tensorrt==10.13.3.9", "tensorrt-fp16"),
    ]
    for (runtime, _), row in gpu.items():
        assert (row["case"], row["status"], row["error_class"]) == ("*", "unavailable", "ProviderUnavailable"), row
        assert "no NVIDIA driver (libcuda.so.1 not found)" in row["error_line"]
        if runtime.startswith("tensorrt"):
            assert row["error_line"].startswith("TensorRT is not importable (ModuleNotFoundError: No module named 'tensorrt')")
        else:
            assert "cannot load: libcublas" in row["error_line"]
    gpu_cpu = [r for r in rows if r["runtime"] == "onnxruntime-gpu==1.31.1" and r["provider"] == "cpu"]
    assert gpu_cpu and {r["status"] for r in gpu_cpu if r["case"] == "frozen_batch_fixed"} == {"pass"}
    readme = (tmp_path / "results-gpu" / "README.md").read_text()
    assert "- **trt-10.13.3.9 tensorrt-fp16** not measured here: · unavailable: TensorRT is not importable" in readme
    # Claims are checked against the newest CPU onnxruntime, as in the smoke run: TensorRT 10.x is not "newer".
    news = "not shown in this run"
    pages = {p.name: p.read_text() for p in (tmp_path / "results-gpu" / "cases").glob("*.md")}
    cpu_pages = {p.name: p.read_text() for p in (build / "results" / "cases").glob("*.md")}
    assert pages and sum(t.count(news) for t in pages.values()) == sum(t.count(news) for t in cpu_pages.values())
    assert not any("tensorrt==10.13.3.9" in t.split("Across runtimes")[0] for t in pages.values())


def test_the_second_reference_script_reproduces_torchs_reference_on_the_cpu(smoke: dict, build: Path) -> None:  # type: ignore[type-arg]
    """bench/cuda_reference.py rebuilds each case and runs it on the probe inputs of reference.npz; on the
    CPU (``--device cpu``) it must give back the export's own reference for every probe, so on a GPU a
    difference is the GPU's. Without CUDA its default device refuses with one line."""
    script = str(ROOT / "bench" / "cuda_reference.py")
    args = [sys.executable, script, "--out", str(build / "build"), "--corpus", "examples/my_models.py"]
    proc = subprocess.run([*args, "--device", "cpu"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in (build / "build" / "cuda_reference.jsonl").read_text().splitlines()]
    assert {r["case"] for r in rows} == set(CASES.split(","))
    assert rows and {r["status"] for r in rows} == {"pass"}, [r for r in rows if r["status"] != "pass"]
    import torch

    if not torch.cuda.is_available():
        proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 2 and proc.stderr.strip().endswith("sees no CUDA device; nothing to compare")


def test_reporting_a_run_again_keeps_its_wall_time(smoke: dict, build: Path, tmp_path: Path) -> None:  # type: ignore[type-arg]
    """A report redone on the same shards (its code changed, nothing else) is the same run: one history
    line, and the wall time the run took, not the seconds the second report did."""
    results = tmp_path / "results"
    shutil.copytree(build / "results", results)
    (before,) = [json.loads(line) for line in (results / "history.jsonl").read_text().splitlines()]
    assert before["wall_seconds"] and before["wall_seconds"] > 1
    build_report(build / "build", results, profile=load(ROOT / "matrix.toml").profile("smoke"), wall=0.5)
    (after,) = [json.loads(line) for line in (results / "history.jsonl").read_text().splitlines()]
    assert after == before
    assert f"wall time {before['wall_seconds']:.0f} s" in (results / "README.md").read_text()
