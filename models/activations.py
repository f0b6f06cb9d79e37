"""Activation memory of a GPT-style transformer, per layer and per pipeline stage.

Models the bytes that the forward pass must keep for the backward pass, following
Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models" (MLSys'23): Sec. 4.1 (per-layer breakdown), Table 2 (tensor/sequence
parallelism, selective/full recomputation), Sec. 4.2.3 (pipeline schedules) and
Sec. 4.3 (embedding and output layer). The paper assumes 16-bit activations,
1-byte dropout masks and fp32 logits; so do we.

What it does not model: allocator fragmentation, temporary buffers that live only
inside one kernel, workspace of the communication library, the output-tensor
deallocation trick of Appendix B (which the paper's measured figures include), or
architectures other than the plain GPT block (no SwiGLU, no GQA: K and V are as
wide as Q).

Symbols as in the paper: s sequence length, b microbatch size, h hidden size,
a attention heads, t tensor-parallel degree, p pipeline stages, v vocabulary,
L layers.
"""
from dataclasses import dataclass

from models._validate import choice, divides, finite_result, positive_int

RECOMPUTE_OPTIONS = ("none", "selective", "full")
SCHEDULES = ("gpipe", "1f1b", "interleaved")


@dataclass(frozen=True)
class LayerActivations:
    """Bytes one transformer layer keeps for backward, split by where they live."""

    outside_tp_bytes: float  # layernorm inputs, dropout masks, block inputs: split by t only with SP
    inside_tp_bytes: float  # inside the TP regions: Q/K/V, GeLU input, fc2 input ...
    attention_scores_bytes: float  # the 5as^2b term: softmax output, its dropout mask and output
    total_bytes: float


def _as_float(name, value):
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name}={value} is too large to represent as a float") from None




