"""A publication is one unit (issue 26): a reader of results/ sees the whole previous report or the whole new one.

Real `harness report` processes over real builds (tests/artifacts.py's ONNX models, run by the real run
stage): a SIGKILL at chosen instants inside the commit, a swap the kernel refuses (an immutable folder),
the fallback of two renames killed between them, a folder that is not a report, an artifact edited in place
with its modification time put back, a profile published inside another.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.answer import published
from harness.publish import staged
from harness.store import lock
from tests.artifacts import fault_corpus
from tests.test_reliability import PROFILE, ROOT, _files, _matrix, _one_line, _report, _run

pytestmark = pytest.mark.slow  # seconds a test: `nox -s tests` runs them, `nox -s unit` leaves them out

NESTED = "nested"
"""A profile published inside the results folder (as results/openvino/ is), with many files: carrying it over
by hard links takes long enough for a test to stop the report inside its commit."""


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two run builds (A: two cases; B: one, so B's report drops A's case pages and reproducers) and a folder
    holding A's published report with a profile published inside it."""
    tmp = tmp_path_factory.mktemp("publish")
    matrix = _matrix(tmp)
    paths = {"matrix": matrix.path, "a": tmp / "a", "b": tmp / "b", "published": tmp / "published" / "results"}
    fault_corpus(paths["a"], only=["add_one", "div_int_min"])
    fault_corpus(paths["b"], only=["add_one"])
    for out in (paths["a"], paths["b"]):
        assert (proc := _run(matrix, out)).returncode == 0, proc.stderr
    assert (proc := _report(matrix, paths["a"], paths["published"])).returncode == 0, proc.stderr
    nested = paths["published"] / NESTED
    shutil.copytree(paths["published"], nested, ignore=shutil.ignore_patterns(".harness*", NESTED))
    for i in range(4000):  # hard-linking these takes a while on any machine
        (nested / "repro" / f"f{i // 100}").mkdir(parents=True, exist_ok=True)
        (nested / "repro" / f"f{i // 100}" / f"{i}.pb").write_bytes(b"x")
    return paths


