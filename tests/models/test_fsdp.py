import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from models import fsdp, memory

SETTINGS = settings(max_examples=120, deadline=None)

# Two 1e9-parameter units over 2 ranks at 1e10 B/s: every AllGather / ReduceScatter moves
# (N-1)/N * 2e9 bytes = 1e9 bytes -> 0.1 s. Forward 0.2 s per unit, backward 0.4 s.
HAND = dict(shard_degree=2, bandwidth_bytes_per_s=1e10, alpha_s=0.0)


def _spans(step, kind, phase):
    return {e.unit: (e.start_s, e.end_s) for e in step.events if e.kind == kind and e.phase == phase}


def _approx(pairs):
    return {k: pytest.approx(v, abs=1e-12) for k, v in pairs.items()}


def test_hand_timeline_with_prefetch():
    step = fsdp.simulate_fsdp_step([1e9, 1e9], 0.2, prefetch=True, **HAND)
    assert _spans(step, "allgather", "forward") == _approx({0: (0.0, 0.1), 1: (0.1, 0.2)})
    assert _spans(step, "compute", "forward") == _approx({0: (0.1, 0.3), 1: (0.3, 0.5)})
    assert _spans(step, "allgather", "backward") == _approx({1: (0.5, 0.6), 0: (0.6, 0.7)})
    assert _spans(step, "compute", "backward") == _approx({1: (0.6, 1.0), 0: (1.0, 1.4)})
    assert _spans(step, "reducescatter", "backward") == _approx({1: (1.0, 1.1), 0: (1.4, 1.5)})
    assert step.step_time_s == pytest.approx(1.5)
    assert step.compute_s == pytest.approx(1.2)
    # Only the edges are exposed: first forward AllGather, first backward AllGather, last ReduceScatter.
    assert step.exposed_comm_s == pytest.approx(0.3)
    assert step.resident_bytes == 16e9
    # Two gathered units + one unsharded gradient = memory.fsdp_peak_memory(prefetch=True).
    assert step.peak_bytes == 22e9
    assert step.peak_bytes == memory.fsdp_peak_memory(2e9, 2, 1e9, prefetch=True).peak_bytes
    assert step.mean_bytes == pytest.approx(30e9 / 1.5)
    assert step.memory_curve[0] == (0.0, 18e9)
    assert step.memory_curve[-1][1] == pytest.approx(16e9)


def test_hand_timeline_without_prefetch():
    step = fsdp.simulate_fsdp_step([1e9, 1e9], 0.2, prefetch=False, **HAND)
    assert _spans(step, "allgather", "forward") == _approx({0: (0.0, 0.1), 1: (0.3, 0.4)})
    # The backward AllGather of unit 0 queues behind unit 1's ReduceScatter.
    assert _spans(step, "reducescatter", "backward") == _approx({1: (1.1, 1.2), 0: (1.7, 1.8)})
    assert _spans(step, "allgather", "backward") == _approx({1: (0.6, 0.7), 0: (1.2, 1.3)})
    assert step.step_time_s == pytest.approx(1.8)
    assert step.exposed_comm_s == pytest.approx(0.6)
    assert step.peak_bytes == memory.fsdp_peak_memory(2e9, 2, 1e9).peak_bytes == 20e9


def test_no_reshard_skips_backward_allgather():
    step = fsdp.simulate_fsdp_step([1e9, 1e9], 0.2, prefetch=True, reshard_after_forward=False, **HAND)
    assert _spans(step, "allgather", "backward") == {}
    assert step.comm_volume_elements == memory.comm_volume_elements(2e9, 3, reshard_after_forward=False)
    # Both units stay gathered until their backward: all params resident at once.
    assert step.peak_bytes == 16e9 + 4e9 + 2e9


def test_comm_volume_matches_zero():
    units = fsdp.uniform_units(7e9, 32)
    step = fsdp.simulate_fsdp_step(units, 0.01, shard_degree=8, bandwidth_bytes_per_s=1e11)
    assert step.comm_volume_elements == pytest.approx(memory.comm_volume_elements(7e9, 3))
    assert step.comm_volume_elements == pytest.approx(3 * 7e9)


