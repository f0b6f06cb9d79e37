"""Context parallelism: ring attention on small real tensors, causal balance, comm volumes.

Models ring attention (Liu, Zaharia & Abbeel 2023, "Ring Attention with Blockwise
Transformers for Near-Infinite Context"): C ranks each keep a block of queries and
pass key/value blocks around a ring, folding each block into a running softmax
with the online-softmax recurrence (Milakov & Gimelshein 2018; Dao et al. 2022,
FlashAttention). Every intermediate state is returned so a figure can draw it,
and the result equals dense softmax attention. Also: the causal-mask work per
rank for contiguous vs "two chunks per rank" layouts (Megatron-LM context
parallelism; Llama 3 Sec. 3.3.2), and per-rank bytes of ring attention vs
DeepSpeed-Ulysses (Jacobs et al. 2023, Sec. 3.2).

What it does not model: timing or overlap of the KV transfers with compute, the
backward pass's own ring (K/V and their gradients circulate again), fused kernels,
multiple heads in ``ring_attention`` (heads are independent; one is enough to see
the algorithm), or network topology (All-to-All on an oversubscribed fabric is
slower per byte than ring P2P; bytes here are bytes).
"""
import math
from dataclasses import dataclass

from models.tensor import check_matrix
from models._validate import choice, divides, finite, positive_int

LAYOUTS = ("contiguous", "two_chunks")


def _check_qkv(q, k, v, scale):
    s, d = check_matrix("q", q)
    if check_matrix("k", k) != (s, d):
        raise ValueError(f"k must have the shape of q, [{s}, {d}]")
    s_v, _ = check_matrix("v", v)
    if s_v != s:
        raise ValueError(f"v must have {s} rows like q and k, got {s_v}")
    if scale is None:
        return s, 1.0 / math.sqrt(d)
    finite("scale", scale)
    return s, float(scale)


def _dot(a, b):
    return math.fsum(x * y for x, y in zip(a, b))


def dense_attention(q, k, v, *, causal=False, scale=None):
    """softmax(Q·Kᵀ·scale [+ causal mask])·V for one head; scale defaults to 1/√d."""
    s, scale = _check_qkv(q, k, v, scale)
    out = []
    for i in range(s):
        visible = range(i + 1) if causal else range(s)
        scores = [_dot(q[i], k[j]) * scale for j in visible]
        top = max(scores)
        weights = [math.exp(x - top) for x in scores]
        total = math.fsum(weights)
        out.append([math.fsum(w * v[j][c] for w, j in zip(weights, visible)) / total
                    for c in range(len(v[0]))])
    return out


def rank_positions(seq, ranks, layout="contiguous"):
    """Token positions each rank owns.

    contiguous: rank i holds [i·s/C, (i+1)·s/C).
    two_chunks: the sequence is cut into 2C chunks and rank i holds chunks i and 2C-1-i,
    one from each end, so every rank gets the same causal work (Megatron-LM context
    parallelism; Llama 3 Sec. 3.3.2).
    """
    seq = positive_int("seq", seq)
    ranks = positive_int("ranks", ranks)
    choice("layout", layout, LAYOUTS)
    chunks = ranks if layout == "contiguous" else 2 * ranks
    divides("2*ranks" if layout == "two_chunks" else "ranks", chunks, "seq", seq)
    size = seq // chunks
    if layout == "contiguous":
        return tuple(tuple(range(i * size, (i + 1) * size)) for i in range(ranks))
    return tuple(tuple(range(i * size, (i + 1) * size))
                 + tuple(range((chunks - 1 - i) * size, (chunks - i) * size)) for i in range(ranks))


@dataclass(frozen=True)
class RingStep:
    """One rank's online-softmax state after folding in one K/V block."""

    step: int
    rank: int
    kv_source_rank: int  # whose K/V block this rank holds at this step: (rank - step) mod C
    kv_positions: tuple
    pairs_computed: int  # (query, key) score entries evaluated; 0 when the mask hides the block
    running_max: tuple  # m per local query row (-inf until a visible key has been seen)
    running_denominator: tuple  # l = Σ exp(score - m)
    running_output: tuple  # o = Σ exp(score - m)·v, not yet divided by l


