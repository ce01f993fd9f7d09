"""matrix.toml's values that can change a verdict or fail late are bounded, and what goes to uv is a requirement.

Every number within :data:`harness.config.matrix.BOUNDS` (a tolerance of 1e300 published real mismatches as `pass`; a
timeout of 1e9 s validated, then every run stage ended in `OverflowError`); every constraint, GPU requirement and
export requirement a PEP 508 specifier by name and version, never an installer option (`--index-url=...` was taken
as one by uv); a corpus module that registers no cases (`os`) refused. Each refusal is one line naming the key.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest

from harness.config.matrix import BOUNDS, load, parse_requirement
from harness.core.errors import HarnessError
from tests.test_cli import harness, one_line_error
from tests.test_matrix import GOOD

ROOT = Path(__file__).resolve().parent.parent


def _with(section: str, key: str, value: object) -> str:
    """GOOD with ``[section] key = value`` (into the [export] table it already has)."""
    line = f"{key} = {value}"
    if section == "export":
        return GOOD.replace('onnxscript = "0.7.2"', f'onnxscript = "0.7.2"\n{line}')
    return GOOD + f"\n[{section}]\n{line}\n"


def _refused(tmp_path: Path, text: str) -> str:
    (tmp_path / "matrix.toml").write_text(text)
    with pytest.raises(HarnessError) as info:
        load(tmp_path / "matrix.toml")
    message = str(info.value)
    assert "\n" not in message and message.startswith("matrix.toml: "), message
    return message


def _past(value: float, integer: bool) -> str:
    return str(int(value) + 1) if integer else repr(value * 10 or 1.0)


INTEGERS = {"run.workers", "run.gpu_workers", "latency.threads", "latency.warmup", "latency.min_runs", "latency.max_runs"}


@pytest.mark.parametrize("key", sorted(BOUNDS))
def test_every_number_above_its_bound_is_one_line(tmp_path: Path, key: str) -> None:
    section, name = key.split(".")
    high = BOUNDS[key][1]
    message = _refused(tmp_path, _with(section, name, _past(high, key in INTEGERS)))
    assert re.search(rf"{re.escape(key)}: must be <= {re.escape(str(high))} .*, got .*; \w", message), message


@pytest.mark.parametrize("key", sorted(k for k, (low, _, _) in BOUNDS.items() if low > 0))
def test_every_number_below_its_bound_is_one_line(tmp_path: Path, key: str) -> None:
    section, name = key.split(".")
    message = _refused(tmp_path, _with(section, name, 0))
    assert f"{key}: must be >= {BOUNDS[key][0]}, got 0; raise it" in message


@pytest.mark.parametrize(
    ("section", "key", "value", "pattern"),
    [
        ("tolerance", "atol", "1e300", r"tolerance\.atol: must be <= 0\.1 \(a wider bound passes real mismatches\), got 1e\+300"),
        ("tolerance", "rtol", "0.5", r"tolerance\.rtol: must be <= 0\.1 .*; lower it; a case that needs a looser bound"),
        ("run", "timeout", "1e9", r"run\.timeout: must be <= 86400 seconds \(a day\), got 1000000000\.0; lower it"),
        ("run", "timeout", "1e300", r"run\.timeout: must be <= 86400"),
        ("run", "workers", "100000000", r"run\.workers: must be <= 256 processes \(0: one per core\), got 100000000"),
        ("run", "workers", "-1", r"run\.workers: must be >= 0, got -1; raise it"),
        ("export", "intermediates_mib", "1e12", r"export\.intermediates_mib: must be <= 65536"),
        ("export", "external_data_mib", "4096", r"export\.external_data_mib: must be <= 2047 MiB \(one protobuf file"),
        ("latency", "budget_seconds", "1e9", r"latency\.budget_seconds: must be <= 3600"),
        ("probes", "batch_sizes", "[3, 100000000]", r"probes\.batch_sizes: batch sizes must be <= 4096 .*got 100000000"),
    ],
    ids=lambda v: str(v)[:24],
)
def test_the_values_the_issue_tried_are_refused(tmp_path: Path, section: str, key: str, value: str, pattern: str) -> None:
    message = _refused(tmp_path, _with(section, key, value))
    assert re.search(pattern, message), message


def test_the_committed_matrix_is_within_every_bound() -> None:
    m = load(ROOT / "matrix.toml")
    assert 0 <= m.atol <= BOUNDS["tolerance.atol"][1] and 0 <= m.rtol <= BOUNDS["tolerance.rtol"][1]
    assert all(math.isfinite(v) for v in (m.run.timeout, m.export.timeout, m.latency.budget_seconds))


def test_a_native_workspace_and_a_provider_option_are_bounded(tmp_path: Path) -> None:
    base = GOOD.replace('runtimes = ["onnxruntime==1.17.3", "onnxruntime==1.32.0"]', 'runtimes = ["onnxruntime==1.17.3"]')
    huge = base + "\n[providers.tensorrt]\nnative = { workspace_mib = 1099511627776 }\n"
    assert "workspace_mib must be an integer of MiB within 1..1048576 (1 TiB)" in _refused(tmp_path, huge)
    nan = base + "\n[providers.cuda]\noptions = { gpu_mem_limit = nan }\n"
    assert "providers.cuda.options: gpu_mem_limit: must be a finite number, got nan" in _refused(tmp_path, nan)


CONSTRAINTS = 'constraints = ["numpy<2"]'


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        (
            GOOD.replace(CONSTRAINTS, 'constraints = ["--index-url=http://127.0.0.1:9/simple"]'),
            r"runtimes\[0\]\.constraints: '--index-url=http://127\.0\.0\.1:9/simple' is an installer option, not a "
            r'requirement; write "name==version" \(or a range\), no options',
        ),
        (
            GOOD.replace(CONSTRAINTS, 'constraints = ["-e ."]'),
            r"runtimes\[0\]\.constraints: '-e \.' is an installer option",
        ),
        (
            GOOD.replace(CONSTRAINTS, 'constraints = ["numpy @ http://127.0.0.1:9/numpy.whl"]'),
            r"runtimes\[0\]\.constraints: 'numpy @ http://127\.0\.0\.1:9/numpy\.whl' is not a requirement; write",
        ),
        (
            GOOD.replace(CONSTRAINTS, 'constraints = ["numpy<2 --index-url http://127.0.0.1:9/simple"]'),
            r"runtimes\[0\]\.constraints: 'numpy<2 --index-url http://127\.0\.0\.1:9/simple' is an installer option",
        ),
        (
            GOOD.replace(CONSTRAINTS, 'constraints = ["numpy<2 --no-deps"]'),
            r"runtimes\[0\]\.constraints: 'numpy<2 --no-deps' is an installer option",
        ),
        (
            GOOD.replace(CONSTRAINTS, 'constraints = ["numpy==1.*.2"]'),
            r"runtimes\[0\]\.constraints: 'numpy==1\.\*\.2' is not a requirement \(Expected .*\); write",
        ),
        (
            GOOD.replace(CONSTRAINTS, 'constraints = ["onnxruntime==1.20.1"]'),
            r"runtimes\[0\]\.constraints: onnxruntime is pinned by the runtime's pin itself; remove 'onnxruntime==1\.20\.1'",
        ),
        (
            GOOD.replace('onnxscript = "0.7.2"', 'onnxscript = "0.7.2"\nrequirements = ["--extra-index-url=http://x/simple"]'),
            r"export\.requirements: '--extra-index-url=http://x/simple' is an installer option",
        ),
        (
            GOOD.replace('onnx = "1.23.2"', 'onnx = "1.23.2.--index-url=http://x"'),
            r"export\.onnx: '1\.23\.2\.--index-url=http://x' is not a version; write a release such as X\.Y\.Z",
        ),
    ],
    ids=["index-url", "editable", "url", "option-after", "option-word", "bad-specifier", "own-package", "export", "version"],
)
def test_what_goes_to_uv_is_a_requirement_and_nothing_else(tmp_path: Path, text: str, pattern: str) -> None:
    message = _refused(tmp_path, text)
    assert re.search(pattern, message), message


def test_gpu_requirements_are_requirements_too(tmp_path: Path) -> None:
    text = GOOD + '\n[[runtimes]]\npin = "onnxruntime-gpu==1.31.1"\ncuda = "13"\ngpu_requirements = ["--pre"]\n'
    assert "runtimes[2].gpu_requirements: '--pre' is an installer option" in _refused(tmp_path, text)


def test_without_packaging_an_option_is_still_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run environment of native TensorRT holds numpy only: the standard-library grammar still refuses."""
    monkeypatch.setitem(sys.modules, "packaging.requirements", None)
    assert parse_requirement("here", " numpy<2 ") == "numpy<2"
    with pytest.raises(HarnessError, match=r"^here: '--index-url=x' is an installer option"):
        parse_requirement("here", "--index-url=x")
    with pytest.raises(HarnessError, match=r"^here: 'numpy<2 -U' is an installer option"):
        parse_requirement("here", "numpy<2 -U")
    with pytest.raises(HarnessError, match=r"^here: 'numpy<2;' is not a requirement"):
        parse_requirement("here", "numpy<2;")


