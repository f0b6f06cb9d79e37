import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from models import tensor as tp

SETTINGS = settings(max_examples=60, deadline=None)
erf = np.vectorize(math.erf)


def np_gelu(x):
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def np_attention(x, wq, wk, wv, wo, heads, causal):
    x, wq, wk, wv, wo = map(np.array, (x, wq, wk, wv, wo))
    s, h = x.shape
    d = h // heads
    q, k, v = x @ wq, x @ wk, x @ wv
    outs = []
    for i in range(heads):
        sl = slice(i * d, (i + 1) * d)
        scores = q[:, sl] @ k[:, sl].T / math.sqrt(d)
        if causal:
            scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        outs.append(p @ v[:, sl])
    return np.concatenate(outs, axis=1) @ wo


# ---- numpy oracles --------------------------------------------------------------------------------

@pytest.mark.parametrize("t", [1, 2, 4])
def test_mlp_shards_reproduce_full_matmul(t):
    tokens, h = 3, 4
    x, a, b = tp.random_matrix(tokens, h, 1), tp.random_matrix(h, 4 * h, 2), tp.random_matrix(4 * h, h, 3)
    result = tp.tensor_parallel_mlp(x, a, b, t)
    X, A, B = np.array(x), np.array(a), np.array(b)
    np.testing.assert_allclose(result.output, np_gelu(X @ A) @ B, rtol=0, atol=1e-12)
    np.testing.assert_allclose(tp.serial_mlp(x, a, b), np_gelu(X @ A) @ B, rtol=0, atol=1e-12)
    width = 4 * h // t
    for i in range(t):
        np.testing.assert_array_equal(result.a_shards[i], A[:, i * width:(i + 1) * width])
        np.testing.assert_array_equal(result.b_shards[i], B[i * width:(i + 1) * width, :])
        np.testing.assert_allclose(result.pre_activations[i], X @ A[:, i * width:(i + 1) * width], atol=1e-12)
        np.testing.assert_allclose(result.partial_outputs[i],
                                   np_gelu(X @ A[:, i * width:(i + 1) * width]) @ B[i * width:(i + 1) * width],
                                   atol=1e-12)
    # The column split concatenates to X·A: no communication before GeLU.
    np.testing.assert_allclose(np.concatenate(result.pre_activations, axis=1), X @ A, atol=1e-12)
    if t > 1:  # each partial is full-shaped but far from the answer: the AllReduce is needed
        assert np.abs(np.array(result.partial_outputs[0]) - np.array(result.output)).max() > 1e-3


def test_row_split_first_linear_needs_allreduce_before_gelu():
    x, a = tp.random_matrix(3, 4, 5), tp.random_matrix(4, 8, 6)
    r = tp.row_split_first_linear(x, a, 2)
    X, A = np.array(x), np.array(a)
    np.testing.assert_allclose(np.sum(r.partial_products, axis=0), X @ A, atol=1e-12)
    np.testing.assert_allclose(r.gelu_of_sum, np_gelu(X @ A), atol=1e-12)
    np.testing.assert_allclose(r.sum_of_gelus, np_gelu(X[:, :2] @ A[:2]) + np_gelu(X[:, 2:] @ A[2:]), atol=1e-12)
    assert r.max_abs_difference > 0.05
    assert tp.row_split_first_linear(x, a, 1).max_abs_difference == 0


