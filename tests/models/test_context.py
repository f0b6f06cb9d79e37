import math
import random

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from models import context as cx

SETTINGS = settings(max_examples=60, deadline=None)


def _tensors(seq, d, seed, spread=1.0):
    rng = random.Random(seed)
    return [[[rng.gauss(0, spread) for _ in range(d)] for _ in range(seq)] for _ in range(3)]


def np_attention(q, k, v, causal):
    q, k, v = map(np.array, (q, k, v))
    scores = q @ k.T / math.sqrt(q.shape[1])
    if causal:
        scores = np.where(np.tril(np.ones(scores.shape, bool)), scores, -np.inf)
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    return (p / p.sum(axis=1, keepdims=True)) @ v


# ---- ring attention == dense attention ---------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", cx.LAYOUTS)
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_ring_attention_equals_dense(causal, layout, ranks):
    q, k, v = _tensors(16, 4, seed=ranks)
    result = cx.ring_attention(q, k, v, ranks, causal=causal, layout=layout)
    expected = np_attention(q, k, v, causal)
    np.testing.assert_allclose(result.output, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(cx.dense_attention(q, k, v, causal=causal), expected, rtol=0, atol=1e-12)
    assert len(result.steps) == ranks and all(len(step) == ranks for step in result.steps)


def test_ring_attention_survives_large_logits():
    # The running max keeps exp() in range where a naive softmax would overflow.
    q, k, v = _tensors(8, 2, seed=3, spread=40.0)
    result = cx.ring_attention(q, k, v, 4, causal=True)
    np.testing.assert_allclose(result.output, np_attention(q, k, v, True), rtol=1e-12, atol=1e-12)


def test_ring_state_per_step():
    q, k, v = _tensors(8, 3, seed=7)
    ranks = 4
    result = cx.ring_attention(q, k, v, ranks, causal=False)
    scale = 1 / math.sqrt(3)
    scores = np.array(q) @ np.array(k).T * scale
    for step in range(ranks):
        for rank in range(ranks):
            st_ = result.steps[step][rank]
            assert st_.kv_source_rank == (rank - step) % ranks
            # After step k the rank has seen the K/V blocks of ranks rank, rank-1, ..., rank-k.
            seen = [p for j in range(step + 1) for p in result.positions[(rank - j) % ranks]]
            for row, qi in enumerate(result.positions[rank]):
                m = scores[qi, seen].max()
                assert st_.running_max[row] == pytest.approx(m, abs=1e-12)
                assert st_.running_denominator[row] == pytest.approx(np.exp(scores[qi, seen] - m).sum(), rel=1e-12)
                o = np.exp(scores[qi, seen] - m) @ np.array(v)[seen]
                np.testing.assert_allclose(st_.running_output[row], o, atol=1e-12)
            assert st_.pairs_computed == 2 * 2  # 2 queries x 2 keys per block


def test_causal_ring_skips_masked_blocks_and_starts_at_minus_inf():
    q, k, v = _tensors(8, 2, seed=9)
    result = cx.ring_attention(q, k, v, 4, causal=True, layout="contiguous")
    # Rank 0 (tokens 0-1) sees only its own block: every later step is fully masked.
    assert [result.steps[s][0].pairs_computed for s in range(4)] == [3, 0, 0, 0]
    assert [result.steps[s][3].pairs_computed for s in range(4)] == [3, 4, 4, 4]
    # Rank 1 gets rank 0's block at step 1, rank 3's (masked) at step 2.
    assert result.steps[2][1].pairs_computed == 0
    assert result.steps[0][0].running_max[0] == pytest.approx(q[0][0] * k[0][0] / math.sqrt(2)
                                                             + q[0][1] * k[0][1] / math.sqrt(2))
    balanced = cx.ring_attention(q, k, v, 4, causal=True, layout="two_chunks")
    totals = [sum(balanced.steps[s][r].pairs_computed for s in range(4)) for r in range(4)]
    assert len(set(totals)) == 1 and sum(totals) == 8 * 9 // 2


def test_rank_positions():
    assert cx.rank_positions(8, 2) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert cx.rank_positions(8, 2, "two_chunks") == ((0, 1, 6, 7), (2, 3, 4, 5))
    assert cx.rank_positions(8, 4, "two_chunks") == ((0, 7), (1, 6), (2, 5), (3, 4))


# ---- causal load balance -----------------------------------------------------------------------

@pytest.mark.parametrize("ranks", [1, 2, 4, 8, 16])
def test_causal_work_contiguous_vs_two_chunks(ranks):
    naive = cx.causal_work(ranks, "contiguous")
    assert naive.block_pairs_per_rank == tuple(range(1, ranks + 1))
    assert sum(naive.work_per_rank) == pytest.approx(0.5)
    assert naive.imbalance == pytest.approx(2 - 1 / ranks)
    pairs = naive.block_pairs_per_rank
    assert max(pairs) / (sum(pairs) / ranks) == pytest.approx(2 * ranks / (ranks + 1))
    balanced = cx.causal_work(ranks, "two_chunks")
    assert balanced.block_pairs_per_rank == (2 * ranks + 1,) * ranks
    assert balanced.work_per_rank == pytest.approx([1 / (2 * ranks)] * ranks)
    assert balanced.imbalance == pytest.approx(1.0)
    # Per step: naive leaves rank 0 idle after step 0; balanced keeps everyone busy.
    assert [row[0] for row in naive.schedule] == [1] + [0] * (ranks - 1)
    assert all(all(x >= 2 for x in row) for row in balanced.schedule) or ranks == 1
    assert [sum(col) for col in zip(*balanced.schedule)] == list(balanced.block_pairs_per_rank)
    assert [sum(col) for col in zip(*naive.schedule)] == list(naive.block_pairs_per_rank)


def test_article_says_roughly_two_x_imbalance():
    # "or accept a 2x imbalance": max/mean → 2 as C grows.
    assert cx.causal_work(64).imbalance == pytest.approx(2, rel=0.02)


# ---- communication volumes ---------------------------------------------------------------------

def test_ulysses_volumes_match_paper_and_article():
    s, h, heads, c, b, bpe = 131072, 4096, 32, 8, 1, 2
    u = cx.ulysses_communication(s, h, heads, c, micro_batch=b, bytes_per_element=bpe)
    assert u.all_to_alls_forward == 4 and u.all_to_alls_backward == 4
    # Article: "Four all-to-alls per layer, each moving b·s·h/C per rank."
    assert u.local_shard_bytes == (b * s * h / c * bpe,) * 4
    # Jacobs et al. 2023 Sec. 3.2: aggregate per-link volume 4Nh/P.
    assert u.per_link_volume_bytes == 4 * s * h / c * bpe
    assert u.forward_bytes_per_rank == pytest.approx(4 * b * s * h * (c - 1) / c**2 * bpe)


def test_ring_volume_and_comparison():
    s, h, heads, c = 131072, 4096, 32, 8
    r = cx.ring_communication(s, h, c, heads=heads)
    assert r.transfers == c - 1
    assert r.kv_block_bytes == 2 * (s // c) * h * 2
    assert r.forward_bytes_per_rank == (c - 1) * r.kv_block_bytes
    cmp = cx.compare_context_parallel(s, h, heads, c)
    assert cmp.ring_over_ulysses == pytest.approx(c / 2)
    # GQA shrinks K/V for both schemes.
    gqa = cx.compare_context_parallel(s, h, heads, c, kv_heads=8)
    assert gqa.ring.kv_block_bytes == r.kv_block_bytes / 4
    assert gqa.ulysses.local_shard_bytes[1] == cmp.ulysses.local_shard_bytes[1] / 4
    assert cx.compare_context_parallel(s, h, heads, 1).ring_over_ulysses == 1.0


def test_ulysses_head_limit_and_validation():
    with pytest.raises(ValueError, match="cp=3 does not divide heads=32"):
        cx.ulysses_communication(2048, 4096, 32, 3)
    with pytest.raises(ValueError, match="cp=16 does not divide kv_heads=8"):
        cx.ulysses_communication(2048, 4096, 32, 16, kv_heads=8)
    with pytest.raises(ValueError, match="cp=64 does not divide heads=32"):
        cx.ulysses_communication(2048, 4096, 32, 64)
    # Ring has no head limit.
    assert cx.ring_communication(2048, 4096, 64).transfers == 63
    with pytest.raises(ValueError, match="cp=3 does not divide seq=2048"):
        cx.ring_communication(2048, 4096, 3)
    with pytest.raises(ValueError, match="heads must be given when kv_heads is"):
        cx.ring_communication(2048, 4096, 2, kv_heads=8)
    with pytest.raises(ValueError, match="cp must be >= 1"):
        cx.ring_communication(2048, 4096, 0)
    with pytest.raises(ValueError, match="bytes_per_element must be a whole number"):
        cx.ulysses_communication(2048, 4096, 32, 2, bytes_per_element=1.5)
    with pytest.raises(ValueError, match="too large"):
        cx.ring_communication(2**1100, 4096, 2)


def test_ring_attention_validation():
    q, k, v = _tensors(8, 2, seed=1)
    with pytest.raises(ValueError, match="ranks=3 does not divide seq=8"):
        cx.ring_attention(q, k, v, 3)
    with pytest.raises(ValueError, match="2\\*ranks=16 does not divide seq=8"):
        cx.ring_attention(q, k, v, 8, layout="two_chunks")
    with pytest.raises(ValueError, match="layout must be one of"):
        cx.ring_attention(q, k, v, 2, layout="zigzag")
    with pytest.raises(ValueError, match="k must have the shape of q"):
        cx.ring_attention(q, k[:4], v, 2)
    with pytest.raises(ValueError, match="q must be finite"):
        cx.dense_attention([[math.inf, 0.0]] * 8, k, v)
    with pytest.raises(ValueError, match="ranks must be >= 1"):
        cx.causal_work(0)
    with pytest.raises(ValueError, match="scale must be finite"):
        cx.dense_attention(q, k, v, scale=math.nan)


# ---- properties --------------------------------------------------------------------------------

@SETTINGS
@given(st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 3]), st.integers(1, 3), st.booleans(),
       st.sampled_from(cx.LAYOUTS), st.integers(0, 10**6))
