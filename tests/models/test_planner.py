"""The planner (models/planner/): the published cases, the ledgers it is built from,
properties of predict and recommend, bad input (the exports: test_planner_exports.py)."""
import json
from dataclasses import replace

import pytest
from hypothesis import assume, given, settings, strategies as st

from models import activations, collectives, flops, memory, mesh, pipeline, planner
from models.planner import Cluster, Plan, Transformer, cost, layouts
from tests.published_cases import ROOT, published_cases

SETTINGS = settings(max_examples=60, deadline=None)
GPT3 = planner.model_preset("gpt3-175b")
LLAMA405 = planner.model_preset("llama3-405b")
A100_1024 = planner.cluster_preset("dgx-a100-80gb", 1024)
ISSUE_PLAN = Plan(tp=8, pp=8, dp=16, cp=1, ep=1, microbatch=1, global_batch=1536, virtual_stages=1, zero=0,
                  recompute="selective", sequence_parallel=True, schedule="1f1b")


# ---- the published cases ---------------------------------------------------------------

SHARED_CASES = [case for case in planner.VALIDATION if case.key]  # the cases shared/reference holds
TABLE1 = [case for case in SHARED_CASES if case.case_id.startswith("megatron2021-table1-")]


def _number_forms(value):
    forms = {repr(value), str(value)}
    if float(value).is_integer():
        forms |= {str(int(value)), f"{int(value):,}"}
    return forms


def test_validation_cases_carry_the_published_numbers():
    cases = published_cases()
    runs = json.loads((ROOT / "tests/data/published_runs.json").read_text())
    for case in planner.VALIDATION:
        if case.key:
            expected = cases[case.case_id]["expected"]
            if case.case_id == "megatron2021-eq4-training-time":
                assert case.published == expected["days"][1]
            else:
                assert case.published == expected[case.key], case.case_id
        else:  # the quote each number was read from, as stored
            assert any(form in runs[case.case_id]["quote"] for form in _number_forms(case.published)), case.case_id
    assert set(runs) == {case.case_id for case in planner.VALIDATION if not case.key}


def test_every_case_names_a_known_source_role_and_quantity():
    from models.planner import cases
    for case in planner.VALIDATION:
        assert case.source in cases.SOURCES and case.role in (cases.FIT, cases.CHECK), case.case_id
        assert case.quantity in cases.QUANTITIES and case.label, case.case_id
        assert case.cluster.memory_margin_bytes == 0  # a run that ran is judged against HBM less the reserve
    ids = [(case.case_id, case.key) for case in planner.VALIDATION]
    assert len(ids) == len(set(ids))


def test_megatron2021_table1_configurations_match_the_case_inputs():
    cases = published_cases()
    assert len(TABLE1) == 4
    for case in TABLE1:
        inputs = cases[case.case_id]["inputs"]
        m, p = case.model, case.plan
        assert (m.layers, m.hidden, m.heads, m.seq_len, m.vocab) == (inputs["layers"], inputs["hidden"],
                                                                      inputs["heads"], inputs["seq"], inputs["vocab"])
        assert (p.tp, p.pp, p.dp, p.global_batch, case.cluster.gpus) == (inputs["tp"], inputs["pp"], inputs["dp"],
                                                                         inputs["global_batch"], inputs["gpus"])
        assert p.recompute == "full"
        # Eq. 2 also counts learned position embeddings and biases, which the planner (RoPE-era) leaves out
        assert m.params == pytest.approx(flops.gpt_params(m.layers, m.hidden, m.vocab, m.seq_len), rel=0.005)
        assert m.params == pytest.approx(inputs["params_B"] * 1e9, rel=0.04)


@pytest.mark.parametrize("check", [c for c in planner.validate() if c.case.role == "fit" or not c.case.end_to_end],
                         ids=lambda c: f"{c.case.case_id}:{c.case.key}")
def test_fitting_and_memory_cases_within_6_percent(check):
    assert abs(check.error) < 0.06, (check.case.label, check.predicted, check.case.published)


