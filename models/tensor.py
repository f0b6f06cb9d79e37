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
from operator import mul as _mul

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


_PLAIN_NUMBERS = {int, float}


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
        # a whole row of plain ints and floats, checked in C (every product checks its
        # operands: Figure 11's ~3,000 values per state took ~3 ms one by one in Pyodide)
        if set(map(type, row)) <= _PLAIN_NUMBERS and all(map(math.isfinite, row)):
            continue
        for value in row:  # find and name the offending value
            finite(name, value)
    return len(m), width


def matmul(a, b):
    """Plain triple-loop product of an [m, k] and a [k, n] matrix."""
    _, k = check_matrix("a", a)
    k2, _ = check_matrix("b", b)
    if k != k2:
        raise ValueError(f"a has {k} columns but b has {k2} rows")
    columns = list(zip(*b))
    # map(_mul, ...) multiplies in C: ~3x faster than a generator in Pyodide
    return [[math.fsum(map(_mul, row, col)) for col in columns] for row in a]


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


# ---- one block, step by step, in either order (Figure 11) -------------------------------

from models import hardware  # noqa: E402  (this section's imports, kept with it)
from models._validate import choice, finite_result  # noqa: E402

BLOCKS = ("mlp", "attention")
ORDERS = ("column_row", "row_first")
PANEL_LAYOUTS = ("replicated", "columns", "rows", "partial", "single")
# Sizes of the printed demo: 4 tokens, h = 8, MLP width 4h = 32, 8 heads of width 1, so that
# T = 1, 2, 4, 8 divide every split dimension in both orders.
DEMO_TOKENS, DEMO_HIDDEN, DEMO_HEADS = 4, 8, 8


@dataclass(frozen=True)
class Panel:
    """One matrix as the ranks hold it.

    layout "replicated": the same matrix on every rank (one piece); "columns" / "rows": rank i
    owns the i-th column / row block (one piece per rank, in rank order); "partial": every
    rank holds a full-shaped partial sum (one piece per rank); "single": the one-device
    reference (one piece)."""

    name: str
    layout: str
    pieces: tuple
    weight: bool = False  # a weight matrix (rows are input features), not activations (rows are tokens)


@dataclass(frozen=True)
class WalkStep:
    title: str
    panels: tuple
    collective_after: str  # "" or the collective that ends this step ("AllReduce", "AllGather")


@dataclass(frozen=True)
class BlockWalkthrough:
    block: str
    order: str
    tp: int
    steps: tuple
    output: list  # what every rank ends with
    serial_output: list  # the one-device result
    collectives_forward: int
    max_abs_error: float  # max |output - serial_output|


def _product(a, b):
    """``matmul`` without re-checking its inputs: for matrices this section built itself."""
    columns = list(zip(*b))
    return [[math.fsum(map(_mul, row, col)) for col in columns] for row in a]


def _multi_head(q, k, v, heads):
    """Heads side by side: concat_i softmax(Q_i K_iᵀ/√d) V_i (Vaswani et al. 2017 Eq. 1),
    non-causal, like ``_head_attention`` but without re-checking matrices built here."""
    d = len(q[0]) // heads
    scale = 1.0 / math.sqrt(d)
    out = [[] for _ in q]
    for i in range(heads):
        qs, ks, vs = _columns(q, i * d, (i + 1) * d), _columns(k, i * d, (i + 1) * d), _columns(v, i * d, (i + 1) * d)
        weights = _softmax_rows([[math.fsum(map(_mul, qi, kj)) * scale for kj in ks] for qi in qs])
        for row, head_row in zip(out, _product(weights, vs)):
            row.extend(head_row)
    return out


def _concat_columns(pieces):
    return [sum((list(p[r]) for p in pieces), []) for r in range(len(pieces[0]))]


def _max_abs_difference(a, b):
    return max(abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra, rb))


def _fused_qkv_by_rank(wq, wk, wv, tp):
    """[Wq_0 Wk_0 Wv_0 | Wq_1 Wk_1 Wv_1 | ...]: each rank's heads' Q, K, V columns side by side,
    the way Megatron-LM stores its fused query_key_value weight, so rank i owns one block."""
    return _concat_columns([_concat_columns(triple) for triple in
                            zip(split_columns(wq, tp), split_columns(wk, tp), split_columns(wv, tp))])


