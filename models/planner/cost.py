"""One plan's step time and memory: the cost model behind ``predict``."""
import math

from models import collectives, ddp, experts, hardware, overlap
from models._validate import divides, positive
from models.planner.model import (
    ACTIVATION_BYTES, ADAM_STEP_BYTES, GRAD_BYTES, GRAD_REDUCE_BYTES, MEMORY_PARTS, OPTIMIZER_BYTES, PARAM_BYTES,
    TIME_PARTS, Cluster, Estimate, Plan, Transformer)

# ---- the named constants (each justified in docs/MODELS.md, "Planner") ------------------
# Fraction of the best measured matmul throughput (``GpuSpec.matmul_fraction``: 86.9% of peak
# on A100, 80.3% on H100, 77.6% on B200) that a training step's compute-bound GEMMs sustain:
# launch gaps, wave quantisation and the thinner backward GEMMs take the rest. Fitted, with
# ELEMENTWISE_TRAFFIC, to Megatron-LM 2021 Table 1 (the fitting set, ``models.planner.cases``).
GEMM_SHAPE_EFFICIENCY = 0.80
# Fraction of peak the attention core (QK^T, softmax, AV and their gradients) sustains with a
# kernel that reaches FlashAttention-2's A100 forward rate (73% of peak, Dao 2023 Sec. 4.1):
# its backward runs at 50-63%, so forward and backward together average about 0.5. Unfused
# attention (batched GEMMs and a softmax kernel, Megatron-LM 2021) does no better. Not fitted.
ATTENTION_EFFICIENCY = 0.50
# Forward fraction of peak each attention kernel reaches, by GPU generation: FlashAttention-2
# 73% on A100 and 34% on H100 (335 of 989 TFLOP/s: it uses none of Hopper's new instructions,
# Dao 2023 Sec. 4.1); FlashAttention-3 / cuDNN 75% on H100 (740 TFLOP/s, Shah et al. 2024
# Sec. 1). Megatron-Core runs Transformer Engine's cuDNN kernel, PyTorch's SDPA runs
# FlashAttention-2 (torchtitan, llm-foundry). Blackwell and CDNA3 have no published rate: the
# Hopper rates are assumed (their bands say so).
ATTENTION_KERNEL_FRACTION = {"fa2": {"ampere": 0.73, "hopper": 0.34, "blackwell": 0.34, "cdna3": 0.34},
                             "cudnn": {"ampere": 0.73, "hopper": 0.75, "blackwell": 0.75, "cdna3": 0.34}}
ATTENTION_KERNEL = {"megatron": "cudnn", "fsdp": "fa2", "deepspeed": "fa2"}
# Bytes the non-GEMM kernels (layernorm, dropout, activation function, residual adds,
# softmax) move through HBM per byte of a layer's activation ledger, per forward pass;
# a backward pass moves twice that. With fused kernels (Megatron-LM's bias-GeLU,
# bias-dropout-add and scale-mask-softmax) each stored tensor is written once and read once
# more (2) plus the inputs these kernels read; fitted with GEMM_SHAPE_EFFICIENCY. Eager
# PyTorch runs each of these ops as its own kernel, each reading and writing whole tensors:
# ELEMENTWISE_TRAFFIC_UNFUSED, fitted to torchtitan's A100 runs (the fitting set).
ELEMENTWISE_TRAFFIC = 2.5
ELEMENTWISE_TRAFFIC_UNFUSED = 4.0
FUSED_KERNELS = {"megatron": True, "fsdp": False, "deepspeed": True}
# NCCL's latency model (NVIDIA/nccl src/graph/tuning.cc, LL128 protocol, ring): a base
# latency per call, plus one hop latency per ring step, NVLink for steps inside a node and the
# network's for the steps that cross to the next node.
NCCL_BASE_LATENCY_S = 14.0e-6
# DeepSpeed's 2021 ZeRO-3 (the baseline of Narayanan et al. 2021 Table 2) gathered each
# layer's parameters sub-module by sub-module and moved them at about one NIC's bandwidth per
# GPU, not the node's eight, and hid only part of that behind compute. Both fitted to the
# 175B rows of Table 2 and checked on the 530B rows (docs/MODELS.md, "Frameworks").
DEEPSPEED_ZERO3_NICS = 1.0
DEEPSPEED_ZERO3_OVERLAP = 0.8
# DeepSpeed's pipeline engine in bf16 runs BF16_Optimizer ("PP+BF16 only work for ZeRO
# Stage 1"; it shards the Adam step itself, BLOOM's ZERO_STAGE=0): after every microbatch's
# backward it adds each bf16 gradient into an fp32 copy, hp_grad.add_(lp.grad.to(fp32)): the
# cast reads 2 bytes and writes 4, the add reads 4 + 4 and writes 4, per parameter
# (deepspeed/runtime/bf16_optimizer.py update_hp_grads, called from pipe/engine.py
# _exec_backward_pass; DeepSpeed 56c5223, "bf16+pipeline parallelism", 2022).
BF16_OPTIMIZER_ACCUMULATE_BYTES = 2 + 4 + 4 + 4 + 4
# Megatron-LM's gradient buckets: max(4e7, 1e6 x dp) parameters, "larger DP sizes need larger
# buckets to ensure collectives do not become latency-bound" (megatron/core/distributed/
# distributed_data_parallel_config.py); DeepSpeed reduces in buckets of 5e8 elements
# (deepspeed/runtime/zero/config.py reduce_bucket_size). FSDP reduces one layer at a time.
MEGATRON_BUCKET_PARAMS, MEGATRON_BUCKET_PER_RANK, DEEPSPEED_BUCKET_PARAMS = 4e7, 1e6, 5e8
# CUDA blocks (one per SM) NCCL runs a collective on: two channels per NIC on an eight-NIC
# node (NCCL's default ring channel count there; Figure 06's default).
NCCL_CHANNELS = 16


# ---- the cost model ----------------------------------------------------------------------

# A search after another on the same model and cluster (a degree pinned, the batch
# changed) finds most of its layouts priced already: the contexts of the pairs last
# searched are kept, each holding up to TERMS_KEPT priced layouts (~1.2 kB each; a MoE
# search prices 4-6k). A prediction, or a search ahead (``search_steps(keep=False)``),
# uses a kept context but does not keep its own, so that pricing other pairs once
# (``validate``, the worker searching ahead) does not push out the reader's. The last such
# pair's context stays until another pair replaces it: the predictions a search ahead
# ends with (its best plans, their variants) reuse what it priced.
CONTEXTS_KEPT = 2
TERMS_KEPT = 10_000
_contexts = {}
_unkept = {}  # the last pair priced without keeping: at most one context


def _context(model, cluster, keep):
    """The ``_Context`` of (model, cluster): a kept one if there is one; else the last
    unkept one if it is this pair's, or a new one; kept (as one of the CONTEXTS_KEPT last
    searched pairs) if ``keep``, else held as the last unkept."""
    if not isinstance(model, Transformer):
        raise ValueError(f"model must be a planner.Transformer, got {type(model).__name__}")
    if not isinstance(cluster, Cluster):
        raise ValueError(f"cluster must be a planner.Cluster, got {type(cluster).__name__}")
    key = (model, cluster)
    ctx = _contexts.pop(key, None)
    if ctx is None:
        ctx = _unkept.pop(key, None) or _Context(model, cluster)
        if not keep:
            _unkept.clear()
            _unkept[key] = ctx
            return ctx
    _contexts[key] = ctx  # most recently used last
    while len(_contexts) > CONTEXTS_KEPT:
        del _contexts[next(iter(_contexts))]
    return ctx


