"""The planner: predict one parallel layout's step time and memory, search every layout
that fits, and say why the best one wins (Figure 21; ``python -m models.planner``).

What it models
--------------
A decoder-only transformer (GPT-style, or Llama-style with GQA and SwiGLU, or a mixture
of experts) trained on ``gpus`` GPUs split into tensor (tp), context (cp), data (dp) and
pipeline (pp) parallel groups, with expert parallelism (ep) carved out of dp x cp as
Megatron-Core does (``models.mesh``). Every number is built from the ledgers of this
package:

* memory: the model-state ledger of ``models.memory`` with Megatron-LM's byte sizes
  (bf16 weights, fp32 main gradients, fp32 Adam: 2 + 4 + 12 = 18 bytes per parameter;
  ``--use-distributed-optimizer`` is ZeRO-1: 6 + 12/dp), sharded by ZeRO over dp x cp;
  the activation ledger of Korthikanti et al. 2022 (``models.activations``) per layer,
  extended to GQA, SwiGLU and experts, times the microbatches a pipeline stage holds;
* time: GEMMs at ``GEMM_EFFICIENCY`` of peak under a roofline (the per-rank shape decides
  whether a GEMM is compute- or memory-bound), elementwise kernels as HBM traffic
  (``ELEMENTWISE_TRAFFIC`` bytes per byte of the activation ledger), the collectives of
  every axis priced by ``models.collectives`` on the fabric the axis lands on
  (``models.mesh`` rank order tp-cp-dp-pp), hidden where ``models.overlap`` says they can
  hide, and the pipeline bubble of the schedule (``models.pipeline`` closed forms);
* FLOPs: model FLOPs 6N + 12·layers·hidden·seq per token (PaLM / Megatron convention, not
  halved for causality); hardware FLOPs add recomputation (Megatron-LM 2021's convention).

What it does not model
----------------------
Kernel-by-kernel timing, stragglers, congestion between axes sharing a NIC, NCCL protocol
choice, expert load imbalance, allocator fragmentation beyond a fixed reserve, and the
multi-token-prediction and MLA specifics of DeepSeek-V3 (MLA is priced as multi-head
attention). Calibrated only against the published cases (docs/MODELS.md, "Planner").
"""
import math
from dataclasses import dataclass, fields, replace

from models import collectives, fmt, hardware, memory, overlap
from models._validate import choice, divides, non_negative_int, positive, positive_int

__all__ = [
    "GEMM_EFFICIENCY", "ATTENTION_EFFICIENCY", "ELEMENTWISE_TRAFFIC", "COLLECTIVE_EFFICIENCY", "USABLE_HBM_FRACTION",
    "PARAM_BYTES", "GRAD_BYTES", "OPTIMIZER_BYTES", "ADAM_STEP_BYTES", "RECOMPUTE_OPTIONS", "SCHEDULES",
    "Transformer", "Cluster", "Plan", "Estimate", "Candidate", "Search", "predict", "search", "search_steps",
    "run_steps", "recommend", "explain", "train_time_s", "MODELS", "CLUSTERS", "model_preset", "cluster_preset",
    "USUAL_NETWORK",
]

# ---- the named constants (each justified in docs/MODELS.md, "Planner") ------------------
# Fraction of a GPU's dense peak that the GEMMs of a training step sustain when they are
# compute-bound (cuBLAS on large bf16/fp16 shapes reaches ~80%; launch gaps, wave
# quantisation and the smaller backward GEMMs take the rest). Fitted, with
# ELEMENTWISE_TRAFFIC, to the four Megatron-LM 2021 Table 1 rows.
GEMM_EFFICIENCY = 0.71
# Fraction of peak the attention core (QK^T, softmax, AV and their gradients) sustains:
# FlashAttention-2 reaches 50-73% of A100 peak forward and 35-63% backward (Dao 2023,
# Sec. 4.1), and unfused batched GEMMs over 64-160-wide heads do no better.
ATTENTION_EFFICIENCY = 0.50
# Bytes the non-GEMM kernels (layernorm, dropout, activation function, residual adds,
# softmax) move through HBM per byte of a layer's activation ledger, per forward pass;
# a backward pass moves twice that. Each stored tensor is written once and read at least
# once more (2), plus the inputs these kernels read; the value is fitted with
# GEMM_EFFICIENCY to the same four rows (docs/MODELS.md, "Planner").
ELEMENTWISE_TRAFFIC = 2.5
# Achievable bus bandwidth over the datasheet link rate: NCCL's own tuning model caps A100
# NVLink at 235 GB/s of the 300 GB/s peak (NVIDIA/nccl src/graph/tuning.cc).
COLLECTIVE_EFFICIENCY = 235 / 300
# Share of HBM a plan may fill: the CUDA context, NCCL buffers, cuBLAS workspaces and the
# caching allocator's fragmentation take the rest (a plan close to the limit does not fit).
USABLE_HBM_FRACTION = 0.90

# Megatron-LM's ledger (megatron/training/theoretical_memory_usage.py; Korthikanti et al.
# 2022 Fig. 1 uses the same 18 bytes): bf16 weights, fp32 main gradients, fp32 master
# weights + Adam moments.
PARAM_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2, 4, 12
ACTIVATION_BYTES = 2  # bf16 activations and messages
# One Adam step reads the fp32 gradient, master weight and two moments and writes the
# master weight, both moments and the bf16 weight: 4*4 + 3*4 + 2 = 30 bytes per parameter.
ADAM_STEP_BYTES = memory.optimizer_step_traffic_bytes(param_bytes=PARAM_BYTES, grad_bytes=GRAD_BYTES,
                                                      optimizer_bytes=OPTIMIZER_BYTES)

RECOMPUTE_OPTIONS = ("none", "selective", "full")
SCHEDULES = ("1f1b", "interleaved", "zb-h1", "gpipe")
ZERO_STAGES = (0, 1, 2, 3)

# The network a GPU usually ships with, one NIC per GPU (DGX/HGX systems).
USUAL_NETWORK = {
    "a100_40gb": "ib_hdr", "a100_80gb": "ib_hdr", "h100_sxm": "ib_ndr", "h200": "ib_ndr",
    "b200": "ib_ndr", "mi300x": "roce_400gbe",
}


def _flag(name, value):
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return value


