"""results/index.html in a real headless Chromium: it loads with no console errors, its filters narrow
the rows, its sort reorders them, a cell shows its details, and no string from a model or an error can
become markup."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness import page
from harness.records import CellRecord, DiffStats, ExportRecord, Latency, Stage, Status
from harness.report import LEGEND
from tests.browser import Page

ROOT = Path(__file__).resolve().parent.parent
PUBLISHED = ROOT / "results" / "index.html"

HOSTILE_CASE = "x</script><script>alert('case')</script>"
HOSTILE_ERROR = "<img src=x onerror=\"alert('error')\"> & </script>"
HOSTILE_CARD = "<b id=injected>bold</b> &amp; \u2028 done"


def _records() -> tuple[list[CellRecord], list[ExportRecord]]:
    exports = [
        ExportRecord(case=HOSTILE_CASE, exporter="torchscript", opset=18, ok=True, seconds=0.1, card={"symptom": HOSTILE_CARD}),
        ExportRecord(case="plain", exporter="dynamo", opset=18, ok=True, seconds=0.1),
    ]
    cells = [
        CellRecord(HOSTILE_CASE, "torchscript", 18, "onnxruntime==1.32.0", "cpu", "example", Status.MISMATCH, Stage.COMPARE,
                   error_line=HOSTILE_ERROR, diff=DiffStats(1.5, 0.5, 3, 12)),
        CellRecord(HOSTILE_CASE, "torchscript", 18, "onnxruntime==1.32.0", "cpu", "batch3", Status.PASS, Stage.COMPARE),
        CellRecord("plain", "dynamo", 18, "onnxruntime==1.32.0", "cpu", "example", Status.PASS, Stage.LATENCY,
                   latency=Latency(0.012, 0.015, 40, 5, 1, 3.0, stable=True)),
    ]  # fmt: skip
    return cells, exports


def _hostile_page(tmp_path: Path) -> Path:
    cells, exports = _records()
    payload = page.data(
        cells,
        exports,
        repros={f"{HOSTILE_CASE}.torchscript.op18": "repro/evil"},
        constraints={},
        environment={"generated": "2026-12-01 00:00 UTC", "profile": "test"},
        legend=LEGEND,
        counts={"pass": 2, "mismatch": 1},
    )
    path = tmp_path / "index.html"
    path.write_text(page.render(payload), encoding="utf-8")
    return path


def test_the_page_embeds_its_data_so_that_no_string_can_close_the_script(tmp_path: Path) -> None:
    html = _hostile_page(tmp_path).read_text(encoding="utf-8")
    data = html.split('<script id="data" type="application/json">', 1)[1].split("</script>", 1)[0]
    assert "<" not in data and ">" not in data and "\u2028" not in data
    payload = json.loads(data)  # \u003c escapes decode back to the original strings
    assert payload["cases"][0]["name"] == HOSTILE_CASE
    assert HOSTILE_ERROR in [d.get("error") for d in payload["details"]]
    assert not re.search(r"""<(script|link|img)[^>]+(src|href)=["']?(https?:)?//""", html), (
        "the page must load nothing from elsewhere"
    )


def test_hostile_strings_stay_text_in_the_browser(chromium: Any, tmp_path: Path) -> None:
    p = Page(chromium, _hostile_page(tmp_path).as_uri())
    try:
        assert p.dialogs == [] and p.errors == []
        assert p.page.locator("#grid td.name").first.text_content() == HOSTILE_CASE
        p.page.locator("#grid td.c").first.click()
        details = p.page.locator("#details")
        assert HOSTILE_ERROR in details.text_content()
        assert "<b id=injected>bold</b>" in details.text_content()
        assert p.page.locator("#injected").count() == 0 and p.page.locator("img").count() == 0
        assert p.dialogs == [] and p.errors == []
    finally:
        p.close()


def _published() -> list[dict[str, Any]]:
    if not PUBLISHED.exists():
        pytest.fail(f"{PUBLISHED} is missing: run `nox -s matrix`")
    return [json.loads(line) for line in (ROOT / "results" / "matrix.jsonl").read_text().splitlines()]


