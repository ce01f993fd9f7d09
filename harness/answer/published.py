"""Reading a published table back: ``results/matrix.jsonl`` (or a shard) and ``results/cases.json``.

``harness recommend`` and ``harness diff`` answer from these files alone, so
this module imports only the standard library: it runs from a bare clone
(``python -m harness recommend ...``) with nothing installed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from harness.config import platforms, runtimes
from harness.core import schema
from harness.core.errors import HarnessError
from harness.core.records import CellRecord, Rewrite, Status, first_line
from harness.store import cache, lock

CASES = "cases.json"
"""Beside matrix.jsonl: every case's card (symptom, cause, fix, source), the case it fixes, its file."""


PLATFORMS = "platforms.json"
"""Beside a table of platform columns (profile ``hardware``): :func:`harness.numeric.across.measure`, schema
``harness.platforms/1``: how each column ran, what it saw, the verdicts that change with the platform, the spread."""


REPORT_FILES = frozenset(
    {"README.md", "index.html", "matrix.jsonl", "environment.json", CASES, "rewrites.json", "frontier.json", PLATFORMS,
     "history.jsonl", "cases", "plots", "repro", "timing.md"}
)  # fmt: skip
"""What a report writes in its folder: all of it is replaced by the next report (``tests/test_publish.py``
checks that a real report writes nothing else)."""

TORCH_SUMMARY = "torch.json"
TORCH_TABLE_FILES = frozenset({"README.md", "index.html", TORCH_SUMMARY})
"""What ``harness torch-report`` writes in a folder of torch release tables (``results/torch/``), beside the release
tables themselves: with ``torch.json`` there, such a folder is a profile published inside a results folder."""

TRANSFORM_SUMMARY = "transforms.json"
TRANSFORM_TABLE_FILES = frozenset({"README.md", TRANSFORM_SUMMARY})
"""What ``harness transform-report`` writes in a folder of transform tables (``results/quantized/``), beside the tables
themselves (one per transform): with ``transforms.json`` there, such a folder is a profile published inside a results
folder."""

KEPT = frozenset({lock.NAME, lock.STAGE, "device.json", "device_check.log"})
"""What a report's folder holds that the report does not write, and keeps: its locks, and the facts of the
GPU machine that measured it (``bench/device_check.sh collect`` writes them beside its report)."""


def kept(results: Path) -> list[str]:
    """The names in ``results`` that a new report keeps (:data:`KEPT`, and folders of profiles published
    inside it, such as ``openvino/``); what a publication left behind (``.*.tmp``) goes.

    Raises:
        HarnessError: ``results`` holds anything else (it is not a results folder: the project's root, a
            build folder, a folder of documents), or report files without the table they come with.
    """
    if not results.exists():
        return []
    if not results.is_dir():
        raise HarnessError(f"report: {results} is not a folder: give --results a folder (new, empty, or a previous report's)")
    keep, problem = _kept(results)
    if problem:
        raise HarnessError(
            f"report: not writing into {results}: {problem}, so it is not a results folder and the report would "
            "replace what is there; give --results a new or empty folder, or one a report wrote"
        )
    return keep


def _kept(folder: Path) -> tuple[list[str], str | None]:
    keep: list[str] = []
    names = sorted(entry.name for entry in folder.iterdir())
    # a folder of torch release tables (results/torch/): the table across them, no matrix.jsonl of its own
    across = (TORCH_SUMMARY in names or TRANSFORM_SUMMARY in names) and "matrix.jsonl" not in names
    owned = (TRANSFORM_TABLE_FILES if TRANSFORM_SUMMARY in names else TORCH_TABLE_FILES) if across else REPORT_FILES
    if not across and any(n in REPORT_FILES for n in names) and "matrix.jsonl" not in names:
        return [], f"{folder} holds {next(n for n in names if n in REPORT_FILES)} but no matrix.jsonl"
    for name in names:
        entry = folder / name
        if name in owned or (name.startswith(".") and name.endswith(".tmp")):
            continue
        if name in KEPT and not entry.is_dir():
            keep.append(name)
        elif entry.is_dir() and not entry.is_symlink() and (_kept(entry)[1] is None):
            keep.append(name)  # a profile published in a folder of its own (results/openvino/)
        else:
            return [], f"{entry} is not part of a report"
    return keep, None


