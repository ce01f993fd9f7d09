"""The CPU as an axis: platform columns (``cpu@x86-64-v3``, ``cpu@aarch64``), their launchers and their proof.

The end-to-end tests run a real run stage under Debian's qemu-user (x86-64-v3 as Haswell, aarch64 with an arm64
userland built from Debian's packages and PyPI's aarch64 wheels): skipped, with the reason, where qemu-user 10 or
debootstrap is missing (``.ci/run`` installs them). The refused-column test needs no emulator: a launcher that runs
this machine's own CPU under another platform's name must be refused by what its process sees.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper

from harness.config import launchers, platforms, runtimes
from harness.config.matrix import load
from harness.core.errors import HarnessError
from harness.core.records import CellRecord, Status
from harness.numeric import across
from harness.store import layout
from tests.artifacts import add_one, write_artifact, write_manifest

ROOT = Path(__file__).resolve().parent.parent
MATRIX = load(ROOT / "matrix.toml")
V2 = dict.fromkeys(["SSE3", "SSSE3", "SSE41", "SSE42", "POPCNT"], True)
V3 = {**V2, **dict.fromkeys(["AVX", "AVX2", "FMA3", "F16C", "BMI", "BMI2", "LZCNT", "MOVBE"], True)}
V4 = {**V3, **dict.fromkeys(["AVX512F", "AVX512CD", "AVX512BW", "AVX512DQ", "AVX512VL"], True)}


def _host_level() -> str:
    machine, flags = launchers.host()
    return next((p.name for p in platforms.PLATFORMS if platforms.native(p.name, machine, flags)), machine)


def test_the_level_a_process_sees_is_the_highest_whose_features_it_has() -> None:
    assert platforms.level(V4, "x86_64") == "x86-64-v4"
    assert platforms.level(V3, "x86_64") == "x86-64-v3"
    assert platforms.level({**V3, "AVX512F": True}, "x86_64") == "x86-64-v3"  # AVX512F alone is not v4
    assert platforms.level(V2, "x86_64") == "x86-64-v2"
    assert platforms.level({"SSE3": True}, "x86_64") == "x86-64"
    assert platforms.level({"ASIMD": True, "NEON": True}, "aarch64") == "aarch64"
    assert platforms.level({}, "riscv64") == "riscv64"


def test_a_column_whose_process_saw_another_cpu_contradicts_its_name() -> None:
    assert platforms.contradiction("x86-64-v3", V3, "x86_64") is None
    assert platforms.contradiction("x86-64-v4", V4, "x86_64") is None
    assert platforms.contradiction("aarch64", {"ASIMD": True}, "aarch64") is None
    assert "sees AVX512F: it ran on x86-64-v4, not x86-64-v3" in str(platforms.contradiction("x86-64-v3", V4, "x86_64"))
    assert "sees AVX" in str(platforms.contradiction("x86-64-v2", V3, "x86_64"))
    assert "lacks AVX512F" in str(platforms.contradiction("x86-64-v4", V3, "x86_64"))
    assert "ran on x86_64, not aarch64" in str(platforms.contradiction("aarch64", V3, "x86_64"))
    assert "could not say" in str(platforms.contradiction("x86-64-v3", {}, "x86_64"))


def test_this_machine_is_a_platform_only_at_its_own_level() -> None:
    v3 = {"avx2", "fma", "f16c", "bmi2", "movbe", "sse4_2", "popcnt", "ssse3"}
    v4 = v3 | {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}
    assert platforms.native("x86-64-v4", "x86_64", v4) and not platforms.native("x86-64-v3", "x86_64", v4)
    assert platforms.native("x86-64-v3", "x86_64", v3) and not platforms.native("x86-64-v4", "x86_64", v3)
    assert platforms.native("aarch64", "aarch64", {"asimd"}) and not platforms.native("aarch64", "x86_64", v4)
    assert platforms.host_flags("processor: 0\nflags\t\t: fpu avx2 fma\n") == {"fpu", "avx2", "fma"}


def test_a_platform_column_is_the_cpu_provider_on_that_platform() -> None:
    assert platforms.split("cpu@x86-64-v3") == ("cpu", "x86-64-v3")
    assert platforms.split("tensorrt-fp16") == ("tensorrt-fp16", "")
    assert platforms.column("cpu", "aarch64") == "cpu@aarch64" and platforms.column("cpu", "") == "cpu"
    assert runtimes.split_column("cpu@x86-64-v3") == ("cpu", "fp32")
    assert runtimes.provider("cpu@aarch64").ep == "CPUExecutionProvider"
    hardware = MATRIX.profile("hardware")
    assert hardware.platforms == ("x86-64-v4", "x86-64-v3", "x86-64-v2", "aarch64")
    for rt in hardware.runtimes:
        assert hardware.columns(rt) == tuple(f"cpu@{p}" for p in hardware.platforms)
    assert MATRIX.profile("default").columns(MATRIX.runtime("1.32.0")) == ("cpu",)  # the plain column: this machine


GOOD = (ROOT / "matrix.toml").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("line", "pattern"),
    [
        ('platforms = ["x86-64-v5"]', r"profiles\.p\.platforms: unknown platform 'x86-64-v5' \(did you mean 'x86-64-v4'\?\)"),
        ('platforms = ["aarch64", "aarch64"]', r"profiles\.p\.platforms: lists 'aarch64' twice; remove the duplicate"),
        (
            'platforms = ["aarch64"]\nproviders = ["cpu", "openvino"]\nruntimes = ["onnxruntime-openvino==1.24.1"]',
            r"platforms apply to the cpu provider only",
        ),
        ('platforms = ["aarch64"]\nruntimes = ["onnxruntime-openvino==1.24.1"]', r"measured on plain onnxruntime only"),
    ],
)
def test_a_bad_platforms_key_is_one_line(tmp_path: Path, line: str, pattern: str) -> None:
    runtimes_line = 'runtimes = ["onnxruntime==1.32.0"]\n' if "runtimes" not in line else ""
    providers_line = 'providers = ["cpu"]\n' if "providers" not in line else ""
    text = GOOD + f"\n[profiles.p]\n{runtimes_line}{providers_line}{line}\nopsets = [18]\n"
    (tmp_path / "matrix.toml").write_text(text, encoding="utf-8")
    (tmp_path / "models").symlink_to(ROOT / "models")
    with pytest.raises(HarnessError) as info:
        load(tmp_path / "matrix.toml")
    assert "\n" not in str(info.value)
    assert __import__("re").search(pattern, str(info.value)), str(info.value)


def test_a_missing_emulator_is_one_line_naming_the_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on it: no qemu-user
    machine, flags = launchers.host()
    others = [p.name for p in platforms.PLATFORMS if p.qemu_cpu and not platforms.native(p.name, machine, flags)]
    assert others, "this machine is every platform?"
    for name in others:
        why = launchers.problem(name)
        assert why is not None and "qemu-" in why and "apt-get install -t bookworm-backports qemu-user" in why, why
    if not platforms.native("x86-64-v4", machine, flags):
        assert "runs natively only" in str(launchers.problem("x86-64-v4"))


def test_outputs_are_compared_exactly_where_integer_and_at_their_scale_where_float() -> None:
    f = np.array([1.0, -2.0, 4.0], np.float32)
    assert across._spread([f], [f]) == (0.0, 0.0)
    found = across._spread([f + np.float32(1e-3)], [f])
    assert found is not None and found[0] == pytest.approx(1e-3, rel=1e-3) and found[1] == pytest.approx(2.5e-4, rel=1e-3)
    assert across._spread([np.array([3, 5])], [np.array([3, 7])]) == (2.0, 2.0 / 7)
    nan = np.array([np.nan, 1.0])
    assert across._spread([nan], [nan]) == (0.0, 0.0)  # NaN where the other has NaN: the same answer
    assert across._spread([np.array([np.nan, 1.0])], [np.array([0.5, 1.0])])[0] == float("inf")  # type: ignore[index]
    assert across._spread([f], [f, f]) is None and across._spread([f[:2]], [f]) is None


def _matmul_softmax() -> object:
    """MatMul + Softmax with fixed weights: the graph whose sums differ by instruction set (AVX-512, AVX2, SSE4.2)."""
    rng = np.random.default_rng(7)
    w = helper.make_tensor("w", TensorProto.FLOAT, [64, 64], rng.standard_normal((64, 64)).astype(np.float32).ravel())
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Softmax", ["m"], ["y"], axis=-1)],
        "mm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _artifacts(out: Path) -> None:
    x = {"example": {"x": np.array([1.0, 2.0, 3.0], np.float32)}}
    mm_x = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    logits = mm_x.astype(np.float64) @ np.random.default_rng(7).standard_normal((64, 64))
    soft = np.exp(logits - logits.max(-1, keepdims=True))
    want = (soft / soft.sum(-1, keepdims=True)).astype(np.float32)
    ids = [
        write_artifact(out, "add", add_one(), x, {"example": [x["example"]["x"] + 1]}, opset=17),
        write_artifact(out, "wrong", add_one(), x, {"example": [x["example"]["x"] + 2]}, opset=17),
        write_artifact(out, "mm", _matmul_softmax(), {"example": {"x": mm_x}}, {"example": [want]}, opset=17),  # type: ignore[arg-type]
    ]
    write_manifest(out, [r.key.id for r in ids])


def _run(out: Path, column: str, python: list[str], launcher: str = "") -> subprocess.CompletedProcess[str]:
    rt = MATRIX.runtime("onnxruntime==1.32.0")
    cmd = [*python, "-m", "harness", "run", "--matrix", str(ROOT / "matrix.toml"), "--profile", "smoke-hardware"]
    cmd += ["--out", str(out), "--runtime", rt.pin, "--provider", column, *(["--launcher", launcher] if launcher else [])]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)


def _cells(out: Path, column: str) -> list[CellRecord]:
    rt = MATRIX.runtime("onnxruntime==1.32.0")
    text = layout.shard_path(out, rt, column).read_text(encoding="utf-8")
    return [CellRecord.from_dict(json.loads(line)) for line in text.splitlines()]


def _onnxruntime_here() -> None:
    ort = pytest.importorskip("onnxruntime")
    if ort.__version__ != "1.32.0":
        pytest.skip(f"this environment holds onnxruntime {ort.__version__}, not the smoke-hardware profile's 1.32.0")


@pytest.mark.slow
def test_a_launcher_that_runs_another_cpu_than_it_names_is_refused(tmp_path: Path) -> None:
    """No emulator: a launcher that runs this machine's own Python under the x86-64-v2 column's name. Its process sees
    AVX (every x86-64 from 2011 on), so the column is one env-error saying so: never published as x86-64-v2."""
    _onnxruntime_here()
    if platform.machine() != "x86_64" or _host_level() not in ("x86-64-v3", "x86-64-v4"):
        pytest.skip(f"needs an x86-64 machine with AVX (this one: {_host_level()})")
    out = tmp_path / "build"
    _artifacts(out)
    fake = tmp_path / "launcher" / "python"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    fake.chmod(0o755)
    (fake.parent / "launcher.json").write_text(json.dumps({"how": "emulated: a launcher that emulates nothing"}))
    done = _run(out, "cpu@x86-64-v2", [str(fake)], str(fake))
    assert done.returncode == 0, done.stdout + done.stderr
    (wide,) = _cells(out, "cpu@x86-64-v2")
    assert wide.runtime_wide and wide.status is Status.ENV_ERROR, wide
    line = str(wide.error_line)
    assert "the x86-64-v2 column's process sees AVX" in line and "not published as x86-64-v2" in line, line


def _qemu_or_skip(machine: str) -> None:
    numbers, words = launchers.qemu_version(machine)
    if numbers is None:
        pytest.skip(f"qemu-{machine} is not installed: {launchers.INSTALL}")
    if numbers < launchers.QEMU_MIN:
        pytest.skip(f"qemu-{machine} is {words}, older than 10.0: {launchers.INSTALL}")


@pytest.mark.e2e
def test_an_emulated_avx2_column_end_to_end(tmp_path: Path) -> None:
    """A real run stage as an AVX2 CPU under qemu-user, beside the native one: the verdicts, the instruction sets its
    process saw (AVX2, no AVX-512), how it ran, no latency, its outputs kept and compared across the two platforms."""
    _onnxruntime_here()
    _qemu_or_skip("x86_64")
    if _host_level() != "x86-64-v4":
        pytest.skip(f"the native column of smoke-hardware is x86-64-v4; this machine is {_host_level()}")
    out = tmp_path / "build"
    _artifacts(out)
    launch = launchers.prepare("x86-64-v3", [], sys.executable, tmp_path / "v3", source=ROOT, userland=tmp_path / "ul")
    assert launch.path is not None and launch.how.startswith("emulated: qemu-user ") and "-cpu Haswell" in launch.how
    native = _run(out, "cpu@x86-64-v4", [sys.executable])
    assert native.returncode == 0, native.stdout + native.stderr
    emulated = _run(out, "cpu@x86-64-v3", [str(launch.path)], str(launch.path))
    assert emulated.returncode == 0, emulated.stdout + emulated.stderr
    cells = {c.case: c for c in _cells(out, "cpu@x86-64-v3")}
    assert cells["add"].status is Status.PASS and cells["mm"].status is Status.PASS
    assert cells["wrong"].status is Status.MISMATCH and cells["wrong"].localization
    for c in cells.values():
        assert c.env["isa"] == "x86-64-v3" and c.env["how"] == launch.how and c.latency is None, c.env
        seen = set(c.env["isa_features"].split())
        assert {"AVX2", "FMA3"} <= seen and "AVX512F" not in seen, seen
    for c in _cells(out, "cpu@x86-64-v4"):
        assert c.env["isa"] == "x86-64-v4" and c.env["how"] == "native" and "AVX512F" in c.env["isa_features"].split()
    assert any(c.latency is not None for c in _cells(out, "cpu@x86-64-v4"))  # the native column is timed
    everything = [*_cells(out, "cpu@x86-64-v4"), *_cells(out, "cpu@x86-64-v3")]
    summary = across.measure(out, everything, ("x86-64-v4", "x86-64-v3"))
    for case in ("add", "wrong", "mm"):
        row = summary["cases"][case]
        assert row["compared"] == 1 and row["not_compared"] == 0, row
        assert row["spread"]["x86-64-v3"]["abs"] < 1e-5, row
    assert summary["cases"]["add"]["spread"]["x86-64-v3"]["abs"] == 0.0  # an addition is exact on any CPU
    assert summary["changes"] == []
    text = across.section(summary, ("x86-64-v4", "x86-64-v3"))
    assert "| onnxruntime==1.32.0 | x86-64-v3 | emulated: qemu-user" in text and "None: every cell has the same verdict" in text


@pytest.mark.e2e
def test_an_aarch64_column_end_to_end(tmp_path: Path) -> None:
    """ARM64 under qemu-aarch64: the userland from Debian's packages, PyPI's aarch64 wheels, a real run stage; built
    once (a second prepare builds nothing), its process on aarch64 with NEON."""
    _qemu_or_skip("aarch64")
    if launchers.problem("aarch64") is not None:
        pytest.skip(str(launchers.problem("aarch64")))
    out = tmp_path / "build"
    _artifacts(out)
    rt = MATRIX.runtime("onnxruntime==1.32.0")
    userland = Path(os.environ.get("HARNESS_TEST_USERLAND", tmp_path / "userland"))  # a kept one saves ~30 s
    launch = launchers.prepare("aarch64", rt.requirements, sys.executable, tmp_path / "arm", source=ROOT, userland=userland)
    assert launch.path is not None
    stamp = json.loads((userland / "userland.json").read_text())
    assert stamp["suite"] == launchers.SUITE and all(len(sha) == 64 for _, sha in stamp["debs"].values())
    before = (userland / "userland.json").stat().st_mtime_ns, (tmp_path / "arm" / "site.json").stat().st_mtime_ns
    again = launchers.prepare("aarch64", rt.requirements, sys.executable, tmp_path / "arm", source=ROOT, userland=userland)
    assert again == launch
    assert ((userland / "userland.json").stat().st_mtime_ns, (tmp_path / "arm" / "site.json").stat().st_mtime_ns) == before
    done = _run(out, "cpu@aarch64", [str(launch.path)], str(launch.path))
    assert done.returncode == 0, done.stdout + done.stderr
    cells = {c.case: c for c in _cells(out, "cpu@aarch64")}
    assert cells["add"].status is Status.PASS and cells["mm"].status is Status.PASS, cells
    assert cells["wrong"].status is Status.MISMATCH
    for c in cells.values():
        assert c.env["machine"] == "aarch64" and c.env["isa"] == "aarch64" and "ASIMD" in c.env["isa_features"].split()
        assert c.env["onnxruntime"] == "1.32.0" and c.latency is None and c.env["how"] == launch.how


def test_a_platform_cell_s_reproducer_says_how_to_run_it_as_that_cpu() -> None:
    from harness.publish.repro._readme import on_platform

    (v3,) = on_platform("x86-64-v3", "python3.10 repro.py")
    assert v3.startswith('qemu-x86_64 -cpu Haswell-noTSX "$(command -v python3.10)" repro.py')
    (v4,) = on_platform("x86-64-v4", "python repro.py")
    assert v4.startswith("python repro.py") and "no emulator has AVX-512" in v4
    arm = on_platform("aarch64", "python repro.py")
    assert arm[0].startswith("python repro.py") and "ARM64 machine" in arm[0]
    assert any("qemu-aarch64 -cpu neoverse-n1 -L ROOT ROOT/usr/bin/python3.11 repro.py" in line for line in arm)


def test_avx512_is_native_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a machine without AVX-512 the x86-64-v4 column cannot run at all: one line, and the fix (no emulator has it)."""
    v3 = {"avx2", "fma", "f16c", "bmi2", "movbe", "sse4_2", "popcnt", "ssse3"}
    monkeypatch.setattr(launchers, "host", lambda: ("x86_64", v3))
    why = launchers.problem("x86-64-v4")
    assert why is not None and "runs natively only (no emulator has AVX-512)" in why
    assert platforms.native("x86-64-v3", *launchers.host())


