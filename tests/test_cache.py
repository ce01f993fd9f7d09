"""Content-addressed caching (harness.store.cache, harness.store.plan) on real exports and the real runtime.

A rerun with nothing changed exports nothing and runs nothing; a changed case
redoes its own artifacts and cells and no other; a damaged cache entry or
shard line is found by its hash and redone, never trusted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnxruntime
import pytest

from harness.cases import corpus
from harness.cases.source import case_digest
from harness.config.matrix import Profile, load
from harness.core.records import Status
from harness.export.stage import export_all
from harness.run.stage import run_runtime
from harness.store import cache, layout, plan
from harness.store.layout import EXPORT_STAMP as STAMP
from harness.store.layout import STORE, load_artifacts, read_shard, shard_path, stamp_path

pytestmark = pytest.mark.torch  # exports with real torch: `nox -s tests`, not `nox -s unit`

ROOT = Path(__file__).resolve().parent.parent
MATRIX = load(ROOT / "matrix.toml")
NEWEST = MATRIX.runtime(onnxruntime.__version__)
PROFILE = Profile("cache-test", (NEWEST,), ("cpu",), ("torchscript",), (18,))

CORPUS = """
import torch
from harness.cases.corpus import Case, randn, register


class Double(torch.nn.Module):
    def forward(self, x):
        return x * 2


class Shift(torch.nn.Module):
    def forward(self, x):
        return x + 1


class Negate(torch.nn.Module):
    def forward(self, x):
        return -x


for name, cls in (("double", Double), ("shift", Shift), ("negate", Negate)):
    register(Case(name=name, model=cls, inputs=lambda: {"x": randn(2, 3)}, dynamic={"x": {0: "batch"}}))
