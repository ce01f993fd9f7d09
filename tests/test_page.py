"""results/index.html in a real headless Chromium: it loads with no console errors, its filters narrow
the rows, its sort reorders them, a cell shows its details, and no string from a model or an error can
become markup."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from harness.core.records import CellRecord, DiffStats, ExportRecord, Latency, Stage, Status
from harness.publish import page
from harness.publish.report import LEGEND
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
        beside=[  # a column published beside it (results/gpu/), its device a hostile string too
            {"folder": "gpu", "runtime": "onnxruntime-gpu==1.31.1", "column": "cuda", "device": HOSTILE_CARD,
             "measured": "2026-12-01 00:00 UTC", "counts": {"pass": 7, "mismatch": 2}, "not_measured": None},
        ],
    )  # fmt: skip
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
        assert p.page.locator("#grid td.name .long").first.text_content() == HOSTILE_CASE
        p.page.locator("#grid td.c").first.click()
        details = p.page.locator("#details")
        assert HOSTILE_ERROR in details.text_content()
        assert "<b id=injected>bold</b>" in details.text_content()
        assert p.page.locator("#injected").count() == 0 and p.page.locator("img").count() == 0
        beside = p.page.locator("#beside li")
        assert beside.count() == 1 and p.page.locator("#beside a").get_attribute("href") == "gpu/index.html"
        assert beside.text_content() == (
            f"onnxruntime-gpu==1.31.1 cuda on {HOSTILE_CARD}, measured 2026-12-01 00:00 UTC: 7 pass, 2 mismatch, 0 unavailable"
        )
        assert p.dialogs == [] and p.errors == []
    finally:
        p.close()


def _published() -> list[dict[str, Any]]:
    if not PUBLISHED.exists():
        pytest.fail(f"{PUBLISHED} is missing: run `nox -s matrix`")
    return [json.loads(line) for line in (ROOT / "results" / "matrix.jsonl").read_text().splitlines()]


def _worst(rows: list[dict[str, Any]]) -> dict[tuple[str, str, int, str, str], str]:
    """What each published grid cell shows, worked out from the raw rows: the worst status over its probes."""
    shown: dict[tuple[str, str, int, str, str], str] = {}
    for r in rows:
        if r["case"] == "*":
            continue
        k = (r["case"], r["exporter"], r["opset"], r["runtime"], r["provider"])
        if k not in shown or Status(r["status"]).severity > Status(shown[k]).severity:
            shown[k] = r["status"]
    return shown


def _typed(p: Page, text: str) -> None:
    """Fill the case box and wait for the debounced rebuild (the state reaches the URL when it is done)."""
    p.page.fill("#f-case", text)
    p.page.wait_for_function("(t) => new URLSearchParams(location.hash.slice(1)).get('case') === (t || null)", arg=text)


def test_the_published_page_shows_the_full_table(chromium: Any) -> None:
    rows = _published()
    artifacts = {(r["case"], r["exporter"], r["opset"]) for r in rows if r["case"] != "*"}
    runtimes = sorted({r["runtime"] for r in rows}, key=lambda pin: tuple(int(x) for x in pin.split("==")[1].split(".")))
    shown = _worst(rows)
    p = Page(chromium, PUBLISHED.as_uri())
    try:
        assert p.errors == [], p.errors
        assert p.rows() == len(artifacts)
        assert 0 < p.page.locator("#grid tbody tr[data-row]").count() < 120  # only the rows in view are built
        headers = p.page.locator("#grid thead th").all_text_contents()
        loads = json.loads((ROOT / "results" / "frontier.json").read_text())  # each header: version, then what it loads
        assert headers[3:] == [f"{pin.split('==')[1]}IR≤{loads[pin]['max_ir']} op≤{loads[pin]['max_opset']}" for pin in runtimes]
        second = loads[runtimes[1]]  # each header's title says what its runtime loads, as measured
        said = f"loads up to IR {second['max_ir']} / opset {second['max_opset']} (measured)"
        assert said in (p.page.locator("#grid thead th").nth(4).get_attribute("title") or "")

        p.page.select_option("#f-exporter", "dynamo")
        dynamo = sum(1 for a in artifacts if a[1] == "dynamo")
        assert 0 < p.rows() == dynamo < len(artifacts)
        p.page.select_option("#f-opset", "18")
        assert p.rows() == sum(1 for a in artifacts if a[1:] == ("dynamo", 18))
        _typed(p, "frozen_batch")
        names = {r[0] for r in p.view()["rows"]}
        assert names == {a[0] for a in artifacts if "frozen_batch" in a[0] and a[1:] == ("dynamo", 18)}

        p.page.click("#f-reset")
        assert p.rows() == len(artifacts)
        p.page.select_option("#f-status", "load-fail")  # rows with a cell that *shows* load-fail, not any probe
        failing = {k[:3] for k, status in shown.items() if status == "load-fail"}
        assert p.rows() == len(failing)
        p.page.select_option("#f-runtime", runtimes[-1])
        newest = {k[:3] for k, status in shown.items() if status == "load-fail" and k[3] == runtimes[-1]}
        assert p.rows() == len(newest) < len(failing)
        assert p.page.locator("#grid thead th").count() == 4
        legend = p.page.locator("#legend li[data-status='load-fail']").text_content() or ""
        assert legend.endswith(f"load-fail: {len(newest)}"), legend  # the legend counts the cells shown
        p.page.click("#f-reset")

        for kind in ("runtime", "exporter"):  # rows with a cell of that fault, on any probe
            p.page.select_option("#f-fault", kind)
            faulted = {(r["case"], r["exporter"], r["opset"]) for r in rows if r.get("fault") == kind}
            assert 0 < p.rows() == len(faulted), kind
        p.page.click("#f-reset")

        p.page.click("#grid thead th[data-key='opset']")
        opsets = [r[2] for r in p.view()["rows"]]
        assert opsets == sorted(opsets) and opsets[0] < opsets[-1] and len(opsets) == len(artifacts)
        p.page.click("#grid thead th[data-key='opset']")
        opsets = [r[2] for r in p.view()["rows"]]
        assert opsets == sorted(opsets, reverse=True)
        p.page.evaluate("document.getElementById('wrap').scrollTop = 1e9")  # the last rows are built on scroll
        last = "document.querySelector('#grid tbody tr[data-v]:last-of-type')?.dataset.v"
        p.page.wait_for_function(f"{last} === '{len(artifacts) - 1}'")
        assert p.errors == [], p.errors
    finally:
        p.close()


def test_the_page_opens_on_the_answer_for_the_newest_runtime_and_links_into_what_fails(chromium: Any) -> None:
    """The top of the page is what `harness recommend` says: for the runtime picked, the recommended exporter ×
    opset, each exporter's best, the frontier, the pass count per exporter × opset; its link filters the grid."""
    import subprocess
    import sys

    rows = _published()
    newest = max({r["runtime"] for r in rows}, key=lambda pin: tuple(int(x) for x in pin.split("==")[1].split(".")))
    said = subprocess.run([sys.executable, "-m", "harness", "recommend", "--runtime", newest], cwd=ROOT,
                          capture_output=True, text=True, timeout=120).stdout  # fmt: skip
    label = said.split("recommended: ", 1)[1].split(":", 1)[0] if "recommended: " in said else None
    p = Page(chromium, PUBLISHED.as_uri())
    try:
        assert p.page.locator("#a-runtime").input_value() == newest
        best = p.page.locator("#a-best").text_content() or ""
        if label:
            assert best.startswith(f"Recommended: {label} — ")
            assert p.page.locator("#a-table td.best").count() == 1
        frontier = json.loads((ROOT / "results" / "frontier.json").read_text())[newest]
        loads = f"loads up to IR {frontier['max_ir']} / opset {frontier['max_opset']}"
        assert loads in (p.page.locator("#a-frontier").text_content() or "")
        exporters = {r["exporter"] for r in rows if r["runtime"] == newest}
        assert p.page.locator("#a-each li").count() == len(exporters)
        older = sorted({r["runtime"] for r in rows}, key=lambda pin: tuple(int(x) for x in pin.split("==")[1].split(".")))[0]
        p.page.select_option("#a-runtime", older)
        assert older in (p.page.locator("#a-best").text_content() or "")
        p.page.click("#a-link")
        p.page.wait_for_function("(pin) => new URLSearchParams(location.hash.slice(1)).get('runtime') === pin", arg=older)
        state = dict(p.page.evaluate("Object.fromEntries(new URLSearchParams(location.hash.slice(1)))"))
        assert state["status"] == "loadable" and state["set"] == "safe" and state["ask"] == older
        assert p.view()["columns"] == [f"{older} cpu"]
        cards = json.loads((ROOT / "results" / "cases.json").read_text())
        safe = {n for n, c in cards.items() if c.get("fixes") or not c.get("symptom")}
        # What fails at what the runtime loads: not the artifacts past its measured frontier, refused as they must be.
        old = json.loads((ROOT / "results" / "frontier.json").read_text())[older]
        ir = {(r["case"], r["exporter"], r["opset"]): r.get("ir_version") or 0 for r in rows}
        failing = {k[:3] for k, status in _worst(rows).items()
                   if k[3] == older and k[0] in safe and status not in ("pass", "skipped", "unavailable")}  # fmt: skip
        expected = {k for k in failing if ir[k] <= old["max_ir"] and k[2] <= old["max_opset"]}
        assert {tuple(r) for r in p.view()["rows"]} == expected
        assert len(expected) < len(failing), "the oldest runtime refuses what is past its frontier: the link leaves it out"
        box, size = p.page.locator("#wrap").bounding_box(), p.page.viewport_size
        assert box and size and 0 <= box["y"] < size["height"] - 200, "after the link the grid's rows are in view"
        assert p.errors == [], p.errors
    finally:
        p.close()


