"""``harness diff OLD NEW``: which cells changed status between two runs, regressions first.

Cells are matched on their key (case, exporter, opset, runtime, provider,
probe), never on their position in the file. When a runtime's pin changed
between the runs (``onnxruntime==1.31.1`` in OLD, ``1.32.0`` in NEW in its
place), its cells are matched across the change: a runtime that only one side
has is paired with the other side's when that is unambiguous (the same
``major.minor``, else the only unpaired runtime of the same package), and the
output says so. ``--strict-pins`` turns the pairing off.

A *regression* is a cell that passed and no longer does; a *fix* the reverse;
*changed* a failure that became another failure. The command exits 1 when
there is a regression, so a nightly can gate on it. Standard library only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from harness.answer.published import runtime_key, shorten, slots, spread_wide
from harness.config.matrix import version_tuple
from harness.core.records import CellRecord, Status

KINDS = ("regression", "fix", "changed", "new", "gone")
SCHEMA = "harness.diff/1"
"""``diff --json``'s schema: its name and version. A field is added within a version, never renamed or removed."""
_TITLES = {
    "regression": "Regressions (passed, now does not)",
    "fix": "Fixes (did not pass, now passes)",
    "changed": "Changed (one failure became another)",
    "new": "New cells (only in NEW)",
    "gone": "Gone cells (only in OLD)",
}


_COUNTED = {"regression": "regressions", "fix": "fixes", "changed": "changed", "new": "new", "gone": "gone"}


@dataclasses.dataclass(frozen=True)
class Change:
    kind: str
    old: CellRecord | None
    new: CellRecord | None

    @property
    def cell(self) -> CellRecord:
        cell = self.new or self.old
        assert cell is not None
        return cell


@dataclasses.dataclass(frozen=True)
class Diff:
    changes: tuple[Change, ...]
    pairs: tuple[tuple[str, str], ...]
    """(old pin, new pin) of runtimes matched across a pin change."""
    old_cells: int
    new_cells: int
    unchanged: int

    def of(self, kind: str) -> list[Change]:
        return [c for c in self.changes if c.kind == kind]

    @property
    def regressions(self) -> int:
        return len(self.of("regression"))


def _minor(pin: str) -> tuple[str, tuple[int, ...]]:
    package, _, version = pin.partition("==")
    return package, version_tuple(version)[:2]


def pair_runtimes(old: Iterable[str], new: Iterable[str]) -> list[tuple[str, str]]:
    """Runtimes that only one side has, paired when unambiguous: the same package and minor first, then the
    only unpaired runtime of a package on each side."""
    old_only = sorted(set(old) - set(new))
    new_only = sorted(set(new) - set(old))
    pairs: list[tuple[str, str]] = []
    for key in (_minor, _package):
        for k in sorted({key(p) for p in old_only}):
            o = [p for p in old_only if key(p) == k]
            n = [p for p in new_only if key(p) == k]
            if len(o) == 1 and len(n) == 1:
                pairs.append((o[0], n[0]))
                old_only.remove(o[0])
                new_only.remove(n[0])
    return sorted(pairs)


def _package(pin: str) -> tuple[str, tuple[int, ...]]:
    return pin.partition("==")[0], ()


def _kind(old: CellRecord, new: CellRecord) -> str | None:
    if old.status is new.status:
        return None
    if old.status is Status.PASS:
        return "regression"
    if new.status is Status.PASS:
        return "fix"
    return "changed"


def diff(old: Sequence[CellRecord], new: Sequence[CellRecord], *, pair: bool = True) -> Diff:
    """Match ``old`` and ``new`` cell by key (across paired runtime pins) and classify each difference.

    A runtime-wide record (a broken column) on either side is spread over the artifacts and probes that
    either side measures, so a runtime whose shard holds only that record still shows every cell it lost.
    """
    where = slots([*old, *new])
    old, new = spread_wide(old, where), spread_wide(new, where)
    pairs = pair_runtimes({c.runtime for c in old}, {c.runtime for c in new}) if pair else []
    rename = dict(pairs)
    olds = {(c.replace(runtime=rename[c.runtime]) if c.runtime in rename else c).key: c for c in old}
    news = {c.key: c for c in new}
    changes: list[Change] = []
    unchanged = 0
    for k, n in news.items():
        o = olds.get(k)
        if o is None:
            changes.append(Change("new", None, n))
            continue
        kind = _kind(o, n)
        if kind:
            changes.append(Change(kind, o, n))
        else:
            unchanged += 1
    changes += [Change("gone", o, None) for k, o in olds.items() if k not in news]
    order = {k: i for i, k in enumerate(KINDS)}
    changes.sort(key=lambda ch: (order[ch.kind], ch.cell.key))
    return Diff(tuple(changes), tuple(pairs), len(old), len(new), unchanged)


