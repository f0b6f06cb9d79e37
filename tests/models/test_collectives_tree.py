"""The log-step ("tree") step-through of models.collectives.simulate and ``cost_split``: the time
of one collective as its latency part plus its bandwidth part (Figure 03)."""
import math
import random

import pytest
from hypothesis import given, settings, strategies as st

from models import collectives as C
from tests.models.test_collectives import _assert_state_matches, _numpy_oracle, _random_values
from tests.published_cases import published_cases


@pytest.mark.parametrize("op", C.TREE_SIMULATED_OPS)
def test_tree_simulation_matches_numpy_oracle(op):
    rng = random.Random(99)
    for trial in range(60):
        n = rng.choice((1, 2, 4, 8, 16)) if op in ("allgather", "reducescatter") else rng.randint(1, 13)
        kind = "int" if trial % 2 else "float"
        values = _random_values(op, n, rng.randint(1, 4), rng, kind)
        root = rng.randrange(n) if op in ("broadcast", "reduce") else 0
        sim = C.simulate(op, values, root=root, algorithm="tree")
        _assert_state_matches(sim.final_state, _numpy_oracle(op, values, root, None), exact=(kind == "int"))
        assert sim.algorithm == {"allreduce": "binomial", "broadcast": "binomial", "reduce": "binomial",
                                 "reducescatter": "recursive_halving", "allgather": "recursive_doubling"}[op]


@pytest.mark.parametrize("op", C.TREE_SIMULATED_OPS)
def test_tree_simulation_takes_the_steps_time_s_charges_alpha_for(op):
    for n in range(2, 33):
        if op in ("allgather", "reducescatter") and n & (n - 1):
            continue
        values = _random_values(op, n, 2, random.Random(n), "int")
        steps = len(C.simulate(op, values, algorithm="tree").steps)
        depth = math.ceil(math.log2(n))
        assert steps == (2 * depth if op == "allreduce" else depth)
        assert steps == C.cost_split(op, 1e6, n, alpha_s=1e-6, bandwidth_bytes_per_s=1e9, algorithm="tree").steps


def test_tree_shapes_step_by_step():
    """Binomial broadcast doubles its senders each step; recursive doubling pairs rank r with
    r xor 2^k; recursive halving leaves rank r with the sum of chunk r alone."""
    n = 8
    bcast = C.simulate("broadcast", [[1, 2]] + [[0, 0]] * (n - 1), algorithm="tree")
    assert [sorted({t.src for t in s.transfers}) for s in bcast.steps] == [[0], [0, 1], [0, 1, 2, 3]]
    assert [sorted({t.dst for t in s.transfers}) for s in bcast.steps] == [[1], [2, 3], [4, 5, 6, 7]]
    gather = C.simulate("allgather", [[r] for r in range(n)], algorithm="tree")
    for k, step in enumerate(gather.steps):
        assert all(t.dst == t.src ^ (1 << k) and not t.reduced for t in step.transfers)
        assert len(step.transfers) == n * (1 << k)  # every rank sends all 2^k chunks it holds
    halving = C.simulate("reducescatter", [[r * 10 + c for c in range(n)] for r in range(n)], algorithm="tree")
    for r in range(n):
        assert halving.final_state[r][r] == sum(q * 10 + r for q in range(n))
        assert halving.steps[-1].sources[r][r] == tuple(range(n))


@pytest.mark.parametrize("op, factor", [("reducescatter", lambda n: (n - 1) / n), ("allgather", lambda n: (n - 1) / n),
                                        ("broadcast", lambda n: math.ceil(math.log2(n))),
                                        ("reduce", lambda n: math.ceil(math.log2(n)))])
def test_tree_busiest_link_carries_what_time_s_charges_beta_for(op, factor):
    nbytes = 2400.0
    for n in (2, 4, 8, 16):
        values = _random_values(op, n, n, random.Random(n), "int")
        sim = C.simulate(op, values, algorithm="tree")
        sent, received = [0] * n, [0] * n
        for step in sim.steps:
            for t in step.transfers:
                sent[t.src] += 1
                received[t.dst] += 1
        busiest = max(sent + received) * nbytes / n  # one direction of the busiest link; a chunk is 1/n of it
        assert busiest == pytest.approx(factor(n) * nbytes, rel=1e-12)
        assert busiest == pytest.approx(C.cost_split(op, nbytes, n, alpha_s=0, bandwidth_bytes_per_s=1,
                                                     algorithm="tree").link_bytes, rel=1e-12)


