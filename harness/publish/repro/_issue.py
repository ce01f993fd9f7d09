"""ISSUE.md of a reproducer folder: the text of an issue ready to file, per fault its failing cells have.

One section per fault kind (:mod:`harness.answer.fault`) among the folder's cells: where it belongs (PyTorch, onnxscript,
onnxruntime, OpenVINO), a title, the versions, the exact steps (this folder's ``repro.py``), expected and got, and the
evidence for whose fault it is. A refusal the runtime's frontier explains, or a fault the evidence cannot place, is said
to be nothing to file, and why. Text only: nothing is posted anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.answer.fault import Fault, tracker
from harness.answer.published import runtime_key
from harness.config import runtimes
from harness.core.records import CellRecord, ExportRecord
from harness.publish.repro._readme import MARKER, tolerance_lines

_FILED = ("exporter", "runtime", "optimizer")
"""The faults a tracker takes; ``frontier`` and ``undetermined`` are nothing to file."""


def issue(
    rec: ExportRecord, cells: Sequence[CellRecord], constraints: Mapping[str, tuple[str, ...]], faults: Mapping[str, Fault]
) -> str:
    """The ISSUE.md of one artifact's folder."""
    by_kind: dict[str, list[CellRecord]] = {}
    for c in cells:
        f = faults.get(c.key)
        by_kind.setdefault(f.kind if f else "undetermined", []).append(c)
    lines = [f"<!-- {MARKER} from the compatibility matrix; do not edit by hand. Nothing here has been posted. -->", ""]
    for kind in sorted(by_kind, key=lambda k: (k not in _FILED, k)):
        lines += _section(rec, kind, by_kind[kind], constraints, faults)
    return "\n".join(lines).rstrip() + "\n"


def frontier_issue(name: str, cells: Sequence[CellRecord], faults: Mapping[str, Fault]) -> str:
    """The ISSUE.md of a shared frontier folder: nothing to file, the file is newer than what those runtimes load."""
    said = sorted({faults[c.key].why for c in cells if c.key in faults})
    pins = sorted({c.runtime for c in cells}, key=runtime_key)
    return (
        "\n".join(
            [
                f"<!-- {MARKER} from the compatibility matrix; do not edit by hand. Nothing here has been posted. -->",
                "",
                f"# Nothing to file: a model of {name.replace('.', ' ')} is past what {_versions(pins)} load",
                "",
                "Fault: **frontier**. These runtimes refuse at load every model of this IR version and opset (measured on the",
                "one-node model in this folder), as their release declares: it is no bug. Export at an opset they load, or",
                "upgrade the runtime.",
                "",
                *(f"- {s}" for s in said),
            ]
        )
        + "\n"
    )


def _section(
    rec: ExportRecord, kind: str, cells: list[CellRecord], constraints: Mapping[str, tuple[str, ...]], faults: Mapping[str, Fault]
) -> list[str]:
    pins = sorted({c.runtime for c in cells}, key=runtime_key)
    providers = sorted({c.provider for c in cells})
    statuses = sorted({c.status.value for c in cells})
    first = cells[0]
    why = sorted({faults[c.key].why for c in cells if c.key in faults}) or ["no fault recorded"]
    fixed = sorted({f"{faults[c.key].fixed_in}" for c in cells if c.key in faults and faults[c.key].fixed_in})
    where = tracker(kind, rec.exporter, providers, pins)
    title = _title(rec, kind, statuses, pins, providers, first)
    lines = [f"# {title}", ""]
    if kind not in _FILED:
        lines += [
            f"Fault: **{kind}**. Nothing to file: {_nothing(kind, why)}.",
            "",
            *(f"- {w}" for w in why),
            "",
        ]
        return lines
    versions = rec.versions
    platform = _platform(first)
    lines += [
        f"Where to file it: **{where}**.",
        "",
        "## Versions",
        "",
        f"- exported with torch {versions.get('torch', '?')}, onnx {versions.get('onnx', '?')}, "
        f"onnxscript {versions.get('onnxscript', '?')} ({rec.exporter} exporter, opset {rec.opset_asked or rec.opset} "
        f"asked, {rec.opset_actual or '?'} written, IR {rec.ir_version or '?'})",
        f"- fails on {_versions(pins)} ({', '.join(providers)})" + (f"; passes from {', '.join(fixed)}" if fixed else ""),
        *([f"- {platform}"] if platform else []),
        "",
        "## Steps",
        "",
        "The model, its inputs and torch's outputs are in this folder (`model.onnx`, `test_data_set_*`).",
        "",
        "```",
        *_steps(cells, constraints),
        "```",
        "",
        "## Expected",
        "",
        "The outputs torch computes for the same inputs (`test_data_set_*/output_*.pb`), within the tolerance:",
        "",
        *(f"    {line}" for line in tolerance_lines(rec)),
        "",
        "## Got",
        "",
        *_got(cells),
        "",
        "## Whose bug it is, and the evidence",
        "",
        f"Fault: **{kind}**.",
        "",
        *(f"- {w}" for w in why),
        *_reading(kind, why),
        "",
    ]
    if rec.card.get("symptom"):
        lines += [f"Known as: {' '.join(rec.card['symptom'].split())}", ""]
    return lines


