"""What a run environment holds and whether a column can run in it, printed by a child process for :mod:`harness.run.envprobe`."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from harness.config import runtimes
from harness.run.backends.contract import backend


def probe_main(argv: Sequence[str] | None = None) -> None:
    """``python -c 'from harness.run.backends.environment import probe_main; probe_main()' <backend> env|column <column>``:
    print the backend's environment (with the CPU column's problem) or one column's problem as JSON."""
    ref, what, *rest = list(sys.argv[1:] if argv is None else argv)
    be = backend(ref)
    if what == "env":
        cpu = be.problem("cpu") if "cpu" in _columns_of(ref) else None
        print(json.dumps({"env": be.environment(), "cpu": cpu}))
    else:
        print(json.dumps(be.problem(rest[0])))


def _columns_of(ref: str) -> set[str]:
    return {c for k in runtimes.KINDS if k.backend == ref for c in k.columns()}
