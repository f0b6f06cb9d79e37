"""Tests for models.experts: capacity and drops by hand, routing vs a numpy oracle, balancing loss, collapse."""
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from models.experts import (
    apply_capacity, collapse_step, expert_capacity, imbalance, load_balancing_loss, moe_alltoall_bytes,
    moe_layer, moe_layer_time_s, rank_loads, route_tokens, simulate_collapse,
)

SETTINGS = settings(max_examples=100, deadline=None)


# ---- capacity and drops, by hand ---------------------------------------------------------------------

@pytest.mark.parametrize(
    "tokens, experts, top_k, factor, capacity",
    [
        (10, 4, 1, 1.0, 3),  # 2.5 -> 3
        (10, 10, 1, 1.1, 2),  # 1.1 -> 2
        (100, 10, 1, 1.1, 11),  # exactly 11, although 1.1 * 100 / 10 = 11.000000000000002 in floats
        (4096, 8, 2, 1.25, 1280),  # 1.25 * 4096 * 2 / 8
        (8, 4, 2, 1.0, 4),
        (7, 8, 1, 0.5, 1),
    ],
)
def test_expert_capacity_hand_cases(tokens, experts, top_k, factor, capacity):
    assert expert_capacity(tokens, experts, top_k, factor) == capacity


def test_top1_overflow_dropped_in_token_order():
    d = apply_capacity([(0,), (0,), (0,), (1,)], experts=2, capacity=2)
    assert d.counts == (3, 1) and d.loads == (2, 1)
    assert d.dropped_per_expert == (1, 0) and d.dropped == 1


def test_top2_first_choices_have_priority():
    # capacity 2. First choices: t0->0, t1->0, t2->1. Second: t0->1 (fits), t1->1 (full), t2->0 (full).
    d = apply_capacity([(0, 1), (0, 1), (1, 0)], experts=2, capacity=2)
    assert d.counts == (3, 3) and d.loads == (2, 2) and d.dropped_per_expert == (1, 1) and d.dropped == 2
    dropless = apply_capacity([(0, 1), (0, 1), (1, 0)], experts=2, capacity=None)
    assert dropless.loads == (3, 3) and dropless.dropped == 0 and dropless.capacity is None


def test_moe_layer_collapsed_router_drops_all_but_capacity():
    # A huge bias sends every token to expert 5: capacity = ceil(1.25 * 256 / 8) = 40 survive.
    bias = [0.0] * 8
    bias[5] = 60.0
    layer = moe_layer(256, 8, 1, capacity_factor=1.25, seed=1, bias=bias)
    assert layer.capacity == 40 and layer.dispatch.counts[5] == 256
    assert layer.dropped == 216 and layer.dropped_fraction == pytest.approx(216 / 256)
    assert layer.busiest_load == 40 and layer.time_factor == pytest.approx(40 / 32)
    assert layer.wasted_capacity_fraction == pytest.approx(1 - 40 / 320)
    dropless = moe_layer(256, 8, 1, dropless=True, seed=1, bias=bias)
    assert dropless.dropped == 0 and dropless.time_factor == pytest.approx(8.0)  # the busiest expert does it all
    assert layer.aux_loss == pytest.approx(0.01 * 8, rel=1e-6)  # Switch loss at collapse: alpha * E


def test_load_balancing_loss_hand_values():
    e = 4
    uniform = [1 / e] * e
    assert load_balancing_loss(uniform, uniform, alpha=0.01) == pytest.approx(0.01)
    assert load_balancing_loss([1, 0, 0, 0], [1, 0, 0, 0], alpha=0.01) == pytest.approx(0.04)
    # alpha * E * sum f_i P_i = 0.1 * 4 * (0.5*0.4 + 0.5*0.1 + 0 + 0) = 0.1
    assert load_balancing_loss([0.5, 0.5, 0, 0], [0.4, 0.1, 0.25, 0.25], alpha=0.1) == pytest.approx(0.1)