@pytest.mark.slow
def test_a_platform_this_machine_cannot_run_is_unavailable_and_the_runtime_still_measured(tmp_path: Path) -> None:
    """What the noxfile runs where a platform cannot run here: each of its columns one `unavailable` record with the
    line, and the runtime's frontier measured as ever (the process is native)."""
    _onnxruntime_here()
    out = tmp_path / "build"
    _artifacts(out)
    why = "x86-64-v4: runs natively only (no emulator has AVX-512) and this machine is not x86-64-v4: run its column on one"
    cmd_out = _run_unavailable(out, why)
    assert cmd_out.returncode == 0, cmd_out.stdout + cmd_out.stderr
    (wide,) = _cells(out, "cpu@x86-64-v4")
    assert wide.runtime_wide and wide.status is Status.UNAVAILABLE and wide.error_line == why, wide
    assert not {"isa", "isa_features", "how", "machine", "cpu"} & set(wide.env), wide.env  # nothing of this CPU is its
    summary = across.measure(out, [wide], ("x86-64-v4",))
    assert summary["columns"]["onnxruntime==1.32.0 x86-64-v4"]["unmeasured"] == f"unavailable: {why}"
    assert summary["cases"] == {} and "| x86-64-v4 | not measured: unavailable: " in across.section(summary, ("x86-64-v4",))
    rt = MATRIX.runtime("onnxruntime==1.32.0")
    from harness.store import frontier

    assert frontier.read(out, [(rt.id, rt.pin)])[rt.pin]["max_opset"] is not None


def _run_unavailable(out: Path, why: str) -> subprocess.CompletedProcess[str]:
    rt = MATRIX.runtime("onnxruntime==1.32.0")
    cmd = [sys.executable, "-m", "harness", "run", "--matrix", str(ROOT / "matrix.toml"), "--profile", "smoke-hardware"]
    cmd += ["--out", str(out), "--runtime", rt.pin, "--provider", "cpu@x86-64-v4", "--unavailable", why]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
