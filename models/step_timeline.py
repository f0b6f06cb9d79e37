"""Where each strategy's communication sits in one training step (Figure 18).

What it models
--------------
One device's training step -- forward, backward, optimizer -- for a GPT model (``shapes``)
on ``gpus`` GPUs with any subset of six strategies enabled: ``dp`` (DDP gradient AllReduce),
``fsdp`` (ZeRO-3 sharding; with ``dp`` too it becomes HSDP), ``tp``, ``pp``, ``cp`` (ring
attention) and ``ep`` (expert parallelism). Every collective is placed at the point of the
step where it is issued, and the compute waits only when a collective's consumer is reached
before the collective is done: "distance from the consumer" (reference article, "Overlap,
strategy by strategy"; ``overlap.AXIS_COLLECTIVES``). Per axis:

* TP: two AllReduces of b·s·h per layer forward and two backward (Shoeybi et al. 2019
  Sec. 3; ``tensor.tp_layer_communication``); the very next op consumes each, so each is
  exposed in full (``overlap.hidden_comm``).
* EP: an All-to-All before and after each expert MLP, each pass (``experts.moe_alltoall_bytes``,
  top-1 routing, which keeps a token's FLOPs those of the dense MLP: Fedus et al. 2021 Sec. 2).
  Tokens are split over the TP group first, as Megatron-Core's MoE requires sequence
  parallelism with TP. Nothing runs between dispatch and the expert GEMM: exposed.
* CP: ring attention, C-1 hops of a K and V block per layer (``context.ring_communication``,
  split over TP ranks' heads); hop k+1 travels while block k computes, so each hop's
  exposed part is ``hidden_comm("cp", hop, block)``. Backward sends K, V and their
  gradients: twice the bytes, against twice the compute (this module's assumption).
* FSDP: per layer an AllGather of its weights, prefetched when the previous layer starts,
  again in backward, and a ReduceScatter of its gradient; one communication stream in issue
  order, exactly as ``fsdp.simulate_fsdp_step`` schedules it (tested against it).
  With PP the weights stay gathered between forward and backward (torchtitan's default
  for FSDP with pipelining), so backward has no AllGathers.
* DP: gradient buckets (``ddp.assign_buckets``, 25 MiB) AllReduced on one stream as soon
  as their last gradient is ready, strictly in order, as ``ddp.backward_timeline`` does
  (tested against it); with HSDP each rank reduces its 1/g shard after the ReduceScatter.
  The optimizer step consumes them.
* PP: 1F1B over m microbatches. One activation (and in backward one gradient) of
  b·s·h/t bytes per microbatch crosses each stage boundary (Narayanan et al. 2021
  Sec. 4.1, scatter/gather across the TP ranks); each hides behind the next microbatch's
  compute (``hidden_comm("pp", ...)``). The bubble, (P-1)/m of the compute
  (``pipeline.bubble_over_ideal``), is idle time, not communication.

Degrees: TP takes a node's 8 GPUs, CP 2, PP 8 (fewer if the GPUs run out); the rest is the
data-parallel degree D (only if ``dp`` or ``fsdp`` is on: without a data axis the other GPUs
are unused). HSDP shards in groups of 8 data ranks. EP takes up to 8 of the D x C ranks.
Rank order tp, cp, dp, pp fastest first (``mesh.Mesh`` defaults); a group whose ranks span
more than one node of 8 uses the network ``link``, otherwise the GPU's scale-up link.

Memory (``StepMemory``, does it fit?): the model-state ledger of the first stage's layers on
one TP rank at Megatron-LM's byte sizes, ``MODEL_STATE_BYTES_PER_PARAM`` = 18 (bf16 weights 2,
fp32 main gradients 4, fp32 master weights and two Adam moments 12:
megatron/training/theoretical_memory_usage.py; the planner's ledger, ``models.planner.model``),
divided by the FSDP shard group as ZeRO-3 with one prefetched layer gathered
(``memory.fsdp_peak_memory``); plus activations, Korthikanti et al. 2022 Table 2 without
recomputation (the step runs no recompute) and with FlashAttention (no s x s scores), for
the microbatches in flight on the first stage (1F1B: up to P; without PP one: gradient
accumulation runs one microbatch's forward and backward at a time), each rank holding s/C
tokens. EP keeps the dense model's weights per rank (its experts are not counted apart).

Compute runs at ``COMPUTE_EFFICIENCY`` of the GPU's dense BF16 peak. The optimizer step is
memory-bound: ``OPTIMIZER_BYTES_PER_PARAM`` bytes of HBM traffic per parameter it updates.

The batch: every layout runs the same global batch of ``global_batch`` sequences per
optimizer step, so switching an axis on or off changes how the same work is shared, never
how much work there is. Each of the D data-parallel replicas takes ceil(global_batch / D)
sequences (the busiest one sets the step; ``StepTimeline.uneven`` when they do not split
evenly). A replica runs its sequences as m microbatches and accumulates their gradients:
with PP in the 1F1B schedule, microbatches of one sequence, or of the fewest sequences (a power
of two) that keep them to ``MAX_MICROBATCHES`` (Megatron-LM's num_microbatches = batch /
(micro batch x DP)); without PP one microbatch after another, as few as fit (the largest
microbatch whose activations fit beside the model state, spread evenly; the smallest when none
fits), so a replica never holds more than one microbatch's activations. The timeline shows
each layer's work summed over the microbatches, all forwards, then the bubble, then all
backwards (the real schedules interleave them microbatch by microbatch; the sums are the
same); a collective issued per microbatch has its per-call cost multiplied by m, and so has
FSDP's gather and ReduceScatter without PP (the weights are gathered again for every
microbatch). The gradients are complete only in the last microbatch's backward, so DP
buckets fire within the final 1/m of the backward pass.

What it does not model
----------------------
Contention between collectives sharing a NIC or SMs (see ``overlap.overlap_step``),
embedding and output layers (in time or memory), uneven pipeline stages, the interleaved
schedule, load imbalance between experts, causal-mask savings in attention, or memory
fragmentation and communication buffers.
"""
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

