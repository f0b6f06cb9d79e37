"""Tests for models.scaling: strong/weak efficiency, MFU at scale, McCandlish and Kaplan critical batch."""
import math

import pytest
from hypothesis import given, settings, strategies as st

from tests.published_cases import published_cases as _cases
from models import collectives
from models.scaling import (
    allreduce_comm, critical_batch, examples_to_target, exposed_comm_s, kaplan_critical_batch_tokens,
    mfu_at_scale, steps_for_examples, steps_to_target, strong_efficiency, strong_scaling,
    time_to_target, weak_efficiency, weak_scaling,
)

SETTINGS = settings(max_examples=120, deadline=None)




# ---- published cases -------------------------------------------------------------------------------

def test_mccandlish_tradeoff_case():
    case = _cases()["mccandlish-tradeoff"]
    s_min, e_min = 1000.0, 1000.0 * 4096  # any S_min, E_min: B_crit = E_min / S_min = 4096
    b_crit = critical_batch(s_min, e_min)
    assert b_crit == 4096
    for ratio in case["inputs"]["B_over_Bnoise"]:
        expected = case["expected"]["values"][str(ratio)]
        batch = ratio * b_crit
        s = steps_to_target(batch, s_min=s_min, e_min=e_min)
        e = examples_to_target(batch, s_min=s_min, e_min=e_min)
        assert s / s_min == pytest.approx(expected["S/S_min"], rel=1e-12)
        assert e / e_min == pytest.approx(expected["E/E_min"], rel=1e-12)
        assert (s / s_min - 1) * (e / e_min - 1) == pytest.approx(1.0, rel=1e-12)
        assert e == pytest.approx(batch * s, rel=1e-12)  # examples = batch x steps
    at_crit = case["expected"]["at_B=B_crit"]
    assert steps_to_target(b_crit, s_min=s_min, e_min=e_min) / s_min == at_crit["S/S_min"]
    assert examples_to_target(b_crit, s_min=s_min, e_min=e_min) / e_min == at_crit["E/E_min"]


def test_kaplan_critical_batch_case():
    case = _cases()["kaplan-critical-batch"]
    b_star, alpha_b = case["inputs"]["B_star_tokens"], case["inputs"]["alpha_B"]
    for loss, tokens in case["expected"]["values_tokens"].items():
        got = kaplan_critical_batch_tokens(float(loss), b_star_tokens=b_star, alpha_b=alpha_b)
        assert got == pytest.approx(tokens, abs=1.0)  # the case rounds to whole tokens


def test_article_94_percent_scaling_at_30_percent_mfu_is_28_percent():
    assert mfu_at_scale(0.30, 0.94) == pytest.approx(0.282)
    assert round(100 * mfu_at_scale(0.30, 0.94)) == 28
    (point,) = weak_scaling(1.0, [512], comm_time_s=lambda n: 1 / 0.94 - 1, baseline_mfu=0.30)
    assert point.efficiency == pytest.approx(0.94) and point.mfu == pytest.approx(0.282)


def test_article_beyond_critical_batch_twice_the_flops():
    # "Beyond it you spend twice the FLOPs to reach the same loss": E(B_crit) = 2 E_min.
    assert examples_to_target(5e6, s_min=1e4, e_min=5e10) == pytest.approx(2 * 5e10)


# ---- efficiency definitions ----------------------------------------------------------------------

def test_strong_and_weak_hand_computed():
    strong = strong_scaling(100.0, [1, 10], comm_time_s=lambda n: 1.0)
    assert strong[0].step_s == 100.0 and strong[0].comm_s == 0.0 and strong[0].efficiency == 1.0
    assert strong[1].compute_s == 10.0 and strong[1].step_s == 11.0
    assert strong[1].efficiency == pytest.approx(100 / (10 * 11))
    weak = weak_scaling(100.0, [10], comm_time_s=lambda n: 1.0)
    assert weak[0].step_s == 101.0 and weak[0].efficiency == pytest.approx(100 / 101)
    assert strong_efficiency(100.0, 10, 11.0) == strong[1].efficiency
    assert weak_efficiency(100.0, 101.0) == weak[0].efficiency


