"""The build folder's files: where each lives, how it is written and read, and whether it is whole.

Every stage reads the files of the stage before it through this module, never through that stage::

    build/manifest.json                     the export's artifact ids (:func:`load_artifacts`)
    build/export.stamp.json                 what the export read (:mod:`harness.store.stamps`)
    build/artifacts/<id>/model.onnx         and model.onnx.data, reference.npz, export.json, the
                                            localization files (:data:`LOCALIZATION_FILES`)
    build/cache/exports/<key>/              the export store (:class:`harness.store.cache.ExportStore`)
    build/shards/<runtime id>-<column>.jsonl           one cell a line, each sealed with its checksum
    build/shards/<runtime id>-<column>.stamp.json      the shard's seal (:func:`seal`), open while its run writes
                                                       (:func:`checkpoint`)
    build/report.<profile>.stamp.json       what the profile's report read and wrote

A shard is never without its seal file: open (``"state": "running"`` and a checkpoint, the length and SHA-256
of what its run has written so far) from the moment its run starts writing, sealed when the run ends normally.
A rerun reuses only lines its seal vouches for (:func:`resume`); a shard with no seal, or whose bytes are
not the sealed ones or do not extend the checkpoint, is redone whole. A shard is *whole* for an export
(:func:`check`) when its run sealed it (the stamp holds the shard's SHA-256), its bytes are the ones sealed, every line decodes,
parses and holds its checksum, and it holds a cell for every probe of every artifact of the export (or is
one runtime-wide record: a column that cannot run here), each computed from that artifact's files. The
report refuses a shard that is not whole (unless asked for a partial report), and so does the gather.

``reference.npz`` holds each probe's inputs and torch's outputs under ``<probe>/in/<name>`` and
``<probe>/out/<index>``: :func:`input_key`, :func:`output_key`, :func:`probe_inputs`, :func:`probe_outputs`.

Standard library only (numpy arrays pass through, never imported here): the noxfile reads it.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import os
import sys
import time
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.core.errors import HarnessError
from harness.core.records import CellRecord, ExportRecord
from harness.store import cache

if TYPE_CHECKING:
    from harness.config.matrix import Runtime

MANIFEST = "manifest.json"
EXPORT_STAMP = "export.stamp.json"
STORE = Path("cache") / "exports"
ARTIFACTS = "artifacts"
SHARDS = "shards"
OUTPUTS = "outputs"
"""``<out>/outputs/<cell key>.npz``: a platform column's outputs per probe (``o0``, ``o1``, … in output order)."""
SPEC = "spec.json"
SPEC_STAMP = "spec.stamp.json"
"""The spec stage's answer for every artifact (:mod:`harness.store.spec`), and its seal: the report reads both."""
CUDA_REFERENCE = "cuda_reference.jsonl"
"""torch on a CUDA device, on the export's probes (``bench/cuda_reference.py``), which the report reads."""

MODEL = "model.onnx"
DATA = "model.onnx.data"
"""The weights of a model saved with ONNX external data (``[export] external_data_mib``)."""
REFERENCE = "reference.npz"
RECORD = "export.json"
FP32 = "fp32.npz"
"""Of a transformed artifact (:mod:`harness.transform.stage`): torch's fp32 outputs per probe, kept for the drift
(its ``reference.npz`` holds the specification's answer on the transformed file); its SHA-256 is in the record."""

DEBUG_MODEL = "model.debug.onnx"
NODES = "nodes.json"
INTERMEDIATES = "intermediates.npz"
LOCALIZATION = "localization.json"
LOCALIZATION_FILES = (DEBUG_MODEL, NODES, INTERMEDIATES, LOCALIZATION)
"""What :func:`harness.export.node_values.prepare` writes beside ``model.onnx``: a mismatch is localized with them."""


# Artifacts ---------------------------------------------------------------------------------------------


def artifact_dir(out: Path, art_id: str) -> Path:
    return out / ARTIFACTS / art_id


