"""Tests for models.checkpoint: reshard reads (numpy byte oracle), write times, restart verdicts."""
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from models.checkpoint import (
    Read, ShardLayout, block_of, checkpoint_write_time, reload_verdict, reshard_read_count,
    reshard_reads, restart_verdicts, shard_bounds, shard_bytes, tensor_bytes,
)

SETTINGS = settings(max_examples=120, deadline=None)


# ---- geometry ---------------------------------------------------------------------------------------

def test_chunk_semantics_like_torch_chunk():
    # torch.chunk(10 rows, 4) -> 3, 3, 3, 1 ; torch.chunk(5, 4) -> 2, 2, 1 and an empty 4th
    assert [shard_bounds(10, 4, i) for i in range(4)] == [(0, 3), (3, 6), (6, 9), (9, 10)]
    assert [shard_bounds(5, 4, i) for i in range(4)] == [(0, 2), (2, 4), (4, 5), (5, 5)]
    layout = ShardLayout(4, 2)
    assert block_of((10, 6), layout, 5) == ((6, 9), (3, 6))  # rank 5 = row shard 2, tp shard 1
    assert shard_bytes((10, 6), 2, layout, 5) == 3 * 3 * 2
    assert shard_bytes((5, 6), 2, layout, 7) == 0
    assert tensor_bytes((10, 6, 4), 2) == 480


def test_hand_computed_reads_for_one_new_rank():
    # (10, 6) bf16 saved as 4 row shards x 2 tp, reloaded as 3 x 3.
    # New rank 0 holds rows 0-3, cols 0-1. Old file 0 (rows 0-2, cols 0-2) is 3 wide, so each row
    # is its own 4-byte read at row*6 bytes; row 3 comes from old rank 2 (rows 3-5, cols 0-2).
    plan = reshard_reads((10, 6), 2, ShardLayout(4, 2), ShardLayout(3, 3))
    assert plan[0] == (
        Read(0, "__0_0_0.distcp", 0, 4, 0),
        Read(0, "__0_0_0.distcp", 6, 4, 4),
        Read(0, "__0_0_0.distcp", 12, 4, 8),
        Read(2, "__2_1_0.distcp", 0, 4, 12),
    )
    assert sum(len(reads) for reads in plan) == reshard_read_count((10, 6), ShardLayout(4, 2), ShardLayout(3, 3)) == 40


def test_full_width_rows_merge_into_one_read_per_file():
    # 8 -> 4 row shards of a (1024, 512) fp32 tensor: each new rank reads two whole old files.
    plan = reshard_reads((1024, 512), 4, ShardLayout(8), ShardLayout(4))
    file_bytes = 128 * 512 * 4
    assert plan[1] == (
        Read(2, "__2_2_0.distcp", 0, file_bytes, 0),
        Read(3, "__3_3_0.distcp", 0, file_bytes, file_bytes),
    )


def test_gathered_file_reloads_as_slices():
    plan = reshard_reads((6, 4), 1, ShardLayout(1), ShardLayout(3, 2))
    assert {r.file for reads in plan for r in reads} == {"full.pt"}
    # new rank 3 = rows 2-3, cols 2-3: offsets row*4 + 2
    assert [(r.offset_bytes, r.length_bytes) for r in plan[3]] == [(10, 2), (14, 2)]


def test_too_many_reads_is_a_clear_error():
    with pytest.raises(ValueError, match="max_reads=10"):
        reshard_reads((4096, 4096), 2, ShardLayout(8), ShardLayout(4, 2), max_reads=10)
    assert reshard_read_count((4096, 4096), ShardLayout(8), ShardLayout(4, 2)) == 2 * 4096


@st.composite
def reshard_cases(draw):
    dims = draw(st.integers(1, 3))
    shape = tuple(draw(st.integers(1, 12)) for _ in range(dims))
    tp_choices = st.integers(1, 4) if dims > 1 else st.just(1)
    old = ShardLayout(draw(st.integers(1, 6)), draw(tp_choices))
    new = ShardLayout(draw(st.integers(1, 6)), draw(tp_choices))
    return shape, draw(st.sampled_from([1, 2, 4])), old, new


