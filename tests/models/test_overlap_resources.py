"""Figure 06's model: the three resources an overlapped collective takes, from hardware numbers."""
import pytest
from hypothesis import given, settings, strategies as st

from models import hardware as H
from models import overlap as O

H100_HBM = H.GPUS["h100_sxm"].hbm_bandwidth_bytes_per_s


def test_sm_counts_match_the_whitepapers():
    assert H.sm_count("a100_80gb") == 108 and H.sm_count("h100_sxm") == 132 and H.sm_count("mi300x") == 304
    assert set(H.SM_COUNTS) == set(H.GPUS)
    with pytest.raises(ValueError, match="^gpu"):
        H.sm_count("v100")


def test_hbm_share_by_hand():
    # 450 GB/s of ring AllReduce on the link: 3 x 450 = 1350 GB/s of an H100's 3350 GB/s.
    assert O.hbm_share_from_link(450e9, H100_HBM) == pytest.approx(1350 / 3350)
    assert O.hbm_share_from_link(2000e9, H100_HBM) == 1.0  # cannot take more than all of it


def test_three_resources_by_hand():
    # 10 ms GEMM, 30% memory bound; 2 GB over 450 GB/s = 4.44 ms; 16 channels of 132 SMs.
    r = O.three_resource_overlap(10e-3, 2e9, 450e9, channels=16, sm_count=132, mem_bound=0.3, hbm_bytes_per_s=H100_HBM)
    comm = 2e9 / 450e9
    sm, mem = 16 / 132 * 0.7, 1350 / 3350 * 0.3
    rate = (1 - sm) * (1 - mem)
    assert r.comm_s == pytest.approx(comm)
    assert (r.sm_contention, r.memory_contention) == pytest.approx((sm, mem))
    assert r.step_s == pytest.approx(10e-3 + comm * (1 - rate))  # the collective ends first; the GEMM catches up
    assert r.exposed_comm_s == 0
    assert r.overlap_efficiency == pytest.approx(rate)
    assert r.compute_slowdown == pytest.approx(1 + comm * (1 - rate) / 10e-3)
    assert r.slowed_until_s == pytest.approx(comm)  # the GEMM runs slowed only while the collective runs
    # Reference article: efficiency "between 60% and 90%", a tax of "5-15%" on a busy step.
    assert 0.6 <= r.overlap_efficiency <= 0.9 and 1.05 <= r.compute_slowdown <= 1.15


def test_a_collective_longer_than_the_gemm_is_partly_exposed():
    # 40 ms on a 50 GB/s NIC: the GEMM runs slowed throughout and ends at 10 / rate ms.
    r = O.three_resource_overlap(10e-3, 2e9, 50e9, channels=16, sm_count=132, mem_bound=0.3, hbm_bytes_per_s=H100_HBM)
    rate = (1 - 16 / 132 * 0.7) * (1 - 150 / 3350 * 0.3)
    assert r.step_s == pytest.approx(40e-3)
    assert r.compute_overlapped_s == pytest.approx(10e-3 / rate)
    assert r.slowed_until_s == pytest.approx(10e-3 / rate)  # slowed all the way
    assert r.exposed_comm_s == pytest.approx(40e-3 - 10e-3 / rate)
    assert r.overlap_efficiency == pytest.approx(10e-3 / 40e-3)


def test_rejects_nonsense():
    kwargs = dict(channels=16, sm_count=132, mem_bound=0.3, hbm_bytes_per_s=H100_HBM)
    with pytest.raises(ValueError, match="^mem_bound"):
        O.three_resource_overlap(1e-3, 1e6, 1e9, **{**kwargs, "mem_bound": 1.5})
    with pytest.raises(ValueError, match="^channels"):
        O.three_resource_overlap(1e-3, 1e6, 1e9, **{**kwargs, "channels": 200})
    with pytest.raises(ValueError, match="^link_bytes_per_s"):
        O.three_resource_overlap(1e-3, 1e6, 0, **kwargs)


@settings(max_examples=100, deadline=None)
@given(st.floats(1e-4, 1), st.floats(0, 1e11), st.floats(1e9, 1e12), st.sampled_from([1, 4, 16, 32, 64]),
       st.sampled_from(sorted(set(H.SM_COUNTS.values()))), st.floats(0, 1))
def test_three_resource_invariants(compute, comm_bytes, bw, channels, sms, mem_bound):
    r = O.three_resource_overlap(compute, comm_bytes, bw, channels=channels, sm_count=sms, mem_bound=mem_bound,
                                 hbm_bytes_per_s=H100_HBM)
    assert r.compute_slowdown >= 1 and 0 <= r.overlap_efficiency <= 1
    assert max(compute, r.comm_s) * (1 - 1e-12) <= r.step_s <= (compute + r.comm_s) * (1 + 1e-12)
    assert r.step_s == pytest.approx(max(r.compute_overlapped_s, r.comm_s))
    assert r.exposed_comm_s == pytest.approx(r.step_s - r.compute_overlapped_s, abs=1e-15)
    alone = O.three_resource_overlap(compute, comm_bytes, bw, channels=1, sm_count=sms, mem_bound=mem_bound,
                                     hbm_bytes_per_s=H100_HBM)
    assert alone.step_s <= r.step_s * (1 + 1e-12)  # more channels never shorten the step
