import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.published_cases import published_cases as _cases
from models import memory as m

SETTINGS = settings(max_examples=100, deadline=None)




@pytest.fixture(scope="module")
def cases():
    return _cases()


# ---- published cases -------------------------------------------------------------------------

def test_zero_fig1_7_5b_nd64(cases):
    case = cases["zero-fig1-7.5B-nd64"]
    inputs = case["inputs"]
    got = [
        m.model_states(inputs["params"], inputs["dp_degree"], s, param_bytes=inputs["bytes_param_fp16"],
                       grad_bytes=inputs["bytes_grad_fp16"],
                       optimizer_bytes=inputs["K_optimizer_bytes_per_param"]).total_bytes / m.GB
        for s in m.STAGES
    ]
    printed = case["expected"]
    # Printed figures are rounded to 3 significant digits.
    for value, key in zip(got, ("baseline_GB", "ZeRO1_GB", "ZeRO2_GB", "ZeRO3_GB")):
        assert float(f"{value:.3g}") == printed[key]
    checks = case["formula_check_GB"]
    for value, key in zip(got, ("baseline_DDP", "ZeRO1_Pos", "ZeRO2_Pos+g", "ZeRO3_Pos+g+p")):
        assert value == pytest.approx(checks[key], abs=1e-4)


def test_zero_table1_grid(cases):
    case = cases["zero-table1-grid"]
    k = case["inputs"]["K"]
    n = 0
    for name, params in case["inputs"]["models"].items():
        for dp in case["inputs"]["dp_degrees"]:
            expected = case["expected"][name][str(dp)]
            for stage, key in ((1, "Pos"), (2, "Pos+g"), (3, "Pos+g+p")):
                got = m.model_states(params, dp, stage, optimizer_bytes=k).total_bytes / m.GB
                # Table entries are rounded to 2 decimals (or 3 significant digits for tiny ones).
                assert got == pytest.approx(expected[key], abs=0.006, rel=5e-3), (name, dp, key)
                n += 1
    assert n == 3 * 6 * 3


def test_zero_comm_volume(cases):
    expected = cases["zero-comm-volume"]["expected"]
    for stage, key in zip(m.STAGES, ("DDP_allreduce", "ZeRO1", "ZeRO2", "ZeRO3")):
        assert m.comm_volume_psi(stage) == expected[key]
    assert m.comm_volume_elements(7.5e9, 3) == 3 * 7.5e9
    assert m.comm_volume_elements(7.5e9, 3, reshard_after_forward=False) == 2 * 7.5e9


def test_deepspeed_zero2_t5_3b(cases):
    case = cases["deepspeed-zero2-t5-3b"]
    inputs = case["inputs"]
    for flag, key in ((True, "cpu_offload=1"), (False, "cpu_offload=0")):
        est = m.deepspeed_zero2_estimate(
            inputs["total_params"], num_gpus_per_node=inputs["num_gpus_per_node"],
            num_nodes=inputs["num_nodes"], cpu_offload=flag,
            additional_buffer_factor=inputs["additional_buffer_factor"])
        assert round(est.cpu_gib, 2) == case["expected"][key]["per_cpu_GB"]
        assert round(est.gpu_gib, 2) == case["expected"][key]["per_gpu_GB"]


def test_deepspeed_zero3_t5_3b(cases):
    case = cases["deepspeed-zero3-t5-3b"]
    inputs = case["inputs"]
    for key, expected in case["expected"].items():
        flags = dict(part.split("=") for part in key.split(","))
        est = m.deepspeed_zero3_estimate(
            inputs["total_params"], inputs["largest_layer_params"],
            num_gpus_per_node=inputs["num_gpus_per_node"], num_nodes=inputs["num_nodes"],
            cpu_offload=flags["offload"] == "1", cpu_offload_params=flags["offload_params"] == "1",
            zero_init=flags["zero_init"] == "1")
        assert round(est.cpu_gib, 2) == expected["cpu"], key
        assert round(est.gpu_gib, 2) == expected["gpu"], key
    assert len(case["expected"]) == 6


