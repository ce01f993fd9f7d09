"""``harness recommend``'s whole question, answered: the table it comes from, the runtime and cases found there, the
answer (:func:`harness.answer.recommend.combine`), and what the answer must say about itself: the torch, onnx and
onnxscript it was measured with, what its table measured (a narrower table says so first), and, where the user's own
environment holds another torch whose table is published, which table that is and how to ask it.

:func:`text` is what the command prints, :func:`to_json` what ``--json`` prints (:data:`SCHEMA`, documented in
docs/reading-the-table.md). Standard library only, like :mod:`harness.answer.published`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.answer import lookup, published, recommend
from harness.config import platforms
from harness.config.matrix import is_release, version_tuple
from harness.core.errors import HarnessError

SCHEMA = "harness.recommend/1"
"""``recommend --json``'s schema: its name and version. A field is added within a version, never renamed or removed."""


@dataclasses.dataclass(frozen=True)
class Asked:
    """A question and its answer, with everything the answer says about where it comes from."""

    answer: recommend.Answer
    table: str
    """The ``matrix.jsonl`` it was answered from."""
    selection: lookup.Selection
    measured_with: dict[str, str]
    """torch, onnx and onnxscript as the table's export environment recorded them."""
    runtimes: tuple[str, ...]
    """Every runtime pin the table measured."""
    opsets: dict[str, tuple[int, ...]]
    """Per exporter, the opsets the table asked for on this runtime × provider."""
    profile: str
    partial: tuple[str, ...] = ()
    narrower: str = ""
    """Where the table measured fewer opsets or runtimes than the default table, what it measured: the answer's first
    line."""
    notes: tuple[str, ...] = ()
    """What the answer says about itself beyond its facts: how a runtime spec was read, a narrower table, the
    user's own torch."""

    @property
    def code(self) -> int:
        """The exit status: 0 with an answer, 1 when no option passes every selected case."""
        return 0 if self.answer.best else 1


def ask(
    runtime: str,
    *,
    provider: str = "cpu",
    exporter: str | None = None,
    results: str | None = None,
    cases: Sequence[str] = (),
    corpus: Sequence[str] = (),
    everything: bool = False,
    torch: str | None = None,
    installed_torch: str | None = None,
    platform: str = "",
) -> Asked:
    """Answer ``recommend``'s question. ``results``: a table or its folder (default: this checkout's published
    ``results/``; with ``torch``, the folder of torch release tables); ``installed_torch``: the torch of the user's
    environment (``2.7.1+cu126``), for the note that names its table. ``platform``: the CPU the answer is for
    (``aarch64``: the column ``cpu@aarch64`` of the table that measured it, :mod:`harness.config.platforms`).

    Raises:
        HarnessError: bad input, or a table that cannot answer: one line with the fix.
    """
    notes: list[str] = []
    if platform:
        if platform not in platforms.names():
            raise HarnessError(f"--platform {platform}: not a platform the harness names; use {', '.join(platforms.names())}")
        if provider != "cpu":
            raise HarnessError(f"--platform {platform} --provider {provider}: a platform is the cpu provider's; drop --provider")
        provider = platforms.column(provider, platform)
    default = str(published.default_results())
    if torch is not None:
        given = str(torch_table_of(torch, results))
        chosen = True
    else:
        given, chosen = results or default, results is not None
    with published.reading(given):
        source = str(published.table_path(given))
    if not chosen and cases:  # cases only another profile measured (with the runtime asked): that profile's table
        source = lookup.cases_table(cases, source, runtime, provider)
    elif not chosen and platforms.of(provider):  # a platform's column: the table that measured it (results/hardware/)
        source = lookup.column_table(runtime, provider, source)
    elif not chosen:  # a runtime only another profile measured: that profile's table
        source = lookup.runtime_table(runtime, source)
    published.check_table(source)  # a table cut, changed or put together from two reports: refused, not answered
    with published.reading(source):  # a damaged table is one line naming it
        partial = tuple(published.read_partial(source))
        pin = lookup.resolve_runtime(runtime, published.read_pins(source), source)
        faults: dict[str, dict[str, Any]] = {}  # whose fault each failing cell is, and where a later runtime passes it
        cells = published.read_cells(source, runtime=pin.pin, faults=faults)  # the other columns do not enter the answer
    fixes = {key: f["fixed_in"] for key, f in faults.items() if "fixed_in" in f}
    if pin.said:
        notes.append(pin.said)
    with published.reading(Path(source).with_name(published.CASES)):
        cards = published.read_cases(source)
    loads, rewrites = published.read_frontier(source).get(pin.pin), published.read_rewrites(source)
    providers = {c.provider for c in cells if c.runtime == pin.pin}
    if (missing := lookup.missing_column(pin.pin, provider, providers, source)) is not None:
        raise HarnessError(missing)
    measured = list(dict.fromkeys(c.case for c in cells))
    selection = lookup.select(measured, cards, source, cases=cases, corpus=corpus, everything=everything)
    col = recommend.column(cells, pin.pin, provider, loads, rewrites, exporter, fixes=fixes)
    answer = recommend.combine(col, selection.cases, selection.said, exporter)
    with published.reading(source):
        pins, axes = published.read_pins(source), published.read_axes(source)[1] if torch is not None else {}
    env = published.environment(source)
    asked = Asked(
        answer=answer,
        table=source,
        selection=selection,
        measured_with=published.measured_with(source),
        runtimes=tuple(pins),
        opsets={e: tuple(o) for e, o in sorted(col.asked.items())},
        profile=str(env.get("profile") or Path(source).parent.name),
        partial=partial,
    )
    if installed_torch:
        notes += local_torch(asked, installed_torch, results if torch is not None else None, default)
    fewer = narrower(asked, axes, default) if torch is not None else []
    return dataclasses.replace(asked, notes=tuple(notes), narrower=fewer[0] if fewer else "")


