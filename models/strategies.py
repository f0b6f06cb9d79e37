"""Specification cards and the comparison table for the seven parallelism strategies.

Plain data, standard library only: the article's ``:::{card}`` and ``:::{comparison-table}``
directives render it, and figures 02, 18, 19 and 20 read the same tuples, so every field is a
short phrase or at most two short sentences.

Units, stated once so the strings can stay short:

* Ψ is the parameter count. Memory is in BYTES under mixed-precision Adam: 2 (bf16 weights)
  + 2 (bf16 gradients) + 12 (fp32 master copy and two moments) = 16 bytes per parameter.
* N is the data-parallel (sharding) degree; T, C, P are the tensor-, context- and
  pipeline-parallel degrees; E is the number of experts.
* Communication volumes are per device per optimizer step. Activation-sized traffic is
  proportional to b·s·h (microbatch × sequence length × hidden size).
"""
from dataclasses import dataclass, fields

__all__ = [
    "StrategyCard",
    "CARDS",
    "card",
    "ComparisonRow",
    "COMPARISON_COLUMNS",
    "COMPARISON_ROWS",
    "COMPARISON_NOTE",
]


@dataclass(frozen=True)
class StrategyCard:
    """The eight questions every strategy answers, plus its key and display name."""

    key: str
    name: str
    replicated: str
    sharded: str
    memory_saved: str
    computation: str
    communication: str
    frequency: str
    prefers: str
    limit: str


CARDS: tuple[StrategyCard, ...] = (
    StrategyCard(
        key="dp",
        name="Data parallelism",
        replicated="Everything persistent: weights, gradients and optimizer state, 16Ψ bytes on each device.",
        sharded="Only the samples. Each rank sees its own slice of the global batch.",
        memory_saved="No model state at all; just the activations of samples now held elsewhere.",
        computation="The whole model on each device, over 1/N of the samples.",
        communication="One gradient AllReduce. A ring sends ≈ 2× the gradient buffer per rank (≈ 4Ψ bytes in bf16).",
        frequency="Once per optimizer step, in buckets that fire during backward.",
        prefers="Any fabric. It overlaps with a whole backward pass, so it tolerates slow links best.",
        limit="The full model state must fit on one device; past the critical batch, extra ranks stop helping.",
    ),
    StrategyCard(
        key="zero",
        name="Sharded data parallelism (ZeRO / FSDP)",
        replicated="The arithmetic: each rank still runs every layer on its own samples.",
        sharded="Optimizer state (stage 1), then gradients too (stage 2), then the weights as well (stage 3).",
        memory_saved="4Ψ + 12Ψ/N, then 2Ψ + 14Ψ/N, then 16Ψ/N bytes; stages 1 and 2 tend to 4Ψ and 2Ψ as N grows.",
        computation="Unchanged: full model per rank, 1/N of the data.",
        communication="ReduceScatter of gradients, AllGather of weights: the DDP volume for stages 1–2, ≈ 1.5× it for stage 3.",
        frequency="Once per step for stages 1–2; per sharded unit (per layer), forward and backward, for stage 3.",
        prefers="Stages 1–2 run anywhere. Keep a stage-3 shard group on a fast fabric, e.g. inside a node.",
        limit="Savings shrink as 1/N while every per-layer collective slows as the group spans slower links.",
    ),
    StrategyCard(
        key="tp",
        name="Tensor parallelism",
        replicated="The block input, plus everything outside the split matmuls: norms, dropout, residual stream.",
        sharded="Every weight matrix, cut along one dimension; attention heads spread over the ranks.",
        memory_saved="Weights and the activations inside the split regions shrink by T; the rest stays whole.",
        computation="Truly divided: a rank performs 1/T of the matmul FLOPs.",
        communication="Four AllReduces per layer per step (two forward, two backward), each of b·s·h elements.",
        frequency="Twice per layer in each direction, blocking the very next operation.",
        prefers="A scale-up fabric (NVLink / NVSwitch); in practice it stays inside one node.",
        limit="Per-rank GEMMs get too narrow, heads must divide by T, and the node edge caps it. Rarely beyond 8.",
    ),
    StrategyCard(
        key="sp",
        name="Sequence parallelism",
        replicated="Nothing extra. It removes copies that tensor parallelism left behind.",
        sharded="Norm, dropout and residual activations, cut along the token axis.",
        memory_saved="The activations TP leaves replicated, divided by T.",
        computation="Elementwise work split T ways; the matmuls are the same as under TP.",
        communication="None added. Each TP AllReduce becomes a ReduceScatter plus an AllGather of equal total volume.",
        frequency="At the boundaries TP already synchronises on; no new ones.",
        prefers="The TP group's fabric, because it uses that very group.",
        limit="It has no degree of its own: it is tied to T.",
    ),
    StrategyCard(
        key="cp",
        name="Context parallelism",
        replicated="Weights, gradients and optimizer state.",
        sharded="Token positions, and every activation computed from them.",
        memory_saved="Activations divided by C. It is the only axis that splits one sequence.",
        computation="Split C ways, the quadratic attention term included (balanced only with a causal-aware layout).",
        communication="Ring: KV blocks passed to a neighbour, C−1 hops per attention. Ulysses: four All-to-Alls per layer.",
        frequency="Only within attention; token-local layers need none.",
        prefers="Ulysses wants a fast fabric. Ring is point-to-point and prefetchable, so it can cross nodes.",
        limit="Ulysses: C cannot exceed the KV-head count. Ring: each hop must hide behind one block of compute.",
    ),
    StrategyCard(
        key="pp",
        name="Pipeline parallelism",
        replicated="Nothing: every layer has exactly one home.",
        sharded="The stack of layers, cut by depth into P stages.",
        memory_saved="Model state ÷ P; live activations set by the schedule (m for GPipe, ≤ P for 1F1B).",
        computation="Split P ways, minus a bubble of (P−1)/(m+P−1) of the timeline.",
        communication="Point-to-point send/recv of one [b_micro, s, h] activation per stage boundary.",
        frequency="Once per microbatch per boundary, each way. The least chatty axis.",
        prefers="Any link, even between racks. Spend your slowest links here.",
        limit="The bubble, uneven stages, and the many microbatches needed to hide both.",
    ),
    StrategyCard(
        key="ep",
        name="Expert parallelism",
        replicated="Attention, norms and the router.",
        sharded="Whole experts: each rank owns a subset of the E expert MLPs.",
        memory_saved="Expert weights ÷ EP degree (at most E), which is most of an MoE model's bytes.",
        computation="Sparse: each token runs k of E experts, so FLOPs stay near the dense base model.",
        communication="All-to-All dispatch and combine, k·b·s·h elements each, per MoE layer, in each pass.",
        frequency="Two All-to-Alls per MoE layer forward, two more in backward.",
        prefers="High bisection bandwidth; ideally the expert group sits inside one node.",
        limit="Routing skew: the layer waits for the busiest expert, whatever the average.",
    ),
)

