"""The device mesh: how a flat list of ranks folds into parallelism axes.

What it models
--------------
A rank is a mixed-radix number whose digits are its coordinates on the axes
``tp``, ``cp``, ``dp`` and ``pp``. ``order`` lists the axes from FASTEST-varying
(adjacent ranks, same node) to slowest, exactly as Megatron-Core's
``RankGenerator`` does with its ``order="tp-cp-ep-dp-pp"`` string
(megatron/core/parallel_state.py). With the default order this is the article's
formula: tp = r % TP, cp = (r / TP) % CP, dp = (r / (TP*CP)) % DP,
pp = r / (TP*CP*DP) ("Combining parallelisms"). Each axis owns one process group
per combination of the other coordinates; a group "crosses a node" when its ranks
do not all sit in the same block of ``gpus_per_node`` consecutive ranks.

Expert parallelism (our choice: Megatron-Core's)
------------------------------------------------
EP is NOT a fifth factor of the world size: world_size = dp * tp * pp * cp.
Experts are sharded over a sub-group of the dp x cp ranks, so ``ep`` must divide
``dp * cp``. Megatron-Core builds a second rank generator for expert layers with
tp=expert_tp (default tp), ep, dp=world/(tp*ep*pp), cp=1 over the same order,
which amounts to re-factoring each tp-slice of the dp x cp block into
ep (fast) x expert-dp (slow). Here: let j be a rank's index inside its
dp x cp block (the one of cp, dp that comes first in ``order`` varies fastest);
its EP coordinate is j % ep and its expert-data-parallel ("edp") coordinate is
j // ep. Axis names accepted by ``group``: tp, cp, dp, pp, ep, edp.

What it does not model: the separate expert-tensor-parallel degree (we take
expert tp = tp), encoder/decoder split meshes, hierarchical (intra/inter-node)
sub-groups, or physical links -- ``node(rank)`` assumes ranks are packed onto
nodes in order, ``gpus_per_node`` at a time.
"""
import math
from dataclasses import KW_ONLY, dataclass
from functools import cached_property

from models._validate import divides, non_negative_int, positive_int

__all__ = ["AXES", "GROUP_AXES", "Mesh", "MAX_ENUMERATED_RANKS"]

AXES = ("tp", "cp", "dp", "pp")  # the factors of the world size
GROUP_AXES = AXES + ("ep", "edp")  # ep / edp live inside the dp x cp block (Megatron-Core)
DEFAULT_ORDER = ("tp", "cp", "dp", "pp")  # article + Megatron-Core default, minus its virtual ep

# groups()/crosses_node() enumerate every rank; beyond this a browser tab would freeze.
MAX_ENUMERATED_RANKS = 2**21


def _normalise_order(order):
    if isinstance(order, str):
        order = tuple(part for part in order.replace(",", "-").split("-") if part)
    if not isinstance(order, (tuple, list)):
        raise ValueError(f"order must be a tuple of axis names, got {order!r}")
    order = tuple(order)
    for axis in order:
        if axis == "ep":
            raise ValueError(
                "order must not contain 'ep': expert parallelism is carved out of the dp x cp "
                "block (Megatron-Core), so it has no place of its own in the rank order"
            )
        if axis not in AXES:
            raise ValueError(f"order contains unknown axis {axis!r}; axes are {', '.join(AXES)}")
    duplicates = sorted({axis for axis in order if order.count(axis) > 1})
    if duplicates:
        raise ValueError(f"order lists {', '.join(duplicates)} more than once: {order!r}")
    return order


