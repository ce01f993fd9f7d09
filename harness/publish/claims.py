"""Checking a case's claims (:class:`harness.cases.corpus.Claim`) against measured cells.

Used by the report (a claim the table no longer shows is news: a runtime or
exporter fixed the gotcha) and by the tests (a claim must hold where the
gotcha was reproduced). Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from harness.core.records import CellRecord

DEFAULT_OPSET = 18


def describe(claim: Mapping[str, Any], newest: str) -> str:
    """``mismatch on probe negative (torchscript, opset 18, onnxruntime==1.32.0)``."""
    where = [
        claim.get("exporter") or "any exporter",
        f"opset {claim.get('opset') or DEFAULT_OPSET}",
        claim.get("runtime") or newest,
    ]
    probe = f" on probe {claim['probe']}" if claim.get("probe") else ""
    match = f" with '{claim['match']}'" if claim.get("match") else ""
    return f"{claim['status']}{probe}{match} ({', '.join(where)})"


def cells_for(claim: Mapping[str, Any], case: str, cells: Iterable[CellRecord], newest: str) -> list[CellRecord]:
    """The cells a claim is about."""
    runtime = claim.get("runtime") or newest
    opset = claim.get("opset") or DEFAULT_OPSET
    return [
        c
        for c in cells
        if c.case == case
        and c.runtime == runtime
        and c.provider == claim.get("provider", "cpu")
        and c.opset == opset
        and claim.get("exporter") in (None, c.exporter)
        and claim.get("probe") in (None, c.probe)
    ]


def holds(claim: Mapping[str, Any], case: str, cells: Iterable[CellRecord], newest: str) -> bool | None:
    """True or False; None when no cell of the claim was measured (not in this run)."""
    chosen = cells_for(claim, case, cells, newest)
    if not chosen:
        return None
    return any(
        c.status.value == claim["status"] and (not claim.get("match") or claim["match"] in (c.error_line or "")) for c in chosen
    )
