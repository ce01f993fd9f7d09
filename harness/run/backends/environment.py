"""What a run environment holds and whether a column can run in it, printed by a child process for :mod:`harness.run.envprobe`."""

from __future__ import annotations

import json
import platform as _platform
import sys
from collections.abc import Sequence

from harness.config import platforms, runtimes
from harness.run.backends.contract import backend


def probe_main(argv: Sequence[str] | None = None) -> None:
    """``python -c 'from harness.run.backends.environment import probe_main; probe_main()' <backend> env|column <column>``:
    print the backend's environment (with the CPU column's problem) or one column's problem as JSON."""
    ref, what, *rest = list(sys.argv[1:] if argv is None else argv)
    be = backend(ref)
    if what == "env":
        cpu = be.problem("cpu") if "cpu" in _columns_of(ref) else None
        print(json.dumps({"env": {**be.environment(), **cpu_seen()}, "cpu": cpu}))
    else:
        print(json.dumps(be.problem(rest[0])))


def cpu_seen() -> dict[str, str]:
    """The CPU this process runs on as it sees it (emulated or not): ``machine``, ``isa`` (its level, the name of a
    platform where it is one) and ``isa_features`` (numpy's runtime dispatch: :func:`cpu_features`)."""
    features = cpu_features()
    machine = _platform.machine()
    return {"machine": machine, "isa": platforms.level(features, machine), "isa_features": platforms.seen(features)}


def cpu_features() -> dict[str, bool]:
    """What numpy's runtime dispatch sees in this process (empty where numpy is too old to say)."""
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as found  # numpy 2
    except ImportError:
        try:
            from numpy.core._multiarray_umath import __cpu_features__ as found  # type: ignore[no-redef]  # numpy 1.x
        except ImportError:
            return {}
    return {str(k): bool(v) for k, v in found.items()}


def _columns_of(ref: str) -> set[str]:
    return {c for k in runtimes.KINDS if k.backend == ref for c in k.columns()}
