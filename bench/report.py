"""Benchmark report rendering: render time and page size by history length.

Usage: python bench/report.py [--sizes 1000,10000,100000] [--repeats N]
                              [--browser] [--keep DIR]

For each size, makes a synthetic run (harness.synthetic: faults, a
membership change, a rebalance, one planted stale read so the violation
drawing is rendered too), then renders its report.html `--repeats` times
and prints the median render time, the page size, and how many operations
the timeline drew. The 20 MB budget of issue 7 is checked and printed. With
`--browser`, also opens each page in headless chromium and prints the time
from navigation to the end of the load event (every plot drawn). Making
the run (generation plus the real checkers) is timed apart: it is not part
of rendering.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# After the path fix-up above, so the bench runs from a checkout.
from rich.console import Console
from rich.table import Table

from harness.synthetic import make_run
from reports.data import load_run_data
from reports.render import plotly_js, render_html

BUDGET_BYTES = 20 * 1024 * 1024
console = Console(highlight=False, width=130)  # the table, unclipped, even when piped


def _browser_load_s(page: Path) -> float:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        driver.get(page.resolve().as_uri())  # returns after the load event: plots drawn
        # The page's own clock, navigation start to the end of the load
        # event: what a reader waits for, without chromium's start-up.
        load_ms = driver.execute_script(
            "return performance.getEntriesByType('navigation')[0].loadEventEnd"
        )
        return float(load_ms) / 1000
    finally:
        driver.quit()


def main() -> int:
    """Runs the benchmark and prints one row per size."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--browser", action="store_true", help="also time loading in chromium")
    parser.add_argument("--keep", type=Path, help="write the store here and keep it")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-report-"))
    plotly_js()  # read once, outside the timings
    extra = ["browser load s"] if args.browser else []
    table = Table("ops", "make run s", "render s (median)", "page MB", "timeline drew",
                  "under 20 MB", "verdict", *extra)  # fmt: skip
    try:
        for size in sizes:
            with console.status(f"making a {size}-op run (generator + checkers)"):
                t0 = time.perf_counter()
                run = make_run(root, seed=size, ops=size, valid=False)
                made = time.perf_counter() - t0
            times = []
            with console.status(f"rendering {size} ops x{args.repeats}"):
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    page = render_html(load_run_data(run.path))
                    times.append(time.perf_counter() - t0)
            run.report.write_text(page, encoding="utf-8")
            size_b = run.report.stat().st_size
            drew = page.split('data-ops-drawn="', 1)[1].split('"', 1)[0]
            row = [str(size), f"{made:.2f}", f"{statistics.median(times):.3f}",
                   f"{size_b / 1e6:.2f}", f"{drew}/{size}",
                   "yes" if size_b < BUDGET_BYTES else "NO",
                   page.split('id="verdict" class="v ', 1)[1].split('"', 1)[0]]  # fmt: skip
            if args.browser:
                row.append(f"{_browser_load_s(run.report):.2f}")
            table.add_row(*row)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
