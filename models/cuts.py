"""One training step cut six ways (Figure 02): what a device keeps, what it sends, and when.

What it models
--------------
A dense decoder of ``params`` (Psi) parameters in ``layers`` (L) layers, its hidden size h from
Psi ~= 12 L h^2 (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", Eq. 2.1;
embeddings left out), rounded to a multiple of 128. One optimizer step is ``microbatches`` (m)
microbatches of ``micro_batch`` (b) sequences of ``seq`` (s) tokens for each model replica.
Memory is the mixed-precision Adam ledger, 16 bytes per parameter (ZeRO Sec. 3.1); the wire
carries bf16, 2 bytes per element. The cut divides one thing ``degree`` (d) ways:

  cut        keeps per device                    sends per step (collective, frequency)
  data       16 Psi (replicated)                 AllReduce of 2 Psi gradient bytes, once
  zero       16 Psi / d (ZeRO-3)                 AllGather fwd + AllGather bwd + ReduceScatter, per layer
  tensor     16 Psi / d                          4 AllReduces of b s h per layer per microbatch
  pipeline   16 Psi / d                          Send of b s h per microbatch each way per boundary
  context    16 Psi (replicated)                 ring attention: K, V blocks forward, K, V, dK, dV backward
  expert     16 Psi (1/3 + 2/3 / d)              4 All-to-Alls of k b s h per layer per microbatch

"Sends" is what ONE device puts on the wire in one step (the part that leaves it), with the
ring / direct algorithms of ``models.collectives`` (``volume_bytes_per_rank``); for the pipeline,
an interior stage, which sends activations forward and gradients backward. For the expert cut the
model's MLP weights (8h^2 of every 12h^2, two thirds of Psi) are the expert set, ``experts`` per
layer, each token routed to ``top_k`` of them, every layer an MoE layer; the degree must divide
the expert count (the EP card: at most E). Ring attention's backward pass circulates K and V again
with their gradients dK and dV, twice the forward bytes (Liu et al. 2023, "Ring Attention with
Blockwise Transformers", Sec. 3; TransformerEngine's context-parallel attention does the same).

What it does not model: embeddings and the vocabulary, attention's GQA savings, DDP's bucketing
(its AllReduce is counted as one), combinations of cuts, overlap, and time (``models.collectives``
turns these bytes into seconds).
"""
import math
from dataclasses import dataclass

from models import collectives, context, experts as experts_model, memory, tensor
from models._validate import at_most, choice, divides, positive, positive_int

__all__ = ["CUTS", "CUT_LABELS", "CARD_KEYS", "SEQ", "MICRO_BATCH", "MICROBATCHES", "TOP_K", "EXPERTS",
           "BYTES_PER_ELEMENT", "hidden_size", "CutStep", "step_cut"]

CUTS = ("data", "zero", "tensor", "pipeline", "context", "expert")
CUT_LABELS = {"data": "Data", "zero": "ZeRO-3 / FSDP", "tensor": "Tensor", "pipeline": "Pipeline",
              "context": "Context", "expert": "Expert"}
CARD_KEYS = {"data": "dp", "zero": "zero", "tensor": "tp", "pipeline": "pp", "context": "cp", "expert": "ep"}

SEQ = 4096  # tokens per sequence
MICRO_BATCH = 1  # sequences per microbatch
MICROBATCHES = 8  # microbatches per optimizer step, per model replica
TOP_K = 2  # experts per token
EXPERTS = 64  # experts per MoE layer
BYTES_PER_ELEMENT = 2  # bf16 activations and gradients on the wire
LEDGER_BYTES_PER_PARAM = 16  # mixed-precision Adam: 2 + 2 + 12 (ZeRO Sec. 3.1)
EXPERT_SHARE = 2 / 3  # the MLP's 8h^2 of a layer's 12h^2 (Kaplan et al. 2020, Eq. 2.1)
MAX_DEGREE = 2**20


def hidden_size(params, layers):
    """h from Psi ~= 12 L h^2 (Kaplan et al. 2020, Eq. 2.1), to the nearest multiple of 128 (>= 128)."""
    positive("params", params)
    layers = positive_int("layers", layers)
    return max(1, round(math.sqrt(params / (12 * layers)) / 128)) * 128


