"""Collective communication: alpha-beta cost, bus bandwidth, and a chunk-level simulation.

What it models
--------------
* ``time_s``: the alpha-beta time of one collective, T = steps * alpha + bytes_on_busiest_link / beta
  (Hockney's model as used by Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective
  Communication Operations in MPICH", IJHPCA 19(1), and by NCCL).
* ``bus_factor``: the correction NCCL-tests applies to turn algorithm bandwidth into bus bandwidth
  (NVIDIA/nccl-tests, doc/PERFORMANCE.md).
* ``volume_bytes_per_rank``: bytes the busiest rank moves in one direction with the ring/direct
  algorithms, so AllReduce = ReduceScatter + AllGather can be checked on volume as well as time.
* ``cost_function``: the same formula with everything but the size fixed, for loops.
* ``simulate``: the step-by-step movement of chunks that Figure 03 animates, with the per-rank
  buffer after every step; its end state is the mathematical definition of the collective
  (``expected_final_state``).
Algorithms: "ring" (ring / pipelined chain / direct / pairwise, NCCL's defaults for large
messages) and "tree" (NCCL double binary tree for AllReduce; MPICH's binomial, recursive
doubling/halving and Bruck algorithms for the rest). See ``time_s`` for the formulas.

Size convention (everywhere in this module)
-------------------------------------------
``nbytes`` is the size of the FULL buffer a collective is named after:
AllReduce / Broadcast / Reduce / SendRecv: the buffer every rank holds (or the root sends);
AllGather / Gather: the gathered OUTPUT (N shards); ReduceScatter / Scatter: the full INPUT
(N shards); All-to-All: each rank's full SEND buffer (N chunks, one per destination).
This is the nccl-tests convention (S = full buffer, doc/PERFORMANCE.md).
``bandwidth_bytes_per_s`` is the per-rank link bandwidth in ONE direction (a rank can send and
receive at this rate simultaneously).

What it does not model
----------------------
Topology (hierarchical rings, NVLS/SHARP in-network reduction, rail-optimised fabrics),
protocol choice (LL/LL128/Simple), congestion, reduction arithmetic cost (Thakur's gamma),
and NCCL's per-channel pipelining; alpha is one number per message step.
"""
import math
from dataclasses import dataclass

from models._validate import choice, non_negative, positive, positive_int, at_most, finite

OPS = (
    "allreduce",
    "allgather",
    "reducescatter",
    "alltoall",
    "broadcast",
    "reduce",
    "scatter",
    "gather",
    "sendrecv",
)
ALGORITHMS = ("ring", "tree")
REDUCING_OPS = ("allreduce", "reducescatter", "reduce")
ROOTED_OPS = ("broadcast", "reduce", "scatter", "gather", "sendrecv")


def _ceil_log2(ranks):
    # Depth of a binomial / binary tree over `ranks` nodes: ceil(lg p) steps (Thakur et al. 2005 §2).
    return (ranks - 1).bit_length()


MAX_RANKS = 10**9  # far beyond any cluster; keeps every product exactly convertible to float


def _check_op_ranks(op, ranks):
    choice("op", op, OPS)
    positive_int("ranks", ranks)
    return at_most("ranks", int(ranks), MAX_RANKS)


def _latency_steps(op, ranks, algorithm):
    """Number of sequential message steps, each paying alpha once."""
    n = ranks
    if op == "sendrecv":
        return 1
    if algorithm == "ring":
        # Ring / direct algorithms: steps as in NCCL's ring (2(n-1) for AllReduce, n-1 otherwise;
        # Broadcast/Reduce are a pipelined chain whose fill takes n-1 hops), Thakur et al. 2005 §3.
        if op == "allreduce":
            return 2 * (n - 1)
        return n - 1
    depth = _ceil_log2(n)
    if op == "allreduce":
        # NCCL double binary tree: reduce up, broadcast down, each ~lg n hops (Jeaugey 2019,
        # "Massively Scale Your Deep Learning Training with NCCL 2.4", NVIDIA blog).
        return 2 * depth
    # Binomial tree (broadcast, reduce, scatter, gather), recursive doubling (allgather),
    # recursive halving (reducescatter), Bruck (alltoall): ceil(lg p) steps (Thakur et al. 2005 §3).
    return depth