def test_article_prefetch_hides_the_extra_gathers():
    # Compute-bound units: with prefetch only the three edge collectives are exposed, however many units.
    units = fsdp.uniform_units(7e9, 32)
    kwargs = dict(shard_degree=8, bandwidth_bytes_per_s=1e11, alpha_s=1e-5)
    fast = fsdp.simulate_fsdp_step(units, 0.05, prefetch=True, **kwargs)
    slow = fsdp.simulate_fsdp_step(units, 0.05, prefetch=False, **kwargs)
    gather = [e.duration_s for e in fast.events if e.kind == "allgather"][0]
    scatter = [e.duration_s for e in fast.events if e.kind == "reducescatter"][0]
    assert fast.exposed_comm_s == pytest.approx(2 * gather + scatter)
    # Without prefetch every collective is exposed (the article: "every layer stalls on its own weights").
    assert slow.exposed_comm_s == pytest.approx(slow.comm_busy_s)
    assert slow.exposed_comm_s > 10 * fast.exposed_comm_s


def test_single_rank_has_no_communication():
    step = fsdp.simulate_fsdp_step([1e9, 2e9, 3e9], [0.1, 0.2, 0.3], shard_degree=1,
                                   bandwidth_bytes_per_s=1e9, alpha_s=1e-3)
    assert step.exposed_comm_s == 0
    assert step.step_time_s == pytest.approx(0.6 * 3)


def test_alpha_is_paid_per_step():
    # Ring AllGather over N ranks pays (N-1) alpha (models.collectives); zero bytes isolates it.
    step = fsdp.simulate_fsdp_step([1.0], 0.0, shard_degree=4, bandwidth_bytes_per_s=1e30, alpha_s=1e-3,
                                   param_bytes=1e-30, grad_bytes=1e-30)
    assert step.step_time_s == pytest.approx(3 * 3e-3)


def test_bad_inputs_named():
    ok = dict(shard_degree=8, bandwidth_bytes_per_s=1e11)
    with pytest.raises(ValueError, match="unit_params must not be empty"):
        fsdp.simulate_fsdp_step([], 0.1, **ok)
    with pytest.raises(ValueError, match=r"unit_params\[1\]"):
        fsdp.simulate_fsdp_step([1e9, -1], 0.1, **ok)
    with pytest.raises(ValueError, match="unit_params"):
        fsdp.simulate_fsdp_step("abc", 0.1, **ok)
    with pytest.raises(ValueError, match="forward_s has 1 entries"):
        fsdp.simulate_fsdp_step([1e9, 1e9], [0.1], **ok)
    with pytest.raises(ValueError, match=r"forward_s\[0\]"):
        fsdp.simulate_fsdp_step([1e9], [math.nan], **ok)
    with pytest.raises(ValueError, match="shard_degree"):
        fsdp.simulate_fsdp_step([1e9], 0.1, shard_degree=0, bandwidth_bytes_per_s=1e11)
    with pytest.raises(ValueError, match="bandwidth_bytes_per_s"):
        fsdp.simulate_fsdp_step([1e9], 0.1, shard_degree=8, bandwidth_bytes_per_s=0)
    with pytest.raises(ValueError, match="alpha_s"):
        fsdp.simulate_fsdp_step([1e9], 0.1, alpha_s=-1, **ok)
    with pytest.raises(ValueError, match="prefetch"):
        fsdp.simulate_fsdp_step([1e9], 0.1, prefetch=1, **ok)
    with pytest.raises(ValueError, match="backward_factor"):
        fsdp.simulate_fsdp_step([1e9], 0.1, backward_factor=math.inf, **ok)
    with pytest.raises(ValueError, match="algorithm"):
        fsdp.simulate_fsdp_step([1e9], 0.1, algorithm="butterfly", **ok)
    with pytest.raises(ValueError, match="n_units"):
        fsdp.uniform_units(1e9, 0)
    with pytest.raises(ValueError, match="len\\(unit_params\\)"):
        fsdp.simulate_fsdp_step([1.0] * (fsdp.MAX_UNITS + 1), 0.1, **ok)


