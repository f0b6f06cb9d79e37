"""Megatron-style tensor parallelism, on matrices small enough to print.

Models Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion Parameter Language
Models Using Model Parallelism", Sec. 3: the MLP's first weight split by columns
(each rank applies GeLU locally), the second split by rows (each rank yields a
partial sum that an AllReduce completes), and attention split by heads with a
row-parallel output projection. Everything runs on real numbers (plain lists of
floats from a seeded generator) so a figure can show the actual partial sums.
It also counts the per-layer collectives (the f / f̄ operators), their bytes,
the per-rank GEMM shapes at TP degree t, and the layout changes of sequence
parallelism (Korthikanti et al. 2022 Sec. 4.2.2).

What it does not model: timing, overlap, dropout, layernorm, biases, or real GEMM
performance -- ``gemm_efficiency`` is an illustrative curve, not a measurement.
Matrices are row-major ``list[list[float]]``; [rows, cols] shapes match the papers
(X is [tokens, h], A is [h, 4h], B is [4h, h]).
"""
import math
import random
from dataclasses import dataclass

from models import collectives as collectives_model
from models._validate import divides, finite, positive, positive_int

# Width at which the illustrative GEMM efficiency curve reaches 50%. A chosen number
# for drawing a saturating curve, NOT a measured property of any GPU.
ILLUSTRATIVE_HALF_EFFICIENCY_WIDTH = 256


def _as_float(name, value):
    """float(value), but a ValueError naming the argument when it is too large for a float."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number, got {value!r}")
    try:
        result = float(value)
    except OverflowError:
        raise ValueError(f"{name}={value} is too large to represent as a float") from None
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not math.isfinite(result) and isinstance(value, int):
        raise ValueError(f"{name}={value} is too large to represent as a float")
    return result


# ---- small dense linear algebra -------------------------------------------------

def random_matrix(rows, cols, seed=0):
    """A rows x cols matrix of uniform(-1, 1) floats from ``random.Random(seed)``."""
    rows = positive_int("rows", rows)
    cols = positive_int("cols", cols)
    if rows * cols > 1_000_000:
        raise ValueError(f"rows*cols must be <= 1000000 for a demo matrix, got {rows * cols}")
    rng = random.Random(seed)
    return [[rng.uniform(-1.0, 1.0) for _ in range(cols)] for _ in range(rows)]


def check_matrix(name, m):
    """Rows x columns of a non-empty rectangular matrix of finite numbers; ValueError naming it."""
    if not isinstance(m, (list, tuple)) or not m:
        raise ValueError(f"{name} must be a non-empty list of rows, got {m!r}")
    width = None
    for row in m:
        if not isinstance(row, (list, tuple)) or not row:
            raise ValueError(f"{name} must be a non-empty list of non-empty rows")
        if width is None:
            width = len(row)
        elif len(row) != width:
            raise ValueError(f"{name} must be rectangular: rows of length {width} and {len(row)}")
        for value in row:
            finite(name, value)
    return len(m), width


def matmul(a, b):
    """Plain triple-loop product of an [m, k] and a [k, n] matrix."""
    _, k = check_matrix("a", a)
    k2, _ = check_matrix("b", b)
    if k != k2:
        raise ValueError(f"a has {k} columns but b has {k2} rows")
    columns = list(zip(*b))
    return [[math.fsum(x * y for x, y in zip(row, col)) for col in columns] for row in a]


def add(a, b):
    """Elementwise a + b of two matrices of the same shape."""
    if check_matrix("a", a) != check_matrix("b", b):
        raise ValueError("a and b must have the same shape")
    return [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]


def gelu(x):
    """Exact GeLU, x·Φ(x) (Hendrycks & Gimpel 2016)."""
    return 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))


def gelu_matrix(m):
    return [[gelu(x) for x in row] for row in m]


def split_columns(m, parts):
    """[A_1 | A_2 | ...]: ``parts`` equal column blocks."""
    _, cols = check_matrix("matrix", m)
    divides("tp", parts, "columns", cols)
    width = cols // parts
    return [[row[i * width:(i + 1) * width] for row in m] for i in range(parts)]


def split_rows(m, parts):
    """[B_1 ; B_2 ; ...]: ``parts`` equal row blocks."""
    rows, _ = check_matrix("matrix", m)
    divides("tp", parts, "rows", rows)
    height = rows // parts
    return [[list(row) for row in m[i * height:(i + 1) * height]] for i in range(parts)]


def sum_matrices(matrices):
    """What an AllReduce(sum) leaves on every rank."""
    if not isinstance(matrices, (list, tuple)) or not matrices:
        raise ValueError(f"matrices must be a non-empty list of matrices, got {matrices!r}")
    total = [list(row) for row in matrices[0]]
    for m in matrices[1:]:
        total = add(total, m)
    return total


# ---- MLP: column-parallel then row-parallel ------------------------------------

@dataclass(frozen=True)
class ParallelMlp:
    """Per-rank intermediates of Megatron's MLP, Y = GeLU(X·A)·B (Shoeybi 2019 Sec. 3)."""

    a_shards: list  # A_i = columns of A, [h, 4h/t]
    b_shards: list  # B_i = rows of B, [4h/t, h]
    pre_activations: list  # X·A_i, [tokens, 4h/t]: no communication needed
    activations: list  # GeLU(X·A_i): GeLU is elementwise, so it commutes with a column split
    partial_outputs: list  # GeLU(X·A_i)·B_i, [tokens, h]: full-shaped but only a partial sum
    output: list  # Σ_i partial_outputs: the one AllReduce (f̄) of the block