@dataclass(frozen=True)
class RingAttentionResult:
    output: list  # [s, d] in the original token order: equals dense_attention
    positions: tuple  # token positions owned by each rank
    steps: tuple  # steps[k][rank] -> RingStep


def ring_attention(q, k, v, ranks, *, causal=False, layout="contiguous", scale=None):
    """Ring attention (Liu et al. 2023) with the online-softmax recurrence.

    At step k rank i holds the K/V block of rank (i - k) mod C and updates, per query row:
        m' = max(m, rowmax(S));  l' = l·e^(m-m') + Σ e^(S-m');  o' = o·e^(m-m') + e^(S-m')·V
    (Milakov & Gimelshein 2018, Alg. 3; FlashAttention Alg. 1). After C steps o/l is
    exactly softmax attention. Keys hidden by the causal mask are skipped, not zeroed.
    """
    s, scale = _check_qkv(q, k, v, scale)
    ranks = positive_int("ranks", ranks)
    positions = rank_positions(s, ranks, layout)
    d_v = len(v[0])
    state = []
    for pos in positions:
        state.append(([-math.inf] * len(pos), [0.0] * len(pos), [[0.0] * d_v for _ in pos]))
    steps = []
    for step in range(ranks):
        this_step = []
        for rank, q_pos in enumerate(positions):
            source = (rank - step) % ranks
            kv_pos = positions[source]
            m, l, o = state[rank]
            pairs = 0
            for row, qi in enumerate(q_pos):
                visible = [j for j in kv_pos if not causal or j <= qi]
                if not visible:
                    continue
                pairs += len(visible)
                scores = [_dot(q[qi], k[j]) * scale for j in visible]
                new_max = max(m[row], max(scores))
                decay = math.exp(m[row] - new_max)  # exp(-inf) = 0.0 on the first visible block
                weights = [math.exp(x - new_max) for x in scores]
                l[row] = l[row] * decay + math.fsum(weights)
                o[row] = [o[row][c] * decay + math.fsum(w * v[j][c] for w, j in zip(weights, visible))
                          for c in range(d_v)]
                m[row] = new_max
            this_step.append(RingStep(step, rank, source, kv_pos, pairs, tuple(m), tuple(l),
                                      tuple(tuple(r) for r in o)))
        steps.append(tuple(this_step))
    output = [None] * s
    for pos, (_, l, o) in zip(positions, state):
        for row, qi in enumerate(pos):
            output[qi] = [x / l[row] for x in o[row]]
    return RingAttentionResult(output, positions, tuple(steps))


@dataclass(frozen=True)
class CausalWork:
    """Causal attention work per rank for one layout (Liu 2023; Megatron-LM CP)."""

    layout: str
    ranks: int
    block_pairs_per_rank: tuple  # (query chunk, key chunk) pairs with any visible entry
    work_per_rank: tuple  # fraction of the full s x s score matrix each rank computes
    imbalance: float  # max / mean of work_per_rank: 1.0 is perfect balance
    schedule: tuple  # schedule[step][rank]: block pairs computed at that ring step


def causal_work(ranks, layout="contiguous"):
    """Who does how much of the causal triangle.

    Chunk-level view (s → ∞): a query chunk sees every earlier key chunk fully and its own
    diagonal chunk half. Contiguous: rank i does (i + 1/2)/C² of the square, so the last
    rank does 2C-1 times the first and max/mean = 2 - 1/C → 2 (in block pairs, which a
    kernel that does not skip the masked half of a diagonal block computes, 2C/(C+1)).
    Two chunks per rank:
    (i + 1/2 + 2C-1-i + 1/2)/(2C)² = 1/(2C) for every rank, imbalance 1.
    """
    ranks = positive_int("ranks", ranks)
    choice("layout", layout, LAYOUTS)
    if ranks > 4096:
        raise ValueError(f"ranks must be <= 4096 for this chunk-level count, got {ranks}")
    if layout == "contiguous":
        chunks_of = [(i,) for i in range(ranks)]
        n_chunks = ranks
    else:
        chunks_of = [(i, 2 * ranks - 1 - i) for i in range(ranks)]
        n_chunks = 2 * ranks
    pairs, work = [], []
    for owned in chunks_of:
        pairs.append(sum(c + 1 for c in owned))
        work.append(sum(c + 0.5 for c in owned) / (n_chunks * n_chunks))
    schedule = tuple(
        tuple(sum(1 for qc in chunks_of[r] for kc in chunks_of[(r - step) % ranks] if kc <= qc)
              for r in range(ranks))
        for step in range(ranks))
    mean = sum(work) / ranks
    return CausalWork(layout, ranks, tuple(pairs), tuple(work), max(work) / mean, schedule)


