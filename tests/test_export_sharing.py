"""The export's shared warm start (harness/export/_warm.py, harness/pool/_freeze.py) changes how fast an artifact
comes, never what it is: the same cases exported with it and without it (``harness export --no-share``: a cold process
and a registry of its own per export, as a plain ``torch.onnx.export`` call has) give byte-identical files.

The cases are the ones whose exports are most sensitive to what a process did before (an ``nn.LSTM`` with a dynamic
length fails a second dynamo export in one process; a custom ``torch.library`` op registered by the corpus; attention
and a data-dependent branch), at an opset dynamo rewrites (17: built at 18, converted down) and at two it writes."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from harness.build.layout import MODEL, RECORD
from harness.export import _warm
from harness.export.stage import _warm_server

pytestmark = pytest.mark.torch  # real exports with torch: `nox -s tests`, not `nox -s unit`

ROOT = Path(__file__).resolve().parent.parent
CASES = "frozen_batch,lstm_h0_omitted,custom_library_op,sdpa_enable_gqa,data_dependent_branch"


def _export(tmp_path: Path, name: str, *extra: str) -> dict[str, tuple[bytes | None, dict]]:
    out = tmp_path / name
    matrix = tmp_path / "matrix.toml"
    if not matrix.exists():  # the project's matrix with one more profile: dynamo at 17, 18, 23 and TorchScript at 17
        text = (ROOT / "matrix.toml").read_text(encoding="utf-8")
        text += '\n[profiles.sharing]\nruntimes = ["onnxruntime==1.32.0"]\nproviders = ["cpu"]\n'
        text += 'exporters = ["torchscript", "dynamo"]\nopsets = { torchscript = [17], dynamo = [17, 18, 23] }\n'
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
    assert shared.keys() == plain.keys() and len(shared) == 20
    written = [k for k, (model, _) in shared.items() if model is not None and ".dynamo." in k]
    assert len(written) >= 8, "too few dynamo exports succeeded for the comparison to mean anything"
    for key, (model, record) in shared.items():
        other_model, other = plain[key]
        assert model == other_model, f"{key}: the shared warm start changed the exported file"
        for field in ("ok", "error_class", "error_line", "sha256", "opset_actual", "ir_version", "graph", "checker"):
            assert record.get(field) == other.get(field), f"{key}: {field} differs"
        assert [w["message"] for w in record["warnings"]] == [w["message"] for w in other["warnings"]], key
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
    task = types.SimpleNamespace(exporter="dynamo", opset=20)
    monkeypatch.delenv(_warm.ENV, raising=False)
    assert _warm_server([task], True, lines.append) == ("harness.export._warm",)  # the public warm-up still runs
    assert len(lines) == 1 and "builds its own operator registry" in lines[0] and "from_torchlib" in lines[0]
    monkeypatch.delenv(_warm.ENV, raising=False)


def test_nothing_is_warmed_without_a_dynamo_task_or_with_sharing_off(monkeypatch: pytest.MonkeyPatch) -> None:
    lines: list[str] = []
    ts = types.SimpleNamespace(exporter="torchscript", opset=17)
    dyn = types.SimpleNamespace(exporter="dynamo", opset=17)
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