def _check_mlp(x, a, b):
    _, h = check_matrix("x", x)
    a_rows, ffn = check_matrix("a", a)
    b_rows, b_cols = check_matrix("b", b)
    if a_rows != h or b_rows != ffn:
        raise ValueError(f"shapes do not chain: x [*, {h}], a [{a_rows}, {ffn}], b [{b_rows}, {b_cols}]")
    return ffn


def serial_mlp(x, a, b):
    """GeLU(X·A)·B on one device, the reference the shards must reproduce."""
    _check_mlp(x, a, b)
    return matmul(gelu_matrix(matmul(x, a)), b)


def tensor_parallel_mlp(x, a, b, tp):
    """Shoeybi 2019 Sec. 3, Eq. 3 and Fig. 3a: A split by columns, B by rows, one AllReduce."""
    tp = positive_int("tp", tp)
    ffn = _check_mlp(x, a, b)
    divides("tp", tp, "ffn_hidden", ffn)
    a_shards = split_columns(a, tp)
    b_shards = split_rows(b, tp)
    pre = [matmul(x, a_i) for a_i in a_shards]
    act = [gelu_matrix(p) for p in pre]
    partial = [matmul(z, b_i) for z, b_i in zip(act, b_shards)]
    return ParallelMlp(a_shards, b_shards, pre, act, partial, sum_matrices(partial))


@dataclass(frozen=True)
class RowSplitFirstLinear:
    """The cut Megatron rejects: A split by rows, so X·A = Σ X_i·A_i (Shoeybi 2019 Sec. 3)."""

    partial_products: list  # X_i·A_i: each is only a partial sum of X·A
    gelu_of_sum: list  # GeLU(Σ X_i A_i): the correct activation, needs an AllReduce first
    sum_of_gelus: list  # Σ GeLU(X_i A_i): what you would get without that AllReduce
    max_abs_difference: float  # > 0: GeLU is not additive


def row_split_first_linear(x, a, tp):
    """Show why GeLU(X1A1 + X2A2) != GeLU(X1A1) + GeLU(X2A2) (Shoeybi 2019 Sec. 3, Eq. 2)."""
    tp = positive_int("tp", tp)
    _, h = check_matrix("x", x)
    a_rows, _ = check_matrix("a", a)
    if a_rows != h:
        raise ValueError(f"x has {h} columns but a has {a_rows} rows")
    divides("tp", tp, "hidden", h)
    x_shards = split_columns(x, tp)
    a_shards = split_rows(a, tp)
    partial = [matmul(x_i, a_i) for x_i, a_i in zip(x_shards, a_shards)]
    right = gelu_matrix(sum_matrices(partial))
    wrong = sum_matrices([gelu_matrix(p) for p in partial])
    diff = max(abs(r - w) for rr, wr in zip(right, wrong) for r, w in zip(rr, wr))
    return RowSplitFirstLinear(partial, right, wrong, diff)


