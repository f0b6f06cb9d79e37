"""Distributed checkpoints: one tensor's shard geometry, resharding reads, write time, restart verdicts.

What it models
--------------
* A tensor of ``shape`` (dim 0 = rows, dim 1 = columns, any further dims ride along inside one
  "element" of ``dtype_bytes * prod(shape[2:])`` bytes) saved under a ``ShardLayout``: rows split
  over ``shard_degree`` ranks (FSDP / ZeRO style) and, optionally, columns over ``tp`` ranks
  (Megatron column-parallel weights). Split sizes follow ``torch.chunk`` / DTensor ``Shard``
  semantics: chunk = ceil(size / parts), the last chunks may be short or empty
  (PyTorch torch.distributed.tensor placement_types.Shard).
* File (i, j) -- row shard i, column shard j -- is written by rank i * tp + j (tp fastest, as in the
  mesh's default order) and holds its block row-major. A gathered (full) checkpoint is the layout
  with one file.
* ``reshard_reads``: for every rank of a NEW layout, the byte ranges it reads from which old files,
  and where they land in its new shard -- what PyTorch Distributed Checkpoint's load planner
  computes from the stored metadata (torch.distributed.checkpoint, "resharding on load").
* ``checkpoint_write_time``: gathered (rank 0 gathers everything over the network, then writes
  alone) vs sharded (every rank writes its slice in parallel), with a per-writer storage
  bandwidth and an aggregate file-system cap.
* ``reload_verdict``: which checkpoints survive a restart on a different mesh.

What it does not model: optimizer-state dictionaries with many tensors (use one call per tensor
and add), replicas (only one replica of each shard writes, as DCP deduplicates), asynchronous
/ staged saves, compression, metadata size, or file-system latency per request.
"""
import math
from dataclasses import dataclass

from models import collectives
from models._validate import at_most, choice, finite_result, non_negative, positive, positive_int
from models.memory import OPTIMIZERS

__all__ = [
    "ShardLayout", "Read", "WriteTime", "ReloadVerdict", "MODES",
    "shard_bounds", "block_of", "shard_bytes", "tensor_bytes", "reshard_reads", "reshard_read_count",
    "checkpoint_write_time", "reload_verdict", "restart_verdicts",
]

MODES = ("gathered", "sharded")
DEFAULT_MAX_READS = 200_000  # a figure draws a handful; a million Read objects would freeze a tab
MAX_FILES = 2**20  # more writers than any cluster has; keeps the per-rank loops bounded
MAX_TENSOR_BYTES = 10**300  # past this, bytes stop converting to float




@dataclass(frozen=True)
class ShardLayout:
    """Rows split over ``shard_degree`` ranks, columns over ``tp``; one file per (row, column) shard."""

    shard_degree: int = 1
    tp: int = 1

    def __post_init__(self):
        object.__setattr__(self, "shard_degree", positive_int("shard_degree", self.shard_degree))
        object.__setattr__(self, "tp", positive_int("tp", self.tp))
        at_most("shard_degree*tp", self.shard_degree * self.tp, MAX_FILES)

    @property
    def files(self):
        """Number of shard files = number of writing ranks."""
        return self.shard_degree * self.tp

    def file_name(self, rank):
        i, j = self.shard_index(rank)
        return f"__{rank}_{i}_{j}.distcp" if self.files > 1 else "full.pt"

    def shard_index(self, rank):
        """(row shard, column shard) written by ``rank`` (tp fastest)."""
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < self.files:
            raise ValueError(f"rank must be an integer in [0, {self.files}), got {rank!r}")
        return divmod(rank, self.tp)


@dataclass(frozen=True)
class Read:
    """Copy ``length_bytes`` from ``file`` (written by ``old_rank``) at ``offset_bytes`` into the
    new shard at ``dest_offset_bytes``."""

    old_rank: int
    file: str
    offset_bytes: int
    length_bytes: int
    dest_offset_bytes: int


def _check_shape(shape, dtype_bytes):
    if isinstance(shape, int) and not isinstance(shape, bool):
        shape = (shape,)
    if not isinstance(shape, (tuple, list)) or not shape:
        raise ValueError(f"shape must be a non-empty tuple of dimension sizes, got {shape!r}")
    shape = tuple(positive_int(f"shape[{k}]", size) for k, size in enumerate(shape))
    positive_int("dtype_bytes", dtype_bytes)
    if math.prod(shape) * dtype_bytes > MAX_TENSOR_BYTES:
        raise ValueError(f"shape={shape!r} x dtype_bytes={dtype_bytes} exceeds {MAX_TENSOR_BYTES:.0e} bytes")
    return shape