"""


def _digests(sources: list[str], root: Path) -> dict[str, str]:
    registry = corpus.load(sources, root)
    return {c.name: case_digest(c) for c in registry}


def test_a_case_digest_is_the_same_in_a_fresh_process() -> None:
    """No object id, address or hash seed leaks into a key: another process computes the same ones."""
    here = _digests(list(MATRIX.corpus), ROOT)
    code = (
        "import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
        "from tests.test_cache import _digests; from harness.config.matrix import load; "
        "m = load(Path(sys.argv[1]) / 'matrix.toml'); print(json.dumps(_digests(list(m.corpus), Path(sys.argv[1]))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, timeout=300, env={"PYTHONHASHSEED": "12345"}
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    there = json.loads(proc.stdout.strip().splitlines()[-1])
    assert there == here
    assert len(set(here.values())) == len(here), "two cases share a key"


def test_a_case_digest_follows_the_class_a_lazy_factory_builds(tmp_path: Path) -> None:
    """corpus.lazy names its class by string: the key still changes when that class's code does, and
    only for the cases built from it."""
    pkg = tmp_path / "lazycorpus"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    nets = pkg / "_nets.py"
    nets.write_text(
        "import torch\nclass A(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n"
        "class B(torch.nn.Module):\n    def forward(self, x):\n        return x - 1\n"
    )
    (pkg / "cases.py").write_text(
        "from harness.cases.corpus import Case, lazy, randn, register\n"
        "register(Case(name='a', model=lazy('lazycorpus._nets', 'A'), inputs=lambda: {'x': randn(2)}))\n"
        "register(Case(name='b', model=lazy('lazycorpus._nets', 'B'), inputs=lambda: {'x': randn(2)}))\n"
    )
    code = (
        "import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]); "
        "from tests.test_cache import _digests; print(json.dumps(_digests(['lazycorpus.cases'], Path(sys.argv[2]))))"
    )

    def digests() -> dict[str, str]:  # a fresh process each time: nothing cached in sys.modules
        proc = subprocess.run([sys.executable, "-c", code, str(ROOT), str(tmp_path)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    before = digests()
    nets.write_text(nets.read_text().replace("return x * 2", "return x * 3"))
    after = digests()
    assert after["a"] != before["a"]
    assert after["b"] == before["b"]
    nets.write_text(nets.read_text() + "\n\n# a comment and a blank line move no key\n")
    assert digests() == after


def test_seal_finds_a_changed_line_and_a_torn_one() -> None:
    line = cache.seal({"case": "x", "status": "mismatch"})
    assert cache.unseal(line) == ({"case": "x", "status": "mismatch"}, "ok")
    data, state = cache.unseal(line.replace('"mismatch"', '"pass"'))
    assert state == "corrupt" and data is not None and data["status"] == "pass"
    assert cache.unseal(line[: len(line) // 2]) == (None, "torn")
    assert cache.unseal('{"case": "x"}')[1] == "corrupt"  # no checksum at all: not trusted either


def test_the_store_finds_a_damaged_entry_and_prunes_old_versions(tmp_path: Path) -> None:
    store = cache.ExportStore(tmp_path / "store")
    keys = []
    for i in range(5):
        tmp = store.begin(f"k{i}")
        (tmp / "model.onnx").write_bytes(b"model %d" % i)
        store.commit(f"k{i}", "case.torchscript.op18", tmp)
        keys.append(f"k{i}")
    view = tmp_path / "view"
    store.link("k4", view)
    assert store.check("k4") is None and store.linked("k4", view)
    (view / "model.onnx").write_bytes(b"edited in place")  # a hard link: the entry changes with it
    assert "does not match its recorded SHA-256" in (store.check("k4") or "")
    assert store.check("nope") == "not cached"
    assert store.prune(keep={"k0"}, versions=2) == 2  # k4, k3 are the newest two; k0 is kept as asked
    assert sorted(p.name for p in (tmp_path / "store").iterdir()) == ["k0", "k3", "k4"]


def test_a_store_file_is_read_again_only_when_it_was_written_since(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store of real models is gigabytes: a check trusts a file whose size, modification and change time
    and inode are those recorded when it was last hashed (recorded after the store links its views), and
    hashes it again as soon as it was written, even to the same size."""
    store = cache.ExportStore(tmp_path / "store")
    tmp = store.begin("k")
    (tmp / "model.onnx").write_bytes(b"weights " * 1000)
    (tmp / "export.json").write_text("{}")
    store.commit("k", "case.torchscript.op18", tmp)
    store.link("k", tmp_path / "view")
    read: list[str] = []
    real = cache.sha256_file
    monkeypatch.setattr(cache, "sha256_file", lambda path: read.append(str(path)) or real(path))
    assert store.check("k") is None and read == [], "nothing written since it was hashed: nothing read"
    path = tmp_path / "view" / "model.onnx"
    before = path.stat().st_mtime_ns
    path.write_bytes(b"WEIGHTS " * 1000)  # the same size, other bytes
    os.utime(path, ns=(before, before + 1))
    assert "does not match its recorded SHA-256" in (store.check("k") or "") and read


@pytest.fixture()
def user_corpus(tmp_path: Path) -> Path:
    path = tmp_path / "my_cases.py"
    path.write_text(CORPUS)
    return path


def _export(out: Path, source: Path) -> list[str]:
    lines: list[str] = []
    export_all(MATRIX, PROFILE, [str(source)], out, root=ROOT, echo=lines.append, echo_error=lines.append)
    return lines


def _run(out: Path, **kwargs: bool) -> list[str]:
    lines: list[str] = []
    run_runtime(MATRIX, NEWEST, ["cpu"], out, echo=lines.append, **kwargs)
    return lines


def _plan(out: Path, source: Path) -> plan.Plan:
    return plan.plan(MATRIX, PROFILE, out, out / "results", corpus=[str(source)])


def _stats(out: Path) -> dict[str, float]:
    return json.loads(stamp_path(out, NEWEST, "cpu").read_text())["stats"]