def test_overlap_hides_at_most_the_compute():
    assert exposed_comm_s(1.0, 5.0, 1.0) == 4.0  # only 1 s of compute to hide under
    assert exposed_comm_s(10.0, 5.0, 0.6) == pytest.approx(2.0)
    assert exposed_comm_s(10.0, 5.0, 0.0) == 5.0
    (p,) = strong_scaling(100.0, [100], comm_time_s=lambda n: 5.0, overlap=1.0)
    assert p.step_s == 5.0 and p.exposed_comm_s == 4.0


def test_ring_allreduce_comm_uses_collectives():
    alpha, bw, grad = 5e-6, 50e9, 14e9
    comm = allreduce_comm(grad, alpha_s=alpha, bandwidth_bytes_per_s=bw)
    for n in (2, 8, 512):
        hand = 2 * (n - 1) * alpha + 2 * (n - 1) / n * grad / bw  # Patarasuk & Yuan ring
        assert comm(n) == pytest.approx(hand)
        assert comm(n) == collectives.time_s("allreduce", grad, n, alpha_s=alpha, bandwidth_bytes_per_s=bw)
    (p,) = weak_scaling(1.0, [8], gradient_bytes=grad, alpha_s=alpha, bandwidth_bytes_per_s=bw, overlap=0.5)
    assert p.comm_s == pytest.approx(comm(8))
    assert p.exposed_comm_s == pytest.approx(comm(8) - min(0.5 * comm(8), 1.0))


def test_strong_scaling_degrades_faster_than_weak():
    kwargs = dict(gradient_bytes=2 * 7e9, alpha_s=5e-6, bandwidth_bytes_per_s=50e9, overlap=0.8)
    sizes = [1, 8, 64, 512, 4096]
    strong = [p.efficiency for p in strong_scaling(100.0, sizes, **kwargs)]
    weak = [p.efficiency for p in weak_scaling(1.0, sizes, **kwargs)]
    assert strong == sorted(strong, reverse=True) and weak == sorted(weak, reverse=True)
    assert strong[-1] < 0.1 < 0.85 < weak[-1]  # the article: "eta degrades quickly" for strong


# ---- the critical batch meets weak scaling ----------------------------------------------------------

def test_time_to_target_throughput_up_tokens_up():
    points = time_to_target(1.0, 16384, [1, 8, 64, 512, 4096], s_min=5000, e_min=5000 * 4e6,
                            gradient_bytes=14e9, alpha_s=5e-6, bandwidth_bytes_per_s=50e9, overlap=0.8)
    throughput = [p.throughput_per_s for p in points]
    tokens = [p.examples_to_target for p in points]
    times = [p.time_to_target_s for p in points]
    assert throughput == sorted(throughput) and tokens == sorted(tokens)
    assert times == sorted(times, reverse=True)
    assert all(t >= 5000 * 1.0 for t in times)  # never faster than S_min steps of a 1-GPU step
    # past B_crit (4e6 tokens, N ~ 244) each doubling of throughput buys far less time
    assert points[-1].data_efficiency < 0.06 and points[2].data_efficiency > 0.79
    for p in points:
        assert p.examples_to_target == pytest.approx(p.global_batch * p.steps)
        assert p.data_efficiency == pytest.approx(5000 * 4e6 / p.examples_to_target)


def test_data_efficiency_is_half_at_critical_batch():
    (p,) = time_to_target(1.0, 1000, [4], s_min=10, e_min=40000, comm_time_s=lambda n: 0.0)
    assert p.global_batch == 4000 == critical_batch(10, 40000)
    assert p.data_efficiency == 0.5 and p.steps == 20


def test_steps_for_examples_inverts_the_tradeoff():
    s_min, e_min = 300.0, 3e5
    for batch in (10.0, 1000.0, 1e5):
        e = examples_to_target(batch, s_min=s_min, e_min=e_min)
        assert steps_for_examples(e, s_min=s_min, e_min=e_min) == pytest.approx(steps_to_target(batch, s_min=s_min, e_min=e_min))


# ---- properties -------------------------------------------------------------------------------------

positive_floats = st.floats(1e-6, 1e9, allow_nan=False, allow_infinity=False)


@SETTINGS
@given(positive_floats, st.lists(st.integers(1, 10**6), min_size=1, max_size=6),
       st.floats(0, 1e12), st.floats(0, 1e-3), st.floats(1e6, 1e12), st.floats(0, 1), st.floats(0.01, 1))