def test_the_filters_live_in_the_url_and_a_shared_link_opens_the_same_view(chromium: Any) -> None:
    p = Page(chromium, PUBLISHED.as_uri())
    try:
        p.page.select_option("#f-exporter", "torchscript")
        p.page.select_option("#f-status", "mismatch")
        _typed(p, "nan")
        p.page.click("#grid thead th[data-key='case']")
        url, view = p.page.url, p.view()
        assert "exporter=torchscript" in url and "status=mismatch" in url and "case=nan" in url and "sort=case" in url
    finally:
        p.close()
    q = Page(chromium, url)  # a fresh page, as whoever the link was sent to
    try:
        assert q.view() == view
        assert q.page.locator("#f-exporter").input_value() == "torchscript" and q.page.locator("#f-case").input_value() == "nan"
        bad = Page(chromium, PUBLISHED.as_uri() + "#exporter=fx&opset=abc&status=nope")  # a hand-edited link: ignored
        try:
            assert bad.rows() == len({(r[0], r[1], r[2]) for r in bad.view()["rows"]}) and bad.errors == []
            assert bad.page.locator("#f-exporter").input_value() == ""
        finally:
            bad.close()
    finally:
        q.close()


def test_cells_take_the_keyboard(chromium: Any) -> None:
    p = Page(chromium, PUBLISHED.as_uri())
    try:
        first = p.page.locator("#grid tbody td[tabindex='0']")
        assert first.count() == 1  # one tab stop for the whole grid; the arrows move within it
        first.focus()
        p.page.keyboard.press("ArrowDown")
        p.page.keyboard.press("ArrowRight")
        focused = p.page.evaluate("[document.activeElement.parentElement.dataset.v, document.activeElement.dataset.p]")
        assert focused[0] == "1"
        assert p.page.locator("#details").is_hidden()
        p.page.keyboard.press("Enter")
        assert p.page.locator("#details").is_visible()
        assert p.view()["rows"][1][0] in (p.page.locator("#details h2").text_content() or "")
        p.page.keyboard.press("Escape")
        assert p.page.locator("#details").is_hidden()
        for _ in range(60):  # past the rows built at first: the grid builds more and keeps the focus
            p.page.keyboard.press("PageDown")
        v = int(p.page.evaluate("document.activeElement.parentElement.dataset.v"))
        assert v > 100 and p.errors == []
    finally:
        p.close()


