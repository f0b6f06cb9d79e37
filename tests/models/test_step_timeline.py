"""One device's step with its collectives placed by distance from their consumer (Figure 18)."""
import itertools
import math

import pytest
from hypothesis import given, settings, strategies as st

from models import collectives, ddp, fsdp, hardware, mesh, overlap, pipeline, shapes
from models import step_timeline as S

NDR, NVLINK = hardware.link("ib_ndr"), hardware.link("nvlink4")
H100 = hardware.gpu("h100_sxm")


def _time(op, nbytes, ranks, link):
    return collectives.time_s(op, nbytes, ranks, alpha_s=link.alpha_s, bandwidth_bytes_per_s=link.bandwidth_bytes_per_s)


def _per_layer_forward_s(step):
    return step.compute_s / (3 * step.layers)


def test_published_shapes_reproduce_their_parameter_counts():
    from models import flops
    for shape in shapes.SHAPES:
        counted = flops.gpt_params(shape.layers, shape.hidden, shape.vocab, shape.seq)
        assert counted == pytest.approx(shape.params, rel=0.03), shape.name  # tables print 1.7B for 1.65B
        assert shapes.shape_for(shape.params) is shape
    assert shapes.shape_for(7e9).name == "GPT 7.5B"
    with pytest.raises(ValueError, match="params"):
        shapes.shape_for(0)


def test_layout_degrees_follow_the_rule():
    lay = S.layout(1536, {"dp", "tp", "pp"})
    # Megatron-LM's published layout for its 145.6B model (Narayanan et al. 2021 Table 1)
    assert (lay.tp, lay.cp, lay.pp, lay.data, lay.ep, lay.shard, lay.replicas) == (8, 1, 8, 24, 1, 1, 24)
    assert lay.gpus_used == 1536
    hsdp = S.layout(1024, {"dp", "fsdp"})
    assert (hsdp.shard, hsdp.replicas) == (8, 128)
    assert (hsdp.fabric_of("fsdp"), hsdp.fabric_of("dp")) == ("intra-node", "inter-node")
    fully = S.layout(1024, {"fsdp"})
    assert (fully.shard, fully.replicas) == (1024, 1)
    alone = S.layout(256, {"tp", "cp"})  # no data axis: the other GPUs hold nothing
    assert (alone.tp, alone.cp, alone.data, alone.gpus_used) == (8, 2, 1, 16)
    assert S.layout(8, {"tp", "pp", "dp"}).pp == 1  # TP took the node: nothing left for stages
    assert S.layout(64, {"ep"}).ep == 1  # experts live on data (or context) ranks
    assert S.layout(64, {"ep", "dp"}).ep == 8