def _blocks(global_bytes, shape, layout):
    """numpy oracle: each rank's shard as bytes, row-major inside its block."""
    view = global_bytes.reshape(shape[0], shape[1] if len(shape) > 1 else 1, -1)
    files = []
    for rank in range(layout.files):
        (r0, r1), (c0, c1) = block_of(shape, layout, rank)
        files.append(np.ascontiguousarray(view[r0:r1, c0:c1, :]).reshape(-1))
    return files


@SETTINGS
@given(reshard_cases())
def test_every_byte_of_every_new_shard_read_exactly_once(case):
    shape, dtype_bytes, old, new = case
    total = tensor_bytes(shape, dtype_bytes)
    # distinct values per byte position (uint32 so nothing wraps)
    global_bytes = np.arange(total, dtype=np.uint32)
    old_files = _blocks(global_bytes, shape, old)
    expected = _blocks(global_bytes, shape, new)
    plan = reshard_reads(shape, dtype_bytes, old, new)
    assert len(plan) == new.files
    read_from_old = [np.zeros(len(f), dtype=np.int64) for f in old_files]
    for rank, reads in enumerate(plan):
        size = shard_bytes(shape, dtype_bytes, new, rank)
        assert size == len(expected[rank])
        out = np.full(size, -1, dtype=np.int64)
        written = np.zeros(size, dtype=np.int64)
        for r in reads:
            assert r.length_bytes > 0 and r.length_bytes % dtype_bytes == 0
            assert r.file == old.file_name(r.old_rank)
            src = old_files[r.old_rank][r.offset_bytes:r.offset_bytes + r.length_bytes]
            assert len(src) == r.length_bytes
            out[r.dest_offset_bytes:r.dest_offset_bytes + r.length_bytes] = src
            written[r.dest_offset_bytes:r.dest_offset_bytes + r.length_bytes] += 1
            read_from_old[r.old_rank][r.offset_bytes:r.offset_bytes + r.length_bytes] += 1
        assert (written == 1).all()
        assert (out == expected[rank]).all()
    # and every old byte is read exactly once overall (the new layout partitions the tensor)
    assert all((counts == 1).all() for counts in read_from_old)
    assert sum(len(reads) for reads in plan) == reshard_read_count(shape, old, new)


# ---- write time -----------------------------------------------------------------------------------

GiB = 2**30


def test_sharded_write_is_capped_by_the_filesystem():
    # 2 GiB over 512 writers: 4 MiB each at 2 GB/s = 2.1 ms, but 100 GB/s aggregate caps it at 21.5 ms.
    t = checkpoint_write_time((65536, 8192), 4, ShardLayout(512), mode="sharded",
                              per_writer_bytes_per_s=2e9, filesystem_bytes_per_s=100e9)
    assert t.total_bytes == 2 * GiB and t.largest_file_bytes == 4 * 2**20
    assert t.write_s == pytest.approx(2 * GiB / 100e9)
    assert t.gather_s == 0 and t.total_s == t.write_s
    few = checkpoint_write_time((65536, 8192), 4, ShardLayout(8), mode="sharded",
                                per_writer_bytes_per_s=2e9, filesystem_bytes_per_s=100e9)
    assert few.write_s == pytest.approx(GiB / 4 / 2e9)  # 8 writers: per-writer bandwidth binds