def load_artifacts(out: Path) -> list[ExportRecord]:
    """The export records of the last export, in the manifest's order.

    Raises:
        HarnessError: no export, or a manifest or record that is not the one the export writes.
    """
    manifest = out / MANIFEST
    if not manifest.exists():
        raise HarnessError(f"{manifest}: no export found; run `nox -s export` (or `harness export`) first")
    again = "rerun the export (`nox -s matrix -- --force`, or delete it and run `nox -s matrix`)"
    data = cache.read_json(manifest)  # None when it is not UTF-8 JSON
    ids = data.get("artifacts") if isinstance(data, dict) else None
    if not isinstance(ids, list) or not all(_plain_name(i) for i in ids):
        raise HarnessError(f"{manifest}: damaged (not the manifest the export writes); {again}")
    records = []
    for art_id in ids:
        path = artifact_dir(out, art_id) / RECORD
        if not path.exists():
            raise HarnessError(f"{path}: missing although the manifest lists it; rerun the export")
        try:
            rec = ExportRecord.from_dict(cache.read_json(path))
        except (TypeError, ValueError, KeyError, AttributeError):
            rec = None
        if rec is None or not well_typed(rec) or rec.key.id != art_id:
            raise HarnessError(f"{path}: damaged (not the record the export writes); {again}")
        records.append(rec)
    return records


def _plain_name(name: object) -> bool:
    """A name the export gives a folder: no path in it (JSON may hold a ``/`` or a NUL, which it never writes)."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name and "\0" not in name


def well_typed(record: object) -> bool:
    """Whether every field of a record (a dataclass of :mod:`harness.core.records`) holds a value of its declared
    type: a record read back from a damaged file is refused here, not deep inside the stage that uses it."""
    hints = _hints(type(record))
    return all(_is(getattr(record, f.name), hints[f.name]) for f in dataclasses.fields(record))  # type: ignore[arg-type]


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        try:
            _HINTS[cls] = typing.get_type_hints(cls)
        except TypeError:  # Python 3.9 (the run stage of onnxruntime 1.10, 1.11): ``X | None`` evaluates from 3.10 on
            _HINTS[cls] = _hints_spelled_out(cls)
    return _HINTS[cls]


class _Unions(ast.NodeTransformer):
    """``A | B`` → ``_Union[A, B]``, which Python 3.9 evaluates."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.op, ast.BitOr):
            return node
        pair = ast.Tuple([node.left, node.right], ast.Load())
        return ast.Subscript(value=ast.Name("_Union", ast.Load()), slice=pair, ctx=ast.Load())


def _hints_spelled_out(cls: type) -> dict[str, Any]:
    """What :func:`typing.get_type_hints` gives on 3.10 and newer, from annotations written ``X | None``."""
    hints: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        scope = {**vars(sys.modules[klass.__module__]), "_Union": typing.Union}
        for name, text in vars(klass).get("__annotations__", {}).items():
            if not isinstance(text, str):  # evaluated already (a module without postponed annotations)
                hints[name] = text
                continue
            tree = ast.fix_missing_locations(_Unions().visit(ast.parse(text, mode="eval")))
            hints[name] = eval(compile(tree, f"<{klass.__name__}.{name}>", "eval"), scope)  # the class's own annotations
    return hints