def default_results() -> Path:
    """The published ``results/`` of the checkout this package runs from, wherever the command is started
    (``results/`` under the current directory when the package is installed elsewhere)."""
    here = Path(__file__).resolve().parents[2] / "results"
    if not (here / "matrix.jsonl").is_file():
        return Path("results")
    try:
        return here.relative_to(Path.cwd().resolve())  # said as results/ from the checkout itself
    except ValueError:
        return here


def results_out_of_tree(root: Path | None = None) -> str | None:
    """Why the checkout at ``root`` (this package's) cannot publish now, or None: its ``results/`` is out of the
    working tree (git's sparse checkout, which ``bench/device_check.sh prepare`` sets so that a device call
    carries no published table). A report written there would sit under files git no longer looks at."""
    import subprocess

    root = root or Path(__file__).resolve().parents[2]
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-t", "--", "results/README.md"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None  # not a git checkout, or no git: nothing can be out of its tree
    if not listed.startswith("S "):
        return None
    return (
        f"{root / 'results'} is out of the working tree (git sparse checkout, for a device call): "
        "run `bash bench/device_check.sh restore` (or `git sparse-checkout disable`), then publish"
    )


def published_beside(results: Path) -> list[dict[str, Any]]:
    """One row per column of each profile published in a folder of its own inside ``results`` (``results/gpu/``,
    ``results/openvino/``), for the default table to list beside its own: the profile and its folder, the runtime
    pin and column, the device it computed on (the GPU for an NVIDIA column), when it was measured, its cells by
    status, and why it was not measured where it is one runtime-wide record."""
    from collections import Counter

    rows: list[dict[str, Any]] = []
    others = {t["folder"] for t in tables_beside(results)}
    for table in sorted(results.glob("*/matrix.jsonl")):
        if table.parent.name in others:  # another corpus: a table of its own, not more columns of this one
            continue
        env = _json_beside("environment", table)
        machine_facts = _json_beside("device", table)
        on = platform_columns(table)
        counts: dict[tuple[str, str], Counter[str]] = {}
        wide: dict[tuple[str, str], str] = {}
        for cell in read_cells(table, spread=False):
            counts.setdefault((cell.runtime, cell.provider), Counter())[cell.status.value] += 1
            if cell.runtime_wide:
                wide[(cell.runtime, cell.provider)] = f"{cell.status.value}: {cell.error_line}"
        for pin, column in sorted(counts, key=lambda k: (runtime_key(k[0]), k[1])):
            machine = (env.get("runtimes") or {}).get(pin) or {}
            rows.append(
                {
                    "profile": env.get("profile") or table.parent.name,
                    "folder": table.parent.name,
                    "runtime": pin,
                    "column": column,
                    "device": _device(machine, column, on.get((pin, column)) or {}),
                    # When the machine measured it (device.json, bench/device_check.sh), else when it was published.
                    "measured": machine_facts.get("measured") or env.get("generated") or "?",
                    "counts": dict(counts[(pin, column)]),
                    "not_measured": wide.get((pin, column)),
                }
            )
    return rows


