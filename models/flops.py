"""FLOPs and parameters of a GPT-style transformer, and what utilisation they imply.

Models the dense matrix multiplications (GEMMs) of a decoder-only transformer with
ffn = 4h, following Narayanan et al. 2021, "Efficient Large-Scale Language Model
Training on GPU Clusters Using Megatron-LM" (SC'21) Sec. 5.1 and Appendix, and
Korthikanti et al. 2022 Appendix A (model vs hardware FLOPs, MFU/HFU as in
Chowdhery et al. 2022). A FLOP is one multiply or one add, whatever the precision.

What it does not model: elementwise work (softmax, layernorm, GeLU, optimizer
step) -- so every count here is a lower bound, as the papers say -- nor causal
masking savings, SwiGLU, GQA, mixture-of-experts, or attention kernels that skip
masked blocks.

Symbols: B global batch (sequences per iteration), s sequence length, l layers,
h hidden size, V vocabulary, P parameters, T training tokens, n GPUs,
X achieved FLOP/s per GPU.
"""
from dataclasses import dataclass

from models._validate import choice, finite_result, positive, positive_int

RECOMPUTE_OPTIONS = ("none", "selective", "full")
SECONDS_PER_DAY = 86400.0


def _as_float(name, value):
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"{name}={value} is too large to represent as a float") from None




def _positive_number(name, value):
    """``positive`` that also takes ints too large for a float, as a ValueError not a crash."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = _as_float(name, value)
    return positive(name, value)


def _recompute_mode(recompute):
    """Accept the paper's boolean (Eq. 3 'assumes activation recomputation') or a mode name."""
    if recompute is True:
        return "full"
    if recompute is False:
        return "none"
    return choice("recompute", recompute, RECOMPUTE_OPTIONS)


def _dims(**sizes):
    return [_as_float(name, positive_int(name, value)) for name, value in sizes.items()]


def gpt_params(layers, hidden, vocab, seq):
    """Parameters of a GPT model: 12lh²(1 + 13/(12h) + (V + s)/(12lh)) (Narayanan 2021 Eq. 2).

    That is 12h² weights + 13h biases/layernorm per layer, plus word (V·h) and learned
    position (s·h) embeddings, the output layer tied to the word embedding.
    """
    l, h, v, s = _dims(layers=layers, hidden=hidden, vocab=vocab, seq=seq)
    return finite_result("parameter count", 12 * l * h * h + 13 * l * h + (v + s) * h)


@dataclass(frozen=True)
class FlopsBreakdown:
    """FLOPs of one training iteration (forward + backward over B sequences)."""

    forward_transformer: float  # 24Bsh² + 4Bs²h per layer (Korthikanti App. A)
    forward_logits: float  # 2BshV
    backward: float  # 2 x forward: gradients w.r.t. inputs and weights
    recompute: float  # extra forward work re-done during backward
    model_flops: float  # forward + backward: what the model needs
    hardware_flops: float  # model_flops + recompute: what the GPUs execute


def flops_breakdown(batch, seq, layers, hidden, vocab, *, recompute=False):
    """Per-iteration GEMM FLOPs, itemised (Narayanan 2021 Appendix; Korthikanti 2022 App. A).

    recompute: False/"none"; True/"full" re-runs each layer's forward (Narayanan Eq. 3);
    "selective" re-runs QKᵀ and attention over V, 4Bs²h per layer, as Korthikanti App. A
    itemises it. (The paper's Eq. 8 prints a larger total; see ``korthikanti_eq8_hardware_flops``.)
    The logit layer is never recomputed.
    """
    mode = _recompute_mode(recompute)
    b, s, l, h, v = _dims(batch=batch, seq=seq, layers=layers, hidden=hidden, vocab=vocab)
    per_layer_dense = 24 * b * s * h * h  # QKV 6Bsh² + projection 2Bsh² + MLP 16Bsh²
    per_layer_attention = 4 * b * s * s * h  # QKᵀ 2Bs²h + attention over V 2Bs²h
    forward_transformer = l * (per_layer_dense + per_layer_attention)
    forward_logits = 2 * b * s * h * v
    backward = 2 * (forward_transformer + forward_logits)
    if mode == "full":
        extra = forward_transformer
    elif mode == "selective":
        extra = l * per_layer_attention
    else:
        extra = 0.0
    model = forward_transformer + forward_logits + backward
    return FlopsBreakdown(forward_transformer, forward_logits, backward, extra,
                          finite_result("model FLOPs", model), finite_result("hardware FLOPs", model + extra))


def training_flops(batch, seq, layers, hidden, vocab, *, recompute=False):
    """FLOPs the hardware executes per iteration.

    recompute=False: 72Bslh²(1 + s/(6h) + V/(12lh))   (Korthikanti 2022 Eq. 7, model FLOPs)
    recompute=True:  96Bslh²(1 + s/(6h) + V/(16lh))   (Narayanan 2021 Eq. 3)
    "selective":     72Bslh²(1 + 2s/(9h) + V/(12lh))  (Eq. 7 + 4Bs²h·l, Korthikanti App. A text)
    """
    return flops_breakdown(batch, seq, layers, hidden, vocab, recompute=recompute).hardware_flops


def korthikanti_eq8_hardware_flops(batch, seq, layers, hidden, vocab):
    """Korthikanti 2022 Eq. 8 exactly as printed: 72Bslh²(1 + s/(3h) + V/(12lh)).

    Kept to reproduce the paper's Table 5 HFU column and its Sec. 5 "2.7% / 1.6%" selective
    overheads, which use it. It adds 12Bs²h per layer, three times the 4Bs²h its own text
    itemises, and for s > 3h it would make selective recomputation cost more than full
    recomputation; ``training_flops(..., recompute="selective")`` uses the itemised count.
    """
    b, s, l, h, v = _dims(batch=batch, seq=seq, layers=layers, hidden=hidden, vocab=vocab)
    return finite_result("hardware FLOPs", 72 * b * s * l * h * h * (1 + s / (3 * h) + v / (12 * h * l)))


