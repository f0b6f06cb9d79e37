"""Tests for Figure 23's model: strong, weak and training efficiency at each world size."""
import pytest
from hypothesis import given, settings, strategies as st

from tests.published_cases import published_cases as _cases
from models import collectives
from models.scaling import critical_world_size, sample_efficiency, scaling_efficiencies

SETTINGS = settings(max_examples=80, deadline=None)
KW = dict(per_device_batch=2, global_batch=1024, b_noise=2048, step_s_per_sample=0.5, gradient_bytes=14e9,
          alpha_s=4e-6, bandwidth_bytes_per_s=50e9, overlap=0.9)


def test_sample_efficiency_is_mccandlish_e_min_over_e():
    case = _cases()["mccandlish-tradeoff"]
    for ratio in case["inputs"]["B_over_Bnoise"]:
        e_over_e_min = case["expected"]["values"][str(ratio)]["E/E_min"]
        assert sample_efficiency(ratio * 2048, 2048) == pytest.approx(1 / e_over_e_min, rel=1e-12)
    assert sample_efficiency(2048, 2048) == 0.5  # the article's "twice the FLOPs" at B = B_crit


def test_figure_23_default_by_hand():
    """N = 1024: ring AllReduce of 14 GB at 50 GB/s, alpha 4 us: 2*1023*4e-6 + 2*1023/1024*0.28 s;
    90% of it hides under compute."""
    comm = 2 * 1023 * 4e-6 + 2 * 1023 / 1024 * 14e9 / 50e9
    assert comm == pytest.approx(collectives.time_s("allreduce", 14e9, 1024, alpha_s=4e-6, bandwidth_bytes_per_s=50e9))
    (p,) = scaling_efficiencies([1024], **KW)
    weak_step = 1.0 + comm - min(0.9 * comm, 1.0)  # 2 samples x 0.5 s of compute
    strong_step = 0.5 + comm - min(0.9 * comm, 0.5)  # 1024 samples / 1024 devices
    assert p.weak.efficiency == pytest.approx(1.0 / weak_step, rel=1e-12)
    assert p.strong.efficiency == pytest.approx(512.0 / (1024 * strong_step), rel=1e-12)
    assert p.weak_global_batch == 2048 and p.sample_efficiency == 0.5 and p.examples_multiplier == 2.0
    assert p.effective_efficiency == pytest.approx(p.weak.efficiency / 2)
    assert p.throughput_per_s == pytest.approx(2048 / weak_step)
    assert p.strong_batch_per_device == 1.0
    assert critical_world_size(2048, 2) == 1024
    assert round(p.weak.efficiency, 2) == 0.95  # "cluster efficiency can read 95%" while training halves


def test_one_device_is_perfectly_efficient_and_curves_cross_where_batches_match():
    points = {p.world_size: p for p in scaling_efficiencies([1, 2, 512, 4096], **KW)}
    assert points[1].strong.efficiency == points[1].weak.efficiency == 1.0
    # at N = global_batch / per_device_batch both runs give each device the same work
    assert points[512].strong.efficiency == pytest.approx(points[512].weak.efficiency, rel=1e-12)
    assert points[4096].strong.efficiency < points[4096].weak.efficiency


@SETTINGS
@given(st.lists(st.integers(1, 16384), min_size=1, max_size=6), st.sampled_from([1, 2, 8, 64]),
       st.sampled_from([64, 1024, 131072]), st.sampled_from([64, 2048, 131072]), st.floats(0.001, 10),
       st.floats(0.01, 2000), st.floats(1, 1000), st.floats(0, 1))
def test_efficiencies_are_fractions_and_effective_is_their_product(sizes, pdb, gb, noise, step, grad_gb, bw, overlap):
    points = scaling_efficiencies(sizes, per_device_batch=pdb, global_batch=gb, b_noise=noise, step_s_per_sample=step,
                                  gradient_bytes=grad_gb * 1e9, alpha_s=4e-6, bandwidth_bytes_per_s=bw * 1e9, overlap=overlap)
    for n, p in zip(sizes, points):
        assert p.world_size == n
        for value in (p.strong.efficiency, p.weak.efficiency, p.sample_efficiency, p.effective_efficiency):
            assert 0 < value <= 1 + 1e-12
        assert p.effective_efficiency == pytest.approx(p.weak.efficiency * p.sample_efficiency, rel=1e-12)
        assert p.sample_efficiency * p.examples_multiplier == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("call, fragment", [
    (lambda: sample_efficiency(0, 10), "batch"),
    (lambda: sample_efficiency(10, -1), "b_noise"),
    (lambda: critical_world_size(10, 0), "per_device_batch"),
    (lambda: scaling_efficiencies([8], **{**KW, "step_s_per_sample": 0}), "step_s_per_sample"),
    (lambda: scaling_efficiencies([8], **{**KW, "overlap": 1.5}), "overlap"),
    (lambda: scaling_efficiencies([0], **KW), "world_sizes"),
])
def test_invalid_inputs_name_the_argument(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call()
