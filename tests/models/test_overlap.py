import math

import pytest
from hypothesis import given, settings, strategies as st

from models import overlap as O


def test_overlap_by_hand_comm_shorter_than_compute():
    # rate = 0.9 * 0.95 = 0.855; during the 0.5 s collective compute does 0.4275 s of work,
    # the remaining 0.5725 s runs at full speed: step = 1.0725 s.
    r = O.overlap_step(1.0, 0.5, sm_contention=0.1, memory_contention=0.05, compute_mfu=0.5)
    assert r.compute_rate_during_overlap == pytest.approx(0.855)
    assert r.step_s == pytest.approx(1.0725)
    assert r.nominal_step_s == 1.0 and r.serial_step_s == 1.5
    assert r.exposed_comm_s == 0.0 and r.nominal_exposed_comm_s == 0.0
    assert r.compute_stretch_s == pytest.approx(0.0725)
    assert r.compute_slowdown == pytest.approx(0.0725 / 1.0725)
    assert r.nominal_overlap_fraction == 1.0
    assert r.overlap_efficiency == pytest.approx(0.855)
    assert r.mfu_without_collective == 0.5
    assert r.mfu_with_collective == pytest.approx(0.5 / 1.0725)


def test_overlap_by_hand_comm_longer_than_compute():
    # rate 0.8: compute of 1 s finishes at 1.25 s; the 2 s collective leaves 0.75 s exposed.
    r = O.overlap_step(1.0, 2.0, sm_contention=0.2)
    assert r.step_s == pytest.approx(2.0)
    assert r.exposed_comm_s == pytest.approx(0.75)
    assert r.nominal_exposed_comm_s == pytest.approx(1.0)
    assert r.compute_stretch_s == pytest.approx(0.25)
    assert r.compute_slowdown == pytest.approx(0.2)  # runs the whole time at 80%: 20% lost
    assert r.nominal_overlap_fraction == pytest.approx(0.5)
    assert r.overlap_efficiency == pytest.approx(0.5)  # saved 1 s of a 2 s collective


def test_link_sharing_stretches_the_collective():
    r = O.overlap_step(1.0, 0.8, link_share=0.5)
    assert r.comm_alone_s == pytest.approx(1.6)
    assert r.step_s == pytest.approx(1.6)
    assert r.exposed_comm_s == pytest.approx(0.6)
    assert r.nominal_step_s == 1.0


def test_no_contention_is_the_timeline_diagram():
    for compute, comm in ((1.0, 0.3), (1.0, 1.0), (0.4, 1.0)):
        r = O.overlap_step(compute, comm)
        assert r.step_s == pytest.approx(r.nominal_step_s)
        assert r.exposed_comm_s == pytest.approx(r.nominal_exposed_comm_s)
        assert r.mfu_with_collective == pytest.approx(r.mfu_nominal)


def test_article_overlap_efficiency_and_mfu_tax_ranges():
    # Reference article: measured overlap efficiency "between 60% and 90%"; "budget 5-15%" of MFU.
    sm = O.sm_contention_from_channels(16, 132)  # 16 NCCL channels on an H100's 132 SMs
    r = O.overlap_step(1.0, 0.5, sm_contention=sm, memory_contention=0.05, compute_mfu=0.45)
    assert 0.6 <= r.overlap_efficiency <= 0.9
    tax = 1 - r.mfu_with_collective / r.mfu_without_collective
    assert 0.05 <= tax <= 0.15
    assert r.step_s > r.nominal_step_s  # "the step gets no longer" in the diagram, but it does


def test_sm_contention_from_channels():
    assert O.sm_contention_from_channels(16, 132) == pytest.approx(16 / 132)
    with pytest.raises(ValueError, match="^channels"):
        O.sm_contention_from_channels(200, 132)
    with pytest.raises(ValueError, match="^sm_count"):
        O.sm_contention_from_channels(1, 0)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(compute_s=-1), "compute_s"),
        (dict(comm_s=float("nan")), "comm_s"),
        (dict(sm_contention=1.5), "sm_contention"),
        (dict(memory_contention=-0.1), "memory_contention"),
        (dict(link_share=0), "link_share"),
        (dict(link_share=1.2), "link_share"),
        (dict(compute_mfu=0), "compute_mfu"),
        (dict(compute_mfu=2), "compute_mfu"),
    ],
)
def test_overlap_rejects_nonsense(kwargs, name):
    args = dict(compute_s=1.0, comm_s=0.5)
    args.update(kwargs)
    compute, comm = args.pop("compute_s"), args.pop("comm_s")
    with pytest.raises(ValueError) as err:
        O.overlap_step(compute, comm, **args)
    assert str(err.value).startswith(name)


