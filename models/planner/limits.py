"""The bounds a real training run can have, for every number a reader gives the planner.

The command line checks each input against this table before any arithmetic (so ``tp=0``
is an error, never a division by zero, and ``seq_len=10^12`` or a 10^-300 Gb/s network
never reaches a formula); the lab can read the same table. The upper bounds are past the
largest published configurations, not guesses at the future:

* model shapes: the largest published dense model (Megatron-Turing NLG 530B: 105 layers,
  hidden 20,480, Smith et al. 2022 Sec. 2.2) and MoE (Kimi K2: 384 experts) sit far inside
  1,024 layers, hidden 131,072, 1,024 experts; vocabularies reach ~256K (Gemma), bounded at
  2M; context lengths at 1M tokens (2^20);
* clusters: 131,072 GPUs (2^17, past the ~100K-GPU clusters of 2024) and the GPUs of one
  NVLink domain at most 72 (GB200 NVL72);
* networks: 1 Gb/s (the slowest Ethernet a cluster has) to 10 Tb/s per GPU (past the
  800 Gb/s NICs of 2024), and a memory margin of at most 64 GB per GPU;
* training: 10^6 to 10^15 tokens (Llama 3 trained on 15.6T, Llama 3 Herd Sec. 3).
"""
import math
from dataclasses import dataclass

from models._validate import _is_number


@dataclass(frozen=True)
class Limit:
    low: float
    high: float
    whole: bool  # a count: an integer
    what: str  # what the number counts, for the message


LIMITS = {
    # the model
    "layers": Limit(1, 1024, True, "transformer layers"),
    "hidden": Limit(1, 131072, True, "hidden width"),
    "heads": Limit(1, 1024, True, "attention heads"),
    "kv_heads": Limit(1, 1024, True, "key/value heads"),
    "ffn": Limit(1, 524288, True, "FFN width"),
    "vocab": Limit(1, 2_000_000, True, "vocabulary entries"),
    "seq_len": Limit(1, 1_048_576, True, "tokens per sequence"),
    "experts": Limit(1, 1024, True, "experts"),
    "top_k": Limit(1, 1024, True, "experts per token"),
    "shared_experts": Limit(0, 64, True, "shared experts"),
    "expert_ffn": Limit(1, 524288, True, "expert FFN width"),
    "dense_layers": Limit(0, 1024, True, "dense first layers"),
    "q_lora_rank": Limit(0, 131072, True, "query latent width"),
    "kv_lora_rank": Limit(0, 131072, True, "key-value latent width"),
    "qk_head_dim": Limit(0, 4096, True, "query/key head width"),
    "qk_rope_head_dim": Limit(0, 4096, True, "RoPE head width"),
    "v_head_dim": Limit(0, 4096, True, "value head width"),
    "rope_theta": Limit(0, 1e12, False, "RoPE base (0: learned positions)"),
    # the cluster
    "gpus": Limit(1, 131072, True, "GPUs"),
    "gpus_per_node": Limit(1, 72, True, "GPUs per node"),
    "inter_gbps": Limit(1, 10_000, False, "Gb/s per GPU"),
    "memory_margin_gb": Limit(0, 64, False, "GB per GPU"),
    # the plan and the run
    "global_batch": Limit(1, 1_000_000, True, "sequences per step"),
    "tp": Limit(1, 131072, True, "tensor-parallel ranks"),
    "pp": Limit(1, 1024, True, "pipeline stages"),
    "dp": Limit(1, 131072, True, "data-parallel ranks"),
    "cp": Limit(1, 131072, True, "context-parallel ranks"),
    "ep": Limit(1, 131072, True, "expert-parallel ranks"),
    "microbatch": Limit(1, 1_000_000, True, "sequences per microbatch"),
    "virtual_stages": Limit(1, 1024, True, "model chunks per pipeline rank"),
    "zero": Limit(0, 3, True, "ZeRO stage"),
    "shard_group": Limit(0, 131072, True, "ranks per HSDP shard group (0: all)"),
    "tokens": Limit(1e6, 1e15, False, "tokens to train on"),
    "top": Limit(1, 100, True, "plans to list"),
}


def _shown(x):
    return f"{int(x):,}" if x == int(x) and abs(x) < 1e9 else f"{x:g}"


def check(name, value):
    """``value`` if it is a number inside ``LIMITS[name]``; otherwise ValueError with one
    line that names the input, its bounds and what it counts."""
    limit = LIMITS[name]
    if not _is_number(value) or math.isnan(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if not limit.low <= value <= limit.high:
        raise ValueError(f"{name}={value!r} is outside {_shown(limit.low)} to {_shown(limit.high)} ({limit.what})")
    if limit.whole and value != int(value):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    return value