from models import activations, collectives, context, experts, hardware, memory, overlap, pipeline
from models._validate import at_most, choice, positive_int
from models.ddp import assign_buckets
from models.hsdp import INTER_NODE, INTRA_NODE, NO_FABRIC
from models.shapes import shape_for

__all__ = ["AXES", "Layout", "Bar", "AxisTraffic", "StepMemory", "StepTimeline", "layout", "step_memory",
           "step_timeline", "GLOBAL_BATCH_SEQUENCES", "COMPUTE_EFFICIENCY", "OPTIMIZER_BYTES_PER_PARAM",
           "MODEL_STATE_BYTES_PER_PARAM"]

AXES = ("dp", "fsdp", "tp", "pp", "cp", "ep")
PREFERRED_DEGREE = {"tp": 8, "cp": 2, "pp": 8, "ep": 8}
HSDP_SHARD_GROUP = 8
# Sequences per optimizer step, the same for every layout: 3,072 is the global batch of the
# 1T model of Narayanan et al. 2021 Table 1, and splits evenly over every data-parallel degree
# 1,536 GPUs give here (24 replicas: 128 each; DP alone: 2 each).
GLOBAL_BATCH_SEQUENCES = 3072
MAX_GLOBAL_BATCH = 2**24
MAX_MICROBATCHES = 256  # per replica and step with PP; more and the microbatch grows
# Megatron-LM reached 44-52% of A100 peak end to end (Narayanan et al. 2021 Table 1).
COMPUTE_EFFICIENCY = 0.5
# The ledger: Megatron-LM's bf16 weight, fp32 main gradient, fp32 master weight, momentum and
# variance (megatron/training/theoretical_memory_usage.py), the planner's 2 + 4 + 12 bytes.
LEDGER = memory.MEGATRON_ADAM
MODEL_STATE_BYTES_PER_PARAM = LEDGER.bytes_per_param
# Adam reads and writes the fp32 weight and both moments (12 + 12 bytes), reads the fp32
# gradient and writes the bf16 weight (4 + 2).
OPTIMIZER_BYTES_PER_PARAM = memory.optimizer_step_traffic_bytes(
    param_bytes=LEDGER.param_bytes, grad_bytes=LEDGER.grad_bytes, optimizer_bytes=LEDGER.optimizer_bytes)
