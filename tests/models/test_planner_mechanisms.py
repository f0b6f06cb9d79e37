"""The planner's mechanisms (models/planner/cost.py) one at a time, each against its own
arithmetic, and the calibration's bands and memory verdicts (models/planner/validation.py)."""
from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from models import hardware, hsdp, overlap
from models._validate import GiB
from models.planner import Cluster, Plan, cost, validation
from models import planner

SETTINGS = settings(max_examples=40, deadline=None)
GPT3 = planner.model_preset("gpt3-175b")
LLAMA8 = planner.model_preset("llama3-8b")


def ctx_for(model, gpu, gpus=8, **cluster):
    return cost._Context(model, Cluster(gpu, gpus, min(8, gpus), **cluster))


# ---- compute ------------------------------------------------------------------------------

@pytest.mark.parametrize("gpu", sorted(hardware.GPUS))
def test_gemms_run_at_the_gpus_best_matmul_rate_times_one_shape_efficiency(gpu):
    ctx = ctx_for(GPT3, gpu)
    spec = hardware.GPUS[gpu]
    assert ctx.gemm_rate == pytest.approx(spec.peak_bf16_dense_flops_per_s * spec.matmul_fraction
                                          * cost.GEMM_SHAPE_EFFICIENCY)
    m = k = n = 16384  # compute-bound everywhere
    assert ctx.gemm_s(m, k, n) == pytest.approx(2 * m * k * n / ctx.gemm_rate)


def test_h100_reaches_a_smaller_share_of_its_peak_than_a100():
    # Bekman's MAMF: 271.2 of 312 on A100, 794.5 of 989 on H100
    assert hardware.GPUS["a100_80gb"].matmul_fraction == pytest.approx(271.2 / 312, abs=0.001)
    assert hardware.GPUS["h100_sxm"].matmul_fraction == pytest.approx(794.5 / 989, abs=0.001)
    a100, h100 = ctx_for(GPT3, "a100_80gb"), ctx_for(GPT3, "h100_sxm")
    assert h100.gemm_rate / h100.peak < a100.gemm_rate / a100.peak


def test_attention_kernel_follows_the_framework_on_hopper_not_on_ampere():
    h100, a100 = ctx_for(LLAMA8, "h100_sxm"), ctx_for(LLAMA8, "a100_80gb")
    # FlashAttention-2 (PyTorch SDPA) reaches 34% of H100's peak, cuDNN's Hopper kernel 75%
    assert h100.attention_rate("megatron", True) / h100.attention_rate("fsdp", True) == pytest.approx(0.75 / 0.34)
    assert a100.attention_rate("megatron", True) == a100.attention_rate("fsdp", True) == pytest.approx(
        a100.peak * cost.ATTENTION_EFFICIENCY)


def test_eager_kernels_move_more_bytes_than_fused_ones():
    ctx = ctx_for(LLAMA8, "h100_sxm")
    args = (1, 1, 1, 1, False, "none", True, False)
    fused, eager = cost._layer(ctx, *args, "megatron", False), cost._layer(ctx, *args, "fsdp", False)
    ledger, _ = cost._layer_ledger(LLAMA8, LLAMA8.seq_len, 1, 1, False, "none", True, False)
    extra = (cost.ELEMENTWISE_TRAFFIC_UNFUSED - cost.ELEMENTWISE_TRAFFIC) * ledger / ctx.hbm_rate
    attention = 4.0 * LLAMA8.seq_len ** 2 * LLAMA8.hidden * 0.5
    kernels = attention / ctx.attention_rate("fsdp", True) - attention / ctx.attention_rate("megatron", True)
    assert eager.forward_s - fused.forward_s == pytest.approx(extra + kernels)


def test_models_without_dropout_keep_no_masks():
    with_dropout = replace(LLAMA8, dropout=True)
    for tp, sp in ((1, False), (8, True)):
        kept, _ = cost._layer_ledger(with_dropout, 4096, 1, tp, sp, "none", True, False)
        without, _ = cost._layer_ledger(LLAMA8, 4096, 1, tp, sp, "none", True, False)
        assert kept - without == pytest.approx(2 * 4096 * LLAMA8.hidden / (tp if sp else 1))


# ---- communication -------------------------------------------------------------------------

