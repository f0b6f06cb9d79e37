#!/usr/bin/env python3
"""Lighthouse on the built site, served the way `build.py --serve` serves it.

    .venv/bin/python bench/lighthouse.py [--runs 3] [--preset desktop|mobile|both]

Lighthouse comes from bench/node_modules (`make lighthouse` installs it: `npm ci
--prefix bench`) and drives the system Chromium. Prints, per preset, the median over
--runs of each category's score and of the load metrics, with every run's numbers.
Not part of the test suite: numbers depend on the machine.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import build  # noqa: E402
from tests.browser.harness import BROWSER_ARGS, chromium_path  # noqa: E402

LIGHTHOUSE = ROOT / "bench/node_modules/lighthouse/cli/index.js"
CATEGORIES = ("performance", "accessibility", "best-practices", "seo")
METRICS = (
    ("first-contentful-paint", "FCP", "ms"),
    ("largest-contentful-paint", "LCP", "ms"),
    ("total-blocking-time", "TBT", "ms"),
    ("interactive", "TTI", "ms"),
    ("speed-index", "SI", "ms"),
    ("cumulative-layout-shift", "CLS", ""),
    ("total-byte-weight", "bytes", "B"),
)


def run_lighthouse(url, preset, out):
    flags = " ".join(["--headless=new", *BROWSER_ARGS])
    command = ["node", str(LIGHTHOUSE), url, "--quiet", "--output=json", f"--output-path={out}",
               f"--only-categories={','.join(CATEGORIES)}", f"--chrome-flags={flags}"]
    if preset == "desktop":
        command.append("--preset=desktop")
    subprocess.run(command, check=True, env={**os.environ, "CHROME_PATH": chromium_path()})
    report = json.loads(Path(out).read_text())
    scores = {c: round(report["categories"][c]["score"] * 100) for c in CATEGORIES}
    metrics = {name: report["audits"][audit]["numericValue"] for audit, name, _ in METRICS}
    failed = sorted(a["id"] for a in report["audits"].values()
                    if a.get("score") is not None and a["score"] < 1 and a.get("scoreDisplayMode") == "binary")
    return scores, metrics, failed


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--preset", choices=("desktop", "mobile", "both"), default="both")
    args = parser.parse_args()
    if not LIGHTHOUSE.exists():
        sys.exit("Lighthouse is not installed: run `make lighthouse` (npm ci --prefix bench)")
    with tempfile.TemporaryDirectory() as tmp:
        site = build.build(Path(tmp) / "dist")
        server = build.make_server(site, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        presets = ("desktop", "mobile") if args.preset == "both" else (args.preset,)
        for preset in presets:
            runs = [run_lighthouse(url, preset, Path(tmp) / f"{preset}-{i}.json") for i in range(args.runs)]
            print(f"Lighthouse 12, {preset} preset, {args.runs} runs (median, then each run)")
            for category in CATEGORIES:
                values = [scores[category] for scores, _, _ in runs]
                print(f"  {category:<15} {statistics.median(values):>8.0f}   {values}")
            for _, name, unit in METRICS:
                values = [metrics[name] for _, metrics, _ in runs]
                shown = [f"{v:.3f}" if unit == "" else f"{v:.0f}" for v in values]
                median = statistics.median(values)
                print(f"  {name:<15} {median:>8.3f}" if unit == "" else f"  {name:<15} {median:>8.0f} {unit:<2} {shown}")
            failing = sorted({audit for _, _, failed in runs for audit in failed})
            print(f"  audits not passed: {', '.join(failing) or 'none'}")
            print()
        server.shutdown()


if __name__ == "__main__":
    main()