@pytest.mark.parametrize("viewport", [(1280, 800), (390, 844)])
def test_the_page_answers_and_shows_its_grid_at_desktop_and_phone_sizes(
    chromium: Any, viewport: tuple[int, int], tmp_path: Path
) -> None:
    """A screenshot at each size (kept in the test's folder), with the answer in the first screen and a grid
    that shows cells (the details only once a cell is chosen: an overlay on the phone)."""
    p = Page(chromium, PUBLISHED.as_uri(), viewport=viewport)
    try:
        width, height = viewport
        box = p.page.locator("#a-best").bounding_box()
        assert box and box["y"] + box["height"] < height and box["width"] <= width  # the answer: in the first screen
        assert p.page.locator("#details").is_hidden()
        p.page.locator("#wrap").scroll_into_view_if_needed()
        grid = p.page.locator("#wrap").bounding_box()
        assert grid and grid["width"] >= width - 20 and grid["height"] >= 300
        in_view = (
            "(td) => { const r = td.getBoundingClientRect(); "
            "return r.right <= innerWidth && r.bottom <= innerHeight && r.top >= 0; }"
        )
        cells = p.page.locator("#grid tbody td.c").evaluate_all(f"(tds) => tds.filter({in_view}).length")
        assert cells >= (8 if width < 500 else 100), cells  # at 1280: many runtime columns side by side
        p.page.screenshot(path=str(tmp_path / f"page-{width}x{height}.png"))
        p.page.locator("#grid tbody td.c").first.click()
        details = p.page.locator("#details").bounding_box()
        assert details and p.page.locator("#details").is_visible()
        if width < 500:  # an overlay over the grid, as wide as the screen
            position = p.page.locator("#details").evaluate("(d) => getComputedStyle(d).position")
            assert details["width"] == width and position == "fixed"
        p.page.screenshot(path=str(tmp_path / f"page-{width}x{height}-details.png"))
        assert (tmp_path / f"page-{width}x{height}.png").stat().st_size > 10_000
        assert p.errors == [], p.errors
    finally:
        p.close()


