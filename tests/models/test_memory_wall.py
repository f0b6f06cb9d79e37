"""Figure 07's model: DDP's per-device memory does not move with N; the aggregate does."""
import pytest
from hypothesis import given, settings, strategies as st

from models import hardware as H
from models import memory as M
from tests.published_cases import published_cases


def test_article_7b_does_not_fit_an_80gb_card():
    # Reference article: 16 bytes per parameter, so 7B needs 112 GB, more than an 80 GB accelerator.
    hbm = H.GPUS["h100_sxm"].hbm_bytes
    for n in (1, 8, 4096):
        r = M.ddp_memory(7e9, n, hbm)
        assert r.per_device_bytes == 112e9 and r.aggregate_bytes == n * 112e9 and not r.fits
        assert r.aggregate_hbm_bytes == n * hbm
    assert M.ddp_memory(7e9, 1, hbm).largest_params_that_fit == pytest.approx(80 * 2**30 / 16)


def test_zero_paper_baseline_is_the_ddp_bar():
    case = published_cases()["zero-fig1-7.5B-nd64"]
    r = M.ddp_memory(case["inputs"]["params"], case["inputs"]["dp_degree"], H.GPUS["h100_sxm"].hbm_bytes)
    assert r.states.total_bytes / 1e9 == pytest.approx(case["expected"]["baseline_GB"])


def test_activations_add_per_device():
    r = M.ddp_memory(1e9, 64, 80e9, optimizer="adam_fp32", activations_bytes=30e9)
    assert r.per_device_bytes == 16e9 + 30e9 and r.fits
    assert M.ddp_memory(1e9, 64, 40e9, activations_bytes=30e9).fits is False


def test_rejects_nonsense():
    with pytest.raises(ValueError, match="^devices"):
        M.ddp_memory(1e9, 0, 80e9)
    with pytest.raises(ValueError, match="^activations_bytes"):
        M.ddp_memory(1e9, 1, 80e9, activations_bytes=-1)
    with pytest.raises(ValueError, match="^optimizer"):
        M.ddp_memory(1e9, 1, 80e9, optimizer="lion")


@settings(max_examples=80, deadline=None)
@given(st.floats(1e6, 1e13), st.integers(1, 16384), st.sampled_from(sorted(M.OPTIMIZERS)), st.floats(0, 1e12),
       st.sampled_from(sorted(H.GPUS)))
def test_per_device_memory_is_independent_of_n(params, n, optimizer, activations, gpu):
    hbm = H.GPUS[gpu].hbm_bytes
    one, many = (M.ddp_memory(params, k, hbm, optimizer=optimizer, activations_bytes=activations) for k in (1, n))
    assert many.per_device_bytes == one.per_device_bytes and many.fits == one.fits
    assert many.aggregate_bytes == pytest.approx(n * one.aggregate_bytes)
    assert many.per_device_bytes == M.model_states_for(params, 1, 0, optimizer).total_bytes + activations
    assert one.largest_params_that_fit * M.OPTIMIZERS[optimizer].bytes_per_param == pytest.approx(hbm)