def test_rerun_reuses_everything_and_a_change_redoes_only_its_own_case(tmp_path: Path, user_corpus: Path) -> None:
    out = tmp_path / "build"
    first = _export(out, user_corpus)
    assert "export: 3 artifacts, 0 cached, 3 to export" in first
    _run(out)
    assert _stats(out)["ran"] == 6  # 3 artifacts × (example, batch3)
    shard = shard_path(out, NEWEST, "cpu")
    cells = shard.read_text()
    inodes = {p.name: p.stat().st_ino for p in (out / "artifacts").glob("*/model.onnx")}
    step = _plan(out, user_corpus)
    assert step.export is None and not any(step.runs.values()), step.lines()

    # Nothing changed: no export, no cell, the same shard byte for byte.
    assert "export: 3 artifacts, 3 cached, 0 to export" in _export(out, user_corpus)
    assert {p.name: p.stat().st_ino for p in (out / "artifacts").glob("*/model.onnx")} == inodes
    assert any("0 to run" in line for line in _run(out))
    assert _stats(out)["ran"] == 0 and shard.read_text() == cells

    # One case's code changes and another's cache entry is damaged: those two redo, the third is kept.
    user_corpus.write_text(CORPUS.replace("return x * 2", "return x * 3"))
    store = cache.ExportStore(out / STORE)
    shift_key = json.loads((out / "artifacts" / "shift.torchscript.op18" / "export.json").read_text())["cache_key"]
    (store.entry(shift_key) / "reference.npz").write_bytes(b"not what was exported")
    why = _plan(out, user_corpus).export or ""
    assert "my_cases.py changed" in why
    lines = _export(out, user_corpus)
    assert "export: 3 artifacts, 1 cached, 2 to export" in lines
    assert any("shift.torchscript.op18: cache entry" in ln and "does not match its recorded SHA-256" in ln for ln in lines)
    exported = sorted(ln.split()[1] for ln in lines if ln.startswith("export ") and ln.split()[1].endswith(".op18"))
    assert exported == ["double.torchscript.op18", "shift.torchscript.op18"]
    assert store.check(shift_key) is None  # redone, whole again
    _run(out)
    assert _stats(out)["ran"] == 2  # double's two probes; shift re-exported to the same bytes, its cells kept
    after = read_shard(shard)
    assert {c.probe: c.diff is not None for c in after.values() if c.case == "double"} == {"example": True, "batch3": True}
    assert all(c.status.value == "pass" for c in after.values())

    # A shard edited after its run sealed it vouches for nothing: every cell runs again (tests/test_seal.py).
    text = shard.read_text().splitlines()
    i = next(i for i, ln in enumerate(text) if '"case": "negate"' in ln and '"probe": "example"' in ln)
    text[i] = text[i].replace('"seconds": ', '"seconds": 1', 1)
    shard.write_text("\n".join(text) + "\n")
    assert "changed after its run sealed it" in (_plan(out, user_corpus).runs[NEWEST.id] or "")
    assert any("changed after its run sealed it: none of its cells is reused" in ln for ln in _run(out))
    assert _stats(out)["ran"] == 6
    assert _plan(out, user_corpus).runs[NEWEST.id] is None

    # --force ignores the cache.
    _run(out, force=True)
    assert _stats(out)["ran"] == 6