@pytest.mark.parametrize("module", ["os", "json.decoder", "harness.cases.corpus"])
def test_a_corpus_module_that_registers_no_cases_is_refused(tmp_path: Path, module: str) -> None:
    message = _refused(tmp_path, GOOD.replace('modules = ["models.articles"]', f'modules = ["models.articles", "{module}"]'))
    assert re.search(rf"corpus\.modules: '{re.escape(module)}': is a module of .*, which registers no cases", message)


def test_validate_says_it_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "matrix.toml").write_text(_with("tolerance", "atol", "1e300"))
    line = one_line_error(harness("validate", "--matrix", str(tmp_path / "matrix.toml")))
    assert "tolerance.atol: must be <= 0.1" in line


def test_the_published_readme_says_which_tolerances_its_verdicts_rest_on() -> None:
    """The README states the shared tolerance and lists every case that set its own (markdown.tolerance_lines)."""
    from harness.core.records import ExportRecord
    from harness.publish.markdown import tolerance_lines

    def rec(case: str, **tol: object) -> ExportRecord:
        return ExportRecord(case=case, exporter="torchscript", opset=17, ok=True, seconds=0.0, **{"scaled": 1e-5, **tol})  # type: ignore[arg-type]

    exports = [rec("a"), rec("b"), rec("c", atol=1e-2), rec("d", output_tolerance={"1": {"atol": 0.01}})]
    text = "\n".join(tolerance_lines(exports))
    assert "2 of 4 cases with atol 0.0001, rtol 0.001, scaled 1e-05 (the one most cases share" in text
    assert "- [c](cases/c.md): atol 0.01, rtol 0.001, scaled 1e-05" in text
    assert "- [d](cases/d.md): atol 0.0001, rtol 0.001, scaled 1e-05; output 1: atol 0.01" in text
    recorded = "\n".join(tolerance_lines(exports, {"atol": 1e-2, "rtol": 1e-3, "scaled": 1e-5}))
    assert "1 of 4 cases with atol 0.01, rtol 0.001, scaled 1e-05 (matrix.toml's `[tolerance]`" in recorded
    assert "3 set their own" in recorded


