"""The command line: bad input is one line on stderr, exit 2, no traceback; a user's own corpus file works."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import onnxruntime
import pytest

pytestmark = pytest.mark.torch  # exports with real torch: `nox -s tests`, not `nox -s unit`


ROOT = Path(__file__).resolve().parent.parent


def harness(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True, timeout=600)


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert lines[0].startswith("harness: error: ")
    return lines[0]


def small_matrix(tmp_path: Path, corpus: list[str]) -> Path:
    rt = f"onnxruntime=={onnxruntime.__version__}"
    path = tmp_path / "matrix.toml"
    path.write_text(
        textwrap.dedent(f"""
        [export]
        torch = "2.13.0"
        onnx = "1.23.2"
        onnxscript = "0.7.2"
        [corpus]
        modules = {json.dumps(corpus)}
        [probes]
        batch_sizes = [3]
        [[runtimes]]
        pin = "{rt}"
        [profiles.default]
        runtimes = ["{rt}"]
        exporters = ["torchscript"]
        opsets = [17]
    """)
    )
    return path


USER_CORPUS = """
import torch
from harness.cases.corpus import Card, Case, randn, register, seeded


class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.lin(x) * int(x.shape[0])  # batch size read as a Python int: frozen by tracing


def build():
    seeded(0)
    return Scale()


def broken():
    raise RuntimeError("factory exploded")


register(Case(name="user_scale", model=build, inputs=lambda: {"x": randn(2, 4)}, dynamic={"x": {0: "batch"}},
              card=Card("wrong at other batch sizes", "x.shape[0] traced as a constant", "use tensor ops", "test")))
register(Case(name="user_broken", model=broken, inputs=lambda: {"x": randn(2, 4)}))
"""


def test_malformed_matrix(tmp_path: Path) -> None:
    (tmp_path / "matrix.toml").write_text("[profiles\n")
    line = one_line_error(harness("validate", "--matrix", str(tmp_path / "matrix.toml")))
    assert "matrix.toml: not valid TOML" in line


def test_unknown_profile() -> None:
    line = one_line_error(harness("validate", "--profile", "quik"))
    assert "no profile 'quik' (did you mean 'quick'?)" in line


def test_missing_corpus_file() -> None:
    line = one_line_error(harness("list", "--corpus", "nope/my_models.py"))
    assert line.endswith("corpus nope/my_models.py: no such file; check the path under [corpus] in matrix.toml or --corpus")


def test_corpus_that_fails_to_import_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad_models.py"
    bad.write_text("import torch\nx = 1 / 0\n")
    line = one_line_error(harness("list", "--corpus", str(bad)))
    assert f"corpus {bad}: import failed: ZeroDivisionError: division by zero" in line


def test_duplicate_case_name_names_both_files(tmp_path: Path) -> None:
    dup = tmp_path / "dup.py"
    dup.write_text(
        "from harness.cases.corpus import Case, register, randn\n"
        "register(Case(name='frozen_batch', model=lambda: None, inputs=lambda: {}))\n"
    )
    line = one_line_error(harness("list", "--corpus", str(dup)))
    assert "case 'frozen_batch' is already defined in models.articles; give it another name" in line


def test_unknown_case_filter(tmp_path: Path) -> None:
    line = one_line_error(harness("export", "--cases", "frozen_batch,no_such_case", "--out", str(tmp_path)))
    assert "--cases: no case named no_such_case" in line


def test_run_before_export(tmp_path: Path) -> None:
    line = one_line_error(harness("run", "--runtime", onnxruntime.__version__, "--out", str(tmp_path)))
    assert "no export found; run `nox -s export`" in line


def test_user_corpus_end_to_end_and_a_raising_factory_costs_its_own_case(tmp_path: Path) -> None:
    user = tmp_path / "elsewhere" / "my_models.py"
    user.parent.mkdir()
    user.write_text(USER_CORPUS)
    matrix = small_matrix(tmp_path, [str(user)])
    out, results = tmp_path / "build", tmp_path / "results"
    common = ["--matrix", str(matrix), "--out", str(out)]
    proc = harness("export", *common)
    # the raising factory is one line naming file and case, the export goes on, and exits 2 at the end
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"harness: error: {user}: case 'user_broken': building the case failed: RuntimeError: factory exploded"
    ]
    proc = harness("run", *common, "--runtime", onnxruntime.__version__)
    assert proc.returncode == 0, proc.stderr
    proc = harness("report", *common, "--results", str(results))
    assert proc.returncode == 0, proc.stderr
    cells = [json.loads(line) for line in (results / "matrix.jsonl").read_text().splitlines()]
    by = {(c["case"], c["probe"]): c for c in cells}
    assert by[("user_scale", "example")]["status"] == "pass"
    # [probes] batch_sizes adds batch3 for a dynamic dim 0, though the case declares no probe of its own
    assert by[("user_scale", "batch3")]["status"] == "mismatch"
    broken = [c for c in cells if c["case"] == "user_broken"]
    assert broken and {c["status"] for c in broken} == {"export-fail"}
    assert "building the case failed: RuntimeError: factory exploded" in broken[0]["error_line"]
    readme = (results / "README.md").read_text()
    assert "[user_scale](cases/user_scale.md)" in readme
    assert "**Tolerance.**" in readme and "cases with atol 0.0001, rtol 0.001, scaled 1e-05" in readme  # issue 26
    assert "x.shape[0] traced as a constant" in (results / "cases" / "user_scale.md").read_text()


@pytest.mark.parametrize("flag", ["--probe-batch"])
def test_unknown_option_is_argparse_usage(flag: str) -> None:
    proc = harness("export", flag)
    assert proc.returncode == 2 and "unrecognized arguments" in proc.stderr


JOB = """
import argparse, importlib.util, json, os, sys

spec = importlib.util.spec_from_file_location("noxfile", sys.argv[1])
noxfile = importlib.util.module_from_spec(spec)
spec.loader.exec_module(noxfile)
noxfile._hold(argparse.Namespace(out=sys.argv[2], results=sys.argv[3]), "nox -s matrix -- --out job", print)
print(json.dumps(dict(os.environ)), flush=True)
sys.stdin.read()
"""


def test_a_job_holds_its_results_folder_too(tmp_path: Path) -> None:
    """Issue 26, finding 7: `harness report --out other --results <a job's results>` during the job overwrote them.
    The job (the noxfile's own lock-taking, in a process of its own) holds its build and results folders; another
    writer into its results is refused at once naming it, and the job's own report stage goes on past both locks."""
    build, results = tmp_path / "build", tmp_path / "build-results"
    job = subprocess.Popen(
        [sys.executable, "-c", JOB, str(ROOT / "noxfile.py"), str(build), str(results)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert job.stdout is not None
        env = json.loads(job.stdout.readline())
        other = one_line_error(harness("report", "--out", str(tmp_path / "other"), "--results", str(results)))
        assert f"{results} is in use by PID {job.pid}" in other and "(nox -s matrix -- --out job)" in other
        stage = subprocess.run(
            [sys.executable, "-m", "harness", "report", "--out", str(build), "--results", str(results)],
            cwd=ROOT, capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert "in use by" not in stage.stderr and "no export found" in stage.stderr, stage.stderr
    finally:
        job.communicate("", timeout=60)
    assert job.returncode == 0
    assert one_line_error(harness("report", "--out", str(tmp_path / "other"), "--results", str(results))).endswith(
        "no export found; run `nox -s export` (or `harness export`) first"
    )  # free once the job ended
