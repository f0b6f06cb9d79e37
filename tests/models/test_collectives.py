import math
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.published_cases import published_cases as _published_cases
from models import collectives as C




ops = st.sampled_from(C.OPS)
ranks = st.integers(min_value=1, max_value=100_000)
nbytes = st.floats(min_value=0, max_value=1e15, allow_nan=False)
alphas = st.floats(min_value=0, max_value=1e-3, allow_nan=False)
bandwidths = st.floats(min_value=1e6, max_value=1e13, allow_nan=False)
algorithms = st.sampled_from(C.ALGORITHMS)

OPS_RING_FORMULA = {
    # op: (latency steps, bandwidth factor) for the ring algorithm, Thakur et al. 2005 / NCCL
    "allreduce": (lambda n: 2 * (n - 1), lambda n: 2 * (n - 1) / n),
    "allgather": (lambda n: n - 1, lambda n: (n - 1) / n),
    "reducescatter": (lambda n: n - 1, lambda n: (n - 1) / n),
    "alltoall": (lambda n: n - 1, lambda n: (n - 1) / n),
    "scatter": (lambda n: n - 1, lambda n: (n - 1) / n),
    "gather": (lambda n: n - 1, lambda n: (n - 1) / n),
    "broadcast": (lambda n: n - 1, lambda n: 1.0),
    "reduce": (lambda n: n - 1, lambda n: 1.0),
    "sendrecv": (lambda n: 1, lambda n: 1.0),
}


# --------------------------------------------------------------------------- published cases


def test_nccl_busbw_factors_published():
    case = _published_cases()["nccl-busbw-factors"]
    factors = case["expected"]["factors"]
    formulas = {
        "AllReduce": ("allreduce", lambda n: 2 * (n - 1) / n),
        "ReduceScatter": ("reducescatter", lambda n: (n - 1) / n),
        "AllGather": ("allgather", lambda n: (n - 1) / n),
        "AlltoAll": ("alltoall", lambda n: (n - 1) / n),
    }
    assert factors["AllReduce"] == "2(n-1)/n" and factors["AlltoAll"] == "(n-1)/n"
    for n in (2, 3, 8, 64, 1000):
        for name, (op, formula) in formulas.items():
            assert C.bus_factor(op, n) == pytest.approx(formula(n), rel=1e-15), (name, n)
        assert C.bus_factor("broadcast", n) == factors["Broadcast"] == 1
        assert C.bus_factor("reduce", n) == factors["Reduce"] == 1


def test_nccl_busbw_example_times_published():
    case = _published_cases()["nccl-busbw-factors"]
    ex = case["inputs"]["example"]
    names = {
        "all_reduce": "allreduce",
        "reduce_scatter": "reducescatter",
        "all_gather": "allgather",
        "all_to_all": "alltoall",
        "broadcast": "broadcast",
    }
    for key, expected in case["expected"]["example_times_s"].items():
        got = C.time_s(
            names[key], ex["S_bytes"], ex["n"], alpha_s=ex["alpha_s"], bandwidth_bytes_per_s=ex["B_bytes_per_s"]
        )
        assert got == pytest.approx(expected, rel=1e-12), key


def test_zero_comm_volume_published():
    # DDP AllReduce moves 2 Psi per rank; ZeRO-3 = ReduceScatter + 2 AllGathers = 3 Psi (1.5x DDP).
    case = _published_cases()["zero-comm-volume"]
    psi, n = 1e9, 4096
    ddp = C.volume_bytes_per_rank("allreduce", psi, n)
    zero3 = C.volume_bytes_per_rank("reducescatter", psi, n) + 2 * C.volume_bytes_per_rank("allgather", psi, n)
    assert ddp / psi == pytest.approx(case["expected"]["DDP_allreduce"], rel=1e-3)
    assert zero3 / psi == pytest.approx(case["expected"]["ZeRO3"], rel=1e-3)
    assert zero3 / ddp == pytest.approx(1.5, rel=1e-12)


def test_article_ring_traffic_converges_to_constant_multiple():
    # Reference article: ring per-rank traffic converges to a constant multiple of the buffer.
    n = 1e8
    ratios = [C.volume_bytes_per_rank("allreduce", n, r) / n for r in (8, 64, 512, 4096)]
    assert ratios == sorted(ratios)
    assert ratios[-1] == pytest.approx(2.0, rel=1e-3)
    # ...while the latency term grows linearly with N.
    t8 = C.time_s("allreduce", 0, 8, alpha_s=1e-5, bandwidth_bytes_per_s=1e9)
    t64 = C.time_s("allreduce", 0, 64, alpha_s=1e-5, bandwidth_bytes_per_s=1e9)
    assert t64 / t8 == pytest.approx(63 / 7)