# ---- inputs ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Transformer:
    """A decoder-only transformer. ``ffn`` defaults to 4·hidden, ``kv_heads`` to ``heads``
    (fewer: grouped-query attention), ``expert_ffn`` to ``ffn``. ``gated_mlp``: SwiGLU,
    three hidden x ffn matrices. With ``experts`` > 1 every layer after the first
    ``dense_layers`` is a mixture of experts: ``top_k`` routed experts per token plus
    ``shared_experts`` always-on ones, each ``expert_ffn`` wide. ``tied_embeddings``: the
    output layer reuses the input embedding (GPT); Llama and DeepSeek untie them."""

    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int
    ffn: int = None
    kv_heads: int = None
    gated_mlp: bool = False
    experts: int = 1
    top_k: int = 1
    shared_experts: int = 0
    expert_ffn: int = None
    dense_layers: int = 0
    tied_embeddings: bool = True

    def __post_init__(self):
        for name in ("layers", "hidden", "heads", "seq_len", "vocab", "experts", "top_k"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        for name in ("shared_experts", "dense_layers"):
            object.__setattr__(self, name, non_negative_int(name, getattr(self, name)))
        ffn = 4 * self.hidden if self.ffn is None else positive_int("ffn", self.ffn)
        kv_heads = self.heads if self.kv_heads is None else positive_int("kv_heads", self.kv_heads)
        object.__setattr__(self, "ffn", ffn)
        object.__setattr__(self, "kv_heads", kv_heads)
        object.__setattr__(self, "expert_ffn", ffn if self.expert_ffn is None else positive_int("expert_ffn", self.expert_ffn))
        _flag("gated_mlp", self.gated_mlp)
        _flag("tied_embeddings", self.tied_embeddings)
        divides("heads", self.heads, "hidden", self.hidden)
        divides("kv_heads", self.kv_heads, "heads", self.heads)
        if self.top_k > self.experts:
            raise ValueError(f"top_k={self.top_k} must be <= experts={self.experts}")
        if self.experts == 1 and self.shared_experts:
            raise ValueError(f"shared_experts={self.shared_experts} needs a mixture of experts (experts > 1)")
        if self.dense_layers >= self.layers and self.experts > 1:
            raise ValueError(f"dense_layers={self.dense_layers} must be < layers={self.layers}")

    @property
    def moe(self):
        return self.experts > 1

    @property
    def head_dim(self):
        return self.hidden // self.heads

    @property
    def kv_hidden(self):
        """Width of K (or V): hidden·kv_heads/heads."""
        return self.head_dim * self.kv_heads

    @property
    def moe_layers(self):
        return self.layers - self.dense_layers if self.moe else 0

    def _matrices(self):
        return 3 if self.gated_mlp else 2

    @property
    def attention_params(self):
        """Q, K, V and output projections of one layer: 2h² + 2h·h_kv."""
        return 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_hidden

    @property
    def dense_mlp_params(self):
        return self._matrices() * self.hidden * self.ffn

    @property
    def expert_params(self):
        """One expert's MLP."""
        return self._matrices() * self.hidden * self.expert_ffn

    @property
    def params(self):
        """Every weight: layers (attention, MLP or experts + router, two norms), embedding,
        output layer unless tied, final norm."""
        h = self.hidden
        dense = self.layers - self.moe_layers
        moe = self.moe_layers * (self.attention_params + (self.experts + self.shared_experts) * self.expert_params
                                 + h * self.experts)
        embeddings = self.vocab * h * (1 if self.tied_embeddings else 2)
        return float(dense * (self.attention_params + self.dense_mlp_params) + moe + 2 * h * self.layers + embeddings + h)

    @property
    def active_matmul_params(self):
        """The N of 6N: weights one token multiplies by, output layer included, embedding
        lookup excluded (Narayanan 2021 Eq. 3 counts the logit GEMM, not the lookup)."""
        dense = self.layers - self.moe_layers
        moe = self.moe_layers * (self.attention_params + (self.top_k + self.shared_experts) * self.expert_params
                                 + self.hidden * self.experts)
        return float(dense * (self.attention_params + self.dense_mlp_params) + moe + self.vocab * self.hidden)


@dataclass(frozen=True)
class Cluster:
    """``gpus`` GPUs of type ``gpu`` (a key of ``models.hardware.GPUS``), ``gpus_per_node``
    to a node. ``intra`` / ``inter``: keys of ``models.hardware.LINKS`` for the links inside
    and between nodes (None: the GPU's usual NVLink and one NIC per GPU).
    ``inter_bytes_per_s`` overrides the per-GPU network bandwidth (one direction), e.g.
    for nodes with fewer NICs than GPUs."""

    gpu: str = "a100_80gb"
    gpus: int = 1024
    gpus_per_node: int = 8
    intra: str = None
    inter: str = None
    inter_bytes_per_s: float = None

    def __post_init__(self):
        choice("gpu", self.gpu, tuple(hardware.GPUS))
        object.__setattr__(self, "gpus", positive_int("gpus", self.gpus))
        object.__setattr__(self, "gpus_per_node", positive_int("gpus_per_node", self.gpus_per_node))
        if self.gpus > self.gpus_per_node and self.gpus % self.gpus_per_node:
            raise ValueError(f"gpus={self.gpus} must be a multiple of gpus_per_node={self.gpus_per_node} (whole nodes)")
        if self.gpus < self.gpus_per_node and self.gpus_per_node % self.gpus:
            raise ValueError(f"gpus={self.gpus} must divide gpus_per_node={self.gpus_per_node} (part of one node)")
        if self.intra is not None:
            choice("intra", self.intra, tuple(hardware.LINKS))
        if self.inter is not None:
            choice("inter", self.inter, tuple(hardware.LINKS))
        if self.inter_bytes_per_s is not None:
            positive("inter_bytes_per_s", self.inter_bytes_per_s)

    @property
    def spec(self):
        return hardware.GPUS[self.gpu]

    @property
    def intra_link(self):
        return hardware.LINKS[self.intra or self.spec.scale_up_link]

    @property
    def inter_link(self):
        return hardware.LINKS[self.inter or USUAL_NETWORK[self.gpu]]

    @property
    def network_bytes_per_s(self):
        """Per-GPU bandwidth off the node, one direction."""
        return float(self.inter_bytes_per_s or self.inter_link.bandwidth_bytes_per_s)

    @property
    def usable_bytes(self):
        return self.spec.hbm_bytes * USABLE_HBM_FRACTION


@dataclass(frozen=True)
class Plan:
    """One layout: gpus = tp·pp·dp·cp (ep lives inside dp·cp); ``global_batch`` sequences
    per step in microbatches of ``microbatch``; ``virtual_stages`` model chunks per
    pipeline rank (interleaved schedule only); ZeRO stage 0-3 over dp·cp; activation
    recomputation none|selective|full; sequence parallelism (changes nothing at tp=1);
    FlashAttention (never materialises the score matrix)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    microbatch: int = 1
    global_batch: int = 1
    virtual_stages: int = 1
    zero: int = 0
    recompute: str = "selective"
    sequence_parallel: bool = True
    schedule: str = "1f1b"
    flash_attention: bool = True

    def __post_init__(self):
        for name in ("tp", "pp", "dp", "cp", "ep", "microbatch", "global_batch", "virtual_stages"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        choice("zero", self.zero, ZERO_STAGES)
        choice("recompute", self.recompute, RECOMPUTE_OPTIONS)
        choice("schedule", self.schedule, SCHEDULES)
        _flag("sequence_parallel", self.sequence_parallel)
        _flag("flash_attention", self.flash_attention)
        if self.schedule == "interleaved" and self.virtual_stages == 1:
            raise ValueError("virtual_stages=1: the interleaved schedule needs at least 2 model chunks per pipeline rank")
        if self.schedule != "interleaved" and self.virtual_stages > 1:
            raise ValueError(f"virtual_stages={self.virtual_stages} needs schedule='interleaved', not {self.schedule!r}")
        if self.global_batch % (self.dp * self.microbatch):
            raise ValueError(f"global_batch={self.global_batch} is not divisible by dp*microbatch = "
                             f"{self.dp}*{self.microbatch} = {self.dp * self.microbatch}")

    @property
    def microbatches(self):
        """Microbatches per step on each pipeline: global_batch / (dp·microbatch)."""
        return self.global_batch // (self.dp * self.microbatch)

    @property
    def gpus(self):
        return self.tp * self.pp * self.dp * self.cp

    def label(self):
        """'tp8 pp8 dp16 mb1 ZeRO-1 selective' (what a table row shows)."""
        parts = [f"tp{self.tp}", f"pp{self.pp}"]
        if self.virtual_stages > 1:
            parts[-1] += f"x{self.virtual_stages}"
        parts.append(f"dp{self.dp}")
        if self.cp > 1:
            parts.append(f"cp{self.cp}")
        if self.ep > 1:
            parts.append(f"ep{self.ep}")
        parts += [f"mb{self.microbatch}", memory.STAGE_LABELS[self.zero], f"{self.recompute} recompute"]
        return " ".join(parts)


# ---- outputs -----------------------------------------------------------------------------

MEMORY_PARTS = ("params", "grads", "optimizer", "activations", "buffers")
TIME_PARTS = ("compute", "recompute", "bubble", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "optimizer")


@dataclass(frozen=True)
class Estimate:
    """What ``predict`` says about one plan. Times in seconds, memory in bytes per device
    (the worst pipeline stage), fractions 0-1, throughputs for the whole cluster."""

    step_time_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    memory_bytes: float
    memory_breakdown: dict
    time_breakdown: dict
    fits: bool
    usable_bytes: float
    hbm_bytes: float
    worst_stage: int
    stage_layers: tuple  # transformer layers on each pipeline rank
    microbatches: int
    bubble_fraction: float  # bubble / step time
    stage_memory: tuple  # per pipeline rank: (params, grads, optimizer, activations, buffers) bytes
    model_flops_per_step: float
    hardware_flops_per_step: float

    @property
    def model_state_bytes(self):
        """Parameters, gradients and optimizer state on the worst stage."""
        b = self.memory_breakdown
        return b["params"] + b["grads"] + b["optimizer"]


@dataclass(frozen=True)
class Candidate:
    plan: Plan
    estimate: Estimate
    reasons: tuple  # sentences with numbers, the ladder for the best, the comparison for the others


@dataclass(frozen=True)
class Search:
    """Everything ``search`` found: ``candidates`` that fit, best first (one per layout:
    degrees, microbatch and chunks, with its fastest ZeRO stage and recompute mode);
    ``smallest`` the plan with the smallest footprint among those priced (when nothing
    fits, the one closest to fitting); ``considered`` plans priced (a plan that cannot
    beat one already priced in its layout is skipped), ``fitting`` how many of them
    fit; ``dropped``
    sentences saying what did not fit and why."""

    candidates: tuple
    smallest: Candidate
    considered: int
    fitting: int
    dropped: tuple
    ladder: tuple
    message: str = ""  # when nothing fits: the smallest footprint found and what would make it fit


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
        self.gemm_rate = self.peak * GEMM_EFFICIENCY
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

    # -- fabric ---------------------------------------------------------------------------
    def link(self, stride, degree):
        """(alpha_s, bytes_per_s) of a group of ``degree`` ranks ``stride`` apart (models.mesh
        rank order): NVLink if the group sits inside one node, else the network. A group
        with k members per node runs k rings side by side, one per NIC (NCCL's rail
        channels), so it gets min(NVLink, k x NIC)."""
        key = (stride, degree)
        cached = self.link_cache.get(key)
        if cached is not None:
            return cached
        g = self.cluster.gpus_per_node
        span = stride * degree
        if span <= g and g % span == 0:
            result = (self.intra.alpha_s, self.intra.bandwidth_bytes_per_s * COLLECTIVE_EFFICIENCY)
        else:
            per_node = max(1, min(degree, g // stride)) if stride < g else 1
            bandwidth = min(self.intra.bandwidth_bytes_per_s, per_node * self.network)
            result = (self.inter.alpha_s, bandwidth * COLLECTIVE_EFFICIENCY)
        self.link_cache[key] = result
        return result

    def collective_s(self, op, nbytes, stride, degree):
        if degree == 1 or nbytes == 0:
            return 0.0
        alpha, bandwidth = self.link(stride, degree)
        return collectives.time_s(op, nbytes, degree, alpha_s=alpha, bandwidth_bytes_per_s=bandwidth)

    # -- one GEMM -----------------------------------------------------------------------
    def gemm_s(self, m, k, n):
        """Roofline: the slower of its FLOPs at GEMM_EFFICIENCY of peak and its bf16 operands
        through HBM. The per-rank shape decides which."""
        return max(2.0 * m * k * n / self.gemm_rate, ACTIVATION_BYTES * (m * k + k * n + m * n) / self.hbm_rate)


def _layer_ledger(model, seq, micro_batch, tp, sp, recompute, flash, moe):
    """Activation bytes one layer keeps for backward on one TP rank (Korthikanti 2022
    Sec. 4.1 / Table 2, as ``models.activations.layer_activations``), generalised: K and V
    are h_kv wide (GQA); a gated MLP keeps three ffn-wide tensors (gate, up, their
    product) where GeLU keeps two; an MoE layer keeps them for top_k + shared experts
    plus the top_k dispatched copies of its input. Returns (total, score-matrix part).
    For GPT shapes it equals ``activations.layer_activations`` (tested)."""
    sb = float(seq) * micro_batch
    h = model.hidden
    if recompute == "full":  # Sec. 5: only the layer input, split by t with SP
        return 2 * sb * h / (tp if sp else 1), 0.0
    outside = 10 * sb * h / (tp if sp else 1)
    attention = (4 * sb * h + 4 * sb * model.kv_hidden) / tp  # Q, K, V, projection input
    tensors = 3 if model.gated_mlp else 2
    if moe:
        width = (model.top_k + model.shared_experts) * model.expert_ffn
        mlp = (2 * tensors * sb * width + 2 * model.top_k * sb * h) / tp
    else:
        mlp = 2 * tensors * sb * model.ffn / tp
    scores = 0.0 if (recompute == "selective" or flash) else 5.0 * model.heads * seq * sb / tp
    return outside + attention + mlp + scores, scores


class _Layer:
    """Per-rank seconds and bytes of one transformer layer for one microbatch."""

    __slots__ = ("forward_s", "backward_s", "recompute_s", "tp_s", "cp_s", "ep_s", "ledger_bytes",
                 "working_bytes", "params", "expert_params")


def _layer(ctx, tp, cp, mb, ep, sp, recompute, flash, moe):
    key = (tp, cp, mb, ep, sp, recompute, flash, moe)
    cached = ctx.layer_cache.get(key)
    if cached is not None:
        return cached
    model = ctx.model
    h, s = model.hidden, model.seq_len
    s_local = s // cp
    tokens = mb * s_local
    gemm = ctx.gemm_s
    glu = 2 if model.gated_mlp else 1
    # forward GEMMs on this rank (Shoeybi 2019 Sec. 3 shapes): QKV, output projection, MLP
    forward = gemm(tokens, h, (h + 2 * model.kv_hidden) // tp) + gemm(tokens, h // tp, h)
    if moe:
        experts_here = model.experts // ep
        routed = tokens * model.top_k * ep / model.experts  # tokens per expert, balanced routing
        forward += experts_here * (gemm(routed, h, glu * model.expert_ffn // tp) + gemm(routed, model.expert_ffn // tp, h))
        if model.shared_experts:
            width = model.shared_experts * model.expert_ffn
            forward += gemm(tokens, h, glu * width // tp) + gemm(tokens, width // tp, h)
        forward += gemm(tokens, h, model.experts)  # router
    else:
        forward += gemm(tokens, h, glu * model.ffn // tp) + gemm(tokens, model.ffn // tp, h)
    # attention core QK^T and AV: 4·b·(s/cp)·s·h/t FLOPs; a causal FlashAttention kernel
    # skips the masked half (Dao 2023, FlashAttention-2 Sec. 3.1).
    attention = 4.0 * tokens * s * h / tp * (0.5 if flash else 1.0) / (ctx.peak * ATTENTION_EFFICIENCY)
    ledger, scores = _layer_ledger(model, s_local, mb, tp, sp, "none", flash, moe)  # everything a forward writes
    elementwise = ELEMENTWISE_TRAFFIC * ledger / ctx.hbm_rate
    layer = _Layer()
    layer.forward_s = forward + attention + elementwise
    # Backward: twice the forward GEMMs and elementwise traffic (gradients of inputs and of
    # weights); FlashAttention's backward also recomputes QK^T and the softmax, 5 matmuls
    # against the forward's 2 (Dao et al. 2022, Alg. 4): 2.5x its forward.
    layer.backward_s = 2.0 * (forward + elementwise) + (2.5 if flash else 2.0) * attention
    if recompute == "full":
        layer.recompute_s = layer.forward_s
    elif recompute == "selective":
        layer.recompute_s = attention + ELEMENTWISE_TRAFFIC * scores / ctx.hbm_rate
    else:
        layer.recompute_s = 0.0
    passes = 3 if recompute == "full" else 2  # passes that issue this layer's collectives: forward(s) + backward
    # TP: two AllReduces (or ReduceScatter + AllGather with SP: the same bytes) per pass
    # (Shoeybi 2019; Korthikanti 2022 Sec. 4.2.2), blocking: the next op consumes them.
    message = ACTIVATION_BYTES * tokens * h
    tp_once = ctx.collective_s("allreduce", message, 1, tp)
    layer.tp_s = overlap.hidden_comm("tp", 2 * passes * tp_once, forward).exposed_s  # the window is always 0
    # CP: ring attention passes K and V blocks cp-1 times per layer and pass (Liu et al.
    # 2023); backward moves K, V and their gradients; hidden behind the attention blocks.
    if cp > 1:
        alpha, bandwidth = ctx.link(tp, cp)
        block = 2.0 * ACTIVATION_BYTES * tokens * model.kv_hidden / tp
        ring = (cp - 1) * (alpha + block / bandwidth)
        forward_cp = overlap.hidden_comm("cp", ring, attention).exposed_s
        backward_cp = overlap.hidden_comm("cp", 2 * ring, 2 * attention).exposed_s
        layer.cp_s = forward_cp * (passes - 1) + backward_cp
    else:
        layer.cp_s = 0.0
    # EP: All-to-All dispatch and combine per pass, k copies of each token (article's EP
    # ledger, models.experts.moe_alltoall_bytes), nothing to hide behind.
    if moe and ep > 1:
        send = ACTIVATION_BYTES * tokens * model.top_k * h / tp
        layer.ep_s = overlap.hidden_comm("ep", 2 * passes * ctx.collective_s("alltoall", send, tp, ep), 0.0).exposed_s
    else:
        layer.ep_s = 0.0
    layer.ledger_bytes, _ = _layer_ledger(model, s_local, mb, tp, sp, recompute, flash, moe)
    layer.working_bytes = ledger if recompute == "full" else 0.0  # the layer being recomputed
    if moe:
        layer.params = (model.attention_params + model.shared_experts * model.expert_params) / tp \
            + h * model.experts + 2 * h
        layer.expert_params = model.experts * model.expert_params / (tp * ep)
    else:
        layer.params = (model.attention_params + model.dense_mlp_params) / tp + 2 * h
        layer.expert_params = 0.0
    ctx.layer_cache[key] = layer
    return layer


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
    2022 Sec. 4.2.3: p(1 + (p-1)/(pv)) on the first rank), GPipe m, ZB-H1 min(p, m) on
    every rank (Qi et al. 2023: same peak as 1F1B's first rank)."""
    if schedule == "gpipe":
        return float(m)
    if schedule == "zb-h1":
        return float(min(pp, m))
    held = float(min(pp - stage, m))
    return held + (pp - 1) / v if schedule == "interleaved" else held


class _Terms:
    """A layout's per-rank quantities that do not depend on the ZeRO stage."""

    __slots__ = ("ranks", "stage_s", "slowest_s", "bubble_s", "part_s", "microbatches", "dense_group",
                 "expert_group", "dense_lines", "expert_lines", "flops", "hardware_flops", "tokens", "gpus",
                 "layers", "group_of", "schedule")


def _terms(ctx, tp, pp, dp, cp, ep, mb, v, recompute, sp, schedule, flash, global_batch):
    """Per-microbatch seconds and per-rank bytes of a layout (every pipeline rank that
    differs), everything but the ZeRO stage's share."""
    key = (tp, pp, dp, cp, ep, mb, v, recompute, sp, schedule, flash, global_batch)
    cached = ctx.terms_cache.get(key)
    if cached is not None:
        return cached
    if len(ctx.terms_cache) >= TERMS_KEPT:
        ctx.terms_cache.clear()
    model = ctx.model
    h, s, vocab = model.hidden, model.seq_len, model.vocab
    m = global_batch // (dp * mb)
    sp = sp and tp > 1
    dense = _layer(ctx, tp, cp, mb, 1, sp, recompute, flash, False) if ctx.has_dense else None
    moe = _layer(ctx, tp, cp, mb, ep, sp, recompute, flash, True) if model.experts > 1 else None
    tokens = mb * (s // cp)
    outside = tp if sp else 1
    # The output layer and loss on the last rank: logit GEMM forward, twice that backward,
    # and the fp32 cross-entropy over tokens x vocab/t as elementwise traffic.
    logits_bytes = 4.0 * tokens * vocab / tp
    out_forward = ctx.gemm_s(tokens, h, vocab / tp) + ELEMENTWISE_TRAFFIC * logits_bytes / ctx.hbm_rate
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
        params = expert_params = ledger = working = unit = 0.0
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
        ranks.append((stage, parts, params, expert_params, activations, unit, per_held, fixed_bytes))
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
    terms.dense_group = (tp, dp * cp)
    terms.expert_group = (tp * ep, dp * cp // ep)
    terms.dense_lines, terms.expert_lines = _group_lines(ctx, tp, dp * cp, ep)
    terms.flops, terms.hardware_flops, terms.tokens = _step_flops(ctx, recompute, global_batch)
    terms.gpus = tp * pp * dp * cp
    terms.layers = layers
    terms.group_of = group_of
    terms.schedule = (schedule, pp, m, v)
    ctx.terms_cache[key] = terms
    return terms


def _group_lines(ctx, tp, shard, ep):
    """(latency, seconds per byte) of AllReduce, ReduceScatter and AllGather on the dense
    gradient group (dp x cp ranks tp apart) and the expert-data-parallel group."""
    key = ("lines", tp, shard, ep)
    lines = ctx.link_cache.get(key)
    if lines is None:
        ops = ("allreduce", "reducescatter", "allgather")
        lines = (tuple(_cost(ctx, op, tp, shard) for op in ops), tuple(_cost(ctx, op, tp * ep, shard // ep) for op in ops))
        ctx.link_cache[key] = lines
    return lines


def _step_flops(ctx, recompute, global_batch):
    """(model FLOPs, hardware FLOPs, tokens) of one step: 6N + 12·L·h·s per token (PaLM,
    Chowdhery 2022 App. B; Narayanan 2021 Eq. 3 without recomputation = Korthikanti Eq. 7),
    plus a recomputed forward of the layers (2N_layers + 4·L·h·s, full) or of the attention
    core alone (4·L·h·s, selective: Korthikanti App. A) for hardware FLOPs."""
    key = ("flops", recompute, global_batch)
    result = ctx.link_cache.get(key)
    if result is None:
        model = ctx.model
        tokens = float(global_batch) * model.seq_len
        attention = 12.0 * model.layers * model.hidden * model.seq_len
        flops = tokens * (6.0 * ctx.active + attention)
        if recompute == "full":
            extra = tokens * (2.0 * (ctx.active - model.vocab * model.hidden) + attention / 3)
        elif recompute == "selective":
            extra = tokens * attention / 3
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
    # ZeRO-3 / FSDP peak (models.memory.fsdp_peak_memory): the largest unit, one layer,
    # gathered in bf16 twice over (the next one is prefetched), plus its fp32 gradients
    # before their ReduceScatter.
    buffers = unit * (2 * PARAM_BYTES + GRAD_BYTES) if zero == 3 else 0.0
    return weights, grads, optimizer, activations, buffers


def _cost(ctx, op, stride, degree):
    """``collectives.time_s`` of ``op`` on one group as (latency_s, seconds_per_byte): the
    alpha-beta time is linear in the message size, so the search prices a message with
    one multiply-add instead of a validated call."""
    key = (op, stride, degree)
    line = ctx.link_cache.get(key)
    if line is None:
        if degree == 1:
            line = (0.0, 0.0)
        else:
            alpha, bandwidth = ctx.link(stride, degree)
            seconds = collectives.cost_function(op, degree, alpha_s=alpha, bandwidth_bytes_per_s=bandwidth)
            latency = seconds(0.0)
            line = (latency, (seconds(1e9) - latency) / 1e9)
        ctx.link_cache[key] = line
    return line


def _tail(ctx, terms, rank, zero):
    """(exposed DP / ZeRO communication, optimizer step) seconds on one pipeline rank.

    ZeRO Sec. 7's collectives (``models.memory.comm_collectives``) on the dp x cp group
    (experts: the expert-data-parallel group), gradients in fp32, weights in bf16:
    DDP AllReduces the gradients behind the last microbatch's backward; ZeRO-1
    ReduceScatters them there and AllGathers the updated weights behind the next step's
    first forward (Megatron-LM's overlap-grad-reduce / overlap-param-gather); ZeRO-2
    ReduceScatters after every microbatch; ZeRO-3 gathers the weights for every
    microbatch's forward and backward too. A collective hides behind its window as
    ``models.overlap.hidden_comm`` says: exposed = max(0, comm - window)."""
    _, parts, params, expert_params = rank[:4]
    m = terms.microbatches
    forward = parts[6]
    backward = parts[0] - parts[6] + parts[1]
    exposed = updated = 0.0
    for local, group, lines in ((params, terms.dense_group, terms.dense_lines),
                                (expert_params, terms.expert_group, terms.expert_lines)):
        if local <= 0:
            continue
        updated += local / group[1] if zero else local
        if group[1] == 1:
            continue
        grads, weights = GRAD_BYTES * local, PARAM_BYTES * local
        if zero == 0:
            comm = lines[0][0] + lines[0][1] * grads
            exposed += comm - backward if comm > backward else 0.0
            continue
        scatter = lines[1][0] + lines[1][1] * grads
        gather = lines[2][0] + lines[2][1] * weights
        if zero == 3:
            hidden = gather + scatter
            exposed += m * ((gather - forward if gather > forward else 0.0)
                            + (hidden - backward if hidden > backward else 0.0))
        else:
            exposed += ((m if zero == 2 else 1) * (scatter - backward if scatter > backward else 0.0)
                        + (gather - forward if gather > forward else 0.0))
    return exposed, ADAM_STEP_BYTES * updated / ctx.hbm_rate


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
                   plan.recompute, plan.sequence_parallel, plan.schedule, plan.flash_attention, plan.global_batch)
    return _finish(ctx, terms, plan.zero, detail=True)


def train_time_s(estimate, tokens):
    """Seconds to train on ``tokens`` tokens at the estimate's throughput."""
    positive("tokens", tokens)
    return float(tokens) / estimate.tokens_per_s


# ---- the search --------------------------------------------------------------------------

PLAN_FIELDS = tuple(f.name for f in fields(Plan))
SEARCHED_FIELDS = ("tp", "pp", "cp", "ep", "microbatch", "virtual_stages", "zero", "recompute",
                   "sequence_parallel", "schedule", "flash_attention")
VIRTUAL_STAGES = (2, 3, 4, 6, 8)  # interleaving depths the search tries
# Context parallelism is searched only while each rank keeps >= 4096 tokens of a sequence:
# below that a ring step's attention block is too short to hide the next K/V block
# behind (NVIDIA's Megatron-Core guidance: context parallelism for long sequences).
MIN_CP_TOKENS = 4096
MAX_MICROBATCH = 16


def _powers_of_two(limit):
    value, result = 1, []
    while value <= limit:
        result.append(value)
        value *= 2
    return result


def _divisors(n, limit):
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _check_fixed(fixed):
    fixed = dict(fixed or {})
    for key in fixed:
        if key not in SEARCHED_FIELDS:
            raise ValueError(f"fixed: {key!r} is not a plan field the search chooses; choose from "
                             f"{', '.join(SEARCHED_FIELDS)}")
    pinned = {k: v for k, v in fixed.items() if k not in ("schedule", "virtual_stages")}
    Plan(global_batch=pinned.get("microbatch", 1), **pinned)  # the pinned values' types and ranges
    if "schedule" in fixed:
        choice("schedule", fixed["schedule"], SCHEDULES)
    if "virtual_stages" in fixed:
        positive_int("virtual_stages", fixed["virtual_stages"])
    return fixed


def _check_pinned(model, cluster, fixed):
    """Pinned degrees that no layout of this model on this cluster can take: say why."""
    if "tp" in fixed:
        for name in ("heads", "kv_heads", "ffn") + (("expert_ffn",) if model.moe else ()):
            divides("tp", fixed["tp"], name, getattr(model, name))
    for axis in ("tp", "pp", "cp"):
        if axis in fixed:
            divides(axis, fixed[axis], "gpus", cluster.gpus)
    if fixed.get("cp", 1) > 1:
        divides("2*cp", 2 * fixed["cp"], "seq_len", model.seq_len)
    if fixed.get("pp", 1) > model.layers:
        raise ValueError(f"pp={fixed['pp']} must be <= layers={model.layers} (a pipeline rank needs a layer)")
    if fixed.get("ep", 1) > 1:
        if not model.moe:
            raise ValueError(f"ep={fixed['ep']} needs a mixture-of-experts model (experts > 1)")
        divides("ep", fixed["ep"], "experts", model.experts)


def _options(fixed, key, default):
    return [fixed[key]] if key in fixed else default


def search(model, cluster, global_batch, *, top=5, fixed=None):
    """Price every layout of ``model`` on ``cluster`` for ``global_batch`` sequences per
    step and keep the fastest that fit: a ``Search``. ``fixed`` pins plan fields (for
    example ``{"tp": 4}``); the rest are searched: tp (powers of two inside a node that
    divide the heads), cp (powers of two keeping >= 4096 tokens per rank), pp (divisors
    of the remaining GPUs, <= layers), dp (the rest), ep (divisors of the experts inside
    dp·cp), microbatch (powers of two up to 16, upward while the step gets faster, and no
    larger than leaves a pipeline as many microbatches as stages), virtual stages (1, or 2, 3, 4, 6, 8 interleaved,
    deeper while the step gets faster), ZeRO
    stage, recompute mode and sequence parallelism. Dominated choices are priced only
    when pinned: sequence parallelism off (the same traffic as plain TP, more memory),
    DDP (ZeRO-1 moves fewer bytes and holds less), selective recompute under
    FlashAttention (which already drops the score matrix)."""
    return run_steps(search_steps(model, cluster, global_batch, top=top, fixed=fixed))


def run_steps(steps):
    """Run a generator of steps (``search_steps``) to its end: what it returns."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def search_steps(model, cluster, global_batch, *, top=5, fixed=None, keep=True):
    """``search``, a layout at a time: a generator that yields (None) before each layout
    it looks at and returns the ``Search``, or raises ``ValueError`` as ``search`` does.
    The page's worker searches ahead this way, in slices between the reader's calls.
    ``keep=False``: price in a kept context if there is one, but keep none for this pair
    (a search ahead must not push out the pair the reader is at)."""
    ctx = _context(model, cluster, keep=keep)
    global_batch = positive_int("global_batch", global_batch)
    top = positive_int("top", top)
    fixed = _check_fixed(fixed)
    gpus, per_node = cluster.gpus, cluster.gpus_per_node
    s = model.seq_len
    flash = fixed.get("flash_attention", True)
    _check_pinned(model, cluster, fixed)
    widths = [model.heads, model.kv_heads, model.ffn, model.hidden] + ([model.expert_ffn] if model.moe else [])
    tps = _options(fixed, "tp", [t for t in _powers_of_two(min(per_node, gpus)) if all(w % t == 0 for w in widths)])
    cps = _options(fixed, "cp", [c for c in _powers_of_two(gpus) if c == 1 or (s % (2 * c) == 0 and s // c >= MIN_CP_TOKENS)])
    recomputes = _options(fixed, "recompute", ["none", "full"] if flash else ["none", "selective", "full"])
    # A pinned degree, microbatch, chunk count, schedule or sequence parallelism may break a
    # rule the enumeration keeps by construction, so each layout is then checked (a third
    # of a pinned search's time); a pinned ZeRO stage, recompute mode or attention kernel
    # cannot.
    checked = bool(set(fixed) - {"zero", "recompute", "flash_attention"})
    best = []  # per layout: (step, memory, plan fields) of its fastest fitting choice
    smallest = None  # (memory, plan fields)
    considered = fitting = 0
    by_axis = {}  # (axis, value) -> [smallest footprint among its plans, whether any fits]
    errors = []  # why pinned values were refused
    for tp in tps:
        for cp in cps:
            if gpus % (tp * cp):
                continue
            rest = gpus // (tp * cp)
            for pp in _options(fixed, "pp", _divisors(rest, model.layers)):
                if rest % pp:
                    continue
                dp = rest // pp
                if global_batch % dp:
                    continue
                eps = _options(fixed, "ep", [e for e in _divisors(model.experts, model.experts)
                                             if (dp * cp) % e == 0] if model.moe else [1])
                sps = _options(fixed, "sequence_parallel", [tp > 1])
                zeros = _options(fixed, "zero", [1, 2, 3] if dp * cp > 1 else [0])
                for ep in eps:
                    best_before = math.inf
                    for mb in _options(fixed, "microbatch", [b for b in _powers_of_two(MAX_MICROBATCH)
                                                             if (global_batch // dp) % b == 0]):
                        m = global_batch // (dp * mb)
                        if global_batch % (dp * mb):
                            continue
                        if pp > 1 and m < pp and "microbatch" not in fixed and mb > 1:
                            break  # fewer microbatches than stages: the pipeline idles most of the step
                        vs = [1] if pp == 1 else [1] + [v for v in VIRTUAL_STAGES if m % pp == 0
                                                        and model.layers >= pp * v - 2]
                        fit_at_mb = False
                        best_at_mb = math.inf
                        for v in _options(fixed, "virtual_stages", vs):
                            yield
                            schedule = fixed.get("schedule", "interleaved" if v > 1 else "1f1b")
                            if checked:
                                try:
                                    _check(model, cluster, Plan(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, microbatch=mb,
                                                                global_batch=global_batch, virtual_stages=v,
                                                                schedule=schedule, sequence_parallel=sps[0],
                                                                flash_attention=flash))
                                except ValueError as error:
                                    errors.append(str(error))
                                    continue
                            elif tp > 1 and (s // cp) % tp:
                                continue
                            # Recompute modes from the fastest: once one fits at the lowest ZeRO stage
                            # nothing slower in this layout can win. ZeRO stages from the lowest: a
                            # higher one only moves more bytes, so the first that fits is the fastest.
                            layout_best = None
                            layout_smallest = math.inf
                            for sp in sps:
                                for recompute in recomputes:
                                    terms = _terms(ctx, tp, pp, dp, cp, ep, mb, v, recompute, sp, schedule, flash,
                                                   global_batch)
                                    first_fit = None
                                    for zero in zeros:
                                        considered += 1
                                        step, footprint = _finish(ctx, terms, zero)
                                        if footprint < layout_smallest:
                                            layout_smallest = footprint
                                            if smallest is None or footprint < smallest[0]:
                                                smallest = (footprint, (tp, pp, dp, cp, ep, mb, v, schedule, zero,
                                                                        recompute, sp))
                                        if step is None:
                                            continue
                                        fitting += 1
                                        first_fit = zero
                                        if layout_best is None or (step, footprint) < layout_best[:2]:
                                            layout_best = (step, footprint, (tp, pp, dp, cp, ep, mb, v, schedule,
                                                                             zero, recompute, sp))
                                        break
                                    if first_fit == zeros[0]:
                                        break
                            for axis_key in (("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep)):
                                seen = by_axis.get(axis_key)
                                if seen is None:
                                    by_axis[axis_key] = [layout_smallest, layout_best is not None]
                                else:
                                    if layout_smallest < seen[0]:
                                        seen[0] = layout_smallest
                                    if layout_best is not None:
                                        seen[1] = True
                            if layout_best is not None:
                                fit_at_mb = True
                                best.append(layout_best)
                                if v > 1 and layout_best[0] > best_at_mb and "virtual_stages" not in fixed:
                                    break  # deeper interleaving now sends more than it saves
                                best_at_mb = min(best_at_mb, layout_best[0])
                        if "microbatch" not in fixed:
                            if not fit_at_mb:
                                break  # a larger microbatch only holds more
                            if best_at_mb > best_before:
                                break  # past the microbatch size that runs fastest
                            best_before = best_at_mb
    if smallest is None:
        raise ValueError(_no_layout_message(model, cluster, global_batch, fixed, errors))
    plans = [_plan(fields_, global_batch, flash) for fields_ in _distinct(best, top)]
    estimates = [predict(model, cluster, plan) for plan in plans]
    smallest_plan = _plan(smallest[1], global_batch, flash)
    smallest_estimate = predict(model, cluster, smallest_plan)
    dropped = _dropped(by_axis)
    ladder = _ladder(model, cluster, plans[0], estimates[0], considered, fitting, by_axis) if plans else ()
    candidates = []
    for index, (plan, estimate) in enumerate(zip(plans, estimates)):
        yield  # each explanation prices a few variants of its plan
        reasons = ladder if index == 0 else explain(model, cluster, plan, best=(plans[0], estimates[0]),
                                                    estimate=estimate)
        candidates.append(Candidate(plan, estimate, reasons))
    yield
    smallest_candidate = Candidate(smallest_plan, smallest_estimate,
                                   explain(model, cluster, smallest_plan, estimate=smallest_estimate))
    result = Search(tuple(candidates), smallest_candidate, considered, fitting, tuple(dropped), tuple(ladder))
    return result if candidates else replace(result, message=_nothing_fits_message(model, cluster, result))


def _distinct(best, top):
    """The ``top`` fastest layouts, leaving out one that runs within 0.1% of a kept one with
    the same tp, pp, chunks, ep, ZeRO stage and recompute mode (trading dp for cp or for
    microbatch size at the same tokens per rank changes nothing the model prices): the
    simpler one (lower cp, then smaller microbatch) stays."""
    ranked = sorted(best, key=lambda e: (e[0], e[2][3], e[2][5], e[1]))
    kept = []
    for entry in ranked:
        step, _, (tp, pp, dp, cp, ep, mb, v, schedule, zero, recompute, sp) = entry
        shape = (tp, pp, v, ep, zero, recompute)
        if any(shape == (k[2][0], k[2][1], k[2][6], k[2][4], k[2][8], k[2][9]) and step <= k[0] * 1.001 for k in kept):
            continue
        kept.append(entry)
        if len(kept) == top:
            break
    return [entry[2] for entry in kept]


def _plan(choice_fields, global_batch, flash):
    tp, pp, dp, cp, ep, mb, v, schedule, zero, recompute, sp = choice_fields
    return Plan(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, microbatch=mb, global_batch=global_batch, virtual_stages=v,
                zero=zero, recompute=recompute, sequence_parallel=sp, schedule=schedule, flash_attention=flash)


def recommend(model, cluster, global_batch, top=5, *, fixed=None):
    """The ``top`` fastest plans that fit, best first: ``Candidate``s with their plan,
    estimate and reasons (the ladder for the best, the comparison with it for the
    rest). Nothing fits: ``ValueError`` naming the smallest footprint found and what
    would make it fit."""
    result = search(model, cluster, global_batch, top=top, fixed=fixed)
    if not result.candidates:
        raise ValueError(result.message)
    return result.candidates


# ---- reasons -----------------------------------------------------------------------------

PART_NAMES = {
    "compute": "compute", "recompute": "recomputation", "bubble": "pipeline bubble",
    "tp_comm": "exposed TP communication", "cp_comm": "exposed context-parallel ring traffic",
    "ep_comm": "expert All-to-All", "pp_comm": "pipeline sends", "dp_comm": "exposed DP/ZeRO communication",
    "optimizer": "optimizer step",
}
MEMORY_NAMES = {"params": "weights", "grads": "gradients", "optimizer": "optimizer state",
                "activations": "activations", "buffers": "ZeRO-3 gathered layers"}
SCHEDULE_NAMES = {"1f1b": "1F1B", "interleaved": "interleaved 1F1B", "zb-h1": "zero-bubble ZB-H1", "gpipe": "GPipe"}


def _span(values):
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def _dropped(by_axis):
    """'tp=1: nothing fits (smallest 112 GB per GPU)' for every searched value of an axis
    none of whose plans fit."""
    lines = []
    for (axis, value), (footprint, fits) in sorted(by_axis.items()):
        if not fits:
            lines.append(f"{axis}={value}: nothing fits (smallest footprint {fmt.gigabytes(footprint)} per GPU)")
    return lines


def _ladder(model, cluster, plan, estimate, considered, fitting, by_axis):
    """The best plan's reasoning, in the order of the article's ladder, with its numbers."""
    spec = cluster.spec
    usable = cluster.usable_bytes
    states = model.params * (PARAM_BYTES + GRAD_BYTES + OPTIMIZER_BYTES)
    t = estimate.time_breakdown
    step = estimate.step_time_s
    lines = []
    ways = math.ceil(states / usable)
    lines.append(
        f"Model states: {fmt.si_count(model.params)} parameters x 18 bytes (bf16 weights, fp32 gradients and Adam) = "
        f"{fmt.gigabytes(states)} unsharded; one {spec.name} offers {fmt.gigabytes(usable)} usable "
        + ("-> they fit on one GPU: data parallelism alone would do." if ways <= 1
           else f"-> shard them at least {ways} ways."))

    def end(axis):  # "; tp=1, 2 did not fit." or "."
        refused = [str(value) for (a, value), (_, fits) in sorted(by_axis.items()) if a == axis and not fits]
        return f"; {axis}={', '.join(refused)} did not fit." if refused else "."

    if plan.tp > 1:
        lines.append(
            f"Tensor parallelism tp={plan.tp} inside a node ({cluster.intra_link.name}): every layer's weights and "
            f"inner activations / {plan.tp}; its AllReduces cannot hide: {fmt.duration(t['tp_comm'])} per step "
            f"({fmt.percent(t['tp_comm'] / step)})" + end("tp"))
    else:
        lines.append("No tensor parallelism: every layer fits on one GPU, and tp would only add blocking AllReduces.")
    if plan.pp > 1:
        chunks = f", {plan.virtual_stages} chunks per rank" if plan.virtual_stages > 1 else ""
        lines.append(
            f"Pipeline pp={plan.pp}: {_span(estimate.stage_layers)} layers per rank; "
            f"{SCHEDULE_NAMES[plan.schedule]} over {estimate.microbatches} microbatches of {plan.microbatch}{chunks} "
            f"-> bubble {fmt.duration(t['bubble'])} ({fmt.percent(estimate.bubble_fraction)} of the step)" + end("pp"))
    else:
        lines.append("No pipeline parallelism: no bubble, no point-to-point sends.")
    shard = plan.dp * plan.cp
    lines.append(
        f"Data parallelism dp={plan.dp}: {plan.global_batch // plan.dp} sequences per replica; "
        f"{memory.STAGE_LABELS[plan.zero]} over {shard} ranks leaves {fmt.gigabytes(estimate.model_state_bytes)} of model "
        f"states per GPU; " + (f"{fmt.duration(t['dp_comm'])} of its communication is not hidden by the backward pass."
                               if t["dp_comm"] > 0 else "its communication hides behind compute."))
    if plan.cp > 1:
        lines.append(
            f"Context parallelism cp={plan.cp}: each {model.seq_len}-token sequence is split {plan.cp} ways; "
            + (f"the K/V ring exposes {fmt.duration(t['cp_comm'])} per step." if t["cp_comm"] > 0
               else "the K/V ring hides behind the attention blocks."))
    if model.moe:
        lines.append(
            f"Expert parallelism ep={plan.ep}: {model.experts // plan.ep} of {model.experts} experts per rank; "
            f"the All-to-All costs {fmt.duration(t['ep_comm'])} per step ({fmt.percent(t['ep_comm'] / step)}).")
    activations = estimate.memory_breakdown["activations"]
    if plan.recompute == "none":
        lines.append(f"No recomputation: activations take {fmt.gigabytes(activations)} and fit.")
    else:
        lighter = predict(model, cluster, replace(plan, recompute="none"))
        lines.append(
            f"{plan.recompute.capitalize()} recomputation: activations {fmt.gigabytes(activations)} instead of "
            f"{fmt.gigabytes(lighter.memory_breakdown['activations'])}"
            + (", which would not fit" if not lighter.fits else "")
            + f"; it costs {fmt.duration(t['recompute'])} per step.")
    lines.append(
        f"Searched {considered:,} plans ({fitting:,} fit): step {fmt.duration(step)}, MFU {fmt.percent(estimate.mfu)}, "
        f"{fmt.gigabytes(estimate.memory_bytes)} of {fmt.gigabytes(usable)} per GPU.")
    return tuple(lines)


def _variants(model, cluster, plan):
    """Plans one change away that need less memory: (what changes, plan)."""
    options = []
    if plan.recompute != "full":
        options.append(("full recomputation", replace(plan, recompute="full")))
    if plan.zero < 3 and plan.dp * plan.cp > 1:
        options.append(("ZeRO-3", replace(plan, zero=3)))
    if plan.microbatch > 1:
        options.append(("microbatch 1", replace(plan, microbatch=1)))
    if plan.dp % 2 == 0:
        options.append((f"pp={plan.pp * 2}", replace(plan, pp=plan.pp * 2, dp=plan.dp // 2,
                                                     microbatch=max(1, plan.microbatch))))
        if plan.tp * 2 <= cluster.gpus_per_node:
            options.append((f"tp={plan.tp * 2}", replace(plan, tp=plan.tp * 2, dp=plan.dp // 2)))
    result = []
    for label, variant in options:
        try:
            result.append((label, variant, predict(model, cluster, variant)))
        except ValueError:
            continue
    return result


def explain(model, cluster, plan, best=None, *, estimate=None):
    """Why ``plan`` does not fit, or how it compares with ``best`` (a (Plan, Estimate)
    pair, e.g. the recommended one): sentences with numbers."""
    estimate = estimate or predict(model, cluster, plan)
    usable = estimate.usable_bytes
    lines = []
    if not estimate.fits:
        parts = sorted(estimate.memory_breakdown.items(), key=lambda item: -item[1])
        lines.append(
            f"Does not fit: {fmt.gigabytes(estimate.memory_bytes)} per GPU on pipeline rank {estimate.worst_stage} against "
            f"{fmt.gigabytes(usable)} usable ("
            + ", ".join(f"{MEMORY_NAMES[k]} {fmt.gigabytes(v)}" for k, v in parts if v > 0) + ").")
        fixes = sorted(_variants(model, cluster, plan), key=lambda item: item[2].memory_bytes)
        if fixes:
            lines.append("Less memory: " + "; ".join(
                f"{label} -> {fmt.gigabytes(e.memory_bytes)}" + (" (fits)" if e.fits else "") for label, _, e in fixes[:3])
                + ".")
    if best is not None:
        best_plan, best_estimate = best
        if best_plan == plan:
            lines.append("This is the recommended plan.")
        else:
            ratio = estimate.step_time_s / best_estimate.step_time_s - 1
            if abs(ratio) < 5e-4:
                lines.append(f"As fast as the recommended plan ({fmt.duration(estimate.step_time_s)} per step).")
            elif ratio > 0:
                diffs = sorted(((estimate.time_breakdown[k] - best_estimate.time_breakdown[k], k) for k in TIME_PARTS),
                               reverse=True)
                worse = [f"{PART_NAMES[k]} +{fmt.duration(d)}" for d, k in diffs[:3] if d > 1e-4 * best_estimate.step_time_s]
                lines.append(
                    f"{fmt.percent(ratio)} slower than the recommended plan ({fmt.duration(estimate.step_time_s)} against "
                    f"{fmt.duration(best_estimate.step_time_s)} per step)" + (": " + ", ".join(worse) if worse else "") + ".")
            else:
                lines.append(
                    f"{fmt.percent(-ratio)} faster than the recommended plan ({fmt.duration(estimate.step_time_s)} against "
                    f"{fmt.duration(best_estimate.step_time_s)} per step)"
                    + (", but it does not fit." if not estimate.fits else ": the search does not try this layout."))
            delta = estimate.memory_bytes - best_estimate.memory_bytes
            lines.append(f"Memory {fmt.gigabytes(estimate.memory_bytes)} per GPU, {fmt.gigabytes(abs(delta))} "
                         f"{'more' if delta >= 0 else 'less'} than the recommended plan.")
    if not lines:
        lines.append(f"Fits: {fmt.gigabytes(estimate.memory_bytes)} of {fmt.gigabytes(usable)} per GPU; step "
                     f"{fmt.duration(estimate.step_time_s)}, MFU {fmt.percent(estimate.mfu)}.")
    return tuple(lines)


def _no_layout_message(model, cluster, global_batch, fixed, errors):
    if errors:
        return errors[0]
    pinned = ", ".join(f"{k}={v}" for k, v in fixed.items())
    return (f"global_batch={global_batch}: no layout of {cluster.gpus} GPUs divides it into data-parallel replicas"
            + (f" with {pinned}" if pinned else "") + ".")


def _nothing_fits_message(model, cluster, result):
    smallest = result.smallest
    e = smallest.estimate
    usable = e.usable_bytes
    states = e.model_state_bytes
    rest = e.memory_bytes - states
    message = (f"gpus={cluster.gpus}: nothing fits; the smallest footprint found is {fmt.gigabytes(e.memory_bytes)} per GPU "
               f"({smallest.plan.label()}) against {fmt.gigabytes(usable)} usable per {cluster.spec.name}")
    if rest >= usable:
        return message + (f": its activations and buffers alone take {fmt.gigabytes(rest)}; a shorter seq_len, a smaller "
                          "model or a GPU with more memory would make it fit.")
    needed = cluster.gpus * states / (usable - rest)
    nodes = math.ceil(needed / cluster.gpus_per_node)
    hbm_needed = e.memory_bytes / USABLE_HBM_FRACTION
    return message + (f": about {nodes * cluster.gpus_per_node} GPUs (spreading its {fmt.gigabytes(states)} of model states "
                      f"per GPU thinner) or GPUs with at least {fmt.gigabytes(hbm_needed)} of memory would make it fit.")


# ---- presets -----------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelPreset:
    key: str
    label: str
    model: Transformer
    source: str


@dataclass(frozen=True)
class ClusterPreset:
    key: str
    label: str
    gpu: str
    gpus_per_node: int
    intra: str
    inter: str
    source: str


MODELS = {p.key: p for p in (
    ModelPreset("gpt3-175b", "GPT-3 175B", Transformer(96, 12288, 96, 2048, 51200),
                "Brown et al. 2020 Table 2.1; vocabulary padded to 51,200 as in Narayanan et al. 2021"),
    ModelPreset("llama3-8b", "Llama 3 8B",
                Transformer(32, 4096, 32, 8192, 128256, ffn=14336, kv_heads=8, gated_mlp=True, tied_embeddings=False),
                "Llama 3 Herd of Models, Table 3"),
    ModelPreset("llama3-70b", "Llama 3 70B",
                Transformer(80, 8192, 64, 8192, 128256, ffn=28672, kv_heads=8, gated_mlp=True, tied_embeddings=False),
                "Llama 3 Herd of Models, Table 3"),
    ModelPreset("llama3-405b", "Llama 3 405B",
                Transformer(126, 16384, 128, 8192, 128256, ffn=53248, kv_heads=8, gated_mlp=True,
                            tied_embeddings=False),
                "Llama 3 Herd of Models, Table 3 (sequence 8,192 for most of pre-training)"),
    ModelPreset("mt-nlg-530b", "Megatron-Turing NLG 530B", Transformer(105, 20480, 128, 2048, 51200),
                "Smith et al. 2022, Sec. 2.2"),
    ModelPreset("mixtral-8x7b", "Mixtral 8x7B",
                Transformer(32, 4096, 32, 32768, 32000, ffn=14336, kv_heads=8, gated_mlp=True, experts=8, top_k=2,
                            tied_embeddings=False),
                "Jiang et al. 2024, Table 1 (32k-token context)"),
    ModelPreset("deepseek-v3", "DeepSeek-V3 671B",
                Transformer(61, 7168, 128, 4096, 129280, ffn=18432, gated_mlp=True, experts=256, top_k=8,
                            shared_experts=1, expert_ffn=2048, dense_layers=3, tied_embeddings=False),
                "DeepSeek-V3 Technical Report, Sec. 4.2 (MLA priced as multi-head attention; no MTP module)"),
)}

CLUSTERS = {p.key: p for p in (
    ClusterPreset("dgx-a100-40gb", "DGX A100 40GB nodes", "a100_40gb", 8, "nvlink3", "ib_hdr",
                  "NVIDIA DGX A100 datasheet: 8 GPUs, NVSwitch, 8 x 200 Gb/s HDR for compute"),
    ClusterPreset("dgx-a100-80gb", "DGX A100 80GB nodes", "a100_80gb", 8, "nvlink3", "ib_hdr",
                  "NVIDIA DGX A100 datasheet (Selene, Narayanan et al. 2021)"),
    ClusterPreset("dgx-h100", "DGX H100 nodes", "h100_sxm", 8, "nvlink4", "ib_ndr",
                  "NVIDIA DGX H100 datasheet: 8 GPUs, NVSwitch, 8 x 400 Gb/s NDR"),
    ClusterPreset("dgx-h200", "DGX H200 nodes", "h200", 8, "nvlink4", "ib_ndr", "NVIDIA DGX H200 datasheet"),
    ClusterPreset("dgx-b200", "DGX B200 nodes", "b200", 8, "nvlink5", "ib_ndr",
                  "NVIDIA DGX B200 datasheet: 8 x 400 Gb/s ConnectX-7"),
)}


def model_preset(key, **changes):
    """The preset's Transformer, with any fields replaced (e.g. seq_len=4096)."""
    choice("model", key, tuple(MODELS))
    return replace(MODELS[key].model, **changes) if changes else MODELS[key].model


def cluster_preset(key, gpus, **changes):
    """A Cluster of ``gpus`` GPUs in the preset's nodes."""
    choice("cluster", key, tuple(CLUSTERS))
    p = CLUSTERS[key]
    return Cluster(**{"gpu": p.gpu, "gpus": gpus, "gpus_per_node": p.gpus_per_node, "intra": p.intra,
                      "inter": p.inter, **changes})


# ---- validation: the planner against the published cases --------------------------------

GiB = 2**30


@dataclass(frozen=True)
class Case:
    """A published measurement the planner predicts. ``case_id`` is the id in
    ``shared/reference/published_cases.json``; ``key`` the number there."""

    case_id: str
    key: str
    label: str
    quantity: str  # "hardware_tflops_per_gpu", "train_days", "model_state_gib", "activations_gib"
    published: float
    model: Transformer
    cluster: Cluster
    plan: Plan
    tokens: float = 0.0
    end_to_end: bool = True


def _megatron2021(case_id, label, layers, hidden, heads, tp, pp, dp, mb, global_batch, v, published):
    # Narayanan et al. 2021 Table 1 on Selene (DGX A100 80GB, 8 HDR NICs per node); micro
    # batch sizes and interleaving depths from NVIDIA/Megatron-LM
    # examples/academic_paper_scripts/sc21/run_table_1.sh: fp16, full ("uniform")
    # recomputation, no distributed optimizer, no sequence parallelism, no FlashAttention.
    return Case(case_id, "tflops_per_gpu", label, "hardware_tflops_per_gpu", published,
                Transformer(layers, hidden, heads, 2048, 51200), Cluster("a100_80gb", tp * pp * dp, 8),
                Plan(tp=tp, pp=pp, dp=dp, microbatch=mb, global_batch=global_batch, virtual_stages=v,
                     schedule="interleaved" if v > 1 else "1f1b", zero=0, recompute="full",
                     sequence_parallel=False, flash_attention=False))


def _korthikanti(case_id, size, heads, hidden, layers, pp, gpus, batch, micro, v, published):
    # Korthikanti et al. 2022 Fig. 1 (values as read by the Calculon authors), tp = 8,
    # Megatron's 18 bytes per parameter, no FlashAttention; first pipeline stage.
    model = Transformer(layers, hidden, heads, 2048, 51200)
    cluster = Cluster("a100_80gb", gpus, 8)
    common = dict(tp=8, pp=pp, dp=gpus // (8 * pp), microbatch=micro, global_batch=batch, virtual_stages=v,
                  schedule="interleaved" if v > 1 else "1f1b", zero=0, flash_attention=False)
    baseline = Plan(recompute="none", sequence_parallel=False, **common)
    reduced = Plan(recompute="selective", sequence_parallel=True, **common)
    states, tp_act, sp_act = published
    return (
        Case(case_id, "params_plus_optimizer_GiB", f"{size} weights, gradients, optimizer", "model_state_gib", states,
             model, cluster, baseline, end_to_end=False),
        Case(case_id, "activations_tp_baseline_GiB", f"{size} activations, tensor parallel", "activations_gib", tp_act,
             model, cluster, baseline, end_to_end=False),
        Case(case_id, "activations_sp_selective_GiB", f"{size} activations, + SP + selective", "activations_gib", sp_act,
             model, cluster, reduced, end_to_end=False),
    )


VALIDATION = (
    _megatron2021("megatron2021-table1-1.7B", "GPT 1.7B, 32 A100s", 24, 2304, 24, 1, 1, 32, 16, 512, 1, 137),
    _megatron2021("megatron2021-table1-18B", "GPT 18B, 256 A100s", 40, 6144, 48, 8, 1, 32, 8, 1024, 1, 135),
    _megatron2021("megatron2021-table1-145B", "GPT 145B, 1,536 A100s", 80, 12288, 96, 8, 8, 24, 2, 2304, 2, 148),
    _megatron2021("megatron2021-table1-1T", "GPT 1T, 3,072 A100s", 128, 25600, 160, 8, 64, 6, 1, 3072, 1, 163),
    # Eq. 4 for the same 1T run: 450B tokens at the measured rate.
    Case("megatron2021-eq4-training-time", "days", "GPT 1T, 450B tokens", "train_days", 84,
         Transformer(128, 25600, 160, 2048, 51200), Cluster("a100_80gb", 3072, 8),
         Plan(tp=8, pp=64, dp=6, microbatch=1, global_batch=3072, zero=0, recompute="full",
              sequence_parallel=False, flash_attention=False), tokens=450e9),
    *_korthikanti("korthikanti-fig1-22B", "22B", 64, 6144, 48, 1, 8, 4, 4, 1, (45.5625, 59.25, 9.5625)),
    *_korthikanti("korthikanti-fig1-175B", "175B", 96, 12288, 96, 8, 64, 64, 1, 3, (45.5625, 66.84375, 12.3515625)),
    *_korthikanti("korthikanti-fig1-530B", "530B", 128, 20480, 105, 35, 280, 280, 1, 3,
                  (31.640625, 114.0234375, 23.076171875)),
    *_korthikanti("korthikanti-fig1-1T", "1T", 160, 25600, 128, 64, 512, 512, 1, 1, (32.958984375, 131.25, 26.5625)),
)


@dataclass(frozen=True)
class Check:
    case: Case
    predicted: float

    @property
    def error(self):
        """(predicted - published) / published."""
        return self.predicted / self.case.published - 1


def measure(case, estimate):
    """The number a case publishes, from the planner's estimate."""
    if case.quantity == "hardware_tflops_per_gpu":
        return estimate.hardware_tflops_per_gpu
    if case.quantity == "train_days":
        return train_time_s(estimate, case.tokens) / 86400
    if case.quantity == "model_state_gib":
        # The published figure counts the transformer layers' weights (18 bytes x 12lh^2/t
        # per layer): pipeline rank 1 holds just those; with one stage, rank 0 (with the
        # embedding) is all there is.
        params, grads, optimizer = estimate.stage_memory[1 if len(estimate.stage_memory) > 1 else 0][:3]
        return (params + grads + optimizer) / GiB
    return estimate.memory_breakdown["activations"] / GiB


def validate():
    """Every published case, predicted: a tuple of ``Check``s."""
    return tuple(Check(case, measure(case, predict(case.model, case.cluster, case.plan))) for case in VALIDATION)


# ---- exports: Megatron-LM command line and torchtitan TOML ------------------------------

def _chunk_layers(model, plan):
    """Transformer layers of each model chunk, in chunk order (chunk c on rank c mod pp)."""
    return _chunk_counts(model.layers, plan.pp * plan.virtual_stages)


def megatron_args(model, cluster, plan):
    """A ``torchrun`` command for Megatron-LM's ``pretrain_gpt.py`` that runs ``plan``
    (flag names of NVIDIA/Megatron-LM megatron/training/arguments.py and the config
    dataclasses it builds flags from). Data, tokenizer and optimizer flags are left to
    the reader; comment lines say what Megatron-LM cannot express."""
    _check(model, cluster, plan)
    notes = []
    nodes = max(1, cluster.gpus // cluster.gpus_per_node)
    per_node = min(cluster.gpus, cluster.gpus_per_node)
    args = [f"--num-layers {model.layers}", f"--hidden-size {model.hidden}",
            f"--num-attention-heads {model.heads}"]
    if model.kv_heads != model.heads:
        args += ["--group-query-attention", f"--num-query-groups {model.kv_heads}"]
    args.append(f"--ffn-hidden-size {model.ffn}")
    if model.gated_mlp:
        args.append("--swiglu")
    if not model.tied_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    args += [f"--seq-length {model.seq_len}", f"--max-position-embeddings {model.seq_len}",
             "--tokenizer-type NullTokenizer", f"--vocab-size {model.vocab}"]
    if model.moe:
        args += [f"--num-experts {model.experts}", f"--moe-router-topk {model.top_k}",
                 f"--moe-ffn-hidden-size {model.expert_ffn}"]
        if model.shared_experts:
            args.append(f"--moe-shared-expert-intermediate-size {model.shared_experts * model.expert_ffn}")
        if model.dense_layers:
            args.append(f"--moe-layer-freq '([0]*{model.dense_layers}+[1]*{model.moe_layers})'")
    args += [f"--tensor-model-parallel-size {plan.tp}", f"--pipeline-model-parallel-size {plan.pp}"]
    chunks = plan.pp * plan.virtual_stages
    if plan.virtual_stages > 1:
        args.append(f"--num-virtual-stages-per-pipeline-rank {plan.virtual_stages}")
    if chunks > 1 and model.layers % chunks:
        if (model.layers + 2) % chunks == 0:
            args += ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
        else:
            counts = _chunk_layers(model, plan)
            stages = [("E" if c == 0 else "") + (f"t*{n}" if n else "") + ("L" if c == chunks - 1 else "")
                      for c, n in enumerate(counts)]
            args.append(f"--pipeline-model-parallel-layout '{'|'.join(stages)}'")
    if plan.cp > 1:
        args.append(f"--context-parallel-size {plan.cp}")
    if plan.ep > 1:
        args.append(f"--expert-model-parallel-size {plan.ep}")
    if plan.sequence_parallel and plan.tp > 1:
        args.append("--sequence-parallel")
    args += [f"--micro-batch-size {plan.microbatch}", f"--global-batch-size {plan.global_batch}"]
    if plan.zero == 1:
        args += ["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"]
    elif plan.zero >= 2:
        strategy = "optim_grads" if plan.zero == 2 else "optim_grads_params"
        args += ["--use-megatron-fsdp", f"--data-parallel-sharding-strategy {strategy}", "--overlap-grad-reduce",
                 "--overlap-param-gather"]
    else:
        args.append("--overlap-grad-reduce")
    if plan.recompute == "full":
        args += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    elif plan.recompute == "selective":
        args.append("--recompute-granularity selective")
    if plan.flash_attention:
        args.append("--use-flash-attn")
    args.append("--bf16")
    if plan.schedule in ("gpipe", "zb-h1"):
        notes.append(f"# Megatron-LM has no {SCHEDULE_NAMES[plan.schedule]} schedule: this runs 1F1B.")
    lines = notes + [f"torchrun --nnodes {nodes} --nproc-per-node {per_node} pretrain_gpt.py \\"]
    lines += [f"    {arg} \\" for arg in args[:-1]] + [f"    {args[-1]}"]
    return "\n".join(lines)


def _split_args(text):
    """Shell words of a command, without comments and line continuations (quotes kept simple)."""
    words, current, quote = [], "", None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        for char in line.rstrip("\\") + " ":
            if quote:
                if char == quote:
                    quote = None
                else:
                    current += char
            elif char in "'\"":
                quote = char
            elif char.isspace():
                if current:
                    words.append(current)
                current = ""
            else:
                current += char
    return words


def parse_megatron_args(text):
    """(Transformer, Cluster-size gpus, Plan) read back from ``megatron_args`` output."""
    words = _split_args(text)
    flags = {}
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            if i + 1 < len(words) and not words[i + 1].startswith("--"):
                flags[word[2:]] = words[i + 1]
                i += 2
                continue
            flags[word[2:]] = True
        i += 1
    number = lambda key, default=None: int(flags[key]) if key in flags else default
    layers = number("num-layers")
    experts = number("num-experts", 1)
    freq = flags.get("moe-layer-freq")
    dense_layers = int(freq.split("*")[1].split("+")[0].rstrip("]")) if isinstance(freq, str) else 0
    model = Transformer(
        layers=layers, hidden=number("hidden-size"), heads=number("num-attention-heads"),
        seq_len=number("seq-length"), vocab=number("vocab-size"), ffn=number("ffn-hidden-size"),
        kv_heads=number("num-query-groups"), gated_mlp="swiglu" in flags,
        experts=experts, top_k=number("moe-router-topk", 1),
        shared_experts=(number("moe-shared-expert-intermediate-size", 0) // number("moe-ffn-hidden-size", 1)
                        if experts > 1 else 0),
        expert_ffn=number("moe-ffn-hidden-size"), dense_layers=dense_layers,
        tied_embeddings="untie-embeddings-and-output-weights" not in flags)
    gpus = number("nnodes", 1) * number("nproc-per-node", 1)
    tp, pp, cp = number("tensor-model-parallel-size", 1), number("pipeline-model-parallel-size", 1), \
        number("context-parallel-size", 1)
    v = number("num-virtual-stages-per-pipeline-rank", 1)
    if "use-megatron-fsdp" in flags:
        zero = 2 if flags.get("data-parallel-sharding-strategy") == "optim_grads" else 3
    else:
        zero = 1 if "use-distributed-optimizer" in flags else 0
    plan = Plan(tp=tp, pp=pp, dp=gpus // (tp * pp * cp), cp=cp, ep=number("expert-model-parallel-size", 1),
                microbatch=number("micro-batch-size", 1), global_batch=number("global-batch-size"),
                virtual_stages=v, zero=zero, recompute=flags.get("recompute-granularity", "none"),
                sequence_parallel="sequence-parallel" in flags or tp == 1,
                schedule="interleaved" if v > 1 else "1f1b", flash_attention="use-flash-attn" in flags)
    return model, gpus, plan


TORCHTITAN_FLAVORS = {"llama3-8b": ("llama3", "8B"), "llama3-70b": ("llama3", "70B"),
                      "llama3-405b": ("llama3", "405B"), "deepseek-v3": ("deepseek_v3", "671B")}
TORCHTITAN_SCHEDULES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe", "zb-h1": "1F1B"}


def _torchtitan_split(model, plan):
    """torchtitan's pipeline split for ``plan``: [parallelism] keys that make
    torchtitan cut the model into pp·v stages (its generate_llm_fqn_per_model_part counts
    the embedding and the output layer as ``*_stage_less_layers`` layers each)."""
    chunks = plan.pp * plan.virtual_stages
    if plan.virtual_stages == 1:
        return {}
    for less in (1, 0):
        effective = model.layers + 2 * less
        per_stage = -(-effective // chunks)
        if -(-effective // per_stage) == chunks and per_stage >= less:
            return {"pipeline_parallel_first_stage_less_layers": less, "pipeline_parallel_last_stage_less_layers": less,
                    "pipeline_parallel_layers_per_stage": per_stage}
    names, layer = [], 0
    for c, n in enumerate(_chunk_layers(model, plan)):
        part = (["tok_embeddings"] if c == 0 else []) + [f"layers.{layer + i}" for i in range(n)]
        part += ["norm", "output"] if c == chunks - 1 else []
        layer += n
        names.append(part)
    return {"module_fqns_per_model_part": names}


def _toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return '"' + value + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)


def torchtitan_toml(model, cluster, plan, preset=None):
    """A torchtitan job config (TOML, the field names of torchtitan v0.2.2's
    torchtitan/config/job_config.py, the last release configured by TOML) for ``plan``.
    ``preset``: a key of ``MODELS`` with a torchtitan flavor."""
    _check(model, cluster, plan)
    lines = [f"# {plan.label()} on {cluster.gpus} GPUs (the planner's plan)"]
    name, flavor = TORCHTITAN_FLAVORS.get(preset, ("llama3", "custom"))
    lines.append("[model]")
    if preset not in TORCHTITAN_FLAVORS:
        lines.append(f"# no torchtitan flavor for this model: register \"custom\" with dim={model.hidden}, "
                     f"n_layers={model.layers}, n_heads={model.heads}, n_kv_heads={model.kv_heads}, "
                     f"vocab_size={model.vocab}")
    lines += [f"name = {_toml_value(name)}", f"flavor = {_toml_value(flavor)}", ""]
    lines += ["[training]", f"local_batch_size = {plan.global_batch // plan.dp}",
              f"global_batch_size = {plan.global_batch}", f"seq_len = {model.seq_len}", ""]
    lines.append("[parallelism]")
    if plan.zero == 0:
        lines += [f"data_parallel_replicate_degree = {plan.dp}", "data_parallel_shard_degree = 1"]
    else:
        if plan.zero == 1:
            lines.append("# torchtitan has no ZeRO-1: FSDP without resharding after forward (ZeRO-2-like) is closest")
        lines += ["data_parallel_replicate_degree = 1", f"data_parallel_shard_degree = {plan.dp}",
                  f"fsdp_reshard_after_forward = {_toml_value('always' if plan.zero == 3 else 'never')}"]
    lines.append(f"tensor_parallel_degree = {plan.tp}")
    if plan.tp > 1 and not plan.sequence_parallel:
        lines.append("# torchtitan always runs sequence parallelism with tensor parallelism")
    lines += [f"pipeline_parallel_degree = {plan.pp}"]
    if plan.pp > 1:
        if plan.schedule == "zb-h1":
            lines.append("# torchtitan has no single-chunk ZB-H1 schedule: 1F1B is closest")
        lines += [f"pipeline_parallel_schedule = {_toml_value(TORCHTITAN_SCHEDULES[plan.schedule])}",
                  f"pipeline_parallel_microbatch_size = {plan.microbatch}"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in _torchtitan_split(model, plan).items()]
    lines.append(f"context_parallel_degree = {plan.cp}")
    if model.moe:
        lines.append(f"expert_parallel_degree = {plan.ep}")
    lines += ["", "[activation_checkpoint]", f"mode = {_toml_value(plan.recompute)}"]
    if plan.recompute == "selective":
        lines.append('selective_ac_option = "op"')
    return "\n".join(lines) + "\n"


def parse_torchtitan_toml(text, model):
    """The Plan a ``torchtitan_toml`` config runs (``model`` gives the layer count that
    turns layers per stage back into chunks)."""
    import tomllib

    config = tomllib.loads(text)
    parallel = config.get("parallelism", {})
    training = config.get("training", {})
    tp = parallel.get("tensor_parallel_degree", 1)
    pp = parallel.get("pipeline_parallel_degree", 1)
    cp = parallel.get("context_parallel_degree", 1)
    replicate = parallel.get("data_parallel_replicate_degree", 1)
    shard = parallel.get("data_parallel_shard_degree", 1)
    if shard > 1:
        zero = 3 if parallel.get("fsdp_reshard_after_forward", "default") in ("always", "default") else 2
    else:
        zero = 0
    schedule = {v: k for k, v in TORCHTITAN_SCHEDULES.items() if k != "zb-h1"}[parallel.get("pipeline_parallel_schedule", "1F1B")]
    if "module_fqns_per_model_part" in parallel:
        chunks = len(parallel["module_fqns_per_model_part"])
    elif "pipeline_parallel_layers_per_stage" in parallel:
        less = parallel.get("pipeline_parallel_first_stage_less_layers", 1) + parallel.get(
            "pipeline_parallel_last_stage_less_layers", 1)
        chunks = -(-(model.layers + less) // parallel["pipeline_parallel_layers_per_stage"])
    else:
        chunks = pp
    mode = config.get("activation_checkpoint", {}).get("mode", "selective")
    return Plan(tp=tp, pp=pp, dp=replicate * shard, cp=cp, ep=parallel.get("expert_parallel_degree", 1),
                microbatch=parallel.get("pipeline_parallel_microbatch_size", 1) if pp > 1 else 1,
                global_batch=training.get("global_batch_size"), virtual_stages=chunks // pp, zero=zero,
                recompute=mode, sequence_parallel=True, schedule=schedule, flash_attention=True)


# ---- command line: python -m models.planner predict|recommend ... -----------------------

MODEL_OPTIONS = (("layers", int), ("hidden", int), ("heads", int), ("seq_len", int), ("vocab", int), ("ffn", int),
                 ("kv_heads", int), ("experts", int), ("top_k", int), ("shared_experts", int), ("expert_ffn", int),
                 ("dense_layers", int))
PLAN_OPTIONS = (("tp", int), ("pp", int), ("dp", int), ("cp", int), ("ep", int), ("microbatch", int),
                ("virtual_stages", int), ("zero", int))


def _parser():
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m models.planner",
        description="Predict a parallel layout's step time and memory, or recommend the fastest layouts that fit.")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, summary in (("predict", "price one plan"), ("recommend", "search every plan, best first")):
        sub = commands.add_parser(name, help=summary, description=summary)
        model = sub.add_argument_group("model (a preset, or every field; a field after --model overrides it)")
        model.add_argument("--model", choices=tuple(MODELS), help="preset")
        for option, kind in MODEL_OPTIONS:
            model.add_argument("--" + option.replace("_", "-"), type=kind, default=None)
        model.add_argument("--gated-mlp", action=argparse.BooleanOptionalAction, default=None, help="SwiGLU MLP")
        model.add_argument("--tied-embeddings", action=argparse.BooleanOptionalAction, default=None)
        cluster = sub.add_argument_group("cluster")
        cluster.add_argument("--cluster", choices=tuple(CLUSTERS), help="node preset")
        cluster.add_argument("--gpu", choices=tuple(hardware.GPUS))
        cluster.add_argument("--gpus", type=int, required=True)
        cluster.add_argument("--gpus-per-node", type=int)
        cluster.add_argument("--intra", choices=tuple(hardware.LINKS), help="link inside a node")
        cluster.add_argument("--inter", choices=tuple(hardware.LINKS), help="network link (one per GPU)")
        cluster.add_argument("--inter-gbps", type=float, help="network bandwidth per GPU, Gb/s one direction")
        plan = sub.add_argument_group("plan" + (" (each one given is fixed; the rest are searched)"
                                                if name == "recommend" else ""))
        plan.add_argument("--global-batch", type=int, required=True, help="sequences per step")
        for option, kind in PLAN_OPTIONS:
            if name == "recommend" and option == "dp":
                continue
            plan.add_argument("--" + option.replace("_", "-"), type=kind, default=None)
        plan.add_argument("--recompute", choices=RECOMPUTE_OPTIONS)
        plan.add_argument("--schedule", choices=SCHEDULES)
        plan.add_argument("--sequence-parallel", action=argparse.BooleanOptionalAction, default=None)
        plan.add_argument("--flash-attention", action=argparse.BooleanOptionalAction, default=None)
        out = sub.add_argument_group("output")
        out.add_argument("--tokens", type=float, help="tokens to train on: adds the days it takes")
        out.add_argument("--json", action="store_true", help="machine-readable output")
        out.add_argument("--export", choices=("megatron", "torchtitan"), help="print the plan as a launch config")
        if name == "recommend":
            out.add_argument("--top", type=int, default=5)
    return parser


def _model_from(args):
    fields_given = {option: getattr(args, option) for option, _ in MODEL_OPTIONS if getattr(args, option) is not None}
    for flag in ("gated_mlp", "tied_embeddings"):
        if getattr(args, flag) is not None:
            fields_given[flag] = getattr(args, flag)
    if args.model:
        return model_preset(args.model, **fields_given)
    missing = [o for o in ("layers", "hidden", "heads", "seq_len", "vocab") if o not in fields_given]
    if missing:
        raise ValueError("model: give --model PRESET, or --" + ", --".join(m.replace("_", "-") for m in missing))
    return Transformer(**fields_given)


def _cluster_from(args):
    changes = {}
    for option in ("gpu", "gpus_per_node", "intra", "inter"):
        if getattr(args, option) is not None:
            changes[option] = getattr(args, option)
    if args.inter_gbps is not None:
        changes["inter_bytes_per_s"] = positive("inter_gbps", args.inter_gbps) * 1e9 / 8
    if args.cluster:
        return cluster_preset(args.cluster, args.gpus, **changes)
    return Cluster(gpus=args.gpus, **changes)


def _plan_fields(args):
    given = {}
    for option, _ in PLAN_OPTIONS + (("recompute", str), ("schedule", str), ("sequence_parallel", bool),
                                     ("flash_attention", bool)):
        value = getattr(args, option, None)
        if value is not None:
            given[option] = value
    return given


def _estimate_json(estimate):
    from dataclasses import asdict

    return asdict(estimate)


def _describe(model_name, model, cluster, plan, estimate, tokens):
    t = estimate.time_breakdown
    b = estimate.memory_breakdown
    lines = [
        f"{model_name} ({fmt.si_count(model.params)} parameters) on {cluster.gpus:,} x {cluster.spec.name}, global batch "
        f"{plan.global_batch} x {model.seq_len} tokens",
        f"plan       {plan.label()}" + (f" ({SCHEDULE_NAMES[plan.schedule]})" if plan.pp > 1 else ""),
        f"step time  {fmt.duration(estimate.step_time_s)}: " + ", ".join(
            f"{PART_NAMES[k]} {fmt.duration(v)}" for k, v in t.items() if v > 0),
        f"speed      {estimate.tokens_per_s:,.0f} tokens/s; MFU {fmt.percent(estimate.mfu)}, HFU {fmt.percent(estimate.hfu)}; "
        f"{estimate.model_tflops_per_gpu:.0f} model TFLOP/s per GPU",
        f"memory     {fmt.gigabytes(estimate.memory_bytes)} of {fmt.gigabytes(estimate.usable_bytes)} usable per GPU "
        f"({'fits' if estimate.fits else 'does NOT fit'}): " + ", ".join(
            f"{MEMORY_NAMES[k]} {fmt.gigabytes(v)}" for k, v in b.items() if v > 0),
    ]
    if tokens:
        lines.append(f"training   {fmt.si_count(tokens)} tokens in {train_time_s(estimate, tokens) / 86400:.1f} days")
    return lines


def main(argv=None):
    """The command line. Exit code 0, or 2 with a message on bad input."""
    import json
    import sys

    parser = _parser()
    args = parser.parse_args(argv)
    try:
        model = _model_from(args)
        cluster = _cluster_from(args)
        given = _plan_fields(args)
        name = MODELS[args.model].label if args.model else "custom model"
        if args.tokens is not None:
            positive("tokens", args.tokens)
        if args.command == "predict":
            given.setdefault("dp", cluster.gpus // (given.get("tp", 1) * given.get("pp", 1) * given.get("cp", 1)) or 1)
            if given.get("virtual_stages", 1) > 1:
                given.setdefault("schedule", "interleaved")
            plan = Plan(global_batch=args.global_batch, **given)
            estimate = predict(model, cluster, plan)
            chosen = [Candidate(plan, estimate, explain(model, cluster, plan, estimate=estimate))]
            result = None
        else:
            result = search(model, cluster, args.global_batch, top=positive_int("top", args.top), fixed=given)
            if not result.candidates:
                raise ValueError(result.message)
            chosen = list(result.candidates)
    except ValueError as error:
        print(f"{parser.prog} {args.command}: error: {error}", file=sys.stderr)
        return 2
    best = chosen[0]
    if args.export:
        text = (megatron_args(model, cluster, best.plan) if args.export == "megatron"
                else torchtitan_toml(model, cluster, best.plan, args.model))
        print(text.rstrip("\n"))
        return 0
    if args.json:
        payload = {
            "model": {f.name: getattr(model, f.name) for f in fields(Transformer)},
            "cluster": {f.name: getattr(cluster, f.name) for f in fields(Cluster)},
            "candidates": [{"plan": {f.name: getattr(c.plan, f.name) for f in fields(Plan)},
                            "estimate": _estimate_json(c.estimate), "reasons": list(c.reasons),
                            **({"train_time_s": train_time_s(c.estimate, args.tokens)} if args.tokens else {})}
                           for c in chosen],
        }
        if result is not None:
            payload.update(considered=result.considered, fitting=result.fitting, dropped=list(result.dropped))
        print(json.dumps(payload, indent=2))
        return 0
    lines = _describe(name, model, cluster, best.plan, best.estimate, args.tokens)
    lines += ["", "why:"] + [f"  - {reason}" for reason in best.reasons]
    if result is not None and len(chosen) > 1:
        lines += ["", "alternatives:"]
        for c in chosen[1:]:
            lines.append(f"  {c.plan.label():48s} {fmt.duration(c.estimate.step_time_s):>8s}  MFU "
                         f"{fmt.percent(c.estimate.mfu):>6s}  {fmt.gigabytes(c.estimate.memory_bytes):>8s}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
