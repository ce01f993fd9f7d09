from __future__ import annotations

from harness.cli import main

if __name__ == "__main__":  # spawned workers import this module too
    raise SystemExit(main())