# ---- attention: split by heads, output projection row-parallel ------------------

def _softmax_rows(scores):
    out = []
    for row in scores:
        top = max(row)
        exps = [math.exp(v - top) if v != -math.inf else 0.0 for v in row]
        total = math.fsum(exps)
        out.append([e / total for e in exps])
    return out


def _head_attention(q, k, v, causal):
    d = len(q[0])
    scale = 1.0 / math.sqrt(d)
    scores = [[math.fsum(a * b for a, b in zip(qi, kj)) * scale if (not causal or j <= i) else -math.inf
               for j, kj in enumerate(k)] for i, qi in enumerate(q)]
    return matmul(_softmax_rows(scores), v)


def _columns(m, start, stop):
    return [row[start:stop] for row in m]


def _check_attention(x, wq, wk, wv, wo, heads):
    _, h = check_matrix("x", x)
    for name, w in (("wq", wq), ("wk", wk), ("wv", wv), ("wo", wo)):
        shape = check_matrix(name, w)
        if shape != (h, h):
            raise ValueError(f"{name} must be [{h}, {h}], got {list(shape)}")
    heads = positive_int("heads", heads)
    divides("heads", heads, "hidden", h)
    return h, heads


def serial_attention(x, wq, wk, wv, wo, heads, *, causal=False):
    """Multi-head self-attention on one device: concat_heads(softmax(QKᵀ/√d)V)·Wo."""
    h, heads = _check_attention(x, wq, wk, wv, wo, heads)
    d = h // heads
    q, k, v = matmul(x, wq), matmul(x, wk), matmul(x, wv)
    per_head = [_head_attention(_columns(q, i * d, (i + 1) * d), _columns(k, i * d, (i + 1) * d),
                                _columns(v, i * d, (i + 1) * d), causal) for i in range(heads)]
    concat = [sum((ph[r] for ph in per_head), []) for r in range(len(x))]
    return matmul(concat, wo)


@dataclass(frozen=True)
class ParallelAttention:
    """Per-rank intermediates of head-parallel attention (Shoeybi 2019 Sec. 3, Fig. 3b)."""

    heads_per_rank: list  # head indices owned by each rank
    q_shards: list  # X·Wq_i, [tokens, h/t]: Wq split by columns = by heads
    k_shards: list
    v_shards: list
    head_outputs: list  # each rank's heads, concatenated, [tokens, h/t]: no communication
    wo_shards: list  # rows of Wo, [h/t, h]
    partial_outputs: list  # head_outputs_i·Wo_i, [tokens, h]: partial sums
    output: list  # Σ_i partial_outputs: the block's one AllReduce (f̄)


def tensor_parallel_attention(x, wq, wk, wv, wo, heads, tp, *, causal=False):
    """Heads split across ranks; QKV column-parallel, output projection row-parallel."""
    h, heads = _check_attention(x, wq, wk, wv, wo, heads)
    tp = positive_int("tp", tp)
    divides("tp", tp, "heads", heads)
    d = h // heads
    local = heads // tp
    q_sh, k_sh, v_sh = split_columns(wq, tp), split_columns(wk, tp), split_columns(wv, tp)
    wo_sh = split_rows(wo, tp)
    qs, ks, vs, outs, partials, owned = [], [], [], [], [], []
    for r in range(tp):
        q, k, v = matmul(x, q_sh[r]), matmul(x, k_sh[r]), matmul(x, v_sh[r])
        per_head = [_head_attention(_columns(q, i * d, (i + 1) * d), _columns(k, i * d, (i + 1) * d),
                                    _columns(v, i * d, (i + 1) * d), causal) for i in range(local)]
        concat = [sum((ph[row] for ph in per_head), []) for row in range(len(x))]
        qs.append(q)
        ks.append(k)
        vs.append(v)
        outs.append(concat)
        partials.append(matmul(concat, wo_sh[r]))
        owned.append(list(range(r * local, (r + 1) * local)))
    return ParallelAttention(owned, qs, ks, vs, outs, wo_sh, partials, sum_matrices(partials))


