"""Shared fixtures. Tests use the real libraries: torch, onnxruntime, nox, uv."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser import chromium  # noqa: F401 (the fixture: a real headless Chromium)

ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that drives the browser is marked so (``nox -s unit`` leaves the slow kinds out: ``-m``)."""
    for item in items:
        if "chromium" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)


@pytest.fixture
def root() -> Path:
    return ROOT