def test_gathered_write_pays_gather_then_one_writer():
    t = checkpoint_write_time((65536, 8192), 4, ShardLayout(512), mode="gathered",
                              per_writer_bytes_per_s=2e9, filesystem_bytes_per_s=100e9,
                              network_bytes_per_s=25e9, alpha_s=1e-5)
    # ring/direct gather: (N-1) alpha + (N-1)/N * total / beta (Thakur et al. 2005)
    assert t.gather_s == pytest.approx(511 * 1e-5 + 511 / 512 * 2 * GiB / 25e9)
    assert t.write_s == pytest.approx(2 * GiB / 2e9)
    assert t.total_s == pytest.approx(t.gather_s + t.write_s)
    assert t.writers == 1 and t.peak_writer_bytes == 2 * GiB
    single = checkpoint_write_time((10, 10), 2, ShardLayout(1), mode="gathered",
                                   per_writer_bytes_per_s=1e3, filesystem_bytes_per_s=1e9)
    assert single.gather_s == 0 and single.write_s == pytest.approx(0.2)


@SETTINGS
@given(
    st.tuples(st.integers(1, 10**6), st.integers(1, 10**4)), st.sampled_from([1, 2, 4]),
    st.integers(1, 64), st.integers(1, 8),
    st.floats(1e6, 1e11), st.floats(1e6, 1e13), st.floats(1e6, 1e11),
)
def test_sharded_never_slower_than_gathered(shape, dtype_bytes, shards, tp, writer_bw, fs_bw, net_bw):
    layout = ShardLayout(shards, tp)
    kwargs = dict(per_writer_bytes_per_s=writer_bw, filesystem_bytes_per_s=fs_bw, network_bytes_per_s=net_bw)
    sharded = checkpoint_write_time(shape, dtype_bytes, layout, mode="sharded", **kwargs)
    gathered = checkpoint_write_time(shape, dtype_bytes, layout, mode="gathered", **kwargs)
    for t in (sharded, gathered):
        assert all(math.isfinite(v) and v >= 0 for v in (t.gather_s, t.write_s, t.total_s))
    assert sharded.total_s <= gathered.total_s * (1 + 1e-12)


# ---- restart verdicts ----------------------------------------------------------------------------

def test_what_survives_a_world_size_change():
    saved, bigger = ShardLayout(8), ShardLayout(16)
    v = restart_verdicts(saved, bigger)
    assert v["gathered"].loadable
    assert v["sharded + metadata"].loadable and v["sharded + metadata"].needs_reshard
    assert not v["sharded, no metadata"].loadable
    assert "8 to 16" in v["sharded, no metadata"].reason and "metadata" in v["sharded, no metadata"].reason


def test_same_world_size_different_layout_without_metadata_fails():
    verdict = reload_verdict(ShardLayout(8), ShardLayout(4, 2), has_metadata=False)
    assert not verdict.loadable and "same world size (8)" in verdict.reason


def test_identical_layout_loads_without_metadata():
    verdict = reload_verdict(ShardLayout(4, 2), ShardLayout(4, 2), has_metadata=False)
    assert verdict.loadable and not verdict.needs_reshard


# ---- validation ------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "call, fragment",
    [
        (lambda: ShardLayout(0), "shard_degree"),
        (lambda: ShardLayout(2, -1), "tp"),
        (lambda: ShardLayout(2**20, 2), r"shard_degree\*tp"),
        (lambda: tensor_bytes((4, 0), 2), r"shape\[1\]"),
        (lambda: tensor_bytes((), 2), "shape"),
        (lambda: tensor_bytes((4,), 0), "dtype_bytes"),
        (lambda: tensor_bytes((10**200, 10**200), 2), "exceeds"),
        (lambda: block_of((8,), ShardLayout(2, 2), 0), "tp=2"),
        (lambda: ShardLayout(2).shard_index(2), "rank"),
        (lambda: checkpoint_write_time((4, 4), 2, ShardLayout(2), mode="zip",
                                       per_writer_bytes_per_s=1, filesystem_bytes_per_s=1), "mode"),
        (lambda: checkpoint_write_time((4, 4), 2, ShardLayout(2), mode="sharded",
                                       per_writer_bytes_per_s=0, filesystem_bytes_per_s=1), "per_writer_bytes_per_s"),
        (lambda: checkpoint_write_time((4, 4), 2, ShardLayout(2), mode="gathered",
                                       per_writer_bytes_per_s=1, filesystem_bytes_per_s=1), "network_bytes_per_s"),
        (lambda: reload_verdict(ShardLayout(2), 4), "new"),
        (lambda: reload_verdict(ShardLayout(2), ShardLayout(2), has_metadata="yes"), "has_metadata"),
    ],
)
def test_invalid_inputs_name_the_argument(call, fragment):
    with pytest.raises(ValueError, match=fragment):
        call()