# --------------------------------------------------------------------------- formulas


def test_ring_times_by_hand():
    # 4 ranks, 1 MB, alpha 10 us, 1 GB/s: AllReduce 6 alpha + 1.5 MB / beta.
    t = C.time_s("allreduce", 1e6, 4, alpha_s=1e-5, bandwidth_bytes_per_s=1e9)
    assert t == pytest.approx(6e-5 + 1.5e-3, rel=1e-12)
    t = C.time_s("allgather", 1e6, 4, alpha_s=1e-5, bandwidth_bytes_per_s=1e9)
    assert t == pytest.approx(3e-5 + 0.75e-3, rel=1e-12)
    t = C.time_s("sendrecv", 1e6, 4, alpha_s=1e-5, bandwidth_bytes_per_s=1e9)
    assert t == pytest.approx(1e-5 + 1e-3, rel=1e-12)


def test_tree_times_by_hand():
    # NCCL double binary tree: 2 ceil(lg N) alpha + 2 n / beta (tuning.cc: tree algBw = busBw / 2).
    t = C.time_s("allreduce", 1e6, 8, alpha_s=1e-5, bandwidth_bytes_per_s=1e9, algorithm="tree")
    assert t == pytest.approx(6e-5 + 2e-3, rel=1e-12)
    t = C.time_s("allreduce", 1e6, 9, alpha_s=1e-5, bandwidth_bytes_per_s=1e9, algorithm="tree")
    assert t == pytest.approx(8e-5 + 2e-3, rel=1e-12)
    # Binomial broadcast: ceil(lg N) (alpha + n/beta), Thakur et al. 2005.
    t = C.time_s("broadcast", 1e6, 8, alpha_s=1e-5, bandwidth_bytes_per_s=1e9, algorithm="tree")
    assert t == pytest.approx(3 * (1e-5 + 1e-3), rel=1e-12)
    # Recursive doubling AllGather: lg N alpha + (N-1)/N n / beta.
    t = C.time_s("allgather", 1e6, 8, alpha_s=1e-5, bandwidth_bytes_per_s=1e9, algorithm="tree")
    assert t == pytest.approx(3e-5 + 0.875e-3, rel=1e-12)
    # Bruck All-to-All: lg N alpha + (lg N / 2) n / beta.
    t = C.time_s("alltoall", 1e6, 8, alpha_s=1e-5, bandwidth_bytes_per_s=1e9, algorithm="tree")
    assert t == pytest.approx(3e-5 + 1.5e-3, rel=1e-12)


def test_tree_beats_ring_on_latency_ring_on_bandwidth():
    kw = dict(alpha_s=5e-6, bandwidth_bytes_per_s=50e9)
    small_ring = C.time_s("allreduce", 1024, 256, **kw)
    small_tree = C.time_s("allreduce", 1024, 256, algorithm="tree", **kw)
    big_ring = C.time_s("allreduce", 1e9, 8, **kw)
    big_tree = C.time_s("allreduce", 1e9, 8, algorithm="tree", **kw)
    assert small_tree < small_ring / 10
    assert big_ring < big_tree


@pytest.mark.parametrize("op", C.OPS)
@pytest.mark.parametrize("algorithm", C.ALGORITHMS)
def test_single_rank_costs_nothing(op, algorithm):
    assert C.time_s(op, 1e9, 1, alpha_s=1e-5, bandwidth_bytes_per_s=1e9, algorithm=algorithm) == 0.0
    assert C.volume_bytes_per_rank(op, 1e9, 1) == 0.0


@pytest.mark.parametrize("op", C.OPS)
def test_ring_time_is_steps_alpha_plus_volume_over_beta(op):
    steps, factor = OPS_RING_FORMULA[op]
    for n in (2, 3, 7, 16):
        t = C.time_s(op, 3e8, n, alpha_s=2e-6, bandwidth_bytes_per_s=1e11)
        assert t == pytest.approx(steps(n) * 2e-6 + factor(n) * 3e8 / 1e11, rel=1e-12)
        assert C.volume_bytes_per_rank(op, 3e8, n) == pytest.approx(factor(n) * 3e8, rel=1e-12)
        # ring bandwidth term equals nccl-tests' bus factor (scatter/gather: (n-1)/n as well)
        assert C.bus_factor(op, n) == pytest.approx(factor(n), rel=1e-12)