@pytest.mark.parametrize("gpus,enabled", [
    (64, {"dp", "tp", "pp"}), (64, {"dp", "cp", "ep"}), (128, {"tp", "cp", "dp", "pp", "ep"}),
    (32, {"dp", "cp"}), (16, {"fsdp", "tp"}), (512, {"dp", "fsdp", "cp", "ep"}),
])
def test_layout_fabrics_agree_with_the_mesh(gpus, enabled):
    lay = S.layout(gpus, enabled)
    grid = mesh.Mesh(dp=lay.data, tp=lay.tp, pp=lay.pp, cp=lay.cp, ep=lay.ep)
    for axis in ("tp", "cp", "pp", "ep"):
        degree = getattr(lay, axis)
        want = "none" if degree == 1 else ("inter-node" if grid.crosses_node(axis) else "intra-node")
        assert lay.fabric_of(axis) == want, axis
    members = grid.group("dp", 0)
    shard, replicas = members[:lay.shard], members[::lay.shard]
    for axis, group, size in (("fsdp", shard, lay.shard), ("dp", replicas, lay.replicas)):
        want = "none" if size == 1 else ("inter-node" if group[0] // 8 != group[-1] // 8 else "intra-node")
        assert lay.fabric_of(axis) == want, axis


def test_tp_and_ep_are_exposed_in_full():
    step = S.step_timeline(7_500_000_000, 64, frozenset({"tp", "ep", "dp"}), global_batch=256)  # 8 replicas of 32
    shape = shapes.shape_for(7.5e9)
    m = step.microbatches  # each microbatch calls every collective
    assert m > 1 and m * step.microbatch_sequences == 32
    tokens = step.microbatch_sequences * shape.seq
    tp_call = _time("allreduce", tokens * shape.hidden * 2, 8, NVLINK)
    tp = next(a for a in step.axes if a.axis == "tp")
    assert tp.calls == 4 * shape.layers * m and tp.comm_s == pytest.approx(4 * shape.layers * m * tp_call)
    assert tp.exposed_s == pytest.approx(tp.comm_s) and tp.hidden_s == pytest.approx(0, abs=1e-12)
    ep = next(a for a in step.axes if a.axis == "ep")
    ep_call = _time("alltoall", tokens * shape.hidden * 2 / 8, 8, NDR)  # ranks 0, 8, ...: across nodes
    assert ep.comm_s == pytest.approx(4 * shape.layers * m * ep_call) and ep.exposed_s == pytest.approx(ep.comm_s)
    for axis in ("tp", "ep"):
        assert overlap.hidden_comm(axis, 1.0, 0.0).exposed_s == 1.0  # the rule the model applies


def test_fsdp_alone_is_the_fsdp_simulation():
    for params, gpus in ((7_500_000_000, 64), (1_300_000_000, 8), (145_600_000_000, 1536)):
        step = S.step_timeline(params, gpus, frozenset({"fsdp"}), global_batch=gpus)  # one microbatch each
        shape = shapes.shape_for(params)
        link = NVLINK if gpus <= 8 else NDR
        oracle = fsdp.simulate_fsdp_step(fsdp.uniform_units(shape.layer_params * shape.layers, shape.layers),
                                         _per_layer_forward_s(step), shard_degree=gpus, alpha_s=link.alpha_s,
                                         bandwidth_bytes_per_s=link.bandwidth_bytes_per_s)
        assert step.exposed_s("fsdp") == pytest.approx(oracle.exposed_comm_s, rel=1e-9)
        assert step.axes[0].comm_s == pytest.approx(oracle.comm_busy_s, rel=1e-9)
        assert step.step_time_s - step.optimizer_s == pytest.approx(oracle.step_time_s, rel=1e-9)


def test_dp_alone_is_the_ddp_bucket_timeline():
    for params, gpus in ((7_500_000_000, 64), (1_300_000_000, 8), (1_008_000_000_000, 4096)):
        step = S.step_timeline(params, gpus, frozenset({"dp"}), global_batch=gpus)  # one microbatch each
        shape = shapes.shape_for(params)
        link = NVLINK if gpus <= 8 else NDR
        backward = 2 * _per_layer_forward_s(step)
        oracle = ddp.backward_timeline([(2 * shape.layer_params, backward)] * shape.layers, ranks=gpus,
                                       alpha_s=link.alpha_s, bandwidth_bytes_per_s=link.bandwidth_bytes_per_s)
        assert step.exposed_s("dp") == pytest.approx(oracle.exposed_comm_s, rel=1e-9, abs=1e-15)
        assert step.axes[0].comm_s == pytest.approx(oracle.total_comm_s, rel=1e-9)


def test_pipeline_sends_hide_and_the_bubble_is_idle():
    step = S.step_timeline(145_600_000_000, 1536, frozenset({"dp", "tp", "pp"}))
    m = S.GLOBAL_BATCH_SEQUENCES // 24  # 128 microbatches of one sequence per replica
    pp = next(a for a in step.axes if a.axis == "pp")
    assert pp.calls == 2 * m and pp.exposed_s == 0 and pp.hidden_s == pytest.approx(pp.comm_s)
    stage = step.forward_s + step.backward_s - step.exposed_s("dp")  # the bubble scales the stage's busy time
    assert step.bubble_s == pytest.approx(pipeline.bubble_over_ideal("1f1b", 8, m) * stage, rel=1e-9)
    assert step.layers == 10 and step.microbatches == m == step.replica_sequences


def test_context_ring_hides_only_when_blocks_are_big():
    # Without TP the ring stays inside the node and each rank's block is 8x the work: ~93% hidden.
    inside = S.step_timeline(7_500_000_000, 64, frozenset({"cp", "dp"}))
    ring = next(a for a in inside.axes if a.axis == "cp")
    assert inside.layout.fabric_of("cp") == "intra-node" and ring.exposed_s < 0.1 * ring.comm_s
    # With TP the ring crosses nodes and blocks shrink 8x: mostly exposed.
    across = S.step_timeline(7_500_000_000, 64, frozenset({"cp", "dp", "tp"}))
    cp = next(a for a in across.axes if a.axis == "cp")
    assert across.layout.fabric_of("cp") == "inter-node" and cp.exposed_s > 0.8 * cp.comm_s


def test_article_ranking_dp_hides_best_tp_not_at_all():
    # A layout that fits, so a replica runs few microbatches and the last one's backward is
    # long enough to hide its buckets (Narayanan et al. 2021 Table 1's 18.4B on 256 GPUs).
    step = S.step_timeline(18_400_000_000, 256, frozenset({"dp", "tp"}))
    assert step.memory.fits and step.microbatches == 16
    share = {a.axis: a.hidden_s / a.comm_s for a in step.axes}
    assert share["dp"] > 0.95 and share["tp"] == 0


SUBSETS = [frozenset(c) for r in range(len(S.AXES) + 1) for c in itertools.combinations(S.AXES, r)]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(SUBSETS), st.sampled_from(shapes.PARAMS), st.sampled_from((1, 8, 64, 1536, 16384)),
       st.sampled_from(tuple(hardware.LINKS)))