def _geometry(shape, dtype_bytes, layout):
    """(rows, cols, element_bytes) of the 2-D view the layout cuts."""
    shape = _check_shape(shape, dtype_bytes)
    if not isinstance(layout, ShardLayout):
        raise ValueError(f"layout must be a ShardLayout, got {layout!r}")
    rows = shape[0]
    cols = shape[1] if len(shape) > 1 else 1
    if len(shape) == 1 and layout.tp > 1:
        raise ValueError(f"tp={layout.tp} splits dim 1, but shape={shape!r} has only one dimension")
    element_bytes = dtype_bytes * math.prod(shape[2:])
    return rows, cols, element_bytes


def shard_bounds(size, parts, index):
    """[start, stop) of chunk ``index`` of ``size`` items cut into ``parts`` (torch.chunk semantics)."""
    size = positive_int("size", size)
    parts = positive_int("parts", parts)
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < parts:
        raise ValueError(f"index must be an integer in [0, {parts}), got {index!r}")
    chunk = -(-size // parts)
    start = min(index * chunk, size)
    return start, min(start + chunk, size)


def block_of(shape, layout, rank):
    """((row_start, row_stop), (col_start, col_stop)) held by ``rank`` of ``layout``."""
    rows, cols, _ = _geometry(shape, 1, layout)
    i, j = layout.shard_index(rank)
    return shard_bounds(rows, layout.shard_degree, i), shard_bounds(cols, layout.tp, j)


def tensor_bytes(shape, dtype_bytes):
    shape = _check_shape(shape, dtype_bytes)
    return math.prod(shape) * dtype_bytes


def shard_bytes(shape, dtype_bytes, layout, rank):
    """Bytes in ``rank``'s file (0 for an empty trailing chunk)."""
    _, _, element_bytes = _geometry(shape, dtype_bytes, layout)
    (r0, r1), (c0, c1) = block_of(shape, layout, rank)
    return (r1 - r0) * (c1 - c0) * element_bytes


def _overlapping(lo, hi, size, parts):
    """Indices of the chunks of ``size``/``parts`` that intersect [lo, hi)."""
    if hi <= lo:
        return range(0)
    chunk = -(-size // parts)
    return range(lo // chunk, min(parts - 1, (hi - 1) // chunk) + 1)


def _pairs(shape, old, new):
    """Yield (new_rank, old_rank, new_block, old_block, row_overlap, col_overlap)."""
    rows, cols, _ = _geometry(shape, 1, old)
    _geometry(shape, 1, new)
    for new_rank in range(new.files):
        (nr0, nr1), (nc0, nc1) = block_of(shape, new, new_rank)
        for i in _overlapping(nr0, nr1, rows, old.shard_degree):
            or0, or1 = shard_bounds(rows, old.shard_degree, i)
            r_lo, r_hi = max(nr0, or0), min(nr1, or1)
            if r_hi <= r_lo:
                continue
            for j in _overlapping(nc0, nc1, cols, old.tp):
                oc0, oc1 = shard_bounds(cols, old.tp, j)
                c_lo, c_hi = max(nc0, oc0), min(nc1, oc1)
                if c_hi <= c_lo:
                    continue
                yield (new_rank, i * old.tp + j, (nr0, nc0, nc1 - nc0), (or0, oc0, oc1 - oc0),
                       (r_lo, r_hi), (c_lo, c_hi))


def _contiguous_rows(old_width, new_width, width):
    # A run of rows is one byte range only if it spans the full width of BOTH blocks.
    return old_width == width and new_width == width


def reshard_read_count(shape, old_layout, new_layout):
    """Number of contiguous reads ``reshard_reads`` would return (cheap; no Read objects)."""
    count = 0
    for _, _, new_block, old_block, (r_lo, r_hi), (c_lo, c_hi) in _pairs(shape, old_layout, new_layout):
        count += 1 if _contiguous_rows(old_block[2], new_block[2], c_hi - c_lo) else r_hi - r_lo
    return count


def reshard_reads(shape, dtype_bytes, old_layout, new_layout, *, max_reads=DEFAULT_MAX_READS):
    """For each rank of ``new_layout``: the reads that assemble its shard from ``old_layout``'s files.

    Returns a tuple indexed by new rank of tuples of ``Read``. Every byte of every new shard is
    written by exactly one read (DCP load planning, torch.distributed.checkpoint). Reads of whole
    rows that are contiguous in both files are merged into one range.
    """
    positive_int("max_reads", max_reads)
    _, _, element_bytes = _geometry(shape, dtype_bytes, old_layout)
    _geometry(shape, dtype_bytes, new_layout)
    count = reshard_read_count(shape, old_layout, new_layout)
    if count > max_reads:
        raise ValueError(
            f"shape={tuple(shape)!r} resharded from {old_layout} to {new_layout} needs {count} "
            f"separate reads (max_reads={max_reads}); use reshard_read_count for the total"
        )
    plan = [[] for _ in range(new_layout.files)]
    for new_rank, old_rank, new_block, old_block, (r_lo, r_hi), (c_lo, c_hi) in _pairs(
        shape, old_layout, new_layout
    ):
        nr0, nc0, new_width = new_block
        or0, oc0, old_width = old_block
        width = c_hi - c_lo
        file = old_layout.file_name(old_rank)

        def src(row):
            return ((row - or0) * old_width + (c_lo - oc0)) * element_bytes

        def dest(row):
            return ((row - nr0) * new_width + (c_lo - nc0)) * element_bytes

        if _contiguous_rows(old_width, new_width, width):
            length = (r_hi - r_lo) * width * element_bytes
            plan[new_rank].append(Read(old_rank, file, src(r_lo), length, dest(r_lo)))
        else:
            for row in range(r_lo, r_hi):
                plan[new_rank].append(Read(old_rank, file, src(row), width * element_bytes, dest(row)))
    return tuple(tuple(sorted(reads, key=lambda r: r.dest_offset_bytes)) for reads in plan)


@dataclass(frozen=True)
class WriteTime:
    """Seconds to save one tensor. ``total_s = gather_s + write_s`` (no overlap assumed)."""

    mode: str
    writers: int
    total_bytes: int
    largest_file_bytes: int
    gather_s: float
    write_s: float
    total_s: float
    peak_writer_bytes: int  # what the busiest writer must hold in memory to write


def checkpoint_write_time(
    shape, dtype_bytes, layout, *, mode, per_writer_bytes_per_s, filesystem_bytes_per_s,
    network_bytes_per_s=None, alpha_s=0.0,
):
    """Time to save one tensor sharded under ``layout``.

    sharded:  every rank writes its own file in parallel;
              write_s = max(largest_file / per_writer_bw, total / filesystem_cap).
    gathered: rank 0 first gathers all shards over the network (``collectives.time_s('gather', ...)``:
              (N-1) alpha + (N-1)/N * total / network_bw, Thakur et al. 2005 §3), then writes alone:
              write_s = total / min(per_writer_bw, filesystem_cap).
    The article's point ("Distributed checkpointing"): the gathered write is bottlenecked on a
    single process's storage bandwidth, while sharded write bandwidth scales with the cluster until
    the file system's aggregate cap.
    """
    choice("mode", mode, MODES)
    positive("per_writer_bytes_per_s", per_writer_bytes_per_s)
    positive("filesystem_bytes_per_s", filesystem_bytes_per_s)
    non_negative("alpha_s", alpha_s)
    total = tensor_bytes(shape, dtype_bytes)
    largest = shard_bytes(shape, dtype_bytes, layout, 0)  # rank 0 holds the first, full-size chunks
    if mode == "sharded":
        write_s = max(largest / per_writer_bytes_per_s, total / filesystem_bytes_per_s)
        finite_result("write_s", write_s)
        return WriteTime(mode, layout.files, total, largest, 0.0, write_s, write_s, largest)
    if layout.files > 1:
        if network_bytes_per_s is None:
            raise ValueError("network_bytes_per_s is required for a gathered write from more than one rank")
        gather_s = collectives.time_s(
            "gather", total, layout.files, alpha_s=alpha_s, bandwidth_bytes_per_s=network_bytes_per_s
        )
    else:
        gather_s = 0.0
    write_s = total / min(per_writer_bytes_per_s, filesystem_bytes_per_s)
    finite_result("gather_s", gather_s)
    finite_result("total_s", gather_s + write_s)
    return WriteTime(mode, 1, total, total, gather_s, write_s, gather_s + write_s, total)


@dataclass(frozen=True)
class ReloadVerdict:
    loadable: bool
    needs_reshard: bool
    reason: str


def _describe(layout):
    return f"{layout.files} file(s) ({layout.shard_degree} row shards x {layout.tp} tp)"


def reload_verdict(saved, new, *, mode="sharded", has_metadata=True):
    """Can a checkpoint saved under ``saved`` be loaded by the ranks of ``new``?

    gathered: one full, self-describing tensor file; any world size loads it (each rank slices).
    sharded + metadata (DCP-style: global shape, each file's offsets and sizes): any new layout
      loads by resharding (torch.distributed.checkpoint "resharding on load").
    sharded without metadata: only the identical layout can load -- nothing says which slice a
      file holds, so the topology is frozen (article, "Distributed checkpointing").
    """
    for name, layout in (("saved", saved), ("new", new)):
        if not isinstance(layout, ShardLayout):
            raise ValueError(f"{name} must be a ShardLayout, got {layout!r}")
    choice("mode", mode, MODES)
    if not isinstance(has_metadata, bool):
        raise ValueError(f"has_metadata must be True or False, got {has_metadata!r}")
    if mode == "gathered":
        return ReloadVerdict(
            True, new.files > 1,
            f"one full tensor file: each of the {new.files} new rank(s) reads the slice it needs",
        )
    same = saved == new
    if has_metadata:
        if same:
            return ReloadVerdict(True, False, f"same layout, {_describe(new)}: each rank reads its own file")
        return ReloadVerdict(
            True, True,
            f"stored shard metadata maps {_describe(saved)} onto {_describe(new)}: "
            "the loader plans byte-range reads (resharding, not a plain load)",
        )
    if same:
        return ReloadVerdict(True, False, f"same layout, {_describe(new)}: rank k reopens file k")
    if saved.files != new.files:
        reason = (
            f"world size changed from {saved.files} to {new.files} writers and the files carry no "
            "mesh/shard metadata: nothing records which rows and columns each file holds, "
            "so the topology is permanent"
        )
    else:
        reason = (
            f"same world size ({new.files}) but a different layout: {_describe(saved)} vs "
            f"{_describe(new)}; without metadata rank k would read file k as if it held its new "
            "slice -- a shape error at best, silently wrong weights at worst"
        )
    return ReloadVerdict(False, False, reason)


def restart_verdicts(saved, new):
    """The three ways to have saved, judged for a restart on ``new`` (for the figure)."""
    return {
        "gathered": reload_verdict(saved, new, mode="gathered"),
        "sharded + metadata": reload_verdict(saved, new, mode="sharded", has_metadata=True),
        "sharded, no metadata": reload_verdict(saved, new, mode="sharded", has_metadata=False),
    }


def reshard_row_ranges(shape, old_layout, new_layout):
    """The reads of ``reshard_reads`` for row-sharded layouts (tp = 1), as global rows: for each
    rank of ``new_layout``, ``((old_rank, row_start, row_stop), ...)`` in row order. Whole rows are
    contiguous in both files, so each overlap of an old and a new shard is exactly one read (DCP
    load planning, torch.distributed.checkpoint): ``len`` of rank k's tuple is the number of reads
    ``reshard_reads`` plans for it. Validates once and loops over overlaps only, so a figure can
    redraw 64 x 64 ranks on every move."""
    for name, layout in (("old_layout", old_layout), ("new_layout", new_layout)):
        if not isinstance(layout, ShardLayout):
            raise ValueError(f"{name} must be a ShardLayout, got {layout!r}")
        if layout.tp != 1:
            raise ValueError(f"{name} must shard rows only (tp=1), got tp={layout.tp}")
    rows = _check_shape(shape, 1)[0]
    old_chunk = -(-rows // old_layout.shard_degree)
    new_chunk = -(-rows // new_layout.shard_degree)
    plan = []
    for new_rank in range(new_layout.shard_degree):
        lo, hi = min(new_rank * new_chunk, rows), min((new_rank + 1) * new_chunk, rows)
        ranges = []
        for old_rank in _overlapping(lo, hi, rows, old_layout.shard_degree):
            r_lo, r_hi = max(lo, old_rank * old_chunk), min(hi, (old_rank + 1) * old_chunk)
            if r_hi > r_lo:
                ranges.append((old_rank, r_lo, r_hi))
        plan.append(tuple(ranges))
    return tuple(plan)


def checkpoint_bytes_per_param(optimizer="adam_mixed"):
    """Bytes a training checkpoint stores per parameter: the working weights plus the optimizer
    state (ZeRO Sec. 3.1: 2 + 12 for mixed-precision Adam -- bf16 weights, fp32 master copy,
    momentum and variance). Gradients are not saved: the next step recomputes them."""
    choice("optimizer", optimizer, tuple(OPTIMIZERS))
    spec = OPTIMIZERS[optimizer]
    return spec.param_bytes + spec.optimizer_bytes
