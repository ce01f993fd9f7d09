"""``harness recommend``: which exporter and opset to ship for one runtime × provider, from the table.

An option is what a user gets: an exporter and the opset its file *declares* (the opset written), with the requests
that produce that file. The answer is the highest written opset, and the exporter, at which every selected case passes
every probe on that runtime and provider; ties go to the exporter under which more of the whole table passes. Every
other option follows, ranked, with the selected cases that fail there and why. A case the exporter, asked for an
opset, wrote at another (dynamo keeps opset 18 for an SDPA model when its converter cannot go higher) has no file at
the opset asked: it fails that option ("asking for 26 writes opset 18"), and the option it does have is the written
one, which says which requests produce it. So no answer names an opset that the file does not declare, nor one the
runtime cannot load.

Every answer the project publishes comes from :func:`combine` over one :class:`Column` (the verdict of every case at
every option of one runtime × provider): ``harness recommend`` (text and ``--json``), the README's "Newest safe opset
per runtime", the answer per model, the table across torch releases, and the page (which receives each column's
verdicts and combines them for whatever cases its filter selects, by the same rule: :data:`RANK_RULE`).
Standard library only, like :mod:`harness.answer.published`.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness.answer.published import consecutive, group_by, runtime_order, why, worst
from harness.config.matrix import version_tuple
from harness.config.runtimes import package_of
from harness.core.errors import HarnessError
from harness.core.records import CellRecord, Status
from harness.store import frontier

PASS, FAIL, SKIPPED, ELSEWHERE, UNMEASURED = "p", "f", "s", "w", "n"
"""A case's verdict at one option, one letter (the page receives them as strings): it passes every probe; it fails; it
does not apply to the exporter (every cell ``skipped``: neither a pass nor a failure); the exporter, asked for this
opset, wrote another, so no file of it declares this one; nothing of it was measured at this opset."""

RANK_RULE = (
    "(not every case passes, no selected case applies, nothing the exporter writes loads here, cases failing, -opset, "
    "-table passing, exporter)"
)
"""How options are ranked, best first (the page's script sorts by the same key)."""


@dataclasses.dataclass(frozen=True)
class Verdict:
    """One case at one option of a column."""

    code: str
    """:data:`PASS`, :data:`FAIL`, :data:`SKIPPED`, :data:`ELSEWHERE` or :data:`UNMEASURED`."""
    why: str = ""
    """For a failure: the worst status, the probes it hit, the first error line (``mismatch on every probe: …``)."""
    wrote: int | None = None
    """For :data:`ELSEWHERE`: the opset written when this one was asked."""
    status: str = ""
    """For a failure: the worst status of its cells (``mismatch``)."""


@dataclasses.dataclass(frozen=True)
class Column:
    """Every case's verdict at every option of one runtime × provider: what :func:`combine` answers from."""

    runtime: str
    provider: str
    cases: tuple[str, ...]
    """Every case measured in the column, in table order."""
    verdicts: Mapping[tuple[str, int], Mapping[str, Verdict]]
    """(exporter, opset written) → case → verdict."""
    asked: Mapping[str, tuple[int, ...]]
    """Per exporter, the opsets it was asked for (the requests measured)."""
    wrote: Mapping[tuple[str, str, int], int]
    """(case, exporter, opset asked) → opset written, where the two differ."""
    loads: Mapping[str, Any] | None = None
    """The runtime's measured frontier (:mod:`harness.store.frontier`)."""
    unloadable: tuple[tuple[str, str], ...] = ()
    """(exporter, why) for an exporter nothing of which loads here, for a reason the frontier gives."""

    def cannot_load(self, exporter: str) -> str | None:
        return dict(self.unloadable).get(exporter)

    @property
    def frontier(self) -> str | None:
        """What the runtime loads, measured (``loads up to IR 9 / opset 19 (measured)``); None where not measured."""
        return frontier.describe(self.loads) + " (measured)" if self.loads else None

    def written_for(self, case: str, exporter: str, asked: int) -> int:
        return self.wrote.get((case, exporter, asked), asked)


@dataclasses.dataclass(frozen=True)
class Option:
    """One (exporter, opset written) on the asked runtime × provider, for the selected cases."""

    exporter: str
    opset: int
    """The opset the files declare (every selected case's file, where it passes)."""
    failing: tuple[tuple[str, str], ...]
    """(case, why) for each selected case that does not pass every probe here, or has no file at this opset."""
    selected: int
    """Selected cases that apply to this exporter (a case that declares other exporters is skipped here)."""
    corpus_pass: int
    """Cases of the whole table that pass every probe here (the tie-break)."""
    corpus_total: int
    """Cases of the whole table counted here: each that applies to the exporter and was asked for this opset."""
    skipped: tuple[tuple[str, str], ...] = ()
    """(case, why) for each selected case that does not apply to this exporter: neither a pass nor a failure."""
    asks: tuple[int, ...] = ()
    """The opsets that, asked, write this one for every selected case that applies (of the requests measured)."""
    elsewhere: tuple[tuple[str, int], ...] = ()
    """(case, opset written) for each selected case that, asked for this opset, the exporter wrote at another: it has
    no file here (it is among :attr:`failing`)."""

    @property
    def ok(self) -> bool:
        """Every selected case that applies passes (and one does: an exporter no selected case applies to answers
        nothing)."""
        return not self.failing and self.selected > 0

    @property
    def label(self) -> str:
        return f"{self.exporter} opset {self.opset}"

    @property
    def ask(self) -> int | None:
        """The request to make for this file: this opset where asking for it writes it, else the lowest that does."""
        if self.opset in self.asks:
            return self.opset
        return self.asks[0] if self.asks else None

    def asks_said(self) -> str:
        """``asking for 18–28 writes opset 18`` where more requests than this opset's own write it; "" otherwise."""
        if not self.asks or self.asks == (self.opset,):
            return ""
        return f"asking for {span(list(self.asks))} writes opset {self.opset}"


@dataclasses.dataclass(frozen=True)
class Answer:
    runtime: str
    provider: str
    selection: str
    """What was selected, in words (``54 cases: the fixed twins and the cases with no gotcha``)."""
    cases: tuple[str, ...]
    options: tuple[Option, ...]
    """Best first: every (exporter, opset written) the table measured on this runtime × provider."""
    frontier: str | None = None
    """What the runtime loads, measured (``loads up to IR 9 / opset 19 (measured)``)."""
    exporter: str | None = None
    """The one exporter asked about (``--exporter``); None: both."""
    unloadable: tuple[tuple[str, str], ...] = ()
    """(exporter, why) for an exporter nothing of which loads on this runtime, for a reason the frontier gives:
    ``dynamo writes IR 10; 1.17.3 loads up to IR 9``. Its options are that one reason, not a failure per case."""
    max_ir: int | None = None
    """The highest IR version the runtime loads (measured), where the frontier is known."""
    max_opset: int | None = None
    """The highest opset the runtime loads (measured), where the frontier is known."""

    @property
    def best(self) -> Option | None:
        return self.options[0] if self.options and self.options[0].ok else None

    def cannot_load(self, exporter: str) -> str | None:
        return dict(self.unloadable).get(exporter)


# The column: every case at every option -------------------------------------------------------------------


def column(
    cells: Sequence[CellRecord],
    runtime: str,
    provider: str,
    loads: Mapping[str, Any] | None = None,
    rewrites: Mapping[tuple[str, str, int], int] | None = None,
    exporter: str | None = None,
    *,
    fixes: Mapping[str, str] | None = None,
) -> Column:
    """The verdicts of ``runtime`` × ``provider`` (``exporter``'s only, when given). Rows of the table are labelled by
    the opset written (:func:`harness.core.records.by_written_opset`); ``rewrites`` ((case, exporter, opset asked) →
    opset written, :func:`harness.answer.published.read_rewrites`) names the requests that wrote another opset, whose
    rows the table left out as the same export again. ``fixes`` (a failing cell's key → the first later runtime on
    which it passes, :mod:`harness.answer.fault`) lets a failure say where to upgrade to.

    Raises:
        HarnessError: the table has no such column, no such exporter, or no cell of it ran.
    """
    mine = _cells_of(cells, runtime, provider, exporter)
    rewrites = {k: v for k, v in (rewrites or {}).items() if exporter is None or k[1] == exporter}
    by_artifact = group_by(mine, "exporter", "opset", "case")
    cases = tuple(dict.fromkeys(c.case for c in mine))
    asked = asked_opsets(mine, rewrites)
    options = sorted({(e, o) for e, o, _ in by_artifact})  # an option is a file written: a row of the table
    verdicts: dict[tuple[str, int], dict[str, Verdict]] = {}
    for exp, opset in options:
        verdicts[(exp, opset)] = {
            case: _verdict(by_artifact, rewrites, exp, opset, case, loads, fixes or {}) for case in cases
        }
    unloadable = tuple((e, said) for e in sorted(asked) if (said := _unloadable(mine, e, loads)))
    return Column(runtime, provider, cases, verdicts, asked, dict(rewrites), loads, unloadable)


def asked_opsets(cells: Iterable[CellRecord], rewrites: Iterable[tuple[str, str, int]]) -> dict[str, tuple[int, ...]]:
    """Per exporter of ``cells``, the opsets it was asked for: each row's request (``opset_asked``, else the opset, a
    row being labelled by the opset written) and each request that the table left out as the same export again
    (``rewrites``: (case, exporter, opset asked))."""
    asked: dict[str, set[int]] = {}
    for c in cells:
        asked.setdefault(c.exporter, set()).add(c.opset_asked or c.opset)
    for _, exporter, opset in rewrites:
        if exporter in asked:
            asked[exporter].add(opset)
    return {e: tuple(sorted(o)) for e, o in sorted(asked.items())}


def _verdict(
    by_artifact: Mapping[tuple[Any, ...], list[CellRecord]],
    rewrites: Mapping[tuple[str, str, int], int],
    exporter: str,
    opset: int,
    case: str,
    loads: Mapping[str, Any] | None,
    fixes: Mapping[str, str],
) -> Verdict:
    got = by_artifact.get((exporter, opset, case))
    if got:
        if all(c.status is Status.SKIPPED for c in got):
            return Verdict(SKIPPED, got[0].error_line or f"does not apply to {exporter}")
        if passes(got):
            return Verdict(PASS)
        return Verdict(FAIL, why(got) + _past_frontier(got, loads) + _upgrade(got, fixes), status=worst(got).value)
    wrote = rewrites.get((case, exporter, opset))
    if wrote is not None:
        return Verdict(ELSEWHERE, f"no file at opset {opset}: asking for {opset} writes opset {wrote}", wrote)
    return Verdict(UNMEASURED, "not measured here")


def _upgrade(got: Sequence[CellRecord], fixes: Mapping[str, str]) -> str:
    """``; or upgrade to onnxruntime 1.24.4, where it passes`` where every failing probe passes on a later runtime of
    the same package (the runtime's or its optimizer's fault, :mod:`harness.answer.fault`); "" otherwise."""
    failing = [c for c in got if c.status not in (Status.PASS, Status.SKIPPED)]
    found = [fixes.get(c.key) for c in failing]
    if not failing or any(v is None for v in found):
        return ""
    newest = max((v for v in found if v is not None), key=version_tuple)
    return f"; or upgrade to {package_of(failing[0].runtime)} {newest}, where it passes"


def passes(cells: Sequence[Any]) -> bool:
    """A counted case passes when every probe passes (a skipped probe neither passes nor fails)."""
    return all(c.status in (Status.PASS, Status.SKIPPED) for c in cells)


def _cells_of(cells: Sequence[CellRecord], runtime: str, provider: str, exporter: str | None) -> list[CellRecord]:
    """The cells of ``runtime`` × ``provider`` (``exporter``'s only, when given), refusing with one line a column the
    table lacks or in which no cell ran."""
    mine = [c for c in cells if c.runtime == runtime and c.provider == provider]
    if not mine:
        providers = sorted({c.provider for c in cells if c.runtime == runtime})
        raise HarnessError(f"--provider {provider}: {runtime} was measured on {', '.join(providers)} only; pick one of those")
    if exporter is not None:
        measured = sorted({c.exporter for c in cells})
        if exporter not in measured:
            close = difflib.get_close_matches(exporter, measured, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise HarnessError(f"--exporter {exporter}: not in this table{hint}; pick one of {', '.join(measured)}")
        mine = [c for c in mine if c.exporter == exporter]
        if not mine:
            raise HarnessError(f"--exporter {exporter}: no cell of it on {runtime} × {provider}; drop --exporter")
    if not any(c.status not in (Status.UNAVAILABLE, Status.ENV_ERROR) for c in mine):
        first = mine[0]
        raise HarnessError(
            f"{runtime} on {provider}: no cell ran in this table "
            f"({first.status.value}: {first.error_line or first.note or '?'}); "
            "nothing to recommend from it"
        )
    return mine


def _unloadable(cells: Sequence[CellRecord], exporter: str, loads: Mapping[str, Any] | None) -> str | None:
    """One line where nothing ``exporter`` wrote loads on this runtime and the measured frontier says why (every cell
    that is not an export failure or a skip is a refusal at load of a model past the frontier); None otherwise."""
    if not loads or loads.get("max_ir") is None:
        return None
    mine = [c for c in cells if c.exporter == exporter and c.status not in (Status.SKIPPED, Status.EXPORT_FAIL)]
    if not mine or any(c.status is not Status.LOAD_FAIL for c in mine):
        return None
    if any(frontier.explain(loads, c.ir_version, c.opset_actual or c.opset) is None for c in mine):
        return None  # a refusal the frontier does not explain: a failure of its own, shown as one
    irs = sorted({c.ir_version for c in mine if c.ir_version is not None})
    opsets = sorted({c.opset_actual or c.opset for c in mine})
    version = str(loads.get("runtime", "")).split("==")[-1] or "this runtime"
    if irs and irs[0] > loads["max_ir"]:
        return f"{exporter} writes IR {span(irs)}; {version} loads up to IR {loads['max_ir']}"
    if opsets[0] > loads["max_opset"]:
        return f"{exporter} writes opset {span(opsets)}; {version} loads up to opset {loads['max_opset']}"
    return (
        f"{exporter} writes IR {span(irs)} at opset {span(opsets)}; {version} loads up to IR {loads['max_ir']} "
        f"/ opset {loads['max_opset']}"
    )


def rewrite_said(exporter: str, asked: Sequence[int], wrote: int) -> str:
    """``dynamo asked for 26–28 writes opset 18``: a request the exporter answered with another opset."""
    return f"{exporter} asked for {span(list(asked))} writes opset {wrote}"


def span(values: Sequence[int]) -> str:
    """``10`` / ``21–22`` / ``18–28`` / ``17, 18, 20`` / ``18, 26–28``: numbers that are one run of consecutive ones as
    a range; among others, each run of three or more as a range."""
    runs = consecutive(sorted(values))
    if len(runs) == 1 and len(runs[0]) > 1:
        return f"{runs[0][0]}–{runs[0][-1]}"
    return ", ".join(f"{r[0]}–{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs)


def _past_frontier(got: Sequence[CellRecord], loads: Mapping[str, Any] | None) -> str:
    """`` (1.16.3 loads up to IR 9 / opset 19; the model is IR 10)`` for a refusal the frontier explains."""
    refused = [c for c in got if c.status is Status.LOAD_FAIL]
    if not loads or not refused:
        return ""
    c = refused[0]
    said = frontier.explain(loads, c.ir_version, c.opset_actual or c.opset)
    return f" ({said})" if said else ""


# The one function: a selection's answer on one column -----------------------------------------------------


def combine(col: Column, cases: Sequence[str], selection: str, exporter: str | None = None) -> Answer:
    """The answer for the selected ``cases`` on one column: every option, best first by :data:`RANK_RULE`. Every
    answer the project publishes is this function's (the page's script applies the same rule to the same verdicts)."""
    options = [_option(col, exp, opset, cases) for exp, opset in col.verdicts if exporter in (None, exp)]
    blocked = dict(col.unloadable)  # an exporter that loads nothing here comes last, whatever its counts
    options.sort(
        key=lambda o: (not o.ok, o.selected == 0, o.exporter in blocked, len(o.failing), -o.opset, -o.corpus_pass, o.exporter)
    )
    loads = col.loads
    unloadable = tuple((e, w) for e, w in col.unloadable if exporter in (None, e))
    max_ir, max_opset = (loads.get("max_ir"), loads.get("max_opset")) if loads else (None, None)
    return Answer(
        col.runtime, col.provider, selection, tuple(cases), tuple(options), col.frontier, exporter, unloadable, max_ir, max_opset
    )


def _option(col: Column, exp: str, opset: int, cases: Sequence[str]) -> Option:
    """One (exporter, opset written) for the selected cases; the whole table's passes there (the tie-break)."""
    verdicts = col.verdicts[(exp, opset)]
    failing, skipped, elsewhere, applies = [], [], [], []
    for case in cases:
        v = verdicts.get(case, Verdict(UNMEASURED, "not measured here"))
        if v.code == SKIPPED:
            skipped.append((case, v.why))
            continue
        applies.append(case)
        if v.code != PASS:
            failing.append((case, v.why))
        if v.code == ELSEWHERE and v.wrote is not None:
            elsewhere.append((case, v.wrote))
    passing, total = table_counts(verdicts)
    asks = tuple(a for a in col.asked.get(exp, ()) if all(col.written_for(c, exp, a) == opset for c in applies))
    return Option(exp, opset, tuple(failing), len(applies), passing, total, tuple(skipped), asks, tuple(elsewhere))


def table_counts(verdicts: Mapping[str, Verdict]) -> tuple[int, int]:
    """The whole table at one option: the cases that pass every probe, and the cases counted (each that applies to
    the exporter and was asked for this opset: a case written at another opset counts, as no file here)."""
    codes = [v.code for v in verdicts.values()]
    passing = codes.count(PASS)
    return passing, passing + codes.count(FAIL) + codes.count(ELSEWHERE)


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
    """Rank every (exporter, opset written) measured on ``runtime`` × ``provider`` for the selected ``cases``
    (only ``exporter``'s when given): :func:`combine` over :func:`column`."""
    return combine(column(cells, runtime, provider, loads, rewrites, exporter), cases, selection, exporter)


def columns(
    cells: Sequence[CellRecord],
    loads: Mapping[str, Mapping[str, Any]] | None = None,
    rewrites: Mapping[tuple[str, str, int], int] | None = None,
    fixes: Mapping[str, str] | None = None,
) -> list[Column]:
    """Every runtime × provider column of the table (oldest runtime first) where something ran."""
    found = []
    for runtime, provider in group_by(cells, "runtime", "provider"):
        try:
            found.append(column(cells, runtime, provider, (loads or {}).get(runtime), rewrites, fixes=fixes))
        except HarnessError:
            continue  # nothing ran there: no answer (the table says why once)
    order = {pin: i for i, pin in enumerate(runtime_order(c.runtime for c in found))}
    return sorted(found, key=lambda c: (order[c.runtime], c.provider))


def per_exporter(answer: Answer) -> dict[str, Option]:
    """Each exporter's best option: its highest safe opset, or (when none is safe) its closest."""
    best: dict[str, Option] = {}
    for opt in answer.options:  # ranked: the first option of an exporter is its best
        best.setdefault(opt.exporter, opt)
    return best


# Saying it -------------------------------------------------------------------------------------------------


def _names(pairs: Sequence[tuple[str, Any]]) -> str:
    return ", ".join(c for c, _ in pairs[:3]) + (f" and {len(pairs) - 3} more" if len(pairs) > 3 else "")


def notes(opt: Option) -> str:
    """``; asking for 18–28 writes opset 18`` and ``; loop_scripted skipped: does not apply to dynamo``: the requests
    that write this option's files, and the selected cases that do not apply to its exporter."""
    said = f"; {asked}" if (asked := opt.asks_said()) else ""
    if opt.skipped:
        said += f"; {_names(opt.skipped)} skipped: {'does' if len(opt.skipped) == 1 else 'do'} not apply to {opt.exporter}"
    return said


def exporter_said(answer: Answer, opt: Option) -> str:
    """One exporter's best on this runtime, in short: ``opset 21: all 53 pass``, ``none: dynamo writes IR 10; 1.17.3
    loads up to IR 9``, or ``none; closest opset 18: 1 of 54 fail (…)``."""
    if opt.ok:
        return f"opset {opt.opset}: {_passes(opt)}{notes(opt)}"
    if not opt.selected:
        return f"none: {_names(opt.skipped)} {'does' if len(opt.skipped) == 1 else 'do'} not apply to {opt.exporter}"
    if (said := answer.cannot_load(opt.exporter)) is not None:
        return f"none: {said}"
    return (
        f"none; closest opset {opt.opset}: {len(opt.failing)} of {opt.selected} fail "
        f"({', '.join(c for c, _ in opt.failing[:3])}{' …' if len(opt.failing) > 3 else ''}){notes(opt)}"
    )


def _passes(opt: Option) -> str:
    """``all 54 pass`` / ``the 1 case passes``, counting the cases that apply here."""
    return f"all {opt.selected} pass" if opt.selected != 1 else "the 1 case passes"


def headline(answer: Answer) -> str:
    """The answer's first line: ``recommended: dynamo opset 21: all 53 selected cases pass every probe (…)``, or the
    closest option and how many fail there."""
    best = answer.best
    if best:
        every = f"all {best.selected} selected cases pass" if best.selected != 1 else "the 1 selected case passes"
        return (
            f"recommended: {best.label}: {every} every probe "
            f"({best.corpus_pass} of the table's {best.corpus_total} cases pass there{notes(best)})"
        )
    if answer.exporter and (said := answer.cannot_load(answer.exporter)):
        return f"none: nothing the {answer.exporter} exporter writes loads here ({said})"
    if not answer.options:
        return "nothing measured here"
    top = answer.options[0]
    return (
        f"no {answer.exporter + ' ' if answer.exporter else ''}exporter and opset passes every selected case here; "
        f"the closest is {top.label}, where {len(top.failing)} of {top.selected} fail{notes(top)}"
    )


def render(answer: Answer, *, examples: int = 6, head: Sequence[str] = ()) -> str:
    """The answer as the command prints it (``head``: lines said after the first, such as the table it came from)."""
    only = f" ({answer.exporter} exporter only)" if answer.exporter else ""
    lines = [f"{answer.runtime} on {answer.provider}{only}, {answer.selection}:", *head]
    if answer.frontier:
        lines.append(f"{answer.runtime.split('==')[-1]} {answer.frontier}")
    lines += ["", headline(answer)]
    best = answer.best
    if answer.exporter and not best and answer.cannot_load(answer.exporter):
        return "\n".join(lines)
    if not answer.exporter:
        lines += ["", "best per exporter (--exporter X answers for one):"]
        for exporter, opt in per_exporter(answer).items():
            lines.append(f"  {exporter}: {exporter_said(answer, opt)}")
    lines += ["", "alternatives, best first:" if best else "every option, best first (the closest with all its reasons):"]
    said_unloadable: set[str] = set()
    for rank, opt in enumerate(answer.options[1:] if best else answer.options):
        if (cannot := answer.cannot_load(opt.exporter)) is not None or not opt.selected:
            if opt.exporter not in said_unloadable:  # its every opset, one line
                said_unloadable.add(opt.exporter)
                opsets = sorted(o.opset for o in answer.options if o.exporter == opt.exporter)
                why = f"nothing loads here ({cannot})" if cannot else f"no selected case applies ({exporter_said(answer, opt)})"
                lines.append(f"  {opt.exporter} opset {span(opsets)}: {why}")
            continue
        if opt.ok:
            lines.append(f"  {opt.label}: {_passes(opt)} ({opt.corpus_pass}/{opt.corpus_total} of the table{notes(opt)})")
            continue
        lines.append(f"  {opt.label}: {len(opt.failing)} of {opt.selected} fail{notes(opt)}:")
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
