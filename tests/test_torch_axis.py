"""torch releases as an axis: the profile's releases, the fallback status, and one real release besides the default.

The unit tests need no torch. The end-to-end test (``e2e``) runs ``nox -s matrix -- --profile smoke-torch`` for real:
torch 2.7.1 (the index's default build; its dynamo exporter falls back to ``torch.jit.trace`` where ``torch.export``
fails) in an export environment of its own, made for its export and removed after it, and torch 2.13 (the default
export environment), on a few cases, then the table across them.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import cli
from harness.config.matrix import load
from harness.core.errors import HarnessError
from harness.core.records import CellRecord, ExportRecord, Stage, Status
from harness.publish.markdown import LEGEND
from harness.run.stage import captured

ROOT = Path(__file__).resolve().parent.parent

GOOD = """
[export]
torch = "2.13.0"
onnx = "1.23.2"
onnxscript = "0.7.2"

[corpus]
modules = ["models.articles"]

[[runtimes]]
pin = "onnxruntime==1.32.0"

[profiles.default]
runtimes = ["onnxruntime==1.32.0"]
opsets = [18]

[profiles.t]
torch = TORCH
runtimes = ["onnxruntime==1.32.0"]
opsets = [18]
"""


def _load(tmp_path: Path, torch: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "matrix.toml"
    path.write_text(GOOD.replace("TORCH", torch))
    return load(path)


def test_the_torch_profile_lists_at_least_four_releases_each_with_its_own_build_and_table() -> None:
    m = load(ROOT / "matrix.toml")
    p = m.profile("torch")
    assert len(p.torch) >= 4 and m.export.torch in p.torch
    assert p.opsets_of("torchscript") == (17, 18, 20) and p.opsets_of("dynamo") == (18, 20)  # each release's defaults
    assert p.torch_out("build", "2.7.1") == Path("build/torch/2.7.1")
    assert p.torch_results("build", "2.7.1") == Path("results/torch/2.7.1")
    assert m.for_torch(p, "2.7.1").export.torch == "2.7.1"
    assert m.for_torch(p, "2.7.1").export.onnxscript == m.export.onnxscript  # the pins every release installs
    assert m.profile("default").torch == () and m.for_torch(m.profile("default"), None) is m


@pytest.mark.parametrize(
    ("torch", "said"),
    [
        ('["2.5"]', "'2.5' is not a torch release; write X.Y.Z"),
        ('["2.7.1+cu126"]', "no +cpu or +cu tag"),
        ('["02.07.01"]', "'02.07.01' is not a torch release; write X.Y.Z as torch names it"),  # no table could name it
        ('["2.7.1", "2.7.1"]', "lists '2.7.1' twice"),
        ('["2.9.1", "2.7.1"]', "oldest first: 2.7.1, 2.9.1"),
        ('"2.7.1"', "profiles.t"),
    ],
)
def test_a_bad_release_list_is_one_line(tmp_path: Path, torch: str, said: str) -> None:
    with pytest.raises(HarnessError, match=r"profiles\.t") as exc:
        _load(tmp_path, torch)
    assert said in str(exc.value) and "\n" not in str(exc.value)


def test_a_stage_of_a_profile_with_releases_needs_one_and_only_a_listed_one(tmp_path: Path) -> None:
    m = _load(tmp_path, '["2.7.1", "2.13.0"]')
    with pytest.raises(HarnessError, match=re.escape("has torch releases (2.7.1, 2.13.0): name one with --torch")):
        m.for_torch(m.profile("t"), None)
    with pytest.raises(HarnessError, match=re.escape("--torch 2.5.1: profile 't' lists 2.7.1, 2.13.0")):
        m.for_torch(m.profile("t"), "2.5.1")
    with pytest.raises(HarnessError, match="lists none"):
        m.for_torch(m.profile("default"), "2.7.1")
    assert cli.main(["plan", "--matrix", str(tmp_path / "matrix.toml"), "--profile", "t", "--out", str(tmp_path)]) == 2
    assert cli.main(["list", "--matrix", str(tmp_path / "matrix.toml"), "--torch", "2.7.1"]) == 2


@pytest.mark.torch
def test_an_export_in_an_environment_of_another_torch_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    m = tmp_path / "matrix.toml"
    m.write_text(GOOD.replace("TORCH", '["2.7.1", "2.13.0"]'))
    code = cli.main(["export", "--matrix", str(m), "--profile", "t", "--torch", "2.7.1", "--out", str(tmp_path / "b")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert f"this environment holds torch {torch.__version__}, the export asks for torch 2.7.1" in err
    assert not (tmp_path / "b" / "torch" / "2.7.1" / "artifacts").exists()  # nothing exported with the wrong torch


def _record(capture: str | None, exporter: str = "dynamo") -> ExportRecord:
    return ExportRecord(
        "data_dependent_branch", exporter, 18, True, 1.0, capture=capture, versions={"torch": "2.7.1+cu126"}, probes=("example",)
    )


def _cell(rec: ExportRecord, status: Status) -> CellRecord:
    return rec.cell("onnxruntime==1.32.0", "cpu", {}, probe="example", status=status, stage=Stage.COMPARE)


def test_a_fallback_export_never_passes_and_every_verdict_says_what_captured_it() -> None:
    traced = _record("JitTraceConvertStrategy")
    assert traced.fell_back
    cell = captured(_cell(traced, Status.PASS), traced)
    assert cell.status is Status.FALLBACK
    assert "torch.jit.trace" in (cell.note or "") and "2.7.1+cu126" in (cell.note or "")
    mismatch = captured(_cell(traced, Status.MISMATCH), traced)
    assert mismatch.status is Status.MISMATCH and "dynamo fallback" in (mismatch.note or "")
    for strategy in ("TorchExportStrategy", "TorchExportNonStrictStrategy", "TorchExportStrictStrategy", None):
        rec = _record(strategy)
        assert not rec.fell_back and captured(_cell(rec, Status.PASS), rec).status is Status.PASS
    assert _record("LegacyDynamoStrategy").fell_back and _record("SomethingNew").fell_back  # not torch.export: a fallback
    assert traced.digest != _record(None).digest  # what captured the graph is part of the artifact's cells' inputs


def test_fallback_is_a_failure_of_its_own_in_the_legend() -> None:
    assert Status.FALLBACK in LEGEND and "no dynamo export" in LEGEND[Status.FALLBACK]
    assert Status.PASS.severity < Status.FALLBACK.severity < Status.MISMATCH.severity


def test_recommend_for_a_release_without_a_table_names_the_measured_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "2.9.1").mkdir()
    (tmp_path / "2.9.1" / "matrix.jsonl").write_text("")
    code = cli.main(["recommend", "--torch", "2.6.0", "--runtime", "1.32.0", "--results", str(tmp_path)])
    err = capsys.readouterr().err
    assert (
        code == 2 and "no table of torch 2.6.0" in err and "it measured torch 2.9.1" in err and len(err.strip().splitlines()) == 1
    )


# The real thing ---------------------------------------------------------------------------------------------

CASES = "data_dependent_branch,data_dependent_branch_fixed,opset_baseline"


@pytest.fixture(scope="module")
def axis(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("torch-axis")
    nox = shutil.which("nox") or str(Path(sys.executable).parent / "nox")
    cmd = [nox, "-f", str(ROOT / "noxfile.py"), "-s", "matrix", "--", "--profile", "smoke-torch", "--cases", CASES]
    cmd += _out(tmp)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (tmp / "said.txt").write_text(proc.stdout + proc.stderr)
    return tmp


def _out(axis: Path) -> list[str]:
    return ["--out", str(axis / "build"), "--results", str(axis / "results")]


def _cells(results: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in (results / "matrix.jsonl").read_text().splitlines()]


@pytest.mark.e2e
def test_each_release_is_exported_by_its_own_torch_and_the_extra_environment_is_removed(axis: Path) -> None:
    for release, build in (("2.7.1", "+cu"), ("2.13.0", "+cpu")):
        env = json.loads((axis / "results" / release / "environment.json").read_text())
        assert env["export"]["torch"].startswith(release + build), env["export"]
        record = json.loads(
            (axis / "build" / "torch" / release / "artifacts" / "opset_baseline.dynamo.op18" / "export.json").read_text()
        )
        assert record["versions"]["torch"] == env["export"]["torch"]
        assert record["capture"] in ("TorchExportStrategy", "TorchExportNonStrictStrategy")
    said = (axis / "said.txt").read_text()
    assert "torch 2.7.1: removed its environment" in said
    assert not list((ROOT / ".nox").glob("export_torch-2-7-1*")), "the extra torch's environment outlives its export"
    unasked = json.loads((axis / "results" / "2.7.1" / "environment.json").read_text())["default_opsets"]
    assert unasked == {"torchscript": 17, "dynamo": 18}  # torch 2.7's defaults, measured in its environment


@pytest.mark.e2e
def test_the_fallback_is_detected_on_2_7_and_the_refusal_on_2_13(axis: Path) -> None:
    old = {
        c["probe"]: c
        for c in _cells(axis / "results" / "2.7.1")
        if (c["case"], c["exporter"]) == ("data_dependent_branch", "dynamo")
    }
    assert old["example"]["status"] == "fallback"  # the traced branch matches on the example: still no dynamo pass
    assert old["negative"]["status"] == "mismatch"  # the branch it did not take
    assert all("torch.jit.trace" in c["note"] for c in old.values())
    new = {
        c["status"]
        for c in _cells(axis / "results" / "2.13.0")
        if (c["case"], c["exporter"]) == ("data_dependent_branch", "dynamo")
    }
    assert new == {"export-fail"}
    twin = {
        c["status"]
        for r in ("2.7.1", "2.13.0")
        for c in _cells(axis / "results" / r)
        if c["case"] == "data_dependent_branch_fixed"
    }
    assert twin == {"pass"}


@pytest.mark.e2e
def test_the_table_across_releases_says_where_the_verdict_changes(axis: Path) -> None:
    summary = json.loads((axis / "results" / "torch.json").read_text())
    change = [c for c in summary["changes"] if c["case"] == "data_dependent_branch" and c["exporter"] == "dynamo"]
    assert change and change[0]["verdicts"] == {"2.7.1": "mismatch", "2.13.0": "export-fail"}
    assert [(f["case"], f["torch"]) for f in summary["fallbacks"]] == [("data_dependent_branch", "2.7.1")]
    readme = (axis / "results" / "README.md").read_text()
    assert "## On torch X, which exporter and opset?" in readme and "| 2.7.1 | 1.32.0 |" in readme
    assert "(2.7.1/index.html)" in readme and (axis / "results" / "index.html").is_file()


@pytest.mark.e2e
def test_recommend_answers_for_a_release_and_a_rerun_does_nothing(axis: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness",
            "recommend",
            "--torch",
            "2.7.1",
            "--runtime",
            "1.32.0",
            "--results",
            str(axis / "results"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode in (0, 1), proc.stderr
    assert f"answered from {axis / 'results' / '2.7.1' / 'matrix.jsonl'} " in proc.stdout and "onnxruntime==1.32.0" in proc.stdout
    nox = shutil.which("nox") or str(Path(sys.executable).parent / "nox")
    again = subprocess.run(
        [nox, "-f", str(ROOT / "noxfile.py"), "-s", "matrix", "--", "--profile", "smoke-torch", "--cases", CASES, *_out(axis)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    said = again.stdout + again.stderr
    assert again.returncode == 0 and "nothing to do" in said, said[-2000:]
    assert "Running session export_torch" not in said, "an extra torch was installed again"


def _release(name: str, cells: list[CellRecord], rewrites: dict[tuple[str, str, int], int] | None = None):  # type: ignore[no-untyped-def]
    from harness.answer import torch_table

    r = torch_table.Release.__new__(torch_table.Release)
    r.release, r.folder, r.problem, r.cells, r.environment = name, Path("."), None, cells, {}
    r.rewrites, r.faults = rewrites or {}, {}
    return r


def test_a_pass_after_the_files_fault_names_the_release_that_writes_a_good_file() -> None:
    from harness.answer import torch_table

    def cells(status: Status) -> list[CellRecord]:
        rec = ExportRecord("frozen_batch_fixed", "dynamo", 20, True, 1.0, probes=("example",), ir_version=9)
        return [rec.cell("onnxruntime==1.32.0", "cpu", {}, probe="example", status=status, stage=Stage.RUN)]

    old, new = _release("2.7.1", cells(Status.RUN_FAIL)), _release("2.9.1", cells(Status.PASS))
    old.faults = {old.cells[0].key: {"fault": "exporter", "fault_why": "the file declares input 'x' as [2]"}}
    (change,) = torch_table.changes([old, new])
    assert change["faults"] == {"2.7.1": "exporter"}
    good = "the exporter's fault: 2.9.1 is the first to write a good file"
    assert change["change"] == f"passes from 2.9.1 (run-fail before, {good})"
    old.faults = {old.cells[0].key: {"fault": "runtime"}}  # the runtime's fault before: a release wrote no better file
    assert torch_table.changes([old, new])[0]["change"] == "passes from 2.9.1 (run-fail before)"


def test_a_request_a_release_answered_with_another_opset_is_compared_by_that_file() -> None:
    """torch 2.5.1's dynamo writes opset 18 when asked for 20, and the release's table keeps that file in the 18 row
    only: the table across releases must compare the 20 request by it, not call it "not measured"."""
    from harness.answer import torch_table

    def cells(opset: int, status: Status) -> list[CellRecord]:
        rec = ExportRecord("frozen_batch_fixed", "dynamo", opset, True, 1.0, probes=("example",), ir_version=9)
        return [rec.cell("onnxruntime==1.32.0", "cpu", {}, probe="example", status=status, stage=Stage.RUN)]

    old = _release("2.5.1", cells(18, Status.RUN_FAIL), {("frozen_batch_fixed", "dynamo", 20): 18})
    new = _release("2.9.1", cells(18, Status.PASS) + cells(20, Status.PASS))
    found = {e["opset"]: e for e in torch_table.changes([old, new])}
    assert found[20]["verdicts"] == {"2.5.1": "run-fail", "2.9.1": "pass"} and found[20]["wrote"] == {"2.5.1": 18}
    assert found[20]["change"] == "passes from 2.9.1 (run-fail before)"
    assert torch_table.written(old)["dynamo 20"] == torch_table.written(old)["dynamo 18"] == "IR 9 / opset 18"
    (group,) = {g[:3] for g in torch_table.grouped_changes(list(found.values()))}
    assert group == ("dynamo", "1.32.0", "passes from 2.9.1 (run-fail before)")
    assert torch_table.grouped_changes(list(found.values()))[0][3] == ["frozen_batch_fixed"]


def test_the_default_report_keeps_the_torch_tables_published_inside_its_folder(tmp_path: Path) -> None:
    """results/torch/ holds the table across releases (no matrix.jsonl of its own) and a table per release: the
    default report into results/ keeps it, and still refuses a folder that is no report's."""
    from harness.answer import published

    across = tmp_path / "results" / "torch"
    (across / "2.7.1").mkdir(parents=True)
    for name in ("matrix.jsonl", "README.md", "environment.json"):
        (across / "2.7.1" / name).write_text("{}\n")
    (across / "README.md").write_text("# Torch releases\n")
    with pytest.raises(HarnessError, match="torch is not part of a report"):
        published.kept(tmp_path / "results")
    for name in ("index.html", "torch.json"):
        (across / name).write_text("{}\n")
    assert published.kept(tmp_path / "results") == ["torch"]
    (across / "notes.txt").write_text("mine\n")
    with pytest.raises(HarnessError, match="torch is not part of a report"):
        published.kept(tmp_path / "results")


def test_the_torch_the_default_table_was_exported_with_is_that_table(tmp_path: Path) -> None:
    """The profile's release that `[export] torch` pins is not measured again, narrower: the table across releases
    reads the default table for it, unless a table of its own was published for it (a run with its own corpus or
    cases measures every release, since the default table did not measure those)."""
    from harness.answer import torch_table

    m = _load(tmp_path, '["2.7.1", "2.13.0"]')
    profile = m.profile("t")
    assert torch_table.reuses_default(m, profile, custom=False) == "2.13.0"
    assert torch_table.reuses_default(m, profile, custom=True) is None
    folders = torch_table.folders(m, profile, tmp_path / "torch")
    assert folders == {"2.7.1": tmp_path / "torch" / "2.7.1", "2.13.0": torch_table.default_table(m)}
    (tmp_path / "torch" / "2.13.0").mkdir(parents=True)
    (tmp_path / "torch" / "2.13.0" / "matrix.jsonl").write_text("")
    assert torch_table.folders(m, profile, tmp_path / "torch")["2.13.0"] == tmp_path / "torch" / "2.13.0"
    assert torch_table.reuses_default(m, m.profile("default"), custom=False) is None  # it lists no releases
