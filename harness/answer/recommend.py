"""``harness recommend``: which exporter and opset to ship for one runtime × provider, from the table.

The answer is the highest opset, and the exporter, at which every selected
case passes every probe on that runtime and provider; ties go to the
exporter under which more of the whole corpus passes. Every other
(exporter, opset) follows, ranked, with the selected cases that fail there
and why. The selection is the user's own cases (``--corpus`` / ``--cases``),
or by default the corpus's *safe* models: the fixed twins and the cases that
carry no gotcha. Standard library only, like :mod:`harness.answer.published`.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from harness.answer.published import consecutive, group_by, runtime_order, why
from harness.build import frontier
from harness.config import runtimes
from harness.config.matrix import version_tuple
from harness.core.errors import HarnessError
from harness.core.records import CellRecord, Status

_Cell = TypeVar("_Cell")
"""A cell as a count reads it: a :class:`CellRecord`, or anything with a ``status``."""


@dataclasses.dataclass(frozen=True)
class Option:
    """One (exporter, opset) on the asked runtime × provider."""

    exporter: str
    opset: int
    failing: tuple[tuple[str, str], ...]
    """(case, why) for each selected case that does not pass every probe here."""
    selected: int
    """Selected cases that apply to this exporter (a case that declares other exporters is skipped here)."""
    corpus_pass: int
    """Cases of the whole table that pass every probe here (the tie-break)."""
    corpus_total: int
    skipped: tuple[tuple[str, str], ...] = ()
    """(case, why) for each selected case that does not apply to this exporter: neither a pass nor a failure."""
    written: tuple[tuple[str, int], ...] = ()
    """(case, opset written) for each selected case the exporter, asked for this opset, wrote at another: its
    verdict is that row's (the same export)."""

    @property
    def ok(self) -> bool:
        return not self.failing

    @property
    def label(self) -> str:
        return f"{self.exporter} opset {self.opset}"


@dataclasses.dataclass(frozen=True)
class Answer:
    runtime: str
    provider: str
    selection: str
    """What was selected, in words (``26 cases: the fixed twins and the cases with no gotcha``)."""
    cases: tuple[str, ...]
    options: tuple[Option, ...]
    """Best first: every (exporter, opset) the table measured on this runtime × provider."""
    frontier: str | None = None
    """What the runtime loads, measured (``loads up to IR 9 / opset 19 (measured)``)."""
    exporter: str | None = None
    """The one exporter asked about (``--exporter``); None: both."""
    unloadable: tuple[tuple[str, str], ...] = ()
    """(exporter, why) for an exporter nothing of which loads on this runtime, for a reason the frontier gives:
    ``dynamo writes IR 10; 1.17.3 loads up to IR 9``. Its options are that one reason, not a failure per case."""

    @property
    def best(self) -> Option | None:
        return self.options[0] if self.options and self.options[0].ok else None

    def cannot_load(self, exporter: str) -> str | None:
        return dict(self.unloadable).get(exporter)


def table_for(spec: str, source: str) -> str:
    """The published table that measured runtime ``spec``: ``source`` (``results/matrix.jsonl``) when it did, else the
    first profile folder beside it that did (``results/gpu/``, ``results/openvino/``), so ``--runtime ortgpu-1.31.1
    --provider cuda`` needs no ``--results``; ``source`` when none did (its refusal names the nearest measured)."""
    from harness.answer.published import read_pins

    for table in [source, *sorted(str(p) for p in Path(source).parent.glob("*/matrix.jsonl"))]:
        try:
            resolve_runtime(spec, read_pins(table), table)
        except (HarnessError, OSError, ValueError):  # not there, or damaged (not UTF-8): not the one that measured it
            continue
        return table
    return source


