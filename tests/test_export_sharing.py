"""What the export shares changes how fast an artifact comes, never what it is: the warm start
(harness/export/_warm.py, harness/pool/_freeze.py), one process per case × exporter, and a dynamo capture and
decomposition shared by a case's opsets (harness/export/_reuse.py). The same cases exported with all of it and without
it (``harness export --no-share``: a cold process, a registry and a plain ``torch.onnx.export`` call per artifact) give
byte-identical files and the same records, warnings included.

The cases are the ones whose exports are most sensitive to what a process did before (an ``nn.LSTM`` with a dynamic
length fails a second dynamo export in one process; a custom ``torch.library`` op registered by the corpus; attention
and a data-dependent branch; a scripted loop, which a second ``torch.jit.script`` in one process names differently; a
train-mode BatchNorm, whose dynamo export changes the model), at an opset dynamo rewrites (17: built at 18, converted
down) and at opsets either side of every change in what the registry implements (18–22 and 23 on, for torch 2.13)
and of its implementations (gelu from 20, group_norm from 21). A task that crashes part-way costs the artifact it was
on, and one whose export changes the model's state stops sharing: both are exported here too."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from harness.core.records import ExportRecord
from harness.export import _warm
from harness.export.stage import _warm_server
from harness.store.layout import MODEL, RECORD

pytestmark = pytest.mark.torch  # real exports with torch: `nox -s tests`, not `nox -s unit`

ROOT = Path(__file__).resolve().parent.parent
CASES = "frozen_batch,lstm_h0_omitted,custom_library_op,sdpa_enable_gqa,data_dependent_branch,loop_scripted,train_mode_batchnorm"


def _export(tmp_path: Path, name: str, *extra: str) -> dict[str, tuple[bytes | None, dict]]:
    out = tmp_path / name
    matrix = tmp_path / "matrix.toml"
    if not matrix.exists():  # the project's matrix with one more profile: dynamo at 17, 18, 23 and TorchScript at 17
        text = (ROOT / "matrix.toml").read_text(encoding="utf-8")
        text += '\n[profiles.sharing]\nruntimes = ["onnxruntime==1.32.0"]\nproviders = ["cpu"]\n'
        text += 'exporters = ["torchscript", "dynamo"]\n'
        text += "opsets = { torchscript = [13, 17], dynamo = [17, 18, 19, 20, 21, 23, 28] }\n"
        matrix.write_text(text, encoding="utf-8")
        (tmp_path / "models").symlink_to(ROOT / "models")  # the corpus, found beside the matrix file
    cmd = [sys.executable, "-m", "harness", "export", "--matrix", str(matrix), "--profile", "sharing"]
    cmd += ["--out", str(out), "--cases", CASES, *extra]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    found = {}
    for folder in sorted((out / "artifacts").iterdir()):
        model = folder / MODEL
        record = json.loads((folder / RECORD).read_text(encoding="utf-8"))
        found[folder.name] = (model.read_bytes() if model.exists() else None, record)
    return found


def test_sharing_the_exporters_warm_start_changes_no_artifact(tmp_path: Path) -> None:
    shared = _export(tmp_path, "shared")
    plain = _export(tmp_path, "plain", "--no-share")
    assert shared.keys() == plain.keys() and len(shared) == 63
    written = [k for k, (model, _) in shared.items() if model is not None and ".dynamo." in k]
    assert len(written) >= 8, "too few dynamo exports succeeded for the comparison to mean anything"
    for key, (model, record) in shared.items():
        other_model, other = plain[key]
        assert model == other_model, f"{key}: the shared warm start changed the exported file"
        fields = ("ok", "error_class", "error_line", "error", "sha256", "opset_actual", "ir_version", "graph", "checker")
        for field in (*fields, "capture", "capture_note", "probes", "probe_errors", "intermediates_sha256"):
            assert record.get(field) == other.get(field), f"{key}: {field} differs"
        assert record["warnings"] == other["warnings"], key
    # And it is faster: the dynamo exports' own seconds, summed (a loose bound: the point is the test above).
    cost = {
        n: sum(r["timing"].get("export", 0.0) for k, (_, r) in found.items() if ".dynamo." in k)
        for n, found in (("shared", shared), ("plain", plain))
    }
    assert cost["shared"] < cost["plain"], cost


def test_a_torch_without_the_private_registry_api_says_so_in_one_line_and_exports_plainly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = types.ModuleType("torch.onnx._internal.exporter._registration")
    fake.ONNXRegistry = type("ONNXRegistry", (), {})  # no from_torchlib
    monkeypatch.setitem(sys.modules, "torch.onnx._internal.exporter._registration", fake)
    import torch.onnx._internal.exporter as exporter_pkg

    monkeypatch.setattr(exporter_pkg, "_registration", fake, raising=False)
    why = _warm.unavailable()
    assert why is not None and "from_torchlib" in why
    lines: list[str] = []
    task = types.SimpleNamespace(exporter="dynamo", items=[types.SimpleNamespace(opset=20)])
    monkeypatch.delenv(_warm.ENV, raising=False)
    assert _warm_server([task], True, lines.append) == ("harness.export._warm",)  # the public warm-up still runs
    assert len(lines) == 1 and "builds its own operator registry" in lines[0] and "from_torchlib" in lines[0]
    monkeypatch.delenv(_warm.ENV, raising=False)


def test_nothing_is_warmed_without_a_dynamo_task_or_with_sharing_off(monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    ts = types.SimpleNamespace(exporter="torchscript", items=[types.SimpleNamespace(opset=17)])
    dyn = types.SimpleNamespace(exporter="dynamo", items=[types.SimpleNamespace(opset=17)])
    assert _warm_server([ts], True, lines.append) == ()
    assert _warm_server([dyn], False, lines.append) == ()
    assert lines == []
    import os

    assert _warm.ENV not in os.environ
    assert _warm_server([dyn, ts], True, lines.append) == ("harness.export._warm",)
    assert os.environ[_warm.ENV] == "17" and _warm.registry_opsets([17, 23]) == [18, 23]
    monkeypatch.delenv(_warm.ENV)


def test_the_shared_registry_is_the_one_a_plain_call_builds() -> None:
    """In this process (as in the fork server): after :func:`warm`, ``from_torchlib`` hands the prebuilt registry of
    an opset it was asked for, holding what a fresh build holds, and builds any other opset afresh."""
    from torch.onnx._internal.exporter import _registration

    original = _registration.ONNXRegistry.__dict__["from_torchlib"]
    try:
        fresh = _registration.ONNXRegistry.from_torchlib(opset_version=20)
        assert _warm.warm([20]).startswith("warm; registry shared for opset 20")
        shared = _registration.ONNXRegistry.from_torchlib(opset_version=20)
        assert shared is _registration.ONNXRegistry.from_torchlib(opset_version=20)
        assert shared.opset_version == fresh.opset_version == 20
        assert {str(k) for k in shared.functions} == {str(k) for k in fresh.functions}
        assert _registration.ONNXRegistry.from_torchlib(opset_version=22) is not shared
    finally:
        _registration.ONNXRegistry.from_torchlib = original


TASKS = '''
import os
import signal

import torch
from harness.cases.corpus import Case, randn, register

_EXPORTS = [0]


class SecondExportCrashes(torch.nn.Module):
    """Dies by SIGSEGV in the second export of its process (the first of a fresh one passes)."""

    def forward(self, x):
        if torch.onnx.is_in_onnx_export():
            _EXPORTS[0] += 1
            if _EXPORTS[0] == 2:
                os.kill(os.getpid(), signal.SIGSEGV)
        return x * 2


class CountsCalls(torch.nn.Module):
    """Adds one to a buffer in place on every run: a trace changes the model it exports."""

    def __init__(self):
        super().__init__()
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return x + self.calls


register(Case(name="second_export_crashes", model=SecondExportCrashes, inputs=lambda: {"x": randn(2, 3)},
              exporters=("torchscript",), skip_reason="the crash is TorchScript's"))
register(Case(name="counts_calls", model=CountsCalls, inputs=lambda: {"x": randn(2, 3)}))
'''


Exported = tuple[dict[str, ExportRecord], list[str], dict[str, bytes | None]]
"""An export's records by artifact id, the lines it said, each artifact's model.onnx (None: none written)."""


@pytest.fixture(scope="module")
def tasks(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, Exported]:
    """:data:`TASKS` exported once shared and once with ``share`` off, for every test below."""
    tmp = tmp_path_factory.mktemp("tasks")
    return {share: _tasks(tmp, share) for share in (True, False)}


def _tasks(tmp_path: Path, share: bool) -> Exported:
    from harness.config.matrix import Profile, load
    from harness.export.stage import export_all

    matrix = load(ROOT / "matrix.toml")
    profile = Profile("tasks", (matrix.runtimes[-1],), ("cpu",), ("torchscript", "dynamo"), (13, 17, 20))
    source = tmp_path / "task_cases.py"
    source.write_text(TASKS, encoding="utf-8")
    out = tmp_path / ("shared" if share else "plain")
    lines: list[str] = []
    records, problems = export_all(
        matrix, profile, [str(source)], out, root=ROOT, share=share, echo=lines.append, echo_error=lines.append
    )
    assert problems == []
    models = {r.key.id: _read(out / "artifacts" / r.key.id / MODEL) for r in records}
    return {r.key.id: r for r in records}, lines, models


def _read(path: Path) -> bytes | None:
    return path.read_bytes() if path.exists() else None


def test_a_task_that_dies_part_way_costs_the_artifact_it_was_on_and_the_rest_are_exported_alone(
    tasks: dict[bool, Exported],
) -> None:
    shared, lines, _ = tasks[True]
    crashed = [shared[f"second_export_crashes.torchscript.op{o}"] for o in (13, 17, 20)]
    assert [(r.ok, r.error_class) for r in crashed] == [(True, None), (False, "ExporterCrash"), (True, None)]
    assert "SIGSEGV during the torchscript exporter" in (crashed[1].error_line or ""), crashed[1].error_line
    assert any("artifacts again, each in a process of its own" in line for line in lines), lines
    plain, _, _ = tasks[False]
    assert all(plain[f"second_export_crashes.torchscript.op{o}"].ok for o in (13, 17, 20))  # each its own process


def test_an_export_that_changes_the_model_stops_the_sharing_and_changes_no_artifact(tasks: dict[bool, Exported]) -> None:
    (shared, _, shared_models), (plain, _, plain_models) = tasks[True], tasks[False]
    ids = [k for k in shared if k.startswith("counts_calls.")]
    assert len(ids) == 6 and all(shared[k].ok for k in ids), {k: shared[k].error_line for k in ids}
    for k in ids:
        assert shared_models[k] == plain_models[k] and shared_models[k] is not None, k
        assert shared[k].warnings == plain[k].warnings and shared[k].graph == plain[k].graph, k
