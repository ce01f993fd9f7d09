"""What the user named, found in the published tables: the runtime, the cases, and the table that measured them.

A person types ``1.20``, ``onnxruntime=1.20.1``, ``Llama`` or ``Llama (decode step)``; a script passes an exact pin and
a case name. Both are answered: a runtime's minor alone means the newest patch measured (and the answer says so), a
case by its name or its title in any case, from whichever published table measured it (the default table first, then
each profile published in a folder of its own: ``results/architectures/``, ``results/openvino/``), and a near miss
gets "did you mean". Cases of two tables are refused with the split, since no one table answers for them together.
Standard library only, like :mod:`harness.answer.published`.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.answer.published import platform_columns, published_beside, read_cases, read_pins, runtime_order
from harness.config import platforms, runtimes
from harness.config.matrix import version_tuple
from harness.core.errors import HarnessError


@dataclasses.dataclass(frozen=True)
class Runtime:
    pin: str
    """The measured pin (``onnxruntime==1.20.1``)."""
    said: str = ""
    """How a spec that was not a pin was read (``1.20 is onnxruntime==1.20.1, the newest 1.20.x measured``)."""


def resolve_runtime(spec: str, measured: Iterable[str], source: str) -> Runtime:
    """``onnxruntime==1.17.3``, ``1.17.3``, ``ort-1.17.3`` (any kind's session id: ``ortgpu-1.31.1``), or a release's
    leading numbers (``1.20``: the newest 1.20.x measured) → one of the ``measured`` pins; else one line naming the
    nearest measured ones (by distance: 1.20.2 is nearer 1.20.1 than 1.21.1), or saying that it is not a version.

    Raises:
        HarnessError: what is wrong and what to give instead.
    """
    pins = runtime_order(measured)
    versions = [p.split("==")[1] for p in pins]
    listed = f"{versions[0]} … {versions[-1]}" if len(pins) > 2 else ", ".join(pins) or "nothing"
    text = spec.strip()
    if "==" not in text and (m := re.fullmatch(r"([A-Za-z][\w.-]*)\s*(=|~=|>=|<=|>|<|!=)\s*(\S+)", text)):  # one "="
        package, op, version = m.groups()
        guess = f"{package}=={version}"
        hint = f"; did you mean {guess}?" if guess in pins else f" (measured: {listed})"
        raise HarnessError(f"--runtime {spec}: give one measured pin, with ==, not {op!r}{hint}")
    prefix, _, rest = text.partition("-")
    if "==" not in text and (kind := runtimes.by_prefix(prefix)) is not None:
        text = f"{kind.package}=={rest}"
    elif "==" not in text:
        text = f"{runtimes.REFERENCE}=={text}"
    if text in pins:
        return Runtime(text)
    package, _, version = text.partition("==")
    if not re.fullmatch(r"\d+(\.\d+)*", version):
        example = f"--runtime {versions[-1]}" if versions else "--runtime 1.20.1"
        raise HarnessError(
            f"--runtime {spec}: {version!r} is not a version: give a measured one as 1.20.1, onnxruntime==1.20.1 "
            f"or ort-1.20.1, e.g. {example} (measured: {listed})"
        )
    packages = sorted({p.split("==")[0] for p in pins})
    if package not in packages and (exact := [p for p in pins if p.split("==")[1] == version]):
        close = difflib.get_close_matches(package, packages, n=1, cutoff=0.6)
        guess = next((p for p in exact if close and p.startswith(close[0] + "==")), exact[0])
        raise HarnessError(
            f"--runtime {spec}: no package {package!r} in {source}; did you mean {guess}? "
            f"(measured packages: {', '.join(packages)})"
        )
    same = [p for p in pins if p.split("==")[0] == package] or pins
    want = version_tuple(version)
    if len(want) < 3 and (newer := [p for p in same if version_tuple(p.split("==")[1])[: len(want)] == want]):
        pin = newer[-1]  # oldest first: the last is the newest patch of that release
        return Runtime(pin, f"{spec.strip()} is {pin}, the newest {version}.x measured")
    nearest = sorted(same, key=lambda p: _distance(version_tuple(p.split("==")[1]), want))[:2]
    raise HarnessError(
        f"--runtime {spec}: {text} is not in {source}; nearest measured: {', '.join(nearest) or 'none'} "
        f"(measured: {listed}); pick one of those, or run it: add it to matrix.toml and `nox -s matrix`"
    )


def _distance(have: tuple[int, ...], want: tuple[int, ...]) -> tuple[int, ...]:
    """How far a measured version is from the one asked: major first, then minor, then patch (each |difference|)."""
    width = max(len(have), len(want), 3)
    have, want = (*have, *(0,) * (width - len(have))), (*want, *(0,) * (width - len(want)))
    return tuple(abs(a - b) for a, b in zip(have, want, strict=True))


def runtime_table(spec: str, source: str) -> str:
    """The published table that measured runtime ``spec``: ``source`` when it did, else the first profile folder beside
    it that did (``results/openvino/`` for ``ortov-1.24.1``); ``source`` when none did (its refusal names the nearest)."""
    return next((table for table in tables(source) if _measures(table, spec)), source)


def column_table(spec: str, provider: str, source: str) -> str:
    """The published table that measured runtime ``spec`` on column ``provider`` (a platform column, ``cpu@aarch64``:
    the hardware table): ``source`` when it did, else the first table beside it that did; ``source`` when none did (its
    refusal says so)."""
    return next((table for table in tables(source) if _has_column(table, provider) and _measures(table, spec)), source)


def _has_column(table: str, provider: str) -> bool:
    """Whether a published table can hold column ``provider``, from its ``platforms.json`` (never the table read whole):
    a platform column where it lists one, any other column where it lists none (a profile with platforms has only
    platform columns). The answer then reads the cells, and a column that is not there is one line."""
    on = {column for _, column in platform_columns(table)}
    return provider in on if platforms.of(provider) else not on


def tables(source: str) -> list[str]:
    """``source`` and every table published in a folder of its own beside it (``results/architectures/``)."""
    return [source, *sorted(str(p) for p in Path(source).parent.glob("*/matrix.jsonl"))]


# Cases ----------------------------------------------------------------------------------------------------


def _said(text: str) -> str:
    return " ".join(text.split()).casefold()


def find_case(given: str, cards: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The case ``given`` names: its name, or its title, in any case and spacing (``Llama`` → ``llama``, ``llama (decode
    step)`` → ``llama_step``); None when it names none."""
    if given in cards:
        return given
    want = _said(given)
    for match in (lambda name: _said(name), lambda name: _said(str(cards[name].get("title") or ""))):
        found = [name for name in cards if match(name) == want]
        if found:
            return found[0]
    return None


def did_you_mean(given: str, cards: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The name or title nearest ``given`` (case aside), for a refusal."""
    said = {_said(n): n for n in cards} | {_said(str(c.get("title") or "")): str(c.get("title")) for c in cards.values()}
    said.pop("", None)
    close = difflib.get_close_matches(_said(given), list(said), n=1, cutoff=0.6)
    return said[close[0]] if close else None


def cases_table(cases: Sequence[str], source: str, runtime: str | None = None, provider: str = "cpu") -> str:
    """The published table that measured every one of ``cases`` (names or titles, any case) and, where ``runtime`` is
    given, that runtime: ``source`` when it did, else the first profile folder beside it that did (``--cases "Llama
    (decode step)"`` is answered by ``results/architectures/``); ``source`` when none did (its refusal names the
    nearest). A table that holds them all but not on column ``provider`` (the hardware table's platform columns, for
    ``cpu``) is not the one.

    Raises:
        HarnessError: the cases are measured, but by two tables (``bert`` by the architectures', ``frozen_batch_fixed``
            by the default): no one table answers for them together; or by a table that did not measure ``runtime``.
    """
    where: dict[str, list[str]] = {c: [] for c in cases}
    whole: list[str] = []
    every: dict[str, dict[str, dict[str, str]]] = {}
    damaged: list[str] = []
    for table in tables(source):
        try:
            cards = read_cases(table)
        except HarnessError as exc:  # damaged: it may be the table that holds them
            damaged.append(str(exc))
            continue
        every[table] = cards
        found = {c: find_case(c, cards) for c in cases}
        for c, name in found.items():
            if name is not None:
                where[c].append(table)
        if cards and all(found.values()) and (table == source or _has_column(table, provider)):
            whole.append(table)
    if runtime is not None and whole:
        measuring = [t for t in whole if _measures(t, runtime)]
        if not measuring:
            return whole[0]  # its own refusal: the runtime is not in it, nearest measured named
        return measuring[0]
    if whole:
        return whole[0]
    if (unknown := [c for c, found_in in where.items() if not found_in]) and damaged:  # the table that holds them?
        raise HarnessError(f"--cases {','.join(unknown)}: no readable table measured it, and one cannot be read: {damaged[0]}")
    if unknown:
        raise HarnessError(f"--cases: {'; '.join(_nearest(c, every) for c in unknown)}")
    if all(where.values()):  # each measured somewhere, but not together
        split: dict[str, list[str]] = {}
        for c, found_in in where.items():
            split.setdefault(_folder(found_in[0]), []).append(c)
        said = "; ".join(f"{', '.join(names)} in {folder}" for folder, names in split.items())
        asks = " and ".join(f"`--cases {','.join(names)}`" for names in split.values())
        raise HarnessError(
            f"--cases {','.join(cases)}: no one table measured them together ({said}); ask about each table's cases "
            f"on their own: {asks}"
        )
    return source


def _nearest(given: str, every: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> str:
    """``'Lama' is in no published table (did you mean 'llama', in results/architectures/?)`` and how to list one."""
    scored = [
        (difflib.SequenceMatcher(None, _said(given), _said(close)).ratio(), table, close)
        for table, cards in every.items()
        if (close := did_you_mean(given, cards)) is not None
    ]
    if scored:
        _, table, close = max(scored, key=lambda found: found[0])  # the nearest of every table's nearest
        folder = _folder(table)
        return (
            f"{given!r} is in no published table (did you mean {close!r}, in {folder}?); "
            f"`python -m harness list --results {folder.rstrip('/')}` lists that table's cases"
        )
    listing = ", ".join(f"`python -m harness list --results {_folder(t).rstrip('/')}`" for t in every)
    return f"{given!r} is in no published table; {listing or 'no table is published'} list{'s' * (len(every) == 1)} their cases"


def _measures(table: str, runtime: str) -> bool:
    """Whether ``table`` measured the runtime ``runtime`` names (a damaged table, not UTF-8, measured nothing)."""
    try:
        resolve_runtime(runtime, read_pins(table), table)
    except (HarnessError, OSError, ValueError):
        return False
    return True


def _folder(table: str) -> str:
    return str(Path(table).parent) + "/"


def is_safe_model(card: Mapping[str, str]) -> bool:
    """A fixed twin, or a case with no gotcha card: a model written the way the corpus recommends."""
    return bool(card.get("fixes")) or not card.get("symptom")


def _same_file(given: str, recorded: str) -> bool:
    if not recorded:
        return False
    if given == recorded or Path(given).resolve() == Path(recorded).resolve():
        return True
    a, b = Path(given).parts, Path(recorded).parts
    n = min(len(a), len(b))
    return n > 0 and a[-n:] == b[-n:] and Path(given).suffix == ".py"


@dataclasses.dataclass(frozen=True)
class Selection:
    cases: tuple[str, ...]
    """The selected case names, in table order."""
    said: str
    """The selection in words (``54 cases: the fixed twins and the cases with no gotcha``)."""
    how: str
    """``safe`` (the default), ``all``, ``cases`` or ``corpus``: what was asked."""


def select(
    measured: Sequence[str],
    cards: Mapping[str, Mapping[str, str]],
    source: str,
    *,
    cases: Sequence[str] = (),
    corpus: Sequence[str] = (),
    everything: bool = False,
) -> Selection:
    """The selected cases of a table that measured ``measured`` (its case names, in table order).

    Raises:
        HarnessError: a case, a corpus file or the table's cards are not there; one line with the fix.
    """
    if everything:
        return Selection(tuple(measured), f"{len(measured)} cases: the whole table", "all")
    chosen: list[str] = []
    said: list[str] = []
    if cases:
        known = {m: cards.get(m, {}) for m in measured}
        names = [find_case(c, known) for c in cases]
        unknown = [c for c, n in zip(cases, names, strict=True) if n is None]
        if unknown:
            hints = "; ".join(f"{u!r}" + (f" (did you mean {h!r}?)" if (h := did_you_mean(u, known)) else "") for u in unknown)
            listing = f"`python -m harness list --results {Path(source).parent}` lists its {len(measured)} cases"
            raise HarnessError(f"--cases: not in {source}: {hints}; {listing}")
        chosen += [n for n in names if n is not None]
        said.append("--cases")
    for given in corpus:
        if not cards:
            raise HarnessError(f"--corpus {given}: {source} has no cases.json beside it to say which file each case came from")
        mine = [c for c in measured if _same_file(given, cards.get(c, {}).get("source_file", ""))]
        if not mine and not Path(given).is_file():
            raise HarnessError(
                f"--corpus {given}: no such file; give the path of the corpus file whose cases you measured "
                f"(a .py file, as passed to `nox -s matrix -- --corpus`)"
            )
        if not mine:
            files = sorted({cards[c].get("source_file", "") for c in measured if c in cards} - {""})
            raise HarnessError(
                f"--corpus {given}: no case of it in {source} (its cases come from {', '.join(files[:4])}"
                f"{', …' if len(files) > 4 else ''}); measure it first: `nox -s matrix -- --corpus {given} "
                f"--only-corpus --out build/mine --results build/mine/results`, then pass --results build/mine/results"
            )
        chosen += mine
        said.append(given)
    if chosen:
        names_ = tuple(dict.fromkeys(chosen))
        shown = ", ".join(names_[:4]) + (", …" if len(names_) > 4 else "")
        plural = "s" * (len(names_) != 1)
        return Selection(names_, f"{len(names_)} case{plural} from {', '.join(said)} ({shown})", "cases" if cases else "corpus")
    if not cards:
        raise HarnessError(
            f"{source} has no cases.json beside it: pass --cases, --corpus or --all, or regenerate it with `nox -s report`"
        )
    safe = tuple(c for c in measured if is_safe_model(cards.get(c, {})))
    return Selection(safe, safe_said(safe, cards), "safe")


def safe_said(safe: Sequence[str], cards: Mapping[str, Mapping[str, str]]) -> str:
    """``54 cases: the fixed twins and the cases with no gotcha (--all for every case, --corpus for yours)``."""
    twins = sum(bool(cards.get(c, {}).get("fixes")) for c in safe)
    kinds = " and ".join(k for k, n in (("the fixed twins", twins), ("the cases with no gotcha", len(safe) - twins)) if n)
    return f"{len(safe)} cases: {kinds} (--all for every case, --corpus for yours)"


def missing_column(runtime: str, provider: str, providers: Iterable[str], source: str) -> str | None:
    """The one line for ``--provider`` naming a column this table did not measure on ``runtime`` (None: it did):
    whether the harness runs such a provider at all, where a table beside this one publishes it (``results/openvino/``),
    or that none does (GPU results come from a machine with an NVIDIA GPU)."""
    here = sorted(set(providers))
    if provider in here:
        return None
    measured = f"{runtime} was measured on {', '.join(here) or 'nothing'} only"
    flag = f"--platform {platforms.of(provider)}" if platforms.of(provider) else f"--provider {provider}"
    known = sorted({c for k in runtimes.KINDS for c in k.columns()} | {f"cpu@{p}" for p in platforms.names()})
    if provider not in known:
        close = difflib.get_close_matches(provider, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        return f"--provider {provider}: not a provider the harness runs{hint}: {', '.join(known)}; {measured}"
    folder = Path(source).parent
    where: dict[str, list[str]] = {}
    for row in published_beside(folder):
        if row["column"] == provider:
            where.setdefault(str(folder / row["folder"]), []).append(row["runtime"])
    if where:
        table, pins = next(iter(where.items()))
        return (
            f"{flag}: {measured}; {provider}'s columns are published in {table}/ "
            f"(on {', '.join(runtime_order(pins))}): add --results {table} --runtime {runtime_order(pins)[-1]}"
        )
    if runtimes.provider(provider).nvidia:
        return (
            f"--provider {provider}: {measured}; no {provider} column is published beside {source}: GPU results come from "
            "a run on a machine with an NVIDIA GPU (bench/gpu_check.sh, docs/runtimes.md), published in results/gpu/"
        )
    if platforms.of(provider):
        return (
            f"--platform {platforms.of(provider)}: {measured}; no table beside {source} measured it on "
            f"{platforms.of(provider)}: not answered for a platform never measured (the hardware profile measures "
            "platforms: nox -s matrix -- --profile hardware)"
        )
    return f"--provider {provider}: {measured}; no {provider} column is published beside {source}"
