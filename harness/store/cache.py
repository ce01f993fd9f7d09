"""Content-addressed caching: what a rerun may reuse, and how it knows.

Three things are keyed by the content they depend on, never by a timestamp:

- **An export** (:func:`export_key`): the case's source (:func:`case_digest`: the code of the model,
  its inputs and probes and everything they reach in the user's files), the torch / onnx /
  onnxscript / reference-runtime versions, the exporter, the opset and the export settings, and the
  harness code that exports (:func:`harness.store.code.export_files`). Its files live in :class:`ExportStore`, one folder
  per key, each file's SHA-256 recorded beside them and checked on every use; ``build/artifacts/<id>/``
  is a view of hard links into it.
- **A cell** (:func:`cell_key`): the artifact's digest (model, references, probes, tolerance), the
  runtime's requirements, the provider, the probe, the run settings (timeout, latency protocol) and
  the harness code that runs cells (:func:`harness.store.code.run_files`). Each shard line carries its key and a checksum
  (:func:`seal`); a line whose checksum fails is redone, not trusted.
- **A stage** (:func:`stamp_inputs`, :mod:`harness.store.plan`): what the stage read last time (files and
  their hashes, settings, the environment's package listing) so ``nox -s matrix`` can tell, without
  starting an environment or importing torch, that a stage has nothing to do.

Standard library only: the noxfile reads this module before any environment exists.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent.parent

CACHE_INFO = "cache.json"
CHECKSUM = "checksum"


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def signature(path: str | os.PathLike[str]) -> list[int]:
    """What changes whenever a file's bytes are written: size, modification and change time, inode and device.
    A file whose signature is the one recorded when its hash was last checked need not be read again (a store
    of real models is gigabytes; a warm rerun checks it in milliseconds). The change time is what an edit in
    place that puts the modification time back (``os.utime``, ``touch -d``, a restore) cannot put back; it
    also moves when a hard link is made to the file or the file is renamed or its mode changed, so a
    signature is recorded after the store links its views (:meth:`ExportStore.link`), and otherwise such a
    change costs one more read of the file."""
    st = os.stat(path)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def verify(path: str | os.PathLike[str], sha: str, recorded: Iterable[int] | None = None) -> tuple[bool, list[int]]:
    """Whether ``path`` holds the bytes whose SHA-256 is ``sha``, and its signature now. With the signature
    ``recorded`` when it was last verified, an unchanged file is trusted without being read.

    Raises:
        OSError: the file is missing or unreadable.
    """
    now = signature(path)
    if isinstance(recorded, list) and recorded == now:
        return True, now
    return sha256_file(path) == sha, now


def digest(*parts: Any) -> str:
    """SHA-256 of ``parts`` as canonical JSON."""
    return sha256_bytes(json.dumps(parts, sort_keys=True, default=str, separators=(",", ":")).encode())


def code_digest(names: tuple[str, ...], package: Path = PACKAGE) -> str:
    """Of the harness's own files ``names`` (relative to ``package``, this one unless a test names a copy), by what
    they do (:func:`source_digest`): an edit of a comment or a docstring moves no key, so it reruns no cell and no
    export."""
    return digest(*[(n, source_digest(package / n)) for n in names])


class _Statements(ast.NodeTransformer):
    """Drops every statement that is a bare string (a docstring, an attribute's docstring): it does nothing."""

    def visit_Expr(self, node: ast.Expr) -> ast.AST | None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return None
        return node


def source_digest(path: Path) -> str:
    """A Python file by its syntax tree without docstrings, line numbers or comments (which never reach the
    tree); a file that is not Python (``page.html``), or does not parse, by its bytes. Parsed once per text
    of a file: the keys of every stage (and a test's copy of the package) read the same modules."""
    return _source_digest(path.suffix == ".py", path.read_bytes())


@functools.cache
def _source_digest(python: bool, data: bytes) -> str:
    if not python:
        return sha256_bytes(data)
    try:
        tree = _Statements().visit(ast.parse(data))
    except (SyntaxError, ValueError):
        return sha256_bytes(data)
    return "ast:" + sha256_bytes(ast.dump(tree, include_attributes=False).encode())


def export_key(case_source: str, artifact: str, exporter: str, opset: int, settings: Mapping[str, Any], code: str) -> str:
    """The content address of one export (``settings`` holds the versions and the export settings, ``code`` the
    digest of the harness code that exports: :func:`harness.store.stamps.export_code`)."""
    return digest("export", case_source, artifact, exporter, opset, dict(settings), code)


def cell_key(
    artifact_digest: str, requirements: Iterable[str], column: str, probe: str, settings: Mapping[str, Any], code: str
) -> str:
    """The content address of one cell (``code``: :func:`harness.store.stamps.run_code`)."""
    return digest("cell", artifact_digest, list(requirements), column, probe, dict(settings), code)[:32]


# Shard lines -------------------------------------------------------------


def seal(data: Mapping[str, Any]) -> str:
    """One shard line: ``data`` as sorted JSON plus, as its last key, a checksum of exactly that JSON."""
    assert data and CHECKSUM not in data
    body = json.dumps(data, sort_keys=True)
    return f'{body[:-1]}, "{CHECKSUM}": "{sha256_bytes(body.encode())[:16]}"}}'


def unseal(line: str, *, verify: bool = True) -> tuple[dict[str, Any] | None, str]:
    """``(data, "ok")``; ``(None, "torn")`` for a line a kill cut short; ``(data, "corrupt")`` when the
    checksum is missing or wrong (the line parses but was changed after it was written). Without
    ``verify`` (a reader that reuses nothing) the line is not encoded again to check it: ``"unchecked"``."""
    try:
        data = json.loads(line)
    except ValueError:
        return None, "torn"
    if not isinstance(data, dict):
        return None, "torn"
    check = data.pop(CHECKSUM, None)
    if not verify:
        return data, "unchecked"
    if check != sha256_bytes(json.dumps(data, sort_keys=True).encode())[:16]:
        return data, "corrupt"
    return data, "ok"


# Project files ------------------------------------------------------------

_LIBRARY_DIRS = tuple(
    {str(Path(p).resolve()) for k, p in sysconfig.get_paths().items() if k in ("stdlib", "platstdlib", "purelib", "platlib")}
    | {str(Path(sys.base_prefix).resolve()), str(Path(sys.prefix).resolve())}
)


def is_project_file(path: str | None) -> bool:
    """A Python file of the user's or the harness's (not the standard library, not an installed package)."""
    if not path or not path.endswith(".py") or not os.path.isabs(path) or not os.path.isfile(path):
        return False  # a builtin, or a module with a made-up file name (torch._classes)
    resolved = str(Path(path).resolve())
    return not resolved.startswith(_LIBRARY_DIRS) and "site-packages" not in resolved


@functools.cache
def _temp() -> str:
    """The temporary folder, resolved: asked when first needed (finding it writes a probe file there, which an
    import must not: tests/test_architecture.py)."""
    return str(Path(tempfile.gettempdir()).resolve()) + os.sep


def glob_names(folder: str, pattern: str) -> list[str]:
    """The files ``pattern`` matches under ``folder``, relative and sorted: a new sample file is a change."""
    return sorted(str(p.relative_to(folder)) for p in Path(folder).glob(pattern) if p.is_file())


def probe_files(case: Any) -> list[Path]:
    return [p for pattern in case.probe_files for p in sorted(Path(case.source_dir).glob(pattern)) if p.is_file()]


def project_files(extra: Iterable[str | os.PathLike[str]] = ()) -> dict[str, str]:
    """Path → SHA-256 of every project module imported so far, plus ``extra`` files."""
    files = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
    paths = {str(Path(f).resolve()) for f in files if f is not None and is_project_file(f)}
    # A module imported from the temporary folder is one a library wrote there at import (torch 2.5 writes one per
    # process), gone with the process: no input. A corpus file there counts through ``extra`` (the cases' sources).
    paths = {p for p in paths if not p.startswith(_temp())}
    # The harness's own modules count by code_digest in the keys of what they produce, not here.
    paths = {p for p in paths if not p.startswith(str(PACKAGE) + os.sep)}
    paths |= {str(Path(p).resolve()) for p in extra if os.path.isfile(p)}
    return {p: sha256_file(p) for p in sorted(paths)}


def files_unchanged(files: Mapping[str, str]) -> str | None:
    """None when every file still has its hash, else the first that does not (one line)."""
    for path, sha in files.items():
        try:
            if sha256_file(path) != sha:
                return f"{path} changed"
        except (OSError, ValueError):  # ValueError: a path no file can have (a NUL in a damaged stamp)
            return f"{path} is gone"
    return None


# Environments ---------------------------------------------------------------


def environment(prefix: str | None = None) -> dict[str, Any]:
    """What a stage's environment holds: its prefix, site-packages folders and a digest of their
    package listing (``numpy-2.3.1.dist-info``, ...) plus ``pyvenv.cfg`` (the Python version)."""
    prefix = prefix or sys.prefix
    site = sorted({p for p in sys.path if p.startswith(prefix) and p.rstrip("/").endswith("site-packages")})
    # A platform launcher's wheels for another machine (harness/config/launchers.py) are on PYTHONPATH, not in a prefix.
    site += [p for p in os.environ.get("HARNESS_SITE", "").split(os.pathsep) if p and p not in site]
    return {"prefix": prefix, "site": site, "listing": _listing(prefix, site)}


def _listing(prefix: str, site: Iterable[str]) -> str | None:
    names: list[str] = []
    for folder in site:
        try:
            names += sorted(n for n in os.listdir(folder) if n.endswith((".dist-info", ".egg-info", ".pth")))
        except OSError:
            return None
    cfg = Path(prefix) / "pyvenv.cfg"
    if cfg.is_file():
        names.append(cfg.read_text(encoding="utf-8", errors="replace"))
    else:  # no venv (a platform's userland): its interpreters on disk, not the Python that asks (another machine's)
        found = sorted(f"{p.name}:{p.stat().st_size}" for p in Path(prefix, "bin").glob("python3*") if p.is_file())
        names += found or [sys.version]
    return digest(names)


def environment_unchanged(env: Mapping[str, Any] | None) -> str | None:
    """None when the environment a stamp recorded still holds the same packages, else why not."""
    if not isinstance(env, Mapping) or not env.get("site") or not isinstance(env.get("prefix"), str):
        return "no environment recorded"
    site = env["site"]
    if not isinstance(site, list) or not all(isinstance(p, str) and "\0" not in p for p in site) or "\0" in env["prefix"]:
        return "no environment recorded"
    listing = _listing(env["prefix"], site)
    if listing is None:
        return f"environment {env['prefix']} is gone"
    return None if listing == env["listing"] else f"environment {env['prefix']} changed"


# The export store ------------------------------------------------------------


@dataclasses.dataclass
class ExportStore:
    """Artifacts by content address: ``<root>/<key>/`` holds the export's files and ``cache.json``
    (the key, the artifact id, each file's SHA-256). An entry is written in a temporary folder and
    renamed into place, so a reader never sees half of one; a file whose hash no longer matches makes
    the entry invalid (:meth:`check`), and the export redoes it."""

    root: Path

    def entry(self, key: str) -> Path:
        return self.root / key

    def check(self, key: str) -> str | None:
        """None when the entry is whole, else what is wrong with it (one line)."""
        entry = self.entry(key)
        try:
            info = json.loads((entry / CACHE_INFO).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return "not cached"
        except (OSError, ValueError):
            return f"{entry / CACHE_INFO} is unreadable"
        if not isinstance(info, dict) or info.get("key") != key:
            return f"{entry / CACHE_INFO} names another key"
        files, seen = info.get("files"), info.get("stat")
        if not isinstance(files, dict) or not _names(files) or not isinstance(seen, dict):
            return f"{entry / CACHE_INFO} is damaged (not the record the export writes)"
        try:
            held = _held(entry)
        except OSError:
            return f"{entry} cannot be read"
        if held != set(files):
            return f"{entry} holds other files than {CACHE_INFO} lists"
        changed = False
        for name, sha in files.items():
            try:
                ok, now = verify(entry / name, sha, seen.get(name))
            except OSError:
                return f"{entry / name} is missing"
            if not ok:
                return f"{entry / name} does not match its recorded SHA-256"
            changed |= seen.get(name) != now
            seen[name] = now
        if changed:  # read and found whole: the next check need not read it again (best effort)
            self._remember(entry, {**info, "stat": seen})
        return None

    @staticmethod
    def _remember(entry: Path, info: Mapping[str, Any]) -> None:
        with contextlib.suppress(OSError):
            write_json(entry / CACHE_INFO, info)

    def begin(self, key: str) -> Path:
        """A fresh temporary folder to export ``key`` into."""
        tmp = self.root / ".tmp" / f"{key}-{os.getpid()}-{time.monotonic_ns()}"
        tmp.mkdir(parents=True)
        return tmp

    def commit(self, key: str, artifact: str, tmp: Path) -> Path:
        """Record the hashes of ``tmp``'s files and move it into place as ``key``'s entry."""
        names = [tmp / n for n in sorted(_held(tmp))]
        files = {p.name: sha256_file(p) for p in names}
        stat = {p.name: signature(p) for p in names}
        info = {"key": key, "artifact": artifact, "files": files, "stat": stat, "created": time.time()}
        (tmp / CACHE_INFO).write_text(json.dumps(info, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        entry = self.entry(key)
        if entry.exists():  # an invalid entry being redone
            shutil.rmtree(entry)
        os.replace(tmp, entry)
        return entry

    def link(self, key: str, view: Path) -> None:
        """Make ``view`` hold exactly the entry's files, as hard links (copies where links fail). Called on an
        entry just checked or committed: the signatures it records are taken again after the links, which
        move each file's change time (:func:`signature`), so that the next check need not read them."""
        entry = self.entry(key)
        names = _held(entry)
        _empty(view, keep=names)
        linked = False
        for name in sorted(names):
            src, dst = entry / name, view / name
            if dst.exists() and os.path.samefile(src, dst):
                continue
            tmp = view / f".{name}.link"
            tmp.unlink(missing_ok=True)
            try:
                os.link(src, tmp)
                linked = True
            except OSError:
                shutil.copy2(src, tmp)
            os.replace(tmp, dst)
        info = read_json(entry / CACHE_INFO)
        if linked and isinstance(info, dict) and _names(info.get("files")):
            self._remember(entry, {**info, "stat": {n: signature(entry / n) for n in info["files"]}})

    def place(self, tmp: Path, view: Path) -> None:
        """Move an export that is not cached (a crash, a hang) from ``tmp`` into ``view``."""
        _empty(view)
        for p in tmp.iterdir():
            os.replace(p, view / p.name)
        tmp.rmdir()

    def linked(self, key: str, view: Path) -> bool:
        """Whether ``view`` holds exactly the entry's files (the same inodes, or equal bytes)."""
        entry = self.entry(key)
        try:
            names = _held(entry)
            if {p.name for p in view.iterdir()} != names:
                return False
            return all(os.path.samefile(entry / n, view / n) or sha256_file(entry / n) == sha256_file(view / n) for n in names)
        except OSError:
            return False

    def prune(self, keep: Iterable[str], versions: int = 3) -> int:
        """Remove entries beyond the ``versions`` newest of each artifact id (never one in ``keep``) and
        stale temporary folders; returns how many entries went."""
        keep = set(keep)
        by_id: dict[str, list[tuple[float, str]]] = {}
        if not self.root.is_dir():
            return 0
        for entry in self.root.iterdir():
            if entry.name == ".tmp" or not entry.is_dir():
                continue
            info = read_json(entry / CACHE_INFO)
            try:
                by_id.setdefault(str(info["artifact"]), []).append((float(info["created"]), entry.name))
            except (TypeError, ValueError, KeyError):
                if entry.name not in keep:
                    shutil.rmtree(entry, ignore_errors=True)  # half an entry, or a damaged one: redone when needed
        removed = 0
        for entries in by_id.values():
            for _, key in sorted(entries, reverse=True)[versions:]:
                if key not in keep:
                    shutil.rmtree(self.entry(key), ignore_errors=True)
                    removed += 1
        shutil.rmtree(self.root / ".tmp", ignore_errors=True)
        return removed


def _held(entry: Path) -> set[str]:
    """The export's files in a store entry (or its temporary folder): not its ``cache.json``, and not what a
    write that was cut short left (a hidden temporary file)."""
    return {p.name for p in entry.iterdir() if p.is_file() and p.name != CACHE_INFO and not p.name.startswith(".")}


def _names(files: Any) -> bool:
    """Whether ``files`` is a store entry's list of files: name → SHA-256, each name a plain file name."""
    if not isinstance(files, dict) or not files:
        return False
    return all(
        isinstance(n, str) and isinstance(v, str) and n and "/" not in n and "\0" not in n and n not in (".", "..")
        for n, v in files.items()
    )


def _empty(folder: Path, keep: Iterable[str] = ()) -> None:
    """Make ``folder`` exist and hold nothing but the files named in ``keep``."""
    folder.mkdir(parents=True, exist_ok=True)
    keep = set(keep)
    for old in folder.iterdir():
        if old.name not in keep or (old.is_dir() and not old.is_symlink()):  # a view holds files only
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()


def write_json(path: Path, data: Any) -> None:
    """Write JSON atomically: a reader never sees half a file.

    Raises:
        HarnessError: a folder stands where the file belongs (no file the harness writes is one).
    """
    not_a_folder(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def not_a_folder(path: Path) -> None:
    """Refuse, in one line, a folder where the harness writes (or removes) a file: nothing the harness
    writes makes one, and removing a folder it did not make is not its to do."""
    if path.is_dir() and not path.is_symlink():
        from harness.core.errors import HarnessError

        raise HarnessError(f"{path} is a folder where the harness writes a file: remove it (`rm -r {path}`), then run again")


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or None when it is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
