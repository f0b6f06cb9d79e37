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
