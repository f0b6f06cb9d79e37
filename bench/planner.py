#!/usr/bin/env python3
"""How long ``planner.recommend`` takes in CPython, cold.

    .venv/bin/python bench/planner.py [--runs 7]

The target (issue 20): Llama 3 405B (126 layers, hidden 16384, 128 heads, 8 KV heads,
SwiGLU ffn 53248, vocab 128256, seq 8192) on 16,384 H100s, global batch 2048 sequences,
<= 250 ms for a cold call. "Cold" means nothing computed by an earlier call is reused:
every call builds its own caches (``planner.cost._Context``) and drops them. Prints

  1. the first call in a fresh interpreter (a subprocess: import of models.planner timed
     apart from the call), the median of --runs such processes;
  2. --runs calls in this process, each one cold (min / median / max);
  3. the same for every model preset on a cluster it fits, for comparison;
  4. a reference loop (``sum(range(100))``) to compare machines: this 2-core VM runs it in
     ~0.8 us when idle and 3-6 us when the other engineers' jobs load it.

Not part of the test suite: numbers depend on the machine.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from models import planner  # noqa: E402

TARGET = dict(model="llama3-405b", cluster="dgx-h100", gpus=16384, global_batch=2048)
PRESET_CASES = (
    ("gpt3-175b", "dgx-a100-80gb", 1024, 1536),
    ("llama3-8b", "dgx-h100", 8, 32),
    ("llama3-70b", "dgx-h100", 512, 512),
    ("llama3-405b", "dgx-h100", 16384, 2048),
    ("mt-nlg-530b", "dgx-a100-80gb", 2240, 1920),
    ("mixtral-8x7b", "dgx-h100", 256, 256),
    ("deepseek-v3", "dgx-h100", 2048, 2048),
)

FRESH_PROCESS = """
import json, sys, time
started = time.perf_counter()
from models import planner
imported = time.perf_counter()
model = planner.model_preset({model!r})
cluster = planner.cluster_preset({cluster!r}, {gpus})
planner.recommend(model, cluster, {global_batch})
done = time.perf_counter()
print(json.dumps({{"import_ms": (imported - started) * 1e3, "recommend_ms": (done - imported) * 1e3}}))
"""


def reference_us():
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(20000):
            sum(range(100))
        best = min(best, (time.perf_counter() - started) / 20000 * 1e6)
    return best


def cold_calls(model_key, cluster_key, gpus, global_batch, runs):
    model = planner.model_preset(model_key)
    cluster = planner.cluster_preset(cluster_key, gpus)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = planner.search(model, cluster, global_batch, top=5)
        times.append((time.perf_counter() - started) * 1e3)
    return times, result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    print(f"reference loop sum(range(100)): {reference_us():.2f} us (idle VM ~0.8 us)")
    fresh = []
    for _ in range(args.runs):
        done = subprocess.run([sys.executable, "-c", FRESH_PROCESS.format(**TARGET)], cwd=ROOT, capture_output=True,
                              text=True, check=True)
        fresh.append(json.loads(done.stdout))
    print(f"\n1. fresh interpreter, {TARGET['model']} on {TARGET['gpus']:,} H100s, global batch "
          f"{TARGET['global_batch']}: import {statistics.median(f['import_ms'] for f in fresh):.0f} ms, first "
          f"recommend {statistics.median(f['recommend_ms'] for f in fresh):.0f} ms "
          f"(median of {args.runs} processes; min {min(f['recommend_ms'] for f in fresh):.0f} ms)")
    times, result = cold_calls(TARGET["model"], TARGET["cluster"], TARGET["gpus"], TARGET["global_batch"], args.runs)
    best = result.candidates[0]
    print(f"2. cold calls in one process: min {min(times):.0f} / median {statistics.median(times):.0f} / max "
          f"{max(times):.0f} ms; {result.considered:,} plans priced, {result.fitting:,} fit; best "
          f"{best.plan.label()}, step {best.estimate.step_time_s:.2f} s, MFU {best.estimate.mfu:.1%}")
    print("\n3. every preset (cold calls, median):")
    for model_key, cluster_key, gpus, global_batch in PRESET_CASES:
        times, result = cold_calls(model_key, cluster_key, gpus, global_batch, max(3, args.runs // 2))
        print(f"   {model_key:14s} {gpus:>6,} GPUs  batch {global_batch:>5}: {statistics.median(times):6.0f} ms  "
              f"({result.considered:,} plans)")
    print(f"\nreference loop again: {reference_us():.2f} us")


if __name__ == "__main__":
    main()