def test_huge_inputs_do_not_overflow():
    t = C.time_s("allreduce", 1e30, 10**9, alpha_s=1e-5, bandwidth_bytes_per_s=1e9)
    assert math.isfinite(t) and t > 0
    with pytest.raises(ValueError, match="nbytes"):
        C.time_s("allreduce", 1e300, 8, alpha_s=0, bandwidth_bytes_per_s=1e-300)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(op="allreduc"), "op"),
        (dict(nbytes=-1), "nbytes"),
        (dict(nbytes=float("nan")), "nbytes"),
        (dict(ranks=0), "ranks"),
        (dict(ranks=2.5), "ranks"),
        (dict(ranks=True), "ranks"),
        (dict(ranks=10**400), "ranks"),
        (dict(alpha_s=-1e-6), "alpha_s"),
        (dict(bandwidth_bytes_per_s=0), "bandwidth_bytes_per_s"),
        (dict(bandwidth_bytes_per_s=float("inf")), "bandwidth_bytes_per_s"),
        (dict(algorithm="butterfly"), "algorithm"),
    ],
)
def test_time_rejects_nonsense_naming_the_argument(kwargs, name):
    args = dict(op="allreduce", nbytes=1e6, ranks=8, alpha_s=1e-6, bandwidth_bytes_per_s=1e9)
    args.update(kwargs)
    op, nbytes, ranks = args.pop("op"), args.pop("nbytes"), args.pop("ranks")
    with pytest.raises(ValueError) as err:
        C.time_s(op, nbytes, ranks, **args)
    assert str(err.value).startswith(name)


@settings(max_examples=100, deadline=None)
@given(ops, nbytes, ranks, alphas, bandwidths, algorithms)
def test_cost_function_equals_time_s(op, n, r, a, b, alg):
    fn = C.cost_function(op, r, alpha_s=a, bandwidth_bytes_per_s=b, algorithm=alg)
    assert fn(n) == C.time_s(op, n, r, alpha_s=a, bandwidth_bytes_per_s=b, algorithm=alg)


def test_cost_function_validates_once_and_per_call():
    with pytest.raises(ValueError, match="^bandwidth_bytes_per_s"):
        C.cost_function("allreduce", 8, alpha_s=0, bandwidth_bytes_per_s=-1)
    fn = C.cost_function("allreduce", 8, alpha_s=0, bandwidth_bytes_per_s=1e9)
    with pytest.raises(ValueError, match="^nbytes"):
        fn(-1)
    # one rank: nothing moves, even for an absurd buffer over an absurd link
    assert C.time_s("allreduce", 1e300, 1, alpha_s=1.0, bandwidth_bytes_per_s=1e-300) == 0.0


def test_bus_factor_and_volume_reject_nonsense():
    with pytest.raises(ValueError, match="^op"):
        C.bus_factor("allreduc", 8)
    with pytest.raises(ValueError, match="^ranks"):
        C.bus_factor("allreduce", 0)
    with pytest.raises(ValueError, match="^nbytes"):
        C.volume_bytes_per_rank("allreduce", -5, 8)


# --------------------------------------------------------------------------- properties


@settings(max_examples=150, deadline=None)
@given(nbytes, ranks, alphas, bandwidths)
def test_allreduce_is_reducescatter_plus_allgather(n, r, a, b):
    kw = dict(alpha_s=a, bandwidth_bytes_per_s=b)
    ar = C.time_s("allreduce", n, r, **kw)
    rs_ag = C.time_s("reducescatter", n, r, **kw) + C.time_s("allgather", n, r, **kw)
    assert ar == pytest.approx(rs_ag, rel=1e-12, abs=1e-300)
    vol = C.volume_bytes_per_rank("allreduce", n, r)
    assert vol == pytest.approx(
        C.volume_bytes_per_rank("reducescatter", n, r) + C.volume_bytes_per_rank("allgather", n, r), rel=1e-12, abs=1e-300
    )