def resolve_runtime(spec: str, measured: Iterable[str], source: str) -> str:
    """``onnxruntime==1.17.3``, ``1.17.3``, ``ort-1.17.3`` (any kind's session id: ``ortgpu-1.31.1``, ``trt-10.13.3.9``)
    → one of the ``measured`` pins, or one line naming the nearest measured ones (or saying that it is not a version)."""
    pins = runtime_order(measured)
    versions = [p.split("==")[1] for p in pins]
    measured = f"{versions[0]} … {versions[-1]}" if len(pins) > 2 else ", ".join(pins) or "nothing"
    text = spec.strip()
    prefix, _, rest = text.partition("-")
    if "==" not in text and (kind := runtimes.by_prefix(prefix)) is not None:
        text = f"{kind.package}=={rest}"
    elif "==" not in text:
        text = f"{runtimes.REFERENCE}=={text}"
    if text in pins:
        return text
    package, _, version = text.partition("==")
    if not re.fullmatch(r"\d+(\.\d+)*", version):
        example = f"--runtime {versions[-1]}" if versions else "--runtime 1.20.1"
        raise HarnessError(
            f"--runtime {spec}: {version!r} is not a version: give a measured one as 1.20.1, onnxruntime==1.20.1 "
            f"or ort-1.20.1, e.g. {example} (measured: {measured})"
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
    older = [p for p in same if version_tuple(p.split("==")[1]) < want]
    newer = [p for p in same if version_tuple(p.split("==")[1]) > want]
    nearest = [p for p in (newer[:1] + older[-1:]) if p]
    raise HarnessError(
        f"--runtime {spec}: {text} is not in {source}; nearest measured: {', '.join(nearest) or 'none'} "
        f"(measured: {measured}); pick one of those, or run it: add it to matrix.toml and `nox -s matrix`"
    )


def missing_column(runtime: str, provider: str, cells: Sequence[CellRecord], source: str) -> str | None:
    """The one line for ``--provider`` naming a column this table did not measure on ``runtime`` (None: it did):
    whether the harness runs such a provider at all, where a table beside this one publishes it (``results/openvino/``),
    or that none does (GPU results come from a machine with an NVIDIA GPU)."""
    from harness.answer.published import published_beside

    here = sorted({c.provider for c in cells if c.runtime == runtime})
    if provider in here:
        return None
    measured = f"{runtime} was measured on {', '.join(here) or 'nothing'} only"
    known = sorted({c for k in runtimes.KINDS for c in k.columns()})
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
            f"--provider {provider}: {measured}; {provider}'s columns are published in {table}/ "
            f"(on {', '.join(runtime_order(pins))}): add --results {table} --runtime {runtime_order(pins)[-1]}"
        )
    if runtimes.provider(provider).nvidia:
        return (
            f"--provider {provider}: {measured}; no {provider} column is published beside {source}: GPU results come from "
            "a run on a machine with an NVIDIA GPU (bench/gpu_check.sh, docs/runtimes.md), published in results/gpu/"
        )
    return f"--provider {provider}: {measured}; no {provider} column is published beside {source}"


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


def by_title(given: str, measured: Sequence[str], cards: Mapping[str, Mapping[str, str]]) -> str:
    """A case's name as given, or the name of the measured case whose title it is (``Llama (decode step)`` →
    ``llama_step``; case and spaces ignored); else ``given`` as it is."""
    if given in measured:
        return given
    want = " ".join(given.split()).casefold()
    return next((m for m in measured if " ".join(cards.get(m, {}).get("title", "").split()).casefold() == want), given)


def cases_table(cases: Sequence[str], source: str) -> str:
    """The published table that measured every one of ``cases`` (names or titles): ``source`` when it did, else the
    first profile folder beside it that did (``results/architectures/`` for ``--cases "Llama (decode step)"``), so
    a real model's answer needs no ``--results``; ``source`` when none did (its refusal names the nearest)."""
    from harness.answer.published import read_cases

    for table in [source, *sorted(str(p) for p in Path(source).parent.glob("*/matrix.jsonl"))]:
        try:
            cards = read_cases(table)
        except (HarnessError, OSError, ValueError, AttributeError):  # damaged: not the table that measured them
            continue
        if cards and all(by_title(c, list(cards), cards) in cards for c in cases):
            return table
    return source