def _title(rec: ExportRecord, kind: str, statuses: list[str], pins: list[str], providers: list[str], first: CellRecord) -> str:
    what = "/".join(statuses)
    model = f"{rec.case} ({rec.exporter}, opset {rec.opset_actual or rec.opset})"
    error = (first.error_line or "").strip()
    error = f": {error[:120]}" if error else ""
    if kind == "exporter":
        return f"{rec.exporter} export of {model}: the file is not the model ({what} wherever it was run){error}"
    if kind == "optimizer":
        where = f"{_versions(pins, short=True)} ({', '.join(providers)})"
        return f"{where}: graph optimization changes the result of a valid model, {model}{error}"
    if kind == "runtime":
        return f"{_versions(pins, short=True)} ({', '.join(providers)}): {what} on a valid model, {model}{error}"
    return f"{model}: {what} on {_versions(pins, short=True)}{error}"


def _nothing(kind: str, why: list[str]) -> str:
    return "the evidence does not say whose bug it is" if kind == "undetermined" else why[0]


def _steps(cells: list[CellRecord], constraints: Mapping[str, tuple[str, ...]]) -> list[str]:
    """One runtime's reproduction (the newest that fails): what to install and the command."""
    pin = max({c.runtime for c in cells}, key=runtime_key)
    provider = sorted({c.provider for c in cells if c.runtime == pin})[0]
    kind = runtimes.kind(runtimes.package_of(pin))
    install, command = kind.reproduce(pin, provider, constraints.get(pin, ()))
    return [f"{kind.pip(pin)} install {' '.join(repr(r).replace(chr(39), chr(34)) for r in install)}", command]


def _got(cells: list[CellRecord]) -> list[str]:
    groups: dict[tuple[str, str, str], set[str]] = {}
    for c in cells:
        groups.setdefault((c.status.value, c.probe, " ".join((c.error_line or "").split())[:300]), set()).add(c.runtime)
    return [
        f"- {_versions(sorted(pins, key=runtime_key))}, probe {probe}: {status}" + (f": {line}" if line else "")
        for (status, probe, line), pins in sorted(groups.items())
    ]


def _reading(kind: str, why: list[str]) -> list[str]:
    """What the evidence means, in the words of the evidence it is."""
    if kind == "runtime":
        return [
            "- The ONNX reference evaluator (`onnx.reference`) runs the same file on the same inputs and agrees with torch,",
            "  and the file passes `onnx.checker` with strict shape inference: the file is right, the runtime is not.",
        ]
    if kind == "optimizer":
        return ["- With graph optimizations disabled (`--disable-optimizations`) the same runtime passes."]
    if any(w.startswith("the file fails onnx.checker") for w in why):
        return ["- The file is not a valid ONNX model: no runtime owes it a result. Change the exporter, the opset or the model."]
    if any(w.startswith("the exporter wrote no file") for w in why):
        return ["- The exporter refused the model: there is no file to run. The case's card, where it has one, says the fix."]
    return [
        "- The file computes something else than the model: any runtime that runs it right is wrong with it. Change the",
        "  exporter, the opset or the model (the case's card, where it has one, says how).",
    ]


def _versions(pins: Sequence[str], short: bool = False) -> str:
    """``onnxruntime 1.23.2, 1.32.0``; ``short``: more than three releases as ``1.15.1 … 1.32.0 (18 releases)``."""
    if not pins:
        return "no runtime"
    packages: dict[str, list[str]] = {}
    for p in pins:
        packages.setdefault(runtimes.package_of(p), []).append(p.split("==")[-1])
    said = []
    for pkg, v in packages.items():
        listed = f"{v[0]} … {v[-1]} ({len(v)} releases)" if short and len(v) > 3 else ", ".join(v)
        said.append(f"{pkg} {listed}")
    return "; ".join(said)


def _platform(cell: CellRecord) -> str:
    env: Mapping[str, Any] = cell.env or {}
    parts = str(env.get("platform") or "").split("-")
    system = parts[0] if parts and parts[0] else ""
    machine = next((p for p in parts if p in ("x86_64", "aarch64", "arm64", "AMD64")), "")
    python = env.get("python")
    said = ", ".join(x for x in (f"{system} {machine}".strip(), f"Python {python}" if python else "", env.get("cpu") or "") if x)
    return said