def test_ring_equals_dense_property(ranks, per_chunk, d, causal, layout, seed):
    chunks = ranks * (2 if layout == "two_chunks" else 1)
    q, k, v = _tensors(chunks * per_chunk, d, seed)
    got = cx.ring_attention(q, k, v, ranks, causal=causal, layout=layout)
    np.testing.assert_allclose(got.output, np_attention(q, k, v, causal), rtol=0, atol=1e-12)
    positions = sorted(p for pos in got.positions for p in pos)
    assert positions == list(range(len(q)))


@SETTINGS
@given(st.integers(1, 64), st.sampled_from([1, 2, 4, 8, 16]), st.sampled_from([64, 128]),
       st.sampled_from([1, 2, 4]), st.integers(1, 8))
def test_comm_volumes_finite_and_ulysses_cheaper(heads_mult, c, head_dim, bpe, b):
    heads = c * heads_mult
    h = heads * head_dim
    s = 1024 * c
    cmp = cx.compare_context_parallel(s, h, heads, c, micro_batch=b, bytes_per_element=bpe)
    for value in (cmp.ring.forward_bytes_per_rank, cmp.ulysses.forward_bytes_per_rank):
        assert math.isfinite(value) and value >= 0
    assert cmp.ring.forward_bytes_per_rank >= cmp.ulysses.forward_bytes_per_rank
    if c > 1:
        assert cmp.ring_over_ulysses == pytest.approx(c / 2, rel=1e-12)