def select(
    cells: Sequence[CellRecord],
    cards: Mapping[str, Mapping[str, str]],
    source: str,
    *,
    cases: Sequence[str] = (),
    corpus: Sequence[str] = (),
    everything: bool = False,
) -> tuple[tuple[str, ...], str]:
    """The selected case names, in table order, and the selection in words."""
    measured = list(dict.fromkeys(c.case for c in cells))
    if everything:
        return tuple(measured), f"{len(measured)} cases: the whole table"
    chosen: list[str] = []
    said: list[str] = []
    if cases:
        cases = [by_title(c, measured, cards) for c in cases]
        unknown = [c for c in cases if c not in measured]
        if unknown:
            titles = {cards.get(m, {}).get("title", ""): m for m in measured} | {m: m for m in measured}
            hints = {u: difflib.get_close_matches(u, [t for t in titles if t], n=1) for u in unknown}
            hint = "; ".join(f"{u!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for u, h in hints.items())
            raise HarnessError(f"--cases: not in {source}: {hint}; `harness list` names the corpus")
        chosen += cases
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
        names = tuple(dict.fromkeys(chosen))
        return names, f"{len(names)} case{'s' * (len(names) != 1)} from {', '.join(said)}"
    if not cards:
        raise HarnessError(
            f"{source} has no cases.json beside it: pass --cases, --corpus or --all, or regenerate it with `nox -s report`"
        )
    safe = tuple(c for c in measured if is_safe_model(cards.get(c, {})))
    twins = sum(bool(cards.get(c, {}).get("fixes")) for c in safe)
    kinds = " and ".join(k for k, n in (("the fixed twins", twins), ("the cases with no gotcha", len(safe) - twins)) if n)
    return safe, f"{len(safe)} cases: {kinds} (--all for every case, --corpus for yours)"


def recommend(
    cells: Sequence[CellRecord],
    runtime: str,
    provider: str,
    cases: Sequence[str],
    selection: str,
    loads: Mapping[str, Any] | None = None,
    exporter: str | None = None,
    rewrites: Mapping[tuple[str, str, int], int] | None = None,
) -> Answer:
    """Rank every (exporter, opset) measured on ``runtime`` × ``provider`` for the selected ``cases``
    (only ``exporter``'s when given); ``loads``, the runtime's measured frontier (:mod:`harness.build.frontier`),
    explains the refusals at load. A case whose cells here are all ``skipped`` (it applies to another
    exporter) neither passes nor fails: it is left out of that option's count and named apart. ``rewrites``
    ((case, exporter, opset asked) → opset written, :func:`harness.answer.published.read_rewrites`) answers a request
    the exporter wrote at another opset with that row: asked for 28, dynamo keeps 18 for an SDPA model."""
    column = _column(cells, runtime, provider, exporter)
    by_artifact = group_by(column, "exporter", "opset", "case")
    combos = sorted({(c.exporter, c.opset) for c in column})
    options = [_option(by_artifact, exp, opset, cases, loads, rewrites or {}) for exp, opset in combos]
    unloadable = tuple((e, why) for e in sorted({c.exporter for c in column}) if (why := _unloadable(column, e, loads)))
    blocked = dict(unloadable)  # an exporter that loads nothing here comes last, whatever its counts
    options.sort(key=lambda o: (not o.ok, o.exporter in blocked, len(o.failing), -o.opset, -o.corpus_pass, o.exporter))
    frontier_line = frontier.describe(loads) + " (measured)" if loads else None
    return Answer(runtime, provider, selection, tuple(cases), tuple(options), frontier_line, exporter, unloadable)


def _unloadable(column: Sequence[CellRecord], exporter: str, loads: Mapping[str, Any] | None) -> str | None:
    """One line where nothing ``exporter`` wrote loads on this runtime and the measured frontier says why (every cell
    that is not an export failure or a skip is a refusal at load of a model past the frontier); None otherwise."""
    if not loads or loads.get("max_ir") is None:
        return None
    mine = [c for c in column if c.exporter == exporter and c.status not in (Status.SKIPPED, Status.EXPORT_FAIL)]
    if not mine or any(c.status is not Status.LOAD_FAIL for c in mine):
        return None
    if any(frontier.explain(loads, c.ir_version, c.opset_actual or c.opset) is None for c in mine):
        return None  # a refusal the frontier does not explain: a failure of its own, shown as one
    irs = sorted({c.ir_version for c in mine if c.ir_version is not None})
    opsets = sorted({c.opset_actual or c.opset for c in mine})
    version = str(loads.get("runtime", "")).split("==")[-1] or "this runtime"
    if irs and irs[0] > loads["max_ir"]:
        return f"{exporter} writes IR {_span(irs)}; {version} loads up to IR {loads['max_ir']}"
    if opsets[0] > loads["max_opset"]:
        return f"{exporter} writes opset {_span(opsets)}; {version} loads up to opset {loads['max_opset']}"
    return (
        f"{exporter} writes IR {_span(irs)} at opset {_span(opsets)}; {version} loads up to IR {loads['max_ir']} "
        f"/ opset {loads['max_opset']}"
    )


def _span(values: Sequence[int]) -> str:
    """``10`` / ``18–28`` / ``7, 9``: numbers that are one run of consecutive numbers as a range."""
    if len(values) > 1 and len(consecutive(values)) == 1:
        return f"{values[0]}–{values[-1]}"
    return ", ".join(map(str, values))


def _column(cells: Sequence[CellRecord], runtime: str, provider: str, exporter: str | None) -> list[CellRecord]:
    """The cells of ``runtime`` × ``provider`` (``exporter``'s only, when given), refusing with one line a column the
    table lacks or in which no cell ran."""
    column = [c for c in cells if c.runtime == runtime and c.provider == provider]
    if not column:
        providers = sorted({c.provider for c in cells if c.runtime == runtime})
        raise HarnessError(f"--provider {provider}: {runtime} was measured on {', '.join(providers)} only; pick one of those")
    if exporter is not None:
        measured = sorted({c.exporter for c in cells})
        if exporter not in measured:
            close = difflib.get_close_matches(exporter, measured, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise HarnessError(f"--exporter {exporter}: not in this table{hint}; pick one of {', '.join(measured)}")
        column = [c for c in column if c.exporter == exporter]
        if not column:
            raise HarnessError(f"--exporter {exporter}: no cell of it on {runtime} × {provider}; drop --exporter")
    if not any(c.status not in (Status.UNAVAILABLE, Status.ENV_ERROR) for c in column):
        first = column[0]
        raise HarnessError(
            f"{runtime} on {provider}: no cell ran in this table "
            f"({first.status.value}: {first.error_line or first.note or '?'}); "
            "nothing to recommend from it"
        )
    return column


def _option(
    by_artifact: Mapping[tuple[Any, ...], list[CellRecord]],
    exp: str,
    opset: int,
    cases: Sequence[str],
    loads: Mapping[str, Any] | None,
    rewrites: Mapping[tuple[str, str, int], int],
) -> Option:
    """One (exporter, opset): the selected cases that fail there and why, those it skips, those answered by the row
    of the opset the exporter wrote; and the whole corpus's passes there (the tie-break)."""
    failing, skipped, written = [], [], []
    for case in cases:
        got: Sequence[CellRecord] | None = by_artifact.get((exp, opset, case))
        if not got:
            got, wrote = _written_row(by_artifact, rewrites, exp, opset, case)
            if got:
                written.append((case, wrote))
        if not got:
            failing.append((case, "not measured here"))
        elif all(c.status is Status.SKIPPED for c in got):
            skipped.append((case, got[0].error_line or f"does not apply to {exp}"))
        elif any(c.status not in (Status.PASS, Status.SKIPPED) for c in got):
            failing.append((case, why(got) + _past_frontier(got, loads)))
    corpus = counted_row(by_artifact, exp, opset, rewrites)
    passing = sum(passes(got) for got in corpus.values())
    return Option(exp, opset, tuple(failing), len(cases) - len(skipped), passing, len(corpus), tuple(skipped), tuple(written))


def counted_row(
    by_artifact: Mapping[tuple[Any, ...], Sequence[Any]], exp: str, opset: int, rewrites: Mapping[tuple[str, str, int], int]
) -> dict[str, Sequence[Any]]:
    """The cases counted at (``exp``, ``opset``) on one column, each with its cells: every case that applies to the
    exporter (a case whose cells are all ``skipped`` is neither a pass nor a failure), and every case the exporter,
    asked for this opset, wrote at another (its cells are that row's: the same export). The one denominator of
    every count the project publishes: ``recommend``, the README's answer and summary, the page. ``by_artifact``:
    (exporter, opset, case) → the cells (:class:`CellRecord`, or anything with a ``status``)."""
    corpus = {k[2]: v for k, v in by_artifact.items() if k[:2] == (exp, opset) and not all(c.status is Status.SKIPPED for c in v)}
    for case, e, asked in rewrites:  # the same export, recorded under the opset written
        if (e, asked) != (exp, opset) or case in corpus:
            continue
        got, _ = _written_row(by_artifact, rewrites, exp, opset, case)
        if got and not all(c.status is Status.SKIPPED for c in got):
            corpus[case] = got
    return corpus


def passes(cells: Sequence[Any]) -> bool:
    """A counted case passes when every probe passes (a skipped probe neither passes nor fails)."""
    return all(c.status in (Status.PASS, Status.SKIPPED) for c in cells)


def _written_row(
    by_artifact: Mapping[tuple[Any, ...], Sequence[_Cell]],
    rewrites: Mapping[tuple[str, str, int], int],
    exporter: str,
    opset: int,
    case: str,
) -> tuple[Sequence[_Cell], int]:
    """Where ``exporter``, asked for ``opset``, wrote another opset for ``case``: that row's cells and the opset
    written (``[]`` when it did not, or the row is not in the table)."""
    wrote = rewrites.get((case, exporter, opset))
    if wrote is None:
        return [], opset
    return by_artifact.get((exporter, wrote, case)) or [], wrote


def _past_frontier(got: Sequence[CellRecord], loads: Mapping[str, Any] | None) -> str:
    """`` (1.16.3 loads up to IR 9 / opset 19; the model is IR 10)`` for a refusal the frontier explains."""
    refused = [c for c in got if c.status is Status.LOAD_FAIL]
    if not loads or not refused:
        return ""
    c = refused[0]
    said = frontier.explain(loads, c.ir_version, c.opset_actual or c.opset)
    return f" ({said})" if said else ""


def _names(pairs: Sequence[tuple[str, Any]]) -> str:
    return ", ".join(c for c, _ in pairs[:3]) + (f" and {len(pairs) - 3} more" if len(pairs) > 3 else "")


def _notes(opt: Option) -> str:
    """``; loop_scripted skipped: does not apply to dynamo`` for an option with skipped cases, and which
    cases the exporter wrote at another opset than this one."""
    said = ""
    if opt.written:
        wrote = sorted({o for _, o in opt.written})
        said += (
            f"; {_names(opt.written)} written at opset {', '.join(map(str, wrote))} "
            f"(asked for {opt.opset}, the exporter kept what it built)"
        )
    if opt.skipped:
        said += f"; {_names(opt.skipped)} skipped: {'does' if len(opt.skipped) == 1 else 'do'} not apply to {opt.exporter}"
    return said


def exporter_said(answer: Answer, opt: Option) -> str:
    """One exporter's best on this runtime, in short: ``opset 21: all 53 pass``, ``none: dynamo writes IR 10; 1.17.3
    loads up to IR 9``, or ``none; closest opset 18: 1 of 54 fail (…)``."""
    if opt.ok:
        return f"opset {opt.opset}: {_passes(opt)}{_notes(opt)}"
    if (why := answer.cannot_load(opt.exporter)) is not None:
        return f"none: {why}"
    return (
        f"none; closest opset {opt.opset}: {len(opt.failing)} of {opt.selected} fail "
        f"({', '.join(c for c, _ in opt.failing[:3])}{' …' if len(opt.failing) > 3 else ''}){_notes(opt)}"
    )


def _passes(opt: Option) -> str:
    """``all 54 pass`` / ``the 1 case passes``, counting the cases that apply here."""
    return f"all {opt.selected} pass" if opt.selected != 1 else "the 1 case passes"


def render(answer: Answer, *, examples: int = 6) -> str:
    """The answer as the command prints it."""
    only = f" ({answer.exporter} exporter only)" if answer.exporter else ""
    lines = [f"{answer.runtime} on {answer.provider}{only}, {answer.selection}:"]
    if answer.frontier:
        lines.append(f"{answer.runtime.split('==')[-1]} {answer.frontier}")
    lines.append("")
    best = answer.best
    if best:
        every = f"all {best.selected} selected cases pass" if best.selected != 1 else "the 1 selected case passes"
        lines.append(
            f"recommended: {best.label}: {every} every probe "
            f"({best.corpus_pass} of the table's {best.corpus_total} cases pass there{_notes(best)})"
        )
    elif answer.exporter and (why := answer.cannot_load(answer.exporter)):
        lines.append(f"none: nothing the {answer.exporter} exporter writes loads here ({why})")
        return "\n".join(lines)
    else:
        top = answer.options[0]
        lines.append(
            f"no {answer.exporter + ' ' if answer.exporter else ''}exporter and opset passes every selected case here; "
            f"the closest is {top.label}, where {len(top.failing)} of {top.selected} fail{_notes(top)}"
        )
    if not answer.exporter:
        lines += ["", "best per exporter (--exporter X answers for one):"]
        for exporter, opt in per_exporter(answer).items():
            lines.append(f"  {exporter}: {exporter_said(answer, opt)}")
    lines += ["", "alternatives, best first:" if best else "every option, best first (the closest with all its reasons):"]
    said_unloadable: set[str] = set()
    for rank, opt in enumerate(answer.options[1:] if best else answer.options):
        if (why := answer.cannot_load(opt.exporter)) is not None:
            if opt.exporter not in said_unloadable:  # its every opset, one line
                said_unloadable.add(opt.exporter)
                opsets = sorted(o.opset for o in answer.options if o.exporter == opt.exporter)
                lines.append(f"  {opt.exporter} opset {_span(opsets)}: nothing loads here ({why})")
            continue
        if opt.ok:
            lines.append(f"  {opt.label}: {_passes(opt)} ({opt.corpus_pass}/{opt.corpus_total} of the table{_notes(opt)})")
            continue
        lines.append(f"  {opt.label}: {len(opt.failing)} of {opt.selected} fail{_notes(opt)}:")
        reasons: dict[str, list[str]] = {}
        for case, reason in opt.failing:
            reasons.setdefault(reason, []).append(case)
        cap = len(reasons) if rank == 0 and not best else examples
        for reason, names in list(reasons.items())[:cap]:
            shown = ", ".join(names[:examples]) + (f" and {len(names) - examples} more" if len(names) > examples else "")
            lines.append(f"      {shown}: {reason}")
        if len(reasons) > cap:
            lines.append(f"      … and {len(reasons) - cap} more reasons")
    return "\n".join(lines)


def safe_opsets(
    cells: Sequence[CellRecord],
    cases: Sequence[str],
    selection: str,
    loads: Mapping[str, Mapping[str, Any]] | None = None,
    rewrites: Mapping[tuple[str, str, int], int] | None = None,
) -> list[Answer]:
    """What ``harness recommend`` answers for every runtime × provider of the table (oldest runtime first),
    with each runtime's measured frontier from ``loads`` (pin → result); a column where nothing ran has no
    answer and is left out."""
    answers = []
    for runtime, provider in group_by(cells, "runtime", "provider"):
        try:
            answers.append(recommend(cells, runtime, provider, cases, selection, (loads or {}).get(runtime), rewrites=rewrites))
        except HarnessError:
            continue
    order = {pin: i for i, pin in enumerate(runtime_order(a.runtime for a in answers))}
    return sorted(answers, key=lambda a: (order[a.runtime], a.provider))


def per_exporter(answer: Answer) -> dict[str, Option]:
    """Each exporter's best option: its highest safe opset, or (when none is safe) its closest."""
    best: dict[str, Option] = {}
    for opt in answer.options:  # ranked: the first option of an exporter is its best
        best.setdefault(opt.exporter, opt)
    return best