def test_overflow_is_a_clear_error():
    with pytest.raises(ValueError, match="comm_s"):
        O.overlap_step(1.0, 1e300, link_share=1e-300)
    r = O.overlap_step(1e30, 1e29, sm_contention=0.1)
    assert math.isfinite(r.step_s)


times = st.floats(min_value=0, max_value=1e6, allow_nan=False)
fractions = st.floats(min_value=0, max_value=1, allow_nan=False)
shares = st.floats(min_value=1e-3, max_value=1, allow_nan=False)


@settings(max_examples=150, deadline=None)
@given(times, times, fractions, fractions, shares, st.floats(min_value=0.01, max_value=1))
def test_overlap_invariants(compute, comm, sm, mem, share, mfu):
    r = O.overlap_step(compute, comm, sm_contention=sm, memory_contention=mem, link_share=share, compute_mfu=mfu)
    tol = 1e-9 * (1 + compute + r.comm_alone_s)
    assert max(compute, r.comm_alone_s) - tol <= r.step_s <= r.serial_step_s + tol
    if share == 1:
        assert r.step_s >= r.nominal_step_s - tol
    assert r.exposed_comm_s >= 0 and r.compute_stretch_s >= 0
    assert 0 <= r.compute_slowdown <= 1
    assert 0 <= r.overlap_efficiency <= 1
    assert r.mfu_with_collective <= r.mfu_without_collective * (1 + 1e-12)
    for value in r.__dict__.values():
        assert math.isfinite(value)


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=0.01, max_value=100), st.floats(min_value=0.01, max_value=100), fractions, fractions)
def test_more_sm_contention_never_helps(compute, comm, a, b):
    lo, hi = sorted((a, b))
    assert O.overlap_step(compute, comm, sm_contention=lo).step_s <= O.overlap_step(compute, comm, sm_contention=hi).step_s * (1 + 1e-12)


# --------------------------------------------------------------------------- distance from consumer


def test_axis_ranking_follows_the_article():
    # "Ranked from most hideable to least": DDP, FSDP, PP, CP, MoE All-to-All, TP.
    ranked = sorted(O.AXIS_COLLECTIVES.values(), key=lambda a: a.hideability_rank)
    assert [a.axis for a in ranked] == ["dp", "fsdp", "pp", "cp", "ep", "tp"]
    assert O.AXIS_COLLECTIVES["tp"].consumer_is_next_op
    assert O.AXIS_COLLECTIVES["fsdp"].needs_prefetch
    assert "optimizer" in O.AXIS_COLLECTIVES["dp"].consumer


def test_hidden_comm_by_axis():
    dp = O.hidden_comm("dp", 3.0, 10.0)
    assert (dp.hidden_s, dp.exposed_s, dp.hidden_fraction) == (3.0, 0.0, 1.0)
    cp = O.hidden_comm("cp", 3.0, 2.0)
    assert (cp.hidden_s, cp.exposed_s) == (2.0, 1.0)
    tp = O.hidden_comm("tp", 3.0, 10.0)  # consumer is the very next op: nothing hides
    assert (tp.window_s, tp.hidden_s, tp.exposed_s) == (0.0, 0.0, 3.0)
    fsdp = O.hidden_comm("fsdp", 3.0, 10.0, prefetch=False)  # "without it, fully exposed"
    assert fsdp.exposed_s == 3.0
    assert O.hidden_comm("fsdp", 3.0, 10.0).exposed_s == 0.0
    assert O.hidden_comm("ep", 0.0, 0.0).hidden_fraction == 1.0


def test_hidden_comm_rejects_nonsense():
    with pytest.raises(ValueError, match="^axis"):
        O.hidden_comm("zero", 1.0, 1.0)
    with pytest.raises(ValueError, match="^comm_s"):
        O.hidden_comm("dp", -1.0, 1.0)
    with pytest.raises(ValueError, match="^compute_before_consumer_s"):
        O.hidden_comm("dp", 1.0, float("inf"))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(sorted(O.AXIS_COLLECTIVES)), times, times, st.booleans())
def test_hidden_plus_exposed_is_comm(axis, comm, window, prefetch):
    h = O.hidden_comm(axis, comm, window, prefetch=prefetch)
    assert h.hidden_s + h.exposed_s == pytest.approx(comm)
    assert 0 <= h.hidden_s <= min(comm, window) + 1e-12
    assert 0 <= h.hidden_fraction <= 1