@dataclass(frozen=True)
class CutStep:
    """One cut of one step, for one device."""

    cut: str
    degree: int
    hidden: int  # h, from the parameter count and the layers
    model_state_bytes: float  # the ledger this device keeps (16 bytes per parameter, divided by the cut)
    comm_bytes: float  # what this device sends in one step over the cut's group
    messages: int  # collectives (or sends) this device takes part in per step
    collective: str  # machine name: "allreduce", "allgather+reducescatter", "sendrecv", "alltoall"
    what: str  # the collective in a few words, e.g. "AllReduce of gradients"
    when: str  # how often it fires, in a few words
    group: str  # which ranks take part


def step_cut(cut, params, layers, degree, *, seq=SEQ, micro_batch=MICRO_BATCH, microbatches=MICROBATCHES,
             top_k=TOP_K, experts=EXPERTS, bytes_per_element=BYTES_PER_ELEMENT):
    """What one device keeps and sends in one step when ``cut`` divides the step ``degree`` ways."""
    choice("cut", cut, CUTS)
    h = hidden_size(params, layers)
    d = at_most("degree", positive_int("degree", degree), MAX_DEGREE)
    b, s = positive_int("micro_batch", micro_batch), positive_int("seq", seq)
    m = positive_int("microbatches", microbatches)
    bpe = positive_int("bytes_per_element", bytes_per_element)
    ledger = LEDGER_BYTES_PER_PARAM * float(params)
    grads = bpe * float(params)  # one bf16 copy of the weights or the gradients
    per_step = layers * m  # layer-microbatch pairs each device runs (all layers but pipeline's)
    if cut == "data":
        sent = collectives.volume_bytes_per_rank("allreduce", grads, d)
        return CutStep(cut, d, h, ledger, sent, 1, "allreduce", "AllReduce of gradients",
                       "once per step", f"the {d} data-parallel replicas")
    if cut == "zero":
        ops = memory.comm_collectives(3)
        sent = math.fsum(collectives.volume_bytes_per_rank(c.op, c.psi * grads, d) for c in ops)
        return CutStep(cut, d, h, memory.model_states(params, d, 3).total_bytes, sent, len(ops) * layers,
                       "allgather+reducescatter", "AllGather + ReduceScatter",
                       "3 per layer per step",
                       f"the {d} ranks sharing the model state")
    if cut == "tensor":
        comm = tensor.tp_layer_communication(b, s, h, d, bytes_per_element=bpe)
        return CutStep(cut, d, h, ledger / d, comm.wire_bytes_per_rank * per_step, comm.count * per_step,
                       "allreduce", "AllReduce of activations",
                       "4 per layer per microbatch",
                       f"the {d} ranks splitting each layer")
    if cut == "pipeline":
        if d > layers:
            raise ValueError(f"degree={d} exceeds layers={layers}: every pipeline stage needs a layer")
        directions = 1 if d == 2 else 2  # an interior stage sends activations on and gradients back
        activation = collectives.volume_bytes_per_rank("sendrecv", float(b * s * h * bpe), 2)
        return CutStep(cut, d, h, ledger / d, directions * activation * m, directions * m, "sendrecv",
                       "Send/Recv of activations",
                       "per microbatch per boundary", "neighbouring stages")
    if cut == "context":
        ring = context.ring_communication(s, h, d, micro_batch=b, bytes_per_element=bpe)
        return CutStep(cut, d, h, ledger, 3 * ring.forward_bytes_per_rank * per_step,
                       2 * ring.transfers * per_step, "sendrecv", "ring Send/Recv of K and V",
                       "per attention per microbatch",
                       f"the {d} ranks sharing each sequence")
    divides("degree", d, "experts", positive_int("experts", experts))
    a2a = experts_model.moe_alltoall_bytes(top_k, b, s, h, bpe, d)
    return CutStep(cut, d, h, ledger * (1 - EXPERT_SHARE) + ledger * EXPERT_SHARE / d,
                   4 * a2a.off_rank_bytes_per_direction * per_step, 4 * per_step, "alltoall",
                   "All-to-All of routed tokens", "4 per layer per microbatch",
                   f"the {d} ranks holding the experts")
