"""One toy model cut seven ways, frame by frame through one step (Figure 20).

What it models
--------------
A toy GPT (``TOY``: 4 layers of width 256, 12h^2 = 786,432 weights each, of which the
attention's 4h^2 and the MLP's 8h^2; a batch of 2,048 tokens) trained with mixed-precision
Adam (16 bytes of model state per parameter, ZeRO Sec. 3.1) on 2 or 4 devices, under each
of seven strategies. A step is ``FRAMES``: the forward pass layer by layer, the backward
pass layer by layer, the optimizer step. For every strategy and frame: what each device
holds of each layer's state, which devices compute, and which collectives run, with the
bytes they put on the wire (the sum over ranks of what each sends, ring algorithms:
``collectives.volume_bytes_per_rank``). The collectives are the strategy cards'
(``strategies.CARDS``) for this toy:

* ``dp``: every layer everywhere; each layer's gradient AllReduced as its backward ends
  (DDP buckets). ``zero`` (ZeRO-3 / FSDP): 1/N of everything; AllGather a layer's weights
  before its forward and again before its backward, ReduceScatter its gradient.
* ``hsdp``: ZeRO-3 inside groups of 2 devices, replicated across groups; the backward adds
  an AllReduce of each gradient shard across the replicas (PyTorch FSDP HYBRID_SHARD).
* ``tp``: 1/N of every weight matrix; two AllReduces of the activations per layer forward
  and two backward (Shoeybi et al. 2019).
* ``pp``: layers split into N stages, one microbatch: an activation crosses each stage
  boundary forward, its gradient backward; the other stages idle (the bubble).
* ``cp``: every weight everywhere, 1/N of the tokens each: ring attention passes K and V
  blocks N-1 hops per layer (``context.ring_communication``), twice the bytes in backward
  (K, V and their gradients), and the replicated weights' gradients are AllReduced.
* ``ep``: attention replicated, the MLP split into ``EXPERTS`` experts spread over the
  devices, 1/N of the tokens each: an All-to-All dispatches the tokens to their expert
  and another combines them (top-1, uniform routing; ``experts.moe_alltoall_bytes``), in
  each pass; the replicated attention's gradient is AllReduced.

What it does not model: time (see ``step_timeline``), microbatching, activations in memory,
load imbalance between experts, or anything a real model adds (norms, embeddings).
"""
from dataclasses import dataclass

from models import collectives, context, experts
from models._validate import choice, non_negative_int

__all__ = ["Toy", "TOY", "STRATEGIES", "DEVICES", "EXPERTS", "HSDP_GROUP", "Frame", "FRAMES", "Transfer",
           "PanelFrame", "panel", "held_fraction"]

STRATEGIES = ("dp", "zero", "hsdp", "tp", "pp", "cp", "ep")
DEVICES = (2, 4)
EXPERTS = 4  # per layer
HSDP_GROUP = 2
BYTES = 2  # bf16 weights, gradients and activations
STATE_BYTES_PER_PARAM = 16  # 2 + 2 + 12, mixed-precision Adam


@dataclass(frozen=True)
class Toy:
    layers: int
    hidden: int
    tokens: int

    @property
    def layer_params(self):
        return 12 * self.hidden * self.hidden

    @property
    def attention_params(self):
        return 4 * self.hidden * self.hidden

    @property
    def params(self):
        return self.layers * self.layer_params

    @property
    def state_bytes(self):
        return STATE_BYTES_PER_PARAM * self.params

    @property
    def weight_bytes(self):
        """One layer's bf16 weights (its gradient is the same size)."""
        return BYTES * self.layer_params

    @property
    def activation_bytes(self):
        """The batch's activations at a layer boundary: tokens x hidden, bf16."""
        return BYTES * self.tokens * self.hidden


TOY = Toy(layers=4, hidden=256, tokens=2048)


@dataclass(frozen=True)
class Frame:
    index: int
    phase: str  # "forward", "backward" or "optimizer"
    layer: int | None  # the layer being computed (None for the optimizer step)


FRAMES = (
    *(Frame(j, "forward", j) for j in range(TOY.layers)),
    *(Frame(TOY.layers + k, "backward", TOY.layers - 1 - k) for k in range(TOY.layers)),
    Frame(2 * TOY.layers, "optimizer", None),
)


@dataclass(frozen=True)
class Transfer:
    op: str  # a collective of ``collectives.OPS``
    what: str  # what it carries, in words
    groups: tuple  # device groups it runs in (sendrecv: one (source, destination) pair)
    wire_bytes: float  # summed over every sending rank


@dataclass(frozen=True)
class PanelFrame:
    strategy: str
    devices: int
    frame: Frame
    holdings: tuple  # holdings[device][layer]: fraction of that layer's state the device holds
    computing: tuple  # computing[device]: True if it runs the frame's layer (or its optimizer step)
    transfers: tuple
    moving_bytes: float  # sum of the transfers' wire bytes
    held_fraction: float  # device 0's share of the whole model state


def _ring_bytes(op, nbytes, groups):
    """Bytes on the wire for ``op`` run in each of ``groups``: every member sends the busiest
    rank's volume (ring algorithms are symmetric)."""
    return sum(len(g) * collectives.volume_bytes_per_rank(op, nbytes, len(g)) for g in groups)


