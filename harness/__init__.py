"""PyTorch → ONNX compatibility matrix harness.

One folder per stage and per shared layer (docs/architecture.md): ``core``, ``config``, ``store``, ``cases``,
``numeric``, ``pool`` below; the stages ``export`` (torch environment), ``run`` (one runtime's environment) and
``publish`` (pandas); ``answer`` (recommend, diff) from a published table alone; ``cli`` on top. The rules
between them are tests (tests/test_architecture.py).

Importing :mod:`harness` imports nothing heavy: the run environments hold only
onnxruntime and numpy, and must be able to import every module they use, on Python 3.9 too (onnxruntime 1.10–1.14's
environments: tests/test_old_python.py).
"""

from __future__ import annotations

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.9, 3.10: the run environments of onnxruntime 1.10–1.14 install tomli, its origin
    import tomli as tomllib  # type: ignore[no-redef]
from pathlib import Path


def _version() -> str:
    """pyproject.toml's version, the one source: read from the source tree where the package runs from one
    (an editable install, the noxfile's path), else from the installed distribution's metadata."""
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        project = tomllib.loads(pyproject.read_text())["project"]
        if project["name"] == "harness":
            return str(project["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        pass
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("harness")
    except PackageNotFoundError:
        return "unknown"


__version__ = _version()
