"""How fast does the published table answer?

Prints, for a results folder (default: the committed ``results/``):

- ``index.html``: its size, and in a real headless Chromium (Debian's
  ``chromium`` driven by Playwright, 1280x800) the time from navigation to
  the page being interactive (``body[data-ready]``: the answer and the grid
  built), then the time each action takes from the user's input to the
  redrawn answer, grid or details (the case box's typing included, with its
  debounce), each the median of ``--rounds`` tries; targets: load < 1 s,
  every action < 100 ms;
- ``harness recommend`` and ``harness diff`` (the results against
  themselves): wall time of the command, a fresh Python process each time,
  median of ``--rounds``.

    nox -s page_bench
    python bench/page_bench.py --results results --rounds 7
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.browser import ARGS, executable  # noqa: E402

# Each step: what the user does, and the element that is a new one once the page has redrawn for it.
GRID = "#grid tbody tr"
STEPS = [
    ("answer: pick the oldest runtime", "select", "#a-runtime", "@oldest", "#a-table tr"),
    ("filter exporter=dynamo", "select", "#f-exporter", "dynamo", GRID),
    ("filter status=mismatch", "select", "#f-status", "mismatch", GRID),
    ("filter case contains 'nan' (typed; 80 ms debounce included)", "fill", "#f-case", "nan", GRID),
    ("reset", "click", "#f-reset", "", GRID),
    ("sort by the newest runtime", "click", "#grid thead th:last-child", "", GRID),
    ("sort by case", "click", "#grid thead th[data-key='case']", "", GRID),
    ("open a cell's details", "click", "#grid tbody td.c", "", "#details h2"),
    ("scroll to the last row", "scroll", "#wrap", "", GRID),
    ("the answer's link into what fails", "click", "#a-link", "", GRID),
]


def _median_ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1e3:.0f} ms"


def bench_page(index: Path, rounds: int) -> None:
    from playwright.sync_api import sync_playwright

    path = executable()
    if path is None:
        sys.exit("page_bench: no Chromium here; `apt-get install chromium`")
    print(f"{index}: {index.stat().st_size / 1e6:.2f} MB")
    loads: list[float] = []
    steps: dict[str, list[float]] = {name: [] for name, *_ in STEPS}
    own: dict[str, list[float]] = {name: [] for name, *_ in STEPS}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=ARGS)
        for _ in range(rounds):
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            t0 = time.perf_counter()
            page.goto(index.as_uri())
            page.wait_for_selector("body[data-ready='1']")
            loads.append(time.perf_counter() - t0)
            rows = page.evaluate("document.getElementById('grid').dataset.rows")
            oldest = page.evaluate("document.querySelector('#a-runtime option').value")
            for name, action, selector, value, redrawn in STEPS:
                mark = (
                    "(sel) => { window.__marker = document.querySelector(sel); "
                    "delete document.body.dataset.updateMs; delete document.body.dataset.frameMs; }"
                )
                page.evaluate(mark, redrawn)
                t0 = time.perf_counter()
                if action == "select":
                    page.select_option(selector, oldest if value == "@oldest" else value)
                elif action == "fill":
                    page.fill(selector, value)
                elif action == "scroll":
                    page.evaluate("(sel) => { document.querySelector(sel).scrollTop = 1e9; }", selector)
                else:
                    page.locator(selector).first.click()
                page.wait_for_function("(sel) => document.querySelector(sel) !== window.__marker", arg=redrawn)
                steps[name].append(time.perf_counter() - t0)
                if page.evaluate("document.body.dataset.updateMs") is not None:  # a grid change: wait for its frame
                    page.wait_for_function("document.body.dataset.frameMs !== undefined")
                    own[name].append(float(page.evaluate("document.body.dataset.frameMs")) / 1e3)
            page.close()
        browser.close()
    print(f"  load to interactive ({rows} rows, 1280x800): {_median_ms(loads)} (median of {rounds})")
    print("  each action, from the input to the redrawn page as Playwright sees it (its own round trips included);")
    print("  in brackets, for a grid change, the page's own clock from the input event to the frame that shows it")
    print("  (body[data-frame-ms]: script, layout and paint, the typing debounce included):")
    for name, samples in steps.items():
        mine = f" [page: {_median_ms(own[name])}]" if own[name] else ""
        print(f"  {name}: {_median_ms(samples)}{mine}")


def bench_command(label: str, args: list[str], rounds: int) -> None:
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, capture_output=True, text=True)
        samples.append(time.perf_counter() - t0)
        if proc.returncode not in (0, 1):
            sys.exit(f"page_bench: {label} failed: {proc.stderr.strip()}")
    print(f"{label}: {_median_ms(samples)} (median of {rounds}, a fresh process each)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(ROOT / "results"))
    ap.add_argument("--rounds", type=int, default=7)
    ns = ap.parse_args()
    results = Path(ns.results)
    bench_page(results / "index.html", ns.rounds)
    table = str(results / "matrix.jsonl")
    bench_command("harness recommend --runtime 1.20.1", ["recommend", "--runtime", "1.20.1", "--results", table], ns.rounds)
    bench_command("harness diff (the table against itself)", ["diff", table, table], ns.rounds)


if __name__ == "__main__":
    main()