def _kv_hidden(hidden, heads, kv_heads):
    """Width of K (or V): h for multi-head attention, h·kv_heads/heads with GQA."""
    if kv_heads is None:
        return hidden
    if heads is None:
        raise ValueError("heads must be given when kv_heads is")
    kv_heads = positive_int("kv_heads", kv_heads)
    divides("kv_heads", kv_heads, "heads", heads)
    return hidden // heads * kv_heads


def _as_float(name, value):
    try:
        result = float(value)
    except OverflowError:
        raise ValueError(f"{name}={value} is too large to represent as a float") from None
    return result


@dataclass(frozen=True)
class RingCommunication:
    """Per-rank bytes of ring attention in one layer's forward pass."""

    transfers: int  # C - 1: the last block is used where it lands
    kv_block_bytes: float  # one K block + one V block: 2·b·(s/C)·h_kv·bytes
    forward_bytes_per_rank: float  # transfers x kv_block_bytes, sent (and received) by each rank


def ring_communication(seq, hidden, cp, *, micro_batch=1, bytes_per_element=2, heads=None,
                       kv_heads=None):
    """Ring attention moves K and V once around the ring per layer (Liu et al. 2023 Sec. 3).

    Per rank: (C-1) sends of a K and a V block, 2·b·(s/C)·h_kv each step, ≈ 2·b·s·h_kv in
    total -- independent of C, which is why ring traffic scales with the sequence.
    """
    s = positive_int("seq", seq)
    h = positive_int("hidden", hidden)
    cp = positive_int("cp", cp)
    b = positive_int("micro_batch", micro_batch)
    bpe = positive_int("bytes_per_element", bytes_per_element)
    if heads is not None:
        heads = positive_int("heads", heads)
        divides("heads", heads, "hidden", h)
    divides("cp", cp, "seq", s)
    h_kv = _kv_hidden(h, heads, kv_heads)
    block = _as_float("kv_block_bytes", 2 * b * (s // cp) * h_kv * bpe)
    return RingCommunication(cp - 1, block, _as_float("forward_bytes_per_rank", (cp - 1) * block))


@dataclass(frozen=True)
class UlyssesCommunication:
    """Per-rank bytes of DeepSpeed-Ulysses in one layer's forward pass."""

    all_to_alls_forward: int  # 4: Q, K, V in (sequence-sharded -> head-sharded), output back
    all_to_alls_backward: int  # 4 more, the same shapes in reverse
    local_shard_bytes: tuple  # (q, k, v, out): what each rank holds before each All-to-All
    forward_bytes_per_rank: float  # Σ (C-1)/C x local shard: the part that leaves the rank
    per_link_volume_bytes: float  # the paper's 4Nh/P form: Σ local shards, no (C-1)/C


def ulysses_communication(seq, hidden, heads, cp, *, micro_batch=1, bytes_per_element=2,
                          kv_heads=None):
    """DeepSpeed-Ulysses (Jacobs et al. 2023 Sec. 3.2): 4 All-to-Alls per layer forward.

    The paper: an All-to-All of aggregate size M over P GPUs moves M/P per link; QKV is 3Nh
    and the output Nh, so 4Nh/P per link. Each rank sends (C-1)/C of its shard. After the
    All-to-All each rank owns whole heads, so C must divide the head count (and the K/V head
    count with GQA).
    """
    s = positive_int("seq", seq)
    h = positive_int("hidden", hidden)
    heads = positive_int("heads", heads)
    cp = positive_int("cp", cp)
    b = positive_int("micro_batch", micro_batch)
    bpe = positive_int("bytes_per_element", bytes_per_element)
    divides("heads", heads, "hidden", h)
    divides("cp", cp, "heads", heads)
    if kv_heads is not None:
        divides("cp", cp, "kv_heads", positive_int("kv_heads", kv_heads))
    divides("cp", cp, "seq", s)
    h_kv = _kv_hidden(h, heads, kv_heads)
    tokens = b * (s // cp)
    shards = tuple(_as_float("local_shard_bytes", tokens * width * bpe) for width in (h, h_kv, h_kv, h))
    leaving = (cp - 1) / cp
    return UlyssesCommunication(4, 4, shards, math.fsum(shards) * leaving, math.fsum(shards))


@dataclass(frozen=True)
class ContextParallelComparison:
    ring: RingCommunication
    ulysses: UlyssesCommunication
    ring_over_ulysses: float  # ≈ C/2 for multi-head attention: Ulysses moves less data


def compare_context_parallel(seq, hidden, heads, cp, *, micro_batch=1, bytes_per_element=2,
                             kv_heads=None):
    """Forward per-rank bytes of ring attention vs Ulysses for one layer.

    Ring ≈ 2bsh(C-1)/C, Ulysses ≈ 4bsh(C-1)/C²: ratio C/2 (MHA). C = 1 moves nothing; ratio 1.
    """
    ring = ring_communication(seq, hidden, cp, micro_batch=micro_batch,
                              bytes_per_element=bytes_per_element, heads=heads, kv_heads=kv_heads)
    ulysses = ulysses_communication(seq, hidden, heads, cp, micro_batch=micro_batch,
                                    bytes_per_element=bytes_per_element, kv_heads=kv_heads)
    if ulysses.forward_bytes_per_rank == 0:
        ratio = 1.0
    else:
        ratio = ring.forward_bytes_per_rank / ulysses.forward_bytes_per_rank
    return ContextParallelComparison(ring, ulysses, ratio)


__all__ = [
    "LAYOUTS", "dense_attention", "rank_positions", "RingStep", "RingAttentionResult",
    "ring_attention", "CausalWork", "causal_work", "RingCommunication", "ring_communication",
    "UlyssesCommunication", "ulysses_communication", "ContextParallelComparison",
    "compare_context_parallel",
]


# ---- which scheme fits, and what its traffic costs on a link (Figure 14) -------------------

from models import collectives as _collectives  # noqa: E402  (this section's imports, kept with it)
from models import hardware as _hardware  # noqa: E402


def ulysses_fits(cp, heads, kv_heads=None):
    """Ulysses hands each rank whole heads, so C must divide the head count and, with grouped-
    query attention, the KV head count too (Jacobs et al. 2023 Sec. 3.2; unless KV heads are
    duplicated, which this model does not do). For power-of-two counts: C <= kv_heads."""
    cp = positive_int("cp", cp)
    heads = positive_int("heads", heads)
    kv_heads = heads if kv_heads is None else positive_int("kv_heads", kv_heads)
    divides("kv_heads", kv_heads, "heads", heads)
    return heads % cp == 0 and kv_heads % cp == 0


@dataclass(frozen=True)
class ContextCommTime:
    """Forward communication time of one layer's attention on C context-parallel ranks."""

    crosses_node: bool  # C > GPUs per node: the collectives reach the network
    link: str  # key of models.hardware.LINKS they are priced on (the slowest one they cross)
    ring_step_s: float  # one K/V block to the next rank: overlaps that step's block of compute
    ring_s: float  # C - 1 steps
    ulysses_s: object  # 4 All-to-Alls, exposed (attention waits for them); None if Ulysses cannot split the heads


def context_comm_time(seq, hidden, heads, cp, *, kv_heads=None, micro_batch=1, bytes_per_element=2,
                      intra_link="nvlink4", inter_link="ib_ndr", gpus_per_node=8):
    """Alpha-beta times (``collectives.time_s``, ring/pairwise) of ``ring_communication``'s
    C - 1 point-to-point K/V sends and ``ulysses_communication``'s 4 All-to-Alls (each with the
    rank's local shard as its send buffer). Both run on ``intra_link`` while C fits in a node
    and on ``inter_link`` once it does not: a ring or an All-to-All is as slow as the slowest
    link it crosses (one NIC per GPU). Topology-aware placements are not modelled."""
    cp = positive_int("cp", cp)
    gpus_per_node = positive_int("gpus_per_node", gpus_per_node)
    _hardware.link(intra_link)
    crosses = cp > gpus_per_node
    link = _hardware.link(inter_link if crosses else intra_link)
    speed = {"alpha_s": link.alpha_s, "bandwidth_bytes_per_s": link.bandwidth_bytes_per_s}
    ring = ring_communication(seq, hidden, cp, micro_batch=micro_batch, bytes_per_element=bytes_per_element,
                              heads=heads, kv_heads=kv_heads)
    step_s = _collectives.time_s("sendrecv", ring.kv_block_bytes, 2, **speed) if cp > 1 else 0.0
    ulysses_s = None
    if ulysses_fits(cp, heads, kv_heads):
        ulysses = ulysses_communication(seq, hidden, heads, cp, micro_batch=micro_batch,
                                        bytes_per_element=bytes_per_element, kv_heads=kv_heads)
        price = _collectives.cost_function("alltoall", cp, **speed)
        ulysses_s = math.fsum(price(shard) for shard in ulysses.local_shard_bytes)
    return ContextCommTime(crosses, link.key, step_s, ring.transfers * step_s, ulysses_s)


__all__ += ["ulysses_fits", "ContextCommTime", "context_comm_time"]


def ring_idle_steps(work):
    """Ring steps at which each rank has no visible (query, key) chunk pair to compute, from a
    ``causal_work`` result's schedule. Contiguous chunks: rank i idles for C - 1 - i steps (the
    K/V blocks of later ranks are all masked for it), so rank 0 for C - 1 of the C; two chunks
    per rank: none (Liu et al. 2023; Megatron-LM context parallelism)."""
    if not isinstance(work, CausalWork):
        raise ValueError(f"work must be a CausalWork from causal_work(), got {work!r}")
    return tuple(sum(1 for row in work.schedule if row[rank] == 0) for rank in range(work.ranks))


__all__ += ["ring_idle_steps"]


# ---- what the ring hides behind (Figure 14's compute line) ---------------------------------

# FlashAttention-3 (Shah et al. 2024, abstract): "up to 740 TFLOPs/s (75% utilization)" in BF16
# forward on an H100, the best attention kernels reach; the ring hides its sends behind that.
ATTENTION_KERNEL_FRACTION = 0.75


def causal_attention_forward_flops(seq, hidden, *, micro_batch=1):
    """FLOPs of one layer's causal attention forward: QKᵀ 2Bs²h plus attention over V 2Bs²h
    (Narayanan et al. 2021, Appendix), halved because the causal mask hides half of the
    (query, key) pairs and kernels skip the masked blocks (FlashAttention-2, Dao 2023 Sec. 3.1.1)."""
    seq = positive_int("seq", seq)
    hidden = positive_int("hidden", hidden)
    micro_batch = positive_int("micro_batch", micro_batch)
    return 2.0 * micro_batch * seq * seq * hidden


def attention_compute_s(seq, hidden, cp, *, gpu="h100_sxm", fraction=ATTENTION_KERNEL_FRACTION, micro_batch=1):
    """Seconds one rank spends on its share of a layer's causal attention forward when C ranks
    split the work evenly (the mirrored two-chunk layout; Liu et al. 2023): the FLOPs over C,
    at ``fraction`` of the GPU's dense BF16 peak. Ring attention hides its C - 1 K/V sends when
    they take no longer than this (each send overlaps one block's compute)."""
    cp = positive_int("cp", cp)
    finite("fraction", fraction)
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    rate = _hardware.gpu(gpu).peak_bf16_dense_flops_per_s * fraction
    return causal_attention_forward_flops(seq, hidden, micro_batch=micro_batch) / cp / rate


__all__ += ["ATTENTION_KERNEL_FRACTION", "causal_attention_forward_flops", "attention_compute_s"]