def transform_tables(name: str, results: str | None) -> list[tuple[str, Path, str]]:
    """The published tables of transform ``name`` — ``(transform, its matrix.jsonl, what it does)`` — found through the
    ``transforms.json`` of a folder of transform tables (``results/quantized/``) in ``results`` or one level below;
    a family name (``int8-qdq``) names each of its members (``int8-qdq-u8``, ``int8-qdq-s8``).

    Raises:
        HarnessError: no published table of such a transform (one line naming the transforms there are).
    """
    root = Path(results) if results else published.default_results()
    if root.is_file():
        root = root.parent
    summaries = [root / published.TRANSFORM_SUMMARY, *sorted(root.glob(f"*/{published.TRANSFORM_SUMMARY}"))]
    found: list[tuple[str, Path, str]] = []
    known: list[str] = []
    for summary in summaries:
        if not summary.is_file():
            continue
        with published.reading(summary):
            data = json.loads(published.read_text(summary, "a transforms.json as harness transform-report writes it"))
        for t in data.get("transforms", []) if isinstance(data, dict) else []:
            member = str(t.get("transform", ""))
            known.append(member)
            if (member == name or member.startswith(name + "-")) and not t.get("problem"):
                found.append((member, summary.parent / str(t.get("table", member)) / "matrix.jsonl", str(t.get("says", ""))))
    if not found:
        listed = f"the published ones are {', '.join(known)}" if known else f"none is published under {root}"
        raise HarnessError(
            f"--transform {name}: no published table of it ({listed}); publish it with "
            "`nox -s matrix -- --profile quantized`"
        )
    return found