def _transfer(op, what, groups, nbytes):
    groups = tuple(tuple(g) for g in groups if len(g) > 1)
    return Transfer(op, what, groups, float(_ring_bytes(op, nbytes, groups))) if groups else None


def _holdings(strategy, n):
    expert_share = 8 / 12 * min(1.0, (EXPERTS // n) / EXPERTS)
    per_layer = {
        "dp": lambda d, j: 1.0, "cp": lambda d, j: 1.0,
        "zero": lambda d, j: 1 / n, "tp": lambda d, j: 1 / n,
        "hsdp": lambda d, j: 1 / min(HSDP_GROUP, n),
        "pp": lambda d, j: 1.0 if j * n // TOY.layers == d else 0.0,
        "ep": lambda d, j: 4 / 12 + expert_share,
    }[strategy]
    return tuple(tuple(per_layer(d, j) for j in range(TOY.layers)) for d in range(n))


def held_fraction(strategy, devices):
    """Device 0's share of the toy's model state under ``strategy`` on ``devices`` devices."""
    choice("strategy", strategy, STRATEGIES)
    choice("devices", devices, DEVICES)
    return sum(_holdings(strategy, devices)[0]) / TOY.layers


def _transfers(strategy, n, frame):
    everyone = (tuple(range(n)),)
    j = frame.layer
    weights, grads, acts = TOY.weight_bytes, TOY.weight_bytes, TOY.activation_bytes
    if frame.phase == "optimizer":
        return ()
    forward = frame.phase == "forward"
    out = []
    if strategy == "dp" and not forward:
        out.append(_transfer("allreduce", f"layer {j + 1}'s gradient", everyone, grads))
    elif strategy == "zero":
        out.append(_transfer("allgather", f"layer {j + 1}'s weights", everyone, weights))
        if not forward:
            out.append(_transfer("reducescatter", f"layer {j + 1}'s gradient", everyone, grads))
    elif strategy == "hsdp":
        g = min(HSDP_GROUP, n)
        shards = tuple(tuple(range(s, s + g)) for s in range(0, n, g))
        replicas = tuple(tuple(range(i, n, g)) for i in range(g))
        out.append(_transfer("allgather", f"layer {j + 1}'s weights, in each group", shards, weights))
        if not forward:
            out.append(_transfer("reducescatter", f"layer {j + 1}'s gradient, in each group", shards, grads))
            out.append(_transfer("allreduce", "each gradient shard, across groups", replicas, grads / g))
    elif strategy == "tp":
        label = "activations" if forward else "activation gradients"
        out.append(_transfer("allreduce", f"layer {j + 1}'s {label}, twice", everyone, 2 * acts))
    elif strategy == "pp":
        stage = j * n // TOY.layers
        if forward and stage < n - 1 and (j + 1) * n // TOY.layers != stage:
            out.append(Transfer("sendrecv", f"layer {j + 1}'s output activations", ((stage, stage + 1),), float(acts)))
        if not forward and stage > 0 and (j - 1) * n // TOY.layers != stage:
            out.append(Transfer("sendrecv", f"the gradient of layer {j + 1}'s input", ((stage, stage - 1),), float(acts)))
    elif strategy == "cp":
        ring = context.ring_communication(TOY.tokens, TOY.hidden, n, bytes_per_element=BYTES)
        factor = 1 if forward else 2
        what = "K and V blocks around the ring" if forward else "K, V and their gradients around the ring"
        out.append(Transfer("sendrecv", what, everyone, float(n * factor * ring.forward_bytes_per_rank)))
        if not forward:
            out.append(_transfer("allreduce", f"layer {j + 1}'s gradient", everyone, grads))
    elif strategy == "ep":
        per_rank = experts.moe_alltoall_bytes(1, 1, TOY.tokens // n, TOY.hidden, BYTES, ep=n).per_direction_bytes
        for step in (("dispatch", "combine") if forward else ("combine", "dispatch")):
            out.append(_transfer("alltoall", f"tokens to their experts ({step})", everyone, per_rank))
        if not forward:
            out.append(_transfer("allreduce", f"layer {j + 1}'s attention gradient", everyone,
                                 BYTES * TOY.attention_params))
    return tuple(t for t in out if t is not None)


def panel(strategy, devices, frame_index):
    """What ``strategy`` holds, computes and sends on ``devices`` devices at one frame."""
    choice("strategy", strategy, STRATEGIES)
    choice("devices", devices, DEVICES)
    non_negative_int("frame_index", frame_index)
    if frame_index >= len(FRAMES):
        raise ValueError(f"frame_index must be < {len(FRAMES)}, got {frame_index}")
    frame = FRAMES[frame_index]
    holdings = _holdings(strategy, devices)
    if frame.layer is None:
        computing = tuple(True for _ in range(devices))
    else:
        computing = tuple(holdings[d][frame.layer] > 0 for d in range(devices))
    transfers = _transfers(strategy, devices, frame)
    return PanelFrame(strategy, devices, frame, holdings, computing, transfers,
                      float(sum(t.wire_bytes for t in transfers)), held_fraction(strategy, devices))