BYTES_PER_ELEMENT = 2  # bf16 activations, weights and gradients
MAX_GPUS = 2**20


@dataclass(frozen=True)
class Layout:
    """Degrees of each axis and the fabric each group's collectives cross."""

    gpus: int
    gpus_used: int  # tp * cp * pp * data
    tp: int
    cp: int
    pp: int
    data: int  # data-parallel degree (1 without dp or fsdp)
    ep: int
    shard: int  # FSDP shard group (data without dp; HSDP_SHARD_GROUP-sized with dp)
    replicas: int  # ranks of the DP gradient AllReduce
    fabric: tuple  # ((axis, INTRA_NODE | INTER_NODE | NO_FABRIC), ...) for AXES

    def fabric_of(self, axis):
        return dict(self.fabric)[axis]


def _crosses(stride, size, gpus_per_node):
    """Ranks 0, stride, ..., (size-1)*stride: all in the first node or not."""
    if size == 1:
        return NO_FABRIC
    return INTRA_NODE if (size - 1) * stride < gpus_per_node else INTER_NODE


def layout(gpus, enabled, *, gpus_per_node=8):
    """Degrees for ``enabled`` axes on ``gpus`` GPUs (module docstring: "Degrees")."""
    gpus = positive_int("gpus", gpus)
    at_most("gpus", gpus, MAX_GPUS)
    gpus_per_node = positive_int("gpus_per_node", gpus_per_node)
    enabled = _check_enabled(enabled)
    remaining = gpus
    degree = {}
    for axis in ("tp", "cp", "pp"):
        degree[axis] = math.gcd(PREFERRED_DEGREE[axis], remaining) if axis in enabled else 1
        remaining //= degree[axis]
    tp, cp, pp = degree["tp"], degree["cp"], degree["pp"]
    data = remaining if ("dp" in enabled or "fsdp" in enabled) else 1
    ep = math.gcd(PREFERRED_DEGREE["ep"], data * cp) if "ep" in enabled else 1
    if "fsdp" in enabled:
        shard = math.gcd(HSDP_SHARD_GROUP, data) if "dp" in enabled else data
    else:
        shard = 1
    replicas = data // shard if "dp" in enabled else 1
    # Megatron-Core order tp, cp, dp, pp; HSDP's shard group is the first `shard` ranks of a
    # dp group, its replica group every shard-th; EP ranks are the first ep of the cp x dp block.
    fabric = (
        ("dp", _crosses(tp * cp * shard, replicas, gpus_per_node)),
        ("fsdp", _crosses(tp * cp, shard, gpus_per_node)),
        ("tp", _crosses(1, tp, gpus_per_node)),
        ("pp", _crosses(tp * cp * data, pp, gpus_per_node)),
        ("cp", _crosses(tp, cp, gpus_per_node)),
        ("ep", _crosses(tp, ep, gpus_per_node)),
    )
    return Layout(gpus, tp * cp * pp * data, tp, cp, pp, data, ep, shard, replicas, fabric)


def _check_enabled(enabled):
    if isinstance(enabled, str) or not hasattr(enabled, "__iter__"):
        raise ValueError(f"enabled must be a collection of axes, got {enabled!r}")
    enabled = frozenset(enabled)
    for axis in enabled:
        choice("enabled", axis, AXES)
    return enabled


