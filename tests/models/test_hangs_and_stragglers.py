"""Tests for Figures 24 and 25's model: a hang on the run's clock (who waits, the watchdog, the
flight record) and one sampled step of N ranks with the straggler tax."""
import math
import statistics

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from models.reliability import (
    DEFAULT_NCCL_TIMEOUT_S, GROUP_NAMES, HANG_PRESETS, IO_STALL_S, bad_card_tax, culprits, expected_max_normal,
    expected_max_normal_asymptotic, expected_max_over_mean, hang_timeline, histogram_counts, sample_rank_times,
    sample_step, simulate_preset, standard_max_mean, straggler_curve, straggler_tax,
)

SETTINGS = settings(max_examples=60, deadline=None)
FAULTS = [name for name in HANG_PRESETS if name != "healthy"]


# ---- hangs on the run's clock ------------------------------------------------------------------------

def test_the_rank_at_fault_is_the_one_that_departs_from_the_healthy_step():
    """Figure 24's red dot: the skipper, the reorderer, the wrong group's caller, the padder, the
    dead, the slow and the stalled rank; nobody when healthy."""
    assert {name: culprits(name) for name in HANG_PRESETS} == {
        "healthy": (), "divergent_control_flow": (3,), "mismatched_shapes": (2,), "mismatched_order": (1,),
        "wrong_process_group": (1,), "dead_rank": (2,), "slow_rank": (1,), "io_stall": (2,)}
    for name in FAULTS:  # never a rank that only waits: the first stuck may be a victim, the culprit never is
        t = hang_timeline(name, timeout_s=600)
        assert all(r.rank not in culprits(name) or r.waiting_on for r in t.records if r.started_s is None)


def test_io_stall_is_killed_by_a_short_watchdog_and_survives_a_long_one():
    assert simulate_preset("io_stall", timeout_s=600).status == "watchdog"
    survived = simulate_preset("io_stall", timeout_s=3600)
    assert survived.status == "completed"
    assert max(c.max_wait_s for c in survived.completed) == pytest.approx(IO_STALL_S)
    assert hang_timeline("io_stall", timeout_s=3600, at_s=60).longest_wait_s == pytest.approx(IO_STALL_S)


@pytest.mark.parametrize("timeout_s", [2, 600, 3600])
@pytest.mark.parametrize("at_s", [10, 3600, 86400])
def test_a_dead_rank_is_detected_exactly_one_timeout_after_the_fault(timeout_s, at_s):
    t = hang_timeline("dead_rank", timeout_s=timeout_s, at_s=at_s)
    assert t.fault_s == at_s and t.detected_after_s == pytest.approx(timeout_s)
    assert t.watchdog_at_s == pytest.approx(at_s + timeout_s)
    assert t.blocked_ranks == (0, 1, 3) and set(t.dead_at_s) == {2}
    # rank 2 was last seen when its TP AllReduce ended; the others were due in the world AllReduce 0.2 s later
    assert t.dead_at_s[2] == pytest.approx(at_s - 0.2)


def test_divergent_control_flow_the_first_rank_to_stop_is_the_one_that_skipped():
    t = hang_timeline("divergent_control_flow", timeout_s=600, at_s=3600)
    assert t.step_start_s == pytest.approx(3600 - 1.15)  # rank 3 enters the AllGather 1.15 s into the step
    assert t.first_stuck.rank == 3 and t.first_stuck.call.op == "allgather"
    assert t.blocked_ranks == (0, 1, 2, 3)
    assert set(t.waits_at(t.watchdog_at_s)) == {(0, 3), (1, 3), (2, 3), (3, 0), (3, 1), (3, 2)}
    # flight record: 1439 healthy steps ran before (2 world collectives each); same SeqNum, different op
    pending = {r.rank: r for r in t.records if r.started_s is None}
    assert {r.group_seq for r in pending.values()} == {2 * 1439 + 1}
    assert {GROUP_NAMES[r.call.group] for r in pending.values()} == {"world"}
    assert [pending[k].call.op for k in range(4)] == ["allreduce"] * 3 + ["allgather"]
    assert pending[3].numel_in == 4096 and pending[3].numel_out == 4 * 4096 and pending[0].numel_in == 1
    assert all(r.state_at(t.watchdog_at_s) == "scheduled" for r in pending.values())