def test_ring_latency_is_nccls_base_plus_its_hops():
    ctx = ctx_for(GPT3, "h100_sxm", 64)
    nvlink, network = ctx.intra.alpha_s, ctx.inter.alpha_s
    # 8 ranks inside a node: 7 NVLink hops
    assert ctx.link("allgather", 1, 8)[0] == pytest.approx(cost.NCCL_BASE_LATENCY_S + 7 * nvlink)
    # 64 ranks over 8 nodes: 63 steps, 7 of them crossing the network; AllReduce twice over
    assert ctx.link("allgather", 1, 64)[0] == pytest.approx(cost.NCCL_BASE_LATENCY_S + 56 * nvlink + 7 * network)
    assert ctx.link("allreduce", 1, 64)[0] == pytest.approx(cost.NCCL_BASE_LATENCY_S + 112 * nvlink + 14 * network)


def test_all_to_all_and_sends_use_one_nic_rings_use_the_nodes():
    ctx = ctx_for(GPT3, "h100_sxm", 64)
    nic = ctx.network * ctx.inter.achievable_fraction
    nvlink = ctx.intra.bandwidth_bytes_per_s * ctx.intra.achievable_fraction
    assert ctx.link("alltoall", 1, 64)[1] == pytest.approx(nic)
    assert ctx.link("sendrecv", 8, 8)[1] == pytest.approx(nic)
    assert ctx.link("allgather", 1, 64)[1] == pytest.approx(min(nvlink, 8 * nic))
    assert ctx.link("allgather", 1, 64, nics=1)[1] == pytest.approx(nic)


def test_nccl_reaches_its_measured_fraction_of_each_link():
    links = hardware.LINKS
    assert links["nvlink3"].achievable_fraction == pytest.approx(235 / 300)
    assert links["nvlink4"].achievable_fraction == pytest.approx(370 / 450)
    assert links["ib_ndr"].achievable_fraction == pytest.approx(47 / 50)


def test_overlapped_communication_slows_the_compute_it_hides_behind():
    ctx = ctx_for(GPT3, "h100_sxm")
    share = overlap.sm_contention_from_channels(cost.NCCL_CHANNELS, hardware.sm_count("h100_sxm"))
    assert ctx.contention == pytest.approx(share / (1 - share))
    assert ctx.behind(1.0, 2.0) == pytest.approx(ctx.contention)
    assert ctx.behind(3.0, 2.0) == pytest.approx(1.0 + 2.0 * ctx.contention)


@SETTINGS
@given(comm=st.floats(0, 10), window=st.floats(0, 10))
def test_what_hides_costs_less_than_what_does_not(comm, window):
    ctx = ctx_for(GPT3, "a100_80gb")
    added = ctx.behind(comm, window)
    assert max(0.0, comm - window) <= added <= comm + 1e-12


def test_tp_comm_overlap_hides_tp_traffic_behind_the_gemms_it_feeds():
    model, cluster = planner.model_preset("llama3-70b"), planner.cluster_preset("dgx-h100", 64)
    plain = Plan(tp=8, pp=1, dp=8, microbatch=1, global_batch=64, zero=1, recompute="none")
    overlapped = replace(plain, tp_comm_overlap=True)
    a, b = planner.predict(model, cluster, plain), planner.predict(model, cluster, overlapped)
    assert b.time_breakdown["tp_comm"] < a.time_breakdown["tp_comm"]
    assert b.step_time_s < a.step_time_s
    with pytest.raises(ValueError, match="framework='megatron'"):
        replace(plain, framework="fsdp", tp_comm_overlap=True)
    with pytest.raises(ValueError, match="sequence_parallel"):
        replace(plain, sequence_parallel=False, tp_comm_overlap=True)