def _bandwidth_factor(op, ranks, algorithm):
    """Bytes on the busiest rank's link, per byte of the full buffer."""
    n = ranks
    if op == "sendrecv":
        return 1.0
    if algorithm == "ring":
        if op == "allreduce":
            return 2.0 * (n - 1) / n  # ReduceScatter + AllGather, each (n-1)/n (Patarasuk & Yuan 2009)
        if op in ("broadcast", "reduce"):
            return 1.0  # pipelined chain: every byte crosses each link once (nccl-tests busbw factor 1)
        # allgather, reducescatter, alltoall (pairwise exchange), scatter/gather (root sends/receives
        # n-1 of its n shards directly): (n-1)/n, Thakur et al. 2005 §3.
        return (n - 1) / n
    depth = _ceil_log2(n)
    if op == "allreduce":
        return 2.0  # double binary tree: each rank sends ~n bytes up and ~n bytes down (Jeaugey 2019)
    if op in ("broadcast", "reduce"):
        return float(depth)  # binomial tree, unpipelined: ceil(lg p) * (alpha + n beta), Thakur §3.2
    if op == "alltoall":
        return depth / 2.0  # Bruck: lg p * alpha + (n/2) lg p * beta, Thakur et al. 2005 §3.6
    # recursive doubling allgather, recursive halving reducescatter, binomial scatter/gather:
    # lg p * alpha + (p-1)/p * n * beta (Thakur et al. 2005 §3.1, §3.3).
    return (n - 1) / n


def time_s(op, nbytes, ranks, *, alpha_s, bandwidth_bytes_per_s, algorithm="ring"):
    """Alpha-beta time (seconds) of one collective over ``ranks`` ranks.

    ``nbytes`` is the FULL buffer (AllGather: gathered output; ReduceScatter: full input;
    All-to-All: each rank's full send buffer; see module docstring). ``bandwidth_bytes_per_s``
    is per-rank, one direction. ``alpha_s`` is paid once per sequential message step.

    Ring (Thakur et al. 2005; Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms"):
      allreduce                      2(N-1) alpha + 2(N-1)/N * n / beta
      allgather, reducescatter,
      alltoall, scatter, gather      (N-1) alpha + (N-1)/N * n / beta
      broadcast, reduce (pipelined)  (N-1) alpha + n / beta
    Tree:
      allreduce (NCCL double binary tree)  2 ceil(lg N) alpha + 2 n / beta
      broadcast, reduce (binomial)         ceil(lg N) (alpha + n / beta)
      allgather, reducescatter, scatter,
      gather (rec. doubling/halving, binomial)  ceil(lg N) alpha + (N-1)/N * n / beta
      alltoall (Bruck)                     ceil(lg N) alpha + ceil(lg N)/2 * n / beta
    sendrecv: alpha + n / beta (one point-to-point message, any algorithm).
    ranks=1 costs 0 s: nothing leaves the device.
    """
    return cost_function(op, ranks, alpha_s=alpha_s, bandwidth_bytes_per_s=bandwidth_bytes_per_s, algorithm=algorithm)(
        nbytes
    )


def cost_function(op, ranks, *, alpha_s, bandwidth_bytes_per_s, algorithm="ring"):
    """``time_s`` with everything but ``nbytes`` fixed and validated once: returns nbytes -> seconds.
    For loops over many buckets or layers (same formulas as ``time_s``)."""
    ranks = _check_op_ranks(op, ranks)
    non_negative("alpha_s", alpha_s)
    positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    choice("algorithm", algorithm, ALGORITHMS)
    if ranks == 1:
        latency_s, factor = 0.0, 0.0
    else:
        latency_s = _latency_steps(op, ranks, algorithm) * float(alpha_s)
        factor = _bandwidth_factor(op, ranks, algorithm)
    bandwidth = float(bandwidth_bytes_per_s)

    def seconds_for(nbytes):
        non_negative("nbytes", nbytes)
        if factor == 0.0:
            return latency_s  # one rank: nothing moves
        seconds = latency_s + factor * (float(nbytes) / bandwidth)
        if not math.isfinite(seconds):
            raise ValueError(f"nbytes={nbytes!r} over bandwidth_bytes_per_s={bandwidth_bytes_per_s!r} overflows a float")
        return seconds

    return seconds_for


