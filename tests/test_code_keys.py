"""Cache keys follow the code that runs (:mod:`harness.store.code`): an edit moves exactly the keys of what imports it.

Each test edits a copy of the package (a statement that does something, not a comment) and computes, in this
process over the copy's folder, every key the edit could move: the export's code, each runtime kind's run code,
the report's.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from harness.config import runtimes
from harness.config.matrix import load
from harness.store import cache, code, stamps

ROOT = Path(__file__).resolve().parent.parent
MATRIX = load(ROOT / "matrix.toml")
NEW = dataclasses.replace(runtimes.KINDS[0], package="newkind", backend="harness.run.backends.newkind:New")
"""A runtime kind that exists only in these tests, with a backend of its own."""

NEW_BACKEND = '"""A runtime kind added by a test."""\n\n\nclass New:\n    name = "new"\n'


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """A copy of the harness package, with one more backend (a kind that exists only in this test)."""
    shutil.copytree(ROOT / "harness", tmp_path / "harness", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "harness" / "run" / "backends" / "newkind.py").write_text(NEW_BACKEND)
    return tmp_path


def _keys(root: Path) -> dict[str, str]:
    """Every key an edit of the copy at ``root`` could move, from its files as they are now."""
    package = root / "harness"
    keys = {"export": stamps.export_code(package), "report": cache.code_digest(stamps.report_code(package), package)}
    for kind in runtimes.KINDS:
        rt = next(r for r in MATRIX.runtimes if r.kind is kind)
        keys[kind.package] = stamps.run_code(rt, package)
    keys["newkind"] = code.digest(code.run_files(NEW.backend, package), package)
    return keys


def _edit(root: Path, rel: str) -> None:
    """A change to what a module does (a new module-level binding), as any real edit would be."""
    path = root / "harness" / rel
    path.write_text(path.read_text() + "\n_EDITED_BY_TEST = 1\n")


def _moved(root: Path, rel: str) -> set[str]:
    before = _keys(root)
    _edit(root, rel)
    after = _keys(root)
    return {k for k in before if before[k] != after[k]}


ORT = {k.package for k in runtimes.KINDS if k.backend == runtimes.KINDS[0].backend}
"""The kinds onnxruntime's backend runs (onnxruntime, -gpu, -openvino)."""
ALL_RUN = {k.package for k in runtimes.KINDS} | {"newkind"}


def test_an_edit_of_the_worker_pool_moves_every_run_key_and_the_export_key(package: Path) -> None:
    """The pool decides crash and timeout outcomes for cells and exports alike: once missing from the hand-kept list."""
    assert _moved(package, "pool/workers.py") == {"export", "report", *ALL_RUN}


@pytest.mark.parametrize("rel", ["pool/_forkserver.py", "run/envprobe.py", "store/cache.py", "run/_dispatch.py"])
def test_an_edit_of_any_module_the_run_stage_imports_moves_every_run_key(package: Path, rel: str) -> None:
    """``_forkserver`` is named only in a string (the pool preloads it): the graph follows that too."""
    assert _moved(package, rel) >= ALL_RUN


@pytest.mark.parametrize("rel", ["publish/report.py", "publish/markdown.py", "answer/recommend.py", "cli.py"])
def test_an_edit_of_a_module_only_the_report_or_the_command_line_runs_moves_no_artifact_or_cell_key(
    package: Path, rel: str
) -> None:
    assert _moved(package, rel) == {"report"}


def test_an_edit_of_one_backend_moves_only_the_cells_of_its_own_kinds(package: Path) -> None:
    assert _moved(package, "run/backends/tensorrt.py") == {"tensorrt", "report"}


def test_a_new_kinds_backend_edit_moves_only_its_own_cells(package: Path) -> None:
    """A kind added to the registry gets its backend's code from its ``backend``, never a default."""
    assert _moved(package, "run/backends/newkind.py") == {"newkind", "report"}


def test_an_edit_of_the_onnxruntime_backend_moves_the_kinds_it_runs_and_no_other(package: Path) -> None:
    assert _moved(package, "run/backends/onnxruntime.py") == {*ORT, "report"}


def test_an_edit_of_export_code_moves_the_export_key_and_no_cell_key(package: Path) -> None:
    assert _moved(package, "export/_exporters.py") == {"export", "report"}


def test_a_docstring_or_a_comment_moves_no_key(package: Path) -> None:
    path = package / "harness" / "pool" / "workers.py"
    before = _keys(package)
    path.write_text(path.read_text().replace('"""Worker processes', '"""Processes', 1) + "\n# a comment\n")
    assert _keys(package) == before


def test_no_hand_kept_list_is_left() -> None:
    """The keys' files are computed; a module the run stage never imports is not in its key."""
    run = code.run_files(runtimes.KINDS[0].backend)
    assert "pool/workers.py" in run and "pool/_forkserver.py" in run and "run/envprobe.py" in run
    assert not any(f.startswith(("publish/", "answer/", "export/", "cases/")) or f == "cli.py" for f in run)
    assert "run/backends/tensorrt.py" not in run