# ---- which scheme fits; what its traffic costs (Figure 14) --------------------------------------

def test_ulysses_fits_only_whole_heads():
    assert cx.ulysses_fits(8, 64, 8) and not cx.ulysses_fits(16, 64, 8)
    assert cx.ulysses_fits(64, 64) and not cx.ulysses_fits(128, 64)
    for c in (1, 2, 4, 8, 16, 32, 64):
        for kv in (1, 2, 4, 8, 16, 32, 64):
            assert cx.ulysses_fits(c, 64, kv) == (c <= kv)  # powers of two: C <= kv_heads
    with pytest.raises(ValueError, match="kv_heads=3 does not divide heads=64"):
        cx.ulysses_fits(2, 64, 3)


def test_context_comm_time_by_hand():
    s, h, heads, kv = 131072, 8192, 64, 8
    t = cx.context_comm_time(s, h, heads, 8, kv_heads=kv)
    block = 2 * (s // 8) * (h // heads * kv) * 2
    assert t.ring_step_s == pytest.approx(1.9e-6 + block / 450e9, rel=1e-12)
    assert t.ring_s == pytest.approx(7 * t.ring_step_s, rel=1e-12)
    shards = [(s // 8) * w * 2 for w in (h, h // 8, h // 8, h)]
    assert t.ulysses_s == pytest.approx(sum(7 * 1.9e-6 + 7 / 8 * x / 450e9 for x in shards), rel=1e-12)
    assert (t.crosses_node, t.link) == (False, "nvlink4")
    wide = cx.context_comm_time(s, h, heads, 16, kv_heads=kv, inter_link="ib_hdr")
    assert (wide.crosses_node, wide.link, wide.ulysses_s) == (True, "ib_hdr", None)
    assert wide.ring_step_s == pytest.approx(4e-6 + block / 2 / 25e9, rel=1e-12)
    assert cx.context_comm_time(s, h, heads, 1).ring_s == 0.0
    assert cx.context_comm_time(s, h, heads, 16, gpus_per_node=16, intra_link="nvlink5").link == "nvlink5"


@pytest.mark.parametrize("ranks", [1, 2, 4, 8, 64])
def test_ring_idle_steps(ranks):
    assert cx.ring_idle_steps(cx.causal_work(ranks)) == tuple(ranks - 1 - i for i in range(ranks))
    assert cx.ring_idle_steps(cx.causal_work(ranks, "two_chunks")) == (0,) * ranks
    with pytest.raises(ValueError, match="work"):
        cx.ring_idle_steps(ranks)


# ---- the compute the ring hides behind (Figure 14) ---------------------------------------------

def test_causal_attention_forward_is_half_the_dense_attention_flops():
    from models import flops

    for seq, hidden in ((4096, 1024), (131072, 8192)):
        # one layer's forward, less its GEMMs on the weights (24 B s h²): the attention terms
        attention = flops.flops_breakdown(1, seq, 1, hidden, 1).forward_transformer - 24 * seq * hidden * hidden
        assert cx.causal_attention_forward_flops(seq, hidden) == attention / 2 == 2 * seq * seq * hidden
        assert cx.causal_attention_forward_flops(seq, hidden, micro_batch=4) == 4 * attention / 2


def test_attention_compute_runs_at_flashattention3s_share_of_an_h100():
    """FlashAttention-3: 740 TFLOP/s of the H100's 989.4 (75%). One layer of 131,072 tokens,
    h = 8192, split over 8 ranks: 2 s² h / 8 = 3.5e13 FLOPs each, at 742 TFLOP/s 47.4 ms."""
    assert cx.ATTENTION_KERNEL_FRACTION * 989.4e12 == pytest.approx(740e12, rel=0.01)
    seconds = cx.attention_compute_s(131072, 8192, 8)
    assert seconds == pytest.approx(2 * 131072**2 * 8192 / 8 / (0.75 * 989.4e12), rel=1e-12)
    assert 0.047 < seconds < 0.048


@SETTINGS
@given(st.sampled_from([1024, 4096, 65536]), st.sampled_from([1024, 8192]), st.sampled_from([1, 2, 8, 64]))
def test_attention_compute_falls_as_one_over_c_and_grows_with_the_square_of_the_sequence(seq, hidden, cp):
    one = cx.attention_compute_s(seq, hidden, 1)
    assert cx.attention_compute_s(seq, hidden, cp) == pytest.approx(one / cp, rel=1e-12)
    assert cx.attention_compute_s(2 * seq, hidden, cp) == pytest.approx(4 * one / cp, rel=1e-12)
    assert cx.attention_compute_s(seq, hidden, cp, gpu="b200") < cx.attention_compute_s(seq, hidden, cp)


@pytest.mark.parametrize("bad", [dict(cp=0), dict(fraction=0), dict(fraction=1.5), dict(gpu="tpu")])
def test_attention_compute_refuses_bad_input(bad):
    with pytest.raises((ValueError, KeyError)):
        cx.attention_compute_s(4096, 1024, **{"cp": 2, **bad})