def torch_table_of(release: str, results: str | None) -> Path:
    """The table of one torch release: the default table where that release is the one it was exported with (the
    torch table's newest release is the default table's measurement), else ``<results>/<release>`` (by default the
    published ``results/torch/``): one of the releases the table across them lists (its ``torch.json``), checked to
    be that release's table.

    Raises:
        HarnessError: not a release name, no table of that release (the measured ones named), or a table there that
            is another release's or another profile's.
    """
    if not is_release(release):
        raise HarnessError(
            f"--torch {release}: not a torch release; write X.Y.Z as the torch table names them, e.g. --torch 2.7.1"
        )
    default = Path(published.default_results())
    base = Path(results) if results else default / "torch"
    if results is None and _own_release(default) == release:
        return default
    profile, listed = _listed(base)
    table = base / release
    if (listed is None or release in listed) and (table / "matrix.jsonl").is_file():
        env = published.check_table(table)
        profile = profile or str(env.get("profile") or "torch")
        if (foreign := published.foreign_table(env, release, profile)) is not None:
            raise HarnessError(
                f"--torch {release}: {table / 'environment.json'}: {foreign}; republish it with "
                "`nox -s matrix -- --profile torch`"
            )
        return table
    measured = releases(base, None if results else default)
    said = f"it measured torch {', '.join(measured)}" if measured else "it holds no torch table"
    raise HarnessError(
        f"--torch {release}: no table of torch {release} in {base} ({said}); "
        "add the release to [profiles.torch] torch and run `nox -s matrix -- --profile torch`"
    )


def _listed(base: Path) -> tuple[str | None, list[str] | None]:
    """The profile of the table across torch releases in ``base`` and the releases it lists (its ``torch.json``);
    (None, None) where it has none."""
    summary = base / published.TORCH_SUMMARY
    if not summary.exists():
        return None, None
    with published.reading(summary):
        data = json.loads(published.read_text(summary, "the torch table's torch.json"))
        return str(data["inputs"]["profile"]), [str(r["torch"]) for r in data["releases"]]


def releases(base: Path, default: Path | None) -> list[str]:
    """The torch releases with a published table: each folder of ``base`` holding one, and the default table's own."""
    listed = _listed(base)[1] if base.is_dir() else None
    found = {
        p.name for p in base.glob("*")
        if is_release(p.name) and (p / "matrix.jsonl").is_file() and (listed is None or p.name in listed)
    }  # fmt: skip
    if default is not None and (own := _own_release(default)):
        found.add(own)
    return sorted(found, key=version_tuple)


def _own_release(table: Path) -> str:
    """The torch release a published table was exported with (``2.13.0``; "" where it does not say)."""
    return _release(published.measured_with(table / "matrix.jsonl").get("torch", ""))


def _release(build: str) -> str:
    """``2.13.0+cpu`` → ``2.13.0``."""
    return build.split("+", 1)[0]


def narrower(asked: Asked, axes: dict[str, list[int]], default: str) -> list[str]:
    """Where a torch release's table measured fewer opsets or runtimes than the default table, one line saying what
    it measured (the answer's range is that table's, not the runtime's)."""
    try:
        pins, every = published.read_axes(Path(default) / "matrix.jsonl")
    except (HarnessError, OSError, ValueError):
        return []
    if Path(asked.table).resolve() == (Path(default) / "matrix.jsonl").resolve():
        return []
    fewer_opsets = any(set(axes.get(e, ())) < set(o) for e, o in every.items())
    fewer_runtimes = set(asked.runtimes) < set(pins)
    if not (fewer_opsets or fewer_runtimes):
        return []
    torch = _release(asked.measured_with.get("torch", "")) or "this release"
    return [
        f"torch {torch}'s table measured {axes_said(axes)} on {_versions(asked.runtimes)} only (the default table: "
        f"{axes_said(every)} on {len(pins)} runtimes): an opset or runtime it did not measure is not in this answer"
    ]


def axes_said(axes: Mapping[str, Sequence[int]]) -> str:
    """``TorchScript 13–23 and dynamo 18–28``: the opsets asked, per exporter."""
    names = {"torchscript": "TorchScript", "dynamo": "dynamo"}
    ordered = sorted(axes.items(), key=lambda kv: kv[0] != "torchscript")
    return " and ".join(f"{names.get(e, e)} {recommend.span(list(o))}" for e, o in ordered)


def _versions(pins: Sequence[str]) -> str:
    return ", ".join(p.split("==")[-1] for p in pins)