@dataclass(frozen=True)
class Mesh:
    """Degrees of each axis, the rank order (fastest first) and the node size."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    _: KW_ONLY
    order: tuple = DEFAULT_ORDER
    gpus_per_node: int = 8

    def __post_init__(self):
        for name in ("dp", "tp", "pp", "cp", "ep", "gpus_per_node"):
            # frozen: normalise 2.0 -> 2 through object.__setattr__
            object.__setattr__(self, name, positive_int(name, getattr(self, name)))
        order = _normalise_order(self.order)
        missing = [axis for axis in AXES if getattr(self, axis) > 1 and axis not in order]
        if missing:
            raise ValueError(
                f"order {order!r} must list every axis with degree > 1; missing "
                + ", ".join(f"{axis}={getattr(self, axis)}" for axis in missing)
            )
        object.__setattr__(self, "order", order)
        divides("ep", self.ep, "dp*cp", self.dp * self.cp)

    # ---- layout -----------------------------------------------------------------
    @cached_property
    def full_order(self):
        """``order`` completed with the omitted degree-1 axes (they never change a rank)."""
        return self.order + tuple(axis for axis in AXES if axis not in self.order)

    @cached_property
    def strides(self):
        """Rank distance between neighbours along each axis: product of the faster degrees."""
        stride, result = 1, {}
        for axis in self.full_order:
            result[axis] = stride
            stride *= getattr(self, axis)
        return result

    @property
    def world_size(self):
        """dp * tp * pp * cp (ep does not multiply: it is carved out of dp x cp)."""
        return self.dp * self.tp * self.pp * self.cp

    def degree(self, axis):
        """Size of every group of ``axis`` (edp = dp*cp/ep)."""
        self._check_axis(axis)
        if axis == "edp":
            return self.dp * self.cp // self.ep
        return getattr(self, axis)

    def _check_axis(self, axis):
        if axis not in GROUP_AXES:
            raise ValueError(f"axis must be one of {', '.join(GROUP_AXES)}, got {axis!r}")

    def _check_rank(self, rank):
        rank = non_negative_int("rank", rank)
        if rank >= self.world_size:
            raise ValueError(f"rank must be < world_size={self.world_size}, got {rank}")
        return rank

    # ---- coordinates --------------------------------------------------------------
    def coords(self, rank):
        """{'tp','cp','dp','pp'} -> index of ``rank`` on that axis (mixed-radix digits)."""
        rank = self._check_rank(rank)
        strides = self.strides
        return {axis: (rank // strides[axis]) % getattr(self, axis) for axis in AXES}

    def rank(self, **coords):
        """Inverse of ``coords``; omitted axes default to index 0."""
        for axis in coords:
            if axis not in AXES:
                raise ValueError(
                    f"rank() takes coordinates {', '.join(AXES)}; got {axis!r}"
                    + (" (ep is derived: see expert_coords)" if axis in ("ep", "edp") else "")
                )
        total = 0
        for axis in AXES:
            index = coords.get(axis, 0)
            if isinstance(index, bool) or not isinstance(index, int):
                raise ValueError(f"{axis} must be a whole number, got {index!r}")
            if not 0 <= index < getattr(self, axis):
                raise ValueError(f"{axis} must be in [0, {getattr(self, axis)}), got {index}")
            total += index * self.strides[axis]
        return total

    def _block_axes(self):
        """(fast, slow) of cp and dp: their order inside the dp x cp block."""
        return ("cp", "dp") if self.full_order.index("cp") < self.full_order.index("dp") else ("dp", "cp")

    def expert_coords(self, rank):
        """{'ep': expert-parallel index, 'edp': expert-data-parallel index} (Megatron-Core layout)."""
        c = self.coords(rank)
        fast, slow = self._block_axes()
        j = c[fast] + getattr(self, fast) * c[slow]
        return {"ep": j % self.ep, "edp": j // self.ep}

    def _rank_from_block(self, c, j):
        fast, slow = self._block_axes()
        size = getattr(self, fast)
        return self.rank(**{**c, fast: j % size, slow: j // size})

    # ---- groups ----------------------------------------------------------------------
    def group(self, axis, rank):
        """Sorted ranks that share every coordinate of ``rank`` except ``axis``."""
        self._check_axis(axis)
        rank = self._check_rank(rank)
        if axis in AXES:
            stride = self.strides[axis]
            base = rank - self.coords(rank)[axis] * stride
            return [base + i * stride for i in range(getattr(self, axis))]
        c = self.coords(rank)
        e = self.expert_coords(rank)
        if axis == "ep":
            js = [e["edp"] * self.ep + i for i in range(self.ep)]
        else:
            js = [i * self.ep + e["ep"] for i in range(self.degree("edp"))]
        return sorted(self._rank_from_block(c, j) for j in js)

    def groups(self, axis):
        """Every group of ``axis``, ordered by first rank; together they partition the world."""
        self._check_axis(axis)
        self._check_enumerable("groups")
        seen = bytearray(self.world_size)
        result = []
        for rank in range(self.world_size):
            if not seen[rank]:
                members = self.group(axis, rank)
                for member in members:
                    seen[member] = 1
                result.append(members)
        return result

    def _check_enumerable(self, what):
        if self.world_size > MAX_ENUMERATED_RANKS:
            raise ValueError(
                f"world_size={self.world_size} is too large for {what}() "
                f"(enumerates every rank; limit {MAX_ENUMERATED_RANKS})"
            )

    # ---- nodes ---------------------------------------------------------------------------
    def node(self, rank):
        """Node index, assuming ranks fill nodes in order, gpus_per_node at a time."""
        return self._check_rank(rank) // self.gpus_per_node

    @property
    def nodes(self):
        return -(-self.world_size // self.gpus_per_node)

    def nodes_spanned(self, axis):
        """Largest number of distinct nodes any single group of ``axis`` touches."""
        self._check_axis(axis)
        self._check_enumerable("nodes_spanned")
        g = self.gpus_per_node
        return max(len({member // g for member in members}) for members in self.groups(axis))

    def crosses_node(self, axis):
        """True if some group of ``axis`` spans more than one node (its collectives leave NVLink)."""
        self._check_axis(axis)
        self._check_enumerable("crosses_node")
        g = self.gpus_per_node
        return any(members[0] // g != members[-1] // g for members in self.groups(axis))


# ---- the same answers without enumerating the world (for figures: a world of 4,096 ranks in ~1 ms) ----

__all__ += ["group_ranks", "axis_crosses_node", "group_nodes", "nodes_of"]


def _block_positions(mesh):
    """(fast, slow, F, position): ``position(j)`` is the rank offset of index j of the dp x cp block
    (j = c_fast + F * c_slow, as ``Mesh.expert_coords`` numbers it)."""
    fast, slow = mesh._block_axes()
    size, stride_fast, stride_slow = getattr(mesh, fast), mesh.strides[fast], mesh.strides[slow]
    return fast, slow, size, lambda j: (j % size) * stride_fast + (j // size) * stride_slow


def group_ranks(mesh, axis, rank):
    """Equal to ``mesh.group(axis, rank)``, from strides alone: O(group size) integer arithmetic."""
    mesh._check_axis(axis)
    rank = mesh._check_rank(rank)
    if axis in AXES:
        stride, size = mesh.strides[axis], getattr(mesh, axis)
        base = rank - (rank // stride) % size * stride
        return list(range(base, base + stride * size, stride))
    fast, slow, size, position = _block_positions(mesh)
    stride_fast, stride_slow = mesh.strides[fast], mesh.strides[slow]
    j = (rank // stride_fast) % size + size * ((rank // stride_slow) % getattr(mesh, slow))
    rest = rank - position(j)
    if axis == "ep":
        indices = range(j - j % mesh.ep, j - j % mesh.ep + mesh.ep)
    else:
        indices = range(j % mesh.ep, mesh.dp * mesh.cp, mesh.ep)
    first, step = position(indices[0]), position(indices[1]) - position(indices[0]) if len(indices) > 1 else 1
    if _evenly_spaced(indices, size, stride_fast, stride_slow):  # the usual case: one range, no loop
        return list(range(rest + first, rest + first + step * len(indices), step))
    # position(i), written out: a comprehension, not a call per member (a 4,096-rank group in ~0.3 ms)
    return sorted([rest + (i % size) * stride_fast + (i // size) * stride_slow for i in indices])


def _evenly_spaced(indices, size, stride_fast, stride_slow):
    """Whether block indices ``indices`` (a range) sit at evenly spaced ranks: all on one value of
    the slow axis, or stepping whole rows of the fast axis, or spanning rows that lie end to end."""
    first, last, step = indices[0], indices[-1], indices.step
    if first // size == last // size:  # one row of the fast axis: spacing step * stride_fast
        return True
    if step % size == 0 and first % size == last % size:  # same fast coordinate, whole rows apart
        return True
    return step == 1 and first % size == 0 and stride_slow == size * stride_fast  # contiguous rows


def group_nodes(mesh, axis, rank):
    """The nodes (ascending) that hold ``rank``'s group of ``axis``."""
    return nodes_of(group_ranks(mesh, axis, rank), mesh.gpus_per_node)