def block_collectives(block, order, micro_batch, seq, hidden, tp, *, bytes_per_element=2, ffn_hidden=None):
    """Forward collectives of one block (Shoeybi 2019 Sec. 3).

    column_row: one AllReduce of the b·s·h output (f̄). row_first: the first linear's partial
    sums must be AllReduced before the nonlinearity (b·s·ffn elements for the MLP, the fused
    b·s·3h Q/K/V for attention), and the second linear, split by columns, leaves its output
    split too: an AllGather of b·s·h. t = 1: none.
    """
    choice("block", block, BLOCKS)
    choice("order", order, ORDERS)
    b = positive_int("micro_batch", micro_batch)
    s = positive_int("seq", seq)
    h = positive_int("hidden", hidden)
    tp = positive_int("tp", tp)
    bpe = positive_int("bytes_per_element", bytes_per_element)
    ffn = 4 * h if ffn_hidden is None else positive_int("ffn_hidden", ffn_hidden)
    if tp == 1:
        return ()
    if order == "column_row":
        plan = (("AllReduce", h, "f̄ after the row-parallel second linear"),)
    else:
        first = ffn if block == "mlp" else 3 * h
        plan = (("AllReduce", first, "partial sums of the row-parallel first linear, before the nonlinearity"),
                ("AllGather", h, "outputs of the column-parallel second linear"))
    return tuple(
        Collective(kind, "forward", where, b * s * width, _as_float("message_bytes", b * s * width * bpe),
                   collectives_model.volume_bytes_per_rank(kind.lower(), _as_float("message_bytes", b * s * width * bpe), tp))
        for kind, width, where in plan)


def _demo_inputs(block, seed):
    base = 4 * int(seed)
    x = random_matrix(DEMO_TOKENS, DEMO_HIDDEN, base)
    if block == "mlp":
        return x, (random_matrix(DEMO_HIDDEN, 4 * DEMO_HIDDEN, base + 1), random_matrix(4 * DEMO_HIDDEN, DEMO_HIDDEN, base + 2))
    return x, tuple(random_matrix(DEMO_HIDDEN, DEMO_HIDDEN, base + 1 + i) for i in range(4))