def test_step_is_compute_plus_bubble_plus_optimizer_plus_exposed(enabled, params, gpus, link):
    step = S.step_timeline(params, gpus, enabled, link=link)
    assert step.step_time_s == pytest.approx(step.compute_s + step.bubble_s + step.optimizer_s + step.exposed_comm_s, rel=1e-9)
    assert step.hidden_comm_s == pytest.approx(sum(a.comm_s for a in step.axes) - step.exposed_comm_s, rel=1e-9, abs=1e-12)
    for traffic in step.axes:
        assert traffic.axis in enabled and traffic.group > 1 and 0 <= traffic.exposed_s <= traffic.comm_s * (1 + 1e-9)
    for bar in step.bars:
        assert 0 <= bar.start_s <= bar.end_s <= step.step_time_s * (1 + 1e-12)
    exposed_bars = {axis: math.fsum(b.end_s - b.start_s for b in step.bars if b.lane == axis and b.kind == "exposed")
                    for axis in S.AXES}
    for axis in S.AXES:
        assert exposed_bars[axis] == pytest.approx(step.exposed_s(axis), rel=1e-9, abs=1e-12)


FULL_LAYOUTS = [frozenset(c) | {data} for data in ("dp", "fsdp") for r in range(4)
                for c in itertools.combinations(("tp", "pp", "cp", "ep"), r)]


@pytest.mark.parametrize("enabled", FULL_LAYOUTS, ids=lambda e: "+".join(sorted(e)))
def test_every_layout_runs_the_same_global_batch(enabled):
    """A toggle reshares the work, never changes it: with the global batch fixed, each GPU's
    compute (FLOPs at the same rate) is the same for every layout that uses all the GPUs.
    Before, each replica ran 32 sequences whatever the degree: CP's halving of DP halved the
    batch, and Figure 18's step fell 41% (2.76 -> 1.62 s) on the same GPUs."""
    default = S.step_timeline(145_600_000_000, 1536, frozenset({"dp", "tp", "pp"}))
    step = S.step_timeline(145_600_000_000, 1536, enabled)
    lay = step.layout
    assert lay.gpus_used == 1536 and step.global_batch == S.GLOBAL_BATCH_SEQUENCES == 3072
    assert step.replica_sequences * lay.data == 3072 and not step.uneven
    assert step.compute_s == pytest.approx(default.compute_s, rel=1e-9)


def test_a_batch_that_does_not_split_evenly_is_priced_for_the_busiest_replica():
    step = S.step_timeline(145_600_000_000, 1536, frozenset({"dp"}), global_batch=2304)  # 1.5 per GPU
    assert step.uneven and step.replica_sequences == 2 and step.idle_replicas == 0
    few = S.step_timeline(145_600_000_000, 16384, frozenset({"dp"}))
    assert few.uneven and few.replica_sequences == 1 and few.idle_replicas == 16384 - 3072
    assert not S.step_timeline(145_600_000_000, 1536, frozenset({"dp", "tp", "pp"}), global_batch=2304).uneven


