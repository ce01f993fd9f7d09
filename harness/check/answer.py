"""``harness check``'s answer: one screen for a person, ``harness.check/1`` JSON for a machine, and the comparison
with an earlier answer (``--baseline``), which fails only on a regression.

Exit status: 0 when every selected runtime passes (with ``--baseline``: when none regressed), 1 otherwise, 2 on bad
input (the command line's). ``--predict``: 0 when every runtime is predicted to load the file, else 1.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.check.onnxinfo import ModelInfo, Value
from harness.check.stage import Row
from harness.core.errors import HarnessError

SCHEMA = "harness.check/1"


def _value(v: Value) -> dict[str, Any]:
    return {"name": v.name, "dtype": v.dtype, "shape": None if v.shape is None else list(v.shape)}


def _fmt(x: float | None) -> str:
    return "" if x is None else f"{x:.3g}"


def _row(row: Row, frontier: Mapping[str, Any] | None) -> dict[str, Any]:
    worst = row.worst()
    loaded = row.loads
    said = row.predicted.get("loads")
    return {
        "runtime": row.runtime.pin,
        "platform": row.platform,
        "how": row.how,
        "version": row.version,
        "provider": "cpu",
        "predicted": dict(row.predicted),
        "loads": {"max_ir": frontier.get("max_ir"), "max_opset": frontier.get("max_opset")} if frontier else None,
        "status": row.status,
        "loaded": loaded,
        "ran": row.stage == "run" and all(p.get("ok") for p in row.probes.values()),
        "agrees": row.status == "pass",
        "max_abs": worst.max_abs if worst else None,
        "max_rel": worst.max_rel if worst else None,
        "scaled_error": worst.scaled_error if worst else None,
        "error_line": row.error,
        "localization": row.localization,
        "repro": row.repro,
        "seconds": round(row.seconds, 3),
        "predicted_agrees": None if said is None or loaded is None else said == loaded,
    }


def label(entry: Mapping[str, Any]) -> str:
    """A row's name in ``passed``, ``failed`` and a baseline: its pin, and ``@platform`` where it names one."""
    return f"{entry['runtime']}@{entry['platform']}" if entry.get("platform") else str(entry["runtime"])


