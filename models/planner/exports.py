"""Launch configurations for a plan: a Megatron-LM command line and a torchtitan TOML, and
their parsers (the tests read them back)."""
from models.planner.cost import _check, _chunk_counts
from models.planner.model import Plan, Transformer
from models.planner.reasons import SCHEDULE_NAMES

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
    if not model.dropout:  # Megatron-LM's default is 0.1 for both
        args += ["--hidden-dropout 0", "--attention-dropout 0"]
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
    if plan.tp_comm_overlap:
        args.append("--tp-comm-overlap")
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
        tied_embeddings="untie-embeddings-and-output-weights" not in flags,
        dropout=float(flags.get("hidden-dropout", 0.1)) > 0)
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
                schedule="interleaved" if v > 1 else "1f1b", flash_attention="use-flash-attn" in flags,
                tp_comm_overlap="tp-comm-overlap" in flags)
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