def _tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` but the lock files (a report takes its folder's lock before it looks at it)."""
    return {k: v for k, v in _files(folder).items() if not Path(k).name.startswith(".harness")}


def _results(builds: dict[str, Path], tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A copy of A's published folder (the previous report), and its files."""
    results = tmp_path / "results"
    shutil.copytree(builds["published"], results, ignore=shutil.ignore_patterns(".harness*"))
    return results, _tree(results)


def _report_of(builds: dict[str, Path], build: str, results: Path, **popen: object) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "harness", "report", "--matrix", str(builds["matrix"]), "--profile", PROFILE]
    return subprocess.Popen(
        [*cmd, "--out", str(builds[build]), "--results", str(results)], cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, **popen,  # type: ignore[call-overload]
    )  # fmt: skip


def _whole(results: Path, before: dict[str, bytes]) -> str:
    """``"previous"`` when ``results`` is exactly the report before, ``"new"`` when every file is B's (A's second
    case in none of them, B's table, B's set of files); a torn folder fails the test."""
    now = _tree(results)
    if now == before:
        return "previous"
    assert "div_int_min" not in now["matrix.jsonl"].decode(), "a new README beside the old table"
    stale = sorted(name for name, data in now.items() if b"div_int_min" in data and not name.startswith(f"{NESTED}/"))
    assert not stale, f"torn: files of the previous report beside the new table: {stale}"
    assert not any(name.startswith(("cases/div_int_min", "repro/div_int_min")) for name in now)
    assert {n for n in now if n.startswith(f"{NESTED}/")} == {n for n in before if n.startswith(f"{NESTED}/")}
    return "new"


def _kill_when(proc: subprocess.Popen[str], ready: Callable[[], bool], limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while not ready():
        assert proc.poll() is None, f"the report ended before the instant to stop it: {proc.communicate()}"
        assert time.monotonic() < deadline
        time.sleep(0.0005)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()


def _done(proc: subprocess.Popen[str]) -> None:
    err = proc.communicate()[1]
    assert proc.returncode == 0, err


def _leftovers(results: Path) -> list[str]:
    return sorted(p.name for p in results.parent.iterdir() if p.name.endswith(".tmp"))


def test_a_sigkill_inside_the_commit_leaves_the_whole_previous_or_the_whole_new_report(
    builds: dict[str, Path], tmp_path: Path
) -> None:
    """Issue 26, finding 1: a SIGKILL during the renames left a new README and page beside old case pages."""
    results, before = _results(builds, tmp_path)
    # While the profile published inside is carried over into the new folder: before the swap.
    proc = _report_of(builds, "b", results)
    _kill_when(proc, lambda: any(results.parent.glob(f".results.{proc.pid}.publish.tmp/{NESTED}/repro/f1")))
    assert _whole(results, before) == "previous"
    assert _leftovers(results) == [f".results.{proc.pid}.publish.tmp"]

    # Right after the swap, while the previous folder is being removed.
    proc = _report_of(builds, "b", results)
    _kill_when(proc, lambda: b"div_int_min" not in (results / "matrix.jsonl").read_bytes())
    assert _whole(results, before) == "new"
    new = _tree(results)

    # The next report removes what the killed ones left, and publishes whole.
    proc = _report_of(builds, "b", results)
    _done(proc)
    assert _leftovers(results) == []
    assert _whole(results, before) == "new" and _tree(results).keys() == new.keys()


def test_sigkills_at_any_instant_never_leave_a_torn_folder(builds: dict[str, Path], tmp_path: Path) -> None:
    results, before = _results(builds, tmp_path)
    start = time.monotonic()
    proc = _report_of(builds, "b", results)
    _done(proc)
    took = time.monotonic() - start
    seen = set()
    for k in range(1, 8):  # instants spread over the whole report, the last ones past its end
        results, before = _results(builds, tmp_path / str(k))
        proc = _report_of(builds, "b", results)
        time.sleep(took * (0.55 + 0.07 * k))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        seen.add(_whole(results, before))
    assert seen <= {"previous", "new"}


def test_without_an_exchange_a_kill_between_the_two_renames_is_put_back(builds: dict[str, Path], tmp_path: Path) -> None:
    """Where the file system cannot swap two names, the previous folder is moved aside first: a kill then leaves
    no results/ at all (never a torn one), and the next writer puts the previous one back."""
    results, before = _results(builds, tmp_path)
    script = (
        "import os, signal, sys\n"
        "from harness import cli\nfrom harness.publish import staged\n"
        "staged.exchange = lambda a, b: False\n"
        "real = os.rename\n"
        "def rename(src, dst):\n"
        "    real(src, dst)\n"
        "    if str(dst).endswith('previous.tmp'):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "os.rename = rename\n"
        "sys.exit(cli.main(sys.argv[1:]))\n"
    )
    cmd = ["report", "--matrix", str(builds["matrix"]), "--profile", PROFILE, "--out", str(builds["b"])]
    proc = subprocess.run([sys.executable, "-c", script, *cmd, "--results", str(results)], cwd=ROOT, capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    (moved,) = [p for p in _leftovers(results) if p.endswith(".previous.tmp")]
    assert not results.exists()
    aside = tmp_path / "aside"
    shutil.copytree(results.parent / moved, aside / moved)
    assert staged.recover(aside / "results") == [
        f"{aside / 'results'}: put back the previous report, which a publication killed part-way had moved aside"
    ]
    assert _tree(aside / "results") == before and _leftovers(aside / "results") == []

    # The next report takes the folder's lock (which makes the folder anew) before it puts the previous one back.
    report = [*cmd, "--results", str(results)]
    proc = subprocess.run([sys.executable, "-m", "harness", *report], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "put back the previous report" in proc.stderr
    assert _whole(results, before) == "new" and _leftovers(results) == []

    # The two renames, not killed: the new report, and nothing left beside it.
    results, before = _results(builds, tmp_path / "again")
    unkilled = script.replace("os.kill(os.getpid(), signal.SIGKILL)", "pass")
    report = [*cmd, "--results", str(results)]
    proc = subprocess.run([sys.executable, "-c", unkilled, *report], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert _whole(results, before) == "new" and _leftovers(results) == []


def _chattr(flag: str, path: Path) -> None:
    subprocess.run(["chattr", flag, str(path)], check=True, capture_output=True)


@pytest.fixture
def immutable() -> Iterator[Callable[[Path], None]]:
    """Make a path immutable (``chattr +i``: the kernel refuses to rename or remove it), undone afterwards."""
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        pytest.skip("chattr +i needs root and e2fsprogs' chattr")
    made: list[Path] = []

    def make(path: Path) -> None:
        try:
            _chattr("+i", path)
        except subprocess.CalledProcessError as exc:
            pytest.skip(f"this file system takes no immutable flag: {exc.stderr.strip()}")
        made.append(path)

    yield make
    for path in made:
        for p in (path, *path.parent.parent.glob(f".{path.parent.name}.*.tmp/{path.name}")):
            subprocess.run(["chattr", "-i", str(p)], capture_output=True)


def test_a_swap_the_kernel_refuses_leaves_the_previous_report_whole(
    builds: dict[str, Path], tmp_path: Path, immutable: Callable[[Path], None]
) -> None:
    """Issue 26, finding 1: with chattr +i on a published file, the report said "left as it was" while
    matrix.jsonl, cases.json and history.jsonl were already replaced."""
    results, before = _results(builds, tmp_path)
    lock.acquire(results, "made before the folder is frozen").release()  # the report's lock files exist
    before = _tree(results)
    immutable(results)  # the folder cannot be renamed: the swap itself is refused
    line = _one_line(_report(_matrix(tmp_path), builds["b"], results))
    assert f"cannot write {results}: Operation not permitted" in line and "the previous report is left as it was" in line
    assert _tree(results) == before and _leftovers(results) == []


def test_a_published_file_the_kernel_will_not_remove_costs_only_its_removal(
    builds: dict[str, Path], tmp_path: Path, immutable: Callable[[Path], None]
) -> None:
    results, before = _results(builds, tmp_path)
    immutable(results / "index.html")
    proc = _report(_matrix(tmp_path), builds["b"], results)
    assert proc.returncode == 0, proc.stderr
    assert _whole(results, before) == "new"
    assert "the previous report, moved to" in proc.stderr and "remove it by hand" in proc.stderr
    (left,) = _leftovers(results)
    # Issue 40: "the next report removes it" was untrue while the file stayed immutable: each next report says it
    # still cannot, and removes it once it can.
    again = _report(_matrix(tmp_path), builds["b"], results)
    assert again.returncode == 0 and f"{left}: left by an earlier publication" in again.stderr
    assert "cannot be removed" in again.stderr and _leftovers(results) == [left]
    _chattr("-i", results.parent / left / "index.html")
    assert _report(_matrix(tmp_path), builds["b"], results).returncode == 0
    assert _leftovers(results) == []


@pytest.mark.parametrize("what", ["the project's root", "a build folder", "documents", "report files without a table"])
def test_a_folder_that_is_not_a_report_is_refused_and_left_as_it_is(builds: dict[str, Path], tmp_path: Path, what: str) -> None:
    """Issue 26, finding 5: `harness report --results .` overwrote the project's README.md and spread the
    report over the repository's root."""
    folder = tmp_path / "target"
    if what == "the project's root":
        shutil.copytree(ROOT, folder, ignore=shutil.ignore_patterns(".git", ".nox", "build", "results", ".*cache*", "*.lock"))
    elif what == "a build folder":
        shutil.copytree(builds["b"], folder, ignore=shutil.ignore_patterns("*.lock"))
    else:
        folder.mkdir()
        (folder / "README.md").write_text("mine\n")
        if what == "documents":
            (folder / "notes.txt").write_text("mine too\n")
    before = _tree(folder)
    line = _one_line(_report(_matrix(tmp_path), builds["b"], folder))
    assert f"not writing into {folder}" in line and "not a results folder" in line
    assert _tree(folder) == before and _leftovers(folder) == []


def test_report_alone_refuses_an_artifact_edited_in_place_with_its_mtime_put_back(
    builds: dict[str, Path], tmp_path: Path
) -> None:
    """Issue 26, finding 3: a rewritten reference.npz reached the published reproducer with exit 0."""
    build = tmp_path / "b"
    shutil.copytree(builds["b"], build, ignore=shutil.ignore_patterns("*.lock"))
    results, before = _results(builds, tmp_path)
    reference = next(build.glob("artifacts/*/reference.npz"))
    st = reference.stat()
    data = bytearray(reference.read_bytes())
    data[-30] ^= 0xFF
    with open(reference, "r+b") as f:  # in place: the same inode, the same size
        f.write(bytes(data))
    os.utime(reference, ns=(st.st_atime_ns, st.st_mtime_ns))
    line = _one_line(_report(_matrix(tmp_path), build, results))
    assert f"{reference.parent.name}: reference.npz differs from its recorded hash" in line and "nox -s matrix" in line
    assert _tree(results) == before


def test_a_profile_published_inside_is_carried_over_whole_and_kept_still(builds: dict[str, Path], tmp_path: Path) -> None:
    results, before = _results(builds, tmp_path)
    inside = {k: v for k, v in before.items() if k.startswith(f"{NESTED}/")}
    holder = lock.acquire(results / NESTED, "a report of the nested profile")
    try:
        line = _one_line(_report(_matrix(tmp_path), builds["b"], results))
        assert f"{results / NESTED} is in use by PID {os.getpid()}" in line
        assert _tree(results) == before and _leftovers(results) == []
    finally:
        holder.release()
    assert (proc := _report(_matrix(tmp_path), builds["b"], results)).returncode == 0, proc.stderr
    assert {k: v for k, v in _tree(results).items() if k.startswith(f"{NESTED}/")} == inside


def test_a_report_writes_only_the_names_a_next_report_replaces(builds: dict[str, Path], tmp_path: Path) -> None:
    """published.REPORT_FILES is what a report owns in its folder: a name the report writes outside it would be
    taken for something else's, and the next report would refuse the folder."""
    results = tmp_path / "fresh"
    assert (proc := _report(_matrix(tmp_path), builds["a"], results)).returncode == 0, proc.stderr
    written = {p.name for p in results.iterdir()} - published.KEPT
    assert written <= published.REPORT_FILES and {"matrix.jsonl", "README.md", "repro", "cases"} <= written
    assert published.kept(results) == sorted(n for n in (lock.NAME, lock.STAGE) if (results / n).exists())