def test_huge_but_finite():
    step = fsdp.simulate_fsdp_step([1e30] * 4, 1e6, shard_degree=8, bandwidth_bytes_per_s=1e11)
    assert math.isfinite(step.step_time_s) and step.peak_bytes > 0
    with pytest.raises(ValueError, match="too large"):
        fsdp.simulate_fsdp_step([1e307] * 4, 1.0, shard_degree=8, bandwidth_bytes_per_s=1e11)


# ---- properties ----------------------------------------------------------------------------

schedules = st.fixed_dictionaries({
    "units": st.lists(st.sampled_from([1e6, 1e8, 5e8, 1e9, 3e9]), min_size=1, max_size=10),
    "forward": st.lists(st.sampled_from([0.0, 1e-4, 1e-2, 0.05, 0.3]), min_size=10, max_size=10),
    "shard_degree": st.sampled_from([1, 2, 3, 8, 64, 512]),
    "bandwidth_bytes_per_s": st.sampled_from([1e9, 2.5e10, 1e11, 4.5e11]),
    "alpha_s": st.sampled_from([0.0, 5e-6, 1e-4, 1e-2]),
    "backward_factor": st.sampled_from([0.0, 1.0, 2.0, 3.0]),
    "reshard_after_forward": st.booleans(),
})


def _run(s, prefetch):
    n = len(s["units"])
    return fsdp.simulate_fsdp_step(
        s["units"], s["forward"][:n], shard_degree=s["shard_degree"],
        bandwidth_bytes_per_s=s["bandwidth_bytes_per_s"], alpha_s=s["alpha_s"],
        backward_factor=s["backward_factor"], reshard_after_forward=s["reshard_after_forward"],
        prefetch=prefetch)


def _memory_oracle(step, units, reshard, param_bytes=2, grad_bytes=2):
    """Rebuild the memory curve from the event list alone, sampled with numpy."""
    ev = step.events
    gathers = [e for e in ev if e.kind == "allgather"]
    frees = {(e.phase, e.unit): e.start_s for e in ev if e.kind == "free"}
    bcompute = {e.unit: e for e in ev if e.kind == "compute" and e.phase == "backward"}
    scatters = {e.unit: e for e in ev if e.kind == "reducescatter"}
    intervals = []
    for g in gathers:
        end = frees[("forward", g.unit)] if (g.phase == "forward" and reshard) else frees[("backward", g.unit)]
        intervals.append((g.start_s, end, param_bytes * units[g.unit]))
    for u, c in bcompute.items():
        intervals.append((c.start_s, scatters[u].end_s, grad_bytes * units[u]))
    times = np.array(sorted({0.0} | {a for a, _, _ in intervals} | {b for _, b, _ in intervals}))
    levels = np.full(times.shape, step.resident_bytes)
    for a, b, size in intervals:
        levels[(times >= a) & (times < b)] += size
    return levels.max()


@SETTINGS
@given(schedules)
def test_schedule_invariants(s):
    units = s["units"]
    for prefetch in (True, False):
        step = _run(s, prefetch)
        values = (step.step_time_s, step.compute_s, step.comm_busy_s, step.exposed_comm_s,
                  step.peak_bytes, step.mean_bytes)
        assert all(math.isfinite(v) and v >= 0 for v in values)
        assert step.step_time_s >= step.compute_s * (1 - 1e-12)
        assert step.step_time_s >= step.comm_busy_s * (1 - 1e-12)
        assert step.exposed_comm_s == pytest.approx(step.step_time_s - step.compute_s, abs=1e-12)
        # Each stream runs one operation at a time.
        for stream in ("comm", "compute"):
            spans = sorted((e.start_s, e.end_s) for e in step.events if e.stream == stream and e.kind != "free")
            assert all(b[0] >= a[1] - 1e-12 for a, b in zip(spans, spans[1:]))
        # Dependencies: compute after its gather; scatter after its gradient.
        gathered = {(e.phase, e.unit): e.end_s for e in step.events if e.kind == "allgather"}
        for e in step.events:
            if e.kind == "compute" and (e.phase, e.unit) in gathered:
                assert e.start_s >= gathered[(e.phase, e.unit)] - 1e-12
            if e.kind == "compute" and e.phase == "forward":
                assert ("forward", e.unit) in gathered
        bwd_end = {e.unit: e.end_s for e in step.events if e.kind == "compute" and e.phase == "backward"}
        for e in step.events:
            if e.kind == "reducescatter":
                assert e.start_s >= bwd_end[e.unit] - 1e-12
        # Memory: resident <= mean <= peak; peak rebuilt independently from the events.
        assert step.resident_bytes <= step.mean_bytes * (1 + 1e-12)
        assert step.mean_bytes <= step.peak_bytes * (1 + 1e-12)
        assert step.peak_bytes == pytest.approx(_memory_oracle(step, units, s["reshard_after_forward"]), rel=1e-12)
        largest = max(units)
        bound = step.resident_bytes + 2 * 2 * largest
        bound += 2 * (2 * largest if s["reshard_after_forward"] else sum(units))
        assert step.peak_bytes <= bound * (1 + 1e-12)
        assert step.memory_curve[-1][1] == pytest.approx(step.resident_bytes, rel=1e-9)
        assert step.comm_volume_elements == pytest.approx(
            memory.comm_volume_elements(sum(units), 3, reshard_after_forward=s["reshard_after_forward"]))