def test_a_slow_rank_trips_only_a_short_watchdog():
    patient = hang_timeline("slow_rank", timeout_s=600, at_s=600)
    assert patient.watchdog_at_s is None and patient.detected_after_s is None and patient.blocked_ranks == ()
    assert patient.longest_wait_s == pytest.approx(4.8)  # ranks 2 and 3 wait 1.25 -> 6.05 s in the world AllReduce
    strict = hang_timeline("slow_rank", timeout_s=2, at_s=600)
    assert strict.report.status == "watchdog" and strict.detected_after_s == pytest.approx(2)
    assert strict.first_stuck.rank == 0 and GROUP_NAMES[strict.first_stuck.call.group] == "tp0"
    assert strict.blocked_ranks == (0, 2, 3)  # rank 1 is still computing: inside no collective
    assert strict.last_call_at(1, strict.watchdog_at_s).call.label == "gradient AllReduce"  # the step before
    assert strict.last_call_at(1, strict.watchdog_at_s).state_at(strict.watchdog_at_s) == "completed"
    assert set(strict.waits_at(strict.watchdog_at_s)) == {(0, 1), (2, 0), (2, 1), (3, 0), (3, 1)}


def test_healthy_run_has_no_fault_and_no_watchdog():
    t = hang_timeline("healthy", timeout_s=2, at_s=30)
    assert t.fault_s is None and t.watchdog_at_s is None and t.first_stuck is None and t.blocked_ranks == ()
    assert t.step_start_s == 30 and t.waits_at(31.0) == ()


@SETTINGS
@given(st.sampled_from(FAULTS), st.sampled_from([2, 5, 10, 60, 600, 3600]), st.floats(10, 1e5))
def test_every_fault_happens_at_at_s_and_the_watchdog_fires_one_timeout_later(name, timeout_s, at_s):
    t = hang_timeline(name, timeout_s=timeout_s, at_s=at_s)
    assert t.fault_s == at_s
    if t.watchdog_at_s is None:
        assert t.report.status == "completed" and t.detected_after_s is None
    else:
        assert t.detected_after_s == pytest.approx(timeout_s)
        assert t.first_stuck.rank in t.blocked_ranks
        assert t.first_stuck.entered_s == pytest.approx(t.watchdog_at_s - timeout_s)
        assert {w for w, _ in t.waits_at(t.watchdog_at_s)} == set(t.blocked_ranks)
    assert all(r.entered_s >= t.step_start_s - 1e-9 for r in t.records)


# ---- one sampled step, the straggler tax -------------------------------------------------------------

def test_small_worlds_are_drawn_rank_by_rank_like_sample_rank_times():
    step = sample_step(512, 1.0, 0.03, seed=5)
    assert step.shown_times_s == sample_rank_times(512, 1.0, 0.03, seed=5)
    assert step.rest_max_s is None and step.step_s == max(step.shown_times_s)
    assert step.shown_times_s[step.slowest_rank] == step.step_s
    assert sample_step(512, 1.0, 0.03, seed=5) == step  # reproducible


def test_large_worlds_draw_the_rest_through_their_maximum():
    step = sample_step(16384, 1.0, 0.03, seed=2)
    assert len(step.shown_times_s) == 1024 and step.rest_max_s is not None
    assert step.step_s == max(max(step.shown_times_s), step.rest_max_s)


def test_bad_card_is_rank_zero_slowed_down():
    plain, slow = sample_step(64, 1.0, 0.02, seed=3), sample_step(64, 1.0, 0.02, seed=3, bad_slowdown=0.5)
    assert slow.shown_times_s[0] == pytest.approx(1.5 * plain.shown_times_s[0]) and slow.shown_times_s[1:] == plain.shown_times_s[1:]
    assert slow.slowest_rank == 0