def test_export_keys_change_with_what_the_export_depends_on() -> None:
    settings = {"atol": 1e-4, "versions": {"torch": "2.13.0"}}
    base = cache.export_key("src", "a.torchscript.op18", "torchscript", 18, settings, "code")
    assert cache.export_key("src", "a.torchscript.op18", "torchscript", 18, dict(settings), "code") == base
    assert cache.export_key("src2", "a.torchscript.op18", "torchscript", 18, settings, "code") != base
    assert cache.export_key("src", "a.dynamo.op18", "dynamo", 18, settings, "code") != base
    assert cache.export_key("src", "a.torchscript.op17", "torchscript", 17, settings, "code") != base
    newer = {**settings, "versions": {"torch": "2.14.0"}}
    assert cache.export_key("src", "a.torchscript.op18", "torchscript", 18, newer, "code") != base
    assert cache.export_key("src", "a.torchscript.op18", "torchscript", 18, settings, "other code") != base
    cell = cache.cell_key("digest", ["onnxruntime==1.32.0"], "cpu", "example", {"timeout": 120}, "code")
    assert cache.cell_key("digest", ["onnxruntime==1.31.1"], "cpu", "example", {"timeout": 120}, "code") != cell
    assert cache.cell_key("digest", ["onnxruntime==1.32.0"], "cpu", "batch3", {"timeout": 120}, "code") != cell
    assert cache.cell_key("digest", ["onnxruntime==1.32.0"], "cpu", "example", {"timeout": 60}, "code") != cell
    assert cache.cell_key("digest", ["onnxruntime==1.32.0"], "cpu", "example", {"timeout": 120}, "other code") != cell


def test_the_plan_names_what_changed(tmp_path: Path, user_corpus: Path) -> None:
    out = tmp_path / "build"
    assert _plan(out, user_corpus).export == "no export yet"
    _export(out, user_corpus)
    assert _plan(out, user_corpus).runs[NEWEST.id] == "cpu: not run to the end yet"
    _run(out, latency=False)  # a shard without its timings is whole (sealed), but not up to date
    assert _plan(out, user_corpus).runs[NEWEST.id] == "cpu: its last run skipped the latency phase (--no-latency)"
    assert layout.problem(shard_path(out, NEWEST, "cpu"), NEWEST.pin, "cpu", load_artifacts(out)) is None
    _run(out)
    assert _plan(out, user_corpus).runs[NEWEST.id] is None
    stamp = json.loads((out / STAMP).read_text())
    stamp["inputs"]["settings"]["atol"] = 1.0
    (out / STAMP).write_text(json.dumps(stamp))
    assert "settings changed" in (_plan(out, user_corpus).export or "")