def bus_factor(op, ranks):
    """NCCL-tests bus-bandwidth factor: busbw = algbw * factor (nccl-tests doc/PERFORMANCE.md).

    allreduce 2(n-1)/n; allgather, reducescatter, alltoall (n-1)/n; broadcast, reduce 1;
    sendrecv 1; scatter, gather (n-1)/n (nccl-tests scatter.cu / gather.cu).
    With these, ring ``time_s`` = steps*alpha + nbytes * bus_factor / bandwidth.
    """
    n = _check_op_ranks(op, ranks)
    if op == "allreduce":
        return 2.0 * (n - 1) / n
    if op in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    return (n - 1) / n


def volume_bytes_per_rank(op, nbytes, ranks):
    """Bytes the busiest rank moves in one direction (the larger of sent and received),
    ring/direct algorithms, ``nbytes`` = full buffer (module docstring).

    allreduce 2(N-1)/N n = reducescatter (N-1)/N n + allgather (N-1)/N n (Patarasuk & Yuan 2009);
    alltoall (N-1)/N n; broadcast/reduce n (chain: each interior rank forwards the whole buffer);
    scatter/gather (N-1)/N n (the root's link); sendrecv n. ranks=1 moves 0 bytes.
    """
    ranks = _check_op_ranks(op, ranks)
    non_negative("nbytes", nbytes)
    if ranks == 1:
        return 0.0
    return _bandwidth_factor(op, ranks, "ring") * float(nbytes)


# ---------------------------------------------------------------------------------------------
# Step-by-step simulation (Figure 03)
# ---------------------------------------------------------------------------------------------

MAX_SIMULATED_RANKS = 32  # state is ranks x chunks per step; keeps a slider move well under 1 ms
MAX_SIMULATED_CHUNKS = 64


@dataclass(frozen=True)
class Transfer:
    """One chunk crossing one link in one step."""

    src: int
    dst: int
    chunk: int  # index of the chunk in the sender's buffer
    slot: int  # where it lands in the receiver's buffer (equals chunk except for All-to-All)
    value: object  # the number carried (int or float)
    reduced: bool  # True: receiver adds it into its slot and the sender's partial is consumed


@dataclass(frozen=True)
class Step:
    """Transfers that happen simultaneously, and every rank's buffer after them.

    ``state[rank][slot]`` is a number, or None when the rank does not hold that chunk;
    ``sources[rank][slot]`` lists the ranks whose inputs that number contains (empty if None).
    """

    transfers: tuple
    state: tuple
    sources: tuple


@dataclass(frozen=True)
class Simulation:
    op: str
    ranks: int
    root: int
    algorithm: str  # "ring", "chain" (pipelined), "direct" (root-serial) or "pairwise" (swaps)
    initial_state: tuple
    initial_sources: tuple
    steps: tuple

    @property
    def final_state(self):
        return self.steps[-1].state if self.steps else self.initial_state


_SIM_ALGORITHM = {
    "allreduce": "ring",
    "reducescatter": "ring",
    "allgather": "ring",
    "broadcast": "chain",
    "reduce": "chain",
    "scatter": "direct",
    "gather": "direct",
    "alltoall": "pairwise",
    "sendrecv": "direct",
}


def _chunks_per_rank(op, ranks, values):
    if op in ("allgather", "gather"):
        return 1
    if op in ("allreduce", "reducescatter", "alltoall", "scatter"):
        return ranks
    return len(values[0])  # broadcast, reduce, sendrecv: any number of chunks >= 1