def test_straggler_and_ep_rank_loads():
    assert imbalance([4, 2, 2, 0]) == 2.0
    assert imbalance([3, 3, 3]) == 1.0
    assert imbalance([1.7e308, 1.7e308]) == 1.0  # no overflow in the mean
    assert rank_loads([1, 2, 3, 4], 2) == (3, 7)
    assert moe_layer_time_s([10, 40, 20], 1e-3) == pytest.approx(0.04)


def test_alltoall_bytes_article_formula():
    # k * b * s * h * bytes per direction per MoE layer
    a = moe_alltoall_bytes(2, 1, 4096, 4096, dtype_bytes=2, ep=8)
    assert a.per_direction_bytes == 2 * 1 * 4096 * 4096 * 2 == 67_108_864
    assert a.forward_bytes == 2 * a.per_direction_bytes and a.forward_backward_bytes == 4 * a.per_direction_bytes
    assert a.off_rank_bytes_per_direction == pytest.approx(a.per_direction_bytes * 7 / 8)
    assert a.off_rank_forward_bytes == pytest.approx(a.forward_bytes * 7 / 8)  # dispatch + combine
    # "top-2 doubles both expert compute and token movement relative to top-1"
    assert moe_alltoall_bytes(2, 4, 2048, 8192).per_direction_bytes == 2 * moe_alltoall_bytes(1, 4, 2048, 8192).per_direction_bytes
    assert moe_alltoall_bytes(1, 1, 1, 1, ep=1).off_rank_bytes_per_direction == 0


# ---- routing against an independent oracle ---------------------------------------------------------

def _oracle(tokens, experts, top_k, seed, bias, std):
    rng = random.Random(seed)
    logits = np.array([[rng.gauss(0.0, std) for _ in range(experts)] for _ in range(tokens)]) + np.array(bias)
    order = np.argsort(-logits, axis=1, kind="stable")[:, :top_k]
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    return order, probs.mean(axis=0)


@SETTINGS
@given(st.integers(1, 64), st.integers(1, 12), st.data(), st.integers(0, 10**6), st.floats(0.1, 5))
def test_routing_matches_numpy_oracle(tokens, experts, data, seed, std):
    top_k = data.draw(st.integers(1, experts))
    bias = data.draw(st.lists(st.floats(-3, 3), min_size=experts, max_size=experts))
    routing = route_tokens(tokens, experts, top_k, seed=seed, bias=bias, logit_std=std)
    order, router_prob = _oracle(tokens, experts, top_k, seed, bias, std)
    assert [list(c) for c in routing.choices] == order.tolist()
    assert np.allclose(routing.router_prob, router_prob, rtol=1e-9, atol=1e-12)
    assert sum(routing.counts) == tokens * top_k
    assert math.isclose(sum(routing.fractions), 1.0) and math.isclose(sum(routing.router_prob), 1.0)
    assert all(len(set(c)) == top_k for c in routing.choices)


@SETTINGS
@given(st.integers(1, 200), st.integers(1, 16), st.data(), st.floats(0.1, 4), st.booleans(), st.integers(0, 99))
def test_capacity_invariants(tokens, experts, data, factor, dropless, seed):
    top_k = data.draw(st.integers(1, min(experts, 4)))
    layer = moe_layer(tokens, experts, top_k, capacity_factor=factor, dropless=dropless, seed=seed)
    d = layer.dispatch
    assert sum(d.loads) == tokens * top_k - d.dropped
    assert all(0 <= load <= count for load, count in zip(d.loads, d.counts))
    assert d.dropped == sum(d.dropped_per_expert) >= 0
    if dropless:
        assert d.dropped == 0 and layer.wasted_capacity_fraction is None
    else:
        cap = expert_capacity(tokens, experts, top_k, factor)
        assert all(load <= cap for load in d.loads)
        # an expert drops only when full
        assert all(load == cap for load, drop in zip(d.loads, d.dropped_per_expert) if drop)
        assert 0 <= layer.wasted_capacity_fraction <= 1
        if cap >= tokens:  # room for every token on every expert: nothing can drop
            assert d.dropped == 0
    assert layer.time_factor >= 0 and math.isfinite(layer.aux_loss) and layer.aux_loss >= 0


