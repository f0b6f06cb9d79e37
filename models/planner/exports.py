"""Launch configurations for a plan: a Megatron-LM command line and a torchtitan TOML, and
their parsers (the tests read them back).

Both are written for pinned releases: Megatron-LM ``core_v0.19.0`` (commit 5be9626) and
torchtitan ``v0.2.2`` (commit 73a0e69, its last release configured by TOML; later torchtitan
is configured in Python). tests/data/ holds their flag and field lists
(tests/data/pin_upstream.py regenerates them from the tagged sources); comment lines in the
exports say what the target cannot express."""
from dataclasses import replace

from models.planner.cost import _check, _chunk_counts
from models.planner.model import Plan, Transformer
from models.planner.presets import MODELS
from models.planner.reasons import SCHEDULE_NAMES

MEGATRON_VERSION = "core_v0.19.0"
TORCHTITAN_VERSION = "v0.2.2"

# GPUs on which Megatron-LM does not need CUDA_DEVICE_MAX_CONNECTIONS=1 with tp or cp > 1
# (megatron/training/arguments.py: the assert applies below compute capability 10, Blackwell).
_BLACKWELL = ("b200",)


def _chunk_layers(model, plan):
    """Transformer layers of each model chunk, in chunk order (chunk c on rank c mod pp)."""
    return _chunk_counts(model.layers, plan.pp * plan.virtual_stages)


# ---- Megatron-LM ---------------------------------------------------------------------------

def _megatron_split(model, plan):
    """Flags that make Megatron-LM cut the layers as the planner prices them
    (megatron/core/transformer/transformer_block.py get_num_layers_to_build): even chunks
    need nothing; layers + 2 dividing into pp·v chunks is the embedding and the loss counted
    as a layer each (the first and last chunk one transformer layer lighter, as the planner
    deals them); anything else is an explicit --pipeline-model-parallel-layout. Megatron
    takes at most one of the layout and --num-virtual-stages-per-pipeline-rank (the layout's
    stage count gives v)."""
    if plan.pp == 1:
        return []
    chunks = plan.pp * plan.virtual_stages
    v_flag = [f"--num-virtual-stages-per-pipeline-rank {plan.virtual_stages}"] if plan.virtual_stages > 1 else []
    if chunks == 1 or model.layers % chunks == 0:
        return v_flag
    if (model.layers + 2) % chunks == 0:
        return v_flag + ["--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"]
    stages = [("E" if c == 0 else "") + (f"t*{n}" if n else "") + ("L" if c == chunks - 1 else "")
              for c, n in enumerate(_chunk_layers(model, plan))]
    return [f"--pipeline-model-parallel-layout '{'|'.join(stages)}'"]


def _megatron_model_flags(model):
    """The flags that make Megatron-LM build ``model`` (megatron/training/arguments.py and
    TransformerConfig / MLATransformerConfig; Megatron's defaults are GPT's: LayerNorm,
    learned absolute positions, biases on every linear layer, tied embeddings, dropout 0.1)."""
    flags = []
    if model.mla:
        # DeepSeek-V2 Sec. 2.1: q_lora_rank 0 (no query compression) is Megatron's None default.
        flags += ["--multi-latent-attention"] + ([f"--q-lora-rank {model.q_lora_rank}"] if model.q_lora_rank else [])
        flags += [f"--kv-lora-rank {model.kv_lora_rank}", f"--qk-head-dim {model.qk_head_dim}",
                  f"--qk-pos-emb-head-dim {model.qk_rope_head_dim}", f"--v-head-dim {model.v_head_dim}"]
    elif model.kv_heads != model.heads:
        flags += ["--group-query-attention", f"--num-query-groups {model.kv_heads}"]
    flags.append(f"--ffn-hidden-size {model.ffn}")
    if model.gated_mlp:
        flags.append("--swiglu")
    if model.norm == "rmsnorm":
        flags.append("--normalization RMSNorm")
    if model.rope_theta:
        # MLA takes YaRN by default; the planner's model is pre-trained at its own length.
        flags += ["--position-embedding-type rope", f"--rotary-base {model.rope_theta:.0f}"]
        flags += ["--rope-type rope"] if model.mla else []
    if not model.bias:
        flags.append("--disable-bias-linear")
    if not model.tied_embeddings:
        flags.append("--untie-embeddings-and-output-weights")
    if not model.dropout:  # Megatron-LM's default is 0.1 for both
        flags += ["--hidden-dropout 0", "--attention-dropout 0"]
    flags += [f"--seq-length {model.seq_len}", f"--max-position-embeddings {model.seq_len}",
              "--tokenizer-type NullTokenizer", f"--vocab-size {model.vocab}"]
    return flags


