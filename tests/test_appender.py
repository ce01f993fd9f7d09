"""The shard's append-only writer (harness/store/layout.py, ``Appender``): its open seal vouches for every line
within a tenth of a second of the line, and for exactly the bytes written (what a killed run resumes from), without
rewriting the seal for every cell; the shard rewritten at the end from the lines it already made is byte for byte
the one made afresh."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

from harness.core.records import CellRecord, Stage, Status
from harness.store import cache, layout


def _cells(n: int) -> list[CellRecord]:
    return [
        CellRecord(f"case{i % 7}", "dynamo", 18 + i % 3, "onnxruntime==1.32.0", "cpu", f"p{i}", Status.PASS, Stage.COMPARE)
        for i in range(n)
    ]


def _seal(shard: Path) -> dict:
    return json.loads(layout.stamp_of(shard).read_text(encoding="utf-8"))


def test_the_open_seal_vouches_for_every_line_soon_after_and_for_nothing_more(tmp_path: Path) -> None:
    shard = tmp_path / "x-cpu.jsonl"
    layout.write_shard(shard, [])
    appender = layout.Appender(shard, every=0.05)
    writes = []
    real = layout.checkpoint

    def counting(path: Path, length: int, sha256: str) -> None:
        writes.append(length)
        real(path, length, sha256)

    layout.checkpoint = counting  # type: ignore[assignment]
    try:
        for cell in _cells(2000):  # a burst far faster than one seal write per cell
            appender.add([cell])
        time.sleep(0.3)
        seal = _seal(shard)["checkpoint"]
        data = shard.read_bytes()
        assert seal["bytes"] == len(data) and seal["sha256"] == cache.sha256_bytes(data)
        assert len(writes) < 200, f"{len(writes)} seal writes for 2,000 lines"
        assert all(a < b for a, b in itertools.pairwise(writes)), "a seal only ever moves forward"
        appender.add(_cells(1))
        appender.close()
        seal = _seal(shard)["checkpoint"]
        assert seal["bytes"] == len(shard.read_bytes())  # closed: whole, at once
    finally:
        layout.checkpoint = real  # type: ignore[assignment]


def test_the_final_shard_from_the_lines_made_as_cells_came_is_the_one_made_afresh(tmp_path: Path) -> None:
    cells = _cells(300)
    shard = tmp_path / "a-cpu.jsonl"
    layout.write_shard(shard, [])
    appender = layout.Appender(shard)
    for cell in cells:
        appender.add([cell])
    later = cells[5].replace(status=Status.MISMATCH)  # the same key again, another cell: its own line
    appender.add([later])
    appender.close()
    final = [*cells[:5], later, *cells[6:]]
    layout.write_shard(shard, final, appender.lines)
    fresh = tmp_path / "b-cpu.jsonl"
    layout.write_shard(fresh, final)
    assert shard.read_bytes() == fresh.read_bytes()
    assert layout.read_shard(shard)[later.key].status is Status.MISMATCH
