"""The range of every number the planner takes from a reader (the lab's fields, the command
line's options): what a physical training run can have, checked before any arithmetic.

One table, in the reader's units, so that the lab (Figure 21) and ``python -m
models.planner`` refuse the same inputs with the same bounds. Each upper bound sits well
above the largest published value (cited), so no real run is refused, and low enough
that nothing downstream can overflow a float (issue 42: a network of 1e-320 Gb/s, or a
sequence of 10^12 tokens, gave internal text or 4,989,952,145 GB per GPU). A zero is
refused wherever the planner would divide by it.
"""
from dataclasses import dataclass


@dataclass(frozen=True)
class Limit:
    """``low`` to ``high`` in ``unit`` (empty: a count); ``integer``: whole numbers only;
    ``why``: where the upper bound comes from."""

    low: float
    high: float
    unit: str = ""
    integer: bool = True
    why: str = ""

    def problem(self, value):
        """What is wrong with ``value`` (a sentence's end: "at least 1"), or None."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            return "a number"
        if value < self.low:
            return f"at least {self.text(self.low)}"
        if value > self.high:
            return f"at most {self.text(self.high)}"
        if self.integer and not float(value).is_integer():
            return "a whole number"
        return None

    def text(self, value):
        """``value`` as a bound is written: "1,048,576 tokens", "1,000T tokens", "1 Gb/s"."""
        shown = f"{value:,.0f}" if float(value).is_integer() and abs(value) < 1e12 else f"{value / 1e12:,g}T"
        unit = self.unit[:-1] if value == 1 and self.unit in ("tokens", "sequences") else self.unit
        return f"{shown} {unit}".strip()


LIMITS = {
    # model (models.planner.Transformer), counts
    "layers": Limit(1, 1024, why="the deepest published LLMs have 126-128 layers (Llama 3 405B; Megatron-LM's 1T)"),
    "hidden": Limit(1, 131_072, why="the widest have 20,480-25,600 (MT-NLG 530B; Megatron-LM's 1T)"),
    "heads": Limit(1, 1024, why="the most have 128-160 (Llama 3 405B, DeepSeek-V3; Megatron-LM's 1T)"),
    "kv_heads": Limit(1, 1024, why="at most the query heads"),
    "ffn": Limit(1, 524_288, why="the widest have 53,248-102,400 (Llama 3 405B; Megatron-LM's 1T)"),
    "vocab": Limit(1, 2_000_000, why="the largest vocabularies have 256,000 tokens (Gemma, PaLM)"),
    "seq_len": Limit(1, 1_048_576, "tokens", why="Llama 3.1's long-context stage trained on 128K-token "
                                                 "sequences"),
    "experts": Limit(1, 1024, why="the most routed experts in a layer are 256 (DeepSeek-V3)"),
    "top_k": Limit(1, 64, why="DeepSeek-V3 routes each token to 8"),
    "shared_experts": Limit(0, 64, why="DeepSeek-V3 has 1"),
    "expert_ffn": Limit(1, 524_288, why="as ffn"),
    "dense_layers": Limit(0, 1023, why="fewer than layers"),
    # multi-head latent attention (0: not MLA) and positions (0: learned, no RoPE)
    "q_lora_rank": Limit(0, 131_072, why="DeepSeek-V3's query latent is 1,536 wide"),
    "kv_lora_rank": Limit(0, 131_072, why="DeepSeek-V3's key-value latent is 512 wide"),
    "qk_head_dim": Limit(0, 4096, why="DeepSeek-V3's query/key heads are 128 wide without RoPE"),
    "qk_rope_head_dim": Limit(0, 4096, why="DeepSeek-V3's decoupled RoPE heads are 64 wide"),
    "v_head_dim": Limit(0, 4096, why="DeepSeek-V3's value heads are 128 wide"),
    "rope_theta": Limit(0, 1e12, integer=False, why="Llama 3 uses a base of 500,000, Mixtral 1,000,000"),
    # cluster (models.planner.Cluster)
    "gpus": Limit(1, 131_072, why="the largest training clusters reported hold about 100,000 GPUs (xAI Colossus)"),
    "gpus_per_node": Limit(1, 72, why="an NVL72 rack is the largest NVLink domain sold (72 GPUs)"),
    "inter_gbps": Limit(1, 10_000, "Gb/s", integer=False,
                        why="1 Gb/s is the slowest Ethernet in a data centre; NVLink 5 gives 7,200 Gb/s a GPU"),
    "memory_margin_gb": Limit(0, 64, "GB", integer=False, why="a margin, not most of a GPU; Cluster also refuses one "
                                                               "that leaves a plan nothing of its HBM"),
    # workload
    "global_batch": Limit(1, 1_000_000, "sequences", why="the largest published batches are 16M tokens, 2,048 "
                                                         "sequences of 8,192 (Llama 3 405B)"),
    "tokens": Limit(1e6, 1e15, "tokens", integer=False, why="the largest runs train on 15-36T tokens (Llama 3, "
                                                            "Qwen3)"),
    # plan degrees (a pinned degree; the search stays inside the GPUs)
    "tp": Limit(1, 131_072), "pp": Limit(1, 1024), "dp": Limit(1, 131_072), "cp": Limit(1, 131_072),
    "ep": Limit(1, 131_072), "microbatch": Limit(1, 1_000_000), "virtual_stages": Limit(1, 1024),
    "zero": Limit(0, 3), "shard_group": Limit(0, 131_072), "top": Limit(1, 100),
}


def check(name, value):
    """``value`` if it is within ``LIMITS[name]``; else ``ValueError`` naming the input, as
    every planner message does ("seq_len=1e+12: at most 1,048,576 tokens")."""
    problem = LIMITS[name].problem(value)
    if problem:
        raise ValueError(f"{name}={value!r}: {problem}" if problem != "a number" else f"{name} must be a number, "
                                                                                   f"got {value!r}")
    return value