def block_walkthrough(block, order, tp, seed=0):
    """One MLP or attention block on T ranks, every intermediate kept (Shoeybi 2019 Sec. 3).

    column_row (Megatron): the first linear split by columns, the nonlinearity local, the
    second by rows, one AllReduce; output equals the serial block to rounding.
    row_first: the first linear split by rows gives partial sums; here each rank applies the
    nonlinearity to its partial sum (GeLU, or attention's softmax) before they are added,
    then the second linear runs split by columns and an AllGather assembles the output. The
    sum of nonlinearities is not the nonlinearity of the sum (Shoeybi Sec. 3, Eq. 2), so the
    output is wrong: ``max_abs_error`` says by how much. Demo sizes: DEMO_TOKENS x DEMO_HIDDEN.
    """
    choice("block", block, BLOCKS)
    choice("order", order, ORDERS)
    tp = positive_int("tp", tp)
    divides("tp", tp, "hidden", DEMO_HIDDEN)
    seed = _whole_seed(seed)
    x, weights = _demo_inputs(block, seed)
    first, second = ("GeLU", "MLP") if block == "mlp" else ("attention", "attention")
    if block == "mlp":
        a, b = weights
        serial = serial_mlp(x, a, b)
    else:
        wq, wk, wv, wo = weights
        serial = serial_attention(x, wq, wk, wv, wo, DEMO_HEADS)
        a, b = _concat_columns([wq, wk, wv]), wo
    a_name = "A" if block == "mlp" else "W_qkv"
    b_name = "B" if block == "mlp" else "W_o"
    if order == "column_row":
        if block == "mlp":
            run = tensor_parallel_mlp(x, a, b, tp)
            first_out, local, partial, output = run.pre_activations, run.activations, run.partial_outputs, run.output
            a_shards, b_shards = run.a_shards, run.b_shards
        else:
            run = tensor_parallel_attention(x, wq, wk, wv, wo, DEMO_HEADS, tp)
            a_shards = split_columns(_fused_qkv_by_rank(wq, wk, wv, tp), tp)
            first_out = [_concat_columns([q, k, v]) for q, k, v in zip(run.q_shards, run.k_shards, run.v_shards)]
            local, partial, output, b_shards = run.head_outputs, run.partial_outputs, run.output, run.wo_shards
        steps = (
            WalkStep(f"Column-parallel: the whole X times each rank's columns of {a_name}",
                     (Panel("X", "replicated", (x,)), Panel(a_name, "columns", tuple(a_shards), True),
                      Panel(f"X{a_name}", "columns", tuple(first_out))), ""),
            WalkStep(f"{first[0].upper() + first[1:]} on each rank's own columns: no communication",
                     (Panel(first, "columns", tuple(local)),), ""),
            WalkStep(f"Row-parallel: its columns times its rows of {b_name}: partial sums",
                     (Panel(b_name, "rows", tuple(b_shards), True), Panel("partial sums", "partial", tuple(partial))),
                     "AllReduce"),
            WalkStep("The AllReduce adds them: every rank holds the output",
                     (Panel("output", "replicated", (output,)), Panel("one device", "single", (serial,))), ""),
        )
    else:
        x_shards, a_shards = split_columns(x, tp), split_rows(a, tp)
        partial_first = [_product(x_i, a_i) for x_i, a_i in zip(x_shards, a_shards)]
        if block == "mlp":
            local = [gelu_matrix(p) for p in partial_first]
            right = gelu_matrix(_product(x, a))
        else:
            h = DEMO_HIDDEN
            local = [_multi_head(_columns(p, 0, h), _columns(p, h, 2 * h), _columns(p, 2 * h, 3 * h), DEMO_HEADS)
                     for p in partial_first]
            full = _product(x, a)
            right = _multi_head(_columns(full, 0, h), _columns(full, h, 2 * h), _columns(full, 2 * h, 3 * h), DEMO_HEADS)
        summed = sum_matrices(local)
        b_shards = split_columns(b, tp)
        outs = [_product(summed, b_i) for b_i in b_shards]
        output = _concat_columns(outs)
        steps = (
            WalkStep(f"Rows first: X's columns times {a_name}'s rows give partial sums",
                     (Panel("X", "columns", tuple(x_shards)), Panel(a_name, "rows", tuple(a_shards), True),
                      Panel(f"X{a_name}", "partial", tuple(partial_first))), ""),
            WalkStep(f"{first[0].upper() + first[1:]} of each partial sum, then the AllReduce: too late",
                     (Panel(f"{first} per rank", "partial", tuple(local)),
                      Panel(f"{first} of the sum", "single", (right,))), "AllReduce"),
            WalkStep(f"The summed {first} times {b_name} split by columns",
                     (Panel("summed", "replicated", (summed,)), Panel(b_name, "columns", tuple(b_shards), True),
                      Panel("output slices", "columns", tuple(outs))), "AllGather"),
            WalkStep("The AllGather assembles the output: compare with one device",
                     (Panel("output", "replicated", (output,)), Panel("one device", "single", (serial,))), ""),
        )
    count = len(block_collectives(block, order, 1, DEMO_TOKENS, DEMO_HIDDEN, tp))
    return BlockWalkthrough(block, order, tp, steps, output, serial, count, _max_abs_difference(output, serial))


def _whole_seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    return seed


# ---- per-layer time on a TP group (Figure 12) ---------------------------------------------

@dataclass(frozen=True)
class TpLayerTime:
    """One transformer layer's training-step time on one rank of a TP group of T."""

    tp: int
    forward_compute_s: float  # Σ 2mkn / (peak x gemm_efficiency(narrow side)) over the 4 weight GEMMs
    backward_compute_s: float  # twice the forward: input and weight gradients (Narayanan 2021 Sec. 5.1)
    comm_s: float  # the 4 AllReduces of b·s·h, none hidden: the next op needs the sum
    allreduce_s: float  # one of them
    layer_s: float
    comm_fraction: float  # comm_s / layer_s
    gemm_efficiency: float  # flop-weighted efficiency of this rank's GEMMs
    crosses_node: bool  # T > GPUs per node: the AllReduces leave the scale-up fabric
    link: str  # key of models.hardware.LINKS the AllReduces run on
    speedup: float  # layer time at T = 1 / at T


