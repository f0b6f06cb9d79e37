"""The planner's inputs and outputs: the model, the cluster, one plan (its layout), and
what a prediction or a search says about them (frozen dataclasses, validated on creation)."""
from dataclasses import dataclass

from models import hardware, memory
from models._validate import GiB, choice, divides, non_negative, non_negative_int, positive, positive_int

# What a training process holds outside its tensors: the CUDA context and kernels, 0.47-0.92
# GiB on an 80 GB A100 with PyTorch 2.1, and torch.distributed / NCCL initialisation, ~1-2
# GiB (+1.45 GiB measured after the first barrier) (Bekman, "ML Engineering",
# training/performance/README.md). A published run that ran held at most HBM minus this.
RUNTIME_RESERVE_BYTES = 2.5 * GiB
# The margin a recommended plan keeps on top, for the caching allocator's fragmentation and
# for what the ledgers leave out (no published percentage exists): the reader can change it.
DEFAULT_MEMORY_MARGIN_BYTES = 4e9

# How each framework runs a plan (docs/MODELS.md, "Frameworks"): "megatron" is Megatron-LM /
# Megatron-Core / NeMo (fused kernels, distributed optimizer), "fsdp" PyTorch FSDP/FSDP2
# (torchtitan, llm-foundry: eager kernels, one gather per layer), "deepspeed" DeepSpeed ZeRO
# with Megatron's kernels (Megatron-DeepSpeed, the 2021 ZeRO-3 baseline).
FRAMEWORKS = ("megatron", "fsdp", "deepspeed")

# Megatron-LM's ledger (megatron/training/theoretical_memory_usage.py; Korthikanti et al.
# 2022 Fig. 1 uses the same 18 bytes): bf16 weights, fp32 main gradients, fp32 master
# weights + Adam moments.
PARAM_BYTES, GRAD_BYTES, OPTIMIZER_BYTES = 2, 4, 12
ACTIVATION_BYTES = 2  # bf16 activations and messages
# One Adam step reads the fp32 gradient, master weight and two moments and writes the
# master weight, both moments and the bf16 weight: 4*4 + 3*4 + 2 = 30 bytes per parameter.
ADAM_STEP_BYTES = memory.optimizer_step_traffic_bytes(param_bytes=PARAM_BYTES, grad_bytes=GRAD_BYTES,
                                                      optimizer_bytes=OPTIMIZER_BYTES)

# Activation recomputation: none; "selective", Korthikanti et al. 2022 Sec. 5 (the attention
# core recomputed, Megatron-LM --recompute-granularity selective); "op", torchtitan's per-op
# selective checkpointing (activation_checkpoint.selective_ac_option = "op": the outputs of
# matmuls but every second one, of attention and of reduce-scatter / all-to-all are kept,
# everything else recomputed; PyTorch FSDP only); "full", only each layer's input kept.
RECOMPUTE_OPTIONS = ("none", "selective", "op", "full")
# How an expert-parallel layer moves its tokens (docs/MODELS.md, "Expert dispatch"): "alltoall"
# sends every token once per chosen expert (Megatron-Core's alltoall dispatcher, torchtitan's
# all-to-all); "deepep" is DeepEP's normal kernels (Megatron-Core --moe-token-dispatcher-type
# flex with the deepep backend, AutoModel's enable_deepep / dispatcher: deepep), which send a
# token over the network once per destination node and forward it over NVLink inside the node
# (DeepSeek-V3 Sec. 3.2.2; DeepEP docs/legacy.md "Normal kernels with NVLink and RDMA forwarding").
EP_DISPATCHES = ("alltoall", "deepep")
# Which experts the tokens go to: "router", the model's router, priced as uniform over the
# groups its group-limited routing allows (Transformer.route_groups / route_group_limit), as
# Megatron-Core's --moe-router-force-load-balancing benchmarks do (random logits through the
# same group-limited top-k); "round_robin", NeMo AutoModel's FakeBalancedGate
# (fake_balanced_gate: true), which sends token t to experts t·k .. t·k + k - 1 (mod E).
EP_ROUTINGS = ("router", "round_robin")
# How a router scores experts: softmax over the logits (Mixtral; DeepSeek-V2 Eq. 22) or a
# sigmoid per expert, normalised over the chosen top-k (DeepSeek-V3 Eq. 15-16).
ROUTER_SCORES = ("softmax", "sigmoid")
# Layer normalisation: LayerNorm with a bias (GPT-3, Brown et al. 2020 Sec. 2.1) or RMSNorm
# (Zhang & Sennrich 2019; Llama 3, Mixtral, DeepSeek). Neither changes a cost the planner prices.
NORMS = ("layernorm", "rmsnorm")
SCHEDULES = ("1f1b", "interleaved", "zb-h1", "gpipe")
ZERO_STAGES = (0, 1, 2, 3)
# The dtype gradients are reduced in: Megatron-LM and torchtitan reduce fp32 gradients by
# default; PyTorch FSDP's MixedPrecision(reduce_dtype=bfloat16) and Megatron-LM's
# --grad-reduce-in-bf16 halve the bytes on the wire (memory.model_states keeps fp32 sharded
# gradients either way).
GRAD_REDUCE_BYTES = {"fp32": 4, "bf16": 2}