@settings(max_examples=150, deadline=None)
@given(ops, nbytes, nbytes, ranks, alphas, bandwidths, algorithms)
def test_time_monotone_in_bytes_and_never_nan(op, n1, n2, r, a, b, alg):
    lo, hi = sorted((n1, n2))
    t_lo = C.time_s(op, lo, r, alpha_s=a, bandwidth_bytes_per_s=b, algorithm=alg)
    t_hi = C.time_s(op, hi, r, alpha_s=a, bandwidth_bytes_per_s=b, algorithm=alg)
    assert 0 <= t_lo <= t_hi
    assert math.isfinite(t_hi)
    v = C.volume_bytes_per_rank(op, hi, r)
    assert 0 <= v <= 2 * hi and math.isfinite(v)


@settings(max_examples=150, deadline=None)
@given(ops, nbytes, st.integers(min_value=2, max_value=100_000), alphas, bandwidths)
def test_time_monotone_in_ranks_for_ring(op, n, r, a, b):
    t = C.time_s(op, n, r, alpha_s=a, bandwidth_bytes_per_s=b)
    t_more = C.time_s(op, n, r + 1, alpha_s=a, bandwidth_bytes_per_s=b)
    assert t <= t_more * (1 + 1e-12)


@settings(max_examples=150, deadline=None)
@given(ops, ranks)
def test_bus_factor_in_published_range(op, r):
    f = C.bus_factor(op, r)
    if op == "allreduce":
        assert f == pytest.approx(2 * (r - 1) / r)
        assert 0 <= f < 2
    elif op in ("broadcast", "reduce", "sendrecv"):
        assert f == 1.0
    else:
        assert f == pytest.approx((r - 1) / r)
        assert 0 <= f < 1


# --------------------------------------------------------------------------- simulation


def _random_values(op, n, k, rng, kind):
    draw = (lambda: rng.randint(-50, 50)) if kind == "int" else (lambda: rng.uniform(-1e3, 1e3))
    if op in ("allgather", "gather"):
        width = 1
    elif op in ("broadcast", "reduce", "sendrecv"):
        width = k
    else:
        width = n
    return [[draw() for _ in range(width)] for _ in range(n)]


def _numpy_oracle(op, values, root, peer):
    """Expected end state, computed with numpy independently of the module."""
    v = np.array(values, dtype=float)
    n = v.shape[0]
    out = [[None] * (n if op in ("allgather", "gather") else v.shape[1]) for _ in range(n)]
    total = v.sum(axis=0)
    if op == "allreduce":
        out = [list(total) for _ in range(n)]
    elif op == "reducescatter":
        for r in range(n):
            out[r][r] = total[r]
    elif op == "reduce":
        out[root] = list(total)
    elif op == "allgather":
        out = [list(v[:, 0]) for _ in range(n)]
    elif op == "gather":
        for r in range(n):
            out[r][r] = v[r, 0]
        out[root] = list(v[:, 0])
    elif op == "broadcast":
        out = [list(v[root]) for _ in range(n)]
    elif op == "scatter":
        out[root] = list(v[root])
        for r in range(n):
            out[r][r] = v[root, r]
    elif op == "alltoall":
        out = [list(row) for row in v.T]  # rank j slot i = rank i's chunk j
    elif op == "sendrecv":
        out = [list(row) for row in v]
        if n > 1:
            out[peer] = list(v[root])
    return out


