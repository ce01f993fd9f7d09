"""The registry (harness/config/runtimes.py): one entry per runtime kind and provider, and every module reads it."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from harness.config import runtimes
from harness.config.matrix import load
from harness.store import stamps

ROOT = Path(__file__).resolve().parent.parent
MATRIX = load(ROOT / "matrix.toml")


def test_every_kind_is_whole_and_told_apart() -> None:
    prefixes = [k.id_prefix for k in runtimes.KINDS]
    labels = [k.label for k in runtimes.KINDS]
    assert len(set(prefixes)) == len(prefixes) and len(set(labels)) == len(labels)
    for k in runtimes.KINDS:
        assert all(p in runtimes.provider_names() for p in k.providers), k.package
        assert k.releases and list(k.releases) == sorted(k.releases, key=lambda v: tuple(int(x) for x in v.split("."))), k.package
        module, _, cls = k.backend.partition(":")
        path = ROOT / (module.replace(".", "/") + ".py")
        assert cls in {n.name for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)}, k.backend
        assert runtimes.by_prefix(k.id_prefix) is k
    assert {k.package for k in runtimes.KINDS} == {rt.package for rt in MATRIX.runtimes}  # each kind is declared in matrix.toml


def test_a_release_built_only_for_older_pythons_is_reproduced_on_the_python_its_wheels_stop_at() -> None:
    ort = runtimes.kind("onnxruntime")
    assert not set(ort.older) & set(ort.releases)  # older: no CPython 3.11 wheel; releases: one
    for version, (low, high) in ort.older.items():
        assert (3, 6) <= tuple(map(int, low.split("."))) <= tuple(map(int, high.split("."))) <= (3, 10), version
    assert ort.pip("onnxruntime==1.12.1") == "python3.10 -m pip" and ort.pip("onnxruntime==1.17.3") == "pip"
    install, command = ort.reproduce("onnxruntime==1.11.1", "cpu", ("numpy<2",), "results/x/")
    assert install == ("onnxruntime==1.11.1", "numpy<2") and command == "python3.9 results/x/repro.py"
    assert ort.reproduce("onnxruntime==1.17.3", "cpu", ("numpy<2",))[1] == "python repro.py"


def test_columns_and_labels() -> None:
    assert runtimes.split_column("tensorrt-fp16") == ("tensorrt", "fp16") and runtimes.column("cuda") == "cuda"
    assert runtimes.kind("onnxruntime-gpu").columns() == ("cpu", "cuda", "tensorrt", "tensorrt-fp16")
    assert runtimes.label("onnxruntime==1.20.1") == "1.20.1"
    assert runtimes.label("onnxruntime-gpu==1.31.1") == "gpu-1.31.1"
    assert runtimes.label("somethingelse==2.0") == "somethingelse-2.0"  # a table from elsewhere still labels
    assert runtimes.provider("tensorrt-fp16").ep == "TensorrtExecutionProvider"
    with pytest.raises(KeyError):
        runtimes.provider("nope")


def test_each_kind_reproduces_its_own_way() -> None:
    ort = runtimes.kind("onnxruntime")
    assert ort.reproduce("onnxruntime==1.17.3", "cpu", ("numpy<2",)) == (("onnxruntime==1.17.3", "numpy<2"), "python repro.py")
    gpu = runtimes.kind("onnxruntime-gpu")
    assert gpu.reproduce("onnxruntime-gpu==1.31.1", "cuda", (), "x/") == (
        ("onnxruntime-gpu==1.31.1", "numpy"),
        "python x/repro.py --provider cuda",
    )
    trt = runtimes.kind("tensorrt")
    assert trt.reproduce("tensorrt==10.13.3.9", "tensorrt-fp16") == (
        ("tensorrt==10.13.3.9", "polygraphy"),
        "polygraphy run model.onnx --trt --fp16",
    )
    columns = runtimes.reproducer_columns("onnxruntime")
    assert columns["tensorrt-fp16"] == ("TensorrtExecutionProvider", {"trt_fp16_enable": True})
    assert "cpu" in columns and all(c in columns for k in runtimes.KINDS if k.reproducer == "onnxruntime" for c in k.columns())


def test_a_cells_key_names_its_own_registry_entries_only() -> None:
    """Adding a kind, or a release to one, reruns no cell of another: the settings in a cell's key hold its own
    kind's entry (its releases aside) and its column's provider, nothing else of the registry."""
    rt = MATRIX.runtime("onnxruntime==1.32.0")
    settings = stamps.run_settings(MATRIX, "cpu", rt)
    kind = {k: v for k, v in dataclasses.asdict(rt.kind).items() if k != "releases"}
    assert settings["registry"] == {"kind": kind, "provider": dataclasses.asdict(runtimes.provider("cpu"))}
    assert "options" not in settings  # the CPU provider takes none
    code = stamps.run_code(rt)
    assert code == stamps.run_code(MATRIX.runtime("onnxruntime==1.20.1"))  # one backend, one code key
    assert code != stamps.run_code(next(r for r in MATRIX.runtimes if r.package == "tensorrt"))


def test_no_module_keeps_a_table_of_runtimes_or_providers() -> None:
    """The knowledge lives in the registry: no other module names an execution provider, tests a package by name
    or keeps a map of session-id prefixes."""
    allowed = {"runtimes.py"}
    pattern = re.compile(r"[A-Z][a-z]+ExecutionProvider\b|package\s*==\s*\"|\"(ort|ortgpu|trt)\":|startswith\(\(\"ort-\"")
    found = []
    for path in sorted((ROOT / "harness").rglob("*.py")):
        if path.name in allowed:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if pattern.search(code) and '"""' not in line and "``" not in line:
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "\n".join(found)