# The network a GPU usually ships with, one NIC per GPU (models.hardware, with its sources).
USUAL_NETWORK = hardware.USUAL_NETWORK


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
    output layer reuses the input embedding (GPT); Llama and DeepSeek untie them.
    ``dropout``: GPT-3 and Megatron's GPTs train with dropout, which keeps a one-byte mask per
    element after attention and after the MLP; Llama, Mixtral and DeepSeek train without.

    Multi-head latent attention (DeepSeek-V2 Sec. 2.1, eqs. 9-19; DeepSeek-V3 Sec. 2.1.1) when
    ``kv_lora_rank`` > 0: keys and values are rebuilt from a ``kv_lora_rank``-wide latent,
    queries from a ``q_lora_rank``-wide one (0: queries projected straight from the hidden
    state, as in DeepSeek-V2-Lite); each query/key head is ``qk_head_dim`` wide without
    position plus ``qk_rope_head_dim`` carrying the decoupled RoPE (one rope key shared by
    every head), each value head ``v_head_dim``. ``router_score``: how the router turns
    logits into gates, "softmax" (Mixtral, DeepSeek-V2) or "sigmoid" (DeepSeek-V3, Kimi K2);
    it changes no cost. Group-limited routing (DeepSeek-V3 Sec. 2.1.2, node-limited; the HF
    config's n_group / topk_group, Megatron-Core's moe_router_num_groups / group_topk): the
    experts form ``route_groups`` equal groups in order and a token's ``top_k`` experts come
    from at most ``route_group_limit`` of them (1 and 1: no limit); it prices only what a
    deduplicating dispatcher sends (``Plan.ep_dispatch = "deepep"``). Multi-token prediction (DeepSeek-V3 Sec. 2.2: one more transformer
    block and projection per extra predicted token) is not priced: a model here predicts
    the next token only.

    ``norm``, ``rope_theta`` and ``bias`` say which model a launch line must build and change
    no cost: the normalisation (``NORMS``), the rotary base of RoPE (Su et al. 2021; 0 means
    learned absolute positions, as GPT-3), and whether the linear layers carry biases (GPT-3
    does; Llama, Mixtral and DeepSeek do not)."""

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
    dropout: bool = True
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_head_dim: int = 0
    qk_rope_head_dim: int = 0
    v_head_dim: int = 0
    router_score: str = "softmax"
    route_groups: int = 1
    route_group_limit: int = 1
    norm: str = "layernorm"
    rope_theta: float = 0
    bias: bool = True

    def __post_init__(self):
        for name in ("layers", "hidden", "heads", "seq_len", "vocab", "experts", "top_k", "route_groups",
                     "route_group_limit"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        for name in ("shared_experts", "dense_layers", "q_lora_rank", "kv_lora_rank", "qk_head_dim",
                     "qk_rope_head_dim", "v_head_dim"):
            object.__setattr__(self, name, non_negative_int(name, getattr(self, name)))
        ffn = 4 * self.hidden if self.ffn is None else positive_int("ffn", self.ffn)
        kv_heads = self.heads if self.kv_heads is None else positive_int("kv_heads", self.kv_heads)
        object.__setattr__(self, "ffn", ffn)
        object.__setattr__(self, "kv_heads", kv_heads)
        object.__setattr__(self, "expert_ffn", ffn if self.expert_ffn is None else positive_int("expert_ffn", self.expert_ffn))
        _flag("gated_mlp", self.gated_mlp)
        _flag("tied_embeddings", self.tied_embeddings)
        _flag("dropout", self.dropout)
        divides("heads", self.heads, "hidden", self.hidden)
        divides("kv_heads", self.kv_heads, "heads", self.heads)
        if self.top_k > self.experts:
            raise ValueError(f"top_k={self.top_k} must be <= experts={self.experts}")
        if self.experts == 1 and self.shared_experts:
            raise ValueError(f"shared_experts={self.shared_experts} needs a mixture of experts (experts > 1)")
        if self.dense_layers >= self.layers and self.experts > 1:
            raise ValueError(f"dense_layers={self.dense_layers} must be < layers={self.layers}")
        choice("router_score", self.router_score, ROUTER_SCORES)
        divides("route_groups", self.route_groups, "experts", self.experts)
        if self.route_group_limit > self.route_groups:
            raise ValueError(f"route_group_limit={self.route_group_limit} must be <= route_groups={self.route_groups}")
        if self.top_k > self.route_group_limit * (self.experts // self.route_groups):
            raise ValueError(f"top_k={self.top_k} experts cannot come from route_group_limit={self.route_group_limit} "
                             f"groups of {self.experts // self.route_groups}")
        choice("norm", self.norm, NORMS)
        non_negative("rope_theta", self.rope_theta)
        _flag("bias", self.bias)
        mla_dims = ("q_lora_rank", "qk_head_dim", "qk_rope_head_dim", "v_head_dim")
        if self.kv_lora_rank:
            for name in mla_dims[1:]:
                positive_int(name, getattr(self, name))
            if self.kv_heads != self.heads:
                raise ValueError(f"kv_heads={self.kv_heads}: multi-head latent attention rebuilds keys and values "
                                 f"for every one of the {self.heads} heads (leave kv_heads at heads)")
        elif any(getattr(self, name) for name in mla_dims):
            raise ValueError("q_lora_rank, qk_head_dim, qk_rope_head_dim and v_head_dim describe multi-head "
                             "latent attention: set kv_lora_rank > 0 too, or leave them 0")

    @property
    def moe(self):
        return self.experts > 1

    @property
    def mla(self):
        """Multi-head latent attention (DeepSeek-V2 Sec. 2.1)."""
        return self.kv_lora_rank > 0

    @property
    def head_dim(self):
        return self.hidden // self.heads

    @property
    def attention_widths(self):
        """Widths of one token's query, key, value and attention output (the output
        projection's input): h, h_kv, h_kv, h; with MLA the keys are rebuilt per head,
        n_h·(d_h + d_h^R) for queries and keys and n_h·d_h for values (DeepSeek-V2 eqs. 12-18)."""
        if self.mla:
            qk = self.heads * (self.qk_head_dim + self.qk_rope_head_dim)
            v = self.heads * self.v_head_dim
            return qk, qk, v, v
        return self.hidden, self.kv_hidden, self.kv_hidden, self.hidden

    @property
    def attention_core_width(self):
        """Per key position, the width QK^T contracts plus the width AV produces: 2h for
        multi-head attention (so 4·s·h forward FLOPs per token), n_h·(d_h + d_h^R) + n_h·d_h
        with MLA."""
        q, _, _, out = self.attention_widths
        return q + out

    def attention_matmuls(self):
        """The weight matrices of one attention block in the order a forward pass runs
        them: (name, input width, output width, how tensor parallelism splits it:
        "column" / "row" / "replicated"). Multi-head attention: Q, K, V, output
        (Shoeybi 2019). MLA (DeepSeek-V2 Sec. 2.1): the query down-projection W^DQ
        (eq. 12; absent when q_lora_rank = 0) and up-projection [W^UQ; W^QR] (eqs. 13-14),
        the key-value down-projection [W^DKV; W^KR] (eqs. 9, 17), the key and value
        up-projections [W^UK; W^UV] (eqs. 10-11), the output W^O (eq. 19). Megatron-Core
        keeps the two down-projections whole on every TP rank
        (multi_latent_attention.py: parallel_mode 'duplicated')."""
        h = self.hidden
        if not self.mla:
            return (("wq", h, h, "column"), ("wk", h, self.kv_hidden, "column"),
                    ("wv", h, self.kv_hidden, "column"), ("wo", h, h, "row"))
        q, _, v, _ = self.attention_widths
        if self.q_lora_rank:
            queries = (("wq_a", h, self.q_lora_rank, "replicated"), ("wq_b", self.q_lora_rank, q, "column"))
        else:
            queries = (("wq", h, q, "column"),)
        return queries + (("wkv_a", h, self.kv_lora_rank + self.qk_rope_head_dim, "replicated"),
                          ("wkv_b", self.kv_lora_rank, self.heads * (self.qk_head_dim + self.v_head_dim), "column"),
                          ("wo", v, h, "row"))

    def mlp_matmuls(self, width):
        """An MLP ``width`` wide, in forward order: SwiGLU's gate w1, up w3 and down w2
        (torchtitan's FeedForward: w2(silu(w1(x)) * w3(x))), or GeLU's two."""
        h = self.hidden
        if self.gated_mlp:
            return (("w1", h, width, "column"), ("w3", h, width, "column"), ("w2", width, h, "row"))
        return (("w1", h, width, "column"), ("w2", width, h, "row"))

    @property
    def attention_norm_params(self):
        """MLA's RMSNorms on the query and key-value latents (DeepSeek-V2/V3 modelling code,
        q_a_layernorm and kv_a_layernorm); none in multi-head attention."""
        return self.q_lora_rank + self.kv_lora_rank if self.mla else 0

    def attention_rank_params(self, tp):
        """One layer's attention weights on one TP rank: all split t ways but MLA's
        down-projections, which every rank holds whole."""
        whole = sum(i * o for _, i, o, kind in self.attention_matmuls() if kind == "replicated")
        return whole + self.attention_norm_params + (self.attention_params - whole) / tp

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
        """The attention block's weight matrices (``attention_matmuls``): 2h² + 2h·h_kv for
        Q, K, V and output; with MLA d·d_c' + d_c'·n_h(d_h + d_h^R) + d·(d_c + d_h^R)
        + d_c·n_h·2d_h + n_h·d_h·d (DeepSeek-V2 eqs. 9-19, d_h the value head width)."""
        return sum(i * o for _, i, o, _ in self.attention_matmuls())

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
        norms = (2 * h + self.attention_norm_params) * self.layers
        return float(dense * (self.attention_params + self.dense_mlp_params) + moe + norms + embeddings + h)

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
    for nodes with fewer NICs than GPUs. ``memory_margin_bytes``: what a plan must leave free
    on each GPU besides the runtime's reserve (None: ``DEFAULT_MEMORY_MARGIN_BYTES``)."""

    gpu: str = "a100_80gb"
    gpus: int = 1024
    gpus_per_node: int = 8
    intra: str = None
    inter: str = None
    inter_bytes_per_s: float = None
    memory_margin_bytes: float = None

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
        margin = DEFAULT_MEMORY_MARGIN_BYTES if self.memory_margin_bytes is None else self.memory_margin_bytes
        object.__setattr__(self, "memory_margin_bytes", float(non_negative("memory_margin_bytes", margin)))
        if self.memory_margin_bytes >= self.spec.hbm_bytes - RUNTIME_RESERVE_BYTES:
            raise ValueError(f"memory_margin_bytes={self.memory_margin_bytes / GiB:g} GiB leaves nothing of the "
                             f"{self.spec.hbm_bytes / GiB:g} GiB on a {self.spec.name}")

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
    def runtime_limit_bytes(self):
        """What tensors can take at most: HBM minus the runtime's reserve."""
        return self.spec.hbm_bytes - RUNTIME_RESERVE_BYTES

    @property
    def usable_bytes(self):
        """What a plan may fill: HBM minus the runtime's reserve and the margin."""
        return self.runtime_limit_bytes - self.memory_margin_bytes


