"""The nightly, sharded (.github/workflows/nightly.yml): its job matrix, and the gather of its layout.

``harness jobs`` turns nox's own session list (``nox -l --json -t run``) into the run jobs of a
profile: one per runtime, on a hosted runner for the CPU package and on a runner labelled for GPUs
for ``onnxruntime-gpu`` and native TensorRT. ``harness gather`` merges the shards the run jobs
uploaded into the export's build folder, for ``harness report``.

The gather is order-independent and idempotent: what it writes depends only on the set of shards it
is given (each rewritten sorted and sealed, as the run stage writes it; the profile's shards already
in the build folder that it is not given are removed), so gathering again, or in another order,
writes the same bytes. It refuses, with one line, a shard whose cells ran artifacts other than this
export's (their model or reference hashes differ, or none of its artifacts is the export's), a shard
that its run did not seal (no stamp beside it holding its hash: the job was killed), a line cut short or
failing its checksum, a shard that is not one of the profile's or whose cells are another
runtime's or provider's, and two different copies of one shard.

Standard library only.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from harness.config.matrix import Profile
from harness.core.errors import HarnessError
from harness.core.records import CellRecord
from harness.store import cache, frontier, layout

CPU_RUNNER = ["ubuntu-24.04"]
GPU_RUNNER = ["self-hosted", "linux", "x64", "gpu"]
"""The labels a GPU run job asks for: a self-hosted runner registered with the ``gpu`` label."""
PYTHON = "3.11"
"""The project's Python: every job's, and a run job's unless its runtime names an older one (``python`` in matrix.toml),
which that job's setup installs beside it."""


