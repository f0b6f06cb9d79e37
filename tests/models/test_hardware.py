import dataclasses
import math

import pytest
from hypothesis import given, settings, strategies as st

from tests.published_cases import published_cases as _published_cases
from models import hardware as H
from models._validate import GiB




# Datasheet numbers, restated independently: (dense bf16 TFLOP/s, HBM GiB, HBM TB/s, scale-up link)
DATASHEET = {
    "a100_40gb": (312, 40, 1.555, "nvlink3"),
    "a100_80gb": (312, 80, 2.039, "nvlink3"),
    "h100_sxm": (989.4, 80, 3.35, "nvlink4"),
    "h200": (989.4, 141, 4.8, "nvlink4"),
    "b200": (2250, 180, 8.0, "nvlink5"),
    "mi300x": (1307.4, 192, 5.3, "infinity_fabric_mi300x"),
}

# One-direction GB/s from the vendor quote: NVLink halves a bidirectional total, networks divide bits by 8.
LINK_GB_PER_S = {
    "nvlink3": 600 / 2,
    "nvlink4": 900 / 2,
    "nvlink5": 1800 / 2,
    "infinity_fabric_mi300x": 896 / 2,
    "pcie4_x16": 16 * 16 * 128 / 130 / 8,  # 31.5
    "pcie5_x16": 32 * 16 * 128 / 130 / 8,  # 63.0
    "ib_hdr": 200 / 8,
    "ib_ndr": 400 / 8,
    "ib_xdr": 800 / 8,
    "roce_400gbe": 400 / 8,
}


@pytest.mark.parametrize("key", sorted(DATASHEET))
def test_gpu_presets_match_datasheets(key):
    tflops, hbm_gib, hbm_tb_per_s, link_key = DATASHEET[key]
    g = H.gpu(key)
    assert g.key == key
    assert g.peak_bf16_dense_flops_per_s == pytest.approx(tflops * 1e12, rel=1e-9)
    assert g.hbm_bytes == hbm_gib * GiB
    assert g.hbm_bandwidth_bytes_per_s == pytest.approx(hbm_tb_per_s * 1e12, rel=1e-9)
    assert g.scale_up_link == link_key and H.link(link_key).key == link_key
    assert g.source


@pytest.mark.parametrize("key", sorted(LINK_GB_PER_S))
def test_link_presets_one_direction_bytes(key):
    link = H.link(key)
    assert link.bandwidth_bytes_per_s == pytest.approx(LINK_GB_PER_S[key] * 1e9, rel=1e-12)
    assert link.vendor_quote and link.source
    assert 1e-7 < link.alpha_s < 1e-4  # microseconds, an estimate


def test_every_preset_is_tested_here():
    assert set(H.GPUS) == set(DATASHEET)
    assert set(H.LINKS) == set(LINK_GB_PER_S)


def test_vendor_quote_says_how_it_was_converted():
    assert "both directions" in H.link("nvlink4").vendor_quote
    assert "bits" in H.link("ib_ndr").vendor_quote
    assert "GT/s" in H.link("pcie5_x16").vendor_quote


def test_megatron_table1_percent_of_peak_uses_a100_peak():
    # Narayanan et al. 2021 Table 1: % of peak = achieved TFLOP/s / 312 (A100 80GB, bf16 dense).
    cases = _published_cases()
    peak = H.gpu("a100_80gb").peak_bf16_dense_flops_per_s
    for cid in ("megatron2021-table1-1.7B", "megatron2021-table1-18B", "megatron2021-table1-145B", "megatron2021-table1-1T"):
        exp = cases[cid]["expected"]
        assert round(100 * exp["tflops_per_gpu"] * 1e12 / peak) == exp["pct_peak"], cid


def test_article_inter_node_is_an_order_of_magnitude_slower():
    # Reference article: NVLink at "hundreds of GB/s"; between nodes "an order of magnitude less".
    for fast, slow in (("nvlink3", "ib_hdr"), ("nvlink4", "ib_ndr"), ("nvlink5", "ib_xdr")):
        f, s = H.link(fast).bandwidth_bytes_per_s, H.link(slow).bandwidth_bytes_per_s
        assert f >= 100e9
        assert 5 <= f / s <= 20


def test_unknown_keys_list_valid_ones():
    with pytest.raises(ValueError) as err:
        H.gpu("h100")
    msg = str(err.value)
    assert msg.startswith("gpu") and "'h100_sxm'" in msg and "'mi300x'" in msg
    with pytest.raises(ValueError) as err:
        H.link("nvlink6")
    assert str(err.value).startswith("link") and "'nvlink5'" in str(err.value)
    with pytest.raises(ValueError, match="^gpu"):
        H.gpu(None)


def test_presets_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        H.gpu("a100_80gb").hbm_bytes = 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        H.link("ib_ndr").alpha_s = 0


def test_unit_helpers():
    assert H.gbit_per_s_to_bytes_per_s(400) == 50e9
    assert H.bidir_to_one_direction_bytes_per_s(900e9) == 450e9
    with pytest.raises(ValueError, match="^gbit_per_s"):
        H.gbit_per_s_to_bytes_per_s(0)
    with pytest.raises(ValueError, match="^bidir_bytes_per_s"):
        H.bidir_to_one_direction_bytes_per_s(float("nan"))


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=1e-6, max_value=1e30, allow_nan=False))
def test_unit_helpers_finite_positive(x):
    for value in (H.gbit_per_s_to_bytes_per_s(x), H.bidir_to_one_direction_bytes_per_s(x)):
        assert math.isfinite(value) and value > 0


def test_short_names_drop_the_vendor_and_the_parenthesised_detail():
    assert H.GPUS["h100_sxm"].short_name == "H100 SXM 80GB"
    assert H.GPUS["b200"].short_name == "B200"
    assert H.GPUS["mi300x"].short_name == "MI300X"
    assert H.LINKS["nvlink4"].short_name == "NVLink 4"
    assert H.LINKS["ib_ndr"].short_name == "InfiniBand NDR 400 Gb/s"
    assert all(spec.short_name and "(" not in spec.short_name for spec in (*H.GPUS.values(), *H.LINKS.values()))


def test_every_gpu_has_its_usual_network_and_the_planner_agrees():
    from models.planner.model import USUAL_NETWORK as PLANNER_NETWORK

    assert set(H.USUAL_NETWORK) == set(H.GPUS)
    assert all(key in H.LINKS for key in H.USUAL_NETWORK.values())
    assert PLANNER_NETWORK is H.USUAL_NETWORK  # one table, one fact


def test_a_scale_up_domain_is_what_the_gpus_fabric_joins():
    """An H100's NVLink joins the 8 GPUs of an HGX board, so a "node of 72" H100s is not one
    NVLink domain; Blackwell's NVL72 joins 72 (issue 43)."""
    assert H.scale_up_domain("h100_sxm", 72) == H.scale_up_domain("h200", 16) == 8
    assert H.scale_up_domain("b200", 72) == 72 and H.GPUS["b200"].scale_up_link == "nvlink5"
    assert H.scale_up_domain("a100_80gb", 16) == 16 and H.scale_up_domain("mi300x", 16) == 8
    assert H.scale_up_domain("h100_sxm", 4) == 4
    assert {g.generation for g in H.GPUS.values() if g.scale_up_max_gpus == 72} == {"blackwell"}