def test_calls_per_step_follow_each_frameworks_buckets():
    ctx = ctx_for(GPT3, "a100_80gb", 1024)
    terms = cost._terms(ctx, 1, 1, 1024, 1, 1, 1, 1, "full", False, "1f1b", True, 1024)
    terms.framework = "megatron"
    # Megatron-LM's bucket: max(4e7, 1e6 x dp) parameters = 1.024e9 here
    assert cost._calls(terms, 10e9, 96, 1) == 10
    assert cost._calls(terms, 10e9, 96, 3) == 96  # Megatron-FSDP: by layer
    terms.framework = "fsdp"
    assert cost._calls(terms, 10e9, 96, 3) == cost._calls(terms, 10e9, 96, 1) == 96
    assert cost._calls(terms, 10e9, 96, 0) == pytest.approx(10e9 / (25 * 2**20 / 4), rel=0.01)  # DDP's 25 MiB
    terms.framework = "deepspeed"
    assert cost._calls(terms, 10e9, 96, 3, gather=True) == 96 * cost.DEEPSPEED_SUBMODULES_PER_LAYER
    assert cost._calls(terms, 10e9, 96, 3) == 20  # reduce buckets of 5e8 elements


def test_zero3_at_a_fixed_batch_is_communication_bound_the_way_table_2_shows():
    """Narayanan et al. 2021 Table 2: GPT-3 175B with ZeRO-3 alone, global batch 1,536, one
    microbatch per GPU: 144, 88, 44 TFLOP/s on 384, 768, 1,536 A100s; the step stays ~67 s."""
    checks = {c.case.case_id: c for c in planner.validate()}
    steps = []
    for gpus in (384, 768, 1536):
        case = checks[f"sc21-t2-zero3-175b-{gpus}gpu"].case
        steps.append(planner.predict(case.model, case.cluster, case.plan).step_time_s)
    assert steps[0] > steps[1]  # the step shrinks from 384 to 768 GPUs, but
    assert steps[2] == pytest.approx(steps[1], rel=0.15)  # not from 768 to 1,536: the traffic per GPU is the same
    fsdp = replace(case.plan, framework="fsdp")
    assert planner.predict(case.model, case.cluster, fsdp).step_time_s < steps[2] / 2  # what FSDP's layers would do


def test_fsdp_in_a_pipeline_reduces_gradients_asynchronously_behind_the_whole_microbatch():
    """Llama 3 Sec. 3.3.2: Meta's FSDP shards gradients (ZeRO-2's memory) and reduces them
    asynchronously, so a pipeline rank's per-microbatch ReduceScatter hides behind the
    forwards and backwards that follow it; without a pipeline (or under Megatron-LM) it
    must finish inside that microbatch's backward."""
    case = {c.case.case_id: c for c in planner.validate()}["llama3_405b_t4_8192gpu"].case
    assert case.plan.zero == 2 and case.plan.framework == "fsdp" and case.plan.pp > 1
    ctx = cost._Context(case.model, case.cluster)
    p = case.plan
    terms = cost._terms(ctx, p.tp, p.pp, p.dp, p.cp, p.ep, p.microbatch, p.virtual_stages, p.recompute,
                        p.sequence_parallel, p.schedule, p.flash_attention, p.global_batch, p.framework)
    rank = terms.ranks[1]
    forward, backward = rank[1][6], rank[1][0] - rank[1][6]
    grads = planner.model.GRAD_BYTES * rank[2]
    latency, per_byte = terms.dense_lines[1]  # the dense group's ReduceScatter
    scatter = cost._calls(terms, rank[2], rank[8], 2) * latency + per_byte * grads
    assert backward < scatter < forward + backward  # only the asynchronous reduction can hide it
    exposed, _ = cost._tail(ctx, terms, rank, 2)
    assert exposed == pytest.approx(terms.microbatches * scatter * ctx.contention, rel=0.05)
    terms.framework = "megatron"  # the same traffic waited for at the end of each backward
    waited, _ = cost._tail(ctx, terms, rank, 2)
    assert waited > terms.microbatches * (scatter - backward)
    estimate = planner.predict(case.model, case.cluster, p)
    assert estimate.memory_breakdown["grads"] < 1e9 and estimate.fits