def local_torch(asked: Asked, installed: str, results: str | None, default: str) -> list[str]:
    """Where the user's environment holds another torch than the one the answer was measured with: which table
    measured theirs and how to ask it, or that none did."""
    mine, theirs = _release(installed), _release(asked.measured_with.get("torch", ""))
    if not is_release(mine) or not theirs or mine == theirs:
        return []
    base = Path(results) if results else Path(default) / "torch"
    measured = releases(base, Path(default))
    if mine in measured:
        return [
            f"your environment has torch {installed}; this answer is torch {theirs}'s: `--torch {mine}` answers from its table"
        ]
    return [
        f"your environment has torch {installed}, which no published table measured (torch tables: "
        f"{', '.join(measured) or 'none'}); this answer is torch {theirs}'s"
    ]


def installed_torch() -> str | None:
    """The torch of the environment this command runs in (its distribution's version; torch is not imported)."""
    from importlib import metadata

    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


# Saying it -----------------------------------------------------------------------------------------------


def head(asked: Asked) -> list[str]:
    """The lines after the answer's first: the table, what it was measured with and what it measured, the notes."""
    built = published.built_said(asked.measured_with)
    lines = [
        f"answered from {asked.table} (profile {asked.profile}): exported with {built}; measured {axes_said(asked.opsets)} "
        f"on {len(asked.runtimes)} runtime{'s' * (len(asked.runtimes) != 1)} "
        f"({_versions(asked.runtimes[:1])}{' … ' + _versions(asked.runtimes[-1:]) if len(asked.runtimes) > 1 else ''})"
    ]
    return lines + list(asked.notes)


def partial_said(asked: Asked) -> str:
    """The first line of an answer from a PARTIAL table (what its report left out), else ""."""
    if not asked.partial:
        return ""
    return (
        f"PARTIAL TABLE, not the answer: {len(asked.partial)} shard(s) were not whole when it was published, so what "
        f"follows may change ({asked.partial[0]})"
    )


def text(asked: Asked) -> str:
    said = recommend.render(asked.answer, head=head(asked))
    first = [line for line in (partial_said(asked), asked.narrower) if line]
    return "\n".join([*first, said])


def _option(answer: recommend.Answer, o: recommend.Option) -> dict[str, Any]:
    return {
        "exporter": o.exporter,
        "opset": o.opset,
        "ok": o.ok,
        "ask": o.ask,
        "asks": list(o.asks),
        "selected": o.selected,
        "passing": o.selected - len(o.failing),
        "failing": [{"case": c, "why": w} for c, w in o.failing],
        "skipped": [{"case": c, "why": w} for c, w in o.skipped],
        "elsewhere": [{"case": c, "wrote": w} for c, w in o.elsewhere],
        "table_passing": o.corpus_pass,
        "table_counted": o.corpus_total,
        "unloadable": answer.cannot_load(o.exporter),
    }


def to_json(asked: Asked) -> dict[str, Any]:
    """``recommend --json``: :data:`SCHEMA` (docs/reading-the-table.md describes every field)."""
    a = asked.answer
    best = a.best
    return {
        "schema": SCHEMA,
        "table": asked.table,
        "profile": asked.profile,
        "partial": list(asked.partial),
        "measured_with": asked.measured_with,
        "measured": {"runtimes": list(asked.runtimes), "opsets": {e: list(o) for e, o in asked.opsets.items()}},
        "runtime": a.runtime,
        "provider": a.provider,
        "exporter": a.exporter,
        "loads": None if a.frontier is None else {"max_ir": a.max_ir, "max_opset": a.max_opset},
        "selection": {"how": asked.selection.how, "cases": list(asked.selection.cases), "said": asked.selection.said},
        "recommended": None if best is None else {"exporter": best.exporter, "opset": best.opset, "ask": best.ask},
        "per_exporter": {e: _option(a, o) for e, o in recommend.per_exporter(a).items()},
        "options": [_option(a, o) for o in a.options],
        "unloadable": dict(a.unloadable),
        "notes": [n for n in (asked.narrower, *asked.notes) if n],
        "exit": asked.code,
    }