def _check_layer_args(seq, micro_batch, hidden, heads, tp, sequence_parallel, recompute,
                      flash_attention, ffn_hidden):
    seq = positive_int("seq", seq)
    micro_batch = positive_int("micro_batch", micro_batch)
    hidden = positive_int("hidden", hidden)
    heads = positive_int("heads", heads)
    tp = positive_int("tp", tp)
    ffn_hidden = 4 * hidden if ffn_hidden is None else positive_int("ffn_hidden", ffn_hidden)
    for name, flag in (("sequence_parallel", sequence_parallel), ("flash_attention", flash_attention)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be True or False, got {flag!r}")
    choice("recompute", recompute, RECOMPUTE_OPTIONS)
    divides("heads", heads, "hidden", hidden)
    divides("tp", tp, "heads", heads)
    if sequence_parallel:
        divides("tp", tp, "seq", seq)
    return seq, micro_batch, hidden, heads, tp, ffn_hidden


def layer_activations(seq, micro_batch, hidden, heads, *, tp=1, sequence_parallel=False,
                      recompute="none", flash_attention=False, ffn_hidden=None):
    """Per-layer activation bytes with their breakdown (Korthikanti 2022 Sec. 4.1, Table 2).

    ``ffn_hidden`` defaults to 4h, where the totals reduce to the Table 2 forms;
    other widths use the Sec. 4.1 itemisation (fc2 input and GeLU input are 2 bytes
    x s·b·ffn each), which is Megatron's ``18 + 4·ffn/h`` in theoretical_memory_usage.py.
    """
    seq, micro_batch, hidden, heads, tp, ffn = _check_layer_args(
        seq, micro_batch, hidden, heads, tp, sequence_parallel, recompute, flash_attention,
        ffn_hidden)
    sb = _as_float("seq", seq) * _as_float("micro_batch", micro_batch)
    sbh = sb * _as_float("hidden", hidden)

    if recompute == "full":
        # Sec. 5: only the layer input (2sbh, fp16) is checkpointed; with SP that input
        # is itself split along the sequence, so each rank keeps 2sbh/t.
        kept = finite_result("the activation byte count", 2 * sbh / (tp if sequence_parallel else 1))
        return LayerActivations(kept, 0.0, 0.0, kept)

    # Sec. 4.1/4.2.2: 10sbh sits outside the TP regions -- attention block input (2sbh)
    # and output dropout mask (sbh), MLP input (2sbh) and dropout mask (sbh), two
    # layernorm inputs (4sbh). Sequence parallelism splits exactly these by t.
    outside = 10 * sbh / (tp if sequence_parallel else 1)
    # Inside the TP regions: Q, K (4sbh), V (2sbh), projection input (2sbh) = 8sbh, and
    # the MLP's fc2 input plus GeLU input, 2·s·b·ffn each (= 16sbh at ffn = 4h).
    inside = (8 * sbh + 4 * sb * _as_float("ffn_hidden", ffn)) / tp
    # Score matrix: softmax output 2as²b + dropout mask as²b + dropout output 2as²b.
    # Selective recompute drops it (Sec. 5); FlashAttention never materialises it, so for
    # memory it is the same as selective (it keeps only O(a·s·b) softmax statistics).
    if recompute == "selective" or flash_attention:
        scores = 0.0
    else:
        scores = 5.0 * _as_float("heads", heads) * _as_float("seq", seq) * sb / tp
    return LayerActivations(outside, inside, scores, finite_result("the activation byte count", outside + inside + scores))


def per_layer_bytes(seq, micro_batch, hidden, heads, *, tp=1, sequence_parallel=False,
                    recompute="none", flash_attention=False, ffn_hidden=None):
    """Activation bytes one layer keeps on one TP rank (Korthikanti 2022 Table 2).

    none:            sbh(10 + 24/t + 5as/(ht));  with SP: (sbh/t)(34 + 5as/h)
    selective:       sbh(10 + 24/t);             with SP: 34·sbh/t
    full:            2sbh;                       with SP: 2sbh/t
    ``flash_attention=True`` removes the 5as/h term, like selective recompute.
    """
    return layer_activations(seq, micro_batch, hidden, heads, tp=tp,
                             sequence_parallel=sequence_parallel, recompute=recompute,
                             flash_attention=flash_attention, ffn_hidden=ffn_hidden).total_bytes


def interleave_memory_factor(stages, virtual_stages):
    """Extra activation memory of the interleaved schedule: 1 + (p-1)/(p·v).

    Korthikanti 2022 Sec. 4.2.3 (there v is called m, "number of interleaving
    stages"); same factor as Megatron-LM theoretical_memory_usage.py.
    """
    positive_int("stages", stages)
    positive_int("virtual_stages", virtual_stages)
    return 1.0 + (stages - 1) / (stages * virtual_stages)


def inflight_microbatches(schedule, stages, microbatches, virtual_stages=1):
    """How many microbatches' worth of this stage's layers the first stage holds at peak.

    GPipe: all m forwards run before any backward (Huang et al. 2019), so m.
    1F1B: warm-up of p forwards, then one-in-one-out (Narayanan et al. 2021 Sec. 2.2.1;
    Korthikanti Sec. 4.2.3), so min(p, m).
    Interleaved: p·(1 + (p-1)/(p·v)) = p + (p-1)/v (Korthikanti Sec. 4.2.3); may be
    fractional because it counts stage-sized slices of L/p layers. Megatron requires m
    to be a multiple of p for this schedule, and so do we.
    """
    choice("schedule", schedule, SCHEDULES)
    positive_int("stages", stages)
    positive_int("microbatches", microbatches)
    positive_int("virtual_stages", virtual_stages)
    if schedule == "gpipe":
        return _as_float("microbatches", microbatches)
    if schedule == "1f1b":
        return _as_float("microbatches", min(stages, microbatches))
    divides("stages", stages, "microbatches", microbatches)
    return stages * interleave_memory_factor(stages, virtual_stages)


@dataclass(frozen=True)
class StageActivations:
    """Peak activation bytes on the first pipeline stage (the most loaded one)."""

    per_layer_bytes: float
    layers_per_stage: int
    inflight_microbatches: float
    layer_stack_bytes: float  # per_layer x layers_per_stage x in-flight microbatches
    embedding_bytes: float  # embedding dropout mask, one per in-flight microbatch
    output_layer_bytes: float  # final layernorm + output projection input + fp32 logits (p = 1 only)
    total_bytes: float


def first_stage_bytes(seq, micro_batch, hidden, heads, layers, *, tp=1, pp=1,
                      sequence_parallel=False, recompute="none", flash_attention=False,
                      schedule="1f1b", microbatches=None, virtual_stages=1,
                      vocab=None, ffn_hidden=None):
    """Activation bytes on the first pipeline stage, per TP rank.

    Layer stack: Korthikanti 2022 Eq. 5 -- the first stage of 1F1B keeps p microbatches
    of L/p layers, i.e. L layers' worth, times (1 + (p-1)/(p·v)) when interleaved.
    ``microbatches`` defaults to ``pp`` (a full pipeline). With ``vocab`` given, adds
    Sec. 4.3's terms: embedding dropout sbh per in-flight microbatch (/t with SP) and, only
    when p = 1, the final layernorm and output-projection inputs (2sbh + 2sbh, /t with SP)
    plus fp32 logits 4sbv/t. The paper calls these terms negligible; at p = 1 the logits
    are in fact ~1-2% of the layer stack for its 22B model, so they are worth showing.
    """
    layers = positive_int("layers", layers)
    pp = positive_int("pp", pp)
    divides("pp", pp, "layers", layers)
    if schedule == "interleaved":
        positive_int("virtual_stages", virtual_stages)
        divides("pp*virtual_stages", pp * virtual_stages, "layers", layers)
    m = pp if microbatches is None else microbatches
    per_layer = per_layer_bytes(seq, micro_batch, hidden, heads, tp=tp,
                                sequence_parallel=sequence_parallel, recompute=recompute,
                                flash_attention=flash_attention, ffn_hidden=ffn_hidden)
    inflight = inflight_microbatches(schedule, pp, m, virtual_stages)
    layers_per_stage = layers // pp
    stack = per_layer * _as_float("layers", layers_per_stage) * inflight

    embedding = 0.0
    output = 0.0
    if vocab is not None:
        positive_int("vocab", vocab)
        sb = _as_float("seq", seq) * _as_float("micro_batch", micro_batch)
        sbh = sb * _as_float("hidden", hidden)
        outside_tp = tp if sequence_parallel else 1
        embedding = sbh * inflight / outside_tp
        if pp == 1:
            output = 4 * sbh / outside_tp + 4.0 * sb * _as_float("vocab", vocab) / tp
    return StageActivations(per_layer, layers_per_stage, inflight, stack, embedding, output,
                            finite_result("the activation byte count", stack + embedding + output))


def fraction_of_tp_baseline(seq, micro_batch, hidden, heads, *, tp, sequence_parallel=False,
                            recompute="none", flash_attention=False, ffn_hidden=None):
    """Per-layer bytes relative to plain tensor parallelism (Korthikanti 2022 Fig. 7, Eq. 2).

    Pipeline factors cancel in this ratio because they multiply every configuration alike.
    """
    baseline = per_layer_bytes(seq, micro_batch, hidden, heads, tp=tp, ffn_hidden=ffn_hidden)
    this = per_layer_bytes(seq, micro_batch, hidden, heads, tp=tp,
                           sequence_parallel=sequence_parallel, recompute=recompute,
                           flash_attention=flash_attention, ffn_hidden=ffn_hidden)
    return this / baseline


def score_term_ratio(seq, hidden, heads):
    """The dimensionless 5as/h of Table 2 (GPT-3: 80, MT-NLG: 64; Korthikanti Sec. 5)."""
    seq = _as_float("seq", positive_int("seq", seq))
    hidden = _as_float("hidden", positive_int("hidden", hidden))
    heads = _as_float("heads", positive_int("heads", heads))
    return finite_result("the activation byte count", 5.0 * heads * seq) / hidden


def selective_recompute_pays(seq, hidden, heads):
    """True when the attention-score term outweighs the rest: 5as/h > 34 (Korthikanti Sec. 5)."""
    return score_term_ratio(seq, hidden, heads) > 34


__all__ = [
    "RECOMPUTE_OPTIONS", "SCHEDULES", "LayerActivations", "StageActivations",
    "layer_activations", "per_layer_bytes", "interleave_memory_factor",
    "inflight_microbatches", "first_stage_bytes", "fraction_of_tp_baseline",
    "selective_recompute_pays", "score_term_ratio",
]


def sp_saving_fraction(seq, micro_batch, hidden, heads, *, tp, recompute="none", flash_attention=False,
                       ffn_hidden=None):
    """1 - (bytes with sequence parallelism) / (bytes without), at the same recompute setting
    (Korthikanti 2022 Table 2): 10/(10 + 24/t + 5as/(ht)) x (1 - 1/t) with no recompute,
    10(1 - 1/t)/(10 + 24/t) with selective, 1 - 1/t with full. t = 1: 0."""
    without = per_layer_bytes(seq, micro_batch, hidden, heads, tp=tp, recompute=recompute,
                              flash_attention=flash_attention, ffn_hidden=ffn_hidden)
    with_sp = per_layer_bytes(seq, micro_batch, hidden, heads, tp=tp, sequence_parallel=True,
                              recompute=recompute, flash_attention=flash_attention, ffn_hidden=ffn_hidden)
    return 1.0 - with_sp / without


__all__ += ["sp_saving_fraction"]