# ---- the toy collapse ----------------------------------------------------------------------------------

def test_without_balancing_loss_the_router_collapses():
    history = simulate_collapse(80, alpha=0.0, seed=0)
    assert history[0].max_fraction < 0.25
    assert history[-1].max_fraction > 0.95
    assert history[-1].dropped_fraction > 0.8  # capacity 40 of 256 tokens survive on the hot expert
    assert history[-1].time_factor > 7  # dropless: the hot expert takes ~E times the ideal


def test_switch_alpha_keeps_routing_balanced():
    history = simulate_collapse(80, alpha=0.01, seed=0)
    assert max(step.max_fraction for step in history) < 0.3
    assert history[-1].aux_loss == pytest.approx(0.01, rel=0.1)
    large = simulate_collapse(80, alpha=1.0, seed=0)  # clipped steps keep a strong loss stable
    assert max(step.max_fraction for step in large[10:]) < 0.35


def test_collapse_step_is_reproducible_and_gradient_pushes_back():
    bias = (1.0, 0.0, 0.0, 0.0)
    record, after_balance = collapse_step(bias, 0, tokens=128, experts=4, collapse_rate=0.0, alpha=0.1, lr=10.0)
    again, same = collapse_step(bias, 0, tokens=128, experts=4, collapse_rate=0.0, alpha=0.1, lr=10.0)
    assert record == again and after_balance == same
    assert after_balance[0] < bias[0]  # the over-used expert is pushed down
    _, after_collapse = collapse_step(bias, 0, tokens=128, experts=4, collapse_rate=0.1, alpha=0.0, lr=10.0)
    assert after_collapse[0] > bias[0]  # rich get richer