def test_deepspeed_zero3_t5_large_manual(cases):
    case = cases["deepspeed-zero3-t5-large-manual"]
    inputs, expected = case["inputs"], case["expected"]

    def mib(flags):
        est = m.deepspeed_zero3_estimate(inputs["total_params"], inputs["largest_layer_params"],
                                         num_gpus_per_node=inputs["total_gpus"], **flags)
        return int(est.gpu_bytes) >> 20, int(est.largest_layer_bytes) >> 20

    case1, largest = mib(dict(cpu_offload=False, cpu_offload_params=False))
    case2, _ = mib(dict(cpu_offload=True, cpu_offload_params=True))
    case3, _ = mib(dict(cpu_offload=True, cpu_offload_params=False))
    assert abs(largest - expected["largest_layer_memory_MB"]) <= 1
    assert abs(case1 - expected["case1_no_offload_MB"]) <= 1
    assert abs(case2 - expected["case2_offload_all_MB"]) <= 1
    assert abs(case3 - expected["case3_offload_opt_MB"]) <= 1


def test_deepspeed_zero2_gpu_differs_from_zero_paper():
    # DeepSpeed's ZeRO-2 GPU figure keeps fp16 params AND grads whole: 4P + 16P/N, not 2P + 14P/N.
    p, n = 1e9, 8
    est = m.deepspeed_zero2_estimate(p, num_gpus_per_node=n, cpu_offload=False)
    assert est.gpu_bytes == 4 * p + 16 * p / n
    assert m.model_states(p, n, 2).total_bytes == 2 * p + 14 * p / n


# ---- reference article ---------------------------------------------------------------------

def test_article_ledger_fractions():
    assert m.ledger_fraction(8) == 0.125
    assert round(100 * m.ledger_fraction(64), 1) == 1.6
    # "eleven percentage points" between them
    assert round(100 * (m.ledger_fraction(8) - m.ledger_fraction(64))) == 11


def test_article_stage_formulas():
    psi, n = 1.0, 4
    assert m.model_states(psi, n, 0).total_bytes == 16
    assert m.model_states(psi, n, 1).total_bytes == 4 + 12 / n
    assert m.model_states(psi, n, 2).total_bytes == 2 + 14 / n
    assert m.model_states(psi, n, 3).total_bytes == 16 / n


def test_ledger_fraction_other_stages():
    assert m.ledger_fraction(4, 1) == pytest.approx((4 + 3) / 16)
    assert m.ledger_fraction(4, 0) == 1.0


def test_optimizer_table():
    assert set(m.OPTIMIZERS) == {"adam_mixed", "sgd_momentum", "adam_fp32"}
    assert m.OPTIMIZERS["adam_mixed"].bytes_per_param == 16
    assert m.OPTIMIZERS["sgd_momentum"].bytes_per_param == 12
    assert m.OPTIMIZERS["adam_fp32"].bytes_per_param == 16
    assert m.model_states_for(1e9, 1, 0, "sgd_momentum").total_bytes == 12e9
    assert m.STAGE_LABELS == {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}


def test_comm_collectives_shapes():
    ops = [(c.op, c.tensor, c.phase) for c in m.comm_collectives(3)]
    assert ops == [("allgather", "params", "forward"), ("allgather", "params", "backward"),
                   ("reducescatter", "grads", "backward")]
    assert [c.op for c in m.comm_collectives(0)] == ["allreduce"]


# ---- offload & FSDP & HSDP -----------------------------------------------------------------

def test_offload_matches_deepspeed_gpu_side():
    p, n = 2851e6, 8
    zero2 = m.offloaded_model_states(p, n, 2, offload_optimizer=True)
    assert zero2.device.total_bytes == m.deepspeed_zero2_estimate(p, num_gpus_per_node=n).gpu_bytes
    assert zero2.host.total_bytes == pytest.approx(14 * p / n)
    zero3 = m.offloaded_model_states(p, n, 3, offload_optimizer=True)
    ds = m.deepspeed_zero3_estimate(p, 0.0, num_gpus_per_node=n, cpu_offload=True, cpu_offload_params=False)
    assert zero3.device.total_bytes == pytest.approx(ds.gpu_bytes, abs=1)
    both = m.offloaded_model_states(p, n, 3, offload_optimizer=True, offload_params=True)
    assert both.device.total_bytes == 0
    assert both.host.total_bytes == pytest.approx(16 * p / n)


def test_offload_needs_sharding():
    with pytest.raises(ValueError, match="offload_optimizer"):
        m.offloaded_model_states(1e9, 8, 1, offload_optimizer=True)
    with pytest.raises(ValueError, match="offload_params"):
        m.offloaded_model_states(1e9, 8, 2, offload_params=True)