def test_deepspeeds_pipeline_in_bf16_accumulates_fp32_gradients_and_reduces_them_after_the_last_backward():
    """DeepSpeed's pipeline engine in bf16 runs BF16_Optimizer (BLOOM: ZeRO stage 0 in its
    config, "its own ZeRO Stage 1"): after every microbatch's backward each bf16 gradient is
    added into an fp32 copy (a cast, 2 + 4 bytes, and an add, 4 + 4 + 4, a parameter through
    HBM), and after the last backward the fp32 buffer is AllReduced and the updated bf16 weights
    AllGathered, nothing left to hide behind (DeepSpeed 56c5223: pipe/schedule.py,
    pipe/engine.py _bf16_reduce_grads, bf16_optimizer.py)."""
    case = {c.case.case_id: c for c in planner.validate()}["bloom176b_384a100_gbs2048"].case
    p = case.plan
    assert (p.framework, p.zero, p.pp > 1) == ("deepspeed", 1, True)
    ctx = cost._Context(case.model, case.cluster)
    terms = cost._terms(ctx, p.tp, p.pp, p.dp, p.cp, p.ep, p.microbatch, p.virtual_stages, p.recompute,
                        p.sequence_parallel, p.schedule, p.flash_attention, p.global_batch, p.framework)
    rank = terms.ranks[1]
    local, m = rank[2], terms.microbatches
    assert cost.BF16_OPTIMIZER_ACCUMULATE_BYTES == 18
    exposed, optimizer = cost._tail(ctx, terms, rank, 1)
    adam = planner.model.ADAM_STEP_BYTES * local / p.dp
    assert optimizer * ctx.hbm_rate == pytest.approx(adam + m * 18 * local)
    (ar_latency, ar_per_byte), _, (ag_latency, ag_per_byte) = terms.dense_lines[:3]
    reduce = cost._calls(terms, local, rank[8], 1) * ar_latency + ar_per_byte * planner.model.GRAD_BYTES * local
    gather = cost._calls(terms, local, rank[8], 1, gather=True) * ag_latency + ag_per_byte * planner.model.PARAM_BYTES * local
    assert exposed == pytest.approx(reduce + gather)
    terms.framework = "megatron"  # its ZeRO-1 ReduceScatters behind the last backward, no fp32 copy to add into
    hidden, megatron_optimizer = cost._tail(ctx, terms, rank, 1)
    assert hidden < exposed / 2 and megatron_optimizer * ctx.hbm_rate == pytest.approx(adam)
    alone = cost._terms(ctx, p.tp, 1, 96, p.cp, p.ep, p.microbatch, 1, p.recompute, p.sequence_parallel, p.schedule,
                        p.flash_attention, 1920, p.framework)  # no pipeline: DeepSpeed's ZeRO optimizer, no fp32 copy
    _, optimizer = cost._tail(ctx, alone, alone.ranks[0], 1)
    assert optimizer * ctx.hbm_rate == pytest.approx(planner.model.ADAM_STEP_BYTES * alone.ranks[0][2] / 96)


def _slow_network_fsdp(**plan):
    """Llama 3 8B under FSDP ZeRO-3 on 96 H100s whose network is so slow that the data-parallel
    traffic dwarfs the compute it could hide behind: exposed time = traffic, less a window."""
    cluster = Cluster("h100_sxm", 96, 8, inter_bytes_per_s=1e7)
    base = Plan(dp=96, microbatch=2, global_batch=192, zero=3, recompute="none", framework="fsdp")
    return planner.predict(LLAMA8, cluster, replace(base, **plan)).time_breakdown["dp_comm"], cluster


def test_bf16_gradient_reduction_halves_the_gradient_bytes_on_the_wire():
    """ZeRO-3 moves bf16 weights twice (forward and backward gathers) and the gradients once:
    2 + 2 + 4 bytes a parameter in fp32, 2 + 2 + 2 in bf16 (MixedPrecision(reduce_dtype=bf16),
    Megatron-LM's --grad-reduce-in-bf16)."""
    fp32, _ = _slow_network_fsdp()
    bf16, _ = _slow_network_fsdp(grad_reduce="bf16")
    assert fp32 / bf16 == pytest.approx(8 / 6, rel=0.02)


