"""Whether a shard is whole: what the report and the gather check before they trust one.

A run session seals its shard when it ends normally: it writes the shard's stamp
(``<runtime>-<provider>.stamp.json``) holding the shard's SHA-256. A session that did not finish
(killed, crashed, timed out) leaves the stamp it removed at its start missing, so its shard is
unsealed. A shard is whole for an export when:

- it is sealed, and its bytes are the ones sealed (an edit after the run breaks the hash);
- every line decodes, parses and holds its checksum (no line cut short, no byte changed);
- it holds a cell for every probe of every artifact of the export (or is one runtime-wide
  record: a column that cannot run here), each computed from that artifact's files.

:func:`problems` says, one line per shard, what is wrong; the report refuses to publish while there
is any (unless asked for a partial report), and so does the gather for the shards it is given.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from harness import cache
from harness.records import CellRecord, ExportRecord


def stamp_of(shard: Path) -> Path:
    return shard.with_name(shard.name.removesuffix(".jsonl") + ".stamp.json")


def read(path: Path) -> tuple[dict[str, CellRecord], int]:
    """The cells of a shard whose lines hold (a later line for the same key wins), and how many lines
    do not: cut short, not UTF-8, not JSON, a wrong or missing checksum, not a cell. Never raises for
    what the file holds; raises OSError when it cannot be read."""
    cells: dict[str, CellRecord] = {}
    bad = 0
    for raw in path.read_bytes().splitlines():
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            bad += 1
            continue
        data = _sealed(line)
        if data is None:
            data, state = cache.unseal(line, verify=True)  # another spelling of the same JSON still holds
            if data is None or state != "ok":
                bad += 1
                continue
        try:
            cell = CellRecord.from_dict(data)
        except (ValueError, KeyError, TypeError, AttributeError):
            bad += 1
            continue
        cells[cell.key] = cell
    return cells, bad


_MARK = f', "{cache.CHECKSUM}": "'
_TAIL = len(_MARK) + 16 + 2  # the mark, 16 hex digits, '"}'


def _sealed(line: str) -> dict[str, object] | None:
    """The data of a line exactly as :func:`harness.cache.seal` wrote it, checked on its bytes (no JSON
    written again to check it), or None: anything else, for :func:`harness.cache.unseal` to judge."""
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


def problem(shard: Path, pin: str, provider: str, artifacts: Sequence[ExportRecord], *, sealed: bool = True) -> str | None:
    """Why ``shard`` cannot be published for these artifacts (one line, naming the runtime), or None."""
    return check(shard, pin, provider, artifacts, sealed=sealed)[1]


def check(
    shard: Path, pin: str, provider: str, artifacts: Sequence[ExportRecord], *, sealed: bool = True
) -> tuple[dict[str, CellRecord], str | None]:
    """The shard's sound cells, and why it cannot be published for these artifacts (or None)."""
    cells: dict[str, CellRecord] = {}
    return cells, _problem(shard, pin, provider, artifacts, sealed, cells)


def _problem(
    shard: Path, pin: str, provider: str, artifacts: Sequence[ExportRecord], sealed: bool, cells: dict[str, CellRecord]
) -> str | None:
    name = f"{pin} {provider}"
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
    missing = wrong = 0
    expected = 0
    for rec in artifacts:
        prefix = rec.cell(pin, provider, {}).key  # a cell's key ends with its probe, empty here
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


def seal(shard: Path, stamp: dict[str, object]) -> None:
    """Seal ``shard`` as it is now: its stamp, with its hash."""
    cache.write_json(stamp_of(shard), {**stamp, "sha256": cache.sha256_file(shard)})


def describe(found: Sequence[str], limit: int = 3) -> str:
    """The first few problems on one line."""
    more = f"; and {len(found) - limit} more" if len(found) > limit else ""
    return "; ".join(found[:limit]) + more