def test_on_a_phone_a_case_and_its_fixed_twin_read_apart_and_the_recommended_count_is_in_view(chromium: Any) -> None:
    """At 390 px the case column holds ~14 characters: the name keeps its end (``froze…ch_fixed``), so a case and its
    twin never show the same text; the answer's counts table scrolls to the recommended cell."""
    p = Page(chromium, PUBLISHED.as_uri() + "#case=frozen_batch", viewport=(390, 844))
    try:
        shown = p.page.locator("#grid td.name").evaluate_all("(tds) => tds.map((td) => td.innerText.trim())")
        full = p.page.locator("#grid td.name .long").evaluate_all("(s) => s.map((x) => x.textContent)")
        pairs = dict(zip(full, shown, strict=True))
        assert {"frozen_batch", "frozen_batch_fixed"} <= set(pairs)
        assert pairs["frozen_batch"] != pairs["frozen_batch_fixed"] and pairs["frozen_batch_fixed"].endswith("_fixed")
        widths = p.page.locator("#grid td.name").evaluate_all("(tds) => tds.map((td) => td.scrollWidth <= td.clientWidth)")
        assert all(widths), "a shortened name fits its column"
        p.page.click("#a-link")  # from the answer into the grid: its rows are on the phone's screen after the click
        p.page.wait_for_function("() => new URLSearchParams(location.hash.slice(1)).get('status') === 'loadable'")
        p.page.wait_for_timeout(200)
        grid = p.page.locator("#wrap").bounding_box()
        assert grid and 0 <= grid["y"] < 844 - 200, grid
        best = p.page.locator("#a-table td.best")
        if best.count():
            r, wrap = best.bounding_box(), p.page.locator("#a-table-wrap").bounding_box()
            assert r and wrap and wrap["x"] <= r["x"] and r["x"] + r["width"] <= wrap["x"] + wrap["width"] + 1
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
        _typed(p, "frozen_batch")
        row = p.page.locator("#grid tbody tr", has=p.page.locator("td.name .long", has_text=re.compile("^frozen_batch$")))
        cell = row.locator("td.c")
        cell.hover()
        assert failing["status"] in (cell.get_attribute("title") or "") and failing["error_line"] in cell.get_attribute("title")
        cell.click()
        text = p.page.locator("#details").text_content() or ""
        assert failing["status"] in text and failing["error_line"] in text
        assert f"fault{failing['fault']}: {failing['fault_why']}" in text  # whose fault, and the evidence
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