def to_json(answer: Mapping[str, Any], baseline: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """:func:`harness.check.stage.check`'s answer as ``harness.check/1`` (the frontiers it predicted from included)."""
    info: ModelInfo = answer["info"]
    rows: Sequence[Row] = answer["rows"]
    entries = [_row(r, answer["frontiers"].get(r.runtime.pin)) for r in rows]
    measured = answer["reference"]["kind"] != "none"
    passed = [label(e) for e in entries if (e["status"] == "pass" if measured else e["predicted"]["loads"])]
    failed = [label(e) for e in entries if label(e) not in passed]
    found: dict[str, Any] = {
        "schema": SCHEMA,
        "file": {
            "path": info.path,
            "sha256": answer.get("sha256"),
            "size": info.size,
            "ir_version": info.ir_version,
            "opsets": info.opsets,
            "ops": info.ops,
            "inputs": [_value(v) for v in info.inputs],
            "outputs": [_value(v) for v in info.outputs],
            "external": list(info.external),
            "producer": info.producer,
        },
        "measured": measured,
        "reference": {"kind": answer["reference"]["kind"], "said": answer["reference"]["said"]},
        "tolerance": dict(answer["tolerance"]),
        "probes": answer.get("probes", {}),
        "frontier": answer["frontier"],
        "runtimes": entries,
        "passed": passed,
        "failed": failed,
        "disagreements": [
            {
                "runtime": label(e),
                "predicted": e["predicted"]["loads"],
                "loaded": e["loaded"],
                "why": e["error_line"] or e["predicted"]["why"],
            }
            for e in entries
            if e["predicted_agrees"] is False
        ],
        "notes": list(answer.get("notes", [])),
        "out": answer.get("out"),
        "baseline": None,
        "seconds": round(answer.get("seconds", answer.get("predict_seconds", 0.0)), 3),
    }
    if baseline is not None:
        found["baseline"] = compare(baseline, found)
        found["exit"] = 1 if found["baseline"]["regressions"] else 0
    else:
        found["exit"] = 1 if failed else 0
    return found


def module_json(
    spec: str,
    shapes: Mapping[str, Any],
    dynamic: Mapping[str, Any],
    opsets: Mapping[str, Sequence[int]],
    exports: Sequence[Mapping[str, Any]],
    pins: Sequence[str],
    out: str,
) -> dict[str, Any]:
    """A module's answer: each export's own (``exports[].check``), and per runtime what to ship (the highest opset
    whose file passes there, dynamo before TorchScript at the same opset) or none."""
    ship: dict[str, Any] = {}
    for pin in pins:
        passing = [
            (e["opset_written"] or e["opset"], e["exporter"] == "dynamo", e)
            for e in exports
            if e["check"] is not None and pin in e["check"]["passed"]
        ]
        best = max(passing, key=lambda t: (t[0], t[1]))[2] if passing else None
        ship[pin] = {"exporter": best["exporter"], "opset": best["opset"]} if best else None
    failed = [p for p, s in ship.items() if s is None]
    return {
        "schema": SCHEMA,
        "module": {
            "spec": spec,
            "inputs": {k: {"shape": list(v[0]), "dtype": v[1]} for k, v in shapes.items()},
            "dynamic": {k: {str(a): n for a, n in v.items()} for k, v in dynamic.items()},
        },
        "measured": True,
        "opsets": {k: list(v) for k, v in opsets.items()},
        "exports": list(exports),
        "ship": ship,
        "passed": [p for p in pins if p not in failed],
        "failed": failed,
        "runtimes": [
            {"runtime": f"{e['exporter']}.op{e['opset']}:{label(r)}", "status": r["status"], "error_line": r["error_line"]}
            for e in exports
            if e["check"] is not None
            for r in e["check"]["runtimes"]
        ],
        "out": out,
        "baseline": None,
        "exit": 1 if failed else 0,
    }


def module_screen(data: Mapping[str, Any]) -> str:
    """A module's answer in one screen: a row per runtime, a column per export, what to ship."""
    exports = data["exports"]
    heads = [f"{e['exporter']} {e['opset']}" for e in exports]
    pins = list(data["ship"])
    lines = [
        f"{data['module']['spec']}: exported with {', '.join(heads)}; "
        f"checked on {len(pins)} runtimes against torch's own outputs",
        "",
        "| runtime | " + " | ".join(heads) + " | ship |",
        "|---|" + "---|" * (len(heads) + 1),
    ]
    for pin in pins:
        cells = []
        for e in exports:
            if e["check"] is None:
                cells.append("export-fail")
                continue
            row = next((r for r in e["check"]["runtimes"] if label(r) == pin), None)
            cells.append(row["status"] if row else "")
        ship = data["ship"][pin]
        lines.append(
            f"| {_short(pin)} | " + " | ".join(cells) + f" | {ship['exporter'] + ' ' + str(ship['opset']) if ship else 'none'} |"
        )
    lines.append("")
    for e in exports:
        if e["check"] is None:
            lines.append(f"{e['exporter']} {e['opset']}: export-fail: {e['error_line']}")
            continue
        where: dict[str, list[str]] = {}
        for r in e["check"]["runtimes"]:
            if r["status"] != "pass":
                where.setdefault(f"{r['status']}: {r['localization'] or r['error_line']}", []).append(_short(label(r)))
        for said, versions in where.items():
            lines.append(f"{e['exporter']} {e['opset']} on {_span(versions)}: {said}")
    ok = len(data["passed"])
    lines.append(
        f"{ok} of {len(pins)} runtimes have an exporter and opset that passes"
        + (f"; none on {', '.join(map(_short, data['failed']))}" if data["failed"] else "")
    )
    if data["baseline"] is not None:
        b = data["baseline"]
        lines.append(f"against the baseline: regressions: {', '.join(r['runtime'] for r in b['regressions']) or 'none'}")
    lines.append(f"exit {data['exit']} · files, reproducers and check.json in {data['out']}")
    return "\n".join(lines)


def load_baseline(path: str) -> dict[str, Any]:
    """An earlier ``--json`` answer (or ``<out>/check.json``); anything else is one line."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise HarnessError(
            f"--baseline {path}: cannot be read ({exc.strerror}); give an earlier `harness check --json` output"
        ) from None
    except ValueError:
        raise HarnessError(f"--baseline {path}: not JSON; give an earlier `harness check --json` output") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("runtimes"), list):
        raise HarnessError(
            f"--baseline {path}: not a {SCHEMA} answer (schema {data.get('schema') if isinstance(data, dict) else None!r})"
        )
    if not data.get("measured"):
        raise HarnessError(f"--baseline {path}: a --predict answer measured nothing; give a measured one")
    return data


def compare(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """Per runtime of both: a regression (passed, now does not), a fix, still failing; new and gone runtimes."""
    before = {label(e): e for e in old["runtimes"]}
    after = {label(e): e for e in new["runtimes"]}
    both = [p for p in after if p in before]
    return {
        "file": old.get("file", {}).get("sha256"),
        "regressions": [
            {"runtime": p, "old": before[p]["status"], "new": after[p]["status"], "why": after[p]["error_line"]}
            for p in both
            if before[p]["status"] == "pass" and after[p]["status"] != "pass"
        ],
        "fixes": [p for p in both if before[p]["status"] != "pass" and after[p]["status"] == "pass"],
        "still_failing": [p for p in both if before[p]["status"] != "pass" and after[p]["status"] != "pass"],
        "new": [p for p in after if p not in before],
        "gone": [p for p in before if p not in after],
    }


def _mark(flag: bool | None) -> str:
    return "–" if flag is None else ("yes" if flag else "NO")


def screen(data: Mapping[str, Any]) -> str:
    """The answer in one screen: the file, the reference, a row per runtime, the verdict, where to look.

    (Over 60 lines, on purpose: the screen top to bottom, one block per part of it, in the order it is read.)"""
    f = data["file"]
    ops = sorted(f["ops"].items(), key=lambda kv: -kv[1])
    shown = ", ".join(f"{k}×{n}" if n > 1 else k for k, n in ops[:8]) + (f" and {len(ops) - 8} more" if len(ops) > 8 else "")
    opsets = ", ".join(f"{d} {v}" for d, v in f["opsets"].items())
    lines = [
        f"{f['path']}: IR {f['ir_version']} · opsets {opsets} · {sum(f['ops'].values())} nodes: {shown} · "
        f"{f['size'] / 2**20:.2f} MB",
        "  inputs: " + ", ".join(_words(v) for v in f["inputs"]) + "; outputs: " + ", ".join(_words(v) for v in f["outputs"]),
    ]
    if data["measured"]:
        probes = "; ".join(f"{n} ({', '.join(f'{k} {x}' for k, x in shapes.items())})" for n, shapes in data["probes"].items())
        t = data["tolerance"]
        lines += [
            f"  probes: {probes}",
            f"  compared with: {data['reference']['said']}",
            f"  tolerance: atol {t['atol']:g}, rtol {t['rtol']:g}, scaled {t['scaled']:g} ({t['why']})",
        ]
    if data["measured"]:
        lines += [
            "",
            "| runtime | predicted | loads | runs | agrees | max abs | max rel | status |",
            "|---|---|---|---|---|---|---|---|",
        ]
    else:
        lines += ["", "| runtime | predicted (from the measured frontier) | why |", "|---|---|---|"]
    for e in data["runtimes"]:
        pred = {True: "loads", False: "refused", None: "?"}[e["predicted"]["loads"]]
        if not data["measured"]:
            lines.append(f"| {_short(label(e))} | {pred} | {e['predicted']['why'].replace('|', chr(92) + '|')} |")
            continue
        status = (e["status"] + (f": {e['error_line']}" if e["error_line"] else "")).replace("|", "\\|")  # one cell
        lines.append(
            f"| {_short(label(e))} | {pred} | {_mark(e['loaded'])} | {_mark(e['ran'] if e['loaded'] else None)} | "
            f"{_mark(e['agrees'] if e['ran'] else None)} | {_fmt(e['max_abs'])} | {_fmt(e['max_rel'])} | {status} |"
        )
    lines.append("")
    total = len(data["runtimes"])
    verb = "pass" if data["measured"] else "are predicted to load it"
    lines.append(
        f"{len(data['passed'])} of {total} runtimes {verb}"
        + (f"; not: {', '.join(_short(p) for p in data['failed'])}" if data["failed"] else "")
    )
    if data["measured"]:
        if data["disagreements"]:
            for d in data["disagreements"]:
                lines.append(
                    f"predicted {'loads' if d['predicted'] else 'refused'} but measured "
                    f"{'loads' if d['loaded'] else 'refused'} on "
                    f"{_short(d['runtime'])}: {d['why']}"
                )
        else:
            lines.append("predicted and measured agree on every runtime that ran")
        where: dict[str, list[str]] = {}
        for e in data["runtimes"]:
            if e["localization"]:
                where.setdefault(e["localization"], []).append(_short(label(e)))
        for said, versions in where.items():
            lines.append(f"{_span(versions)}: {said}")
        lines.extend(f"note: {n}" for n in data["notes"])
        repros = [e["repro"] for e in data["runtimes"] if e["repro"]]
        if repros:
            lines.append(f"reproducers: {Path(repros[0]).parent}/<runtime id>/ ({len(repros)}: README.md and repro.py in each)")
    if data["baseline"] is not None:
        b = data["baseline"]
        regressed = ", ".join(f"{_short(r['runtime'])} ({r['old']} → {r['new']})" for r in b["regressions"]) or "none"
        lines.append(
            f"against the baseline: regressions: {regressed}; fixed: {', '.join(map(_short, b['fixes'])) or 'none'}; "
            f"still failing: {len(b['still_failing'])}; new runtimes: {len(b['new'])}"
        )
    lines.append(
        f"exit {data['exit']} · {data['seconds']:.1f} s" + (f" · answer in {data['out']}/check.json" if data.get("out") else "")
    )
    return "\n".join(lines)


def _span(versions: Sequence[str]) -> str:
    """``1.12.1``, or ``1.12.1 … 1.28.0 (17)`` for several."""
    return versions[0] if len(versions) == 1 else f"{versions[0]} … {versions[-1]} ({len(versions)})"


def _short(pin: str) -> str:
    return pin.split("==")[-1]


def _words(v: Mapping[str, Any]) -> str:
    if v["shape"] is None:
        return f"{v['name']} {v['dtype']}"
    return f"{v['name']} {v['dtype']}[{','.join('?' if d is None else str(d) for d in v['shape'])}]"
