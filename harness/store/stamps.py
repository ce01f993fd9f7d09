"""What each stage depends on, computed from matrix.toml, the command line, the build folder and the code, without
starting an environment: the export's settings, a cell's run settings, a shard's inputs, the report's inputs.

The stage that writes a stamp and :mod:`harness.store.plan`, which compares it before starting that stage, both ask
here, so neither imports the other. Standard library only: the noxfile reads it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.config import runtimes
from harness.store import cache, code, layout, lock

if TYPE_CHECKING:
    from harness.config.matrix import Matrix, Profile, Runtime

# The export ---------------------------------------------------------------------------------------------

BUDGETS = ("timeout", "reference_timeout")
"""Budgets, not inputs: an artifact exported within them is the same artifact whatever they are."""


def export_settings(matrix: Matrix, requirements: Sequence[str] = ()) -> dict[str, Any]:
    """The export settings an artifact's files depend on (besides its case and the versions), and its
    budgets (:data:`BUDGETS`)."""
    return {
        "atol": matrix.atol,
        "rtol": matrix.rtol,
        "scaled": matrix.scaled,
        "batch_sizes": list(matrix.batch_sizes),
        "reference": matrix.export.onnxruntime,
        "intermediates_mib": matrix.export.intermediates_mib,
        "external_data_mib": matrix.export.external_data_mib,
        "requirements": list(requirements),
        "timeout": matrix.export.timeout,
        "reference_timeout": matrix.export.reference_timeout,
    }


def reference_requirements(matrix: Matrix) -> list[str]:
    """What the export environment installs for its reference runtime (the declared runtime's constraints too)."""
    pin = f"{runtimes.REFERENCE}=={matrix.export.onnxruntime}"
    return next((list(rt.requirements) for rt in matrix.runtimes if rt.pin == pin), [pin])


def export_inputs(
    matrix: Matrix, profile: Profile, corpus: Sequence[str], cases: Sequence[str] | None, requirements: Sequence[str] = ()
) -> dict[str, Any]:
    """What decides which artifacts an export writes, from matrix.toml and the command line alone:
    :mod:`harness.store.plan` compares it with the last export's stamp without starting the environment."""
    return {
        "settings": export_settings(matrix, requirements),
        "pins": json.loads(json.dumps(dataclasses.asdict(matrix.export))),  # as the stamp reads it back (lists)
        "reference_requirements": reference_requirements(matrix),  # what the export session installs beside torch
        "exporters": list(profile.exporters),
        "opsets": {e: list(profile.opsets_of(e)) for e in profile.exporters},
        "corpus": list(corpus),
        "cases": sorted(cases) if cases is not None else None,
    }


# The run ------------------------------------------------------------------------------------------------


def run_settings(matrix: Matrix, column: str, runtime: Runtime) -> dict[str, Any]:
    """The run settings a cell's verdict and timing depend on: the timeout and latency protocol, the column's
    options, and the registry's entries for the runtime's kind and the column's provider (what a session is
    given and how it is judged), its list of releases aside."""
    settings: dict[str, Any] = {"timeout": matrix.run.timeout, "threads": 1, "latency": dataclasses.asdict(matrix.latency)}
    options = matrix.options(column, runtime.kind)
    if options:
        settings["options"] = options
    kind = {k: v for k, v in dataclasses.asdict(runtime.kind).items() if k != "releases"}
    settings["registry"] = {"kind": kind, "provider": dataclasses.asdict(runtimes.provider(column))}
    return settings


def run_code(runtime: Runtime, package: Path = code.PACKAGE) -> str:
    """The digest of the code that runs ``runtime``'s cells: what the run stage and its kind's backend import
    (:func:`harness.store.code.run_files`; ``package``: this one, or a copy a test edits)."""
    return code.digest(code.run_files(runtime.kind.backend, package), package)


def export_code(package: Path = code.PACKAGE) -> str:
    """The digest of the code that exports: what the export stage imports (:func:`harness.store.code.export_files`)."""
    return code.digest(code.export_files(package), package)


def shard_inputs(artifacts: Iterable[tuple[str, str | None, str]], matrix: Matrix, runtime: Runtime, column: str) -> str:
    """What a shard depends on: each artifact's ``(id, export key, digest)``, the runtime's requirements,
    the column, the run settings and the code that runs cells. :mod:`harness.store.plan` computes it from
    the export's stamp; a shard whose stamp holds the same value has nothing left to run."""
    return cache.digest(
        sorted(artifacts), list(runtime.gpu_install), column, run_settings(matrix, column, runtime), run_code(runtime)
    )


# The report ---------------------------------------------------------------------------------------------


def report_code(package: Path = code.PACKAGE) -> tuple[str, ...]:
    """Every file of the package (its page template too): what the report and the command line run."""
    names = [p.relative_to(package).as_posix() for p in package.rglob("*") if p.suffix in (".py", ".html")]
    return tuple(sorted(n for n in names if "__pycache__" not in n))


def report_inputs(out: Path, profile: Profile, results: Path, builtin: Iterable[str]) -> str:
    """A digest of what the report reads: the manifest, every artifact's record (by its export's
    content address: cards, claims, graphs), the profile's shards, each runtime's measured frontier, the spec's
    answer, the CUDA reference, the JSON files of the tables published inside its folder (``results/openvino/``,
    ``results/torch/``: their environment.json changes with each), the harness's code. A file absent counts as
    absent: writing it moves the key. tests/test_report_inputs.py watches a real report open files and requires
    each to be here."""
    from harness.store import frontier

    files = [
        out / layout.MANIFEST,
        out / layout.EXPORT_STAMP,  # every artifact's content address, and the export's environment
        *(f(out, rt, p) for rt, p in profile.shards() for f in (layout.shard_path, layout.stamp_path)),
        *(frontier.result_path(out, rt.id) for rt in profile.runtimes),
        frontier.models_dir(out) / frontier.INDEX,
        out / layout.SPEC,
        out / layout.SPEC_STAMP,
        out / layout.CUDA_REFERENCE,
        *sorted(results.glob("*/*.json")),  # tables published inside its folder, which its README lists and reads
        *sorted(results.glob("*/matrix.jsonl")),
    ]
    hashes = [(p.relative_to(out if out in p.parents else results).as_posix(), _sha256(p)) for p in files if p.exists()]
    code = cache.code_digest(report_code())
    return cache.digest(profile.name, str(results.resolve()), list(builtin), hashes, code)


def _sha256(path: Path) -> str:
    """A file's hash, or what stands in its place (a folder, an unreadable file): the report refuses it."""
    try:
        return cache.sha256_file(path)
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"


def report_outputs(results: Path) -> list[Path]:
    """The files a report owns under ``results``: not the locks, and not another profile's report published in a
    folder of its own inside it (``results/openvino/``, which holds its own ``matrix.jsonl``)."""
    nested = {p.parent for p in results.glob("*/**/matrix.jsonl")}
    files = []
    for p in sorted(results.rglob("*")):
        if p.is_file() and p.name not in (lock.NAME, lock.STAGE) and not any(d in p.parents for d in nested):
            files.append(p)
    return files


def write_report_stamp(out: Path, profile: Profile, results: Path, builtin: Iterable[str]) -> None:
    """After the report: its inputs and the hash of every file it owns now under ``results``."""
    files = report_outputs(results)
    outputs = {p.relative_to(results).as_posix(): cache.sha256_file(p) for p in files}
    stat = {p.relative_to(results).as_posix(): cache.signature(p) for p in files}
    inputs = report_inputs(out, profile, results, builtin)
    stamp = {"inputs": inputs, "outputs": outputs, "stat": stat, "env": cache.environment()}
    cache.write_json(layout.report_stamp(out, profile.name), stamp)