def test_scaling_points_are_finite_and_bounded(t1, sizes, grad, alpha, bw, overlap, mfu):
    kwargs = dict(gradient_bytes=grad, alpha_s=alpha, bandwidth_bytes_per_s=bw, overlap=overlap, baseline_mfu=mfu)
    for strong_p, weak_p in zip(strong_scaling(t1, sizes, **kwargs), weak_scaling(t1, sizes, **kwargs)):
        for p in (strong_p, weak_p):
            assert all(math.isfinite(v) and v >= 0 for v in (p.compute_s, p.comm_s, p.exposed_comm_s, p.step_s))
            assert 0 < p.efficiency <= 1 + 1e-12
            assert p.mfu <= mfu + 1e-12
            assert p.exposed_comm_s <= p.comm_s
        assert strong_p.efficiency <= weak_p.efficiency + 1e-12


@SETTINGS
@given(st.floats(1e-4, 1e4), st.floats(1e-3, 1e6), st.floats(1e-3, 1e6))
def test_mccandlish_relations_hold_everywhere(ratio, s_min, b_crit):
    # (the product form loses digits to cancellation far from B_crit, so stay within 1e+-4 of it)
    e_min = s_min * b_crit
    batch = ratio * b_crit
    s = steps_to_target(batch, s_min=s_min, e_min=e_min)
    e = examples_to_target(batch, s_min=s_min, e_min=e_min)
    assert s > s_min and e > e_min
    assert e == pytest.approx(batch * s, rel=1e-9)
    assert (s / s_min - 1) * (e / e_min - 1) == pytest.approx(1.0, rel=1e-6)


@SETTINGS
@given(st.floats(0.5, 10), st.floats(1e-3, 1e12))
def test_kaplan_critical_batch_falls_as_loss_rises(loss, b_star):
    low = kaplan_critical_batch_tokens(loss, b_star_tokens=b_star)
    high = kaplan_critical_batch_tokens(loss * 1.1, b_star_tokens=b_star)
    assert 0 < high < low and math.isfinite(low)


# ---- validation --------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda: strong_scaling(0, [1], comm_time_s=lambda n: 0), "t1_s"),
        (lambda: strong_scaling(1, [0], comm_time_s=lambda n: 0), "world_sizes"),
        (lambda: strong_scaling(1, [], comm_time_s=lambda n: 0), "world_sizes"),
        (lambda: weak_scaling(1, [2], comm_time_s=lambda n: 0, overlap=1.5), "overlap"),
        (lambda: weak_scaling(1, [2]), "comm_time_s"),
        (lambda: weak_scaling(1, [2], comm_time_s=3), "comm_time_s"),
        (lambda: weak_scaling(1, [2], comm_time_s=lambda n: -1.0), r"comm_time_s\(2\)"),
        (lambda: weak_scaling(1, [2], comm_time_s=lambda n: 0, gradient_bytes=1), "not both"),
        (lambda: weak_scaling(1, [2], gradient_bytes=1, alpha_s=0, bandwidth_bytes_per_s=0), "bandwidth_bytes_per_s"),
        (lambda: weak_scaling(1, [2], comm_time_s=lambda n: 0, baseline_mfu=2), "baseline_mfu"),
        (lambda: mfu_at_scale(1.2, 0.9), "baseline_mfu"),
        (lambda: critical_batch(0, 1), "s_min"),
        (lambda: steps_to_target(-1, s_min=1, e_min=1), "batch"),
        (lambda: steps_for_examples(0.5, s_min=1, e_min=1), "examples"),
        (lambda: kaplan_critical_batch_tokens(0), "loss_nats"),
        (lambda: kaplan_critical_batch_tokens(1e-300, alpha_b=0.01), "loss_nats"),
        (lambda: steps_to_target(1e-300, s_min=1e300, e_min=1e300), "steps"),
        (lambda: time_to_target(1, 0, [1], s_min=1, e_min=1, comm_time_s=lambda n: 0), "per_device_batch"),
        (lambda: critical_batch(1e300, 1e-300), "underflows"),
        (lambda: critical_batch(1e-300, 1e300), "overflows"),
    ],
)
def test_invalid_inputs_name_the_argument(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call()