# ---- sequence parallelism on real matrices ----------------------------------------

def reduce_scatter_rows(partials, tp):
    """ReduceScatter along the sequence (row) axis: rank i keeps rows i of Σ partials.

    Korthikanti 2022 Sec. 4.2.2, ḡ: replaces the AllReduce after the row-parallel linear.
    """
    tp = positive_int("tp", tp)
    if len(partials) != tp:
        raise ValueError(f"partials must hold one matrix per rank ({tp}), got {len(partials)}")
    return split_rows(sum_matrices(partials), tp)


def all_gather_rows(chunks):
    """AllGather along the sequence axis: every rank ends with the full matrix (g)."""
    return [list(row) for chunk in chunks for row in chunk]


# ---- collectives per layer ---------------------------------------------------------

@dataclass(frozen=True)
class Collective:
    kind: str  # "AllReduce", "ReduceScatter" or "AllGather"
    phase: str  # "forward" or "backward"
    where: str
    elements: int  # of the full (unsharded) activation tensor, b·s·h
    message_bytes: float  # elements x bytes_per_element
    wire_bytes_per_rank: float  # ring algorithm: AllReduce 2(t-1)/t, RS and AG (t-1)/t each


@dataclass(frozen=True)
class LayerCommunication:
    collectives: tuple
    count: int
    message_bytes: float  # Σ message sizes
    wire_bytes_per_rank: float  # Σ bytes each rank sends


# Shoeybi 2019 Sec. 3 / Fig. 4: f is identity forward, AllReduce backward; f̄ (the paper's g)
# is AllReduce forward, identity backward. Names follow Korthikanti 2022 Fig. 4.
_TP_PLAN = (
    ("AllReduce", "forward", "f̄ after attention (row-parallel output projection)"),
    ("AllReduce", "forward", "f̄ after MLP (row-parallel fc2)"),
    ("AllReduce", "backward", "f before attention (input gradient of column-parallel QKV)"),
    ("AllReduce", "backward", "f before MLP (input gradient of column-parallel fc1)"),
)
_SP_PLAN = (  # Korthikanti 2022 Sec. 4.2.2 / Fig. 5: g is AllGather forward, ReduceScatter backward
    ("AllGather", "forward", "g before attention (sequence -> tensor region)"),
    ("ReduceScatter", "forward", "ḡ after attention (tensor -> sequence region)"),
    ("AllGather", "forward", "g before MLP"),
    ("ReduceScatter", "forward", "ḡ after MLP"),
    ("ReduceScatter", "backward", "g before attention"),
    ("AllGather", "backward", "ḡ after attention"),
    ("ReduceScatter", "backward", "g before MLP"),
    ("AllGather", "backward", "ḡ after MLP"),
)
_SP_REGATHER = (  # Korthikanti Sec. 4.2.2: Y is kept sequence-sharded, re-gathered in backward
    ("AllGather", "backward", "re-gather layernorm output for the QKV weight gradient"),
    ("AllGather", "backward", "re-gather layernorm output for the fc1 weight gradient"),
)