@SETTINGS
@given(schedules)
def test_prefetch_never_slower(s):
    with_prefetch = _run(s, True)
    without = _run(s, False)
    assert with_prefetch.step_time_s <= without.step_time_s * (1 + 1e-12)
    if s["reshard_after_forward"]:
        # Without prefetch nothing overlaps: the step is the sum of everything.
        assert without.step_time_s == pytest.approx(without.compute_s + without.comm_busy_s, rel=1e-12)


# ---- the timed schedule (Figure 09) ------------------------------------------------------------

def _lanes_from_events(step):
    """Start times per (kind, phase), in issue order, rebuilt from the event list."""
    lanes = {}
    for e in sorted(step.events, key=lambda e: (e.start_s, e.kind)):
        if e.kind != "free":
            lanes.setdefault((e.kind, e.phase), []).append(e.start_s)
    return lanes


def test_timed_step_takes_the_given_times():
    step = fsdp.simulate_fsdp_timed(3, 0.01, 0.004)
    for e in step.events:
        want = {"allgather": 0.004, "reducescatter": 0.004, "free": 0.0}.get(
            e.kind, 0.01 if e.phase == "forward" else 0.02)
        assert e.duration_s == pytest.approx(want, rel=1e-12)
    # Compute-bound with prefetch: only the three edge collectives are exposed.
    assert step.exposed_comm_s == pytest.approx(3 * 0.004)
    assert step.step_time_s == pytest.approx(3 * 0.03 + 3 * 0.004)


def test_hand_resident_units():
    # The HAND schedules above: two units; prefetch gathers unit 1 while unit 0 computes.
    with_prefetch = fsdp.simulate_fsdp_step([1e9, 1e9], 0.2, prefetch=True, **HAND)
    # Unit 1 is freed and gathered again at 0.5 (the end of forward); unit 0's backward gather is
    # issued when unit 1's backward compute starts, at 0.6.
    resident = fsdp.resident_units(with_prefetch)
    assert resident.peak == 2 and [n for _, n in resident.curve] == [1, 2, 1, 2, 1, 0]
    assert [t for t, _ in resident.curve] == pytest.approx([0.0, 0.1, 0.3, 0.6, 1.0, 1.4])
    without = fsdp.simulate_fsdp_step([1e9, 1e9], 0.2, prefetch=False, **HAND)
    assert fsdp.resident_units(without).peak == 1
    kept = fsdp.simulate_fsdp_step([1e9] * 5, 0.2, reshard_after_forward=False, **HAND)
    assert fsdp.resident_units(kept).peak == 5  # every unit stays gathered until its backward
    idle = [t for interval in fsdp.compute_idle_intervals(without) for t in interval]
    assert idle == pytest.approx([0.0, 0.1, 0.3, 0.4, 0.6, 0.7, 1.1, 1.3, 1.7, 1.8])  # 0.6 s = exposed_comm_s