class Bar(NamedTuple):
    """One stretch of the timeline. ``lane`` is "compute" (kind forward, backward, bubble or
    optimizer) or an axis (kind "comm": the collective in flight; "exposed": the compute
    waiting on it, which for a collective consumed by the very next op is all of it).
    A tuple: a step has thousands and a frozen dataclass costs ~3x more to create."""

    lane: str
    kind: str
    start_s: float
    end_s: float


@dataclass(frozen=True)
class AxisTraffic:
    axis: str
    collective: str  # overlap.AXIS_COLLECTIVES' name for it
    group: int  # ranks in the group
    fabric: str
    calls: int  # collectives this device issues per step
    comm_s: float  # their total duration
    exposed_s: float  # time the compute waits for them
    hidden_s: float


@dataclass(frozen=True)
class StepMemory:
    """Bytes one GPU of the first pipeline stage holds at its peak (module docstring: "Memory")."""

    model_state_bytes: float  # weights, gradients, optimizer state (FSDP: shard + gathered layers)
    activation_bytes: float  # kept for backward, all microbatches in flight
    total_bytes: float
    hbm_bytes: float  # the GPU's memory
    microbatches: int  # a replica's sequences run as this many microbatches, gradients accumulated
    microbatch_sequences: int  # sequences in each

    @property
    def fits(self):
        return self.total_bytes <= self.hbm_bytes


@dataclass(frozen=True)
class StepTimeline:
    layout: Layout
    layers: int  # on this device (the first pipeline stage)
    microbatches: int
    compute_s: float  # forward + backward, at COMPUTE_EFFICIENCY of peak
    forward_s: float  # forward pass, including its exposed communication
    backward_s: float
    bubble_s: float
    optimizer_s: float
    step_time_s: float
    exposed_comm_s: float
    hidden_comm_s: float
    axes: tuple  # AxisTraffic of each enabled axis with a group > 1, in AXES order
    spans: tuple  # (((lane, kind), ((start_s, end_s), ...)), ...): see ``Bar``
    global_batch: int  # sequences per optimizer step, over all replicas
    replica_sequences: int  # sequences of the busiest data-parallel replica
    memory: StepMemory
    microbatch_sequences: int  # sequences per microbatch; ``microbatches`` of them make a replica's share

    @property
    def uneven(self):
        """The global batch does not split evenly over the data-parallel replicas (some get
        one sequence fewer, or none)."""
        return self.global_batch % self.layout.data != 0

    @property
    def idle_replicas(self):
        """Replicas left without a sequence (a global batch smaller than the replicas)."""
        return max(0, self.layout.data - self.global_batch)

    def stretches(self, lane, kind):
        """The (start_s, end_s) pairs of one lane and kind, in the order they were recorded."""
        return dict(self.spans).get((lane, kind), ())

    @property
    def bars(self):
        """Every stretch as a ``Bar``."""
        return tuple(Bar(lane, kind, start, end) for (lane, kind), pairs in self.spans for start, end in pairs)

    def exposed_s(self, axis):
        """Seconds the compute waits on ``axis``'s collectives (0 if it sends nothing)."""
        choice("axis", axis, AXES)
        return next((traffic.exposed_s for traffic in self.axes if traffic.axis == axis), 0.0)