def test_the_environment_probe_is_remembered_per_environment_but_never_a_failure(
    tmp_path: Path, user_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness.run import envprobe

    calls: list[str] = []
    real = envprobe.probe_environment

    def counting(backend: str) -> tuple[dict[str, str] | None, str, str | None]:
        calls.append("probe")
        return real(backend)

    monkeypatch.setattr(envprobe, "probe_environment", counting)
    out = tmp_path / "build"
    _export(out, user_corpus)
    _run(out)
    _run(out)
    assert calls == ["probe"]  # the second run asked no child process
    _run(out, force=True)
    assert calls == ["probe", "probe"]  # --force asks again

    def broken(backend: str) -> tuple[None, str, None]:
        calls.append("broken")
        return None, "onnxruntime fails", None

    monkeypatch.setattr(envprobe, "probe_environment", broken)
    for old in (out / "cache" / "envs").iterdir():
        old.unlink()
    assert any("env-error" in line for line in _run(out))
    assert any("env-error" in line for line in _run(out))
    assert calls.count("broken") == 2  # a broken environment is checked every time


HELPERS = """
import torch


class Net(torch.nn.Module):
    def forward(self, x):
        return x * 2
"""

REFERENCES = """
import functools

import torch

import helpers_mod
from harness.cases.corpus import Case, randn, register


ACT = torch.relu
DT = torch.float32
torch.manual_seed(0)
SHARED = torch.nn.Linear(4, 4)
HALF = torch.ones(2, dtype=torch.bfloat16)


@functools.cache
def scale():
    return 2


class Act(torch.nn.Module):
    def forward(self, x):
        return ACT(x).to(DT) * scale()


def inner():
    from helpers_inner import Net

    return Net()


def _x():
    return {"x": randn(2, 4)}


register(Case(name="by_attribute", model=lambda: helpers_mod.Net(), inputs=_x))
register(Case(name="imported_inside", model=inner, inputs=_x))
register(Case(name="builtin_dtype_cache", model=Act, inputs=_x))
register(Case(name="library_module", model=lambda: SHARED, inputs=_x))
register(Case(name="bfloat16_constant", model=lambda: torch.nn.Identity(), inputs=lambda: {"x": HALF.float()}))
register(Case(name="control", model=lambda: torch.nn.Identity(), inputs=_x))
"""


def test_a_case_digest_sees_modules_imports_builtins_and_library_objects(tmp_path: Path) -> None:
    """What a case reaches other than by a global name of its own file still moves its key: a local
    module used by attribute, a module imported inside the factory, a builtin, a dtype, a cached
    helper, a library module instance. A bfloat16 constant is hashed, not a crash."""
    (tmp_path / "helpers_mod.py").write_text(HELPERS)
    (tmp_path / "helpers_inner.py").write_text(HELPERS)
    (tmp_path / "refs.py").write_text(REFERENCES)
    code = (
        "import json, sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]); "
        "from tests.test_cache import _digests; "
        "print(json.dumps(_digests([str(Path(sys.argv[2]) / 'refs.py')], Path(sys.argv[2]))))"
    )

    def digests() -> dict[str, str]:
        proc = subprocess.run([sys.executable, "-c", code, str(ROOT), str(tmp_path)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    before = digests()
    assert len(before) == 6 and digests() == before  # the same in another process
    (tmp_path / "helpers_mod.py").write_text(HELPERS.replace("x * 2", "x * 3"))
    (tmp_path / "helpers_inner.py").write_text(HELPERS.replace("x * 2", "x * 4"))
    refs = REFERENCES.replace("ACT = torch.relu", "ACT = torch.tanh").replace("return 2", "return 3")
    (tmp_path / "refs.py").write_text(refs.replace("torch.nn.Linear(4, 4)", "torch.nn.Linear(4, 8)"))
    after = digests()
    changed = {name for name in before if before[name] != after[name]}
    assert changed == {"by_attribute", "imported_inside", "builtin_dtype_cache", "library_module"}
    (tmp_path / "refs.py").write_text(
        refs.replace("torch.nn.Linear(4, 4)", "torch.nn.Linear(4, 8)").replace("float32", "float16")
    )
    assert digests()["builtin_dtype_cache"] != after["builtin_dtype_cache"]


def test_the_plan_sees_a_new_probe_file(tmp_path: Path) -> None:
    samples = tmp_path / "samples"
    samples.mkdir()
    import numpy as np

    np.save(samples / "one.npy", np.ones((2, 3), dtype=np.float32))
    source = tmp_path / "with_files.py"
    source.write_text(
        CORPUS.replace('dynamic={"x": {0: "batch"}}', 'dynamic={"x": {0: "batch"}}, probe_files=("samples/*.npy",)')
    )
    out = tmp_path / "build"
    _export(out, source)
    assert _plan(out, source).export is None
    np.save(samples / "two.npy", np.zeros((2, 3), dtype=np.float32))
    assert "probe files" in (_plan(out, source).export or "")


def test_a_bad_probe_file_costs_that_probe_only(tmp_path: Path) -> None:
    """A damaged .npy and a pickled one (which numpy refuses to load) are each one probe with no cells and
    its reason; the case's other probes, the good file's included, are exported and run."""
    import numpy as np

    samples = tmp_path / "samples"
    samples.mkdir()
    np.save(samples / "good.npy", np.ones((2, 3), dtype=np.float32))
    (samples / "broken.npy").write_bytes(b"\x93NUMPY\x01\x00 cut short")
    np.save(samples / "pickled.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    source = tmp_path / "with_files.py"
    source.write_text(
        CORPUS.replace('dynamic={"x": {0: "batch"}}', 'dynamic={"x": {0: "batch"}}, probe_files=("samples/*.npy",)')
    )
    out = tmp_path / "build"
    _export(out, source)
    with_files = [r for r in load_artifacts(out) if "good" in r.probes or r.probe_errors]
    assert with_files, "the case with probe files was exported"
    for rec in with_files:
        assert rec.ok, rec.error_line
        assert "good" in rec.probes and not {"broken", "pickled"} & set(rec.probes)
        assert rec.probe_errors["broken"].startswith("ProbeFileError: broken.npy: ")
        assert "allow_pickle" in rec.probe_errors["pickled"]
    _run(out, latency=False)
    cells = read_shard(shard_path(out, NEWEST, "cpu")).values()
    assert {c.status for c in cells if c.probe == "good"} == {Status.PASS}


def test_a_comment_or_docstring_edit_moves_no_code_key(tmp_path: Path) -> None:
    """Code keys hash what the code does: its syntax tree without docstrings and line numbers."""
    source = tmp_path / "stage.py"

    def digest(text: str) -> str:
        source.write_text(text)
        return cache.source_digest(source)

    base = digest('"""The module."""\n\nLIMIT = 3\n\n\ndef f(x):\n    """Doubles."""\n    return x * 2  # the rule\n')
    same = [
        '"""Another word for it."""\n\nLIMIT = 3\n"""An attribute docstring."""\n\n\n'
        "def f(x):\n    # said here now\n    return x * 2\n",
        "LIMIT = 3\ndef f(x):\n    return x * 2\n",  # no docstrings, no blank lines
    ]
    for text in same:
        assert digest(text) == base, text
    moved = [
        '"""The module."""\n\nLIMIT = 4\n\n\ndef f(x):\n    """Doubles."""\n    return x * 2\n',
        '"""The module."""\n\nLIMIT = 3\n\n\ndef f(x):\n    """Doubles."""\n    return x * 3\n',
        '"""The module."""\n\nLIMIT = "3"\n\n\ndef f(x):\n    """Doubles."""\n    return x * 2\n',  # a string that is a value
    ]
    for text in moved:
        assert digest(text) != base, text
    assert digest("def broken(:\n") != digest("def broken(:\n ")  # a file that does not parse: by its bytes
    html = tmp_path / "page.html"
    html.write_text("<!-- a comment -->")
    assert cache.source_digest(html) == cache.sha256_file(html)


def test_a_profiles_report_stamp_is_its_own(tmp_path: Path) -> None:
    """Two profiles reported from one build folder (the default and openvino, say) each keep their own stamp: reporting
    one leaves the other up to date, and a profile published inside another's folder is not the outer one's output."""
    from harness.store import stamps

    out, results = tmp_path / "build", tmp_path / "results"
    (out / "shards").mkdir(parents=True)
    (out / "manifest.json").write_text("{}")
    (results / "nested").mkdir(parents=True)
    (results / "README.md").write_text("outer")
    other = Profile("other", (NEWEST,), ("cpu",), ("torchscript",), (18,))
    (results / "nested" / "matrix.jsonl").write_text("{}\n")  # another profile's report, published inside this one's
    (results / "nested" / "README.md").write_text("inner")
    stamps.write_report_stamp(out, other, results / "nested", ())
    stamps.write_report_stamp(out, PROFILE, results, ())  # the outer one reads the nested table: reported after it
    assert plan._report_why(out, PROFILE, results, ()) is None
    stamps.write_report_stamp(out, other, results / "nested", ())  # the nested one's stamp is not the outer's input
    assert plan._report_why(out, PROFILE, results, ()) is None
    assert plan._report_why(out, other, results / "nested", ()) is None
    assert sorted(p.name for p in out.glob("report.*.stamp.json")) == ["report.cache-test.stamp.json", "report.other.stamp.json"]
    (results / "README.md").write_text("edited")
    assert "differs from what the report wrote" in (plan._report_why(out, PROFILE, results, ()) or "")