def _check_values(op, values):
    if not isinstance(values, (list, tuple)) or not values:
        raise ValueError(f"values must be a non-empty list of per-rank lists, got {values!r}")
    ranks = len(values)
    at_most("ranks", ranks, MAX_SIMULATED_RANKS)
    for r, row in enumerate(values):
        if not isinstance(row, (list, tuple)):
            raise ValueError(f"values[{r}] must be a list of chunk values, got {row!r}")
    need = _chunks_per_rank(op, ranks, values)
    if need < 1:
        raise ValueError("values[0] must hold at least one chunk")
    if need > MAX_SIMULATED_CHUNKS:
        raise ValueError(f"values[0] must hold at most {MAX_SIMULATED_CHUNKS} chunks, got {need}")
    for r, row in enumerate(values):
        if len(row) != need:
            raise ValueError(f"values[{r}] must hold {need} chunks for {op} over {ranks} ranks, got {len(row)}")
        for c, v in enumerate(row):
            finite(f"values[{r}][{c}]", v)
    return ranks, need


def _initial(op, values, ranks, root):
    """Buffers before the first step; receive-only buffers start empty (None)."""
    width = ranks if op in ("allgather", "gather") else len(values[0])
    state = [[None] * width for _ in range(ranks)]
    sources = [[()] * width for _ in range(ranks)]
    for r in range(ranks):
        if op in ("allgather", "gather"):
            state[r][r] = values[r][0]
            sources[r][r] = (r,)
        elif op in ("broadcast", "scatter") and r != root:
            continue  # a receive buffer: its old contents are overwritten, so not drawn
        else:
            for c in range(width):
                state[r][c] = values[r][c]
                sources[r][c] = (r,)
    return state, sources


def _ring_reducescatter(ranks):
    # Step s: rank r sends its partial of chunk (r-s-1) to r+1, which adds its own; after N-1 steps
    # rank r holds the full sum of chunk r (Patarasuk & Yuan 2009, ring reduce-scatter phase).
    for s in range(ranks - 1):
        yield [(r, (r + 1) % ranks, (r - s - 1) % ranks, (r - s - 1) % ranks, True) for r in range(ranks)]


def _ring_allgather(ranks):
    # Step s: rank r forwards chunk (r-s) to r+1 (Patarasuk & Yuan 2009, ring allgather phase).
    for s in range(ranks - 1):
        yield [(r, (r + 1) % ranks, (r - s) % ranks, (r - s) % ranks, False) for r in range(ranks)]


def _chain_broadcast(ranks, chunks, root):
    # Pipelined chain root -> root+1 -> ...: position p forwards chunk t-p at step t (NCCL ring broadcast).
    for t in range(ranks - 1 + chunks - 1):
        moves = []
        for p in range(ranks - 1):
            c = t - p
            if 0 <= c < chunks:
                moves.append(((root + p) % ranks, (root + p + 1) % ranks, c, c, False))
        yield moves


def _chain_reduce(ranks, chunks, root):
    # Mirror of the broadcast chain: partial sums flow from the far end towards the root.
    for t in range(ranks - 1 + chunks - 1):
        moves = []
        for p in range(ranks - 1, 0, -1):
            c = t - (ranks - 1 - p)
            if 0 <= c < chunks:
                moves.append(((root + p) % ranks, (root + p - 1) % ranks, c, c, True))
        yield moves


def _direct_scatter(ranks, root):
    # The root's one link sends one shard per step (NCCL implements scatter as point-to-point sends).
    for s in range(1, ranks):
        dst = (root + s) % ranks
        yield [(root, dst, dst, dst, False)]


def _direct_gather(ranks, root):
    for s in range(1, ranks):
        src = (root + s) % ranks
        yield [(src, root, src, src, False)]