def megatron_args(model, cluster, plan):
    """A ``torchrun`` command for Megatron-LM's ``pretrain_gpt.py`` that runs ``plan``
    (flag names of Megatron-LM core_v0.19.0: megatron/training/arguments.py and the config
    dataclasses it builds flags from). Megatron derives the data-parallel size as
    world / (tp·pp·cp) and runs global / (micro·dp) microbatches a step, the plan's numbers.
    Data, tokenizer and optimizer flags are left to the reader; comment lines say what
    Megatron-LM cannot express."""
    _check(model, cluster, plan)
    if plan.recompute == "op":
        raise ValueError("recompute='op' is torchtitan's per-op selective checkpointing, which Megatron-LM does not "
                         "have: export it for torchtitan, or choose selective or full")
    if plan.shard_group:
        raise ValueError(f"shard_group={plan.shard_group}: the planner exports HSDP for torchtitan only "
                         f"(data_parallel_replicate_degree); Megatron-LM's partial sharding is not priced")
    notes = [f"# {plan.label()} on {cluster.gpus} GPUs, Megatron-LM {MEGATRON_VERSION}: dp = world/(tp*pp*cp) "
             f"= {plan.dp}, {plan.microbatches} microbatches of {plan.microbatch} per step"]
    nodes = max(1, cluster.gpus // cluster.gpus_per_node)
    per_node = min(cluster.gpus, cluster.gpus_per_node)
    args = [f"--num-layers {model.layers}", f"--hidden-size {model.hidden}",
            f"--num-attention-heads {model.heads}"] + _megatron_model_flags(model)
    if model.moe:
        args += [f"--num-experts {model.experts}", f"--moe-router-topk {model.top_k}",
                 f"--moe-ffn-hidden-size {model.expert_ffn}", "--moe-grouped-gemm"]
        if model.router_score != "softmax":
            args.append(f"--moe-router-score-function {model.router_score}")
        if model.route_groups > 1:  # group-limited routing (DeepSeek-V3 Sec. 2.1.2)
            args += [f"--moe-router-num-groups {model.route_groups}",
                     f"--moe-router-group-topk {model.route_group_limit}"]
        if model.shared_experts:
            args.append(f"--moe-shared-expert-intermediate-size {model.shared_experts * model.expert_ffn}")
        if model.dense_layers:
            args.append(f"--moe-layer-freq '([0]*{model.dense_layers}+[1]*{model.moe_layers})'")
        notes.append("# router details the planner does not price are yours to add (e.g. DeepSeek-V3's "
                     "--moe-router-enable-expert-bias, --moe-router-topk-scaling-factor)")
    args += [f"--tensor-model-parallel-size {plan.tp}", f"--pipeline-model-parallel-size {plan.pp}"]
    args += _megatron_split(model, plan)
    if plan.cp > 1:
        args.append(f"--context-parallel-size {plan.cp}")
    if model.moe:
        # Experts split tp ways (the planner's price; Megatron's default expert tensor parallel
        # size is tp too) inside each of the ep groups carved out of dp·cp, tokens moved by
        # all-to-all (Megatron's default dispatcher is allgather).
        args.append(f"--expert-tensor-parallel-size {plan.tp}")
        if plan.ep > 1:
            args.append(f"--expert-model-parallel-size {plan.ep}")
            args += (["--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend deepep"]
                     if plan.ep_dispatch == "deepep" else ["--moe-token-dispatcher-type alltoall"])
            if plan.ep_routing == "round_robin":
                notes.append("# the plan prices NeMo AutoModel's round-robin gate (a benchmark); Megatron-LM's "
                             "nearest, --moe-router-force-load-balancing, routes random logits instead")
    if plan.sequence_parallel and plan.tp > 1:
        args.append("--sequence-parallel")
    if plan.tp_comm_overlap:
        args.append("--tp-comm-overlap")
    args += [f"--micro-batch-size {plan.microbatch}", f"--global-batch-size {plan.global_batch}"]
    if plan.zero == 1:
        args += ["--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather"]
    elif plan.zero >= 2:
        # Megatron-FSDP: ZeRO-2 shards optimizer state and gradients, ZeRO-3 the weights too;
        # arguments.py asserts the fsdp_dtensor checkpoint format with it.
        strategy = "optim_grads" if plan.zero == 2 else "optim_grads_params"
        args += ["--use-megatron-fsdp", f"--data-parallel-sharding-strategy {strategy}",
                 "--ckpt-format fsdp_dtensor", "--overlap-grad-reduce", "--overlap-param-gather"]
    else:
        args.append("--overlap-grad-reduce")
    if plan.recompute == "full":
        args += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    elif plan.recompute == "selective":
        args.append("--recompute-granularity selective")
    # --use-flash-attn is still accepted but no longer read: the attention backend decides.
    args.append(f"--attention-backend {'flash' if plan.flash_attention else 'unfused'}")
    args.append("--bf16")
    if plan.grad_reduce == "bf16":
        args.append("--grad-reduce-in-bf16")
    multiple = 128 * plan.tp  # --make-vocab-size-divisible-by (default 128) x tp: build_tokenizer.py
    padded = -(-model.vocab // multiple) * multiple
    if padded != model.vocab:
        notes.append(f"# Megatron-LM pads the vocabulary to a multiple of 128*tp: {padded} rows "
                     f"(the planner prices {model.vocab})")
    if plan.pp == 1 and plan.virtual_stages > 1:
        notes.append("# no pipeline (pp=1): Megatron-LM interleaves model chunks only across pipeline ranks")
    elif plan.pp > 1 and plan.schedule in ("gpipe", "zb-h1"):
        notes.append(f"# Megatron-LM has no {SCHEDULE_NAMES[plan.schedule]} schedule: this runs 1F1B.")
    notes.append("# add your data and optimizer, and your tokenizer for NullTokenizer: --data-path (or --mock-data), "
                 "--tokenizer-type, --tokenizer-model, --train-iters, --lr, --min-lr, --lr-decay-style, "
                 "--lr-warmup-iters, --weight-decay, --clip-grad, --adam-beta1, --adam-beta2, --init-method-std, --save, --load")
    # arguments.py asserts CUDA_DEVICE_MAX_CONNECTIONS=1 with tp or cp > 1 before Blackwell
    # (and asserts it is not 1 with Megatron-FSDP).
    env = ("CUDA_DEVICE_MAX_CONNECTIONS=1 " if (plan.tp > 1 or plan.cp > 1) and plan.zero < 2
           and cluster.gpu not in _BLACKWELL else "")
    lines = notes + [f"{env}torchrun --nnodes {nodes} --nproc-per-node {per_node} pretrain_gpt.py \\"]
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


def _flags(words):
    """{flag without dashes: value, or True for a switch} of a word list."""
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
    return flags


def parse_megatron_args(text):
    """(Transformer, Cluster-size gpus, Plan) read back from ``megatron_args`` output, with
    Megatron-LM's own arithmetic: dp = world / (tp·pp·cp), v from
    --num-virtual-stages-per-pipeline-rank or the layout's stage count over pp."""
    words = _split_args(text)
    if "pretrain_gpt.py" in words:
        split = words.index("pretrain_gpt.py")
        launcher, flags = _flags(words[:split]), _flags(words[split + 1:])
    else:
        launcher = flags = _flags(words)
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
        tied_embeddings="untie-embeddings-and-output-weights" not in flags,
        dropout=float(flags.get("hidden-dropout", 0.1)) > 0,
        norm="rmsnorm" if flags.get("normalization") == "RMSNorm" else "layernorm",
        rope_theta=number("rotary-base", 10000) if flags.get("position-embedding-type") == "rope" else 0,
        bias="disable-bias-linear" not in flags,
        router_score=flags.get("moe-router-score-function", "softmax") if experts > 1 else "softmax",
        route_groups=number("moe-router-num-groups", 1), route_group_limit=number("moe-router-group-topk", 1),
        **({"q_lora_rank": number("q-lora-rank", 0), "kv_lora_rank": number("kv-lora-rank"),
            "qk_head_dim": number("qk-head-dim"), "qk_rope_head_dim": number("qk-pos-emb-head-dim"),
            "v_head_dim": number("v-head-dim")} if "multi-latent-attention" in flags else {}))
    gpus = int(launcher.get("nnodes", 1)) * int(launcher.get("nproc-per-node", 1))
    tp, pp, cp = number("tensor-model-parallel-size", 1), number("pipeline-model-parallel-size", 1), \
        number("context-parallel-size", 1)
    if "pipeline-model-parallel-layout" in flags:
        v = (flags["pipeline-model-parallel-layout"].count("|") + 1) // pp
    else:
        v = number("num-virtual-stages-per-pipeline-rank", 1)
    if "use-megatron-fsdp" in flags:
        zero = 2 if flags.get("data-parallel-sharding-strategy") == "optim_grads" else 3
    else:
        zero = 1 if "use-distributed-optimizer" in flags else 0
    plan = Plan(tp=tp, pp=pp, dp=gpus // (tp * pp * cp), cp=cp, ep=number("expert-model-parallel-size", 1),
                microbatch=number("micro-batch-size", 1), global_batch=number("global-batch-size"),
                virtual_stages=v, zero=zero, recompute=flags.get("recompute-granularity", "none"),
                sequence_parallel="sequence-parallel" in flags or tp == 1,
                schedule="interleaved" if v > 1 else "1f1b",
                flash_attention=flags.get("attention-backend", "auto") in ("flash", "auto"),
                tp_comm_overlap="tp-comm-overlap" in flags,
                grad_reduce="bf16" if "grad-reduce-in-bf16" in flags else "fp32",
                ep_dispatch="deepep" if flags.get("moe-flex-dispatcher-backend") == "deepep" else "alltoall")
    return model, gpus, plan


# ---- torchtitan -----------------------------------------------------------------------------

# Presets whose architecture torchtitan v0.2.2 has as a flavor (torchtitan/models/<name>/__init__.py).
TORCHTITAN_FLAVORS = {"llama3-8b": ("llama3", "8B"), "llama3-70b": ("llama3", "70B"),
                      "llama3-405b": ("llama3", "405B"), "deepseek-v3": ("deepseek_v3", "671B"),
                      "deepseek-v2-lite": ("deepseek_v3", "16B")}
# Flavors built with FlexAttention, which torchtitan's context parallelism refuses (SDPA only:
# deepseek_v3/model/args.py update_from_config raises NotImplementedError).
_FLEX_FLAVORS = {("deepseek_v3", "671B"), ("deepseek_v3", "16B")}
# Models whose train spec has no pipelining_fn (train.py: "... does not support pipelining").
_NO_PIPELINING = ("qwen3",)
# torch.distributed.pipelining schedule names (get_schedule_class); ZB-H1 has no single-chunk one.
TORCHTITAN_SCHEDULES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe", "zb-h1": "1F1B"}
# Models whose parallelize_fn runs DDP only when it is the only parallelism (torchtitan
# v0.2.2 llama3 and llama4 infra/parallelize.py: "DDP has not supported > 1D parallelism").
_DDP_ALONE = ("llama3", "llama4")


def torchtitan_flavor(model):
    """(preset key, (model name, flavor)) of the pinned flavor that builds ``model``, or None.
    The sequence length is no part of a flavor: update_from_config sets max_seq_len from
    training.seq_len, so a preset at another length keeps its flavor (and its rope_theta)."""
    for key, flavor in TORCHTITAN_FLAVORS.items():
        preset = MODELS[key].model
        if replace(model, seq_len=preset.seq_len) == preset:
            return key, flavor
    return None


def _torchtitan_registration(model):
    """(model name, model-args class, its fields as Python, why it is the nearest or ""):
    the torchtitan model that builds ``model`` once registered as a flavor."""
    h = model.hidden
    rope = f", rope_theta={model.rope_theta:g}" if model.rope_theta else ""
    groups = (f"num_expert_groups={model.route_groups}, num_limited_groups={model.route_group_limit}, "
              if model.route_groups > 1 else "")
    moe = (f"MoEArgs(num_experts={model.experts}, num_shared_experts={model.shared_experts}, top_k={model.top_k}, "
           f"{groups}score_func={model.router_score!r}, route_norm=True, score_before_experts=False)")
    if not model.moe:
        fields = f"dim={h}, n_layers={model.layers}, n_heads={model.heads}, n_kv_heads={model.kv_heads}, " \
                 f"vocab_size={model.vocab}, " + _llama_ffn(h, model.ffn) + rope
        differs = [what for what, differ in (("GELU MLP", not model.gated_mlp),
                                             ("tied embeddings", model.tied_embeddings),
                                             ("LayerNorm", model.norm != "rmsnorm"),
                                             ("learned positions", not model.rope_theta),
                                             ("biases", model.bias),
                                             ("multi-head latent attention", model.mla)) if differ]
        return "llama3", "TransformerModelArgs", fields, \
            f"llama3, which has no {' or '.join(differs)}" if differs else ""
    if model.mla or model.shared_experts or model.dense_layers:
        fields = f"dim={h}, n_layers={model.layers}, n_dense_layers={model.dense_layers}, n_heads={model.heads}, " \
                 f"inter_dim={model.ffn}, moe_inter_dim={model.expert_ffn}, vocab_size={model.vocab}, " \
                 f"moe_args={moe}"
        if model.mla:
            fields += f", q_lora_rank={model.q_lora_rank}, kv_lora_rank={model.kv_lora_rank}, " \
                      f"qk_nope_head_dim={model.qk_head_dim}, qk_rope_head_dim={model.qk_rope_head_dim}, " \
                      f"v_head_dim={model.v_head_dim}"
        return "deepseek_v3", "DeepSeekV3ModelArgs", fields + rope, \
            "" if model.mla else ("deepseek_v3 (dense first layers, shared experts), which uses multi-head latent "
                                  "attention")
    fields = f"dim={h}, n_layers={model.layers}, n_heads={model.heads}, n_kv_heads={model.kv_heads}, " \
             f"head_dim={model.head_dim}, hidden_dim={model.ffn}, vocab_size={model.vocab}, qk_norm=False, " \
             f"moe_enabled=True, moe_inter_dim={model.expert_ffn}, moe_args={moe}" + rope
    return "qwen3", "Qwen3ModelArgs", fields, ""


def _torchtitan_model(model, plan, preset):
    """(model name, flavor, comment lines): the pinned flavor whose architecture is the
    model's, or a flavor to register (a copy on SDPA where a FlexAttention flavor meets
    context parallelism); raises ValueError where torchtitan v0.2.2 cannot run the plan."""
    found = torchtitan_flavor(model)
    if found:
        _, (name, flavor) = found
        if (name, flavor) not in _FLEX_FLAVORS or plan.cp == 1:
            return name, flavor, []
        return name, f"{flavor}_sdpa", [
            f"# the {flavor} flavor uses FlexAttention, which torchtitan's context parallelism does not support "
            f"(SDPA only):",
            f"# register \"{flavor}_sdpa\" in torchtitan/models/{name}/__init__.py as "
            f"replace(deepseekv3_args[\"{flavor}\"], attn_type=\"sdpa\", attn_mask_type=\"causal\")"]
    name, cls, fields, why = _torchtitan_registration(model)
    if plan.pp > 1 and name in _NO_PIPELINING:
        raise ValueError(f"torchtitan {TORCHTITAN_VERSION} cannot run this plan: its {name} model, the one with "
                         f"experts and no shared ones, has no pipelining (train.py: 'does not support pipelining'); "
                         f"use pp=1 or the Megatron-LM export")
    label = MODELS[preset].label if preset in MODELS else "this model"
    flavor = preset if preset in MODELS else "custom"
    notes = [f"# torchtitan {TORCHTITAN_VERSION} has no model or flavor for {label}"
             + (f"; the nearest is {why}" if why else "") + ":",
             f"# register \"{flavor}\" in torchtitan/models/{name}/__init__.py as {cls}({fields})"]
    return name, flavor, notes


def _llama_ffn(dim, ffn):
    """TransformerModelArgs fields that give an FFN of ``ffn`` (torchtitan llama3's
    FeedForward: int(2·4·dim/3), times ffn_dim_multiplier, rounded up to multiple_of)."""
    base = int(2 * 4 * dim / 3)
    if base <= ffn:
        return f"multiple_of={ffn}"
    return f"ffn_dim_multiplier={(ffn + 0.5) / base!r}, multiple_of=1"


def _torchtitan_stage_layers(chunks, layers, first_less, last_less):
    """Transformer layers per stage of torchtitan's generate_llm_fqn_per_model_part
    (torchtitan/distributed/pipeline_parallel.py): the embedding and the output count as
    ``*_less`` layers, the stages share the total evenly and the first stages take the
    remainder; None where torchtitan refuses the split."""
    if chunks == 1:
        return [layers]
    effective = layers + first_less + last_less
    base, extra = divmod(effective, chunks)
    if chunks > effective or base == 0 or first_less > base or last_less > base:
        return None
    counts, left = [], layers
    for stage in range(chunks):
        n = base + (1 if stage < extra else 0) - (first_less if stage == 0 else 0) - \
            (last_less if stage == chunks - 1 else 0)
        n = min(n, left)
        counts.append(n)
        left -= n
    return counts


def _torchtitan_split(model, plan):
    """[parallelism] keys that make torchtitan cut the model into the planner's pp·v chunks
    (chunk c on rank c mod pp, torchtitan's "loop" style): the layer count per stage and the
    embedding and output weights when torchtitan's own even split gives the planner's
    layers per chunk, else every chunk's module names."""
    chunks = plan.pp * plan.virtual_stages
    counts = _chunk_layers(model, plan)
    for less in (0, 1):
        if _torchtitan_stage_layers(chunks, model.layers, less, less) == counts:
            effective = model.layers + 2 * less
            per_stage = -(-effective // chunks)
            if -(-effective // per_stage) == chunks:
                return {"pipeline_parallel_first_stage_less_layers": less,
                        "pipeline_parallel_last_stage_less_layers": less,
                        "pipeline_parallel_layers_per_stage": per_stage}
    names, layer = [], 0
    for c, n in enumerate(counts):
        part = (["tok_embeddings"] if c == 0 else []) + [f"layers.{layer + i}" for i in range(n)]
        part += ["norm", "output"] if c == chunks - 1 else []
        layer += n
        names.append(part)
    return {"module_fqns_per_model_part": names}


def _torchtitan_sharding(name, plan):
    """(data_parallel_replicate_degree, data_parallel_shard_degree, fsdp_reshard_after_forward
    or None, comment or None). torchtitan shards with FSDP over dp_shard·cp (parallel_dims.py
    "fsdp" mesh), always when cp > 1 or ep > 1, and replicates across dp_replicate (HSDP: the
    plan's shard group is dp_shard·cp); ZeRO-3 reshards weights after forward, ZeRO-2 keeps
    them gathered until backward; DDP only as said in ``_DDP_ALONE``."""
    ddp = plan.zero == 0 and plan.cp == 1 and plan.ep == 1 and (name not in _DDP_ALONE or plan.tp * plan.pp == 1)
    if ddp or plan.dp * plan.cp == 1:
        return plan.dp, 1, None, None
    note = None
    if plan.zero == 1:
        note = "# torchtitan has no ZeRO-1: FSDP without resharding after forward (ZeRO-2-like) is closest"
    elif plan.zero == 0:
        why = ("torchtitan shards over dp_shard x cp whenever cp > 1" if plan.cp > 1 else
               "torchtitan applies FSDP whenever ep > 1" if plan.ep > 1 else
               f"torchtitan's {name} runs DDP only when data parallelism is the only parallelism")
        note = f"# no ZeRO-0 here ({why}): FSDP without resharding after forward (ZeRO-2-like) is closest"
    if plan.shard_group % plan.cp:
        raise ValueError(f"shard_group={plan.shard_group} is not a multiple of cp={plan.cp}: torchtitan's FSDP "
                         f"group is dp_shard x cp")
    shard = plan.shard_group // plan.cp if plan.shard_group else plan.dp
    return plan.dp // shard, shard, "always" if plan.zero == 3 else "never", note


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
    torchtitan/config/job_config.py) for ``plan``. ``preset``: a key of ``MODELS`` (a
    torchtitan flavor where torchtitan has one). torchtitan runs global / (local_batch_size ·
    dp) forward passes a step (train.py gradient_accumulation_steps), each of
    local_batch_size sequences per device; with pipeline parallelism one pipeline schedule
    per step runs local_batch_size / pipeline_parallel_microbatch_size microbatches
    (pipeline_parallel.py build_pipeline_schedule)."""
    _check(model, cluster, plan)
    name, flavor, model_notes = _torchtitan_model(model, plan, preset)
    lines = [f"# {plan.label()} on {cluster.gpus} GPUs (the planner's plan), torchtitan {TORCHTITAN_VERSION} fields"]
    lines += ["[model]"] + model_notes + [f"name = {_toml_value(name)}", f"flavor = {_toml_value(flavor)}", ""]
    lines.append("[training]")
    if plan.pp > 1:
        lines += [f"# one pipeline schedule per step: local_batch_size / pipeline_parallel_microbatch_size = "
                  f"{plan.microbatches} microbatches of {plan.microbatch}",
                  f"local_batch_size = {plan.global_batch // plan.dp}"]
    else:
        lines += [f"# local_batch_size is the per-device forward batch: torchtitan accumulates "
                  f"global_batch_size / (local_batch_size x dp {plan.dp}) = {plan.microbatches} of them per step",
                  f"local_batch_size = {plan.microbatch}"]
    lines += [f"global_batch_size = {plan.global_batch}", f"seq_len = {model.seq_len}"]
    if plan.grad_reduce == "bf16":
        lines.append("# the plan reduces gradients in bf16; torchtitan reduces them in float32 only "
                     "(mixed_precision_reduce), twice the bytes the planner priced")
    lines.append("")
    lines.append("[parallelism]")
    replicate, shard, reshard, note = _torchtitan_sharding(name, plan)
    lines += [note] if note else []
    lines += [f"data_parallel_replicate_degree = {replicate}", f"data_parallel_shard_degree = {shard}"]
    if reshard:
        lines.append(f"fsdp_reshard_after_forward = {_toml_value(reshard)}")
    lines.append(f"tensor_parallel_degree = {plan.tp}")
    if plan.tp > 1 and not plan.sequence_parallel:
        lines.append("# torchtitan always runs sequence parallelism with tensor parallelism")
    lines += [f"pipeline_parallel_degree = {plan.pp}"]
    if plan.pp == 1 and plan.virtual_stages > 1:
        lines.append("# no pipeline (pp=1): torchtitan interleaves model chunks only across pipeline ranks")
    if plan.pp > 1:
        if plan.schedule == "zb-h1":
            lines.append("# torchtitan has no single-chunk ZB-H1 schedule: 1F1B is closest")
        lines += [f"pipeline_parallel_schedule = {_toml_value(TORCHTITAN_SCHEDULES[plan.schedule])}",
                  f"pipeline_parallel_microbatch_size = {plan.microbatch}"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in _torchtitan_split(model, plan).items()]
    lines.append(f"context_parallel_degree = {plan.cp}")
    if model.moe:
        lines.append(f"expert_parallel_degree = {plan.ep}")
        if plan.ep > 1 and plan.tp > 1:
            lines.append(f"expert_tensor_parallel_degree = {plan.tp}  # experts split tp ways, ep out of dp x cp")
        if plan.ep > 1 and plan.ep_dispatch == "deepep":
            lines.append('expert_parallel_comm_backend = "deepep"')
        if plan.ep > 1 and plan.ep_routing == "round_robin":
            lines.append("# the plan prices NeMo AutoModel's round-robin gate (a benchmark): torchtitan routes by "
                         "its router")
    mode = "selective" if plan.recompute == "op" else plan.recompute
    lines += ["", "[activation_checkpoint]", f"mode = {_toml_value(mode)}"]
    if plan.recompute == "selective":
        lines += ["# torchtitan's op-level selective AC keeps attention outputs and every other matmul output and",
                  "# recomputes the rest; the planner prices recomputing the attention core (Korthikanti 2022)"]
    if mode == "selective":
        lines.append('selective_ac_option = "op"')
    if not plan.flash_attention:
        lines.append("# torchtitan's SDPA picks FlashAttention where it can: no setting here turns it off")
    return "\n".join(lines) + "\n"


def parse_torchtitan_toml(text, model):
    """The Plan a ``torchtitan_toml`` config runs, by torchtitan's own arithmetic (``model``
    gives the layer count that turns layers per stage back into chunks): dp =
    replicate·shard, microbatch = pipeline_parallel_microbatch_size with PP else
    local_batch_size, ZeRO-3 where FSDP reshards after forward (torchtitan's "default"
    does without PP), ZeRO-2 where it does not."""
    import tomllib

    config = tomllib.loads(text)
    parallel = config.get("parallelism", {})
    training = config.get("training", {})
    tp = parallel.get("tensor_parallel_degree", 1)
    pp = parallel.get("pipeline_parallel_degree", 1)
    cp = parallel.get("context_parallel_degree", 1)
    replicate = parallel.get("data_parallel_replicate_degree", 1)
    shard = parallel.get("data_parallel_shard_degree", 1)
    if shard * cp == 1:
        zero = 0
    else:
        policy = parallel.get("fsdp_reshard_after_forward", "default")
        zero = 3 if policy == "always" or (policy == "default" and pp == 1) else 2
    schedules = {v: k for k, v in TORCHTITAN_SCHEDULES.items() if k != "zb-h1"}
    schedule = schedules[parallel.get("pipeline_parallel_schedule", "1F1B")]
    if "module_fqns_per_model_part" in parallel:
        chunks = len(parallel["module_fqns_per_model_part"])
    elif "pipeline_parallel_layers_per_stage" in parallel:
        less = parallel.get("pipeline_parallel_first_stage_less_layers", 1) + parallel.get(
            "pipeline_parallel_last_stage_less_layers", 1)
        chunks = -(-(model.layers + less) // parallel["pipeline_parallel_layers_per_stage"])
    else:
        chunks = pp * (2 if schedule == "interleaved" else 1)
    local = training.get("local_batch_size", 8)
    checkpoint = config.get("activation_checkpoint", {})
    mode = checkpoint.get("mode", "selective")
    if mode == "selective" and checkpoint.get("selective_ac_option", "2") == "op":
        mode = "op"  # torchtitan's per-op policy, the planner's "op"
    return Plan(tp=tp, pp=pp, dp=replicate * shard, cp=cp, ep=parallel.get("expert_parallel_degree", 1),
                microbatch=parallel.get("pipeline_parallel_microbatch_size", 1) if pp > 1 else local,
                global_batch=training.get("global_batch_size"), virtual_stages=chunks // pp, zero=zero,
                recompute=mode, sequence_parallel=True, schedule=schedule if pp > 1 else "1f1b", flash_attention=True,
                framework="fsdp", shard_group=shard * cp if replicate > 1 and shard * cp > 1 else 0,
                ep_dispatch="deepep" if parallel.get("expert_parallel_comm_backend") == "deepep" else "alltoall")