def groups(result: Diff, kind: str) -> list[list[Change]]:
    """One kind's changes in groups (the same artifact, runtime, provider and transition), oldest runtime first."""
    by: dict[tuple[object, ...], list[Change]] = {}
    for ch in result.of(kind):
        c = ch.cell
        transition = (ch.old.status if ch.old else None, ch.new.status if ch.new else None)
        by.setdefault((c.case, c.exporter, c.opset, c.runtime, c.provider, transition), []).append(ch)
    return sorted(by.values(), key=lambda g: (runtime_key(g[0].cell.runtime), g[0].cell.key))


def _group_json(changes: list[Change]) -> dict[str, object]:
    first = changes[0]
    c = first.cell
    said = first.new if first.new is not None and first.new.status is not Status.PASS else first.old
    detail = (said.error_line or said.localization or said.note) if said is not None and said.status is not Status.PASS else ""
    return {
        "case": c.case,
        "exporter": c.exporter,
        "opset": c.opset,
        "runtime": first.new.runtime if first.new is not None else c.runtime,
        "old_runtime": first.old.runtime if first.old is not None else None,
        "provider": c.provider,
        "probes": sorted({ch.cell.probe for ch in changes}),
        "old": first.old.status.value if first.old is not None else None,
        "new": first.new.status.value if first.new is not None else None,
        "detail": detail or "",
    }


def to_json(result: Diff, old_name: str, new_name: str) -> dict[str, object]:
    """``diff --json``: :data:`SCHEMA` (docs/reading-the-table.md describes every field); every group, whatever
    ``--limit`` says (it shortens the text only)."""
    return {
        "schema": SCHEMA,
        "old": old_name,
        "new": new_name,
        "old_cells": result.old_cells,
        "new_cells": result.new_cells,
        "unchanged": result.unchanged,
        "pairs": [list(p) for p in result.pairs],
        "counts": {k: len(result.of(k)) for k in KINDS},
        "changes": {k: [_group_json(g) for g in groups(result, k)] for k in KINDS},
        "exit": 1 if result.regressions else 0,
    }


def _line(changes: list[Change]) -> str:
    """One group (same artifact, runtime, provider and transition) as one line."""
    first = changes[0]
    c = first.cell
    runtime = c.runtime
    if first.old is not None and first.new is not None and first.old.runtime != first.new.runtime:
        runtime = f"{first.old.runtime} → {first.new.runtime.split('==')[1]}"
    probes = ",".join(sorted({ch.cell.probe for ch in changes}))
    head = f"{c.case} {c.exporter} op{c.opset} {runtime} {c.provider} [{probes}]"
    if first.old is not None and first.new is not None:
        text = f"{head}: {first.old.status.value} → {first.new.status.value}"
        said = first.new if first.new.status is not Status.PASS else first.old
    else:
        text = f"{head}: {c.status.value}"
        said = c
    detail = said.error_line or said.localization or said.note
    return text + (f": {shorten(detail, 200)}" if detail and said.status is not Status.PASS else "")


def render(result: Diff, old_name: str, new_name: str, *, limit: int = 200) -> str:
    """What the command prints: counts, pin pairings, then each kind's groups (at most ``limit`` lines each)."""
    counts = {k: len(result.of(k)) for k in KINDS}
    lines = [
        f"harness diff: {old_name} ({result.old_cells} cells) → {new_name} ({result.new_cells} cells)",
        *(f"runtime pin changed: {o} → {n} (its cells are matched across the change)" for o, n in result.pairs),
        "cells: " + ", ".join(f"{_COUNTED[k]} {counts[k]}" for k in KINDS) + f", unchanged {result.unchanged}",
    ]
    for kind in KINDS:
        changes = result.of(kind)
        if not changes:
            continue
        ordered = groups(result, kind)
        lines += ["", f"{_TITLES[kind]}: {len(changes)} cells in {len(ordered)} groups"]
        shown = ordered if limit <= 0 else ordered[:limit]
        lines += [f"  {_line(g)}" for g in shown]
        if len(shown) < len(ordered):
            lines.append(f"  … and {len(ordered) - len(shown)} more groups (--limit 0 shows all)")
    if not result.changes:
        lines += ["", "no cell changed status"]
    return "\n".join(lines)