def test_hsdp_shards_inside_its_group_and_allreduces_each_gradient_shard_across_replicas():
    """PyTorch FSDP's HYBRID_SHARD with groups of a node's 8 GPUs: each GPU holds the model
    states an 8-GPU FSDP run holds, gathers over NVLink only, and after each ReduceScatter
    AllReduces its 1/8 of the gradients with its 11 peers on the other nodes: ring AllReduce,
    2 x 11/12 of the shard through its own NIC."""
    hybrid, cluster = _slow_network_fsdp(shard_group=8)
    full, _ = _slow_network_fsdp()
    # The cross-node bytes of models.hsdp's ledger: HSDP's through each GPU's own NIC, FSDP's
    # rings over all 96 ranks spread over a node's 8 NICs.
    traffic = lambda group, grad_bytes=4: hsdp.hsdp_traffic(LLAMA8.params, 96, group, gpus_per_node=8,
                                                           grad_bytes=grad_bytes).inter_node_bytes
    assert hybrid / full == pytest.approx(traffic(8) / (traffic(96) / 8), rel=0.03)
    bf16, _ = _slow_network_fsdp(shard_group=8, grad_reduce="bf16")
    _, bytes_per_s = cost._Context(LLAMA8, cluster).link("allreduce", 8, 12)
    assert hybrid - bf16 == pytest.approx((traffic(8) - traffic(8, grad_bytes=2)) / bytes_per_s, rel=0.03)
    states = ("params", "grads", "optimizer", "buffers")
    wide = planner.predict(LLAMA8, cluster, Plan(dp=96, microbatch=2, global_batch=192, zero=3, recompute="none",
                                                 framework="fsdp", shard_group=8)).memory_breakdown
    node = planner.predict(LLAMA8, Cluster("h100_sxm", 8, 8), Plan(dp=8, microbatch=2, global_batch=16, zero=3,
                                                                    recompute="none", framework="fsdp")).memory_breakdown
    assert [wide[k] for k in states] == pytest.approx([node[k] for k in states])


def test_hsdp_is_a_layout_of_fsdp_with_a_zero_stage():
    assert Plan(dp=8, global_batch=8, zero=3, framework="fsdp", shard_group=8).shard_group == 0  # plain FSDP
    assert "HSDP 8x4" in Plan(dp=32, global_batch=32, zero=3, framework="fsdp", shard_group=8).label()
    for bad, message in ((dict(framework="megatron"), "needs framework='fsdp'"), (dict(zero=0), "a ZeRO stage"),
                         (dict(shard_group=3), "does not divide"), (dict(shard_group=1), "shards nothing")):
        with pytest.raises(ValueError, match=message):
            Plan(**{**dict(dp=32, global_batch=32, zero=3, framework="fsdp", shard_group=8), **bad})
    with pytest.raises(ValueError, match="grad_reduce"):
        Plan(grad_reduce="fp16")


def test_interleaved_warm_up_holds_no_more_than_the_steps_microbatches():
    assert cost._inflight("interleaved", 16, 16, 8, 0) == 16
    assert cost._inflight("interleaved", 16, 32, 8, 0) == pytest.approx(16 + 15 / 8)
    assert cost._inflight("1f1b", 16, 8, 1, 0) == 8


# ---- memory ---------------------------------------------------------------------------------

def test_usable_memory_is_hbm_less_the_runtime_reserve_and_the_margin():
    cluster = planner.cluster_preset("dgx-h100", 8)
    assert cluster.memory_margin_bytes == planner.DEFAULT_MEMORY_MARGIN_BYTES == 4e9
    assert cluster.usable_bytes == 80 * GiB - planner.RUNTIME_RESERVE_BYTES - 4e9
    roomy = planner.cluster_preset("dgx-h100", 8, memory_margin_bytes=0)
    assert roomy.usable_bytes == roomy.runtime_limit_bytes == 80 * GiB - 2.5 * GiB
    with pytest.raises(ValueError, match="memory_margin_bytes"):
        planner.cluster_preset("dgx-h100", 8, memory_margin_bytes=-1)
    with pytest.raises(ValueError, match="leaves nothing"):
        planner.cluster_preset("dgx-a100-40gb", 8, memory_margin_bytes=40 * GiB)


def test_a_recommended_plan_keeps_the_margin_free():
    model = planner.model_preset("llama3-8b")
    for margin in (0, 4e9, 12e9):
        cluster = planner.cluster_preset("dgx-h100", 8, memory_margin_bytes=margin)
        best = planner.recommend(model, cluster, 32, top=1)[0].estimate
        assert best.memory_bytes <= 80 * GiB - planner.RUNTIME_RESERVE_BYTES - margin