def _is(value: object, hint: Any) -> bool:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, getattr(types, "UnionType", typing.Union)):  # types.UnionType: Python 3.10 and newer
        return any(_is(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint in (int, float):  # a bool is not a number here; an int is a float
        return isinstance(value, (int, float) if hint is float else int) and not isinstance(value, bool)
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return isinstance(value, tuple) and all(_is(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(_is(k, args[0]) and _is(v, args[1]) for k, v in value.items())
    if origin is list:
        return isinstance(value, list) and all(_is(v, args[0]) for v in value)
    if origin is tuple:
        return isinstance(value, tuple) and len(value) == len(args) and all(_is(v, a) for v, a in zip(value, args))  # noqa: B905 (as long: checked first)
    return isinstance(value, hint) if isinstance(hint, type) else True


def read_record(art: Path) -> ExportRecord:
    """An artifact's export record (in a worker: the run stage checked the files before handing it over).

    Raises:
        ValueError: the file is not a record the export writes (OSError: it cannot be read).
    """
    try:
        rec = ExportRecord.from_dict(json.loads((art / RECORD).read_text(encoding="utf-8")))
    except (TypeError, KeyError, AttributeError) as exc:
        raise ValueError(f"{art / RECORD}: not an export record ({exc})") from None
    if not well_typed(rec):
        raise ValueError(f"{art / RECORD}: a field of the wrong type")
    return rec


def localization_sha256(folder: Path) -> str:
    """Of an artifact's localization files, as the export records it (a missing file counts as such)."""
    h = hashlib.sha256()
    for name in LOCALIZATION_FILES:
        try:
            h.update(cache.sha256_file(folder / name).encode())
        except OSError:  # missing (or a folder in its place: then it differs from what the export recorded)
            h.update(b"-")
    return h.hexdigest()


def damaged(out: Path, artifacts: Iterable[ExportRecord]) -> dict[str, str]:
    """Artifacts whose files are no longer those the export recorded (by SHA-256): id → what differs."""
    found = {}
    for rec in artifacts:
        if not rec.ok:
            continue
        folder = artifact_dir(out, rec.key.id)
        checks = [(MODEL, rec.sha256), (REFERENCE, rec.reference_sha256)]
        if rec.data_sha256:
            checks.append((DATA, rec.data_sha256))
        if rec.transform.get("fp32_sha256"):  # a transformed file's torch outputs, which its drift is measured from
            checks.append((FP32, rec.transform["fp32_sha256"]))
        for name, want in checks:
            if want is None:
                continue
            try:
                have = cache.sha256_file(folder / name)
            except OSError:
                found[rec.key.id] = f"{name} is missing"
                break
            if have != want:
                found[rec.key.id] = f"{name} differs from its recorded hash"
                break
        else:
            if rec.intermediates_sha256 and localization_sha256(folder) != rec.intermediates_sha256:
                found[rec.key.id] = "its localization files differ from their recorded hash"
    return found


# reference.npz ------------------------------------------------------------------------------------------


def input_key(probe: str, name: str) -> str:
    return f"{probe}/in/{name}"


def output_key(probe: str, index: int) -> str:
    return f"{probe}/out/{index}"


def probe_inputs(ref: Any, probe: str) -> dict[str, Any]:
    """A probe's inputs by name, from a loaded ``reference.npz``."""
    prefix = input_key(probe, "")
    return {k[len(prefix) :]: ref[k] for k in ref.files if k.startswith(prefix)}


def probe_outputs(ref: Any, probe: str) -> list[Any]:
    """torch's outputs of a probe, in output order, from a loaded ``reference.npz``."""
    prefix = output_key(probe, 0)[:-1]
    keys = sorted((k for k in ref.files if k.startswith(prefix)), key=lambda k: int(k[len(prefix) :]))
    return [ref[k] for k in keys]


def keep_outputs(folder: Path, key: str, outs: Sequence[Any]) -> None:
    """A probe's outputs as ``<folder>/<key>.npz``, written whole or not at all (a temporary file, renamed)."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{key}.{os.getpid()}.npz"
    arrays: dict[str, Any] = {f"o{i}": np.asarray(o) for i, o in enumerate(outs)}
    np.savez(tmp, **arrays)
    os.replace(tmp, folder / f"{key}.npz")


def read_outputs(folder: Path, key: str) -> list[Any] | None:
    """What :func:`keep_outputs` kept for ``key``, in output order; None where nothing (whole) was kept."""
    import numpy as np

    try:
        with np.load(folder / f"{key}.npz") as found:
            return [found[f"o{i}"] for i in range(len(found.files))]
    except (OSError, ValueError, KeyError, EOFError):
        return None


# Shards -------------------------------------------------------------------------------------------------


def shard_path(out: Path, runtime: Runtime, column: str) -> Path:
    return out / SHARDS / f"{runtime.id}-{column}.jsonl"


def stamp_of(shard: Path) -> Path:
    return shard.with_name(shard.name.removesuffix(".jsonl") + ".stamp.json")


def stamp_path(out: Path, runtime: Runtime, column: str) -> Path:
    return stamp_of(shard_path(out, runtime, column))


def report_stamp(out: Path, profile: str) -> Path:
    """A profile's report stamp: one per profile, so reporting one profile leaves another's up to date."""
    return out / f"report.{profile}.stamp.json"


def read_shard(path: Path) -> dict[str, CellRecord]:
    """Cells of a shard by key (a later line for the same key wins); a damaged line is left out, a
    missing shard has none."""
    return read(path)[0] if path.exists() else {}


def write_shard(path: Path, cells: Iterable[CellRecord], lines: Mapping[str, tuple[CellRecord, bytes]] | None = None) -> None:
    """Rewrite a shard atomically, sorted by key, each line sealed with its checksum. Its seal is opened first,
    on the new bytes (:func:`checkpoint`): a kill between the two leaves a seal that no bytes extend, and the
    rerun redoes the shard whole rather than trust lines nothing vouches for. ``lines``: the sealed line an
    :class:`Appender` already made of a cell (by key, with the cell it was made of), used where it is that cell."""
    cache.not_a_folder(path)
    tmp = path.with_name(path.name + ".tmp")
    known = lines or {}

    def line(cell: CellRecord) -> bytes:
        made = known.get(cell.key)
        return made[1] if made is not None and made[0] is cell else _line(cell)

    data = b"".join(line(cell) for cell in sorted(cells, key=lambda c: c.key))
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    checkpoint(path, len(data), cache.sha256_bytes(data))
    os.replace(tmp, path)


def _line(cell: CellRecord) -> bytes:
    return (cache.seal(cell.to_dict()) + "\n").encode()


def checkpoint(shard: Path, length: int, sha256: str) -> None:
    """Open ``shard``'s seal: its run is writing it, and its first ``length`` bytes hash to ``sha256`` (what a
    run killed now may resume from). The report refuses an open seal as it refuses none."""
    cache.write_json(stamp_of(shard), {"state": "running", "checkpoint": {"bytes": length, "sha256": sha256}})


class Appender:
    """Append-only writes, each line handed to the kernel at once and checkpointed in the shard's open seal
    (:func:`checkpoint`: a killed run resumes every line the seal vouches for, and nothing it does not), forced to
    disk at least every ``sync`` seconds and at the end (what a power cut could take; a checkpoint past the bytes
    that survived it vouches for nothing, and the shard is redone).

    The seal is rewritten at most every ``every`` seconds, by a thread of its own, once lines came since it was
    last written: a cell is vouched for within ``every`` seconds of its line, and a stage that appends thousands
    of cells a second does not rename the seal file thousands of times (measured: 8,700 checkpoints took 3.9 s of
    a 22 s run session, on the same cores as its workers)."""

    def __init__(self, path: Path, sync: float = 0.5, every: float = 0.1) -> None:
        import threading

        self.path = path
        self.f = open(path, "ab")  # noqa: SIM115 (held open across appends)
        self.hash = hashlib.sha256(path.read_bytes())
        self.length = self.f.tell()
        self.sync, self.synced = sync, time.monotonic()
        self.lines: dict[str, tuple[CellRecord, bytes]] = {}
        """Each cell's sealed line as added (for :func:`write_shard` at the end, which need not make it again)."""
        self._lock = threading.Lock()
        self._vouched = self.length
        self._done = threading.Event()
        self._every = every
        self._thread = threading.Thread(target=self._checkpoints, name="shard-checkpoint", daemon=True)
        self._thread.start()

    def add(self, cells: Iterable[CellRecord]) -> None:
        made = [(cell, _line(cell)) for cell in cells]
        data = b"".join(line for _, line in made)
        with self._lock:
            self.f.write(data)
            self.f.flush()
            self.hash.update(data)
            self.length += len(data)
            if time.monotonic() - self.synced >= self.sync:
                os.fsync(self.f.fileno())
                self.synced = time.monotonic()
        self.lines.update((cell.key, (cell, line)) for cell, line in made)

    def _checkpoints(self) -> None:
        while not self._done.wait(self._every):
            self._checkpoint()

    def _checkpoint(self) -> None:
        with self._lock:
            if self.length != self._vouched:
                checkpoint(self.path, self.length, self.hash.hexdigest())
                self._vouched = self.length

    def close(self) -> None:
        self._done.set()
        self._thread.join()
        with self._lock:
            self.f.flush()
            os.fsync(self.f.fileno())
        self._checkpoint()
        self.f.close()


def read(path: Path) -> tuple[dict[str, CellRecord], int]:
    """The cells of a shard whose lines hold (a later line for the same key wins), and how many lines
    do not: cut short, not UTF-8, not JSON, a wrong or missing checksum, not a cell. Never raises for
    what the file holds; raises OSError when it cannot be read."""
    return parse(path.read_bytes())


def resume(shard: Path) -> tuple[dict[str, CellRecord], int, str | None]:
    """What a rerun may reuse of ``shard``: its lines as :func:`read` judges them, but only those its seal
    vouches for. A sealed shard whose bytes are the ones sealed, whole; an open one (its run was killed) up to
    its last checkpoint. Anything else (no seal, bytes that are not the sealed ones or do not extend the
    checkpoint) is evidence of nothing: no cell, and why (one line), so that it is redone whole."""
    try:
        data = shard.read_bytes()
    except FileNotFoundError:
        return {}, 0, None
    except OSError as exc:
        return {}, 0, f"{shard} cannot be read ({exc.strerror or exc})"
    stamp = cache.read_json(stamp_of(shard))
    stamp = stamp if isinstance(stamp, dict) else {}
    mark = stamp.get("checkpoint") if "sha256" not in stamp else {"bytes": len(data), "sha256": stamp["sha256"]}
    if not isinstance(mark, dict):
        mark = {}
    length = mark.get("bytes")
    if not isinstance(length, int) or isinstance(length, bool) or not 0 <= length <= len(data):
        why = "has no seal beside it" if not stamp else "is not the shard its seal describes"
        return {}, 0, f"{shard} {why}"
    if cache.sha256_bytes(data[:length]) != mark.get("sha256"):
        changed = "changed after its run sealed it" if "sha256" in stamp else "does not extend its run's last checkpoint"
        return {}, 0, f"{shard} {changed}"
    return (*parse(data[:length]), None)


def parse(data: bytes) -> tuple[dict[str, CellRecord], int]:
    """:func:`read` of bytes already read."""
    cells: dict[str, CellRecord] = {}
    bad = 0
    for raw in data.splitlines():
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            bad += 1
            continue
        fields = _sealed(line)
        if fields is None:
            fields, state = cache.unseal(line, verify=True)  # another spelling of the same JSON still holds
            if fields is None or state != "ok":
                bad += 1
                continue
        try:
            cell = CellRecord.from_dict(fields)
        except (ValueError, KeyError, TypeError, AttributeError):
            bad += 1
            continue
        cells[cell.key] = cell
    return cells, bad


_MARK = f', "{cache.CHECKSUM}": "'
_TAIL = len(_MARK) + 16 + 2  # the mark, 16 hex digits, '"}'


def _sealed(line: str) -> dict[str, object] | None:
    """The data of a line exactly as :func:`harness.store.cache.seal` wrote it, checked on its bytes (no JSON
    written again to check it), or None: anything else, for :func:`harness.store.cache.unseal` to judge."""
    cut = len(line) - _TAIL
    if cut <= 0 or not line.startswith(_MARK, cut) or not line.endswith('"}'):
        return None
    body = line[:cut] + "}"
    if cache.sha256_bytes(body.encode())[:16] != line[cut + len(_MARK) : -2]:
        return None
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def problem(shard: Path, pin: str, column: str, artifacts: Sequence[ExportRecord], *, sealed: bool = True) -> str | None:
    """Why ``shard`` cannot be published for these artifacts (one line, naming the runtime), or None."""
    return check(shard, pin, column, artifacts, sealed=sealed)[1]


def check(
    shard: Path, pin: str, column: str, artifacts: Sequence[ExportRecord], *, sealed: bool = True
) -> tuple[dict[str, CellRecord], str | None]:
    """The shard's sound cells, and why it cannot be published for these artifacts (or None)."""
    cells: dict[str, CellRecord] = {}
    return cells, _problem(shard, pin, column, artifacts, sealed, cells)


def _problem(
    shard: Path, pin: str, column: str, artifacts: Sequence[ExportRecord], sealed: bool, cells: dict[str, CellRecord]
) -> str | None:
    name = f"{pin} {column}"
    if not shard.is_file():
        return f"{name}: no shard ({shard}): its run session has not run"
    try:
        digest = cache.sha256_file(shard)
        sound, bad = read(shard)
    except OSError as exc:
        return f"{name}: {shard} cannot be read ({exc.strerror or exc})"
    cells.update(sound)
    if sealed and (seal_state := unsealed(shard, digest)) is not None:
        if seal_state == "no seal":
            return f"{name}: its run did not finish (killed, crashed or timed out): {shard} is not sealed"
        return f"{name}: {shard} changed after its run sealed it"
    if bad:
        return f"{name}: {bad} line(s) of {shard} are cut short or fail their checksum"
    if any(c.runtime_wide for c in cells.values()):
        return None  # the whole column is one record: unavailable here, or a broken environment
    missing = wrong = expected = 0
    for rec in artifacts:
        prefix = rec.cell(pin, column, {}).key  # a cell's key ends with its probe, empty here
        for probe in rec.probes or ("example",):  # as ExportRecord.each_probe
            expected += 1
            have = cells.get(prefix + probe)
            if have is None:
                missing += 1
            elif have.inputs != rec.digest or have.sha256 != rec.sha256 or (not rec.ok and have.error_line != rec.error_line):
                wrong += 1  # computed from other files, or decided by an export that is not this one
    if missing:
        return f"{name}: {missing} of {expected} cells of this export are missing from {shard}"
    if wrong:
        return f"{name}: {wrong} cell(s) of {shard} are of other files or another export than this export's artifacts"
    return None


def unsealed(shard: Path, digest: str) -> str | None:
    """None when ``shard``'s seal holds ``digest`` (its SHA-256); ``"no seal"``, or ``"another shard"`` when
    the seal describes other bytes."""
    stamp = cache.read_json(stamp_of(shard))
    if not isinstance(stamp, dict) or "sha256" not in stamp:
        return "no seal"
    return None if stamp["sha256"] == digest else "another shard"


def seal(shard: Path, stamp: Mapping[str, object]) -> None:
    """Seal ``shard`` as it is now: its stamp, with its hash (its open seal's checkpoint goes)."""
    fields = {k: v for k, v in stamp.items() if k not in ("state", "checkpoint", "sha256")}
    cache.write_json(stamp_of(shard), {**fields, "state": "sealed", "sha256": cache.sha256_file(shard)})


def describe(found: Sequence[str], limit: int = 3) -> str:
    """The first few problems on one line."""
    more = f"; and {len(found) - limit} more" if len(found) > limit else ""
    return "; ".join(found[:limit]) + more