@pytest.mark.parametrize("count", [1, 2, 100, 15360])
def test_the_maximum_drawn_by_inversion_has_the_exact_mean(count):
    """With one rank shown, the other ``count`` are drawn only through their slowest, from Phi^count."""
    draws = [sample_step(1 + count, 0.0, 1.0, seed=s, shown=1).rest_max_s for s in range(3000)]
    mean, error = statistics.fmean(draws), statistics.stdev(draws) / math.sqrt(len(draws))
    assert abs(mean - expected_max_normal(count, 0.0, 1.0)) < 4 * error


def test_cached_curve_matches_the_exact_and_asymptotic_formulas():
    for n, exact, rule in straggler_curve([1, 8, 512, 4096, 16384], 0.03):
        assert exact == pytest.approx(straggler_tax(n, 1.0, 0.03), abs=1e-15)
        assert rule == pytest.approx(expected_max_normal_asymptotic(n, 1.0, 0.03) - 1, abs=1e-15)
        assert exact <= rule + 1e-15
    for n in (1, 8, 4096, 16384):
        for cv in (0.0, 0.01, 0.03, 0.2):
            assert expected_max_over_mean(n, cv) == expected_max_normal(n, 1.0, cv)
            assert bad_card_tax(n, cv, 0.0) == straggler_tax(n, 1.0, cv)
    assert standard_max_mean(2) == pytest.approx(1 / math.sqrt(math.pi))


def test_article_straggler_numbers():
    """About mu + 1.4 sigma at N = 8, 3.0 sigma at 512, 3.6 sigma at 4096; at sigma = 3% of mu a 4% tax on
    eight GPUs and an 11% tax on 4096 (the prose quotes these from Figure 25)."""
    assert [round(standard_max_mean(n), 1) for n in (8, 512, 4096)] == [1.4, 3.0, 3.6]
    assert round(bad_card_tax(8, 0.03, 0), 2) == 0.04 and round(bad_card_tax(4096, 0.03, 0), 2) == 0.11
    # one bad card 5% slow costs more than the whole straggler tax of 64 healthy ranks at 1% spread
    assert bad_card_tax(64, 0.01, 0.05) == 0.05 > straggler_tax(64, 1.0, 0.01)


@SETTINGS
@given(st.lists(st.floats(-5, 5), max_size=300), st.floats(-5, 0), st.floats(0.01, 6), st.integers(1, 60))
def test_histogram_counts_match_numpy(values, low, width, bins):
    high = low + width
    expected, _ = np.histogram(values, bins=np.linspace(low, high, bins + 1))
    got = histogram_counts(values, low, high, bins)
    # numpy puts a value exactly on an inner edge in the upper bin, as we do; floating edges may differ by one ulp
    assert sum(got) == sum(expected) and np.abs(np.array(got) - expected).sum() <= 2 * sum(
        1 for v in values if min(abs((v - low) / width * bins - k) for k in range(bins + 1)) < 1e-9)


@pytest.mark.parametrize("call, fragment", [
    (lambda: hang_timeline("nope"), "name"),
    (lambda: hang_timeline("dead_rank", at_s=-1), "at_s"),
    (lambda: hang_timeline("dead_rank", timeout_s=0), "timeout_s"),
    (lambda: sample_step(0, 1, 0.1, seed=1), "n"),
    (lambda: sample_step(8, 1, -0.1, seed=1), "std"),
    (lambda: sample_step(8, 1, 0.1, seed=1, bad_slowdown=-1), "bad_slowdown"),
    (lambda: bad_card_tax(8, -0.1, 0), "cv"),
    (lambda: histogram_counts([1], 1, 1, 4), "high"),
    (lambda: histogram_counts([1], 0, 1, 0), "bins"),
    (lambda: straggler_curve([0], 0.1), "world_sizes"),
])
def test_invalid_inputs_name_the_argument(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call()


def test_default_timeout_is_pytorchs_ten_minutes():
    assert DEFAULT_NCCL_TIMEOUT_S == 600


def test_a_value_just_below_the_top_edge_is_counted():
    """Found by hypothesis: (value - low) * bins / (high - low) rounds to bins for a value
    a hair below high; it belongs in the last bin, as numpy counts it."""
    low = -1 / 3
    assert histogram_counts([-5.502551797427316e-164], low, low + 1 / 3, 1) == (1,)
