"""``results/history.jsonl``: one summary line per published run, so the README can show the trend.

A run is identified by the files it produced (the export manifest and every
shard, whose cells carry their own timings): reporting the same run again
replaces its line instead of adding one, and a new run adds one unless it
changed no verdict and its line would say what the last one says (the trend
shows change, not how often the table was republished). Standard library only.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

HISTORY = "history.jsonl"


def run_id(files: Iterable[Path]) -> str:
    """A digest of the files a run wrote (in name order): the same run → the same id."""
    h = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.name):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def finished(files: Iterable[Path]) -> str:
    """When a run wrote the last of its files (UTC): the run's date, however often it is reported."""
    latest = max(p.stat().st_mtime for p in files)
    return dt.datetime.fromtimestamp(latest, dt.UTC).strftime("%Y-%m-%d %H:%M UTC")


def summary(
    *, run: str, date: str, environment: Mapping[str, Any], counts: Mapping[str, int], cases: int, runtimes: Sequence[str]
) -> dict[str, Any]:
    """The line a run adds: date, versions, counts by status."""
    export = environment.get("export", {})
    return {
        "run": run,
        "date": date,
        "profile": environment.get("profile"),
        "torch": export.get("torch"),
        "onnx": export.get("onnx"),
        "onnxscript": export.get("onnxscript"),
        "runtimes": list(runtimes),
        "cases": cases,
        "cells": sum(counts.values()),
        "counts": dict(sorted(counts.items())),
        "wall_seconds": finite(environment.get("wall_seconds")),
    }


def finite(value: Any) -> Any:
    """``value`` with every number that is not finite (NaN, ±inf: not JSON) replaced by None, in lists and dicts
    too: the history is read by any JSON parser, and a NaN wall time is no wall time."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def read(path: Path) -> list[dict[str, Any]]:
    """The history's entries, oldest first; a line that is not JSON (a torn write, a damaged byte) is skipped,
    and a NaN or Infinity an earlier version wrote reads as null."""
    if not path.is_file():
        return []
    entries = []
    for line in path.read_bytes().splitlines():
        try:
            entry = json.loads(line.decode("utf-8"), parse_constant=lambda _: None)
        except ValueError:  # UnicodeDecodeError is one
            continue
        if isinstance(entry, dict):
            entries.append(entry)
    return entries


def merged(path: Path, entry: Mapping[str, Any], *, verdicts_changed: bool = True) -> tuple[list[dict[str, Any]], str]:
    """The history with ``entry`` added (replacing the entry of the same run), oldest run first, and its text. A new
    run whose verdicts did not change (``verdicts_changed`` False) and whose line says what the last line says, its
    run, date and wall time aside, adds nothing: the history stays as it was."""
    entries = read(path)
    known = any(e.get("run") == entry["run"] for e in entries)
    if not known and not verdicts_changed and entries and same(entries[-1], entry):
        return entries, _text(entries)
    entries = [e for e in entries if e.get("run") != entry["run"]] + [finite(dict(entry))]
    entries.sort(key=lambda e: str(e.get("date") or ""))  # stable: runs of the same minute keep their order
    return entries, _text(entries)


_OF_THE_RUN = ("run", "date", "wall_seconds")
"""What every run says differently, whatever it found."""


def same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Whether two history lines say the same thing (versions, runtimes, counts), the run's id, date and wall aside."""
    return _said(a) == _said(finite(dict(b)))


def _said(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in entry.items() if k not in _OF_THE_RUN}


def _text(entries: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(e, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n" for e in entries)


def record(path: Path, entry: Mapping[str, Any], *, verdicts_changed: bool = True) -> list[dict[str, Any]]:
    """Add ``entry`` (:func:`merged`), written atomically, and return the whole history."""
    entries, text = merged(path, entry, verdicts_changed=verdicts_changed)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return entries
