"""The answer per model, and what fails once per cause: how a table of real models (``results/architectures/``)
reads.

:func:`per_model` asks :func:`harness.answer.recommend.combine` about each case alone on each runtime × provider:
the exporter and opset to ship that model there. :func:`findings` folds every failing cell of the table into causes:
the same exporter, status, probes and error (numbers and node names aside) is one cause, said once with every model,
opset and runtime it holds on, so a failure that a whole family shares is one line, not forty. A refusal at load that
the runtime's measured frontier explains (IR or opset too new) is no finding: the table says it once per runtime.
Standard library only, like :mod:`harness.answer.recommend`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from harness.answer import recommend
from harness.answer.published import group_by, opset_ranges, runs, runtime_order, shorten, worst_hit
from harness.core.records import CellRecord, Status
from harness.store import frontier


@dataclasses.dataclass(frozen=True)
class ModelAnswer:
    """One model's answer on each runtime × provider of the table, oldest runtime first."""

    case: str
    title: str
    answers: tuple[tuple[str, str, str], ...]
    """(runtime pin, provider, ``dynamo 28`` / ``torchscript 20`` / ``none (closest: dynamo 18, mismatch)``)."""


def title(case: str, cards: Mapping[str, Mapping[str, str]]) -> str:
    return cards.get(case, {}).get("title") or case


def per_model(
    cells: Sequence[CellRecord],
    cases: Sequence[str],
    loads: Mapping[str, Mapping[str, Any]] | None = None,
    rewrites: Mapping[tuple[str, str, int], int] | None = None,
    cards: Mapping[str, Mapping[str, str]] | None = None,
    cols: Sequence[recommend.Column] | None = None,
) -> list[ModelAnswer]:
    """What ``harness recommend --cases <model>`` answers for each of ``cases`` on every runtime × provider: one
    :func:`harness.answer.recommend.combine` per model and column (``cols``: the table's columns, where already
    made)."""
    cols = recommend.columns(cells, loads, rewrites) if cols is None else cols
    out = []
    for case in cases:
        said = tuple((col.runtime, col.provider, label(recommend.combine(col, [case], case))) for col in cols)
        out.append(ModelAnswer(case, title(case, cards or {}), said))
    return out


_REACH = {"fallback": -1, "mismatch": 0, "run-fail": 1, "timeout": 2, "crash": 3, "load-fail": 4, "export-fail": 5}
"""How far an export got before it failed, furthest first: the closest option for one model is the one that got
furthest (it ran and mismatched), the highest opset among those; not the highest opset, which for a model that fails
everywhere is merely the newest one the runtime refuses."""


def label(answer: recommend.Answer) -> str:
    """``dynamo 28``, or ``none (closest: dynamo 18, mismatch)``: one model's answer on one column, in short."""
    best = answer.best
    if best is not None:
        return f"{best.exporter} {best.opset}"
    if not answer.options:
        return "none"

    def status(option: recommend.Option) -> str:
        return option.failing[0][1].split(" ", 1)[0] if option.failing else "?"

    closest = min(answer.options, key=lambda o: (_REACH.get(status(o), len(_REACH)), -o.opset, o.exporter))
    return f"none (closest: {closest.exporter} {closest.opset}, {status(closest)})"


def by_runtime(answer: ModelAnswer) -> str:
    """``1.15.1–1.16.3: torchscript 18 · 1.17.3–1.32.0: dynamo 28``: runtimes that agree, as runs."""
    providers = {p for _, p, _ in answer.answers}
    items = [(pin, p, label) for pin, p, label in answer.answers]
    parts = []
    for run in runs(items, lambda a, b: a[2] == b[2] and a[1] == b[1]):
        first, last = run[0][0].split("==")[-1], run[-1][0].split("==")[-1]
        span = first if first == last else f"{first}–{last}"
        on = f" ({run[0][1]})" if len(providers) > 1 else ""
        parts.append(f"{span}{on}: {run[0][2]}")
    return " · ".join(parts)