def test_article_prefetch_closes_the_gaps():
    # "With correct prefetching the extra volume costs nothing": gathers no longer than compute hide,
    # except the first forward and first backward AllGather and the last ReduceScatter.
    for units in (1, 8, 128):
        fast = fsdp.fsdp_lanes(units, 0.01, 0.005)
        slow = fsdp.fsdp_lanes(units, 0.01, 0.005, prefetch=False)
        assert fast.exposed_comm_s == pytest.approx(3 * 0.005)
        assert slow.exposed_comm_s == pytest.approx(slow.comm_busy_s) == pytest.approx(3 * units * 0.005)
        assert (fast.resident.peak, slow.resident.peak) == (min(2, units), 1)
    # A gather longer than the compute it hides under leaves gaps even with prefetch.
    assert fsdp.fsdp_lanes(8, 0.005, 0.01).exposed_comm_s > 3 * 0.01


@SETTINGS
@given(st.integers(1, 40), st.sampled_from([5e-4, 1e-3, 0.002, 0.01, 0.05, 0.1]),
       st.sampled_from([5e-4, 1e-3, 0.005, 0.02, 0.1]), st.sampled_from([0.0, 1.0, 2.0, 3.0]),
       st.booleans(), st.booleans())
def test_fsdp_lanes_is_the_event_simulation(units, forward, gather, factor, prefetch, reshard):
    kwargs = dict(backward_factor=factor, prefetch=prefetch, reshard_after_forward=reshard)
    lanes = fsdp.fsdp_lanes(units, forward, gather, **kwargs)
    step = fsdp.simulate_fsdp_timed(units, forward, gather, **kwargs)
    expected = _lanes_from_events(step)
    got = {(kind, phase): list(starts) for kind, phase, _, starts in lanes.lanes if starts}
    assert got.keys() == expected.keys()
    for key, starts in expected.items():
        assert sorted(got[key]) == pytest.approx(starts, rel=1e-12, abs=1e-15)
    for kind, phase, duration, starts in lanes.lanes:
        if starts:
            bars = [e.duration_s for e in step.events if (e.kind, e.phase) == (kind, phase)]
            assert bars == pytest.approx([duration] * len(bars), rel=1e-12)
    for name in ("step_time_s", "compute_s", "comm_busy_s", "exposed_comm_s"):
        assert getattr(lanes, name) == pytest.approx(getattr(step, name), rel=1e-12, abs=1e-15)
    resident = fsdp.resident_units(step)
    assert lanes.resident.peak == resident.peak
    assert [n for _, n in lanes.resident.curve] == [n for _, n in resident.curve]
    assert [t for t, _ in lanes.resident.curve] == pytest.approx([t for t, _ in resident.curve], rel=1e-12, abs=1e-15)
    idle = fsdp.compute_idle_intervals(step)
    assert len(lanes.idle) == len(idle)
    assert math.fsum(b - a for a, b in lanes.idle) == pytest.approx(step.exposed_comm_s, rel=1e-9, abs=1e-15)


@SETTINGS
@given(schedules)
def test_idle_intervals_add_up_to_the_exposed_time(s):
    for prefetch in (True, False):
        step = _run(s, prefetch)
        idle = fsdp.compute_idle_intervals(step)
        assert all(a < b for a, b in idle)
        assert math.fsum(b - a for a, b in idle) == pytest.approx(step.exposed_comm_s, rel=1e-9, abs=1e-12)
        counts = [n for _, n in fsdp.resident_units(step).curve]
        assert counts[-1] == 0 and min(counts) >= 0 and max(counts) == fsdp.resident_units(step).peak


def test_timed_bad_inputs_named():
    with pytest.raises(ValueError, match="n_units"):
        fsdp.fsdp_lanes(0, 0.01, 0.01)
    with pytest.raises(ValueError, match="n_units"):
        fsdp.simulate_fsdp_timed(fsdp.MAX_UNITS + 1, 0.01, 0.01)
    with pytest.raises(ValueError, match="gather_s"):
        fsdp.fsdp_lanes(4, 0.01, 0.0)
    with pytest.raises(ValueError, match="forward_s"):
        fsdp.simulate_fsdp_timed(4, math.inf, 0.01)
    with pytest.raises(ValueError, match="prefetch"):
        fsdp.fsdp_lanes(4, 0.01, 0.01, prefetch="yes")
    with pytest.raises(ValueError, match="step"):
        fsdp.resident_units("not a step")
    with pytest.raises(ValueError, match="gather_s"):
        fsdp.simulate_fsdp_timed(4, 0.01, 1e-320)