_BY_KEY = {c.key: c for c in CARDS}


def card(key: str) -> StrategyCard:
    """The card for ``key`` ("dp", "zero", "tp", "sp", "cp", "pp" or "ep")."""
    try:
        return _BY_KEY[key]
    except (KeyError, TypeError):
        valid = ", ".join(c.key for c in CARDS)
        raise ValueError(f"key={key!r} is not a strategy card; valid keys: {valid}") from None


@dataclass(frozen=True)
class ComparisonRow:
    strategy: str
    split: str
    memory_effect: str
    communication: str
    sync_granularity: str
    reach_for_it_when: str


COMPARISON_COLUMNS: tuple[tuple[str, str], ...] = (
    ("strategy", "Strategy"),
    ("split", "What is split"),
    ("memory_effect", "Memory effect"),
    ("communication", "Communication"),
    ("sync_granularity", "Sync granularity"),
    ("reach_for_it_when", "Reach for it when"),
)

COMPARISON_ROWS: tuple[ComparisonRow, ...] = (
    ComparisonRow(
        strategy="DDP",
        split="the batch",
        memory_effect="none: 16Ψ bytes on every device",
        communication="AllReduce, ≈ 2× the gradient bytes",
        sync_granularity="gradient buckets during backward",
        reach_for_it_when="the model already fits on one device",
    ),
    ComparisonRow(
        strategy="ZeRO-1/2",
        split="optimizer state, then gradients",
        memory_effect="4Ψ + 12Ψ/N, then 2Ψ + 14Ψ/N (→ 4Ψ, 2Ψ)",
        communication="same volume as DDP (ReduceScatter + AllGather)",
        sync_granularity="gradient buckets during backward",
        reach_for_it_when="always: the saving costs no extra traffic",
    ),
    ComparisonRow(
        strategy="FSDP / ZeRO-3",
        split="all persistent state",
        memory_effect="16Ψ/N",
        communication="≈ 1.5× DDP, issued per layer",
        sync_granularity="each sharded unit",
        reach_for_it_when="model state does not fit",
    ),
    ComparisonRow(
        strategy="Tensor",
        split="every matmul",
        memory_effect="weights and inner activations ÷ T",
        communication="4 AllReduces per layer, b·s·h each",
        sync_granularity="inside the layer, blocking",
        reach_for_it_when="single layers are too big or too slow; keep it in-node",
    ),
    ComparisonRow(
        strategy="Pipeline",
        split="the layer stack",
        memory_effect="weights ÷ P",
        communication="send/recv, one activation per boundary per microbatch",
        sync_granularity="the pipeline clock",
        reach_for_it_when="the model is deep or the network is slow",
    ),
    ComparisonRow(
        strategy="Context",
        split="the sequence",
        memory_effect="activations ÷ C",
        communication="KV ring, or 4 All-to-Alls per layer",
        sync_granularity="each attention layer",
        reach_for_it_when="long sequences blow up activation memory",
    ),
    ComparisonRow(
        strategy="Expert",
        split="the experts",
        memory_effect="expert weights ÷ EP degree",
        communication="2 All-to-Alls per MoE layer, each pass",
        sync_granularity="each MoE routing step",
        reach_for_it_when="the model is a mixture of experts",
    ),
)

COMPARISON_NOTE: str = (
    "Volumes are per device per optimizer step. Ψ is the parameter count and memory is in bytes "
    "(16 per parameter under mixed-precision Adam); N, T, P, C are the degrees of each axis. "
    "Activation-sized traffic grows with b·s·h: microbatch × sequence length × hidden size."
)


def _check() -> None:
    names = tuple(f.name for f in fields(ComparisonRow))
    assert tuple(n for n, _ in COMPARISON_COLUMNS) == names, "columns out of step with ComparisonRow"


_check()


# Short names for the figures' controls, panels and lanes (Figures 18-20), keyed like the
# cards; HSDP (a layout of ZeRO-3, not a strategy of its own) has no card, only these words.
SHORT_NAMES: dict[str, str] = {
    "dp": "Data parallel",
    "zero": "ZeRO / FSDP",
    "hsdp": "HSDP",
    "tp": "Tensor",
    "sp": "Sequence",
    "pp": "Pipeline",
    "cp": "Context",
    "ep": "Expert",
}
HSDP_SPLIT: str = "everything persistent, inside a group of ranks; the groups are replicas"