@dataclass(frozen=True)
class Plan:
    """One layout: gpus = tp·pp·dp·cp (ep lives inside dp·cp); ``global_batch`` sequences
    per step in microbatches of ``microbatch``; ``virtual_stages`` model chunks per
    pipeline rank (interleaved schedule only); ZeRO stage 0-3 over dp·cp; activation
    recomputation none|selective|op|full (``RECOMPUTE_OPTIONS``; op under FSDP only); sequence parallelism (changes nothing at tp=1);
    FlashAttention (never materialises the score matrix); the ``framework`` that runs it
    (``FRAMEWORKS``); ``tp_comm_overlap``: Megatron-Core's tensor-parallel communication
    overlapped with the GEMMs it feeds (Transformer Engine userbuffers, ``--tp-comm-overlap``,
    which needs sequence parallelism). ``ep_dispatch``: how expert parallelism moves tokens
    (``EP_DISPATCHES``), ``ep_routing``: which experts they go to (``EP_ROUTINGS``); neither
    is searched, both priced when a plan gives them."""

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
    framework: str = "megatron"
    tp_comm_overlap: bool = False
    shard_group: int = 0
    grad_reduce: str = "fp32"
    ep_dispatch: str = "alltoall"
    ep_routing: str = "router"

    def __post_init__(self):
        for name in ("tp", "pp", "dp", "cp", "ep", "microbatch", "global_batch", "virtual_stages"):
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        choice("zero", self.zero, ZERO_STAGES)
        choice("recompute", self.recompute, RECOMPUTE_OPTIONS)
        choice("schedule", self.schedule, SCHEDULES)
        _flag("sequence_parallel", self.sequence_parallel)
        _flag("flash_attention", self.flash_attention)
        choice("framework", self.framework, FRAMEWORKS)
        _flag("tp_comm_overlap", self.tp_comm_overlap)
        if self.tp_comm_overlap and self.framework != "megatron":
            raise ValueError(f"tp_comm_overlap needs framework='megatron' (Transformer Engine), not {self.framework!r}")
        if self.tp_comm_overlap and not self.sequence_parallel:
            raise ValueError("tp_comm_overlap needs sequence_parallel (Megatron-Core overlaps its AllGather and "
                             "ReduceScatter)")
        if self.recompute == "op" and self.framework != "fsdp":
            raise ValueError(f"recompute='op' is torchtitan's per-op selective checkpointing: it needs "
                             f"framework='fsdp', not {self.framework!r}")
        choice("grad_reduce", self.grad_reduce, tuple(GRAD_REDUCE_BYTES))
        choice("ep_dispatch", self.ep_dispatch, EP_DISPATCHES)
        choice("ep_routing", self.ep_routing, EP_ROUTINGS)
        shard = non_negative_int("shard_group", self.shard_group)
        data = self.dp * self.cp
        if shard == data:
            shard = 0  # a group of every dp x cp rank is plain FSDP / ZeRO
        if shard == 1:
            raise ValueError("shard_group=1 shards nothing: use zero=0 (replicas only) or 0 (shard over all "
                             "dp x cp ranks)")
        if shard:
            if self.framework != "fsdp" or self.zero == 0 or self.ep > 1:
                raise ValueError(f"shard_group={shard} (HSDP) needs framework='fsdp', a ZeRO stage and ep=1, "
                                 f"not framework={self.framework!r}, zero={self.zero}, ep={self.ep}")
            divides("shard_group", shard, "dp x cp", data)
        object.__setattr__(self, "shard_group", shard)
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
        parts += [f"mb{self.microbatch}", memory.STAGE_LABELS[self.zero]]
        if self.shard_group:
            parts.append(f"HSDP {self.shard_group}x{self.dp * self.cp // self.shard_group}")
        if self.grad_reduce != "fp32":
            parts.append(f"{self.grad_reduce} grads")
        if self.ep > 1 and self.ep_dispatch != "alltoall":
            parts.append(self.ep_dispatch if self.ep_routing == "router" else f"{self.ep_dispatch} {self.ep_routing}")
        parts.append(f"{self.recompute} recompute")
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