def jobs(sessions_file: Path, profile: Profile) -> dict[str, list[dict[str, Any]]]:
    """The run jobs of ``profile`` (a GitHub Actions ``strategy.matrix``), from ``nox -l --json -t run``.

    Raises:
        HarnessError: the file is not nox's session list, or a runtime of the profile has no session.
    """
    try:
        listed = json.loads(sessions_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HarnessError(f"{sessions_file}: no such file; write it with `nox -l --json -t run > {sessions_file}`") from None
    except ValueError as exc:
        raise HarnessError(f"{sessions_file}: not the JSON of `nox -l --json -t run` ({exc})") from None
    if not isinstance(listed, list) or not all(isinstance(s, dict) and "session" in s for s in listed):
        raise HarnessError(f"{sessions_file}: not the JSON of `nox -l --json -t run` (a list of sessions)")
    by_pin = {(s.get("call_spec") or {}).get("runtime"): s["session"] for s in listed if s.get("name") == "run"}
    include = []
    for rt in profile.runtimes:
        session = by_pin.get(rt.pin)
        if session is None:
            raise HarnessError(
                f"{sessions_file}: no nox session runs {rt.pin} (expected run({rt.id})); "
                "list the sessions with `nox -l --json -t run` from the same checkout as matrix.toml"
            )
        runs_on = GPU_RUNNER if rt.gpu else CPU_RUNNER
        python = rt.python or PYTHON  # the job installs it beside the project's (matrix.toml's `python`)
        include.append({"session": session, "id": rt.id, "runtime": rt.pin, "gpu": rt.gpu, "runs-on": runs_on, "python": python})
    return {"include": include}


def _shard_files(sources: Iterable[Path]) -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for src in sources:
        if not src.exists():
            raise HarnessError(f"gather: {src}: no such file or folder")
        for path in [src] if src.is_file() else sorted(src.rglob("*.jsonl")):
            found.setdefault(path.name, []).append(path)
    return found


def gather(
    out: Path, profile: Profile, sources: Sequence[Path], echo: Callable[[str], Any] = print, *, partial: bool = False
) -> list[Path]:
    """Merge the shards under ``sources`` into ``out/shards`` (``out`` holds the export); return the shards written.

    Every shard is checked before any is written, so a refusal leaves the build folder as it was. With
    ``partial``, a shard its run did not seal, or a damaged one, is left out and said instead (the report
    then refuses to publish without ``--partial`` too).

    Raises:
        HarnessError: one line: a shard of other artifacts (hash mismatch), a damaged or unsealed shard
            (without ``partial``), a shard the profile does not have, two different copies of one
            shard, or no shard at all.
    """
    exports = {r.key.id: r for r in layout.load_artifacts(out)}
    expected = {layout.shard_path(out, rt, column).name: (rt.pin, column) for rt, column in profile.shards()}
    found = {name: sorted(paths) for name, paths in _shard_files(sources).items()}
    if not found:
        raise HarnessError(f"gather: no shards (*.jsonl) under {', '.join(map(str, sources))}; did the run jobs upload any?")
    strays = sorted(set(found) - set(expected))
    if strays:
        raise HarnessError(
            f"gather: {found[strays[0]][0]} is not a shard of profile {profile.name!r}; "
            f"gather with the --profile the run jobs ran (its shards: {', '.join(sorted(expected)[:3])}, …)"
        )
    checked: dict[str, dict[str, CellRecord]] = {}
    for name in sorted(found):
        try:
            copies = [_checked(path, exports, *expected[name]) for path in found[name]]
        except _NotWhole as exc:
            if not partial:
                raise HarnessError(str(exc)) from None
            echo(f"{exc}: left out (--partial)")
            continue
        for path, other in zip(found[name][1:], copies[1:], strict=True):
            if _lines(other) != _lines(copies[0]):
                raise HarnessError(f"gather: {found[name][0]} and {path} are two different runs of one shard; keep one of them")
        checked[name] = copies[0]
    (out / layout.SHARDS).mkdir(parents=True, exist_ok=True)
    written = []
    for name, cells in checked.items():
        dest = out / layout.SHARDS / name
        layout.write_shard(dest, cells.values())
        _stamp(found[name], dest)
        written.append(dest)
        echo(f"gather: {name}: {len(cells)} cells")
    missing = sorted(set(expected) - set(checked))
    for name in missing:  # an earlier gather's shard is not this gather's: the report must not read it
        for stale in (out / layout.SHARDS / name, layout.stamp_of(out / layout.SHARDS / name)):
            stale.unlink(missing_ok=True)
    if missing:
        echo(f"gather: no whole shard for {', '.join(missing)}: the report refuses to publish without them (or --partial)")
    _gather_frontiers(out, profile, sources, echo)
    return written


def _gather_frontiers(out: Path, profile: Profile, sources: Sequence[Path], echo: Callable[[str], Any]) -> None:
    """Each run job's measured frontier (``frontier/<runtime id>.json``, uploaded beside its shards) into ``out``, as a
    single run has them: what each runtime loads, the table's explanation of a refusal at load and the reproducers
    such refusals share. One measured on other frontier models than this export's, of a runtime the profile does not
    have, or two different ones of one runtime, are left out and said: the report then says that runtime's frontier
    is not measured, never a wrong one."""
    digest = frontier.index_digest(out)
    ids = {rt.id: rt.pin for rt in profile.runtimes}
    found: dict[str, list[tuple[Path, Any]]] = {}
    for src in sources:
        for path in [] if src.is_file() else sorted(src.rglob("*.json")):
            if path.parent.name == frontier.FOLDER and path.stem in ids:
                found.setdefault(path.stem, []).append((path, cache.read_json(path)))
    for runtime_id, copies in sorted(found.items()):
        result = copies[0][1]
        if any(other != result for _, other in copies[1:]):
            echo(f"gather: {copies[0][0]} and {copies[1][0]} are two different frontiers of {runtime_id}: left out")
        elif not isinstance(result, dict) or result.get("models") != digest or result.get("runtime") != ids[runtime_id]:
            echo(f"gather: {copies[0][0]} was measured on other frontier models or another runtime: left out")
        else:
            cache.write_json(frontier.result_path(out, runtime_id), result)
            echo(f"gather: {runtime_id}: its frontier ({frontier.describe(result)})")


class _NotWhole(HarnessError):
    """A shard cut short, failing its checksums, or not sealed by its run: what ``--partial`` leaves out."""


def _lines(cells: dict[str, CellRecord]) -> set[str]:
    return {cache.seal(c.to_dict()) for c in cells.values()}


def _checked(path: Path, exports: dict[str, Any], pin: str, column: str) -> dict[str, CellRecord]:
    """A shard's cells, refused when a line fails its checksum, a cell is another runtime's or provider's
    than the shard's name says, a cell ran an artifact that is not the export's, or none of its cells is
    of this export (cells of artifacts the export does not hold are dropped: the report ignores them)."""
    try:
        cells, corrupt = layout.read(path)
        digest = cache.sha256_file(path)
    except OSError as exc:
        raise HarnessError(f"gather: {path}: cannot be read ({exc.strerror or exc})") from None
    if corrupt:
        raise _NotWhole(
            f"gather: {path}: {corrupt} line(s) are cut short or fail their checksum; upload or download the shard again"
        )
    if (seal_state := layout.unsealed(path, digest)) is not None:
        why = "has no seal beside it" if seal_state == "no seal" else "is not the shard its seal describes"
        raise _NotWhole(
            f"gather: {path} {why} ({layout.stamp_of(path).name}): its run job did not finish, or the upload lost "
            "the stamp; rerun that run job (upload build/shards/ whole)"
        )
    keep: dict[str, CellRecord] = {}
    for key, c in cells.items():
        if (c.runtime, c.provider) != (pin, column):
            raise HarnessError(
                f"gather: {path}: holds cells of {c.runtime} {c.provider}, not of {pin} {column} as its name says; "
                "upload the run job's shards as it wrote them"
            )
        if c.runtime_wide:
            keep[key] = c
            continue
        rec = exports.get(c.artifact.id)
        if rec is None:
            continue
        if c.inputs != rec.digest or c.sha256 != rec.sha256:
            raise HarnessError(
                f"gather: {path}: cell {c.artifact.id} [{c.probe}] ran other artifacts than this export's "
                f"(model {str(c.sha256)[:12]}, inputs {c.inputs} ≠ model {str(rec.sha256)[:12]}, inputs {rec.digest}); "
                "rerun its run job on this export's artifacts"
            )
        keep[key] = c
    if cells and not keep:
        raise HarnessError(
            f"gather: {path}: none of its {len(cells)} cells is of an artifact of this export; "
            "gather it into the export its run job ran (same profile, cases and corpus)"
        )
    return keep


def _stamp(sources: Sequence[Path], dest: Path) -> None:
    """Seal the shard written with its run job's seal (checked by :func:`_checked`), now holding the hash
    of what was written (the gather drops the cells of artifacts this export does not hold)."""
    stamp = cache.read_json(layout.stamp_of(sources[0]))
    assert isinstance(stamp, dict)
    layout.seal(dest, {k: v for k, v in stamp.items() if k != "sha256"})