def test_checking_set_holds_the_targets_it_was_built_to():
    """The checking set's errors (no constant was tuned on it): the target is a mean <= 8%
    (7.2% with DeepSeek-V3's two runs and Kimi K2's admitted, issue 41, and priced with the
    DeepEP dispatch and routing their code sets). A regression guard on the largest (the
    issue's target is 20%). Four runs are over it, each documented in docs/MODELS.md: IBM's
    7B on H100s run as HSDP with bf16 gradients (+30%); torchtitan's two Llama 3.1 8B runs on
    Grand Teton H100s (96 GB HBM2e at 500 W, priced as the 700 W H100 SXM: +27%, +31%); Kimi K2
    on 256 H100s (NeMo AutoModel, DeepEP with its round-robin gate: +29%, predicted too fast)."""
    checks = [c for c in planner.validate() if c.case.role == "check" and c.case.end_to_end]
    assert len(checks) >= 50
    assert sum(abs(c.error) for c in checks) / len(checks) <= 0.08
    over = sorted(c.case.case_id for c in checks if abs(c.error) > 0.20)
    assert over == ["automodel-h100-kimi-k2-bf16-256gpu", "ibm_fsdp_llama2_7b_h100_sxm",
                    "ttbench_llama31_8b_128h100_fsdp_op_sac", "ttbench_llama31_8b_8h100_fsdp_op_sac"], over
    assert all(abs(c.error) < 0.35 for c in checks)


def test_no_run_that_ran_is_said_not_to_fit():
    """Every published run fits or is "at the edge" of the memory band, Llama 3 405B's
    included (gradients sharded as Meta's FSDP shards them)."""
    refused = sorted(c.case.case_id for c in planner.validate() if c.case.end_to_end and c.verdict == "does not fit")
    assert refused == []


def test_end_to_end_hardware_flops_follow_megatron_eq3():
    # Table 1's TFLOP/s count Eq. 3 (full recomputation); the planner's hardware FLOPs are that count.
    for case in TABLE1:
        e = planner.predict(case.model, case.cluster, case.plan)
        m = case.model
        eq3 = flops.training_flops(case.plan.global_batch, m.seq_len, m.layers, m.hidden, m.vocab, recompute=True)
        assert e.hardware_flops_per_step == pytest.approx(eq3, rel=1e-12)
        derived = published_cases()[case.case_id]["derived"]["flops_per_iter_Eq3"]
        assert e.hardware_flops_per_step == pytest.approx(derived, rel=1e-9)


# ---- built from the ledgers ---------------------------------------------------------------

@SETTINGS
@given(s=st.sampled_from([512, 1024, 2048, 4096]), b=st.integers(1, 4), h_per_head=st.sampled_from([64, 128]),
       heads=st.sampled_from([8, 16, 32]), tp=st.sampled_from([1, 2, 4, 8]), sp=st.booleans(),
       recompute=st.sampled_from(activations.RECOMPUTE_OPTIONS), flash=st.booleans())
def test_layer_ledger_is_korthikanti_for_gpt_shapes(s, b, h_per_head, heads, tp, sp, recompute, flash):
    assume(heads % tp == 0)
    h = h_per_head * heads
    model = Transformer(4, h, heads, s, 1000)
    total, _ = cost._layer_ledger(model, s, b, tp, sp, recompute, flash, False)
    oracle = activations.per_layer_bytes(s, b, h, heads, tp=tp, sequence_parallel=sp, recompute=recompute,
                                         flash_attention=flash)
    assert total == pytest.approx(oracle, rel=1e-12)