@dataclasses.dataclass(frozen=True)
class Finding:
    """One cause of failure: an exporter, a status, the probes it hits and one error, on every model it holds for."""

    exporter: str
    status: Status
    reason: str
    """The first model's error line, as the table shows it."""
    cases: tuple[str, ...]
    opsets: tuple[int, ...]
    runtimes: tuple[str, ...]
    """Runtime pins (with the provider where the table has several: ``onnxruntime==1.24.1 openvino``)."""

    def line(
        self, cards: Mapping[str, Mapping[str, str]], every_runtime: Sequence[str], every_opset: Sequence[int], *, one: str = ""
    ) -> str:
        """The cause in one line, with every model it holds for; for model ``one``'s own page, how many others share it."""
        opsets = "every opset" if list(self.opsets) == sorted(every_opset) else opset_ranges(self.opsets)
        where = "every runtime" if len(self.runtimes) == len(every_runtime) else _runtimes(self.runtimes, every_runtime)
        text = f"{self.exporter} {opsets} on {where}: {self.status.symbol} {self.status.value}: {self.reason}"
        if one:
            others = len(self.cases) - 1
            return text + (f" (and {others} other model{'s' * (others != 1)})" if others else "")
        return f"{text} — {', '.join(title(c, cards) for c in self.cases)}"


_NUMBER = re.compile(r"(?<!\w)\d+(\.\d+)?(e[-+]?\d+)?")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")
_ORT_CODE = re.compile(r"\[ONNXRuntimeError\] : \d+ : \w+ : ")
_NODE = re.compile(r"(while running \w+ node\. Name:'[^']*').*")


def cause(text: str) -> str:
    """An error line without what differs from model to model and from release to release: numbers, quoted node and
    value names, onnxruntime's status code (``1 : FAIL`` on one release is ``6 : RUNTIME_EXCEPTION`` on another) and,
    for a failing node, its message after the node's op type (reworded between releases)."""
    return _NUMBER.sub("#", _QUOTED.sub("'…'", _NODE.sub(r"\1", _ORT_CODE.sub("", text)))).strip()


def findings(
    cells: Sequence[CellRecord], loads: Mapping[str, Mapping[str, Any]] | None = None, providers: int = 1
) -> list[Finding]:
    """Every failing (case, exporter, opset, runtime × provider) of ``cells``, folded by cause; most models first."""
    groups: dict[tuple[str, Status, str], dict[str, Any]] = {}
    for (case, exporter, opset, pin, provider), group in group_by(
        cells, "case", "exporter", "opset", "runtime", "provider"
    ).items():
        status, hit, probes, line = worst_hit(group)
        if status in (Status.PASS, Status.SKIPPED):
            continue
        if status is Status.LOAD_FAIL and all(_explained(c, (loads or {}).get(pin)) for c in hit):
            continue  # past the runtime's measured frontier: said once per runtime, not per model
        reason = f"on {probes}: {shorten(line, 200)}" if line else f"on {probes}"
        key = (exporter, status, cause(reason))
        entry = groups.setdefault(key, {"reason": reason, "cases": {}, "opsets": set(), "runtimes": set()})
        entry["cases"][case] = None
        entry["opsets"].add(opset)
        entry["runtimes"].add(pin if providers == 1 else f"{pin} {provider}")
    out = [
        Finding(exporter, status, e["reason"], tuple(e["cases"]), tuple(sorted(e["opsets"])), tuple(runtime_order(e["runtimes"])))
        for (exporter, status, _), e in groups.items()
    ]
    return sorted(out, key=lambda f: (-len(f.cases), f.exporter, -f.status.severity, f.reason))


def _explained(cell: CellRecord, loads: Mapping[str, Any] | None) -> bool:
    return bool(loads) and frontier.explain(loads or {}, cell.ir_version, cell.opset_actual or cell.opset) is not None


def _runtimes(pins: Sequence[str], every: Sequence[str]) -> str:
    """Runs of consecutive runtimes of the table: ``1.15.1–1.17.3, 1.22.1``."""
    index = {pin: i for i, pin in enumerate(every)}
    ordered = sorted(pins, key=lambda p: index.get(p, len(index)))
    parts = []
    for run in runs(ordered, lambda a, b: index.get(b, -9) == index.get(a, -9) + 1):
        first, last = run[0].split("==")[-1], run[-1].split("==")[-1]
        parts.append(first if len(run) == 1 else f"{first}–{last}")
    return ", ".join(parts)
