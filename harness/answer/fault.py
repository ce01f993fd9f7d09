"""Whose fault a failing cell is, derived from what was measured, never guessed; and where a later runtime fixed it.

The spec's answer on the artifact (:mod:`harness.store.spec`: the full ``onnx.checker`` and the ONNX reference
evaluator on the same probe, compared with torch by the cell's rule) is the third opinion beside torch and the
runtime. The rule, first match wins:

1. ``frontier``: a refusal at load that the runtime's measured frontier explains (the file's IR or opset is past
   what that runtime loads).
2. ``optimizer``: the cell passes with graph optimizations disabled.
3. ``exporter``: the export wrote no file (``export-fail``) or fell back to tracing (``fallback``); the file fails the
   checker; the file's own signature refuses torch's inputs (a frozen dimension, an input the model does not take);
   or the spec's evaluator disagrees with torch on this probe, a runtime that ran it disagrees too, and none passes.
4. ``runtime``: the spec's evaluator agrees with torch on this probe and this runtime does not (a mismatch, a
   failure to run, a crash, a timeout, a refusal at load within its frontier).
5. ``undetermined``: the spec could not answer (why is said); or it disagrees with torch where some runtime agrees,
   or where no runtime ran the probe to confirm it (a disagreement of the evaluator alone is not the file's fault).

A ``runtime`` or ``optimizer`` fault also says the first later runtime of the same package and provider from which
the same artifact's probe passes on every measured runtime (``fixed_in``) and the last one before it that fails.
Plain Python.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from harness.config import runtimes as runtimes_of
from harness.config.runtimes import package_of
from harness.core.records import CellRecord, Status
from harness.store import frontier

KINDS = ("exporter", "runtime", "optimizer", "frontier", "undetermined")
"""Every fault, in the order a reader is told them."""

FAULTED = frozenset(
    {Status.MISMATCH, Status.RUN_FAIL, Status.LOAD_FAIL, Status.CRASH, Status.TIMEOUT, Status.EXPORT_FAIL, Status.FALLBACK}
)
"""The statuses that carry a fault: every outcome that is not a pass and says something of the model (``unavailable``,
``env-error`` and ``skipped`` say something of this machine or of torch, and carry none)."""

TRACKERS = {
    "exporter": "PyTorch (torch.onnx)",
    "runtime": "onnxruntime",
    "optimizer": "onnxruntime (its graph optimizer)",
}
"""Whose tracker a fault belongs to by default (:func:`tracker` says where another project's is)."""


@dataclasses.dataclass(frozen=True)
class Fault:
    kind: str
    why: str
    """The evidence, in one line."""
    fixed_in: str | None = None
    """For a runtime's or optimizer's fault: the first later runtime version (same package and provider) from which
    this probe of this artifact passes on every measured runtime."""
    last_failing: str | None = None
    """The last runtime version before :attr:`fixed_in` on which it fails."""

    @property
    def said(self) -> str:
        """``runtime: the spec's evaluator agrees with torch (max abs 4.8e-07); passes from 1.24.4``."""
        fixed = f"; passes from {self.fixed_in} (fails up to {self.last_failing})" if self.fixed_in else ""
        return f"{self.kind}: {self.why}{fixed}"

    def published(self) -> dict[str, Any]:
        """What :attr:`harness.core.schema.Context.fault` gives the published fields: ``kind``, ``why``, ``fixed_in``,
        ``last_failing`` and ``said``."""
        return {**dataclasses.asdict(self), "said": self.said}


def assign(
    cells: Sequence[CellRecord],
    facts: Mapping[str, Mapping[str, Any]],
    loads: Mapping[str, Mapping[str, Any]],
    runtimes: Sequence[str],
    missing: str | None = None,
) -> dict[str, Fault]:
    """The fault of every cell of ``cells`` whose status is in :data:`FAULTED`, by :attr:`CellRecord.key`.

    Args:
        cells: The table's cells (labelled by the opset written; their artifact is :attr:`CellRecord.artifact`).
        facts: The spec's answer per artifact id (:func:`harness.store.spec.read`).
        loads: Each runtime's measured frontier, by pin.
        runtimes: The profile's runtime pins, oldest first per package (the order "fixed in" reads).
        missing: Why the spec's answer is missing where it is (said by an ``undetermined`` fault).
    """
    passing: dict[tuple[str, str], list[str]] = {}
    computed: set[tuple[str, str]] = set()  # probes some runtime ran to the end and found different from torch
    for c in cells:
        if c.status is Status.PASS:
            passing.setdefault((c.artifact.id, c.probe), []).append(c.runtime)
        elif c.status is Status.MISMATCH:
            computed.add((c.artifact.id, c.probe))
    found: dict[str, Fault] = {}
    for c in cells:
        if c.status not in FAULTED or c.runtime_wide:
            continue
        where = (c.artifact.id, c.probe)
        fact, frontier_of = facts.get(c.artifact.id), loads.get(c.runtime)
        found[c.key] = _fault(c, fact, frontier_of, passing.get(where, []), where in computed, missing)
    return _fixed(cells, found, runtimes)


def _fault(
    c: CellRecord,
    fact: Mapping[str, Any] | None,
    loads: Mapping[str, Any] | None,
    passing: list[str],
    confirmed: bool,
    missing: str | None,
) -> Fault:
    """One failing cell's fault (the module's rule); ``passing``: the runtimes that pass its probe of its artifact;
    ``confirmed``: a runtime ran that probe and found it different from torch."""
    if c.status is Status.EXPORT_FAIL:
        return Fault("exporter", f"the exporter wrote no file ({c.error_line or c.error_class or 'no reason given'})")
    if c.status is Status.FALLBACK:
        return Fault("exporter", "the dynamo exporter fell back to tracing: torch.export did not capture the model")
    if c.status is Status.LOAD_FAIL and loads and (said := frontier.explain(loads, c.ir_version, c.opset_actual or c.opset)):
        return Fault("frontier", said)
    if c.optimizer:
        verdict = ((fact or {}).get("probes") or {}).get(c.probe) or {}
        spec_said = "; the spec's evaluator agrees with torch" if verdict.get("verdict") == "agrees" else ""
        return Fault("optimizer", f"passes with graph optimizations disabled{spec_said}")
    if fact is None:
        return Fault("undetermined", missing or "the spec's answer on this file is not recorded")
    checker = fact.get("checker")
    if checker not in (None, "ok"):
        return Fault("exporter", f"the file fails onnx.checker (full check, strict shape inference): {checker}")
    verdict = (fact.get("probes") or {}).get(c.probe)
    if verdict is None:
        why = fact.get("unanswered") or f"the spec's evaluator did not run probe {c.probe!r}"
        return Fault("undetermined", str(why))
    line = verdict.get("line") or ""
    if verdict["verdict"] == "failed":
        if not passing:  # two implementations fail on this input; which is right, the evidence does not say
            return Fault("undetermined", f"{line}; no runtime of the table runs this probe either")
        return Fault("undetermined", line)
    if verdict["verdict"] == "disagrees":
        if verdict.get("signature"):  # the file's own declaration refuses torch's inputs: no computation to doubt
            return Fault("exporter", f"the file cannot take torch's inputs: {line}")
        if passing:
            others = ", ".join(sorted({p.split("==")[-1] for p in passing})[:3])
            return Fault("undetermined", f"contested: the spec's evaluator disagrees with torch ({line}), yet {others} passes")
        if not confirmed:
            return Fault("undetermined", f"only the spec's evaluator ran this probe, and it disagrees with torch ({line})")
        return Fault("exporter", f"the file disagrees with torch per the spec's evaluator and the runtimes: {line}")
    return Fault("runtime", f"the spec's evaluator agrees with torch on this file (max abs {_g(verdict.get('max_abs'))})")


def _g(value: Any) -> str:
    return f"{value:.2g}" if isinstance(value, (int, float)) else "0"


def _fixed(cells: Sequence[CellRecord], found: dict[str, Fault], runtimes: Sequence[str]) -> dict[str, Fault]:
    """Each runtime's or optimizer's fault with the first later runtime (same package, same provider) where the same
    probe of the same artifact passes."""
    order = {pin: i for i, pin in enumerate(runtimes)}
    by_place: dict[tuple[str, str, str, str], dict[str, Status]] = {}
    for c in cells:
        by_place.setdefault((c.artifact.id, c.probe, c.provider, package_of(c.runtime)), {})[c.runtime] = c.status
    out = {}
    for c in cells:
        fault = found.get(c.key)
        if fault is None or fault.kind not in ("runtime", "optimizer") or c.runtime not in order:
            if fault is not None:
                out[c.key] = fault
            continue
        seen = by_place[(c.artifact.id, c.probe, c.provider, package_of(c.runtime))]
        later = sorted((pin for pin in seen if pin in order and order[pin] > order[c.runtime]), key=order.__getitem__)
        fix = _passes_from(later, seen)
        failed = [pin for pin in seen if pin in order and fix and order[pin] < order[fix] and seen[pin] in FAULTED]
        last = max(failed, key=order.__getitem__, default=None)
        if fix is None or last is None:
            out[c.key] = fault
            continue
        out[c.key] = dataclasses.replace(fault, fixed_in=_version(fix), last_failing=_version(last))
    return out


def _passes_from(later: list[str], seen: Mapping[str, Status]) -> str | None:
    """The first of ``later`` (oldest first) from which every measured runtime passes (skipped, unavailable and
    broken environments measured nothing); None where the newest measured one does not pass."""
    measured = [pin for pin in later if seen[pin] is Status.PASS or seen[pin] in FAULTED]
    fix = None
    for pin in reversed(measured):
        if seen[pin] is not Status.PASS:
            break
        fix = pin
    return fix


def _version(pin: str) -> str:
    return pin.split("==")[-1]


def tracker(kind: str, exporter: str, providers: Sequence[str] = (), pins: Sequence[str] = ()) -> str:
    """The project whose tracker a fault of ``kind`` belongs to: the file's fault is the TorchScript exporter's
    (PyTorch) or dynamo's, whose op translations are onnxscript's; a runtime's is native TensorRT's, the OpenVINO
    provider's, or onnxruntime's, by the ``pins`` and ``providers`` of its cells."""
    if kind in ("runtime", "optimizer") and any(package_of(p) == "tensorrt" for p in pins):
        return "NVIDIA TensorRT (its ONNX parser and builder)"
    if kind in ("runtime", "optimizer") and any(runtimes_of.provider(p).ep.startswith("OpenVINO") for p in providers):
        return "OpenVINO (openvinotoolkit/openvino, its onnxruntime execution provider)"
    if kind == "exporter":
        return (
            "PyTorch (torch.onnx, TorchScript exporter)"
            if exporter == "torchscript"
            else ("onnxscript (the dynamo exporter's op translations), or PyTorch (torch.export) where the capture fails")
        )
    return TRACKERS.get(kind, "none: the evidence does not name one")


def counts(faults: Iterable[Fault]) -> dict[str, int]:
    """How many faults of each kind, and of the runtime's and the optimizer's how many a later runtime passes
    (``runtime_fixed``, ``optimizer_fixed``)."""
    found = dict.fromkeys(KINDS, 0)
    fixed = {"runtime_fixed": 0, "optimizer_fixed": 0}
    for f in faults:
        found[f.kind] += 1
        if f.fixed_in is not None:
            fixed[f"{f.kind}_fixed"] += 1
    return {**found, **fixed}


def summary(n: Mapping[str, int]) -> str:
    """``Of 53,578 failing cells, 19,880 are the file's (the exporter's), 2,073 the runtime's (… of them pass on a later
    runtime), …`` from :func:`counts`."""
    total = sum(n.get(k, 0) for k in KINDS)
    if not total:
        return "No cell fails."
    return (
        f"Of {total:,} failing cells, {n.get('exporter', 0):,} are the file's (the exporter's), {n.get('runtime', 0):,} "
        f"the runtime's ({n.get('runtime_fixed', 0):,} of them pass on a later runtime), {n.get('optimizer', 0):,} the "
        f"graph optimizer's ({n.get('optimizer_fixed', 0):,} of them pass on a later runtime), "
        f"{n.get('frontier', 0):,} past the runtime's frontier (a file newer than it loads) and "
        f"{n.get('undetermined', 0):,} undetermined."
    )
