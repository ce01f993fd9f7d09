"""The report's key covers every file it reads (issue 42): found by watching a real report open files, not listed.

A real report runs over a real build (tests/artifacts.py's models, run by the real run stage on this environment's
onnxruntime) with every optional input present (the CUDA reference, the spec's answer, a profile published beside
it), under an audit hook that records each file it opens for reading. Each such file outside what the export's stamp
already vouches for (an artifact's files, by their digests: an edit there is damage the report refuses) and outside
what the report itself writes is then changed, and the report's key must move.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.config.matrix import Matrix
from harness.store import layout, lock, spec, stamps
from tests.artifacts import fault_corpus
from tests.test_reliability import PROFILE, ROOT, _matrix, _run

pytestmark = pytest.mark.slow  # seconds a test: `nox -s tests` runs them, `nox -s unit` leaves them out

_WATCHED = """
import json, os, sys
seen = []
def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
        mode, flags = args[1], args[2]
        writing = (mode and any(c in mode for c in "wax+")) or (isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR))
        if not writing:
            seen.append(os.path.abspath(os.fsdecode(args[0])))
sys.addaudithook(hook)
from harness.cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as f:
    json.dump(seen, f)
sys.exit(code)
"""


def _report_reads(matrix: Matrix, out: Path, results: Path, tmp: Path) -> list[Path]:
    record = tmp / "opened.json"
    args = ["report", "--matrix", str(matrix.path), "--profile", PROFILE, "--out", str(out), "--results", str(results)]
    proc = subprocess.run([sys.executable, "-c", _WATCHED, str(record), *args], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return [Path(p) for p in dict.fromkeys(json.loads(record.read_text()))]


def _key(matrix: Matrix, out: Path, results: Path) -> str:
    profile = matrix.profiles[PROFILE]
    return stamps.report_inputs(out, profile, results, matrix.corpus_of(profile))


def test_every_file_the_report_reads_moves_its_key_when_written(tmp_path: Path) -> None:
    matrix, out, results = _matrix(tmp_path), tmp_path / "build", tmp_path / "results"
    fault_corpus(out, only=["add_one"])
    assert (proc := _run(matrix, out)).returncode == 0, proc.stderr
    (out / layout.CUDA_REFERENCE).write_text("")  # the CUDA reference bench's rows: none, but read
    spec.facts_path(out).write_text("{}")  # the spec's answer: none for these artifacts, but read
    _report_reads(matrix, out, results / "other", tmp_path)  # a report published inside this one's folder
    read = _report_reads(matrix, out, results, tmp_path)
    owned = set(stamps.report_outputs(results))
    vouched = (out / layout.ARTIFACTS, out / layout.STORE)
    inputs = [
        p
        for p in read
        if (out in p.parents or results in p.parents)
        and p not in owned
        and not any(v in p.parents for v in vouched)
        and p.name not in (layout.report_stamp(out, PROFILE).name, lock.NAME, lock.STAGE)
    ]
    assert out / layout.CUDA_REFERENCE in inputs and spec.facts_path(out) in inputs, inputs
    unmoved = []
    for path in inputs:  # an absent one the report looked for: written; a present one: changed
        before = _key(matrix, out, results)
        data = path.read_bytes() if path.exists() else None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes((data or b"") + b" ")
        if _key(matrix, out, results) == before:
            unmoved.append(str(path.relative_to(tmp_path)))
        if data is None:
            path.unlink()
        else:
            path.write_bytes(data)
    assert not unmoved, f"the report reads these, and writing them leaves its key: {unmoved}"