def test_fsdp_peak_components():
    peak = m.fsdp_peak_memory(8e9, 8, 0.25e9)
    assert peak.resident_bytes == 16e9
    assert peak.gathered_params_bytes == 0.5e9
    assert peak.unsharded_grads_bytes == 0.5e9
    assert peak.peak_bytes == 17e9
    assert m.fsdp_peak_memory(8e9, 8, 0.25e9, prefetch=True).peak_bytes == 17.5e9
    assert m.fsdp_peak_memory(8e9, 8, 0.25e9, reshard_after_forward=False).peak_bytes == 16e9 + 16e9 + 0.5e9
    # Same 4 * largest_layer term as DeepSpeed's ZeRO-3 estimator.
    ds = m.deepspeed_zero3_estimate(8e9, 0.25e9, num_gpus_per_node=8, cpu_offload=False)
    assert ds.gpu_bytes == pytest.approx(peak.peak_bytes + 2 * 8e9 / 8)  # DeepSpeed counts 18 B/param


def test_hsdp_memory_depends_on_group_only():
    a = m.hsdp_model_states(7e9, 64, 8)
    b = m.hsdp_model_states(7e9, 512, 8)
    assert a == b == m.model_states(7e9, 8, 3)
    with pytest.raises(ValueError, match="shard_group_size=3 does not divide world_size=64"):
        m.hsdp_model_states(7e9, 64, 3)


# ---- properties ----------------------------------------------------------------------------

params_st = st.floats(min_value=1.0, max_value=1e15, allow_nan=False)
dp_st = st.integers(min_value=1, max_value=1 << 20)
bytes_st = st.sampled_from([0, 1, 2, 4, 8, 12, 1.5])


@SETTINGS
@given(params_st, dp_st, bytes_st, bytes_st, bytes_st)
def test_monotone_in_stage_and_parts_sum(params, dp, pb, gb, ob):
    totals = []
    for stage in m.STAGES:
        s = m.model_states(params, dp, stage, param_bytes=pb, grad_bytes=gb, optimizer_bytes=ob)
        parts = (s.params_bytes, s.grads_bytes, s.optimizer_bytes, s.total_bytes)
        assert all(math.isfinite(x) and x >= 0 for x in parts)
        assert s.total_bytes == pytest.approx(s.params_bytes + s.grads_bytes + s.optimizer_bytes, rel=1e-12)
        totals.append(s.total_bytes)
    assert all(a >= b * (1 - 1e-12) for a, b in zip(totals, totals[1:]))


@SETTINGS
@given(params_st, dp_st, dp_st, st.sampled_from(m.STAGES))
def test_monotone_in_dp(params, dp1, dp2, stage):
    small, large = sorted((dp1, dp2))
    assert m.model_states(params, small, stage).total_bytes >= m.model_states(params, large, stage).total_bytes


@SETTINGS
@given(params_st, dp_st, st.sampled_from(m.STAGES))
def test_matches_numpy_oracle(params, dp, stage):
    shares = np.ones(3)  # optimizer, grads, params
    shares[:stage] = 1 / dp
    expected = float(np.dot(np.array([12.0, 2.0, 2.0]) * params, shares))
    assert m.model_states(params, dp, stage).total_bytes == pytest.approx(expected, rel=1e-12)


@SETTINGS
@given(st.sampled_from(m.STAGES), st.booleans())
def test_allreduce_volume_equals_rs_plus_ag(stage, reshard):
    ops = m.comm_collectives(stage, reshard_after_forward=reshard)
    volume = m.comm_volume_psi(stage, reshard_after_forward=reshard)
    ar = m.comm_collectives(0)[0]
    if stage in (1, 2):
        # ZeRO-1/2 replace the AllReduce by its two halves: same volume.
        assert {c.op for c in ops} == {"reducescatter", "allgather"}
        assert volume == ar.psi
    assert volume == sum(c.psi for c in ops)
    assert volume == (3.0 if stage == 3 and reshard else 2.0)