def model_flops(batch, seq, layers, hidden, vocab):
    """FLOPs the model needs per iteration, however it is run (Korthikanti 2022 Eq. 7)."""
    return training_flops(batch, seq, layers, hidden, vocab, recompute=False)


def six_n_d(params, tokens):
    """The 6·N·D rule of thumb for training FLOPs (Kaplan et al. 2020 Sec. 2.1).

    2ND forward + 4ND backward, ignoring attention-score and logit terms; Llama 3 (Sec.
    3.2.1) quotes 3.8e25 FLOPs for 405B parameters on 15.6T tokens.
    """
    _positive_number("params", params)
    _positive_number("tokens", tokens)
    return finite_result("6ND", 6.0 * params * tokens)


def iterations(tokens, batch, seq):
    """Iterations to consume T tokens: I = T/(B·s) (Narayanan 2021 Sec. 5.1)."""
    _positive_number("tokens", tokens)
    b, s = _dims(batch=batch, seq=seq)
    return finite_result("iterations", tokens / (b * s))


def training_time_s(tokens, params, gpus, flops_per_s_per_gpu, *, recompute=True):
    """End-to-end training time ≈ 8TP/(nX) (Narayanan 2021 Eq. 4).

    Eq. 4 follows from Eq. 3 with 6h ≫ s and 16lh ≫ V: F ≈ 96Bslh² = 8·(Bs)·(12lh²) ≈ 8·Bs·P.
    Without recomputation the same steps applied to the 72-form give 6TP/(nX), the
    6·N·D rule.
    """
    _positive_number("tokens", tokens)
    _positive_number("params", params)
    n = _as_float("gpus", positive_int("gpus", gpus))
    _positive_number("flops_per_s_per_gpu", flops_per_s_per_gpu)
    if not isinstance(recompute, bool):
        raise ValueError(f"recompute must be True or False, got {recompute!r}")
    factor = 8.0 if recompute else 6.0
    return finite_result("training time", factor * tokens * params / (n * flops_per_s_per_gpu))


def iteration_time_s(flops_per_step, gpus, flops_per_s_per_gpu):
    """Seconds per iteration when n GPUs each sustain X FLOP/s: F/(nX)."""
    _positive_number("flops_per_step", flops_per_step)
    n = _as_float("gpus", positive_int("gpus", gpus))
    _positive_number("flops_per_s_per_gpu", flops_per_s_per_gpu)
    return finite_result("step time", flops_per_step / (n * flops_per_s_per_gpu))


def achieved_flops_per_s_per_gpu(flops_per_step, step_time_s, gpus):
    """Throughput per GPU: F/(t·n), as in Narayanan 2021 Table 1 ("achieved teraFLOP/s")."""
    _positive_number("flops_per_step", flops_per_step)
    _positive_number("step_time_s", step_time_s)
    n = _as_float("gpus", positive_int("gpus", gpus))
    return finite_result("FLOP/s", flops_per_step / (step_time_s * n))


def utilization(flops_per_step, step_time_s, gpus, peak_flops_per_s):
    """FLOP/s per GPU over peak FLOP/s (Korthikanti 2022 Sec. 6.3, after Chowdhery 2022).

    With model FLOPs this is MFU; with hardware FLOPs (recompute included) it is HFU.
    Can exceed 1 only if the inputs are inconsistent -- that is the caller's signal.
    """
    _positive_number("peak_flops_per_s", peak_flops_per_s)
    return achieved_flops_per_s_per_gpu(flops_per_step, step_time_s, gpus) / peak_flops_per_s


@dataclass(frozen=True)
class Utilization:
    model_flops: float
    hardware_flops: float
    model_flops_per_s_per_gpu: float
    hardware_flops_per_s_per_gpu: float
    mfu: float  # model FLOPs utilisation
    hfu: float  # hardware FLOPs utilisation


def mfu_hfu(batch, seq, layers, hidden, vocab, *, step_time_s, gpus, peak_flops_per_s,
            recompute="selective"):
    """MFU and HFU of one iteration (Korthikanti 2022 Sec. 6.3, Table 5, App. A).

    MFU counts only what the model needs (Eq. 7); HFU counts what the GPUs actually ran,
    including recomputation (itemised 4Bs²h per layer for selective, Narayanan Eq. 3 for
    full). Table 5's published HFU used Eq. 8: see ``korthikanti_eq8_hardware_flops``.
    """
    flops = flops_breakdown(batch, seq, layers, hidden, vocab, recompute=recompute)
    model_rate = achieved_flops_per_s_per_gpu(flops.model_flops, step_time_s, gpus)
    hardware_rate = achieved_flops_per_s_per_gpu(flops.hardware_flops, step_time_s, gpus)
    _positive_number("peak_flops_per_s", peak_flops_per_s)
    return Utilization(flops.model_flops, flops.hardware_flops, model_rate, hardware_rate,
                       model_rate / peak_flops_per_s, hardware_rate / peak_flops_per_s)


__all__ = [
    "RECOMPUTE_OPTIONS", "SECONDS_PER_DAY", "FlopsBreakdown", "Utilization",
    "gpt_params", "flops_breakdown", "training_flops", "korthikanti_eq8_hardware_flops",
    "model_flops", "six_n_d",
    "iterations", "training_time_s", "iteration_time_s", "achieved_flops_per_s_per_gpu",
    "utilization", "mfu_hfu",
]