@pytest.mark.parametrize("t,causal", [(1, False), (2, False), (4, True), (2, True)])
def test_head_parallel_attention_matches_dense(t, causal):
    s, h, heads = 5, 8, 4
    x = tp.random_matrix(s, h, 10)
    w = [tp.random_matrix(h, h, 11 + i) for i in range(4)]
    result = tp.tensor_parallel_attention(x, *w, heads, t, causal=causal)
    expected = np_attention(x, *w, heads, causal)
    np.testing.assert_allclose(result.output, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(tp.serial_attention(x, *w, heads, causal=causal), expected, atol=1e-12)
    np.testing.assert_allclose(np.sum(result.partial_outputs, axis=0), expected, atol=1e-12)
    assert result.heads_per_rank == [list(range(r * heads // t, (r + 1) * heads // t)) for r in range(t)]
    for r in range(t):
        assert np.array(result.wo_shards[r]).shape == (h // t, h)
        assert np.array(result.head_outputs[r]).shape == (s, h // t)


def test_reduce_scatter_then_all_gather_is_all_reduce():
    partials = [tp.random_matrix(8, 3, seed) for seed in range(4)]
    chunks = tp.reduce_scatter_rows(partials, 4)
    assert [len(c) for c in chunks] == [2, 2, 2, 2]
    np.testing.assert_allclose(tp.all_gather_rows(chunks), np.sum(partials, axis=0), atol=1e-12)


# ---- collectives --------------------------------------------------------------------------------

def test_tp_collectives_per_layer():
    b, s, h, t = 1, 2048, 12288, 8
    plain = tp.tp_layer_communication(b, s, h, t)
    assert plain.count == 4
    assert [c.kind for c in plain.collectives] == ["AllReduce"] * 4
    assert [c.phase for c in plain.collectives] == ["forward", "forward", "backward", "backward"]
    assert all(c.elements == b * s * h and c.message_bytes == 2 * b * s * h for c in plain.collectives)
    assert plain.wire_bytes_per_rank == pytest.approx(4 * 2 * (t - 1) / t * 2 * b * s * h)

    sp = tp.tp_layer_communication(b, s, h, t, sequence_parallel=True)
    kinds = [c.kind for c in sp.collectives]
    assert sp.count == 8 and kinds.count("AllGather") == 4 and kinds.count("ReduceScatter") == 4
    assert sp.wire_bytes_per_rank == pytest.approx(plain.wire_bytes_per_rank)  # same bytes on the wire
    regather = tp.tp_layer_communication(b, s, h, t, sequence_parallel=True, count_backward_regather=True)
    assert regather.count == 10 and regather.wire_bytes_per_rank > sp.wire_bytes_per_rank

    fp32 = tp.tp_layer_communication(b, s, h, t, bytes_per_element=4)
    assert fp32.message_bytes == 2 * plain.message_bytes
    assert tp.tp_layer_communication(b, s, h, 1).count == 0


def test_gemm_shapes_per_rank():
    h, t = 12288, 8
    shapes = {g.name: g for g in tp.layer_gemm_shapes(h, t, micro_batch=2, seq=2048)}
    assert (shapes["qkv"].in_features, shapes["qkv"].out_features) == (h, 3 * h // t)
    assert (shapes["attention_output"].in_features, shapes["attention_output"].out_features) == (h // t, h)
    assert (shapes["fc1"].in_features, shapes["fc1"].out_features) == (h, 4 * h // t)
    assert (shapes["fc2"].in_features, shapes["fc2"].out_features) == (4 * h // t, h)
    total = sum(g.flops for g in shapes.values())
    assert total * t == 24 * 2 * 2048 * h * h  # all ranks together: 24Bsh² forward (Narayanan App.)
    assert shapes["attention_output"].narrow_dim == h // t


def test_gemm_efficiency_is_a_saturating_model():
    assert tp.gemm_efficiency(tp.ILLUSTRATIVE_HALF_EFFICIENCY_WIDTH) == 0.5
    assert tp.gemm_efficiency(100, half_width=100) == 0.5
    widths = [16, 64, 256, 1024, 4096, 16384]
    effs = [tp.gemm_efficiency(w) for w in widths]
    assert effs == sorted(effs) and 0 < effs[0] and effs[-1] < 1
    assert "ILLUSTRATIVE" in tp.gemm_efficiency.__doc__ and "Not a measurement" in tp.gemm_efficiency.__doc__


# ---- validation --------------------------------------------------------------------------------

def test_rejects_nonsense():
    x, a, b = tp.random_matrix(2, 4, 0), tp.random_matrix(4, 16, 1), tp.random_matrix(16, 4, 2)
    with pytest.raises(ValueError, match="tp=3 does not divide ffn_hidden=16"):
        tp.tensor_parallel_mlp(x, a, b, 3)
    with pytest.raises(ValueError, match="tp must be >= 1"):
        tp.tensor_parallel_mlp(x, a, b, 0)
    with pytest.raises(ValueError, match="shapes do not chain"):
        tp.tensor_parallel_mlp(x, b, a, 2)
    with pytest.raises(ValueError, match="x must be rectangular"):
        tp.tensor_parallel_mlp([[1.0, 2.0], [3.0]], a, b, 2)
    with pytest.raises(ValueError, match="x must be finite"):
        tp.serial_mlp([[float("nan")] * 4], a, b)
    w = [tp.random_matrix(4, 4, i) for i in range(4)]
    with pytest.raises(ValueError, match="tp=3 does not divide heads=2"):
        tp.tensor_parallel_attention(x, *w, 2, 3)
    with pytest.raises(ValueError, match="heads=3 does not divide hidden=4"):
        tp.serial_attention(x, *w, 3)
    with pytest.raises(ValueError, match="wo must be"):
        tp.serial_attention(x, w[0], w[1], w[2], a, 2)
    with pytest.raises(ValueError, match="tp=5 does not divide heads=32|tp=5 does not divide hidden"):
        tp.layer_gemm_shapes(4096, 5)
    with pytest.raises(ValueError, match="tp=3 does not divide seq=2048"):
        tp.tp_layer_communication(1, 2048, 4096, 3, sequence_parallel=True)
    with pytest.raises(ValueError, match="bytes_per_element must be >= 1"):
        tp.tp_layer_communication(1, 2048, 4096, 2, bytes_per_element=0)
    with pytest.raises(ValueError, match="width must be > 0"):
        tp.gemm_efficiency(0)
    with pytest.raises(ValueError, match="width=.* too large"):
        tp.gemm_efficiency(10**400)
    with pytest.raises(ValueError, match="half_width must be finite"):
        tp.gemm_efficiency(10, half_width=float("inf"))
    with pytest.raises(ValueError, match="rows\\*cols must be <= 1000000"):
        tp.random_matrix(10**4, 10**4)
    with pytest.raises(ValueError, match="partials must hold one matrix per rank"):
        tp.reduce_scatter_rows([x], 2)
    with pytest.raises(ValueError, match="a and b must have the same shape"):
        tp.add(x, a)


def test_huge_collective_sizes_do_not_crash():
    c = tp.tp_layer_communication(10**6, 10**9, 10**6, 8)
    assert math.isfinite(c.wire_bytes_per_rank)
    with pytest.raises(ValueError, match="too large"):
        tp.tp_layer_communication(10**200, 10**100, 10**10, 8)


# ---- properties --------------------------------------------------------------------------------

@SETTINGS
@given(st.integers(1, 4), st.sampled_from([2, 4, 8]), st.sampled_from([1, 2, 4]), st.integers(0, 10**6))
def test_any_split_reproduces_serial_mlp(tokens, h, t, seed):
    ffn = 4 * h
    if ffn % t:
        t = 1
    x, a, b = tp.random_matrix(tokens, h, seed), tp.random_matrix(h, ffn, seed + 1), tp.random_matrix(ffn, h, seed + 2)
    got = tp.tensor_parallel_mlp(x, a, b, t)
    np.testing.assert_allclose(got.output, tp.serial_mlp(x, a, b), atol=1e-12)
    np.testing.assert_allclose(np.sum(got.partial_outputs, axis=0), got.output, atol=1e-12)


@SETTINGS
@given(st.integers(1, 64), st.integers(1, 8192), st.sampled_from([64, 1024, 12288]),
       st.sampled_from([2, 4, 8]), st.sampled_from([1, 2, 4]))
def test_sp_moves_same_bytes_as_tp(b, s, h, t, bpe):
    s = s * t
    plain = tp.tp_layer_communication(b, s, h, t, bytes_per_element=bpe)
    sp = tp.tp_layer_communication(b, s, h, t, bytes_per_element=bpe, sequence_parallel=True)
    assert sp.wire_bytes_per_rank == pytest.approx(plain.wire_bytes_per_rank, rel=1e-12)
    assert plain.wire_bytes_per_rank > 0 and math.isfinite(plain.wire_bytes_per_rank)
    assert plain.wire_bytes_per_rank < 4 * 2 * plain.collectives[0].message_bytes


# ---- Figure 11: one block step by step, both orders ---------------------------------------------

def _np_demo(block, seed):
    x, weights = tp._demo_inputs(block, seed)
    return np.array(x), [np.array(w) for w in weights]


def _np_multi_head(q, k, v, heads):
    """numpy oracle: concat of softmax(q_i k_iᵀ/√d) v_i over heads."""
    d = q.shape[1] // heads
    outs = []
    for i in range(heads):
        sl = slice(i * d, (i + 1) * d)
        scores = q[:, sl] @ k[:, sl].T / math.sqrt(d)
        p = np.exp(scores - scores.max(axis=1, keepdims=True))
        outs.append(p / p.sum(axis=1, keepdims=True) @ v[:, sl])
    return np.concatenate(outs, axis=1)


@pytest.mark.parametrize("block", tp.BLOCKS)
@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_walkthrough_column_row_reproduces_the_serial_block(block, t):
    walk = tp.block_walkthrough(block, "column_row", t, seed=7)
    X, W = _np_demo(block, 7)
    expected = np_gelu(X @ W[0]) @ W[1] if block == "mlp" else np_attention(X, *W, tp.DEMO_HEADS, False)
    np.testing.assert_allclose(walk.serial_output, expected, rtol=0, atol=1e-12)
    np.testing.assert_allclose(walk.output, expected, rtol=0, atol=1e-12)
    assert walk.max_abs_error <= 1e-12
    assert walk.collectives_forward == (1 if t > 1 else 0)
    assert [s.collective_after for s in walk.steps] == ["", "", "AllReduce", ""]
    first, _, second, _ = walk.steps
    weight, partial = second.panels
    assert first.panels[0].layout == "replicated" and first.panels[1].layout == "columns"
    assert weight.layout == "rows" and partial.layout == "partial" and len(partial.pieces) == t
    np.testing.assert_allclose(np.sum(partial.pieces, axis=0), expected, atol=1e-12)  # the AllReduce's sum
    np.testing.assert_array_equal(np.concatenate(weight.pieces, axis=0), W[1] if block == "mlp" else W[3])
    if block == "mlp":  # the column blocks of A, side by side, are A
        np.testing.assert_array_equal(np.concatenate(first.panels[1].pieces, axis=1), W[0])


@pytest.mark.parametrize("block", tp.BLOCKS)
@pytest.mark.parametrize("t", [2, 4, 8])
def test_walkthrough_rows_first_needs_the_sum_before_the_nonlinearity(block, t):
    walk = tp.block_walkthrough(block, "row_first", t, seed=3)
    X, W = _np_demo(block, 3)
    w = X.shape[1] // t
    parts = [X[:, i * w:(i + 1) * w] @ (W[0] if block == "mlp" else np.concatenate(W[:3], axis=1))[i * w:(i + 1) * w]
             for i in range(t)]
    h = tp.DEMO_HIDDEN
    if block == "mlp":
        wrong = sum(np_gelu(p) for p in parts) @ W[1]
        right = np_gelu(X @ W[0]) @ W[1]
    else:
        wrong = sum(_np_multi_head(p[:, :h], p[:, h:2 * h], p[:, 2 * h:], tp.DEMO_HEADS) for p in parts) @ W[3]
        right = np_attention(X, *W, tp.DEMO_HEADS, False)
    np.testing.assert_allclose(walk.output, wrong, rtol=0, atol=1e-12)
    assert walk.max_abs_error == pytest.approx(np.abs(wrong - right).max(), abs=1e-12)
    assert walk.max_abs_error > 1e-2
    assert walk.collectives_forward == 2
    assert [s.collective_after for s in walk.steps] == ["", "AllReduce", "AllGather", ""]
    np.testing.assert_allclose(np.sum(walk.steps[0].panels[2].pieces, axis=0), sum(parts), atol=1e-12)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(tp.BLOCKS), st.sampled_from(tp.ORDERS), st.integers(0, 10_000))
def test_walkthrough_any_seed_right_order_exact_wrong_order_off(block, order, seed):
    walk = tp.block_walkthrough(block, order, 4, seed)
    if order == "column_row":
        assert walk.max_abs_error <= 1e-12
    else:
        assert walk.max_abs_error > 1e-3
    assert tp.block_walkthrough(block, order, 1, seed).max_abs_error <= 1e-12  # one rank: nothing is split


def test_block_collectives_by_order():
    b, s, h, t = 1, 4096, 8192, 8
    [allreduce] = tp.block_collectives("mlp", "column_row", b, s, h, t)
    plain = tp.tp_layer_communication(b, s, h, t).collectives[0]
    assert (allreduce.kind, allreduce.message_bytes, allreduce.wire_bytes_per_rank) == (
        "AllReduce", plain.message_bytes, plain.wire_bytes_per_rank) and allreduce.message_bytes == 2 * b * s * h
    mlp = tp.block_collectives("mlp", "row_first", b, s, h, t)
    assert [(c.kind, c.message_bytes) for c in mlp] == [("AllReduce", 2 * b * s * 4 * h), ("AllGather", 2 * b * s * h)]
    att = tp.block_collectives("attention", "row_first", b, s, h, t)
    assert [(c.kind, c.message_bytes) for c in att] == [("AllReduce", 2 * b * s * 3 * h), ("AllGather", 2 * b * s * h)]
    assert att[1].wire_bytes_per_rank == pytest.approx((t - 1) / t * 2 * b * s * h)
    assert tp.block_collectives("mlp", "row_first", b, s, h, 1) == ()
    with pytest.raises(ValueError, match="order"):
        tp.block_collectives("mlp", "rows", b, s, h, t)
    with pytest.raises(ValueError, match="seed"):
        tp.block_walkthrough("mlp", "column_row", 2, seed=-1)
    with pytest.raises(ValueError, match="tp=3 does not divide hidden=8"):
        tp.block_walkthrough("mlp", "column_row", 3)


# ---- Figure 12: per-layer time on a TP group ----------------------------------------------------

def test_tp_layer_time_by_hand_article_numbers():
    """b=1, s=4096, h=8192 on H100s (450 GB/s NVLink per direction, 50 GB/s NDR NIC)."""
    b, s, h = 1, 4096, 8192
    message = 2 * b * s * h
    peak = 989.4e12

    def compute(t):
        shapes = [(h, 3 * h // t), (h // t, h), (h, 4 * h // t), (4 * h // t, h)]
        return sum(2 * b * s * k * n / (peak * min(k, n) / (min(k, n) + 256)) for k, n in shapes)

    at8 = tp.tp_layer_time(b, s, h, 8)
    one = 14 * 1.9e-6 + 1.75 * message / 450e9
    assert at8.allreduce_s == pytest.approx(one, rel=1e-12) and at8.comm_s == pytest.approx(4 * one, rel=1e-12)
    assert at8.forward_compute_s == pytest.approx(compute(8), rel=1e-12)
    assert at8.backward_compute_s == 2 * at8.forward_compute_s
    assert at8.layer_s == pytest.approx(3 * compute(8) + 4 * one, rel=1e-12)
    assert (at8.crosses_node, at8.link) == (False, "nvlink4")
    assert at8.speedup == pytest.approx(3 * compute(1) / at8.layer_s, rel=1e-12)
    at16 = tp.tp_layer_time(b, s, h, 16)
    assert (at16.crosses_node, at16.link) == (True, "ib_ndr")
    assert at16.allreduce_s == pytest.approx(30 * 4e-6 + 1.875 * message / 50e9, rel=1e-12)
    assert at16.allreduce_s > 8 * at8.allreduce_s  # the jump at the node boundary
    assert at16.speedup < at8.speedup
    one_gpu = tp.tp_layer_time(b, s, h, 1)
    assert (one_gpu.comm_s, one_gpu.comm_fraction, one_gpu.speedup) == (0.0, 0.0, 1.0)
    flops = sum(g.flops for g in tp.layer_gemm_shapes(h, 8, micro_batch=b, seq=s))
    assert at8.gemm_efficiency == pytest.approx(flops / (peak * at8.forward_compute_s), rel=1e-12)
    assert tp.tp_layer_time(b, s, h, 16, gpus_per_node=16).link == "nvlink4"
    with pytest.raises(ValueError, match="link"):
        tp.tp_layer_time(b, s, h, 16, inter_link="carrier_pigeon")


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 4, 8, 16, 32, 64]), st.sampled_from([1024, 4096, 16384]),
       st.sampled_from([512, 4096, 131072]), st.sampled_from([4, 8, 72]), st.sampled_from(["a100_80gb", "b200"]))
def test_tp_layer_time_properties(t, h, s, gpus, gpu):
    r = tp.tp_layer_time(2, s, h, t, gpu=gpu, gpus_per_node=gpus, inter_link="ib_hdr")
    assert 0 <= r.comm_fraction < 1 and r.crosses_node == (t > gpus)
    assert r.layer_s == pytest.approx(r.forward_compute_s + r.backward_compute_s + r.comm_s, rel=1e-12)
    assert 0 < r.gemm_efficiency < 1 and r.speedup > 0
    assert r.comm_s == pytest.approx(4 * r.allreduce_s, rel=1e-12)


def test_sp_forward_bytes_equal_plain_tp():
    for t in (2, 4, 8):
        plain = tp.tp_forward_bytes_per_rank(4, 2048, 6144, t)
        assert plain == pytest.approx(2 * 2 * (t - 1) / t * 2 * 4 * 2048 * 6144, rel=1e-12)
        assert tp.tp_forward_bytes_per_rank(4, 2048, 6144, t, sequence_parallel=True) == pytest.approx(plain, rel=1e-12)
    assert tp.tp_forward_bytes_per_rank(4, 2048, 6144, 1) == 0.0
