"""Shared fixtures. Tests use the real libraries: torch, onnxruntime, nox, uv.

Which kind a test is follows from what it does, not from a mark someone remembered: a test that drives the browser
is marked ``browser`` here, and a test that starts nox or uv without the ``e2e`` mark fails (``nox -s unit`` leaves
the marked kinds out, and runs in a plain virtual environment where neither may be installed).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.browser import chromium  # noqa: F401 (the fixture: a real headless Chromium)

ROOT = Path(__file__).resolve().parent.parent

SLOW_TOOLS = ("nox", "uv")
"""Programs only an ``e2e`` test may start: they make and install environments."""

_started: list[str] = []


def _audit(event: str, args: tuple[object, ...]) -> None:
    if event == "subprocess.Popen" and args:
        program, argv = args[0], args[1]
        first = argv[0] if isinstance(argv, (list, tuple)) and argv else argv
        for name in (program, first):
            if isinstance(name, (str, bytes, os.PathLike)) and os.path.basename(os.fsdecode(name)) in SLOW_TOOLS:
                _started.append(os.fsdecode(name))
                return


sys.addaudithook(_audit)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that drives the browser is marked so (``nox -s unit`` leaves the slow kinds out: ``-m``)."""
    for item in items:
        if "chromium" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)


def _only_e2e_starts_slow_tools(item: pytest.Item, phase: str) -> Iterator[None]:
    _started.clear()
    result = yield
    if _started and item.get_closest_marker("e2e") is None:
        raise AssertionError(f"{item.nodeid} started {_started[0]} in its {phase} without @pytest.mark.e2e: mark it e2e")
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """A test whose fixtures start nox or uv is an ``e2e`` test: without the mark it fails, naming the program."""
    return (yield from _only_e2e_starts_slow_tools(item, "set-up"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A test that starts nox or uv is an ``e2e`` test: without the mark it fails, naming the program."""
    return (yield from _only_e2e_starts_slow_tools(item, "body"))


@pytest.fixture
def root() -> Path:
    return ROOT