def test_absurd_bandwidth_is_an_error_not_inf():
    with pytest.raises(ValueError, match="overflows"):
        checkpoint_write_time((10**12, 10**6), 8, ShardLayout(8), mode="sharded",
                              per_writer_bytes_per_s=1e-300, filesystem_bytes_per_s=1e-300)


def test_huge_but_finite_tensor_does_not_overflow():
    t = checkpoint_write_time((10**15, 10**6), 4, ShardLayout(1024, 8), mode="gathered",
                              per_writer_bytes_per_s=1e9, filesystem_bytes_per_s=1e12, network_bytes_per_s=1e11)
    assert math.isfinite(t.total_s) and t.total_s > 0


# ---- row ranges and checkpoint size (Figure 22) --------------------------------------------------

from models.checkpoint import checkpoint_bytes_per_param, reshard_row_ranges  # noqa: E402


def test_row_ranges_hand_case():
    # 64 rows saved by 8 ranks (8 rows each), reloaded by 6 (chunks of 11, the last 9): rank 0 reads
    # rows 0-7 from file 0 and 8-10 from file 1.
    plan = reshard_row_ranges((64, 4096), ShardLayout(8), ShardLayout(6))
    assert plan[0] == ((0, 0, 8), (1, 8, 11))
    assert plan[5] == ((6, 55, 56), (7, 56, 64))
    assert sum(map(len, plan)) == 13 and max(map(len, plan)) == 3
    assert reshard_row_ranges((5,), ShardLayout(8), ShardLayout(1)) == (((0, 0, 1), (1, 1, 2), (2, 2, 3), (3, 3, 4), (4, 4, 5)),)


@SETTINGS
@given(st.integers(1, 300), st.integers(1, 64), st.integers(1, 64), st.integers(1, 5), st.sampled_from([1, 2, 4]))
def test_row_ranges_are_the_planned_reads(rows, old, new, cols, dtype_bytes):
    ranges = reshard_row_ranges((rows, cols), ShardLayout(old), ShardLayout(new))
    plan = reshard_reads((rows, cols), dtype_bytes, ShardLayout(old), ShardLayout(new))
    row_bytes = cols * dtype_bytes
    assert len(ranges) == len(plan) == new
    for rank, (mine, reads) in enumerate(zip(ranges, plan)):
        assert len(mine) == len(reads)
        for (old_rank, lo, hi), read in zip(mine, reads):
            start = block_of((rows, cols), ShardLayout(old), old_rank)[0][0]
            assert (read.old_rank, read.offset_bytes, read.length_bytes) == (old_rank, (lo - start) * row_bytes, (hi - lo) * row_bytes)
        covered = [row for _, lo, hi in mine for row in range(lo, hi)]
        assert covered == list(range(*block_of((rows, cols), ShardLayout(new), rank)[0]))


def test_checkpoint_bytes_per_param_and_bad_inputs():
    assert checkpoint_bytes_per_param() == 14  # bf16 weights + fp32 master, momentum, variance
    assert checkpoint_bytes_per_param("adam_fp32") == 12
    with pytest.raises(ValueError, match="optimizer"):
        checkpoint_bytes_per_param("lion")
    with pytest.raises(ValueError, match="new_layout must shard rows only"):
        reshard_row_ranges((8, 8), ShardLayout(2), ShardLayout(2, 2))
    with pytest.raises(ValueError, match="old_layout"):
        reshard_row_ranges((8,), 4, ShardLayout(2))
    with pytest.raises(ValueError, match="shape"):
        reshard_row_ranges((0,), ShardLayout(2), ShardLayout(2))