def nodes_of(ranks, gpus_per_node):
    """The nodes (ascending) that hold ``ranks`` (ascending), nodes filled in rank order: for evenly
    spaced ranks at most a node apart, every node from the first's to the last's, without a loop."""
    g = positive_int("gpus_per_node", gpus_per_node)
    if len(ranks) > 2:
        step = ranks[1] - ranks[0]
        if 0 < step <= g and ranks == list(range(ranks[0], ranks[-1] + 1, step)):
            return list(range(ranks[0] // g, ranks[-1] // g + 1))
    return sorted({r // g for r in ranks})


def axis_crosses_node(mesh, axis):
    """Equal to ``mesh.crosses_node(axis)``: some group of ``axis`` has its lowest and highest rank on
    different nodes (ranks fill nodes in order, so a group touches one node iff those two do). Each
    group is visited once, by its lowest and highest rank; no group is listed."""
    mesh._check_axis(axis)
    g, world = mesh.gpus_per_node, mesh.world_size
    if mesh.degree(axis) == 1:
        return False
    if axis in AXES:
        # groups start at base = high + low (high a multiple of stride * size, low < stride); whether
        # one crosses depends only on base mod g, which repeats after g // gcd(period, g) highs and
        # g lows: those are all the starts to look at
        stride, size = mesh.strides[axis], getattr(mesh, axis)
        span, period = stride * (size - 1), stride * size
        highs = min(world // period, g // math.gcd(period, g))
        return any(base // g != (base + span) // g
                   for high in range(0, highs * period, period) for base in range(high, high + min(stride, g)))
    fast, slow, size, position = _block_positions(mesh)
    block = mesh.dp * mesh.cp
    # position() grows with j (the slow axis's stride is at least F times the fast one's), so each
    # set's lowest and highest rank are those of its first and last block index
    if axis == "ep":
        extents = [(position(first), position(first + mesh.ep - 1)) for first in range(0, block, mesh.ep)]
    else:
        extents = [(position(e), position(e + block - mesh.ep)) for e in range(mesh.ep)]
    # the ranks with dp and cp coordinates 0: one per combination of tp and pp coordinates
    rests = [t * mesh.strides["tp"] + p * mesh.strides["pp"] for t in range(mesh.tp) for p in range(mesh.pp)]
    return any((rest + low) // g != (rest + high) // g for rest in rests for low, high in extents)