def _tp_compute_s(micro_batch, seq, hidden, tp, peak_flops_per_s):
    shapes = layer_gemm_shapes(hidden, tp, micro_batch=micro_batch, seq=seq)
    flops = math.fsum(g.flops for g in shapes)
    forward_s = math.fsum(g.flops / (peak_flops_per_s * gemm_efficiency(g.narrow_dim)) for g in shapes)
    return forward_s, flops / (peak_flops_per_s * forward_s)


def tp_layer_time(micro_batch, seq, hidden, tp, *, gpu="h100_sxm", gpus_per_node=8, inter_link="ib_ndr",
                  bytes_per_element=2):
    """Per-layer time at TP degree T: shrinking GEMMs plus exposed AllReduces.

    Compute: the four weight GEMMs of ``layer_gemm_shapes`` at the GPU's dense peak times the
    ILLUSTRATIVE ``gemm_efficiency`` of each GEMM's narrow side, backward = 2 x forward
    (Narayanan 2021 Sec. 5.1); attention's score and value products and elementwise ops are
    left out. Communication: ``tp_layer_communication``'s 4 AllReduces (Shoeybi 2019 Sec. 3),
    each a ring ``collectives.time_s`` on the GPU's scale-up link while T fits in a node, and on
    ``inter_link`` (one NIC per GPU) once it does not. Nothing overlaps them.
    """
    spec = hardware.gpu(gpu)
    gpus_per_node = positive_int("gpus_per_node", gpus_per_node)
    hardware.link(inter_link)
    tp = positive_int("tp", tp)
    crosses = tp > gpus_per_node
    link = hardware.link(inter_link if crosses else spec.scale_up_link)
    forward_s, efficiency = _tp_compute_s(micro_batch, seq, hidden, tp, spec.peak_bf16_dense_flops_per_s)
    comm = tp_layer_communication(micro_batch, seq, hidden, tp, bytes_per_element=bytes_per_element)
    price = collectives_model.cost_function("allreduce", tp, alpha_s=link.alpha_s,
                                            bandwidth_bytes_per_s=link.bandwidth_bytes_per_s)
    one_s = price(comm.collectives[0].message_bytes) if comm.collectives else 0.0
    comm_s = math.fsum(price(c.message_bytes) for c in comm.collectives)
    layer_s = finite_result("layer_s", 3 * forward_s + comm_s)
    serial_s = 3 * _tp_compute_s(micro_batch, seq, hidden, 1, spec.peak_bf16_dense_flops_per_s)[0]
    return TpLayerTime(tp, forward_s, 2 * forward_s, comm_s, one_s, layer_s, comm_s / layer_s, efficiency,
                       crosses, link.key, serial_s / layer_s)


def tp_forward_bytes_per_rank(micro_batch, seq, hidden, tp, *, sequence_parallel=False, bytes_per_element=2):
    """Bytes one rank sends in one layer's forward pass on its TP group.

    Plain TP: 2 AllReduces, 2(t-1)/t x 2bsh each (ring); with SP: 2 AllGathers + 2
    ReduceScatters, (t-1)/t each: the same total (Korthikanti 2022 Sec. 4.2.2).
    """
    comm = tp_layer_communication(micro_batch, seq, hidden, tp, bytes_per_element=bytes_per_element,
                                  sequence_parallel=sequence_parallel)
    return math.fsum(c.wire_bytes_per_rank for c in comm.collectives if c.phase == "forward")


__all__ += [
    "tp_forward_bytes_per_rank", "BLOCKS", "ORDERS", "PANEL_LAYOUTS", "DEMO_TOKENS", "DEMO_HIDDEN", "DEMO_HEADS", "Panel", "WalkStep",
    "BlockWalkthrough", "block_collectives", "block_walkthrough", "TpLayerTime", "tp_layer_time",
]