def platform_columns(table: str | Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The platform columns of a published table, from the ``platforms.json`` beside it: (pin, column) → how it ran and
    what it saw (``{}`` for a table of no platform: a profile with platforms has only platform columns)."""
    columns = _json_beside(PLATFORMS.removesuffix(".json"), Path(table)).get("columns") or {}
    found = {}
    for col in columns.values() if isinstance(columns, dict) else ():
        if isinstance(col, dict) and isinstance(col.get("runtime"), str) and isinstance(col.get("platform"), str):
            found[(col["runtime"], platforms.column("cpu", col["platform"]))] = col
    return found


def _device(machine: Mapping[str, Any], column: str, platform: Mapping[str, Any]) -> str:
    """What a column computed on: a platform column's platform and how it ran (``aarch64, emulated: qemu-user …``, from
    its table's platforms.json), an NVIDIA column's GPU, else the machine's CPU."""
    if named := platforms.of(column):
        return f"{named}, {platform.get('how') or 'not measured'}"
    return str(machine.get("gpu" if runtimes.provider(column).nvidia else "cpu") or "?")


def tables_beside(results: Path) -> list[dict[str, Any]]:
    """The tables of another corpus published in folders inside ``results`` (``results/architectures/``: real
    models, not the gotchas): its folder, profile and case count, for the main table to link. A folder whose cases
    are this table's (the GPU's, OpenVINO's) holds more columns of this table instead (:func:`published_beside`)."""
    own = set(_json_beside("cases", results / "matrix.jsonl"))
    out = []
    for table in sorted(results.glob("*/matrix.jsonl")):
        cases = set(_json_beside("cases", table))
        if cases and own and not cases & own:  # both say their cases, and none is shared
            profile = _json_beside("environment", table).get("profile") or table.parent.name
            out.append({"folder": table.parent.name, "profile": profile, "cases": len(cases)})
    return out


def torch_beside(results: Path) -> dict[str, Any] | None:
    """The table across torch releases published inside ``results`` (``results/torch/``: its ``torch.json``), for the
    main table to link: its folder and releases; None where there is none."""
    summary = _json_beside(TORCH_SUMMARY.removesuffix(".json"), results / "torch" / "matrix.jsonl")
    releases = [r.get("torch") for r in summary.get("releases", []) if isinstance(r, dict)]
    return {"folder": "torch", "releases": [str(r) for r in releases if r]} if releases else None


def _json_beside(name: str, table: Path) -> dict[str, Any]:
    """``<name>.json`` beside a published table; empty where it is missing or not a JSON object."""
    try:
        found = json.loads((table.parent / f"{name}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def read_frontier(table: str | Path) -> dict[str, dict[str, Any]]:
    """``frontier.json`` beside a published ``matrix.jsonl``: what each runtime loads ({} without one)."""
    path = Path(table).with_name("frontier.json")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


REWRITES = "rewrites.json"
"""Beside matrix.jsonl: each request an exporter answered with another opset (``{case, exporter, asked, wrote,
kept}``): rows are labelled by the opset written, and this says which rows a request stands for."""


def read_rewrites(table: str | Path) -> dict[tuple[str, str, int], int]:
    """``rewrites.json`` beside a published ``matrix.jsonl``: (case, exporter, opset asked) → opset written
    ({} without one: every request wrote what it asked)."""
    return {(w.case, w.exporter, w.asked): w.wrote for w in read_rewrite_records(table)}


def read_rewrite_records(table: str | Path) -> list[Rewrite]:
    """``rewrites.json`` beside a published ``matrix.jsonl`` as records (the exporter's reason with each; [] without
    one)."""
    try:
        data = json.loads(Path(table).with_name(REWRITES).read_text(encoding="utf-8"))
        out = []
        for w in data:
            reason = str(w.get("reason") or "")
            out.append(Rewrite(str(w["case"]), str(w["exporter"]), int(w["asked"]), int(w["wrote"]), bool(w["kept"]), reason))
        return out
    except (OSError, ValueError, TypeError, KeyError):
        return []


def rewrite_groups(rewrites: Iterable[Rewrite]) -> list[tuple[str, tuple[int, ...], int, str, tuple[str, ...]]]:
    """(exporter, opsets asked, opset written, the exporter's reason, cases): each way an exporter, asked for an opset,
    wrote a lower one, once, with every case it holds for (the opset asked in the reason said as ``N``)."""
    per_case: dict[tuple[str, str, int, str], list[int]] = {}
    for w in rewrites:  # the same words for each opset asked: "… the target version N …"
        reason = re.sub(rf"(?<![\d$.]){w.asked}(?![\d.])", "N", w.reason)
        per_case.setdefault((w.exporter, w.case, w.wrote, reason), []).append(w.asked)
    groups: dict[tuple[str, tuple[int, ...], int, str], list[str]] = {}
    for (exporter, case, wrote, reason), asked in per_case.items():
        groups.setdefault((exporter, tuple(sorted(asked)), wrote, reason), []).append(case)
    ordered = sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], -len(kv[1]), kv[0][3]))
    return [(e, asked, wrote, reason, tuple(cases)) for (e, asked, wrote, reason), cases in ordered]