class _Context:
    """Everything about a (model, cluster) pair that every plan shares, and what has been
    priced for it so far (every entry a pure function of the pair and its key)."""

    def __init__(self, model, cluster):
        self.model, self.cluster = model, cluster
        spec = cluster.spec
        self.peak = spec.peak_bf16_dense_flops_per_s
        self.gemm_rate = self.peak * spec.matmul_fraction * GEMM_SHAPE_EFFICIENCY
        self.generation = spec.generation
        self.hbm_rate = spec.hbm_bandwidth_bytes_per_s
        self.intra = cluster.intra_link
        self.inter = cluster.inter_link
        self.network = cluster.network_bytes_per_s
        self.active = model.active_matmul_params
        self.usable = cluster.usable_bytes
        self.has_dense = model.layers > model.moe_layers
        self.layer_cache = {}
        self.stage_cache = {}
        self.link_cache = {}
        self.terms_cache = {}
        # Overlap is not free: while a collective runs under compute its NCCL channels hold
        # NCCL_CHANNELS of the GPU's SMs (models.overlap.sm_contention_from_channels), so the
        # compute it hides behind runs at (1 - share) of its speed.
        share = overlap.sm_contention_from_channels(NCCL_CHANNELS, hardware.sm_count(cluster.gpu))
        self.contention = share / (1 - share)

    def behind(self, comm_s, window_s):
        """Seconds a collective of ``comm_s`` adds to a step when it can hide behind
        ``window_s`` of compute: what does not fit, plus what fits slowing that compute."""
        if comm_s <= window_s:
            return comm_s * self.contention
        return comm_s - window_s + window_s * self.contention

    # -- fabric ---------------------------------------------------------------------------
    def link(self, op, stride, degree, nics=None):
        """(latency_s, bytes_per_s) of one call of ``op`` on a group of ``degree`` ranks
        ``stride`` apart (models.mesh rank order).

        Latency, NCCL's model (src/graph/tuning.cc): NCCL_BASE_LATENCY_S plus one hop per
        ring step (degree - 1 steps; twice that for AllReduce; one for a send), NVLink's
        alpha for the steps inside a node and the network's for the node crossings.
        Bandwidth: NVLink inside a node; across nodes a group with k members per node runs
        k rings side by side, one per NIC (NCCL's rail channels): min(NVLink, k x NIC),
        except that All-to-All and point-to-point sends cannot aggregate NICs (NCCL
        maintainers, nccl-tests#267): one NIC. Each link at its achievable fraction.
        ``nics`` caps the NICs a group's traffic uses (DeepSpeed's ZeRO-3)."""
        key = ("link", op, stride, degree, nics)
        cached = self.link_cache.get(key)
        if cached is not None:
            return cached
        g = self.cluster.gpus_per_node
        span = stride * degree
        factor = 2 if op == "allreduce" else 1
        steps = 1 if op == "sendrecv" else factor * (degree - 1)
        nvlink = self.intra.bandwidth_bytes_per_s * self.intra.achievable_fraction
        if span <= g and g % span == 0:
            result = (NCCL_BASE_LATENCY_S + steps * self.intra.alpha_s, nvlink)
        else:
            per_node = max(1, min(degree, g // stride)) if stride < g else 1
            nodes = -(-degree // per_node)
            crossings = 1 if op == "sendrecv" else factor * (nodes - 1)
            latency = NCCL_BASE_LATENCY_S + (steps - crossings) * self.intra.alpha_s + crossings * self.inter.alpha_s
            lanes = 1 if op in ("alltoall", "sendrecv") else per_node
            if nics is not None:
                lanes = min(lanes, nics)
            result = (latency, min(nvlink, lanes * self.network * self.inter.achievable_fraction))
        self.link_cache[key] = result
        return result

    def collective_s(self, op, nbytes, stride, degree):
        if degree == 1 or nbytes == 0:
            return 0.0
        latency, per_byte = _cost(self, op, stride, degree)
        return latency + per_byte * nbytes

    # -- one GEMM -----------------------------------------------------------------------
    def gemm_s(self, m, k, n):
        """Roofline: the slower of its FLOPs at matmul_fraction x GEMM_SHAPE_EFFICIENCY of
        peak and its bf16 operands through HBM. The per-rank shape decides which."""
        return max(2.0 * m * k * n / self.gemm_rate, ACTIVATION_BYTES * (m * k + k * n + m * n) / self.hbm_rate)

    def attention_rate(self, framework, flash):
        """FLOP/s of the attention core: ATTENTION_EFFICIENCY of peak, scaled by how the
        framework's kernel fares on this GPU against FlashAttention-2 on an A100; unfused
        attention runs batched GEMMs, scaled like any matmul."""
        if flash:
            fraction = ATTENTION_KERNEL_FRACTION[ATTENTION_KERNEL[framework]][self.generation]
            return self.peak * ATTENTION_EFFICIENCY * fraction / ATTENTION_KERNEL_FRACTION["fa2"]["ampere"]
        return self.peak * ATTENTION_EFFICIENCY * self.cluster.spec.matmul_fraction / _A100_MATMUL_FRACTION


_A100_MATMUL_FRACTION = 0.869  # hardware.GPUS["a100_80gb"].matmul_fraction, where ATTENTION_EFFICIENCY was read


def _layer_ledger(model, seq, micro_batch, tp, sp, recompute, flash, moe, ep=1):
    """Activation bytes one layer keeps for backward on one TP rank (Korthikanti 2022
    Sec. 4.1 / Table 2, as ``models.activations.layer_activations``), generalised: K and V
    are h_kv wide (GQA); a gated MLP keeps three ffn-wide tensors (gate, up, their
    product) where GeLU keeps two; an MoE layer keeps them for top_k + shared experts
    plus the top_k dispatched copies of its input; MLA keeps its rebuilt per-head Q, K, V
    and, outside the TP split like the layernorm inputs, its two latents before and after
    their norms and the rope key (``_MLA_LATENTS``). Per-op checkpointing keeps what
    ``_op_sac_saved_bytes`` says. Returns (total, score-matrix part). For GPT shapes it
    equals ``activations.layer_activations`` (tested)."""
    sb = float(seq) * micro_batch
    h = model.hidden
    if recompute == "full":  # Sec. 5: only the layer input, split by t with SP
        return 2 * sb * h / (tp if sp else 1), 0.0
    if recompute == "op":
        return _op_sac_saved_bytes(model, sb, tp, sp, moe, ep), 0.0
    # Outside the TP region: two layernorm inputs (4sbh), the QKV and MLP inputs (4sbh) and
    # two one-byte dropout masks (2sbh): 10sbh, 8sbh for a model trained without dropout.
    outside = (10 if model.dropout else 8) * sb * h / (tp if sp else 1)
    attention = 2 * sb * sum(model.attention_widths) / tp  # Q, K, V, projection input
    if model.mla:
        attention += 2 * sb * _mla_latents(model) / (tp if sp else 1)
    tensors = 3 if model.gated_mlp else 2
    if moe:
        width = (model.top_k + model.shared_experts) * model.expert_ffn
        mlp = (2 * tensors * sb * width + 2 * model.top_k * sb * h) / tp
    else:
        mlp = 2 * tensors * sb * model.ffn / tp
    # softmax output (2as²b), and with dropout its mask and output (as²b + 2as²b)
    scores = 0.0 if (recompute == "selective" or flash) else (5.0 if model.dropout else 2.0) * model.heads * seq * sb / tp
    return outside + attention + mlp + scores, scores


def _mla_latents(model):
    """Per token, the MLA widths a layer keeps outside the per-head tensors: the query
    latent c^Q and the key-value latent c^KV each before and after its RMSNorm, and the
    rope key k^R (DeepSeek-V2 eqs. 9, 12, 17): 2·d_c' + 2·d_c + d_h^R. Megatron-Core runs
    the down-projections on the sequence-parallel shard (multi_latent_attention.py: the
    latents are [s/TP, b, ...]), so they split by t only with sequence parallelism."""
    return 2 * model.q_lora_rank + 2 * model.kv_lora_rank + model.qk_rope_head_dim


def _rank_width(width, kind, tp, sp):
    """A matmul output's width on one TP rank: a column-parallel output is split t ways, a
    row-parallel one is the whole partial sum (before its reduce-scatter), a replicated
    one is whole, on the sequence shard with sequence parallelism."""
    if kind == "column":
        return width / tp
    if kind == "replicated":
        return width / (tp if sp else 1)
    return float(width)


def _layer_matmuls(model, moe):
    """The matmuls (aten.mm) of one layer in forward order, as torchtitan's per-op policy
    counts them: attention, then the dense MLP or the shared experts. Routed experts run
    as grouped GEMMs (torch._grouped_mm, not on the save list) and the router's gate is
    always recomputed (per_op_sac_force_recompute_mm_shapes_by_fqns = ["moe.router.gate"]),
    so neither counts (torchtitan v0.2.2 distributed/activation_checkpoint.py)."""
    if not moe:
        return model.attention_matmuls() + model.mlp_matmuls(model.ffn)
    if model.shared_experts:
        return model.attention_matmuls() + model.mlp_matmuls(model.shared_experts * model.expert_ffn)
    return model.attention_matmuls()


def _op_sac_kept(model, moe):
    """The matmuls torchtitan's per-op policy keeps: "Saves output of all compute ops,
    except every second mm" (activation_checkpoint.py ``_custom_policy``: the count starts
    at 1 in each layer and an even count is recomputed), i.e. the 1st, 3rd, 5th ...;
    returns (kept, recomputed)."""
    matmuls = _layer_matmuls(model, moe)
    return matmuls[0::2], matmuls[1::2]


def _op_sac_saved_bytes(model, sb, tp, sp, moe, ep):
    """Bytes one layer keeps under torchtitan's per-op selective checkpointing
    (``_op_sac_save_list`` of torchtitan v0.2.2 models/llama3/infra/parallelize.py and
    models/deepseek_v3/infra/parallelize.py): the layer's input (the checkpoint's input),
    the kept matmul outputs (``_op_sac_kept``), the attention kernel's outputs (its output
    and fp32 log-sum-exp), the reduce-scatter outputs of sequence-parallel TP (after the
    attention and the MLP) and, with expert parallelism, the all-to-all outputs (tokens
    dispatched to the experts and combined back, top_k copies each)."""
    h = model.hidden
    outside = tp if sp else 1
    kept, _ = _op_sac_kept(model, moe)
    widths = h / outside + sum(_rank_width(out, kind, tp, sp) for _, _, out, kind in kept)
    widths += model.attention_widths[3] / tp + 2 * model.heads / tp  # attention output, fp32 log-sum-exp
    if sp and tp > 1:
        widths += 2 * h / tp
    if moe and ep > 1:
        widths += 2 * model.top_k * h / tp
    return ACTIVATION_BYTES * sb * widths


class _Layer:
    """Per-rank seconds and bytes of one transformer layer for one microbatch."""

    __slots__ = ("forward_s", "backward_s", "recompute_s", "tp_s", "cp_s", "ep_s", "ledger_bytes",
                 "working_bytes", "params", "expert_params", "largest_matrix")


def _layer(ctx, tp, cp, mb, ep, sp, recompute, flash, moe, framework, tp_overlap, dispatch=("alltoall", "router")):
    key = (tp, cp, mb, ep, sp, recompute, flash, moe, framework, tp_overlap, dispatch)
    cached = ctx.layer_cache.get(key)
    if cached is not None:
        return cached
    model = ctx.model
    h, s = model.hidden, model.seq_len
    s_local = s // cp
    tokens = mb * s_local
    gemm = ctx.gemm_s
    glu = 2 if model.gated_mlp else 1
    # forward GEMMs on this rank (Shoeybi 2019 Sec. 3 shapes): QKV, output projection, MLP;
    # MLA's five projections (Model.attention_matmuls), its down-projections whole on each
    # rank over the sequence shard
    if model.mla:
        forward = 0.0
        for _, width_in, width_out, kind in model.attention_matmuls():
            if kind == "replicated":
                forward += gemm(tokens / (tp if sp else 1), width_in, width_out)
            elif kind == "column":
                forward += gemm(tokens, width_in, width_out / tp)
            else:
                forward += gemm(tokens, width_in / tp, width_out)
    else:
        forward = gemm(tokens, h, (h + 2 * model.kv_hidden) // tp) + gemm(tokens, h // tp, h)
    if moe:
        experts_here = model.experts // ep
        routed = tokens * model.top_k * ep / model.experts  # tokens per expert, balanced routing
        experts_s = experts_here * (gemm(routed, h, glu * model.expert_ffn // tp) + gemm(routed, model.expert_ffn // tp, h))
        forward += experts_s
        if model.shared_experts:
            width = model.shared_experts * model.expert_ffn
            forward += gemm(tokens, h, glu * width // tp) + gemm(tokens, width // tp, h)
        forward += gemm(tokens, h, model.experts)  # router
    else:
        forward += gemm(tokens, h, glu * model.ffn // tp) + gemm(tokens, model.ffn // tp, h)
    # attention core QK^T and AV: 4·b·(s/cp)·s·h/t FLOPs (MLA: 2·b·(s/cp)·s·n_h(2d_h + d_h^R)/t,
    # Model.attention_core_width); a causal FlashAttention kernel skips the masked half
    # (Dao 2023, FlashAttention-2 Sec. 3.1).
    attention = (2.0 * tokens * s * model.attention_core_width / tp * (0.5 if flash else 1.0)
                 / ctx.attention_rate(framework, flash))
    ledger, scores = _layer_ledger(model, s_local, mb, tp, sp, "none", flash, moe)  # everything a forward writes
    traffic = ELEMENTWISE_TRAFFIC if FUSED_KERNELS[framework] else ELEMENTWISE_TRAFFIC_UNFUSED
    elementwise = traffic * ledger / ctx.hbm_rate
    layer = _Layer()
    layer.forward_s = forward + attention + elementwise
    # Backward: twice the forward GEMMs and elementwise traffic (gradients of inputs and of
    # weights); FlashAttention's backward also recomputes QK^T and the softmax, 5 matmuls
    # against the forward's 2 (Dao et al. 2022, Alg. 4): 2.5x its forward.
    layer.backward_s = 2.0 * (forward + elementwise) + (2.5 if flash else 2.0) * attention
    if recompute == "full":
        layer.recompute_s = layer.forward_s
    elif recompute == "selective":
        layer.recompute_s = attention + traffic * scores / ctx.hbm_rate
    elif recompute == "op":
        # torchtitan's per-op policy recomputes in backward every op whose output it did not
        # keep: the matmuls it skips, the routed experts and the router, and every
        # elementwise kernel; not the attention kernel (kept) nor the all-to-alls.
        _, skipped = _op_sac_kept(model, moe)
        redo = sum(gemm(tokens / (tp if sp else 1), i, o) if kind == "replicated"
                   else gemm(tokens, i, o / tp) if kind == "column" else gemm(tokens, i / tp, o)
                   for _, i, o, kind in skipped)
        if moe:
            redo += experts_s + gemm(tokens, h, model.experts)
        layer.recompute_s = redo + elementwise
    else:
        layer.recompute_s = 0.0
    # passes that issue this layer's collectives: forward(s) + backward; per-op checkpointing
    # keeps the reduce-scatters' outputs but gathers the sequence again (all_gather is not
    # on its save list): half a pass more
    passes = 3 if recompute == "full" else 2.5 if recompute == "op" else 2
    # TP: two AllReduces (or ReduceScatter + AllGather with SP: the same bytes) per pass
    # (Shoeybi 2019; Korthikanti 2022 Sec. 4.2.2), blocking: the next op consumes them.
    message = ACTIVATION_BYTES * tokens * h
    tp_once = ctx.collective_s("allreduce", message, 1, tp)
    if tp_overlap:
        # Transformer Engine splits each AllGather / ReduceScatter and the GEMM it feeds into
        # chunks and pipelines them (Megatron-Core --tp-comm-overlap): what the layer's TP
        # GEMMs cannot cover stays exposed, in the forward pass(es) and in the backward
        # (whose GEMMs take twice as long).
        layer.tp_s = (passes - 1) * max(0.0, 2 * tp_once - forward) + max(0.0, 2 * tp_once - 2 * forward)
    else:
        layer.tp_s = overlap.hidden_comm("tp", 2 * passes * tp_once, forward).exposed_s  # the window is always 0
    # CP: ring attention passes K and V blocks cp-1 times per layer and pass (Liu et al.
    # 2023); backward moves K, V and their gradients; hidden behind the attention blocks.
    # With MLA the ring carries the rebuilt per-head K and V, not the latent: Megatron-Core
    # up-projects them before its core attention (multi_latent_attention.py hands query,
    # key, value to TEDotProductAttention, whose context-parallel ring exchanges K and V).
    if cp > 1:
        latency, per_byte = _cost(ctx, "sendrecv", tp, cp)
        _, k_width, v_width, _ = model.attention_widths
        block = ACTIVATION_BYTES * tokens * (k_width + v_width) / tp
        ring = (cp - 1) * (latency + block * per_byte)
        forward_cp = overlap.hidden_comm("cp", ring, attention).exposed_s
        backward_cp = overlap.hidden_comm("cp", 2 * ring, 2 * attention).exposed_s
        layer.cp_s = forward_cp * (passes - 1) + backward_cp
    else:
        layer.cp_s = 0.0
    # EP: All-to-All dispatch and combine per pass, k copies of each token (article's EP
    # ledger, models.experts.moe_alltoall_bytes), or DeepEP's (_deepep_s); nothing to hide behind.
    if moe and ep > 1:
        if dispatch[0] == "deepep":
            one_s = _deepep_s(ctx, tokens * h / tp, tp, ep, dispatch[1])
        else:
            one_s = ctx.collective_s("alltoall", ACTIVATION_BYTES * tokens * model.top_k * h / tp, tp, ep)
        layer.ep_s = overlap.hidden_comm("ep", 2 * passes * one_s, 0.0).exposed_s
    else:
        layer.ep_s = 0.0
    layer.ledger_bytes, _ = _layer_ledger(model, s_local, mb, tp, sp, recompute, flash, moe, ep)
    # the layer being recomputed holds its whole forward again during its backward
    layer.working_bytes = ledger if recompute in ("full", "op") else 0.0
    # the largest weight matrix on this rank: what DeepSpeed gathers at once (one sub-module)
    width = model.expert_ffn if moe else model.ffn
    qkv = (max(i * o for _, i, o, _ in model.attention_matmuls()) if model.mla
           else h * (h + 2 * model.kv_hidden))
    layer.largest_matrix = max(qkv, glu * h * width) / tp
    attention_params = model.attention_rank_params(tp)
    if moe:
        layer.params = attention_params + model.shared_experts * model.expert_params / tp \
            + h * model.experts + 2 * h
        layer.expert_params = model.experts * model.expert_params / (tp * ep)
    else:
        layer.params = attention_params + model.dense_mlp_params / tp + 2 * h
        layer.expert_params = 0.0
    ctx.layer_cache[key] = layer
    return layer


def _deepep_s(ctx, elements, tp, ep, routing):
    """Seconds of one DeepEP dispatch (or combine, its mirror) of ``elements`` hidden values
    per rank over an EP group of ``ep`` ranks ``tp`` apart (DeepEP's normal kernels,
    docs/legacy.md; DeepSeek-V3 Sec. 3.2.2): a token crosses the network once per node it is
    routed to, to the GPU of the same in-node index there, an All-to-All among the group's
    nodes of D_node copies per token; there, and on its own node, it goes over NVLink once
    to each GPU holding its experts, an All-to-All among the group's GPUs in a node of
    D_rank copies per token. The two run at once ("communications via IB and NVLink are
    fully overlapped", DeepSeek-V3 Sec. 3.2.2), so the slower one sets the time. D_node and
    D_rank: models.experts.expected_holders_reached for the model's group-limited routing,
    or for AutoModel's round-robin gate (one group of k consecutive experts per token)."""
    model = ctx.model
    g = ctx.cluster.gpus_per_node
    per_node = max(1, min(ep, g // tp)) if tp < g else 1
    nodes = ep // per_node
    if routing == "round_robin":
        groups, limit = model.experts // model.top_k, 1
    else:
        groups, limit = model.route_groups, model.route_group_limit
    on_ranks = experts.expected_holders_reached(model.experts, model.top_k, ep, groups, limit)
    nvlink_s = ctx.collective_s("alltoall", ACTIVATION_BYTES * elements * on_ranks, tp, per_node)
    if nodes == 1:
        return nvlink_s
    on_nodes = experts.expected_holders_reached(model.experts, model.top_k, nodes, groups, limit)
    network_s = ctx.collective_s("alltoall", ACTIVATION_BYTES * elements * on_nodes, tp * per_node, nodes)
    return max(network_s, nvlink_s)


def _stage_layout(ctx, pp, v):
    """Transformer layers on each pipeline rank, and the ranks grouped by what they hold.

    The layers are dealt over pp·v model chunks (chunk c runs on rank c mod pp), as evenly
    as they go; a chunk's extra layer goes to the middle chunks first, so the first chunk
    (with the embedding) and the last (with the output layer and loss) are the light ones
    when layers do not divide: Llama 3 405B's 126 layers on 16 x 8 chunks leave those two
    chunks with the embedding and the loss alone (Llama 3 Sec. 3.3.2). The model's first
    ``dense_layers`` layers are the dense ones. Returns (layers per rank, groups), a group
    being (first rank, dense layers, MoE layers, holds the embedding, holds the output
    layer, ranks like it): ranks alike in what they hold differ only in how many
    microbatches they keep, and the first of them keeps the most."""
    key = (pp, v)
    cached = ctx.stage_cache.get(key)
    if cached is not None:
        return cached
    model = ctx.model
    counts = _chunk_counts(model.layers, pp * v)
    dense_left = model.layers - model.moe_layers
    per_rank = [[0, 0] for _ in range(pp)]
    for c, count in enumerate(counts):
        dense = min(count, dense_left)
        dense_left -= dense
        per_rank[c % pp][0] += dense
        per_rank[c % pp][1] += count - dense
    groups = {}
    group_of = []
    for stage, (n_dense, n_moe) in enumerate(per_rank):
        signature = (n_dense, n_moe, stage == 0, stage == pp - 1)
        if signature in groups:
            groups[signature][1] += 1
        else:
            groups[signature] = [stage, 1, len(groups)]
        group_of.append(groups[signature][2])
    result = (tuple(d + e for d, e in per_rank),
              tuple((stage, *signature, count) for signature, (stage, count, _) in groups.items()),
              tuple(group_of))
    ctx.stage_cache[key] = result
    return result


def _chunk_counts(layers, chunks):
    """``layers`` dealt over ``chunks`` as evenly as they go, a chunk's extra layer to the
    middle chunks first, then the last, then the first."""
    base, extra = divmod(layers, chunks)
    counts = [base] * chunks
    order = list(range(1, chunks - 1)) + [chunks - 1, 0] if chunks > 1 else [0]
    for c in order[:extra]:
        counts[c] += 1
    return counts


def _bubble_over_ideal(schedule, pp, m, v):
    """Bubble time over ideal compute time: (p-1)/m for GPipe and 1F1B, (p-1)/(v·m)
    interleaved (Narayanan 2021 Sec. 2.2), (p-1)/(3m) for ZB-H1 (Qi et al. 2023); the
    same closed forms as ``models.pipeline.bubble_over_ideal`` (which caps v at 4 for its
    simulation). ZB-H1 with m < p never fills: (2p + 2m - 1)T for 3m·T of work
    (``models.pipeline``), i.e. (2p - m - 1)/(3m)."""
    if pp == 1:
        return 0.0
    if schedule == "interleaved":
        return (pp - 1) / (v * m)
    if schedule == "zb-h1":
        return (pp - 1) / (3 * m) if m >= pp else (2 * pp - m - 1) / (3 * m)
    return (pp - 1) / m


def _inflight(schedule, pp, m, v, stage):
    """Microbatches' worth of its layers pipeline rank ``stage`` holds at peak:
    1F1B min(p - d, m) (Narayanan 2021 Sec. 2.2.1), interleaved + (p-1)/v (Korthikanti
    2022 Sec. 4.2.3: p(1 + (p-1)/(pv)) on the first rank) but never more than all m
    microbatches (Megatron-LM's schedules.py caps the warm-up at the step's microbatches),
    GPipe m, ZB-H1 min(p, m) on every rank (Qi et al. 2023: same peak as 1F1B's first rank)."""
    if schedule == "gpipe":
        return float(m)
    if schedule == "zb-h1":
        return float(min(pp, m))
    held = float(min(pp - stage, m))
    return min(float(m), held + (pp - 1) / v) if schedule == "interleaved" else held


class _Terms:
    """A layout's per-rank quantities that do not depend on the ZeRO stage."""

    __slots__ = ("ranks", "stage_s", "slowest_s", "bubble_s", "part_s", "microbatches", "dense_group",
                 "expert_group", "dense_lines", "expert_lines", "flops", "hardware_flops", "tokens", "gpus",
                 "layers", "group_of", "schedule", "framework", "replica_line", "grad_reduce_bytes")


def _terms(ctx, tp, pp, dp, cp, ep, mb, v, recompute, sp, schedule, flash, global_batch, framework="megatron",
           tp_overlap=False, shard_group=0, grad_reduce="fp32", dispatch=("alltoall", "router")):
    """Per-microbatch seconds and per-rank bytes of a layout (every pipeline rank that
    differs), everything but the ZeRO stage's share."""
    key = (tp, pp, dp, cp, ep, mb, v, recompute, sp, schedule, flash, global_batch, framework, tp_overlap,
           shard_group, grad_reduce, dispatch)
    cached = ctx.terms_cache.get(key)
    if cached is not None:
        return cached
    if len(ctx.terms_cache) >= TERMS_KEPT:
        ctx.terms_cache.clear()
    model = ctx.model
    h, s, vocab = model.hidden, model.seq_len, model.vocab
    m = global_batch // (dp * mb)
    sp = sp and tp > 1
    tp_overlap = tp_overlap and sp
    dense = _layer(ctx, tp, cp, mb, 1, sp, recompute, flash, False, framework, tp_overlap) if ctx.has_dense else None
    moe = _layer(ctx, tp, cp, mb, ep, sp, recompute, flash, True, framework, tp_overlap,
                 dispatch) if model.experts > 1 else None
    tokens = mb * (s // cp)
    outside = tp if sp else 1
    # The output layer and loss on the last rank: logit GEMM forward, twice that backward,
    # and the fp32 cross-entropy over tokens x vocab/t as elementwise traffic.
    logits_bytes = 4.0 * tokens * vocab / tp
    traffic = ELEMENTWISE_TRAFFIC if FUSED_KERNELS[framework] else ELEMENTWISE_TRAFFIC_UNFUSED
    out_forward = ctx.gemm_s(tokens, h, vocab / tp) + traffic * logits_bytes / ctx.hbm_rate
    # Pipeline point-to-point: one activation per microbatch each way per chunk, split by t
    # (Megatron's scatter/gather, or SP), exposed (the next stage waits for it).
    if pp > 1:
        latency, per_byte = _cost(ctx, "sendrecv", tp * cp * dp, pp)
        p2p = 2 * v * (latency + per_byte * ACTIVATION_BYTES * tokens * h / tp)
    else:
        p2p = 0.0
    layers, groups, group_of = _stage_layout(ctx, pp, v)
    ranks = []
    stage_s = []
    total_s = 0.0
    for stage, n_dense, n_moe, first, last, count in groups:
        compute = recompute_s = tp_s = cp_s = ep_s = forward = 0.0
        params = expert_params = ledger = working = unit = matrix = 0.0
        for layer, n in ((dense, n_dense), (moe, n_moe)):
            if n:
                compute += n * (layer.forward_s + layer.backward_s)
                recompute_s += n * layer.recompute_s
                tp_s += n * layer.tp_s
                cp_s += n * layer.cp_s
                ep_s += n * layer.ep_s
                forward += n * layer.forward_s
                params += n * layer.params
                expert_params += n * layer.expert_params
                ledger += n * layer.ledger_bytes
                working = max(working, layer.working_bytes)
                unit = max(unit, layer.params + layer.expert_params)
                matrix = max(matrix, layer.largest_matrix)
        per_held = ledger  # bytes per microbatch in flight
        fixed_bytes = working
        if first:
            params += vocab * h / tp
            per_held += tokens * h / outside  # embedding dropout mask (Korthikanti Sec. 4.3)
        if last:
            compute += 3 * out_forward
            forward += out_forward
            params += h + (0 if (model.tied_embeddings and pp == 1) else vocab * h / tp)
            fixed_bytes += 4.0 * tokens * h / outside + logits_bytes  # final norm, output input, fp32 logits
        activations = per_held * _inflight(schedule, pp, m, v, stage) + fixed_bytes
        parts = (compute, recompute_s, tp_s, cp_s, ep_s, p2p, forward)
        if framework == "deepspeed":
            unit = matrix  # DeepSpeed gathers sub-module by sub-module, FSDP a whole layer
        ranks.append((stage, parts, params, expert_params, activations, unit, per_held, fixed_bytes, n_dense + n_moe))
        seconds = compute + recompute_s + tp_s + cp_s + ep_s + p2p
        stage_s.append(seconds)
        total_s += count * seconds
    terms = _Terms()
    terms.ranks = ranks
    terms.stage_s = stage_s
    slowest = stage_s.index(max(stage_s))
    terms.slowest_s = stage_s[slowest]
    terms.part_s = ranks[slowest][1]
    terms.bubble_s = _bubble_over_ideal(schedule, pp, m, v) * m * total_s / pp  # fill and drain at the mean pace
    terms.microbatches = m
    # ZeRO shards over the dp x cp ranks, or with HSDP over groups of shard_group of them
    # (consecutive ranks: a node's, models.mesh order) whose replicas then AllReduce each
    # gradient shard (PyTorch FSDP HYBRID_SHARD: ReduceScatter in the group, AllReduce
    # across groups, torch/distributed/fsdp/_runtime_utils.py _reduce_grad).
    shard = shard_group or dp * cp
    terms.dense_group = (tp, shard)
    terms.expert_group = (tp * ep, shard // ep)
    terms.framework = framework
    terms.dense_lines, terms.expert_lines = _group_lines(ctx, tp, shard, ep, framework)
    terms.replica_line = _cost(ctx, "allreduce", tp * shard, dp * cp // shard) if shard_group else None
    terms.grad_reduce_bytes = GRAD_REDUCE_BYTES[grad_reduce]
    terms.flops, terms.hardware_flops, terms.tokens = _step_flops(ctx, recompute, global_batch)
    terms.gpus = tp * pp * dp * cp
    terms.layers = layers
    terms.group_of = group_of
    terms.schedule = (schedule, pp, m, v)
    ctx.terms_cache[key] = terms
    return terms


def _group_lines(ctx, tp, shard, ep, framework):
    """(latency, seconds per byte) of AllReduce, ReduceScatter and AllGather on the dense
    gradient group (dp x cp ranks tp apart) and the expert-data-parallel group, each
    followed by the same for DeepSpeed's ZeRO-3 traffic (at most DEEPSPEED_ZERO3_NICS NICs)."""
    key = ("lines", tp, shard, ep, framework)
    lines = ctx.link_cache.get(key)
    if lines is None:
        ops = ("allreduce", "reducescatter", "allgather")
        nics = DEEPSPEED_ZERO3_NICS if framework == "deepspeed" else None
        lines = tuple(tuple(_cost(ctx, op, stride, degree) for op in ops)
                      + tuple(_cost(ctx, op, stride, degree, nics) for op in ops[1:])
                      for stride, degree in ((tp, shard), (tp * ep, shard // ep)))
        ctx.link_cache[key] = lines
    return lines


def _step_flops(ctx, recompute, global_batch):
    """(model FLOPs, hardware FLOPs, tokens) of one step: 6N + 12·L·h·s per token (PaLM,
    Chowdhery 2022 App. B; Narayanan 2021 Eq. 3 without recomputation = Korthikanti Eq. 7),
    plus a recomputed forward of the layers (2N_layers + 4·L·h·s, full), of the attention
    core alone (4·L·h·s, selective: Korthikanti App. A), or of the matmuls torchtitan's
    per-op policy does not keep (op) for hardware FLOPs. With MLA the attention core's
    12·h becomes 6·n_h(2d_h + d_h^R) (``Transformer.attention_core_width``)."""
    key = ("flops", recompute, global_batch)
    result = ctx.link_cache.get(key)
    if result is None:
        model = ctx.model
        tokens = float(global_batch) * model.seq_len
        attention = 6.0 * model.layers * model.attention_core_width * model.seq_len
        flops = tokens * (6.0 * ctx.active + attention)
        if recompute == "full":
            extra = tokens * (2.0 * (ctx.active - model.vocab * model.hidden) + attention / 3)
        elif recompute == "selective":
            extra = tokens * attention / 3
        elif recompute == "op":
            redo = 0.0
            for moe, count in ((False, model.layers - model.moe_layers), (True, model.moe_layers)):
                skipped = sum(i * o for _, i, o, _ in _op_sac_kept(model, moe)[1])
                if moe:
                    skipped += model.top_k * model.expert_params + model.hidden * model.experts
                redo += count * skipped
            extra = tokens * 2.0 * redo
        else:
            extra = 0.0
        result = (flops, flops + extra, tokens)
        ctx.link_cache[key] = result
    return result


def _rank_memory(terms, rank, zero):
    """(params, grads, optimizer, activations, buffers) bytes on one pipeline rank: the
    ledger of ``models.memory.model_states`` (ZeRO stage s shards the first s of optimizer
    state, gradients, parameters) for the dense weights over dp x cp and for the experts
    over the expert-data-parallel group; written out because the search calls it ~10^5
    times (tested equal)."""
    _, _, params, expert_params, activations, unit = rank[:6]
    shard, expert_shard = terms.dense_group[1], terms.expert_group[1]
    optimizer = OPTIMIZER_BYTES * (params / shard + expert_params / expert_shard if zero else params + expert_params)
    grads = GRAD_BYTES * (params / shard + expert_params / expert_shard if zero >= 2 else params + expert_params)
    weights = PARAM_BYTES * (params / shard + expert_params / expert_shard if zero == 3 else params + expert_params)
    # ZeRO-3 / FSDP peak (models.memory.fsdp_peak_memory): the largest unit (one layer; one
    # weight matrix in DeepSpeed) gathered in bf16 twice over (the next one is prefetched),
    # plus its fp32 gradients before their ReduceScatter.
    buffers = unit * (2 * PARAM_BYTES + GRAD_BYTES) if zero == 3 else 0.0
    return weights, grads, optimizer, activations, buffers


def _cost(ctx, op, stride, degree, nics=None):
    """One call of ``op`` on one group as (latency_s, seconds_per_byte): ``ctx.link``'s
    latency, and the alpha-beta bandwidth term of ``models.collectives`` (linear in the
    message size, so the search prices a message with one multiply-add)."""
    key = ("cost", op, stride, degree, nics)
    line = ctx.link_cache.get(key)
    if line is None:
        if degree == 1:
            line = (0.0, 0.0)
        else:
            latency, bandwidth = ctx.link(op, stride, degree, nics)
            seconds = collectives.cost_function(op, degree, alpha_s=0.0, bandwidth_bytes_per_s=bandwidth)
            line = (latency, seconds(1e9) / 1e9)
        ctx.link_cache[key] = line
    return line


# Sub-modules with parameters in one layer, each one ZeRO-3 gather in DeepSpeed (it fetches
# the parameters of the sub-module about to run, deepspeed/runtime/zero/
# partitioned_param_coordinator.py): two norms, QKV, the attention projection, two MLP linears.
DEEPSPEED_SUBMODULES_PER_LAYER = 6


def _calls(terms, params, layers, zero, gather=False):
    """NCCL calls one rank issues to reduce (or, ``gather``, to gather) its ``params`` once.
    FSDP shards by layer, one call per layer for every sharded stage (its units); so does
    Megatron-FSDP (ZeRO-2/3); DeepSpeed's ZeRO-3 gathers one sub-module at a time. Else one
    call per bucket: Megatron-LM max(4e7, 1e6 x dp) parameters, DeepSpeed 5e8 elements,
    PyTorch DDP 25 MiB."""
    framework = terms.framework
    if framework == "deepspeed" and zero == 3 and gather:
        return max(1, layers) * DEEPSPEED_SUBMODULES_PER_LAYER
    if (framework == "fsdp" and zero >= 1) or (framework == "megatron" and zero >= 2):
        return max(1, layers)
    if framework == "megatron":
        bucket = max(MEGATRON_BUCKET_PARAMS, MEGATRON_BUCKET_PER_RANK * terms.dense_group[1])
    elif framework == "deepspeed":
        bucket = DEEPSPEED_BUCKET_PARAMS
    else:
        bucket = ddp.bucket_cap_bytes(ddp.DEFAULT_BUCKET_CAP_MB) / GRAD_BYTES
    return max(1, math.ceil(params / bucket))


def _tail(ctx, terms, rank, zero):
    """(exposed DP / ZeRO communication, optimizer step) seconds on one pipeline rank.

    ZeRO Sec. 7's collectives (``models.memory.comm_collectives``) on the dp x cp group or
    HSDP's shard group (experts: the expert-data-parallel group), gradients in the plan's
    ``grad_reduce`` dtype, weights in bf16, each call paying its latency (``_calls``):
    DDP AllReduces the gradients behind the last microbatch's backward; ZeRO-1
    ReduceScatters them there and AllGathers the updated weights behind the next step's
    first forward (Megatron-LM's overlap-grad-reduce / overlap-param-gather; FSDP without
    resharding and with gradient sync on the last microbatch only); ZeRO-2 ReduceScatters
    after every microbatch, as DeepSpeed and FSDP do, and waits for it at the end of that
    backward, except under FSDP with a pipeline, whose reductions run asynchronously
    (Llama 3 Sec. 3.3.2: FSDP "shards optimizer states and gradients" and tolerates latency
    "by asynchronously ... reducing gradients"): a 1F1B rank's next forwards and backwards
    follow at once, so they hide behind the microbatch's forward and backward both;
    ZeRO-3 gathers the weights for every microbatch's forward and backward too. A
    collective hides behind its window as ``models.overlap.hidden_comm`` says, exposed =
    max(0, comm - window), and what hides still slows the compute under it (``_behind``);
    DeepSpeed's ZeRO-3 hides only DEEPSPEED_ZERO3_OVERLAP of what fits in its window.

    DeepSpeed's pipeline engine at ZeRO-0/1 (BF16_Optimizer) accumulates every microbatch's
    gradients into fp32 (BF16_OPTIMIZER_ACCUMULATE_BYTES through HBM, counted with the
    optimizer), then, after the last backward, AllReduces the whole fp32 gradient buffer and
    AllGathers the updated bf16 weights with nothing to hide behind (pipe/schedule.py issues
    ReduceGrads and OptimizerStep after the last BackwardPass; pipe/engine.py
    _bf16_reduce_grads all-reduces get_grads_for_reduction(), the fp32 buffer;
    bf16_optimizer.py step, all_gather_dp_groups; DeepSpeed 56c5223)."""
    _, parts, params, expert_params = rank[:4]
    layers = rank[8]
    m = terms.microbatches
    forward = parts[6]
    backward = parts[0] - parts[6] + parts[1]
    deepspeed = terms.framework == "deepspeed"
    bf16_optimizer = deepspeed and zero <= 1 and terms.schedule[1] > 1
    behind = ctx.behind
    exposed = updated = accumulated = 0.0
    for local, group, lines in ((params, terms.dense_group, terms.dense_lines),
                                (expert_params, terms.expert_group, terms.expert_lines)):
        if local <= 0:
            continue
        updated += local / group[1] if zero else local
        if bf16_optimizer:
            accumulated += m * BF16_OPTIMIZER_ACCUMULATE_BYTES * local
        if group[1] == 1:
            continue
        grads, weights = terms.grad_reduce_bytes * local, PARAM_BYTES * local
        reduces, gathers = _calls(terms, local, layers, zero), _calls(terms, local, layers, zero, gather=True)
        if bf16_optimizer:
            exposed += reduces * lines[0][0] + lines[0][1] * grads + gathers * lines[2][0] + lines[2][1] * weights
            continue
        # HSDP: each ReduceScatter is followed by an AllReduce of its 1/shard result across
        # the replicas, in the same window.
        replicas = (reduces * terms.replica_line[0] + terms.replica_line[1] * grads / group[1]
                    if terms.replica_line else 0.0)
        if zero == 0:
            exposed += behind(reduces * lines[0][0] + lines[0][1] * grads, backward)
            continue
        if zero == 3:
            (rs_latency, rs_per_byte), (ag_latency, ag_per_byte) = lines[3:5] if deepspeed else lines[1:3]
            gather = gathers * ag_latency + ag_per_byte * weights
            scatter = reduces * rs_latency + rs_per_byte * grads + replicas
            if deepspeed:
                comm = 2 * gather + scatter
                exposed += m * behind(comm, DEEPSPEED_ZERO3_OVERLAP * min(comm, forward + backward))
            else:
                # Each pass's first gather has no compute before it and the last
                # ReduceScatter none after it (Zhao et al. VLDB'23 Sec. 3-4: with prefetch only
                # 2 AllGathers and 1 ReduceScatter of one unit stay exposed).
                unit = 1 / max(1, layers)
                edge = (2 * gather + scatter) * unit
                exposed += m * (edge + behind(gather * (1 - unit), forward) + behind((gather + scatter) * (1 - unit),
                                                                                     backward))
            continue
        scatter = reduces * lines[1][0] + lines[1][1] * grads + replicas
        if zero == 2:
            _, pp, _, _ = terms.schedule
            asynchronous = terms.framework == "fsdp" and pp > 1
            exposed += m * behind(scatter, backward + forward if asynchronous else backward)
        else:
            exposed += behind(scatter, backward)
        exposed += behind(gathers * lines[2][0] + lines[2][1] * weights, forward)
    return exposed, (ADAM_STEP_BYTES * updated + accumulated) / ctx.hbm_rate


def _stage_memory(terms, zero):
    """Memory parts of every pipeline rank (ranks alike differ only in microbatches held)."""
    schedule, pp, m, v = terms.schedule
    result = []
    for stage, group in enumerate(terms.group_of):
        rank = terms.ranks[group]
        held = rank[6] * _inflight(schedule, pp, m, v, stage) + rank[7]
        result.append(_rank_memory(terms, rank[:4] + (held, rank[5]), zero))
    return tuple(result)


def _finish(ctx, terms, zero, detail=False):
    """Memory and step time of a layout at one ZeRO stage: (step_s or None if it does not
    fit, peak bytes) or, with ``detail``, the ``Estimate``."""
    worst, worst_total, worst_parts = 0, -1.0, None
    for index, rank in enumerate(terms.ranks):
        parts = _rank_memory(terms, rank, zero)
        total = parts[0] + parts[1] + parts[2] + parts[3] + parts[4]
        if total > worst_total:
            worst, worst_total, worst_parts = index, total, parts
    usable = ctx.usable
    fits = worst_total <= usable
    if not detail and not fits:
        return None, worst_total
    tail, tail_total = (0.0, 0.0), -1.0
    for rank in terms.ranks:
        candidate = _tail(ctx, terms, rank, zero)
        if candidate[0] + candidate[1] > tail_total:
            tail, tail_total = candidate, candidate[0] + candidate[1]
    m = terms.microbatches
    step = m * terms.slowest_s + terms.bubble_s + tail_total
    if not detail:
        return step, worst_total
    p = terms.part_s
    time_breakdown = dict(zip(TIME_PARTS, (m * p[0], m * p[1], terms.bubble_s, m * p[2], m * p[3], m * p[4],
                                           m * p[5], tail[0], tail[1])))
    rate = step * terms.gpus
    return Estimate(
        step_time_s=step,
        tokens_per_s=terms.tokens / step,
        mfu=terms.flops / (rate * ctx.peak),
        hfu=terms.hardware_flops / (rate * ctx.peak),
        model_tflops_per_gpu=terms.flops / rate / 1e12,
        hardware_tflops_per_gpu=terms.hardware_flops / rate / 1e12,
        memory_bytes=worst_total,
        memory_breakdown=dict(zip(MEMORY_PARTS, worst_parts)),
        time_breakdown=time_breakdown,
        fits=fits,
        usable_bytes=usable,
        hbm_bytes=float(ctx.cluster.spec.hbm_bytes),
        worst_stage=terms.ranks[worst][0],
        stage_layers=terms.layers,
        microbatches=m,
        bubble_fraction=terms.bubble_s / step,
        stage_memory=_stage_memory(terms, zero),
        model_flops_per_step=terms.flops,
        hardware_flops_per_step=terms.hardware_flops,
    )


def _check(model, cluster, plan):
    """What makes a plan impossible for this model on this cluster: ValueError saying why."""
    if not isinstance(model, Transformer):
        raise ValueError(f"model must be a planner.Transformer, got {type(model).__name__}")
    if not isinstance(cluster, Cluster):
        raise ValueError(f"cluster must be a planner.Cluster, got {type(cluster).__name__}")
    if not isinstance(plan, Plan):
        raise ValueError(f"plan must be a planner.Plan, got {type(plan).__name__}")
    if plan.gpus != cluster.gpus:
        raise ValueError(f"gpus={cluster.gpus} must equal tp*pp*dp*cp = {plan.tp}*{plan.pp}*{plan.dp}*{plan.cp} "
                         f"= {plan.gpus}")
    for name in ("heads", "kv_heads", "ffn"):
        divides("tp", plan.tp, name, getattr(model, name))
    if model.moe:
        divides("tp", plan.tp, "expert_ffn", model.expert_ffn)
    if plan.cp > 1:
        divides("2*cp", 2 * plan.cp, "seq_len", model.seq_len)  # Megatron: causal load balance needs 2·cp chunks
    if plan.sequence_parallel and plan.tp > 1:
        divides("tp", plan.tp, "seq_len/cp", model.seq_len // plan.cp)
    if plan.ep > 1:
        if not model.moe:
            raise ValueError(f"ep={plan.ep} needs a mixture-of-experts model (experts > 1)")
        divides("ep", plan.ep, "experts", model.experts)
        divides("ep", plan.ep, "dp*cp", plan.dp * plan.cp)
        per_node = max(1, cluster.gpus_per_node // plan.tp)
        if plan.ep_dispatch == "deepep" and plan.ep > per_node and plan.ep % per_node:
            raise ValueError(f"ep_dispatch='deepep' with ep={plan.ep}: DeepEP forwards between whole nodes, so ep "
                             f"must be a multiple of the {per_node} EP ranks a node holds")
        if plan.ep_routing == "round_robin" and model.experts % model.top_k:
            raise ValueError(f"ep_routing='round_robin' prices blocks of top_k={model.top_k} consecutive experts: "
                             f"top_k must divide experts={model.experts}")
    if plan.pp > model.layers:
        raise ValueError(f"pp={plan.pp} must be <= layers={model.layers} (a pipeline rank needs a layer)")
    chunks = plan.pp * plan.virtual_stages
    if chunks > 1 and model.layers < chunks - 2:
        raise ValueError(f"virtual_stages={plan.virtual_stages}: pp*virtual_stages = {chunks} chunks need at least "
                         f"{chunks - 2} layers (only the first and last chunk may hold just the embedding or the "
                         f"loss), the model has {model.layers}")
    if plan.schedule == "interleaved" and plan.microbatches % plan.pp:
        raise ValueError(f"schedule='interleaved' needs the microbatches per step, global_batch/(dp*microbatch) = "
                         f"{plan.microbatches}, to be a multiple of pp={plan.pp} (Megatron-LM)")


def predict(model, cluster, plan):
    """Step time, throughput, utilisation and per-device memory of ``plan``: an
    ``Estimate``. Inconsistent inputs raise ``ValueError`` naming the field."""
    _check(model, cluster, plan)
    ctx = _context(model, cluster, keep=False)
    terms = _terms(ctx, plan.tp, plan.pp, plan.dp, plan.cp, plan.ep, plan.microbatch, plan.virtual_stages,
                   plan.recompute, plan.sequence_parallel, plan.schedule, plan.flash_attention, plan.global_batch,
                   plan.framework, plan.tp_comm_overlap, plan.shard_group, plan.grad_reduce,
                   (plan.ep_dispatch, plan.ep_routing))
    return _finish(ctx, terms, plan.zero, detail=True)


def train_time_s(estimate, tokens):
    """Seconds to train on ``tokens`` tokens at the estimate's throughput."""
    positive("tokens", tokens)
    return float(tokens) / estimate.tokens_per_s


