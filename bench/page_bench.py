"""How fast does the published table answer?

Prints, for a results folder (default: the committed ``results/``):

- ``index.html``: its size, and in a real headless Chromium (Debian's
  ``chromium`` driven by Playwright) the time from navigation to the table
  being built (``body[data-ready]``), then the time each filter or sort takes
  from the change to the rebuilt table, each the median of ``--rounds`` tries;
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

# Each step: what the user does, then a condition that holds only once the table is rebuilt for it.
STEPS = [
    ("filter exporter=dynamo", "select", "#f-exporter", "dynamo"),
    ("filter status=mismatch", "select", "#f-status", "mismatch"),
    ("filter case contains 'nan'", "fill", "#f-case", "nan"),
    ("reset", "click", "#f-reset", ""),
    ("sort by the newest runtime", "click", "#grid thead th:last-child", ""),
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
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=path, args=ARGS)
        for _ in range(rounds):
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            t0 = time.perf_counter()
            page.goto(index.as_uri())
            page.wait_for_selector("body[data-ready='1']")
            loads.append(time.perf_counter() - t0)
            rows = page.locator("#grid tbody tr").count()
            for name, action, selector, value in STEPS:
                page.evaluate("window.__marker = document.querySelector('#grid tbody tr')")
                t0 = time.perf_counter()
                if action == "select":
                    page.select_option(selector, value)
                elif action == "fill":
                    page.fill(selector, value)
                else:
                    page.click(selector)
                # the table is rebuilt when its first row is a new element
                page.wait_for_function("document.querySelector('#grid tbody tr') !== window.__marker")
                steps[name].append(time.perf_counter() - t0)
            page.close()
        browser.close()
    print(f"  load to table built ({rows} rows): {_median_ms(loads)} (median of {rounds})")
    for name, samples in steps.items():
        print(f"  {name}: {_median_ms(samples)}")


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
