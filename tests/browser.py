"""A real headless Chromium (Debian's ``chromium`` package) driven by Playwright for Python.

Playwright's own browser download is never used (it cannot be fetched here):
the browser is the system's, passed as ``executable_path``. Where it is
missing the browser tests skip, except under CI (``CI=true``), where they
fail: `.ci/run` installs it.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

CANDIDATES = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
# As root and on a closed network: no sandbox, and none of Chromium's background connections.
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def executable() -> str | None:
    found = os.environ.get("CHROMIUM") or next((p for p in CANDIDATES if os.path.exists(p)), None) or shutil.which("chromium")
    return found


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    path = executable()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        path = None
    if path is None:
        message = "no Chromium + Playwright here: `apt-get install chromium` and `pip install playwright` (.ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=ARGS)
        yield browser
        browser.close()


class Page:
    """A page with every console message and uncaught error recorded."""

    def __init__(self, browser: Any, url: str, viewport: tuple[int, int] = (1400, 900)) -> None:
        self.page = browser.new_page(viewport={"width": viewport[0], "height": viewport[1]})
        self.console: list[tuple[str, str]] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.console.append((m.type, m.text)))
        self.page.on("pageerror", lambda e: self.console.append(("pageerror", str(e))))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready='1']", timeout=30_000)

    @property
    def errors(self) -> list[tuple[str, str]]:
        return [m for m in self.console if m[0] in ("error", "pageerror", "warning")]

    def rows(self) -> int:
        """Rows the grid holds after its filters (only those in view are in the document)."""
        return int(self.page.evaluate("document.getElementById('grid').dataset.rows"))

    def view(self) -> dict[str, Any]:
        """What the grid shows, in order: ``rows`` as [case, exporter, opset], ``columns``."""
        return dict(self.page.evaluate("window.matrixView()"))

    def close(self) -> None:
        self.page.close()