# ---- validation ---------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda: expert_capacity(0, 8), "tokens"),
        (lambda: expert_capacity(8, 0), "experts"),
        (lambda: expert_capacity(8, 4, 5), "top_k"),
        (lambda: expert_capacity(8, 4, 1, 0), "capacity_factor"),
        (lambda: route_tokens(8, 4, seed=1.5), "seed"),
        (lambda: route_tokens(8, 4, bias=[0, 0]), "bias"),
        (lambda: route_tokens(8, 4, bias=[0, 0, float("nan"), 0]), r"bias\[2\]"),
        (lambda: route_tokens(8, 4, logit_std=0), "logit_std"),
        (lambda: route_tokens(8, 4, logit_std=1e3), "logit_std"),
        (lambda: route_tokens(10**6, 64), r"tokens\*experts"),
        (lambda: apply_capacity([(0,)], 2, capacity=-1), "capacity"),
        (lambda: apply_capacity([(3,)], 2), "expert 3"),
        (lambda: load_balancing_loss([0.5], [0.5, 0.5]), "same length"),
        (lambda: load_balancing_loss([-0.5, 1.5], [0.5, 0.5]), r"fractions\[0\]"),
        (lambda: imbalance([0, 0]), "loads"),
        (lambda: rank_loads([1, 2, 3], 2), "ep=2 does not divide experts=3"),
        (lambda: moe_alltoall_bytes(1, 1, 0, 8), "seq"),
        (lambda: simulate_collapse(0), "steps"),
        (lambda: simulate_collapse(10, lr=0), "lr"),
        (lambda: collapse_step(None, -1), "step"),
        (lambda: load_balancing_loss([1.0, 1.7e308], [1.7e308, 1.0], 1.0), "overflows"),
        (lambda: moe_layer_time_s([1e300], 1e300), "overflows"),
    ],
)
def test_invalid_inputs_name_the_argument(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call()


# ---- routing in expectation (Figure 16) -----------------------------------------------------------------

from models.experts import (  # noqa: E402
    expected_collapse, expected_overflow, expected_routing, inclusion_probabilities, router_bias, router_levels,
)


def _exact_overflow(n, p, c):
    """E[(N - c)+] for N ~ Binomial(n, p), summed over the whole pmf with numpy (log space)."""
    k = np.arange(n + 1)
    log_factorial = np.array([math.lgamma(i + 1) for i in range(n + 1)])
    with np.errstate(divide="ignore"):
        log_pmf = log_factorial[n] - log_factorial - log_factorial[::-1] + k * np.log(p) + (n - k) * np.log1p(-p)
    return float(np.sum(np.clip(k - c, 0, None) * np.exp(log_pmf)))


@SETTINGS
@given(st.integers(1, 4000), st.floats(1e-4, 0.999), st.floats(0, 2.5))
def test_expected_overflow_matches_the_exact_binomial_sum(n, p, ratio):
    c = min(n, int(ratio * n * p))
    mean = n * p
    exact = _exact_overflow(n, p, c)
    got = expected_overflow(n, p, c)
    if mean * (1 - p) < 36:  # summed exactly
        assert got == pytest.approx(exact, rel=1e-9, abs=1e-12 * max(1.0, mean))
    else:  # normal approximation: documented as under 0.15% of the mean
        assert abs(got - exact) <= 1.5e-3 * mean
    assert max(0.0, mean - c) - 1e-9 * mean <= got <= mean + 1e-9


def test_expected_overflow_edges():
    assert expected_overflow(100, 0.0, 0) == 0.0
    assert expected_overflow(100, 1.0, 30) == 70.0  # every token asks: all but the slots drop
    assert expected_overflow(100, 0.3, 0) == pytest.approx(30.0)  # no slots: everything drops
    assert expected_overflow(100, 0.3, 100) == 0.0
    assert expected_overflow(100, 0.5, 50) == pytest.approx(_exact_overflow(100, 0.5, 50), rel=1e-12)


@SETTINGS
@given(st.lists(st.one_of(st.just(0.0), st.floats(1e-6, 10.0)), min_size=1, max_size=40), st.data())
def test_inclusion_probabilities_sum_to_k_capped_at_one_and_proportional_below(prob, data):
    if not sum(prob) > 0:
        prob = prob[:-1] + [1.0]
    k = data.draw(st.integers(1, len(prob)))
    q = inclusion_probabilities(prob, k)
    assert math.isclose(sum(q), k, rel_tol=1e-9) and all(-1e-12 <= x <= 1 + 1e-12 for x in q)
    below = [(x, p) for x, p in zip(q, prob) if x < 1 - 1e-12 and p > 0]
    if below:  # one lambda for every expert not capped
        scale = below[0][0] / below[0][1]
        assert all(math.isclose(x, p * scale, rel_tol=1e-9) for x, p in below)
        assert all(p >= max(p2 for _, p2 in below) * (1 - 1e-12) for x, p in zip(q, prob) if x >= 1 - 1e-12)
    if k == 1:
        assert q == pytest.approx([p / sum(prob) for p in prob])


def test_expected_routing_matches_sampled_batches_through_apply_capacity():
    # k = 1: tokens pick expert i with probability P_i; the mean over 1,500 sampled batches of
    # apply_capacity's drops (and of each expert's requests) agrees with the expectation.
    prob = [0.3, 0.2, 0.2, 0.1, 0.1, 0.05, 0.03, 0.02]
    tokens, capacity = 200, expert_capacity(200, 8, 1, 1.25)
    expected = expected_routing(tokens, prob, 1, capacity)
    rng = random.Random(7)
    drops, requests = [], np.zeros(8)
    for _ in range(1500):
        choices = [(e,) for e in rng.choices(range(8), weights=prob, k=tokens)]
        dispatch = apply_capacity(choices, 8, capacity)
        drops.append(dispatch.dropped)
        requests += dispatch.counts
    error = 4 * np.std(drops) / math.sqrt(len(drops))
    assert abs(np.mean(drops) - expected.dropped_fraction * tokens) < error
    assert np.allclose(requests / 1500, expected.requests, rtol=0.03)


def test_expected_routing_top_k_matches_binomial_sampling():
    prob = [0.4, 0.15, 0.15, 0.1, 0.1, 0.05, 0.05]
    tokens, k, capacity = 300, 3, 120
    expected = expected_routing(tokens, prob, k, capacity)
    q = np.array(inclusion_probabilities(prob, k))
    counts = np.random.default_rng(3).binomial(tokens, q, size=(20000, len(q)))
    dropped = np.clip(counts - capacity, 0, None)
    standard_error = dropped.std(axis=0) / math.sqrt(len(dropped))
    assert np.all(np.abs(dropped.mean(axis=0) - expected.dropped) <= 4 * standard_error + 1e-3)
    assert expected.requests == pytest.approx(list(tokens * q))
    assert expected.requests[0] == pytest.approx(tokens)  # P = 0.4 > 1/3: every token picks it


def test_uniform_router_is_balanced_and_drops_only_from_fluctuations():
    # The article's example: E = 64, k = 2, 8,192 tokens, capacity factor 1.25: 320 slots per expert.
    capacity = expert_capacity(8192, 64, 2, 1.25)
    assert capacity == 320
    uniform = expected_routing(8192, [1.0] * 64, 2, capacity)
    assert uniform.balance_loss == pytest.approx(1.0) and uniform.busiest_vs_mean == pytest.approx(1.0)
    assert uniform.dropped_fraction < 1e-6  # 320 slots is 4 standard deviations above the mean of 256
    tight = expected_routing(8192, [1.0] * 64, 2, 256)  # capacity factor 1: a fluctuation above 256 drops
    sigma = math.sqrt(8192 * (2 / 64) * (1 - 2 / 64))
    assert tight.dropped_fraction == pytest.approx(sigma / math.sqrt(2 * math.pi) / 256, rel=0.02)
    assert tight.wasted_capacity_fraction == pytest.approx(tight.dropped_fraction)  # E*C = T*k here
    dropless = expected_routing(8192, [1.0] * 64, 2, None)
    assert dropless.dropped_fraction == 0 and dropless.wasted_capacity_fraction is None


@SETTINGS
@given(st.integers(2, 64), st.data(), st.floats(0, 3), st.integers(1, 5000))
def test_expected_routing_invariants(experts, data, skew, tokens):
    k = data.draw(st.integers(1, min(8, experts)))
    capacity = data.draw(st.one_of(st.none(), st.integers(0, tokens)))
    bias = router_bias(experts, skew)
    top = max(bias)
    prob = [math.exp(b - top) for b in bias]
    r = expected_routing(tokens, prob, k, capacity)
    assert sum(r.requests) == pytest.approx(tokens * k)
    assert all(-1e-9 <= kept <= (capacity if capacity is not None else tokens) + 1e-9 for kept in r.kept)
    assert 0 <= r.dropped_fraction <= 1
    # Switch's loss, unweighted: at least 1 (f and P ordered alike), at most E
    assert r.balance_loss == pytest.approx(load_balancing_loss(r.fractions, r.router_prob, alpha=1.0))
    assert 1 - 1e-9 <= r.balance_loss <= experts + 1e-9
    assert r.busiest_vs_mean >= 1 - 1e-9


def test_router_levels_keep_the_favourites_single_and_spread_like_a_normal():
    for experts in (2, 8, 16):
        z, level = router_levels(experts)
        assert len(z) == experts and sorted(level) == list(range(experts)) and level[0] == 0
    z, level = router_levels(256)
    sizes = [level.count(l) for l in range(len(z))]
    assert sizes == [1, 1, 2, 4, 8, 16, 32, 64, 64, 32, 16, 8, 4, 2, 1, 1] and level[0] == 0
    assert list(z) == sorted(z, reverse=True) and abs(sum(z[l] for l in level)) < 1e-9
    spread = math.sqrt(sum(z[l] ** 2 for l in level) / 256)
    assert 0.95 < spread < 1.0  # block means: a little under the normal's 1
    assert router_bias(256, 0.5)[0] == pytest.approx(0.5 * z[0])


def _collapse_per_expert(steps, experts, top_k, skew, alpha, collapse_rate=0.005, lr=25.0, clip=0.5):
    """The docstring's dynamic, expert by expert, from inclusion_probabilities (an independent path)."""
    bias = list(router_bias(experts, skew))
    history = []
    for _ in range(steps + 1):
        top = max(bias)
        weights = [math.exp(b - top) for b in bias]
        prob = [w / sum(weights) for w in weights]
        f = [q / top_k for q in inclusion_probabilities(prob, top_k)]
        loss = sum(a * b for a, b in zip(f, prob))
        history.append(prob)
        bias = [b + max(-clip, min(clip, lr * experts * (collapse_rate * (fj - 1 / experts)
                                                          - alpha * experts * pj * (fj - loss))))
                for b, fj, pj in zip(bias, f, prob)]
    return history


@pytest.mark.parametrize("experts, top_k, skew, alpha", [(8, 1, 0.3, 0.0), (64, 2, 0.5, 0.01), (256, 8, 1.0, 0.002)])
def test_collapse_by_level_equals_the_per_expert_dynamic(experts, top_k, skew, alpha):
    records = expected_collapse(12, experts, top_k, skew=skew, alpha=alpha)
    for record, prob in zip(records, _collapse_per_expert(12, experts, top_k, skew, alpha)):
        assert record.router_prob == pytest.approx(prob, rel=1e-9, abs=1e-15)
        assert record.balance_loss == pytest.approx(
            load_balancing_loss(record.fractions, record.router_prob, alpha=1.0), rel=1e-12)


@pytest.mark.parametrize("experts, top_k", [(8, 1), (64, 2), (256, 8)])
def test_without_the_balancing_loss_routing_collapses_onto_k_experts(experts, top_k):
    end = expected_collapse(20, experts, top_k, skew=0.3, alpha=0.0)[-1]
    assert max(end.fractions) > 0.95 / top_k  # k experts take (nearly) everything
    assert end.balance_loss > 0.4 * experts / top_k


@pytest.mark.parametrize("experts, top_k", [(8, 1), (64, 2), (256, 8)])
def test_switch_weight_pulls_a_skewed_router_back(experts, top_k):
    run = expected_collapse(20, experts, top_k, skew=0.3, alpha=0.01)
    assert run[-1].balance_loss < run[0].balance_loss and run[-1].balance_loss < 1.02


def test_near_balance_the_loss_wins_iff_alpha_exceeds_the_collapse_rate():
    for alpha, grows in ((0.004, True), (0.006, False)):
        run = expected_collapse(10, 64, 2, skew=0.02, alpha=alpha, collapse_rate=0.005)
        assert (run[-1].balance_loss > run[0].balance_loss) == grows
    uniform = expected_collapse(20, 64, 2, skew=0.0, alpha=0.0)
    assert all(r.balance_loss == pytest.approx(1.0) for r in uniform)  # nothing to amplify


def test_collapse_runs_are_cached_prefixes():
    long = expected_collapse(15, 32, 2, skew=0.4, alpha=0.001)
    short = expected_collapse(6, 32, 2, skew=0.4, alpha=0.001)
    assert short == long[:7] and [r.step for r in long] == list(range(16))
    assert expected_collapse(15, 32, 2, skew=0.4, alpha=0.001) == long


@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda: expected_overflow(-1, 0.5, 1), "tokens"),
        (lambda: expected_overflow(10, 1.5, 1), "probability"),
        (lambda: expected_overflow(10, 0.5, -1), "capacity"),
        (lambda: inclusion_probabilities([0, 0], 1), "router_prob"),
        (lambda: inclusion_probabilities([1, -1], 1), "router_prob"),
        (lambda: inclusion_probabilities([1, 1], 3), "top_k"),
        (lambda: expected_routing(0, [1, 1]), "tokens"),
        (lambda: expected_routing(8, [1, 1], 1, -2), "capacity"),
        (lambda: router_bias(0, 1), "experts"),
        (lambda: router_bias(8, -1), "skew"),
        (lambda: expected_collapse(-1, 8), "steps"),
        (lambda: expected_collapse(2, 8, 9), "top_k"),
        (lambda: expected_collapse(2, 8, alpha=-1), "alpha"),
        (lambda: expected_collapse(2, 8, lr=0), "lr"),
    ],
)
def test_expected_routing_inputs_name_the_argument(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call()