def test_a_replicas_microbatches_stay_few_enough_to_simulate():
    """With PP, microbatches of one sequence up to MAX_MICROBATCHES; beyond, of 2, 4, ...
    (Megatron-LM's num_microbatches = batch / (micro batch x DP)): the same sequences."""
    one_copy = S.step_timeline(145_600_000_000, 64, frozenset({"tp", "pp"}), global_batch=16384)
    assert one_copy.replica_sequences == 16384 and one_copy.microbatches == S.MAX_MICROBATCHES == 256
    pp = next(a for a in one_copy.axes if a.axis == "pp")
    assert pp.calls == 2 * 256
    assert S.step_timeline(145_600_000_000, 1536, frozenset({"dp", "tp", "pp"}), global_batch=16384).microbatches == 171


def test_memory_says_when_a_layout_does_not_fit():
    """18 bytes per parameter of model state (Megatron-LM's ledger: bf16 weights, fp32 main
    gradients, fp32 master weights and two Adam moments) on the first stage's layers, plus
    activations (Korthikanti 2022 Table 2, FlashAttention, no recompute) of the microbatches
    in flight."""
    shape = shapes.shape_for(145.6e9)
    layers = shape.layers * shape.layer_params
    assert S.MODEL_STATE_BYTES_PER_PARAM == 18
    alone = S.step_memory(145_600_000_000, 1536, {"dp"})  # DP alone: every GPU holds it all
    assert alone.model_state_bytes == 18 * layers and alone.model_state_bytes == pytest.approx(2.61e12, rel=0.01)
    assert not alone.fits and alone.hbm_bytes == H100.hbm_bytes
    megatron = S.step_memory(145_600_000_000, 1536, {"dp", "tp", "pp"})
    assert megatron.model_state_bytes == 18 * layers / 64 and megatron.fits
    # 8 microbatches in flight on the first stage of 10 layers, each sbh(10 + 24/t) bytes per layer
    sbh = shape.seq * shape.hidden
    assert megatron.activation_bytes == pytest.approx(8 * 10 * sbh * (10 + 24 / 8))
    cp = S.step_memory(145_600_000_000, 1536, {"dp", "tp", "pp", "cp"})
    assert cp.activation_bytes == pytest.approx(megatron.activation_bytes / 2)  # half the tokens per rank
    sharded = S.step_memory(145_600_000_000, 1536, {"fsdp"})
    assert sharded.model_state_bytes < 0.01 * alone.model_state_bytes
    assert S.step_timeline(145_600_000_000, 1536, frozenset({"dp"})).memory == alone


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="enabled"):
        S.step_timeline(7_500_000_000, 64, frozenset({"zero"}))
    with pytest.raises(ValueError, match="gpus"):
        S.step_timeline(7_500_000_000, 0, frozenset({"dp"}))
    with pytest.raises(ValueError, match="global_batch"):
        S.step_timeline(7_500_000_000, 64, frozenset({"dp"}), global_batch=0)
    with pytest.raises(ValueError, match="link"):
        S.step_timeline(7_500_000_000, 64, frozenset({"dp"}), link="carrier-pigeon")
    with pytest.raises(ValueError, match="axis"):
        S.step_timeline(7_500_000_000, 64, frozenset({"dp"})).exposed_s("zero")


def test_the_ledger_is_the_planners():
    """Figure 18 counts model state as the planner does (Megatron-LM: 2 + 4 + 12 bytes), and
    its optimizer step moves the planner's bytes."""
    from models.planner import model as planner
    ledger = (S.LEDGER.param_bytes, S.LEDGER.grad_bytes, S.LEDGER.optimizer_bytes)
    assert ledger == (planner.PARAM_BYTES, planner.GRAD_BYTES, planner.OPTIMIZER_BYTES) == (2, 4, 12)
    assert S.OPTIMIZER_BYTES_PER_PARAM == planner.ADAM_STEP_BYTES == 30


