"""End to end with real models: the architectures of examples/hf_models.py (BERT, GPT-2, ViT, ResNet-50,
Whisper's encoder) at a tiny size, through real nox + uv sessions, with transformers installed from the
corpus file's REQUIREMENTS into the export environment only.

The sessions live in a folder of their own (``nox --envdir``): installing transformers must not change the
project's own export environment, whose package listing is part of every cached export's key.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.matrix import load

ROOT = Path(__file__).resolve().parent.parent
CORPUS = "tests/corpus/hf_tiny_models.py"
SMOKE = load(ROOT / "matrix.toml").profile("smoke")
OLD, NEW = (rt.version for rt in SMOKE.runtimes)
MODELS = ("bert", "gpt2", "vit", "resnet50", "whisper_encoder")

pytestmark = pytest.mark.e2e


def _nox(envdir: Path, *args: str, timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    nox = shutil.which("nox") or str(Path(sys.executable).parent / "nox")
    cmd = [nox, "-f", str(ROOT / "noxfile.py"), "--envdir", str(envdir), "-s", "matrix", "--", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def hf(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("hf")
    args = [
        "--profile",
        "smoke",
        "--corpus",
        CORPUS,
        "--only-corpus",
        "--out",
        str(tmp / "build"),
        "--results",
        str(tmp / "results"),
    ]
    proc = _nox(tmp / "envs", *args)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0, said[-4000:]
    rows = [json.loads(line) for line in (tmp / "results" / "matrix.jsonl").read_text().splitlines()]
    cells = {(c["case"], c["exporter"], c["opset"], c["runtime"].split("==")[1], c["probe"]): c for c in rows}
    return {"tmp": tmp, "args": args, "said": said, "cells": cells}


def _statuses(cells: dict, case: str, exporter: str, runtime: str) -> set[str]:  # type: ignore[type-arg]
    return {c["status"] for (k, e, _, r, _), c in cells.items() if (k, e, r) == (case, exporter, runtime)}


def test_the_requirements_went_into_the_export_environment_only(hf: dict) -> None:  # type: ignore[type-arg]
    envs = Path(hf["tmp"]) / "envs"
    has = [str(envs / "export" / "bin" / "python"), "-c", "import transformers; print(transformers.__version__)"]
    assert subprocess.run(has, capture_output=True, text=True).stdout.strip() == "5.24.0"
    for rt in SMOKE.runtimes:
        py = envs / f"run-{rt.id.replace('.', '-')}" / "bin" / "python"
        assert subprocess.run([str(py), "-c", "import transformers"], capture_output=True).returncode != 0, rt.id
    assert "uv pip install torch==2.13.0+cpu transformers==5.24.0" in str(hf["said"]), "beside the pinned CPU torch"


def test_real_models_give_real_verdicts(hf: dict) -> None:  # type: ignore[type-arg]
    cells = hf["cells"]
    assert {k[0] for k in cells} == set(MODELS)
    assert {k[4] for k in cells if k[0] == "bert"} == {"example", "seq37", "batch3"}, "the dynamic dims are probed"
    for model in ("bert", "vit", "resnet50", "whisper_encoder"):
        for rt in (OLD, NEW):
            assert _statuses(cells, model, "torchscript", rt) == {"pass"}, (model, rt)
        assert _statuses(cells, model, "dynamo", NEW) == {"pass"}, model
        old = [c for k, c in cells.items() if k[0] == model and k[1] == "dynamo" and k[3] == OLD]
        assert old and all("Unsupported model IR version: 10, max supported IR version: 9" in c["error_line"] for c in old)
    # transformers' GPT-2 calls torch.diff, which the TorchScript exporter cannot export at any opset
    gpt2 = [c for k, c in cells.items() if k[:2] == ("gpt2", "torchscript")]
    assert gpt2 and all(c["status"] == "export-fail" and "aten::diff" in c["error_line"] for c in gpt2)
    # every pass of a float output says how far it is, in units of the output's own scale
    passes = [c for c in cells.values() if c["status"] == "pass"]
    assert passes and all(c["diff"]["scaled_error"] < 1e-5 for c in passes)


def test_the_run_ends_with_the_answer_per_model(hf: dict) -> None:  # type: ignore[type-arg]
    said = str(hf["said"])
    assert f"Your models ({CORPUS}): the exporter and opset to ship on each runtime" in said
    table = said.split("Your models")[1].split("What fails where:")[0]
    for model in ("bert", "vit", "resnet50", "whisper_encoder"):
        row = next(line for line in table.splitlines() if line.startswith(f"| {model} "))
        assert row.split("|")[2].strip() == "torchscript 18" and row.split("|")[3].strip() == "dynamo 18", row
    failures = said.split("What fails where:")[1]
    assert (
        "- gpt2: torchscript opset 17 on every runtime: E export-fail on every probe: Exporting the operator 'aten::diff'"
        in failures
    )
    assert f"- bert: dynamo every opset on {OLD}: L load-fail on every probe:" in failures


def test_recommend_covers_every_model_of_the_file(hf: dict) -> None:  # type: ignore[type-arg]
    results = Path(hf["tmp"]) / "results"
    cmd = [sys.executable, "-m", "harness", "recommend", "--runtime", NEW, "--corpus", CORPUS, "--results", str(results)]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert f"onnxruntime=={NEW} on cpu, 5 cases from {CORPUS} (" in proc.stdout, proc.stdout + proc.stderr


def test_a_rerun_with_nothing_changed_starts_no_session(hf: dict) -> None:  # type: ignore[type-arg]
    proc = _nox(Path(hf["tmp"]) / "envs", *hf["args"], timeout=600)  # type: ignore[arg-type]
    said = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "nothing to do" in said, said[-3000:]
    assert "Running session export" not in said


def test_a_corpus_that_fails_to_import_stops_before_any_run_session(tmp_path: Path) -> None:
    """A missing package is one line naming it and the option that adds it; no run environment is made."""
    bad = tmp_path / "needs_a_package.py"
    bad.write_text("import no_such_package_xyz\n")
    args = ["--profile", "smoke", "--corpus", str(bad), "--only-corpus", "--out", str(tmp_path / "build")]
    proc = _nox(ROOT / ".nox", *args, "--results", str(tmp_path / "results"), timeout=900)
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0, said[-3000:]
    line = f"harness: error: corpus {bad}: import failed: ModuleNotFoundError: No module named 'no_such_package_xyz'"
    assert line in said
    assert "`nox -s matrix -- --with no_such_package_xyz` for one run" in said
    for rt in SMOKE.runtimes:
        assert f"Session run({rt.id}) skipped: the export stopped" in said
    assert "Session report skipped: the export stopped" in said
    assert "harness run" not in said and not (tmp_path / "build" / "manifest.json").exists()