def test_a_partial_report_says_so_above_everything(chromium: Any, tmp_path: Path) -> None:
    cells, exports = _records()
    why = "onnxruntime==1.32.0 cpu: its run did not finish (killed, crashed or timed out): build/shards/x.jsonl is not sealed"
    payload = page.data(
        cells,
        exports,
        repros={},
        constraints={},
        environment={"generated": "2026-12-01 00:00 UTC", "profile": "test", "partial": [why]},
        legend=LEGEND,
        counts={"pass": 2, "mismatch": 1},
        beside=[  # a column published beside it (results/gpu/), its device a hostile string too
            {"folder": "gpu", "runtime": "onnxruntime-gpu==1.31.1", "column": "cuda", "device": HOSTILE_CARD,
             "measured": "2026-12-01 00:00 UTC", "counts": {"pass": 7, "mismatch": 2}, "not_measured": None},
        ],
    )  # fmt: skip
    path = tmp_path / "index.html"
    path.write_text(page.render(payload), encoding="utf-8")
    p = Page(chromium, path.as_uri())
    try:
        banner = p.page.locator("#partial")
        assert banner.is_visible() and p.errors == []
        assert banner.text_content() == f"PARTIAL REPORT: 1 shard(s) were not whole when it was made; it is not the answer. {why}"
        assert p.page.locator("#title").text_content().endswith("(partial)") and p.page.title().endswith("(partial)")
    finally:
        p.close()
    whole = tmp_path / "whole.html"
    whole.write_text(page.render(page.data(cells, exports, repros={}, constraints={}, environment={}, legend=LEGEND, counts={})))
    p = Page(chromium, whole.as_uri())
    try:
        assert not p.page.locator("#partial").is_visible()
    finally:
        p.close()


def test_a_profile_published_for_a_provider_of_its_own_opens_on_it_and_links_home(chromium: Any) -> None:
    """results/openvino/index.html: the answer it opens on is OpenVINO's (the profile's own provider, not the CPU
    control column), and the page links back to the main table."""
    page_path = ROOT / "results" / "openvino" / "index.html"
    if not page_path.exists():
        pytest.fail(f"{page_path} is missing: run `nox -s matrix -- --profile openvino`")
    p = Page(chromium, page_path.as_uri())
    try:
        assert p.page.locator("#a-provider").input_value() == "openvino"
        assert "(openvino)" in (p.page.locator("#a-best").text_content() or "")
        home = p.page.locator("#meta a")
        assert home.count() == 1 and home.get_attribute("href") == "../index.html"
        assert p.errors == [], p.errors
    finally:
        p.close()
    q = Page(chromium, PUBLISHED.as_uri())  # the main table: no way "back" from it
    try:
        assert q.page.locator("#meta a", has_text="the main table").count() == 0
    finally:
        q.close()