def read_partial(table: str | Path) -> list[str]:
    """What was not whole when a partial report was published (``environment.json`` beside ``matrix.jsonl``),
    or [] for a whole one."""
    try:
        data = json.loads(Path(table).with_name("environment.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    partial = data.get("partial") if isinstance(data, dict) else None
    return [str(p) for p in partial] if isinstance(partial, list) else []


SEALED = ("matrix.jsonl", CASES, "rewrites.json", "frontier.json")
"""The files of a table that the answers read, each hashed into its ``environment.json`` (``files``) by the report
that wrote them: a table cut, changed, or put together from two reports is refused (:func:`check_table`)."""

TEXT_LIMIT = 16 << 20
"""The most bytes a text the answers read whole may hold (a README, an ``environment.json``): 16 MiB, far over any
the report writes; ``/dev/zero`` given as one is refused, not read until memory runs out."""


def read_text(path: str | Path, what: str, limit: int = TEXT_LIMIT) -> str:
    """A regular file's UTF-8 text, at most ``limit`` bytes.

    Raises:
        HarnessError: one line naming ``path``: missing, not a regular file (a folder, a device), too large, not
            UTF-8, unreadable.
    """
    p = Path(path)
    try:
        if not p.is_file():
            kind = "no such file" if not p.exists() else "not a regular file (a folder, a device or a pipe)"
            raise HarnessError(f"{p}: {kind}; give {what}")
        with open(p, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise HarnessError(f"{p}: cannot be read ({exc.strerror or exc}); give {what}") from None
    if len(data) > limit:
        raise HarnessError(f"{p}: larger than {limit >> 20} MiB, so not {what}; give {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HarnessError(f"{p}: not UTF-8 text (byte {exc.start}: {exc.reason}); give {what}") from None


def check_table(table: str | Path, *, sealed: bool = False) -> dict[str, Any]:
    """Refuse a published table that is not whole: each file its report hashed (:data:`SEALED`) must be the one it
    wrote. A folder a report wrote (``cases.json`` beside ``matrix.jsonl``) must have its ``environment.json``; a bare
    ``matrix.jsonl`` or a shard has none to check against, and a table from before the files were hashed is taken as
    it is, unless ``sealed`` (the project's own README is written only from a table that proves it is whole).
    Returns the table's ``environment.json`` ({} where it has none).

    Raises:
        HarnessError: one line naming the file that is missing, damaged, cut or changed, and the fix.
    """
    p = table_path(table)
    env_path = p.with_name("environment.json")
    again = "republish it with `nox -s matrix` (or give a table as `nox -s report` wrote it)"
    if not env_path.exists():
        if sealed or p.with_name(CASES).exists():
            raise HarnessError(f"{env_path}: missing, so {p} cannot be checked to be whole; {again}")
        return {}
    try:
        env = json.loads(read_text(env_path, "a results folder's environment.json"))
    except ValueError as exc:
        raise HarnessError(f"{env_path}: not JSON ({exc}); {again}") from None
    if not isinstance(env, dict):
        raise HarnessError(f"{env_path}: not a JSON object; {again}")
    files = env.get("files")
    if files is None and not sealed:
        return env
    if not isinstance(files, dict) or "matrix.jsonl" not in files:
        raise HarnessError(f"{env_path}: records no hash of the table's files (a report from before they were); {again}")
    for name, sha in sorted(files.items()):
        f = p.with_name(str(name))
        if "/" in str(name) or _sha_of(f) != sha:
            raise HarnessError(
                f"{f}: not the file its report wrote (its SHA-256 is not the one {env_path.name} records: missing, cut, "
                f"changed, or from another report); {again}"
            )
    return env


def _sha_of(path: Path) -> str | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return _sha(str(path.resolve()), stat.st_mtime_ns, stat.st_size) if path.is_file() else None


@functools.lru_cache(maxsize=32)
def _sha(path: str, mtime_ns: int, size: int) -> str | None:
    del mtime_ns, size  # the key: another version of the file is hashed again
    try:
        return cache.sha256_file(path)
    except OSError:
        return None


def foreign_table(environment: Mapping[str, Any], release: str, profile: str) -> str | None:
    """Why a table placed as torch ``release``'s table of ``profile`` is another one (its ``environment.json`` says
    another profile, or another torch), or None where it is that table."""
    said = exported_with(environment).get("torch", "")
    if environment.get("profile") != profile or said.split("+", 1)[0] != release:
        return (
            f"not torch {release}'s table of profile {profile!r}: it says profile {environment.get('profile', '?')!r}, "
            f"exported with torch {said or '?'}"
        )
    return None


def table_path(path: str | Path) -> Path:
    """``results/`` or ``results/matrix.jsonl`` → the jsonl file (which must exist)."""
    p = Path(path)
    if p.is_dir():
        p = p / "matrix.jsonl"
    if not p.is_file():
        raise HarnessError(f"{p}: no such file; give a results folder or its matrix.jsonl (written by `nox -s report`)")
    return p


_RUNTIME = re.compile(r'"runtime":\s*"([^"]*)"')


def read_pins(path: str | Path) -> list[str]:
    """Every runtime pin of a published ``matrix.jsonl`` or a shard, oldest first, without parsing its cells (read once
    per file version: a question looks the runtime up in several tables)."""
    p = table_path(path)
    stat = p.stat()
    return list(_pins(str(p.resolve()), stat.st_mtime_ns, stat.st_size))


@functools.lru_cache(maxsize=32)
def _pins(path: str, mtime_ns: int, size: int) -> tuple[str, ...]:
    del mtime_ns, size  # the key: another version of the file is read again
    with open(path, encoding="utf-8") as f:
        return tuple(runtime_order({m.group(1) for line in f if (m := _RUNTIME.search(line))}))


_AXIS = re.compile(r'"exporter":\s*"([^"]*)".*?"opset":\s*(\d+)')
_ASKED = re.compile(r'"opset_asked":\s*(\d+)')


def read_axes(path: str | Path) -> tuple[list[str], dict[str, list[int]]]:
    """What a published ``matrix.jsonl`` measured, without parsing its cells: its runtime pins (oldest first) and,
    per exporter, the opsets it was asked for (``rewrites.json`` beside it adds the requests it left out)."""
    p = table_path(path)
    pins: set[str] = set()
    asked: dict[str, set[int]] = {}
    with open(p, encoding="utf-8") as f:
        for line in f:
            if (m := _RUNTIME.search(line)) is not None:
                pins.add(m.group(1))
            if (axis := _AXIS.search(line)) is not None and axis.group(1) != "*":
                opset = int(a.group(1)) if (a := _ASKED.search(line)) else int(axis.group(2))
                asked.setdefault(axis.group(1), set()).add(opset)
    for (_, exporter, opset) in read_rewrites(p):
        asked.setdefault(exporter, set()).add(opset)
    return runtime_order(pins), {e: sorted(o) for e, o in sorted(asked.items())}


def environment(table: str | Path) -> dict[str, Any]:
    """``environment.json`` beside a published ``matrix.jsonl``: what produced it ({} where missing or damaged)."""
    return _json_beside("environment", Path(table))


_BUILT = ("torch", "onnx", "onnxscript")


def exported_with(env: Mapping[str, Any]) -> dict[str, str]:
    """The versions an ``environment.json`` says its table was exported with (its ``export``): torch (its build named
    as installed: ``2.13.0+cpu``), onnx, onnxscript; {} where it does not say."""
    export = env.get("export")
    if not isinstance(export, dict):
        return {}
    return {k: str(export[k]) for k in _BUILT if export.get(k)}


def measured_with(table: str | Path) -> dict[str, str]:
    """:func:`exported_with` of the ``environment.json`` beside a published ``matrix.jsonl``."""
    return exported_with(environment(table))


def built_said(versions: Mapping[str, str]) -> str:
    """``torch 2.13.0+cpu, onnx 1.23.2, onnxscript 0.7.2``: :func:`exported_with`'s versions, as every answer says
    them."""
    return ", ".join(f"{k} {versions[k]}" for k in _BUILT if k in versions) or "versions not recorded"


FAULT_KEYS = ("fault", "fault_why", "fixed_in", "last_failing")
"""A published cell's fault, as :mod:`harness.answer.fault` derived it (the report's, no field of the cell)."""


def read_cells(
    path: str | Path, *, spread: bool = True, runtime: str | None = None, faults: dict[str, dict[str, Any]] | None = None
) -> list[CellRecord]:
    """Every cell of a published ``matrix.jsonl`` or a shard (only ``runtime``'s, when given: a line of
    another runtime is not parsed); with ``spread``, a runtime-wide record (an ``env-error`` for a whole
    column) is spread over the artifacts and probes the same file measures elsewhere (:func:`spread_wide`).
    ``faults``, when given, receives each failing cell's fault by its key (``fault``, ``fault_why``, ``fixed_in``,
    ``last_failing``, as published: :mod:`harness.answer.fault`)."""
    p = table_path(path)
    cells: dict[str, CellRecord] = {}
    with open(p, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            if runtime is not None and (m := _RUNTIME.search(line)) and m.group(1) != runtime:
                continue
            try:
                data = json.loads(line)
                cell = schema.record(data)
            except (ValueError, KeyError, TypeError) as exc:
                raise HarnessError(
                    f"{p}:{n}: not a cell record ({type(exc).__name__}: {exc}); "
                    "give a results/matrix.jsonl or a build/shards file"
                ) from None
            cells[cell.key] = cell
            if faults is not None and isinstance(data.get("fault"), str):
                faults[cell.key] = {k: data[k] for k in FAULT_KEYS if isinstance(data.get(k), str)}
    if not cells:
        raise HarnessError(f"{p}: holds no cells; rerun `nox -s matrix` (or the `run` and `report` sessions)")
    return spread_wide(cells.values()) if spread else list(cells.values())


def read_verdicts(table: str | Path) -> dict[str, str] | None:
    """Each cell's status in a published ``matrix.jsonl`` (cell key → status) without building its cells: what a
    republish compares its own with; None where there is no readable table."""
    try:
        with open(table, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        return {
            "|".join((r["case"], r["exporter"], f"op{r['opset']}", r["runtime"], r["provider"], r["probe"])): r["status"]
            for r in rows
        }
    except (OSError, ValueError, KeyError, TypeError):
        return None


Slot = tuple[str, str, int, str]
"""(case, exporter, opset, probe): a cell of every runtime × provider column."""


def slots(cells: Iterable[CellRecord]) -> set[Slot]:
    return {(c.case, c.exporter, c.opset, c.probe) for c in cells if not c.runtime_wide}


def spread_wide(cells: Iterable[CellRecord], over: Iterable[Slot] | None = None) -> list[CellRecord]:
    """A runtime-wide record (case ``*``) becomes one cell per slot (``over``, by default every artifact ×
    probe that ``cells`` measure on any runtime). With nothing to spread over it stays one record."""
    cells = list(cells)
    where = sorted(slots(cells) if over is None else set(over))
    out = [c for c in cells if not c.runtime_wide or not where]
    for wide in (c for c in cells if c.runtime_wide and where):
        out.extend(dataclasses.replace(wide, case=k, exporter=e, opset=o, probe=p) for k, e, o, p in where)
    return out


def read_cases(path: str | Path) -> dict[str, dict[str, str]]:
    """``cases.json`` beside a table: case → card (``{}`` when the folder has none, e.g. a shard)."""
    p = table_path(path).with_name(CASES)
    if not p.is_file():
        return {}
    try:
        data = json.loads(read_text(p, "the cases.json a report wrote"))
        return {str(k): dict(v) for k, v in data.items()}
    except (ValueError, AttributeError, TypeError) as exc:
        said = f"{type(exc).__name__}: {first_line(str(exc))}"
        raise HarnessError(f"{p}: damaged ({said}); regenerate it with `nox -s report`") from None


def runtime_key(pin: str) -> tuple[Any, ...]:
    """``onnxruntime==1.17.3`` → ("onnxruntime", (1, 17, 3), "1.17.3"): sorts pins oldest first, numerically."""
    package, _, version = pin.partition("==")
    parts = tuple(int(p) if p.isdigit() else -1 for p in re.split(r"[.+-]", version))
    return (package, parts, version)


def column_label(pin: str, provider: str, providers: int) -> str:
    """A table column's label: ``1.17.3``; with several providers ``1.17.3 cpu``, ``gpu-1.23.2 tensorrt-fp16``,
    ``trt-10.13.3.9 tensorrt`` (onnxruntime-gpu 1.31.1's CPU column is not onnxruntime 1.31.1's): the runtime's
    label as its kind gives it (:func:`harness.config.runtimes.label`)."""
    label = runtimes.label(pin)
    return label if providers == 1 else f"{label} {provider}"


def runtime_order(pins: Iterable[str]) -> list[str]:
    return sorted(set(pins), key=runtime_key)


def worst(cells: Iterable[CellRecord]) -> Status:
    """The status a group of cells folds to (the table's rule: the most severe wins)."""
    return max((c.status for c in cells), key=lambda s: s.severity)


def worst_hit(cells: Sequence[CellRecord]) -> tuple[Status, list[CellRecord], str, str]:
    """A group of cells' worst status, the cells that have it, which probes they are (``every probe`` or a list) and
    the first error line among them ("" where none says one)."""
    status = worst(cells)
    hit = [c for c in cells if c.status is status]
    where = "every probe" if len(hit) == len(cells) else ",".join(sorted({c.probe for c in hit}))
    line = next((c.error_line or c.localization or c.note for c in hit if c.error_line or c.localization or c.note), None)
    return status, hit, where, line or ""


def why(cells: Sequence[CellRecord]) -> str:
    """One line for a failing group of cells: worst status, which probes hit it, and its first error line."""
    status, _, where, line = worst_hit(cells)
    return f"{status.value} on {where}" + (f": {shorten(line)}" if line else "")


def opset_ranges(opsets: Sequence[int]) -> str:
    """``(13, 17, 18, 19, 20)`` → ``opsets 13, 17–20``."""
    said = ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in consecutive(sorted(opsets)))
    return f"opset{'s' * (len(opsets) > 1)} {said}"


@contextlib.contextmanager
def reading(source: str | Path) -> Iterator[None]:
    """A published table (or a file beside it) that is damaged: one line naming it, not a traceback."""
    try:
        yield
    except UnicodeDecodeError as exc:
        raise HarnessError(
            f"{source}: not UTF-8 text (byte {exc.start}: {exc.reason}); give a results/matrix.jsonl or a build/shards "
            "file as `nox -s report` writes it"
        ) from None
    except OSError as exc:
        raise HarnessError(f"{source}: cannot be read ({exc.strerror or exc}); check the path and its permissions") from None
    except (AttributeError, TypeError, KeyError, ValueError) as exc:  # a file beside it of another shape
        raise HarnessError(
            f"{source}: damaged ({type(exc).__name__}: {first_line(str(exc))}); regenerate it with `nox -s report`"
        ) from None


_T = TypeVar("_T")


def runs(items: Iterable[_T], follows: Callable[[_T, _T], bool]) -> list[list[_T]]:
    """``items`` cut into runs, each item in the run of the one before it where ``follows(before, item)``: what
    ``18–28``, ``opsets 20–23`` and ``1.18.1–1.32.0`` are said of."""
    out: list[list[_T]] = []
    for item in items:
        if out and follows(out[-1][-1], item):
            out[-1].append(item)
        else:
            out.append([item])
    return out


def consecutive(values: Sequence[int]) -> list[list[int]]:
    """Runs of consecutive integers: ``[17, 18, 19, 21]`` → ``[[17, 18, 19], [21]]``."""
    return runs(values, lambda a, b: b == a + 1)


def shorten(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def group_by(cells: Iterable[CellRecord], *fields: str) -> dict[tuple[Any, ...], list[CellRecord]]:
    out: dict[tuple[Any, ...], list[CellRecord]] = {}
    for c in cells:
        out.setdefault(tuple(getattr(c, f) for f in fields), []).append(c)
    return out
