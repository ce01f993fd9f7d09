"""Shared fixtures. Tests use the real libraries: torch, onnxruntime, nox, uv."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.browser import chromium  # noqa: F401 (the fixture: a real headless Chromium)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def root() -> Path:
    return ROOT