class _Clock:
    """The compute stream: runs pieces back to back and records what it waited for.
    Stretches are kept per (lane, kind) as (start, end) pairs: a step has thousands."""

    def __init__(self):
        self.now = 0.0
        self.pasted = {}  # layer body -> the times it started
        self.spans = {}
        self.exposed = {}
        self.comm = {}
        self.calls = {}

    def _list(self, lane, kind):
        key = (lane, kind)
        found = self.spans.get(key)
        if found is None:
            found = self.spans[key] = []
        return found

    def run(self, kind, duration):
        spans = self._list("compute", kind)
        now = self.now
        if spans and spans[-1][1] == now:
            spans[-1] = (spans[-1][0], now + duration)
        else:
            spans.append((now, now + duration))
        self.now = now + duration

    def collective(self, axis, start, end, calls=1):
        self._list(axis, "comm").append((start, end))
        self.comm[axis] = self.comm.get(axis, 0.0) + (end - start)
        self.calls[axis] = self.calls.get(axis, 0) + calls

    def wait_until(self, axis, ready):
        """Compute blocks until ``ready``: the gap is ``axis``'s exposed time."""
        if ready > self.now:
            self._list(axis, "exposed").append((self.now, ready))
            self.exposed[axis] = self.exposed.get(axis, 0.0) + (ready - self.now)
            self.now = ready

    def paste(self, body):
        """Run ``body`` (a clock that recorded one layer from time 0) from now. Every layer
        repeats the same stretches, so each is simulated once; ``finish`` copies it to
        each place it ran."""
        self.pasted.setdefault(body, []).append(self.now)
        self.now += body.now

    def finish(self):
        """Copy every pasted layer into place and add up its totals."""
        for body, offsets in self.pasted.items():
            for key, pairs in body.spans.items():
                self._list(*key).extend([(start + t, end + t) for t in offsets for start, end in pairs])
            for total, part in ((self.exposed, body.exposed), (self.comm, body.comm), (self.calls, body.calls)):
                for axis, value in part.items():
                    total[axis] = total.get(axis, 0) + value * len(offsets)
        self.pasted = {}

    def blocking(self, axis, duration, calls):
        """A collective whose consumer is the very next op: issued now, fully waited for
        (one "exposed" stretch: the collective and the wait are the same time)."""
        if duration > 0:
            self.comm[axis] = self.comm.get(axis, 0.0) + duration
            self.calls[axis] = self.calls.get(axis, 0) + calls
            self.wait_until(axis, self.now + duration)


def _time(op, nbytes, ranks, link):
    return collectives.time_s(op, nbytes, ranks, alpha_s=link.alpha_s, bandwidth_bytes_per_s=link.bandwidth_bytes_per_s)