def test_without_pp_a_replica_accumulates_gradients_over_microbatches():
    """No layout holds its replica's whole batch at once: without PP the replica runs its
    sequences as microbatches of one (or of 2, 4, ... past MAX_MICROBATCHES), one at a time,
    so the activations are those of one microbatch (Korthikanti 2022 Table 2)."""
    shape = shapes.shape_for(145.6e9)
    sbh = shape.seq * shape.hidden
    tp_only = S.step_timeline(145_600_000_000, 8, frozenset({"tp"}))  # one model copy: 3,072 sequences
    assert tp_only.replica_sequences == 3072
    assert (tp_only.microbatches, tp_only.microbatch_sequences) == (S.MAX_MICROBATCHES, 12)  # nothing fits
    mem = tp_only.memory
    assert mem.activation_bytes == pytest.approx(12 * shape.layers * sbh * (10 + 24 / 8))
    assert mem.activation_bytes < 0.5e12  # was 80.7 TB: all 3,072 sequences' activations at once
    dp = S.step_timeline(145_600_000_000, 1536, frozenset({"dp"}))
    assert (dp.microbatches, dp.microbatch_sequences) == (2, 1)  # does not fit: the smallest
    assert dp.memory.activation_bytes == pytest.approx(shape.layers * sbh * (10 + 24))
    assert dp.memory.total_bytes == pytest.approx(2.68e12, rel=0.005)
    # the same sequences, however they are cut: compute does not depend on the microbatching
    one_pass = 3 * shape.layers * 24 * 2 * sbh * shape.hidden * (1 + shape.seq / (6 * shape.hidden))
    assert dp.compute_s == pytest.approx(one_pass / (H100.peak_bf16_dense_flops_per_s * S.COMPUTE_EFFICIENCY))


def test_without_pp_a_replica_runs_as_few_microbatches_as_fit():
    """The largest microbatch whose activations fit beside the model state, spread evenly."""
    shape = shapes.shape_for(18.4e9)
    for gpus, batch in ((256, 3072), (256, 1024), (64, 512)):
        step = S.step_timeline(18_400_000_000, gpus, frozenset({"dp", "tp"}), global_batch=batch)
        mem, n = step.memory, step.replica_sequences
        m, b = step.microbatches, step.microbatch_sequences
        assert mem.fits and m * b >= n > (m - 1) * b and m == -(-n // b)
        per_sequence = mem.activation_bytes / b
        assert per_sequence == pytest.approx(shape.layers * shape.seq * shape.hidden * (10 + 24 / 8))
        if m > 1:  # one sequence more per microbatch, with one microbatch fewer, would not fit
            bigger = -(-n // (m - 1))
            assert mem.model_state_bytes + bigger * per_sequence > mem.hbm_bytes


def test_gradient_accumulation_leaves_only_the_last_microbatch_to_hide_the_buckets():
    """DDP reduces nothing until the last microbatch's backward (no_sync before it): every
    bucket launches within the final 1/m of the backward pass."""
    dp = S.step_timeline(145_600_000_000, 1536, frozenset({"dp"}))
    backward = dp.stretches("compute", "backward")
    start, end = backward[0][0], backward[-1][1]
    first_launch = min(a for a, _ in dp.stretches("dp", "comm"))
    assert first_launch >= start + (end - start) / 2 - 1e-9


def test_without_pp_fsdp_gathers_again_for_every_microbatch():
    """PyTorch FSDP reshards after each microbatch's forward: m gathers and m ReduceScatters
    per layer and pass, each of one layer's weights."""
    one = S.step_timeline(7_500_000_000, 64, frozenset({"fsdp"}), global_batch=512)
    two = S.step_timeline(7_500_000_000, 64, frozenset({"fsdp"}), global_batch=1024)
    assert (one.microbatches, two.microbatches) == (1, 2)
    fsdp = {step.microbatches: next(a for a in step.axes if a.axis == "fsdp") for step in (one, two)}
    assert fsdp[2].calls == 2 * fsdp[1].calls == 2 * 3 * one.layers
    assert fsdp[2].comm_s == pytest.approx(2 * fsdp[1].comm_s)