def _assert_state_matches(state, oracle, exact):
    assert len(state) == len(oracle)
    for got_row, want_row in zip(state, oracle):
        assert len(got_row) == len(want_row)
        for got, want in zip(got_row, want_row):
            if want is None:
                assert got is None
            elif exact:
                assert got == want
            else:
                assert got == pytest.approx(want, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("op", C.OPS)
def test_simulation_matches_numpy_oracle(op):
    rng = random.Random(1234)
    for trial in range(60):
        n = rng.randint(1, 9)
        k = rng.randint(1, 4)
        kind = "int" if trial % 2 else "float"
        values = _random_values(op, n, k, rng, kind)
        root = rng.randrange(n)
        peer = None
        if op == "sendrecv" and n > 1:
            peer = rng.choice([r for r in range(n) if r != root])
        sim = C.simulate(op, values, root=root, peer=peer)
        oracle = _numpy_oracle(op, values, root, peer if peer is not None else (root + 1) % n)
        _assert_state_matches(sim.final_state, oracle, exact=(kind == "int"))
        _assert_state_matches(C.expected_final_state(op, values, root=root, peer=peer), oracle, exact=(kind == "int"))


def _expected_steps(op, n, k):
    if n == 1:
        return 0
    return {
        "allreduce": 2 * (n - 1),
        "reducescatter": n - 1,
        "allgather": n - 1,
        "broadcast": n + k - 2,
        "reduce": n + k - 2,
        "scatter": n - 1,
        "gather": n - 1,
        "alltoall": n - 1 if n % 2 == 0 else n,
        "sendrecv": 1,
    }[op]


@pytest.mark.parametrize("op", C.OPS)
def test_simulation_step_count_and_links(op):
    rng = random.Random(7)
    for n in range(1, 10):
        k = 3
        values = _random_values(op, n, k, rng, "int")
        sim = C.simulate(op, values)
        assert len(sim.steps) == _expected_steps(op, n, k)
        for index, step in enumerate(sim.steps):
            assert step.transfers, "no empty steps"
            senders = [t.src for t in step.transfers]
            receivers = [t.dst for t in step.transfers]
            if op != "sendrecv":  # one chunk per link direction per step
                assert len(set(senders)) == len(senders)
                assert len(set(receivers)) == len(receivers)
            for t in step.transfers:
                assert t.src != t.dst
                if op in ("allreduce", "reducescatter", "allgather"):
                    assert t.dst == (t.src + 1) % n  # ring neighbour
                if op == "allreduce":  # reduce-scatter phase, then all-gather phase
                    assert t.reduced == (index < n - 1)
                else:
                    assert t.reduced == (op in C.REDUCING_OPS)


@pytest.mark.parametrize("op", ["allreduce", "reducescatter", "allgather", "alltoall", "scatter", "gather"])
def test_simulated_traffic_matches_volume_formula(op):
    # Busiest rank's sent-or-received chunks x chunk size == volume_bytes_per_rank (ring/direct).
    nbytes = 1200.0
    for n in range(2, 9):
        values = _random_values(op, n, 1, random.Random(n), "int")
        sim = C.simulate(op, values)
        sent, received = [0] * n, [0] * n
        for step in sim.steps:
            for t in step.transfers:
                sent[t.src] += 1
                received[t.dst] += 1
        chunk_bytes = nbytes / n
        busiest = max(max(sent), max(received)) * chunk_bytes
        assert busiest == pytest.approx(C.volume_bytes_per_rank(op, nbytes, n), rel=1e-12)


def test_simulation_sources_track_contributions():
    n = 5
    values = [[r * 10 + c for c in range(n)] for r in range(n)]
    sim = C.simulate("allreduce", values)
    assert all(src == tuple(range(n)) for row in sim.steps[-1].sources for src in row)
    # halfway (end of reduce-scatter) rank r owns the complete chunk r and nothing else
    mid = sim.steps[n - 2]
    for r in range(n):
        assert mid.sources[r][r] == tuple(range(n))
        assert all(mid.state[r][c] is None for c in range(n) if c != r)
    a2a = C.simulate("alltoall", values)
    for j in range(n):
        for i in range(n):
            assert a2a.steps[-1].sources[j][i] == (i,)


def test_simulation_initial_state_and_dataclasses():
    sim = C.simulate("broadcast", [[1, 2], [0, 0], [0, 0]], root=0)
    assert sim.initial_state == ((1, 2), (None, None), (None, None))
    assert sim.algorithm == "chain"
    with pytest.raises(Exception):
        sim.steps[0].transfers[0].value = 5  # frozen


@pytest.mark.parametrize(
    "args, kwargs, name",
    [
        (("allreduce", []), {}, "values"),
        (("allreduce", [[1, 2], [3]]), {}, "values[1]"),
        (("allreduce", [[1, 2], [3, "x"]]), {}, "values[1][1]"),
        (("allreduce", [[1, 2], [3, float("nan")]]), {}, "values[1][1]"),
        (("allgather", [[1, 2], [3, 4]]), {}, "values[0]"),
        (("allreduce", [[0] * 33 for _ in range(33)]), {}, "ranks"),
        (("broadcast", [[1], [2]]), {"root": 2}, "root"),
        (("sendrecv", [[1], [2]]), {"root": 0, "peer": 0}, "peer"),
        (("sendrecv", [[1], [2]]), {"peer": 5}, "peer"),
        (("allreduc", [[1]]), {}, "op"),
        (("allreduce", [[1e308, 1e308], [1e308, 1e308]]), {}, "values"),
        (("broadcast", [[1] * 65, [1] * 65]), {}, "values[0]"),
    ],
)
def test_simulate_rejects_nonsense(args, kwargs, name):
    with pytest.raises(ValueError) as err:
        C.simulate(*args, **kwargs)
    assert str(err.value).startswith(name)


