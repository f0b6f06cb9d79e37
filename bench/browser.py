#!/usr/bin/env python3
"""Load-time and interaction benchmark of the built site in headless Chromium.

    .venv/bin/python bench/browser.py [--runs 5] [--moves 50] [--pages 3]

Prints two tables:
  1. per page load (fresh browser context, so a cold HTTP cache each time): first
     contentful paint; time until the Python runtime is ready; time until every figure
     is live; and, in the same browser session (its own fresh context), the time a blank
     page needs to boot bare Pyodide (the floor). All times from navigation start.
  2. per figure: input-to-repaint latency over N control moves, from dispatching the
     ``input`` event to the end of the synchronous re-render plus the style and layout it
     forces. Each figure is scrolled into view and left alone for --settle-ms (default
     2 s) before its first move, as a reader looks at a figure before touching it; what
     the page does in that idle time (rendering ahead, rehearsing a chart's redraw) is
     part of what it offers. --settle-ms 0 measures moves made the instant the page is
     ready, while the browser is still compiling Pyodide's WebAssembly. Three patterns:
     "drag" (each slider stepped from its default to its end and back, no pause);
     "jump" (seeded random values over each control's full range, with a pause after
     each move, as a reader looks at the result before the next click); and "cold jump"
     (the same jumps back to back: nothing is rendered ahead). Each pattern runs on
     --pages fresh pages; the table gives the median over pages of each page's p50 and
     p95, then every page's p95.
Not part of the test suite: numbers depend on the machine.
"""
import argparse
import random
import statistics
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import build  # noqa: E402
from tests.browser.harness import BROWSER_ARGS, chromium_path  # noqa: E402
from figures import registry  # noqa: E402
from figures.contract import Select, Slider  # noqa: E402

MARKS = """
window.__bench = {};
new MutationObserver(() => {
  const root = document.documentElement;
  if (root.dataset.python === 'ready' && !window.__bench.ready) window.__bench.ready = performance.now();
  const figures = [...document.querySelectorAll('figure[data-figure]')];
  if (figures.length && figures.every(f => f.dataset.state === 'live') && !window.__bench.live) window.__bench.live = performance.now();
}).observe(document, {attributes: true, subtree: true, attributeFilter: ['data-python', 'data-state']});
"""

FLOOR_PAGE = """<!doctype html><html><head><meta charset="utf-8"></head><body>
<script type="module">
import {{ loadPyodide }} from "/{pyodide_dir}/pyodide.mjs";
await loadPyodide();
window.__floor = performance.now();
</script></body></html>"""

MOVE = """([selector, value]) => {
  const input = document.querySelector(selector);
  const view = input.closest('figure').querySelector('[data-role=view]');
  input.value = value;
  const t0 = performance.now();
  input.dispatchEvent(new Event('input', {bubbles: true}));
  view.getBoundingClientRect();
  return performance.now() - t0;
}"""


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def control_values(control):
    """What the control's native element can hold, in order (positions for sliders)."""
    if isinstance(control, Slider):
        return [str(control.position(v)) for v in control.values]
    if isinstance(control, Select):
        return [str(v) for v in control.values]
    return None


def measure_loads(browser, base, runs):
    """Each page load and each floor load gets its own fresh context (cold HTTP cache),
    alternating which goes first so neither benefits from the other's warm-up."""
    rows = []
    for run in range(runs):
        results = {}
        for kind in (("page", "floor") if run % 2 == 0 else ("floor", "page")):
            context = browser.new_context()
            page = context.new_page()
            if kind == "page":
                page.add_init_script(MARKS)
                page.goto(base + "/")
                page.wait_for_function("window.__bench.live && window.__bench.ready", timeout=120_000)
                fcp = page.evaluate("performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? NaN")
                marks = page.evaluate("window.__bench")
                results["page"] = (fcp, marks["ready"], marks["live"])
            else:
                page.goto(base + "/bench-floor.html")
                page.wait_for_function("window.__floor", timeout=120_000)
                results["floor"] = page.evaluate("window.__floor")
            context.close()
        rows.append((*results["page"], results["floor"]))
    return rows


def random_moves(figure, moves):
    """Jumps: each move sets one control (round-robin) to a random value of its range."""
    rng = random.Random(figure.number)
    controls = [c for c in figure.controls if control_values(c)]
    for i in range(moves):
        control = controls[i % len(controls)]
        yield control, rng.choice(control_values(control))