def tp_layer_communication(micro_batch, seq, hidden, tp, *, bytes_per_element=2,
                           sequence_parallel=False, count_backward_regather=False):
    """Collectives one transformer layer issues per training step on a TP group.

    Plain TP: 4 AllReduces of b·s·h elements (2 forward f̄, 2 backward f; Shoeybi 2019 Sec. 3).
    With SP: each becomes a ReduceScatter + AllGather moving the same bytes (Korthikanti
    2022 Sec. 4.2.2). ``count_backward_regather`` adds the two extra backward AllGathers
    that Megatron uses to avoid storing the full layernorm output (overlapped with compute
    in the paper, and left out of its "no extra communication" argument). t = 1: none.
    """
    b = positive_int("micro_batch", micro_batch)
    s = positive_int("seq", seq)
    h = positive_int("hidden", hidden)
    tp = positive_int("tp", tp)
    bpe = positive_int("bytes_per_element", bytes_per_element)
    if sequence_parallel:
        divides("tp", tp, "seq", s)
    if tp == 1:
        return LayerCommunication((), 0, 0.0, 0.0)
    elements = b * s * h
    message = _as_float("message_bytes", elements * bpe)
    if sequence_parallel:
        plan = _SP_PLAN + (_SP_REGATHER if count_backward_regather else ())
    else:
        plan = _TP_PLAN
    collectives = tuple(
        Collective(kind, phase, where, elements, message,
                   collectives_model.volume_bytes_per_rank(kind.lower(), message, tp))
        for kind, phase, where in plan)
    return LayerCommunication(collectives, len(collectives),
                              math.fsum(c.message_bytes for c in collectives),
                              math.fsum(c.wire_bytes_per_rank for c in collectives))


# ---- per-rank GEMM shapes and an illustrative efficiency curve ----------------------

@dataclass(frozen=True)
class GemmShape:
    name: str
    tokens: int  # m: rows of the activation, b·s
    in_features: int  # k
    out_features: int  # n: weight is [k, n] on this rank
    narrow_dim: int  # min(k, n): the side that shrinks as t grows
    flops: float  # 2·m·k·n per forward


def layer_gemm_shapes(hidden, tp, *, micro_batch=1, seq=1, ffn_hidden=None):
    """Per-rank weight shapes of one layer at TP degree t (Shoeybi 2019 Sec. 3).

    QKV [h, 3h/t], output projection [h/t, h], fc1 [h, ffn/t], fc2 [ffn/t, h].
    """
    h = positive_int("hidden", hidden)
    tp = positive_int("tp", tp)
    m = positive_int("micro_batch", micro_batch) * positive_int("seq", seq)
    ffn = 4 * h if ffn_hidden is None else positive_int("ffn_hidden", ffn_hidden)
    divides("tp", tp, "hidden", h)
    divides("tp", tp, "ffn_hidden", ffn)
    shapes = (("qkv", h, 3 * h // tp), ("attention_output", h // tp, h),
              ("fc1", h, ffn // tp), ("fc2", ffn // tp, h))
    return tuple(GemmShape(name, m, k, n, min(k, n), _as_float("flops", 2 * m * k * n))
                 for name, k, n in shapes)


def gemm_efficiency(width, half_width=ILLUSTRATIVE_HALF_EFFICIENCY_WIDTH):
    """ILLUSTRATIVE model of GEMM efficiency vs width: w/(w + w_half). Not a measurement.

    It only encodes the qualitative fact that narrow matrix multiplies cannot fill a GPU
    (Narayanan 2021 Sec. 3.3 and Fig. 16 show the effect; they fit no curve). Real
    efficiency depends on the kernel, tile sizes, dtype and the other two dimensions.
    """
    width = positive("width", _as_float("width", width))
    half_width = positive("half_width", _as_float("half_width", half_width))
    return width / (width + half_width)


__all__ = [
    "ILLUSTRATIVE_HALF_EFFICIENCY_WIDTH", "random_matrix", "matmul", "add", "gelu",
    "gelu_matrix", "split_columns", "split_rows", "sum_matrices", "ParallelMlp",
    "serial_mlp", "tensor_parallel_mlp", "RowSplitFirstLinear", "row_split_first_linear",
    "serial_attention", "ParallelAttention", "tensor_parallel_attention",
    "reduce_scatter_rows", "all_gather_rows", "Collective", "LayerCommunication",
    "tp_layer_communication", "GemmShape", "layer_gemm_shapes", "gemm_efficiency",
]