def _pairwise_alltoall(ranks):
    # Round-robin tournament (circle method): every pair swaps chunks exactly once, each rank
    # talking to one partner per round: N-1 rounds for even N, N for odd N (one rank idles).
    # Rank i's chunk j lands in rank j's slot i, in place, because the swap is simultaneous.
    players = ranks if ranks % 2 == 0 else ranks + 1  # a phantom player for odd N
    for rnd in range(players - 1):
        pairs = [(players - 1, rnd)]
        for k in range(1, players // 2):
            pairs.append(((rnd + k) % (players - 1), (rnd - k) % (players - 1)))
        moves = []
        for a, b in pairs:
            if a < ranks and b < ranks:
                moves.append((a, b, b, a, False))
                moves.append((b, a, a, b, False))
        yield moves


def _sendrecv(chunks, root, peer):
    yield [(root, peer, c, c, False) for c in range(chunks)]


def _schedule(op, ranks, chunks, root, peer):
    if ranks == 1:
        return iter(())
    if op == "allreduce":
        return (m for phase in (_ring_reducescatter(ranks), _ring_allgather(ranks)) for m in phase)
    if op == "reducescatter":
        return _ring_reducescatter(ranks)
    if op == "allgather":
        return _ring_allgather(ranks)
    if op == "broadcast":
        return _chain_broadcast(ranks, chunks, root)
    if op == "reduce":
        return _chain_reduce(ranks, chunks, root)
    if op == "scatter":
        return _direct_scatter(ranks, root)
    if op == "gather":
        return _direct_gather(ranks, root)
    if op == "alltoall":
        return _pairwise_alltoall(ranks)
    return _sendrecv(chunks, root, peer)


def _freeze(grid):
    return tuple(tuple(row) for row in grid)


def simulate(op, values, *, root=0, peer=None, algorithm="ring"):
    """Chunk-level simulation of one collective; returns a ``Simulation``.

    ``values[r]`` is rank r's input, a list of numbers:
      allreduce, reducescatter, alltoall, scatter: N chunks (scatter: only the root's are sent);
      allgather, gather: 1 chunk (the rank's shard);
      broadcast, reduce, sendrecv: k >= 1 chunks, the same k on every rank
      (broadcast: only the root's are sent).
    Algorithms: ring ReduceScatter/AllGather/AllReduce (N-1, N-1, 2(N-1) steps); pipelined chain
    Broadcast/Reduce (N+k-2 steps); direct Scatter/Gather through the root's link (N-1 steps);
    pairwise-swap All-to-All (N-1 rounds for even N, N for odd N); SendRecv root -> peer
    (peer defaults to root+1), one step.
    End state = the definition: AllReduce every slot = sum over ranks; ReduceScatter rank r slot r
    = sum of chunk r, other slots consumed (None); Reduce root slot c = sum; All-to-All rank j
    slot i = rank i's chunk j; (All)Gather slot r = rank r's shard; Broadcast/Scatter copies of the
    root's chunks. Reductions add in ring/chain order, so floats may differ from another summation
    order in the last bits.
    ``algorithm="tree"`` runs the log-step algorithms of ``time_s`` instead (see ``_tree_schedule``).
    """
    choice("op", op, OPS)
    ranks, chunks = _check_values(op, values)
    root = _check_rank("root", root, ranks)
    schedule = _tree_schedule(op, ranks, chunks, root, algorithm)
    if op == "sendrecv" and ranks > 1:
        peer = (root + 1) % ranks if peer is None else _check_rank("peer", peer, ranks)
        if peer == root:
            raise ValueError(f"peer must differ from root={root}, got {peer}")
    state, sources = _initial(op, values, ranks, root)
    initial_state, initial_sources = _freeze(state), _freeze(sources)
    steps = []
    for moves in _schedule(op, ranks, chunks, root, peer) if schedule is None else schedule:
        # All sends of a step read the buffers as they were before the step (simultaneous).
        transfers = tuple(
            Transfer(src, dst, c, slot, state[src][c], reduced) for src, dst, c, slot, reduced in moves
        )
        carried_sources = [sources[t.src][t.chunk] for t in transfers]
        for t, srcs in zip(transfers, carried_sources):
            if t.reduced:
                state[t.src][t.chunk] = None
                sources[t.src][t.chunk] = ()
        for t, srcs in zip(transfers, carried_sources):
            if t.reduced:
                total = state[t.dst][t.slot] + t.value
                if isinstance(total, float) and not math.isfinite(total):
                    raise ValueError(f"values: the sum of chunk {t.slot} overflows a float")
                state[t.dst][t.slot] = total
                sources[t.dst][t.slot] = tuple(sorted(set(sources[t.dst][t.slot]) | set(srcs)))
            else:
                state[t.dst][t.slot] = t.value
                sources[t.dst][t.slot] = srcs
        steps.append(Step(transfers, _freeze(state), _freeze(sources)))
    return Simulation(op, ranks, root, _SIM_ALGORITHM[op] if schedule is None else _TREE_SIM_ALGORITHM[op],
                      initial_state, initial_sources, tuple(steps))


def _check_rank(name, value, ranks):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be a whole number, got {value!r}")
    if not 0 <= value < ranks:
        raise ValueError(f"{name} must be in [0, {ranks - 1}], got {value}")
    return value


def expected_final_state(op, values, *, root=0, peer=None):
    """The mathematical definition of each collective, in the same layout as ``simulate``'s state."""
    choice("op", op, OPS)
    ranks, chunks = _check_values(op, values)
    root = _check_rank("root", root, ranks)
    if op == "sendrecv" and ranks > 1:
        peer = (root + 1) % ranks if peer is None else _check_rank("peer", peer, ranks)
        if peer == root:
            raise ValueError(f"peer must differ from root={root}, got {peer}")
    state, _ = _initial(op, values, ranks, root)
    if ranks == 1:
        return _freeze(state)
    width = len(state[0])
    column_sum = None
    if op in REDUCING_OPS:
        column_sum = [sum(values[r][c] for r in range(ranks)) for c in range(width)]
        if any(isinstance(x, float) and not math.isfinite(x) for x in column_sum):
            raise ValueError("values: a chunk's sum overflows a float")
    if op == "allreduce":
        state = [list(column_sum) for _ in range(ranks)]
    elif op == "reducescatter":
        state = [[column_sum[c] if c == r else None for c in range(width)] for r in range(ranks)]
    elif op == "reduce":
        state = [list(column_sum) if r == root else [None] * width for r in range(ranks)]
    elif op == "allgather":
        state = [[values[c][0] for c in range(ranks)] for _ in range(ranks)]
    elif op == "gather":
        state[root] = [values[c][0] for c in range(ranks)]
    elif op == "broadcast":
        state = [list(values[root]) for _ in range(ranks)]
    elif op == "scatter":
        for r in range(ranks):
            if r != root:
                state[r][r] = values[root][r]
    elif op == "alltoall":
        state = [[values[i][j] for i in range(ranks)] for j in range(ranks)]
    else:  # sendrecv
        state[peer] = list(values[root])
    return _freeze(state)


# ---------------------------------------------------------------------------------------------
# Log-step ("tree") algorithms for the simulation, and the alpha-beta time split in two
# ---------------------------------------------------------------------------------------------

TREE_SIMULATED_OPS = ("allreduce", "reducescatter", "allgather", "broadcast", "reduce")
_TREE_SIM_ALGORITHM = {
    "allreduce": "binomial",  # binomial reduce to the root, then binomial broadcast
    "reducescatter": "recursive_halving",
    "allgather": "recursive_doubling",
    "broadcast": "binomial",
    "reduce": "binomial",
}


def _binomial_broadcast(ranks, chunks, root):
    # Step k: every rank within 2^k of the root (relative rank < 2^k) sends the whole buffer
    # 2^k further on; ceil(lg p) steps (MPICH binomial broadcast, Thakur et al. 2005 Sec. 3.2).
    for k in range(_ceil_log2(ranks)):
        d = 1 << k
        yield [((root + rel) % ranks, (root + rel + d) % ranks, c, c, False)
               for rel in range(min(d, ranks - d)) for c in range(chunks)]


def _binomial_reduce(ranks, chunks, root):
    # Mirror image: at step k the ranks at relative position d (mod 2d), d = 2^k, add their
    # partial sums into the rank d below them (MPICH binomial reduce, Thakur et al. 2005 Sec. 4).
    for k in range(_ceil_log2(ranks)):
        d = 1 << k
        yield [((root + rel) % ranks, (root + rel - d) % ranks, c, c, True)
               for rel in range(d, ranks, 2 * d) for c in range(chunks)]


def _recursive_halving(ranks):
    # Partners at distance d = p/2, p/4, ..., 1 swap halves of the chunks they still share and
    # add what they receive; rank r keeps the half holding chunk r (Thakur et al. 2005 Sec. 3.3).
    d = ranks // 2
    while d:
        yield [(r, r ^ d, c, c, True) for r in range(ranks)
               for c in range(ranks) if c // (2 * d) == r // (2 * d) and c & d == (r ^ d) & d]
        d //= 2


def _recursive_doubling(ranks):
    # Partners at distance d = 1, 2, 4, ... swap every chunk they hold, doubling it each step
    # (Thakur et al. 2005 Sec. 3.1).
    d = 1
    while d < ranks:
        yield [(r, r ^ d, c, c, False) for r in range(ranks) for c in range(ranks) if c // d == r // d]
        d *= 2


def _tree_schedule(op, ranks, chunks, root, algorithm):
    """The moves of ``algorithm="tree"`` (None for "ring"): the log-step algorithms whose cost
    ``time_s`` gives for "tree". AllReduce is drawn as a binomial reduce then a binomial
    broadcast, 2 ceil(lg p) steps like NCCL's double binary tree (which splits the buffer over
    two such trees so every link carries half; Jeaugey 2019). Recursive halving and doubling
    need a power-of-two rank count; Bruck's All-to-All and the rooted scatter/gather trees
    move blocks through intermediate ranks and are not simulated."""
    choice("algorithm", algorithm, ALGORITHMS)
    if algorithm == "ring":
        return None
    if op not in TREE_SIMULATED_OPS:
        raise ValueError(f"algorithm='tree' is simulated for {', '.join(TREE_SIMULATED_OPS)} only, got op={op!r}")
    if op in ("reducescatter", "allgather") and ranks & (ranks - 1):
        raise ValueError(f"values must come from a power-of-two number of ranks for the tree {op}, got {ranks}")
    if op == "broadcast":
        return list(_binomial_broadcast(ranks, chunks, root))
    if op == "reduce":
        return list(_binomial_reduce(ranks, chunks, root))
    if op == "allreduce":
        return list(_binomial_reduce(ranks, chunks, root)) + list(_binomial_broadcast(ranks, chunks, root))
    return list(_recursive_halving(ranks) if op == "reducescatter" else _recursive_doubling(ranks))


@dataclass(frozen=True)
class CostSplit:
    """``time_s`` of one collective split into its alpha and beta terms, with what they count."""

    steps: int  # sequential message steps, each paying alpha once
    latency_s: float  # steps * alpha
    bandwidth_s: float  # link_bytes / bandwidth
    time_s: float  # latency_s + bandwidth_s, equal to time_s(...)
    link_bytes: float  # bytes through the busiest rank's link in one direction
    latency_share: float  # latency_s / time_s (0 when nothing moves)
    bus_factor: float  # nccl-tests busbw / algbw for this op and rank count
    busbw_bytes_per_s: float  # nbytes / time_s * bus_factor: what nccl-tests would report


def cost_split(op, nbytes, ranks, *, alpha_s, bandwidth_bytes_per_s, algorithm="ring"):
    """``time_s`` as latency part + bandwidth part (Hockney's alpha-beta model, Thakur et al. 2005:
    T = steps * alpha + factor * n / beta; steps and factors as in ``time_s``), plus the bus
    bandwidth nccl-tests would report for that time (doc/PERFORMANCE.md: busbw = n / t * factor)."""
    total = time_s(op, nbytes, ranks, alpha_s=alpha_s, bandwidth_bytes_per_s=bandwidth_bytes_per_s,
                   algorithm=algorithm)
    ranks = _check_op_ranks(op, ranks)
    if ranks == 1:
        steps, factor = 0, 0.0
    else:
        steps, factor = _latency_steps(op, ranks, algorithm), _bandwidth_factor(op, ranks, algorithm)
    latency = steps * float(alpha_s)
    bandwidth = factor * (float(nbytes) / float(bandwidth_bytes_per_s))  # the same operations as time_s
    bus = bus_factor(op, ranks)
    return CostSplit(steps, latency, bandwidth, latency + bandwidth, factor * float(nbytes),
                     latency / total if total > 0 else 0.0, bus,
                     float(nbytes) / total * bus if total > 0 else 0.0)