@SETTINGS
@given(params_st, dp_st, st.sampled_from([2, 3]), st.booleans(), st.booleans())
def test_offload_conserves_bytes(params, dp, stage, opt, par):
    if par and stage < 3:
        return
    split = m.offloaded_model_states(params, dp, stage, offload_optimizer=opt, offload_params=par)
    base = m.model_states(params, dp, stage)
    assert split.device.total_bytes + split.host.total_bytes == pytest.approx(base.total_bytes, rel=1e-12)
    assert split.device.total_bytes <= base.total_bytes


@SETTINGS
@given(params_st, dp_st, st.floats(min_value=1e-6, max_value=1.0), st.booleans(), st.booleans())
def test_fsdp_peak_at_least_resident(params, dp, unit_fraction, prefetch, reshard):
    peak = m.fsdp_peak_memory(params, dp, params * unit_fraction, prefetch=prefetch,
                              reshard_after_forward=reshard)
    assert math.isfinite(peak.peak_bytes)
    assert peak.peak_bytes == pytest.approx(
        peak.resident_bytes + peak.gathered_params_bytes + peak.unsharded_grads_bytes, rel=1e-12)
    assert peak.peak_bytes >= m.model_states(params, dp, 3).total_bytes


@SETTINGS
@given(st.one_of(st.floats(max_value=0.0), st.just(math.nan), st.just(math.inf), st.text(max_size=3),
                 st.booleans()))
def test_bad_params_rejected(bad):
    with pytest.raises(ValueError, match="params"):
        m.model_states(bad, 8, 3)
    with pytest.raises(ValueError, match="params"):
        m.comm_volume_elements(bad, 3)


@SETTINGS
@given(st.one_of(st.integers(max_value=0), st.floats(min_value=0.1, max_value=100).filter(lambda x: x % 1),
                 st.just(math.inf), st.booleans()))
def test_bad_dp_rejected(bad):
    with pytest.raises(ValueError, match="^dp"):
        m.model_states(1e9, bad, 3)


def test_bad_args_named():
    with pytest.raises(ValueError, match="stage"):
        m.model_states(1e9, 8, 4)
    with pytest.raises(ValueError, match="param_bytes"):
        m.model_states(1e9, 8, 3, param_bytes=-1)
    with pytest.raises(ValueError, match="optimizer_bytes"):
        m.model_states(1e9, 8, 3, optimizer_bytes=math.nan)
    with pytest.raises(ValueError, match="dp"):
        m.model_states(1e9, 2**50, 3)
    with pytest.raises(ValueError, match="optimizer"):
        m.model_states_for(1e9, 8, 3, "lion")
    with pytest.raises(ValueError, match="reshard_after_forward"):
        m.comm_volume_psi(3, reshard_after_forward="yes")
    with pytest.raises(ValueError, match="largest_layer_params"):
        m.deepspeed_zero3_estimate(1e9, 2e9)
    with pytest.raises(ValueError, match="num_nodes"):
        m.deepspeed_zero2_estimate(1e9, num_nodes=0)
    with pytest.raises(ValueError, match="largest_unit_params"):
        m.fsdp_peak_memory(1e9, 8, 0)
    with pytest.raises(ValueError, match="shard_group_size"):
        m.hsdp_model_states(1e9, 8, 0)


def test_huge_inputs_do_not_overflow():
    s = m.model_states(1e30, 1, 0)
    assert s.total_bytes == 16e30
    with pytest.raises(ValueError, match="params"):
        m.model_states(1e308, 1, 0)
    with pytest.raises(ValueError, match="total_params"):
        m.deepspeed_zero2_estimate(1e308, num_gpus_per_node=8)
    assert m.deepspeed_zero3_estimate(1e30, 1e9, num_gpus_per_node=8).cpu_bytes > 0


def test_optimizer_step_traffic_reads_and_writes_the_state_once_each():
    # grad read + K read + K written + working weight written: 2 + 12 + 12 + 2 for bf16 gradients.
    assert m.optimizer_step_traffic_bytes() == 28
    assert m.optimizer_step_traffic_bytes(grad_bytes=4) == 30  # Megatron-LM's fp32 main gradients
    from models import planner, step_timeline
    assert planner.ADAM_STEP_BYTES == 30
    assert step_timeline.OPTIMIZER_BYTES_PER_PARAM == 30  # Figure 18 counts as the planner does
    with pytest.raises(ValueError, match="optimizer_bytes"):
        m.optimizer_step_traffic_bytes(optimizer_bytes=-1)