def test_gqa_swiglu_and_experts_extend_the_ledger_term_by_term():
    s, b, h, a, t = 4096, 1, 4096, 32, 4
    dense = Transformer(2, h, a, s, 1000, ffn=4 * h)
    gqa = replace(dense, kv_heads=8)
    glu = replace(dense, gated_mlp=True)
    moe = replace(dense, experts=8, top_k=2, expert_ffn=h)
    ledger = lambda model, is_moe=False: cost._layer_ledger(model, s, b, t, True, "selective", True, is_moe)[0]
    assert ledger(dense) - ledger(gqa) == 4 * s * b * (h - h // a * 8) / t  # K and V narrower
    assert ledger(glu) - ledger(dense) == 2 * s * b * 4 * h / t  # a third ffn-wide tensor
    # two routed experts of width h keep 2 x 4sbh/t, plus the two dispatched copies of the input 2 x 2sbh/t
    assert ledger(moe, True) - (ledger(dense) - 4 * s * b * 4 * h / t) == 2 * 4 * s * b * h / t + 2 * 2 * s * b * h / t


def test_model_states_are_the_memory_ledger_with_megatron_bytes():
    plan = replace(ISSUE_PLAN, zero=1)
    e = planner.predict(GPT3, A100_1024, plan)
    rank1 = e.stage_memory[1]  # a middle rank: 12 layers, no embedding
    layer_params = (GPT3.attention_params + GPT3.dense_mlp_params) / 8 + 2 * GPT3.hidden
    for zero in memory.STAGES:
        states = memory.model_states(12 * layer_params, 16, zero, param_bytes=2, grad_bytes=4, optimizer_bytes=12)
        got = planner.predict(GPT3, A100_1024, replace(plan, zero=zero)).stage_memory[1]
        assert got[:3] == pytest.approx((states.params_bytes, states.grads_bytes, states.optimizer_bytes), rel=1e-12)
    assert rank1[0] == pytest.approx(2 * 12 * layer_params)


def test_expert_states_are_the_memory_ledger_over_the_expert_data_parallel_group():
    # Experts shard over dp*cp/ep ranks, everything else over dp*cp (Megatron-Core's expert-data-
    # parallel group): each part is memory.model_states at its own degree.
    mixtral = planner.model_preset("mixtral-8x7b")
    cluster = Cluster(gpu="h100_sxm", gpus=64)
    plan = Plan(tp=2, pp=1, dp=32, ep=8, microbatch=1, global_batch=32, zero=0)
    experts_local = mixtral.moe_layers * mixtral.experts * mixtral.expert_params / (plan.tp * plan.ep)
    dense_local = planner.predict(mixtral, cluster, plan).stage_memory[0][0] / 2 - experts_local
    for zero in memory.STAGES:
        got = planner.predict(mixtral, cluster, replace(plan, zero=zero)).stage_memory[0][:3]
        dense, expert = (memory.model_states(n, ranks, zero, param_bytes=2, grad_bytes=4, optimizer_bytes=12)
                         for n, ranks in ((dense_local, 32), (experts_local, 32 // 8)))
        assert got == pytest.approx((dense.params_bytes + expert.params_bytes, dense.grads_bytes + expert.grads_bytes,
                                     dense.optimizer_bytes + expert.optimizer_bytes), rel=1e-12)


def test_megatron_distributed_optimizer_is_6_plus_12_over_dp_bytes_per_parameter():
    case = published_cases()["megatron-mem-theory"]["expected"]
    assert case["bytes_per_param_no_dist_opt"] == planner.PARAM_BYTES + planner.GRAD_BYTES + planner.OPTIMIZER_BYTES
    e = planner.predict(GPT3, A100_1024, replace(ISSUE_PLAN, zero=1))
    params, grads, optimizer = e.stage_memory[1][:3]
    assert (params + grads + optimizer) / (params / 2) == pytest.approx(6 + 12 / 16)


@pytest.mark.parametrize("schedule,v", [("1f1b", 1), ("gpipe", 1), ("interleaved", 2), ("interleaved", 4), ("zb-h1", 1)])
@pytest.mark.parametrize("p,m", [(4, 8), (8, 64), (8, 16), (2, 2)])
def test_bubble_is_the_pipeline_closed_form(schedule, v, p, m):
    if (schedule == "interleaved" and m % p) or (schedule == "zb-h1" and m < p):
        pytest.skip("outside the closed form's domain (tested against the simulation below)")
    assert cost._bubble_over_ideal(schedule, p, m, v) == pytest.approx(pipeline.bubble_over_ideal(schedule, p, m, v))


def test_zb_h1_bubble_below_m_equals_p_matches_the_simulation():
    for p, m in ((4, 2), (8, 3), (6, 5)):
        sim = pipeline.simulate("zb-h1", p, m, forward_s=2, backward_s=4)  # T_F = T_B = T_W = 2
        ideal = 3 * m * 2
        assert cost._bubble_over_ideal("zb-h1", p, m, 1) == pytest.approx(sim.makespan / ideal - 1)


def test_first_stage_inflight_is_korthikanti():
    for schedule, p, m, v in (("1f1b", 8, 64, 1), ("1f1b", 8, 4, 1), ("gpipe", 4, 16, 1), ("interleaved", 8, 64, 3)):
        assert cost._inflight(schedule, p, m, v, 0) == activations.inflight_microbatches(schedule, p, m, v)


def test_model_flops_are_eq7_and_hardware_flops_add_recomputation():
    b, s, l, h, v = 1536, 2048, 96, 12288, 51200
    for recompute in flops.RECOMPUTE_OPTIONS:  # Korthikanti's; torchtitan's per-op: test_planner_mechanisms
        e = planner.predict(GPT3, A100_1024, replace(ISSUE_PLAN, recompute=recompute))
        assert e.model_flops_per_step == pytest.approx(flops.model_flops(b, s, l, h, v), rel=1e-12)
        assert e.hardware_flops_per_step == pytest.approx(flops.training_flops(b, s, l, h, v, recompute=recompute),
                                                          rel=1e-12)
        # per token: 6N plus 12·layers·hidden·seq, not halved for causality
        assert e.model_flops_per_step / (b * s) == pytest.approx(6 * GPT3.active_matmul_params + 12 * l * h * s)


@SETTINGS
@given(tp=st.sampled_from([1, 2, 4, 8]), cp=st.sampled_from([1, 2, 4]), dp=st.sampled_from([1, 2, 3, 4]),
       pp=st.sampled_from([1, 2]), per_node=st.sampled_from([4, 8]))
def test_fabric_follows_the_mesh(tp, cp, dp, pp, per_node):
    """An axis group runs on NVLink exactly when models.mesh says none of its groups crosses a node."""
    gpus = tp * cp * dp * pp
    assume(gpus % per_node == 0 or per_node % gpus == 0)
    cluster = Cluster("h100_sxm", gpus, per_node)
    ctx = cost._Context(Transformer(8, 1024, 8, 4096, 1000), cluster)
    layout = mesh.Mesh(dp=dp, tp=tp, pp=pp, cp=cp, gpus_per_node=per_node)
    for axis, stride, degree in (("tp", 1, tp), ("cp", tp, cp), ("dp", tp * cp, dp), ("pp", tp * cp * dp, pp)):
        if degree == 1:
            continue
        latency = ctx.link("allgather", stride, degree)[0]
        nvlink = latency == pytest.approx(cost.NCCL_BASE_LATENCY_S + (degree - 1) * cluster.intra_link.alpha_s)
        assert nvlink == (not layout.crosses_node(axis)), axis


def test_collectives_are_priced_by_the_alpha_beta_model():
    ctx = cost._Context(GPT3, A100_1024)
    latency, per_byte = cost._cost(ctx, "allreduce", 8, 16)
    link_latency, bandwidth = ctx.link("allreduce", 8, 16)
    for nbytes in (0, 1e6, 3e9):
        expected = link_latency + collectives.time_s("allreduce", nbytes, 16, alpha_s=0, bandwidth_bytes_per_s=bandwidth)
        assert latency + per_byte * nbytes == pytest.approx(expected, rel=1e-12)
    # 16 dp ranks 8 apart: one per node, so every one of the 2 x 15 ring steps crosses the
    # network (NCCL's LL128 latencies: 14 us a call, 4 us a network hop); one HDR NIC each
    # at the 24 of 25 GB/s NCCL reaches
    assert link_latency == pytest.approx(14e-6 + 30 * 4e-6)
    assert bandwidth == pytest.approx(24e9)


# ---- predict: invariants and the issue's conventions ---------------------------------------

def test_the_issue_example_runs_and_adds_up():
    e = planner.predict(GPT3, A100_1024, ISSUE_PLAN)
    assert e.step_time_s == pytest.approx(sum(e.time_breakdown.values()), rel=1e-12)
    assert e.memory_bytes == pytest.approx(sum(e.memory_breakdown.values()), rel=1e-12)
    assert e.tokens_per_s == pytest.approx(1536 * 2048 / e.step_time_s)
    assert e.mfu == pytest.approx(e.model_tflops_per_gpu * 1e12 / 312e12)
    assert e.hfu == pytest.approx(e.hardware_tflops_per_gpu * 1e12 / 312e12)
    assert 0 < e.mfu <= e.hfu < 1
    assert e.fits == (e.memory_bytes <= e.usable_bytes)
    assert set(e.memory_breakdown) == {"params", "grads", "optimizer", "activations", "buffers"}
    assert {"compute", "bubble", "tp_comm", "dp_comm", "pp_comm", "cp_comm", "ep_comm", "optimizer"} <= set(e.time_breakdown)
    assert e.memory_bytes == max(sum(parts) for parts in e.stage_memory)


def test_sequence_parallel_at_tp1_changes_nothing():
    cluster = planner.cluster_preset("dgx-a100-80gb", 64)
    plan = Plan(tp=1, pp=8, dp=8, global_batch=64, recompute="full")
    assert planner.predict(GPT3, cluster, plan) == planner.predict(GPT3, cluster, replace(plan, sequence_parallel=False))


def test_uneven_layers_are_balanced_and_the_slowest_stage_sets_the_pace():
    cluster = planner.cluster_preset("dgx-h100", 16384)
    plan = Plan(tp=8, pp=16, dp=128, microbatch=1, global_batch=2048, virtual_stages=8, schedule="interleaved",
                zero=1, recompute="full")
    e = planner.predict(LLAMA405, cluster, plan)
    assert e.stage_layers == (7,) + (8,) * 14 + (7,)  # Llama 3: one layer fewer where the embedding and loss sit
    assert sum(e.stage_layers) == 126
    ctx = cost._Context(LLAMA405, cluster)
    terms = cost._terms(ctx, 8, 16, 128, 1, 1, 1, 8, "full", True, "interleaved", True, 2048)
    assert terms.slowest_s == max(terms.stage_s)
    assert e.time_breakdown["compute"] >= e.microbatches * min(terms.stage_s) * 0.5
    uneven = planner.predict(GPT3, A100_1024, replace(ISSUE_PLAN, pp=16, dp=8, global_batch=1536))
    even = planner.predict(GPT3, A100_1024, replace(ISSUE_PLAN, pp=8))
    assert uneven.stage_layers == (6,) * 16 and even.stage_layers == (12,) * 8


@SETTINGS
@given(tp=st.sampled_from([1, 2, 4, 8]), pp=st.sampled_from([1, 2, 4, 8]), zero=st.sampled_from([0, 1, 2, 3]),
       dp=st.sampled_from([1, 2, 4, 8]), recompute=st.sampled_from(planner.RECOMPUTE_OPTIONS))
def test_more_gpus_never_raise_per_device_model_state(tp, pp, zero, dp, recompute):
    """Doubling the data-parallel replicas (and the GPUs) never adds model-state bytes per device."""
    plan = Plan(tp=tp, pp=pp, dp=dp, microbatch=1, global_batch=16 * dp, zero=zero, recompute=recompute,
                framework="fsdp" if recompute == "op" else "megatron")
    small = planner.predict(GPT3, planner.cluster_preset("dgx-a100-80gb", tp * pp * dp), plan)
    big = planner.predict(GPT3, planner.cluster_preset("dgx-a100-80gb", tp * pp * dp * 2),
                          replace(plan, dp=2 * dp, global_batch=32 * dp))
    assert big.model_state_bytes <= small.model_state_bytes * (1 + 1e-12)
    if zero:
        assert big.model_state_bytes < small.model_state_bytes


@SETTINGS
@given(recompute=st.sampled_from(planner.RECOMPUTE_OPTIONS), sp=st.booleans(), mb=st.sampled_from([1, 2, 4]))
def test_recomputation_trades_memory_for_time(recompute, sp, mb):
    plan = Plan(tp=8, pp=8, dp=16, microbatch=mb, global_batch=1536, recompute=recompute, sequence_parallel=sp,
                flash_attention=False, framework="fsdp" if recompute == "op" else "megatron")
    e = planner.predict(GPT3, A100_1024, plan)
    full = planner.predict(GPT3, A100_1024, replace(plan, recompute="full"))
    none = planner.predict(GPT3, A100_1024, replace(plan, recompute="none"))
    assert full.memory_breakdown["activations"] <= e.memory_breakdown["activations"] <= none.memory_breakdown["activations"]
    assert none.step_time_s <= e.step_time_s <= full.step_time_s


def test_zero_stages_shard_more_and_move_more():
    plans = [replace(ISSUE_PLAN, zero=z, microbatch=1) for z in memory.STAGES]
    estimates = [planner.predict(GPT3, A100_1024, p) for p in plans]
    states = [e.model_state_bytes for e in estimates]
    assert states == sorted(states, reverse=True)
    assert estimates[3].memory_breakdown["buffers"] > 0 == estimates[2].memory_breakdown["buffers"]
    comm = [e.time_breakdown["dp_comm"] + e.time_breakdown["optimizer"] for e in estimates[1:]]
    assert comm == sorted(comm)


def test_train_time_is_tokens_over_throughput():
    e = planner.predict(GPT3, A100_1024, ISSUE_PLAN)
    assert planner.train_time_s(e, 300e9) == pytest.approx(300e9 / e.tokens_per_s)
    with pytest.raises(ValueError, match="tokens"):
        planner.train_time_s(e, 0)


def test_moe_plans_price_experts_and_all_to_all():
    model = planner.model_preset("mixtral-8x7b", seq_len=4096)
    cluster = planner.cluster_preset("dgx-h100", 64)
    base = Plan(tp=1, pp=1, dp=64, ep=1, global_batch=256, zero=1, recompute="full")
    one, eight = (planner.predict(model, cluster, replace(base, ep=ep)) for ep in (1, 8))
    assert one.time_breakdown["ep_comm"] == 0 < eight.time_breakdown["ep_comm"]
    assert eight.model_state_bytes < one.model_state_bytes
    assert model.params == pytest.approx(46.7e9, rel=0.01)
    assert planner.model_preset("deepseek-v3").params == pytest.approx(671e9, rel=0.01)
    assert LLAMA405.params == pytest.approx(405e9, rel=0.01)


# ---- recommend -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpt3_search():
    return planner.search(GPT3, A100_1024, 1536, top=5)


def test_recommend_ranks_fitting_plans_by_step_time(gpt3_search):
    candidates = gpt3_search.candidates
    assert len(candidates) == 5
    steps = [c.estimate.step_time_s for c in candidates]
    assert steps == sorted(steps)
    for c in candidates:
        assert c.estimate.fits and c.plan.gpus == 1024 and c.plan.global_batch == 1536
        assert c.estimate == planner.predict(GPT3, A100_1024, c.plan)
        assert c.reasons and all(isinstance(r, str) for r in c.reasons)
    assert gpt3_search.fitting <= gpt3_search.considered
    assert planner.recommend(GPT3, A100_1024, global_batch=1536, top=5) == candidates


def test_the_best_plan_is_explained_like_the_ladder(gpt3_search):
    reasons = gpt3_search.candidates[0].reasons
    assert reasons[0].startswith("Model states: 174.6B parameters \u00d7 18 bytes") and "3,142 GB unsharded" in reasons[0]
    assert "\u2192 shard them at least 40 ways" in reasons[0]  # the reader sees \u00d7 and \u2192, not x and ->
    assert not any(" -> " in r or " x " in r for r in reasons)
    assert any(r.startswith("Tensor parallelism tp=") for r in reasons)
    assert any(r.startswith("Data parallelism dp=") for r in reasons)
    assert reasons[-1].startswith(f"Searched {gpt3_search.considered:,} plans")
    second = gpt3_search.candidates[1]
    assert "slower than the recommended plan" in second.reasons[0] or "As fast as the recommended plan" in second.reasons[0]
    assert second.estimate.step_time_s >= gpt3_search.candidates[0].estimate.step_time_s


def test_nothing_beats_the_recommended_plan_among_its_neighbours(gpt3_search):
    best = gpt3_search.candidates[0]
    for change in ({"zero": 2}, {"zero": 3}, {"recompute": "full"}, {"microbatch": 2},
                   {"virtual_stages": 2}, {"virtual_stages": 3}):
        try:
            other = planner.predict(GPT3, A100_1024, replace(best.plan, **change))
        except ValueError:
            continue
        assert not other.fits or other.step_time_s >= best.estimate.step_time_s * (1 - 1e-9)


def test_fixed_fields_are_respected():
    result = planner.search(GPT3, A100_1024, 1536, top=3, fixed={"tp": 8, "recompute": "full"})
    assert all(c.plan.tp == 8 and c.plan.recompute == "full" for c in result.candidates)
    with pytest.raises(ValueError, match="fixed"):
        planner.search(GPT3, A100_1024, 1536, fixed={"global_batch": 8})
    with pytest.raises(ValueError, match="tp=5 does not divide heads"):
        planner.search(GPT3, A100_1024, 1536, fixed={"tp": 5})
    with pytest.raises(ValueError, match="^zero"):
        planner.search(GPT3, A100_1024, 1536, fixed={"zero": 5})
    pinned = planner.search(GPT3, A100_1024, 1536, top=1, fixed={"microbatch": 2, "virtual_stages": 3})
    assert pinned.candidates[0].plan.microbatch == 2 and pinned.candidates[0].plan.virtual_stages == 3


def test_llama3_405b_on_16384_h100s_recommends_a_fitting_interleaved_pipeline():
    cands = planner.recommend(LLAMA405, planner.cluster_preset("dgx-h100", 16384), global_batch=2048, top=5)
    best = cands[0]
    assert best.estimate.fits and best.plan.pp > 1 and best.plan.tp == 8
    assert 0.3 < best.estimate.mfu < 0.6


def test_nothing_fits_names_the_smallest_footprint_and_what_would_fit():
    with pytest.raises(ValueError) as error:
        planner.recommend(LLAMA405, planner.cluster_preset("dgx-h100", 8), global_batch=16)
    message = str(error.value)
    assert message.startswith("gpus=8: nothing fits")
    assert "smallest footprint found is" in message and "would make it fit" in message
    result = planner.search(LLAMA405, planner.cluster_preset("dgx-h100", 8), 16)
    assert result.candidates == () and not result.smallest.estimate.fits
    assert result.smallest.reasons[0].startswith("Does not fit")


# ---- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs,field", [
    (dict(layers=0), "layers"), (dict(hidden=-1), "hidden"), (dict(heads=7), "heads"), (dict(seq_len="2k"), "seq_len"),
    (dict(vocab=1.5), "vocab"), (dict(kv_heads=5), "kv_heads"), (dict(top_k=2), "top_k"),
    (dict(shared_experts=1), "shared_experts"), (dict(gated_mlp="yes"), "gated_mlp"),
])
def test_bad_models_name_the_field(kwargs, field):
    base = dict(layers=4, hidden=1024, heads=16, seq_len=2048, vocab=1000)
    with pytest.raises(ValueError, match=rf"^{field}"):
        Transformer(**{**base, **kwargs})


@pytest.mark.parametrize("kwargs,field", [
    (dict(gpus=12), "gpus"), (dict(gpus=0), "gpus"), (dict(gpu="tpu"), "gpu"), (dict(intra="wifi"), "intra"),
    (dict(gpus_per_node="8"), "gpus_per_node"), (dict(inter_bytes_per_s=-1), "inter_bytes_per_s"),
])
def test_bad_clusters_name_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}"):
        Cluster(**{"gpus": 16, **kwargs})


@pytest.mark.parametrize("kwargs,field", [
    (dict(schedule="interleaved"), "virtual_stages"), (dict(virtual_stages=2), "virtual_stages"),
    (dict(global_batch=100, dp=16), "global_batch"), (dict(zero=4), "zero"), (dict(recompute="some"), "recompute"),
    (dict(tp=0), "tp"), (dict(schedule="1F1B"), "schedule"), (dict(microbatch="1"), "microbatch"),
])
def test_inconsistent_plans_say_why(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}"):
        Plan(**{"global_batch": 64, **kwargs})


@pytest.mark.parametrize("change,field", [
    (dict(dp=8), "gpus"), (dict(tp=64, dp=2), "tp=64 does not divide heads"), (dict(ep=2), "ep"),
    (dict(cp=3, dp=16, global_batch=1536), "gpus"), (dict(pp=128, dp=1, global_batch=1536), "pp"),
    (dict(pp=4, dp=32, microbatch=16, virtual_stages=2, schedule="interleaved", global_batch=1536),
     "schedule='interleaved'"),
])
def test_plans_that_do_not_match_the_model_or_cluster_say_why(change, field):
    with pytest.raises(ValueError, match=f"^{field}"):
        planner.predict(GPT3, A100_1024, replace(ISSUE_PLAN, **change))


def test_predict_refuses_other_types():
    with pytest.raises(ValueError, match="^model"):
        planner.predict("gpt3", A100_1024, ISSUE_PLAN)
    with pytest.raises(ValueError, match="^plan"):
        planner.predict(GPT3, A100_1024, {"tp": 8})


def test_a_search_after_another_on_the_same_pair_reuses_its_prices_and_finds_the_same():
    """The last pairs' contexts are kept across calls (a reader pinning one degree after
    another): a pinned search then prices no layout anew, and every answer is the one a
    fresh context gives, in any order."""
    model, cluster = planner.model_preset("mixtral-8x7b"), planner.cluster_preset("dgx-a100-80gb", 256)
    pins = ({}, {"tp": 2}, {"pp": 4}, {"zero": 3}, {"microbatch": 2})
    fresh = []
    for fixed in pins:
        cost._contexts.clear()
        cost._unkept.clear()
        fresh.append(repr(planner.search(model, cluster, 512, fixed=fixed)))
    cost._contexts.clear()
    cost._unkept.clear()
    assert repr(planner.search(model, cluster, 512)) == fresh[0]
    priced = len(cost._context(model, cluster, keep=False).terms_cache)
    assert repr(planner.search(model, cluster, 512, fixed={"tp": 2})) == fresh[1]
    assert len(cost._context(model, cluster, keep=False).terms_cache) == priced  # its layouts are a subset: none priced anew
    again = [repr(planner.search(model, cluster, 512, fixed=fixed)) for fixed in reversed(pins)][::-1]
    assert again == fresh
    assert cost._context(model, cluster, keep=False) is cost._context(model, cluster, keep=True)


def test_a_search_in_steps_finds_what_search_finds_and_keeps_no_context_of_its_own():
    """``search_steps`` (the worker's search ahead) yields before every layout it looks at
    and returns ``search``'s answer; with keep=False it leaves the kept pairs as they
    were and reuses one if it is kept; its errors are ``search``'s."""
    cost._contexts.clear()
    reader = (planner.model_preset("gpt3-175b"), planner.cluster_preset("dgx-a100-80gb", 1024))
    planner.search(*reader, 1536)
    ahead = (planner.model_preset("mixtral-8x7b"), planner.cluster_preset("dgx-a100-80gb", 256))
    steps = planner.search_steps(*ahead, 512, keep=False)
    yielded = 0
    while True:
        try:
            assert next(steps) is None
            yielded += 1
        except StopIteration as done:
            found = done.value
            break
    assert yielded > 300 and list(cost._contexts) == [reader]
    assert repr(found) == repr(planner.search(*ahead, 512))
    priced = len(cost._context(*reader, keep=False).terms_cache)
    assert repr(planner.run_steps(planner.search_steps(*reader, 1536, fixed={"tp": 8}, keep=False))) == repr(
        planner.search(*reader, 1536, fixed={"tp": 8}))
    assert len(cost._context(*reader, keep=False).terms_cache) == priced  # the reader's context, reused
    with pytest.raises(ValueError, match="global_batch"):
        planner.run_steps(planner.search_steps(*reader, 0, keep=False))


def test_only_the_last_pairs_contexts_are_kept():
    cost._contexts.clear()
    clusters = [planner.cluster_preset("dgx-a100-80gb", gpus) for gpus in (8, 16, 32)]
    model = planner.model_preset("llama3-8b")
    for cluster in clusters:
        planner.search(model, cluster, 64)
    kept = [(model, c) for c in clusters[-cost.CONTEXTS_KEPT:]]
    assert list(cost._contexts) == kept
    planner.validate()  # predictions on a dozen other pairs push out nothing
    assert list(cost._contexts) == kept
    planner.predict(model, clusters[-2], planner.recommend(model, clusters[-2], 64)[0].plan)
    assert list(cost._contexts) == kept[::-1]  # a kept pair, used again, is the most recent
    with pytest.raises(ValueError, match="planner.Transformer"):
        planner.search("llama3-8b", clusters[0], 64)


def test_a_pinned_zero_stage_or_recompute_mode_checks_no_layout(monkeypatch):
    """Only a pin that can break a rule the enumeration keeps (a degree, the microbatch,
    chunks, schedule, sequence parallelism) has every layout checked; a ZeRO stage or a
    recompute mode cannot, and checking them was a third of such a search."""
    checks = []
    real = cost._check
    counting = lambda *args: checks.append(args[2]) or real(*args)
    monkeypatch.setattr(cost, "_check", counting)  # predict's
    monkeypatch.setattr(layouts, "_check", counting)  # the search's
    model, cluster = planner.model_preset("llama3-70b"), planner.cluster_preset("dgx-a100-80gb", 256)
    planner.search(model, cluster, 512)
    unpinned = len(checks)  # the predictions of the plans it shows
    for fixed in ({"zero": 1}, {"recompute": "full"}, {"zero": 3, "recompute": "none"}):
        checks.clear()
        planner.search(model, cluster, 512, fixed=fixed)
        assert len(checks) <= unpinned + 2, fixed
    checks.clear()
    planner.search(model, cluster, 512, fixed={"tp": 4})
    assert len(checks) > 5 * unpinned