def _replica_sequences(global_batch, lay):
    global_batch = positive_int("global_batch", global_batch)
    at_most("global_batch", global_batch, MAX_GLOBAL_BATCH)
    return -(-global_batch // lay.data)  # the busiest replica's share


def _microbatching(n, p, fits):
    """(microbatches m, sequences per microbatch b) for a replica's n sequences on p stages.
    With PP microbatches of b = 1, 2, 4, ... sequences, m <= MAX_MICROBATCHES (1F1B wants
    many). Without PP as few microbatches as fit: the largest b with ``fits(b)`` (one
    microbatch's activations beside the model state), spread evenly, m <= MAX_MICROBATCHES;
    if not even the smallest fits, the smallest."""
    if p > 1:
        b = 1
        while -(-n // b) > MAX_MICROBATCHES:
            b *= 2
        return -(-n // b), b
    smallest = -(-n // MAX_MICROBATCHES)
    low, high = smallest, n  # fits is monotone in b: binary search for the largest that fits
    if not fits(low):
        return -(-n // smallest), smallest
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    m = -(-n // low)
    return m, -(-n // m)  # the same m, spread evenly: no microbatch larger than needed


def step_memory(params, gpus, enabled, *, global_batch=GLOBAL_BATCH_SEQUENCES, gpu="h100_sxm", gpus_per_node=8):
    """Peak bytes on one GPU of the first stage, whether they fit, and the microbatches that
    set them (module docstring: "Memory" and "The batch")."""
    shape = shape_for(params)
    spec = hardware.gpu(gpu)
    lay = layout(gpus, enabled, gpus_per_node=gpus_per_node)
    n = _replica_sequences(global_batch, lay)
    t, c, p = lay.tp, lay.cp, lay.pp
    layers = -(-shape.layers // p)
    unit = shape.layer_params / t  # one layer's weights on a TP rank
    local = layers * unit
    if lay.shard > 1:  # ZeRO-3 inside the shard group; with PP every layer stays gathered until backward
        states = memory.fsdp_peak_memory(local, lay.shard, unit, param_bytes=LEDGER.param_bytes,
                                         grad_bytes=LEDGER.grad_bytes, optimizer_bytes=LEDGER.optimizer_bytes,
                                         prefetch=True, reshard_after_forward=p == 1).peak_bytes
    else:
        states = MODEL_STATE_BYTES_PER_PARAM * local
    per_sequence = layers * activations.per_layer_bytes(shape.seq // c, 1, shape.hidden, shape.heads, tp=t,
                                                        flash_attention=True)  # linear in the microbatch
    m, b = _microbatching(n, p, lambda b: states + b * per_sequence <= spec.hbm_bytes)
    in_flight = min(p, m)  # 1F1B holds up to P microbatches; gradient accumulation alone one
    kept = per_sequence * b * in_flight
    return StepMemory(states, kept, states + kept, spec.hbm_bytes, m, b)


@lru_cache(maxsize=64)
def step_timeline(params, gpus, enabled, *, global_batch=GLOBAL_BATCH_SEQUENCES, link="ib_ndr", gpu="h100_sxm",
                  gpus_per_node=8):
    """One device's step with ``enabled`` axes (a frozenset or tuple of ``AXES``) for a global
    batch of ``global_batch`` sequences; see the module docstring. ``link`` is the network
    between nodes (``hardware.LINKS``); inside a node collectives use the GPU's scale-up link."""
    shape = shape_for(params)
    spec = hardware.gpu(gpu)
    network = hardware.link(link)
    scale_up = hardware.link(spec.scale_up_link)
    lay = layout(gpus, enabled, gpus_per_node=gpus_per_node)
    fabric = dict(lay.fabric)
    n = _replica_sequences(global_batch, lay)
    step_mem = step_memory(params, gpus, enabled, global_batch=global_batch, gpu=gpu, gpus_per_node=gpus_per_node)

    def over(axis):
        return network if fabric[axis] == INTER_NODE else scale_up

    t, c, p = lay.tp, lay.cp, lay.pp
    s, h = shape.seq, shape.hidden
    layers = -(-shape.layers // p)  # the first stage holds the most
    m, b = step_mem.microbatches, step_mem.microbatch_sequences  # calls per layer slot, sequences per call
    rate = spec.peak_bf16_dense_flops_per_s * COMPUTE_EFFICIENCY
    tokens = b * (s // c)  # this rank's tokens per call

    # Forward pieces of one layer (Korthikanti 2022 App. A: 24bsh^2 + 4bs^2h), this rank's share
    # (t-way split weights, c-way split tokens), summed over the slot's n sequences.
    def seconds(flops):
        return n / b * flops / (t * c) / rate

    qkv, core = seconds(6 * b * s * h * h), seconds(4 * b * s * s * h)
    proj, mlp = seconds(2 * b * s * h * h), seconds(16 * b * s * h * h)

    # One call of each collective, in seconds (every slot then issues m of them).
    activation_bytes = tokens * h * BYTES_PER_ELEMENT
    tp_allreduce = _time("allreduce", activation_bytes, t, over("tp")) if t > 1 else 0.0
    ep_alltoall = 0.0
    if lay.ep > 1:
        per_direction = experts.moe_alltoall_bytes(1, b, s // c, h, BYTES_PER_ELEMENT, ep=lay.ep).per_direction_bytes
        ep_alltoall = _time("alltoall", per_direction / t, lay.ep, over("ep"))
    hop = {1: 0.0, 2: 0.0}  # one ring hop, forward (K, V) and backward (K, V and their gradients)
    if c > 1:
        block_bytes = context.ring_communication(s, h, c, micro_batch=b, bytes_per_element=BYTES_PER_ELEMENT).kv_block_bytes
        hop = {factor: _time("sendrecv", factor * block_bytes / t, c, over("cp")) for factor in (1, 2)}
    unit_bytes = BYTES_PER_ELEMENT * shape.layer_params / t  # one layer's weights (or gradients) on a TP rank
    reshard = p == 1  # with PP the gathered weights stay until backward (module docstring)
    fsdp_calls = m if reshard else 1  # without PP every microbatch gathers and reduces again
    gather = fsdp_calls * _time("allgather", unit_bytes, lay.shard, over("fsdp")) if lay.shard > 1 else 0.0
    scatter = fsdp_calls * _time("reducescatter", unit_bytes, lay.shard, over("fsdp")) if lay.shard > 1 else 0.0

    def layer(phase):
        """One layer's forward or backward from time 0, everything after its FSDP gather:
        compute, the collectives the next op waits for, and the attention ring."""
        body, factor = _Clock(), (1 if phase == "forward" else 2)

        def attention():  # in c blocks; hop k+1 travels while block k computes
            block = factor * core / c
            for _ in range(c - 1):
                arrival = body.now + m * hop[factor]
                body.collective("cp", body.now, arrival, m)
                body.run(phase, block)
                body.wait_until("cp", arrival)
            body.run(phase, block)

        if phase == "forward":
            body.run(phase, qkv)
            attention()
            body.run(phase, proj)
            body.blocking("tp", m * tp_allreduce, m)
            body.blocking("ep", m * ep_alltoall, m)
            body.run(phase, mlp)
            body.blocking("ep", m * ep_alltoall, m)
            body.blocking("tp", m * tp_allreduce, m)
        else:
            body.blocking("ep", m * ep_alltoall, m)
            body.run(phase, 2 * mlp)
            body.blocking("ep", m * ep_alltoall, m)
            body.blocking("tp", m * tp_allreduce, m)
            body.run(phase, 2 * proj)
            attention()
            body.run(phase, 2 * qkv)
            body.blocking("tp", m * tp_allreduce, m)
        return body

    clock = _Clock()
    forward_layer, backward_layer = layer("forward"), layer("backward")

    # ---- forward ----
    fsdp_free = 0.0
    previous_start = 0.0
    for j in range(layers):
        if lay.shard > 1:
            start = max(fsdp_free, previous_start if j else 0.0)  # prefetched when layer j-1 starts
            fsdp_free = start + gather
            clock.collective("fsdp", start, fsdp_free, fsdp_calls)
            clock.wait_until("fsdp", fsdp_free)
        previous_start = clock.now
        clock.paste(forward_layer)
    forward_end = clock.now

    # ---- pipeline: sends hide behind the next microbatch; the bubble is idle ----
    bubble_s = 0.0
    if p > 1:
        send = _time("sendrecv", activation_bytes / t, p, over("pp"))
        per_microbatch = forward_end / m
        forward_sends = overlap.hidden_comm("pp", send, per_microbatch)
        backward_sends = overlap.hidden_comm("pp", send, 2 * per_microbatch)
        clock.comm["pp"] = 2 * m * send
        clock.calls["pp"] = 2 * m
        for i in range(m):  # a tick where each microbatch's activation leaves this stage
            clock._list("pp", "comm").append(((i + 1) * per_microbatch - send, (i + 1) * per_microbatch))
        clock.wait_until("pp", clock.now + m * forward_sends.exposed_s)
        # (P-1)/m of the stage's ideal compute time, which includes its exposed collectives.
        stage_s = forward_end + layers * backward_layer.now  # no FSDP gathers in backward with PP
        bubble_s = pipeline.bubble_over_ideal("1f1b", p, m) * stage_s
        clock.run("bubble", bubble_s)

    # ---- backward: each layer's compute is twice its forward ----
    backward_begin = clock.now
    backward_start = [0.0] * layers
    backward_end = [0.0] * layers

    def reduce_scatter(j):
        nonlocal fsdp_free
        start = max(fsdp_free, backward_end[j])
        fsdp_free = start + scatter
        clock.collective("fsdp", start, fsdp_free, fsdp_calls)
        return fsdp_free

    scatter_end = [0.0] * layers
    for j in range(layers - 1, -1, -1):
        later = j + 1 if j < layers - 1 else None
        ready = 0.0
        if lay.shard > 1 and reshard:
            issue = backward_begin if later is None else backward_start[later]
            start = max(fsdp_free, issue)
            fsdp_free = ready = start + gather
            clock.collective("fsdp", start, fsdp_free, fsdp_calls)
        if lay.shard > 1 and reshard and later is not None:
            scatter_end[later] = reduce_scatter(later)
        clock.wait_until("fsdp", ready)
        backward_start[j] = clock.now
        clock.paste(backward_layer)
        backward_end[j] = clock.now
    compute_end = clock.now
    span = (compute_end - backward_begin) / layers / m  # one layer's backward of one microbatch
    if m > 1:
        # Gradients are complete only in the last microbatch's backward: layer j's at the
        # end, less the last microbatch's share of the layers below it.
        backward_end = [compute_end - j * span for j in range(layers)]
    if p > 1:
        for i in range(m):
            end = backward_begin + (i + 1) * layers * span
            clock._list("pp", "comm").append((end - send, end))
    if lay.shard > 1:
        for j in (range(layers - 1, -1, -1) if not reshard else (0,)):
            scatter_end[j] = reduce_scatter(j)
    grads_ready = scatter_end if lay.shard > 1 else backward_end

    # ---- DP buckets: one stream, launched in order once their last gradient is ready ----
    dp_free = 0.0
    if lay.replicas > 1:
        grad_bytes = unit_bytes / lay.shard
        buckets, _ = assign_buckets([grad_bytes] * layers)
        previous_launch = 0.0
        for members in buckets:
            launch = max(max(grads_ready[i] for i in members), previous_launch)
            start = max(launch, dp_free)
            dp_free = start + _time("allreduce", grad_bytes * len(members), lay.replicas, over("dp"))
            clock.collective("dp", start, dp_free)
            previous_launch = launch

    clock.wait_until("fsdp", fsdp_free)
    clock.wait_until("dp", dp_free)
    if p > 1:
        clock.wait_until("pp", clock.now + m * backward_sends.exposed_s)
    backward_done = clock.now
    updated = layers * shape.layer_params / t / lay.shard
    optimizer_s = OPTIMIZER_BYTES_PER_PARAM * updated / spec.hbm_bandwidth_bytes_per_s
    clock.run("optimizer", optimizer_s)
    clock.finish()

    traffic = []
    for axis in AXES:
        if axis not in clock.comm or clock.comm[axis] <= 0:
            continue
        comm = clock.comm[axis]
        exposed = min(clock.exposed.get(axis, 0.0), comm)
        hidden = comm - exposed if comm - exposed > 1e-12 * comm else 0.0  # not summation residue
        group = {"dp": lay.replicas, "fsdp": lay.shard, "tp": t, "pp": p, "cp": c, "ep": lay.ep}[axis]
        traffic.append(AxisTraffic(axis, overlap.AXIS_COLLECTIVES[axis].collective, group,
                                   fabric[axis], clock.calls.get(axis, 0), comm, exposed, hidden))
    exposed_total = math.fsum(a.exposed_s for a in traffic)
    return StepTimeline(
        lay, layers, m, 3 * layers * (qkv + core + proj + mlp), forward_end, backward_done - backward_begin,
        bubble_s, optimizer_s, clock.now, exposed_total, math.fsum(a.hidden_s for a in traffic),
        tuple(traffic), tuple((key, tuple(pairs)) for key, pairs in clock.spans.items()),
        global_batch, n, step_mem, b,
    )
