#!/usr/bin/env python3
"""Time the model functions the figures call on every move, against their budgets.

    .venv/bin/python bench/models.py [--repeat 20]

Prints each case's best time (CPython; Pyodide runs 2-3x slower) and its budget, and
every figure's slowest render over its default and 50 random states against the
checklist's 8 ms. Not part of the test suite: wall-clock numbers depend on the machine
(they used to be timed tests, which failed whenever the machine was busy).
"""
import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from figures import registry  # noqa: E402
from models import activations, collectives, context, tensor  # noqa: E402

FRAME_BUDGET_S = 8e-3  # figure-checklist.md item 9: heaviest state, CPython


def best_of(function, repeat):
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


def cases():
    values = [[float(r * 8 + c) for c in range(8)] for r in range(8)]
    q, k, v = ([[((i * 7 + j * 3 + s) % 11) / 11 for j in range(4)] for i in range(16)] for s in range(3))
    x, a, b = tensor.random_matrix(4, 8, 0), tensor.random_matrix(8, 32, 1), tensor.random_matrix(32, 8, 2)
    return (
        ("collectives.simulate, allreduce over 8 ranks", lambda: collectives.simulate("allreduce", values), 5e-3),
        ("collectives.time_s, allreduce 1 GB over 64", lambda: collectives.time_s(
            "allreduce", 1e9, 64, alpha_s=1e-5, bandwidth_bytes_per_s=1e11), 1e-4),
        ("activations.first_stage_bytes, GPT-3 interleaved", lambda: activations.first_stage_bytes(
            2048, 1, 12288, 96, 96, tp=8, pp=8, schedule="interleaved", virtual_stages=3, microbatches=64,
            vocab=51200), 1e-3),
        ("context.ring_attention, 16 tokens on 4 ranks", lambda: context.ring_attention(
            q, k, v, 4, causal=True, layout="two_chunks"), 5e-3),
        ("tensor.tensor_parallel_mlp, 4x8 on 4 ranks", lambda: tensor.tensor_parallel_mlp(x, a, b, 4), 5e-3),
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print(f"{'model function':<52} {'best ms':>9} {'budget ms':>10}")
    for name, function, budget_s in cases():
        best = best_of(function, args.repeat)
        print(f"{name:<52} {best * 1e3:>9.3f} {budget_s * 1e3:>10.3f}{'' if best <= budget_s else '  OVER'}")
    print()
    print(f"{'figure':<8} {'slowest render ms':>18} {'budget ms':>10}  (default + 50 random states, each rendered once:")
    print("         a figure's own caches then help only as they would in the page)")
    for number, figure in sorted(registry().items()):
        rng = random.Random(number)
        states = [figure.default_state()] + [
            figure.validate_state({c.key: rng.choice(c.values) for c in figure.stateful_controls}) for _ in range(50)]
        slowest = max(best_of(lambda s=s: figure.render(dict(s)), 1) for s in states)
        print(f"{number:<8} {slowest * 1e3:>18.2f} {FRAME_BUDGET_S * 1e3:>10.1f}{'' if slowest <= FRAME_BUDGET_S else '  OVER'}")


if __name__ == "__main__":
    main()