def _project(tmp: Path, edit: tuple[str, str]) -> Path:
    """A copy of the project (noxfile, harness, corpus, pyproject) whose matrix.toml has ``edit`` applied."""
    import shutil

    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("harness", "models"):
        shutil.copytree(ROOT / folder, tmp / folder, ignore=skip)
    for name in ("noxfile.py", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, tmp / name)
    text = (ROOT / "matrix.toml").read_text()
    assert edit[0] in text
    (tmp / "matrix.toml").write_text(text.replace(edit[0], edit[1]))
    return tmp


@pytest.mark.e2e
@pytest.mark.parametrize(
    "edit", [('torch = "2.13.0"', 'torch = "9.9.9"'), ('onnx = "1.23.2"', 'onnx = "1.23.99"')], ids=["torch", "onnx"]
)
def test_an_export_environment_that_does_not_install_stops_every_later_stage(tmp_path: Path, edit: tuple[str, str]) -> None:
    """Real nox and uv (offline: the pin exists nowhere): the export session fails installing, and the run and report
    sessions it queued start nothing, each saying why in one line; no report, no history line."""
    import os
    import shutil
    import subprocess

    top = _project(tmp_path, edit)
    nox = shutil.which("nox") or str(Path(sys.executable).parent / "nox")
    cmd = [nox, "-f", str(top / "noxfile.py"), "-s", "matrix", "--", "--profile", "smoke", "--cases", "frozen_batch"]
    proc = subprocess.run(cmd, cwd=top, capture_output=True, text=True, timeout=600, env={**os.environ, "UV_OFFLINE": "1"})
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0, said
    assert "Session export failed" in said, said[-3000:]
    stopped = "the export environment did not install (see its error above): not running"
    for session in ("run(ort-1.17.3)", "run(ort-1.32.0)", "report"):
        assert f"Session {session} skipped: {stopped} {session}" in said, said[-3000:]
    assert not list((top / "build").glob("results/smoke/*.md")) and not list(top.glob("build/shards/*"))