def test_deepspeed_gathers_one_matrix_not_a_layer():
    model, cluster = GPT3, planner.cluster_preset("dgx-a100-80gb", 512)
    plan = Plan(dp=512, microbatch=1, global_batch=512, zero=3, recompute="full", sequence_parallel=False)
    h = model.hidden
    layer = (model.attention_params + model.dense_mlp_params) + 2 * h
    fsdp = planner.predict(model, cluster, replace(plan, framework="fsdp")).memory_breakdown["buffers"]
    deepspeed = planner.predict(model, cluster, replace(plan, framework="deepspeed")).memory_breakdown["buffers"]
    assert fsdp == pytest.approx(layer * 8)  # two bf16 copies and the fp32 gradients of one layer
    assert deepspeed == pytest.approx(4 * h * h * 8)  # ... of the largest matrix, the MLP's 4h x h


# ---- bands and verdicts ---------------------------------------------------------------------

def test_a_band_comes_from_its_regimes_checking_runs():
    """A regime with enough checking runs sets its own band: its runs (and their sources)
    are the band's basis, the band holds every one of that single source's own runs (the
    spread between sources widens it past the scatter of one source), and it keeps at
    least MIN_BAND on each side."""
    model, cluster = planner.model_preset("llama3-70b"), planner.cluster_preset("dgx-h100", 512)
    plan = Plan(tp=8, pp=1, dp=64, microbatch=1, global_batch=512, zero=1, recompute="none")
    band = planner.band(model, cluster, plan)
    summary = validation.regime_summary("H100 · Megatron-LM")
    runs = [c for c in validation.end_to_end(validation.CHECK) if c.regime == "H100 · Megatron-LM"]
    assert band.regime == "H100 · Megatron-LM" and band.checks == summary.count >= validation.MIN_REGIME_CHECKS
    assert band.sources == len({c.case.source for c in runs}) == 1
    assert 1 / (1 + summary.high) > band.low and 1 / (1 + summary.low) < band.high  # wider than its own range
    assert band.low <= 1 / (1 + validation.MIN_BAND) and band.high >= 1 / (1 - validation.MIN_BAND)
    assert band.reach == pytest.approx(max(1 / band.low - 1, 1 - 1 / band.high))
    low, high = band.throughput(100.0)
    assert low < 100 < high
    short, long_ = band.duration(10.0)
    assert short < 10 < long_


def test_plain_fsdp_on_h100_is_where_the_planner_leans_fast_as_the_lab_says():
    """Figure 21's prose: for models one source measured on both GPUs, the planner expects
    more of an H100 over an A100 than the published runs got, and an H100 FSDP plan's
    range reaches more than twice as far to the slow side as to the fast side."""
    ratios = [lean.ratio for lean in validation.gpu_leans(validation.end_to_end(validation.CHECK))]
    assert validation.GpuLean("ibm2024", None, (0.0, 0.1), (0.32,)).ratio == pytest.approx(1.32 / 1.05)
    assert len(ratios) >= 6 and sum(ratios) / len(ratios) > 1.10 and min(ratios) > 0.98
    model, cluster = planner.model_preset("llama3-8b"), planner.cluster_preset("dgx-h100", 8)
    band = planner.band(model, cluster, Plan(dp=8, global_batch=32, zero=3, recompute="none", framework="fsdp"))
    assert band.regime == "H100 · PyTorch FSDP"
    slow, fast = 1 - band.low, band.high - 1
    assert slow > 2 * fast


def test_a_regime_without_checks_borrows_a_broader_band_and_says_so():
    model, cluster = planner.model_preset("llama3-70b"), planner.cluster_preset("dgx-b200", 64)
    band = planner.band(model, cluster, Plan(tp=8, dp=8, global_batch=64, zero=1, recompute="none"))
    assert band.regime == "B200 · Megatron-LM" and validation.regime_summary(band.regime).count == 0
    assert "no B200 · Megatron-LM runs" in band.basis and band.checks > 10


@SETTINGS
@given(memory=st.floats(1, 200), usable=st.floats(1, 200))
def test_memory_verdicts_bracket_the_limit(memory, usable):
    band = validation.memory_band()
    verdict = validation.memory_verdict(memory, usable)
    if memory * (1 + band) <= usable:
        assert verdict == "fits"
    elif memory * (1 - band) > usable:
        assert verdict == "does not fit"
    else:
        assert verdict == "at the edge"