def drag_moves(figure, moves):
    """Drags: each control in turn walks one step at a time from its default to the end of
    its range and back to its default, the way a reader drags a slider."""
    sequence = []
    for control in figure.controls:
        values = control_values(control)
        if not values or not isinstance(control, Slider):
            continue
        here = values.index(str(control.position(control.default)))
        sequence += [(control, v) for v in values[here + 1:]] + [(control, v) for v in reversed(values[here:-1])]
    return sequence[:moves]


def measure_moves(browser, base, moves, pattern, settle_ms, pause_ms=0):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(base + "/")
    page.wait_for_function("document.documentElement.dataset.python === 'ready'", timeout=120_000)
    results = {}
    for figure in sorted(registry().values(), key=lambda f: f.number):
        page.evaluate(f"document.getElementById('{figure.anchor}').scrollIntoView()")
        page.wait_for_timeout(settle_ms)
        latencies = []
        for control, value in pattern(figure, moves):
            selector = f"#{figure.anchor} [data-control='{control.key}']"
            latencies.append(page.evaluate(MOVE, [selector, value]))
            page.wait_for_timeout(pause_ms)
        results[figure.number] = latencies
    errors = page.locator(".py-error").count()
    context.close()
    return results, errors


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--moves", type=int, default=50)
    parser.add_argument("--pages", type=int, default=3, help="fresh pages each move pattern is measured on")
    parser.add_argument("--pause-ms", type=int, default=1000, help="reader's pause after each jump")
    parser.add_argument("--settle-ms", type=int, default=2000, help="idle time between scrolling a figure into view and its first move")
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        site = build.build(Path(tmp) / "dist")
        pyodide_dir = next((site / "vendor").glob("pyodide-*")).relative_to(site).as_posix()
        (site / "bench-floor.html").write_text(FLOOR_PAGE.format(pyodide_dir=pyodide_dir))
        server = build.make_server(site, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{server.server_address[1]}"
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium_path(), args=BROWSER_ARGS)
            loads = measure_loads(browser, base, args.runs)
            patterns = {"drag": (drag_moves, 0), "jump": (random_moves, args.pause_ms), "cold": (random_moves, 0)}
            pages = {name: [] for name in patterns}  # pattern -> one {figure: latencies} per page
            errors = 0
            for _ in range(args.pages):
                for name, (pattern, pause_ms) in patterns.items():
                    latencies, page_errors = measure_moves(browser, base, args.moves, pattern, args.settle_ms, pause_ms)
                    pages[name].append(latencies)
                    errors += page_errors
            browser.close()
        server.shutdown()

    print(f"Page loads (ms from navigation start; fresh context each run; {args.runs} runs)")
    print(f"{'run':>4} {'FCP':>8} {'ready':>8} {'all live':>9} {'Pyodide floor':>14} {'live/floor':>11}")
    for i, (fcp, ready, live, floor) in enumerate(loads, 1):
        print(f"{i:>4} {fcp:>8.0f} {ready:>8.0f} {live:>9.0f} {floor:>14.0f} {live / floor:>11.2f}")
    med = [statistics.median(col) for col in zip(*loads)]
    print(f"{'med':>4} {med[0]:>8.0f} {med[1]:>8.0f} {med[2]:>9.0f} {med[3]:>14.0f} {med[2] / med[3]:>11.2f}")
    print()
    print(f"Input-to-repaint latency (ms; up to {args.moves} moves per figure and page, first move included; "
          f"{args.settle_ms} ms idle before a figure's first move; jumps paused {args.pause_ms} ms after each move, "
          f"cold jumps not at all). p50 and p95 are each page's, then the median over {args.pages} fresh pages: "
          "one page's p95 rests on its few slowest moves, which a single hiccup of the machine can set.")
    print(f"{'figure':>7} {'drag p50':>9} {'drag p95':>9} {'jump p50':>9} {'jump p95':>9} {'cold p50':>9} {'cold p95':>9} {'max':>7}")
    for number in sorted(pages["drag"][0]):
        cells = [statistics.median(percentile(page[number], q) for page in pages[name])
                 for name in patterns for q in (0.5, 0.95)]
        worst = max(max(page[number]) for name in patterns for page in pages[name])
        print(f"{number:>7} " + " ".join(f"{c:>9.1f}" for c in cells) + f" {worst:>7.1f}")
    print("Each page's p95:")
    for number in sorted(pages["drag"][0]):
        print(f"{number:>7} " + "   ".join(
            f"{name} " + " ".join(f"{percentile(page[number], 0.95):.1f}" for page in pages[name]) for name in patterns))
    if errors:
        print(f"WARNING: {errors} .py-error banners after the moves")


if __name__ == "__main__":
    main()