def test_the_published_page_shows_the_full_table(chromium: Any) -> None:
    rows = _published()
    artifacts = {(r["case"], r["exporter"], r["opset"]) for r in rows if r["case"] != "*"}
    runtimes = sorted({r["runtime"] for r in rows}, key=lambda pin: tuple(int(x) for x in pin.split("==")[1].split(".")))
    p = Page(chromium, PUBLISHED.as_uri())
    try:
        assert p.errors == [], p.errors
        assert p.rows() == len(artifacts)
        headers = p.page.locator("#grid thead th").all_text_contents()
        loads = json.loads((ROOT / "results" / "frontier.json").read_text())  # each header: version, then what it loads
        assert headers[3:] == [
            f"{pin.split('==')[1]}IR≤{loads[pin]['max_ir']} op≤{loads[pin]['max_opset']}" for pin in runtimes
        ]
        assert "loads up to IR 9 / opset 19 (measured)" in (p.page.locator("#grid thead th").nth(4).get_attribute("title") or "")

        p.page.select_option("#f-exporter", "dynamo")
        dynamo = sum(1 for a in artifacts if a[1] == "dynamo")
        assert 0 < p.rows() == dynamo < len(artifacts)
        p.page.select_option("#f-opset", "18")
        assert p.rows() == sum(1 for a in artifacts if a[1:] == ("dynamo", 18))
        p.page.fill("#f-case", "frozen_batch")
        names = set(p.page.locator("#grid td.name").all_text_contents())
        assert names == {a[0] for a in artifacts if "frozen_batch" in a[0] and a[1:] == ("dynamo", 18)}

        p.page.click("#f-reset")
        assert p.rows() == len(artifacts)
        p.page.select_option("#f-status", "load-fail")
        failing = {(r["case"], r["exporter"], r["opset"]) for r in rows if r["status"] == "load-fail"}
        assert p.rows() == len(failing)
        p.page.select_option("#f-runtime", runtimes[-1])
        newest = {
            (r["case"], r["exporter"], r["opset"]) for r in rows if r["status"] == "load-fail" and r["runtime"] == runtimes[-1]
        }
        assert p.rows() == len(newest) < len(failing)
        assert p.page.locator("#grid thead th").count() == 4
        p.page.click("#f-reset")

        p.page.click("#grid thead th[data-key='opset']")
        opsets = [int(t) for t in p.page.locator("#grid tbody tr td:nth-child(3)").all_text_contents()]
        assert opsets == sorted(opsets) and opsets[0] < opsets[-1]
        p.page.click("#grid thead th[data-key='opset']")
        opsets = [int(t) for t in p.page.locator("#grid tbody tr td:nth-child(3)").all_text_contents()]
        assert opsets == sorted(opsets, reverse=True)
        assert p.errors == [], p.errors
    finally:
        p.close()


def test_a_published_cell_shows_its_error_diff_latency_and_reproducer(chromium: Any) -> None:
    rows = _published()
    newest = max({r["runtime"] for r in rows}, key=lambda pin: tuple(int(x) for x in pin.split("==")[1].split(".")))
    failing = next(r for r in rows if (r["case"], r["exporter"], r["opset"], r["runtime"], r["probe"])
                   == ("frozen_batch", "torchscript", 18, newest, "batch8"))  # fmt: skip
    passing = next(r for r in rows if (r["case"], r["exporter"], r["opset"], r["runtime"], r["probe"])
                   == ("frozen_batch", "torchscript", 18, newest, "example"))  # fmt: skip
    p = Page(chromium, PUBLISHED.as_uri())
    try:
        p.page.select_option("#f-runtime", newest)
        p.page.select_option("#f-exporter", "torchscript")
        p.page.select_option("#f-opset", "18")
        p.page.fill("#f-case", "frozen_batch")
        row = p.page.locator("#grid tbody tr", has=p.page.locator("td.name", has_text=re.compile("^frozen_batch$")))
        cell = row.locator("td.c")
        cell.hover()
        assert failing["status"] in (cell.get_attribute("title") or "") and failing["error_line"] in cell.get_attribute("title")
        cell.click()
        text = p.page.locator("#details").text_content() or ""
        assert failing["status"] in text and failing["error_line"] in text
        assert f'pip install "{newest}"' in text
        assert f"python results/{failing['repro']}/repro.py" in text
        assert p.page.locator(f"#details a[href='{failing['repro']}/repro.py']").count() == 1
        assert (ROOT / "results" / failing["repro"] / "repro.py").is_file()
        lat = passing["latency"]
        assert f"median {lat['median_ms'] * 1000:.0f} µs" in text and f"{lat['runs']} runs" in text
        assert "elements outside tolerance" in text  # the passing probe's diff statistics
        assert p.errors == [], p.errors
    finally:
        p.close()