@pytest.mark.parametrize("args, kwargs, name", [
    (("alltoall", [[1, 2], [3, 4]]), {"algorithm": "tree"}, "algorithm"),
    (("scatter", [[1, 2], [3, 4]]), {"algorithm": "tree"}, "algorithm"),
    (("allgather", [[1], [2], [3]]), {"algorithm": "tree"}, "values"),
    (("reducescatter", [[1] * 6 for _ in range(6)]), {"algorithm": "tree"}, "values"),
    (("allreduce", [[1, 2], [3, 4]]), {"algorithm": "star"}, "algorithm"),
])
def test_tree_simulation_rejects_what_it_does_not_draw(args, kwargs, name):
    with pytest.raises(ValueError) as err:
        C.simulate(*args, **kwargs)
    assert str(err.value).startswith(name)


def test_ring_is_still_the_default_step_through():
    values = [[r * 4 + c for c in range(4)] for r in range(4)]
    assert C.simulate("allreduce", values) == C.simulate("allreduce", values, algorithm="ring")


# --------------------------------------------------------------------------- cost_split

ops = st.sampled_from(C.OPS)
algorithms = st.sampled_from(C.ALGORITHMS)


@settings(max_examples=200, deadline=None)
@given(ops, st.floats(min_value=0, max_value=1e13), st.integers(min_value=1, max_value=100_000),
       st.floats(min_value=0, max_value=1e-3), st.floats(min_value=1e6, max_value=1e13), algorithms)
def test_split_parts_add_up_to_time_s(op, n, ranks, alpha, beta, algorithm):
    split = C.cost_split(op, n, ranks, alpha_s=alpha, bandwidth_bytes_per_s=beta, algorithm=algorithm)
    assert split.time_s == C.time_s(op, n, ranks, alpha_s=alpha, bandwidth_bytes_per_s=beta, algorithm=algorithm)
    assert split.latency_s + split.bandwidth_s == split.time_s
    assert split.latency_s == split.steps * alpha
    assert split.bandwidth_s == pytest.approx(split.link_bytes / beta, rel=1e-12)
    assert 0 <= split.latency_share <= 1 and split.bus_factor == C.bus_factor(op, ranks)
    if split.time_s > 0:
        assert split.latency_share == pytest.approx(split.latency_s / split.time_s, rel=1e-12)


def test_split_reproduces_the_nccl_tests_example_and_its_bus_bandwidth():
    case = published_cases()["nccl-busbw-factors"]
    ex = case["inputs"]["example"]
    names = {"all_reduce": "allreduce", "reduce_scatter": "reducescatter", "all_gather": "allgather",
             "all_to_all": "alltoall", "broadcast": "broadcast"}
    for key, expected in case["expected"]["example_times_s"].items():
        for alpha in (0.0, 1e-5):  # alpha adds to the latency part only
            split = C.cost_split(names[key], ex["S_bytes"], ex["n"], alpha_s=alpha, bandwidth_bytes_per_s=ex["B_bytes_per_s"])
            assert split.bandwidth_s == pytest.approx(expected, rel=1e-12), key
        # with no latency, the bus bandwidth nccl-tests reports is the link rate itself
        split = C.cost_split(names[key], ex["S_bytes"], ex["n"], alpha_s=0, bandwidth_bytes_per_s=ex["B_bytes_per_s"])
        assert split.busbw_bytes_per_s == pytest.approx(ex["B_bytes_per_s"], rel=1e-12)


def test_split_of_the_articles_worked_example():
    """64 ranks, 10 us per hop, 50 GB/s: 1 GB is bandwidth-bound (~39 ms + 1.3 ms), 1 MB latency-bound."""
    big = C.cost_split("allreduce", 1e9, 64, alpha_s=10e-6, bandwidth_bytes_per_s=50e9)
    assert big.steps == 126 and big.latency_s == pytest.approx(1.26e-3) and big.bandwidth_s == pytest.approx(39.375e-3)
    small = C.cost_split("allreduce", 1e6, 64, alpha_s=10e-6, bandwidth_bytes_per_s=50e9)
    assert small.bandwidth_s == pytest.approx(39.375e-6) and small.latency_s / small.bandwidth_s == pytest.approx(32)
    assert small.latency_share > 0.96 > 0.04 > big.latency_share


def test_split_of_one_rank_moves_nothing():
    split = C.cost_split("allreduce", 1e9, 1, alpha_s=1e-5, bandwidth_bytes_per_s=1e9)
    assert (split.steps, split.time_s, split.link_bytes, split.latency_share, split.busbw_bytes_per_s) == (0, 0, 0, 0, 0)