def test_a_real_model_named_by_its_title_shows_its_rows_and_the_answer_for_it_alone(chromium: Any) -> None:
    """results/architectures/index.html: "=Llama (decode step)" keeps that case alone (not the prefill, whose name
    "llama" the step's contains) and says the exporter and opset to ship it, as the README's answer per model does;
    its cell's card is the family's."""
    page_path = ROOT / "results" / "architectures" / "index.html"
    if not page_path.exists():
        pytest.fail(f"{page_path} is missing: run `nox -s matrix -- --profile architectures`")
    readme = (page_path.parent / "README.md").read_text(encoding="utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| [Llama (decode step)]"))
    answer = row.split("|")[3].strip()
    p = Page(chromium, page_path.as_uri())
    try:
        _typed(p, "llama")
        assert {r[0] for r in p.view()["rows"]} == {"llama", "llama_step"} and p.page.locator("#ship").is_hidden()
        _typed(p, "=Llama (decode step)")
        assert {r[0] for r in p.view()["rows"]} == {"llama_step"}
        assert p.page.locator("#ship").text_content() == f"Llama (decode step) alone, the exporter and opset to ship: {answer}"
        _typed(p, "=llama_step")
        assert {r[0] for r in p.view()["rows"]} == {"llama_step"}
        p.page.locator("#grid tbody td.c").first.click()
        details = p.page.locator("#details").text_content() or ""
        assert "grouped-query attention" in details and "to ship" in details
        assert p.errors == [], p.errors
    finally:
        p.close()


def test_every_status_symbol_is_a_glyph_of_the_fonts_here_not_an_empty_box(chromium: Any, tmp_path: Path) -> None:
    """On a host with no emoji font (this one: DejaVu only), each status symbol the page and the README use is drawn by a
    real font: drawn on a canvas in the grid's font, it differs from what Chromium draws for a code point no font has
    (its empty box). ✅, 💥 and ⏱, the symbols before, drew that box. A screenshot is kept beside the test."""
    p = Page(chromium, PUBLISHED.as_uri())
    try:
        drawn = p.page.evaluate(
            """(symbols) => {
                const family = getComputedStyle(document.querySelector('#grid td')).fontFamily;
                const draw = (ch) => { const c = document.createElement('canvas'); c.width = 64; c.height = 64;
                  const x = c.getContext('2d'); x.font = `40px ${family}`; x.fillText(ch, 4, 48); return c.toDataURL(); };
                const box = draw('\\u{10FFFD}'), blank = draw('');
                return symbols.map((s) => [s, draw(s) !== box && draw(s) !== blank]);
            }""",
            [s.symbol for s in Status] + ["✅"],
        )
        *ours, (_, emoji) = drawn
        assert all(ok for _, ok in ours), [s for s, ok in ours if not ok]
        assert not emoji, "the check cannot tell an empty box from a glyph here"
        p.page.screenshot(path=str(tmp_path / "statuses.png"))
    finally:
        p.close()


def test_the_torch_page_fits_a_phone_with_whole_table_cells(chromium: Any) -> None:
    """results/torch/index.html at 390 px: as wide as the screen (a viewport; a wide table scrolls in its own box), and
    every table row has its header's number of cells (an escaped ``|`` in a cell stays in it)."""
    torch_page = ROOT / "results" / "torch" / "index.html"
    if not torch_page.exists():
        pytest.fail(f"{torch_page} is missing: run `nox -s matrix -- --profile torch`")
    page_ = chromium.new_page(viewport={"width": 390, "height": 800})
    try:
        page_.goto(torch_page.as_uri())
        assert page_.evaluate("document.documentElement.scrollWidth") <= 390
        ragged = page_.evaluate(
            """() => [...document.querySelectorAll('table')].flatMap((t) => {
                const n = t.tHead.rows[0].cells.length;
                return [...t.tBodies[0].rows].filter((r) => r.cells.length !== n).map((r) => r.textContent.slice(0, 80));
            })"""
        )
        assert ragged == []
        assert page_.locator("text=\\|").count() == 0, "a backslash-escaped pipe shown as such"
    finally:
        page_.close()
    q = Page(chromium, PUBLISHED.as_uri())  # the main page links the table across torch releases
    try:
        assert q.page.locator('#meta a[href="torch/index.html"]').count() == 1
    finally:
        q.close()
