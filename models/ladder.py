"""The decision ladder: what fails first on one GPU, and the least chatty axis that fixes it.

What it models
--------------
The reference article's "Choosing the strategy" ladder (Figure 19), as ledger arithmetic
for a GPT model (``shapes``) of ``params`` parameters on ``gpus`` GPUs of one kind. The
single-device step is assumed efficient already (bf16, fused Adam, FlashAttention-style
attention, so activations are counted with selective recomputation). Questions, in order:

1. ``model_state``: does the persistent ledger, 16 bytes per parameter under mixed-precision
   Adam (ZeRO Sec. 3.1), fit in the GPU's HBM?
2. ``activations``: do one microbatch's activations fit beside it (Korthikanti et al. 2022
   Table 2, selective recomputation, embedding and fp32 logits included)?
3. ``step_time``: can data parallelism alone keep every GPU busy? Only if the global batch
   it needs, micro x seq x gpus tokens, stays within ``MAX_BATCH_TOKENS``; past it, extra
   replicas stop shortening training (McCandlish et al. 2018's critical batch) and each
   sample's work must be split instead.
4. ``context``: is attention a minor part of each layer? Its score FLOPs, 4bs^2h, against the
   dense GEMMs' 24bsh^2 (Korthikanti 2022 App. A): the ratio s/(6h).
5. ``experts``: is the model dense (``experts`` = 1)?

The first question that fails names the bottleneck; its fix is the least
communication-heavy axis that removes it (article, "choose the least communication-heavy
axis that fixes it"):

* model state: shard it with ZeRO-3 (FSDP's gathered layer included). Of the node-aligned shard
  groups that fit, the one whose step sends the fewest seconds of communication
  (``hsdp.shard_group_options``: ``hsdp_step`` on the GPU's NVLink and its usual NIC, the prices
  Figure 10 draws), so a whole node where one node fits: groups of 8 A100s cost 7.5B parameters
  266 ms a step against 664 ms for groups of 2, whose replica AllReduce crosses nodes with four
  times the bytes. ``hsdp`` if that group is smaller than the world, else ``fsdp``. If nothing
  fits because one gathered layer (its bf16 weights and gradients, FSDP's unit) plus the
  activations exceeds the GPU, the bottleneck is ``layer`` and the fix ``tp``. A mixture of
  experts whose state does not fit is ``experts``: ``ep`` shards the expert weights, which are
  2/3 of each layer.
* activations: ``context`` (``cp``) when the sequence makes attention dominate (question 4
  fails too); else ``zero`` if ZeRO-2 over all GPUs frees enough (no traffic beyond data
  parallelism's own), else ZeRO-3 as above, else ``tp`` (sequence parallelism divides
  activations by the TP degree).
* step time: ``tp`` inside a node; ``pp`` next if the batch is still too large.
* context: ``cp``. experts: ``ep``. Nothing fails: ``ddp`` (with ZeRO-1, free).

Every TP fix takes, of the degrees inside one node that divide the heads and make the failing
check pass (memory within HBM; the data-parallel batch within ``MAX_BATCH_TOKENS``), the one with
the least communication per step: ``tensor.tp_layer_time``'s four blocking AllReduces a layer (the
prices Figure 12 draws), over every layer. A wider group sends more, so this is the smallest
degree that passes: for 1.7B parameters on 4,096 GPUs, TP 2 (the batch falls to 4.2M tokens), not
TP 8. If none passes, the node's whole width, and ``then`` names what comes next. ``options``
keeps the sizes the choice was made among, with their prices.

``then`` is the next question after the fix that still fails (or None), asked with the fix
in place: TP or CP over k GPUs divides the global batch data parallelism needs by k.

What it does not model: step time in seconds (see ``step_timeline`` and the planner), full
activation checkpointing (a compute trade the ladder takes before CP), optimizer choices
other than mixed-precision Adam, memory fragmentation, or MoE shapes beyond "the expert
MLPs hold 2/3 of the parameters" (the dense shape's MLP split into ``experts`` experts).
"""
import math
from dataclasses import dataclass

from models import activations, hardware, hsdp, memory
from models._validate import at_most, positive_int
from models.shapes import shape_for
from models.tensor import tp_layer_time

__all__ = ["QUESTIONS", "BOTTLENECKS", "AXES", "MAX_BATCH_TOKENS", "Check", "Fix", "Option", "Ladder", "climb"]

QUESTIONS = ("model_state", "activations", "step_time", "context", "experts")
BOTTLENECKS = ("none", "model_state", "activations", "layer", "step_time", "context", "experts")
AXES = ("ddp", "zero", "fsdp", "hsdp", "tp", "pp", "cp", "ep")
# LLaMA trained with 4M-token batches (Touvron et al. 2023, Table 2); GPT-3 175B with 3.2M
# (Brown et al. 2020, Table 2.1). Past a few million tokens larger batches stop paying.
MAX_BATCH_TOKENS = 4 * 2**20
MAX_GPUS = 2**20


@dataclass(frozen=True)
class Check:
    key: str  # one of QUESTIONS
    value: float  # the number that decides it
    limit: float  # passes when value <= limit (experts: when value == 1)
    passed: bool
    unit: str  # "bytes", "tokens", "ratio" or "experts"


@dataclass(frozen=True)
class Fix:
    axis: str  # one of AXES
    fits: bool  # the fix brings memory within HBM (True for fixes that are not about memory)
    per_device_bytes: float  # model state + activations per device after the fix (memory fixes)
    group: int  # shard group (zero/fsdp/hsdp), TP degree (tp), or 1
    replicas: int  # copies of the shard group (hsdp), else 1
    min_gpus: int  # for a ZeRO-3 fix that does not fit: GPUs it would need (power of two); else 0
    comm_s: float | None = None  # ZeRO-3 and TP fixes: the communication per step it was chosen by


@dataclass(frozen=True)
class Option:
    """One size of the chosen axis: whether it makes the failing check pass, and its price."""

    axis: str
    group: int  # shard group (fsdp/hsdp) or TP degree
    passes: bool
    per_device_bytes: float
    comm_s: float  # ZeRO-3: hsdp_step's total before overlap; TP: every layer's blocking AllReduces


@dataclass(frozen=True)
class Ladder:
    checks: tuple  # every question, evaluated for this model and budget
    first_bottleneck: str  # one of BOTTLENECKS
    recommended_axis: str  # one of AXES
    fix: Fix
    then: str | None  # the next question that still fails after the fix
    then_axis: str | None
    model_state_bytes: float  # 16 bytes/parameter, unsharded
    activation_bytes: float  # one microbatch, whole stack, on one GPU
    layer_bytes: float  # one gathered layer: bf16 weights + bf16 gradients
    hbm_bytes: float
    options: tuple = ()  # the sizes of the fix's axis it was chosen among (Option), smallest first

    def check(self, key):
        return next(check for check in self.checks if check.key == key)


def _power_of_two_at_least(value):
    return 1 << max(0, math.ceil(math.log2(value))) if value > 1 else 1


_LATER_AXIS = {"step_time": "tp", "context": "cp", "experts": "ep"}


def _cheapest(options):
    """The option that passes with the least communication (the smaller size on a tie), else None."""
    passing = [o for o in options if o.passes]
    return min(passing, key=lambda o: (o.comm_s, o.group)) if passing else None


def climb(params, seq, gpu, gpus, experts=1, micro=1, *, gpus_per_node=8):
    """Walk the ladder for one model and GPU budget; see the module docstring. The GPU's NVLink
    carries what stays in a node of ``gpus_per_node``, its usual NIC (``hardware.USUAL_NETWORK``)
    what leaves it."""
    shape = shape_for(params)
    seq = positive_int("seq", seq)
    spec = hardware.gpu(gpu)
    gpus = positive_int("gpus", gpus)
    at_most("gpus", gpus, MAX_GPUS)
    experts = positive_int("experts", experts)
    micro = positive_int("micro", micro)
    hbm = float(spec.hbm_bytes)
    state = memory.model_states(params, 1, 0).total_bytes

    def stack_activations(tp=1):
        return activations.first_stage_bytes(seq, micro, shape.hidden, shape.heads, shape.layers, tp=tp,
                                             sequence_parallel=tp > 1, recompute="selective",
                                             vocab=shape.vocab).total_bytes

    acts = stack_activations()
    unit = shape.layer_params
    gathered = memory.fsdp_peak_memory(params, 1, unit)
    layer = gathered.gathered_params_bytes + gathered.unsharded_grads_bytes  # one FSDP unit, bf16
    layer_acts = activations.per_layer_bytes(seq, micro, shape.hidden, shape.heads, recompute="selective")
    tokens = float(micro * seq * gpus)
    attention_ratio = seq / (6 * shape.hidden)
    long_context = attention_ratio >= 1.0
    checks = (
        Check("model_state", state, hbm, state <= hbm, "bytes"),
        Check("activations", state + acts, hbm, state + acts <= hbm, "bytes"),
        Check("step_time", tokens, MAX_BATCH_TOKENS, tokens <= MAX_BATCH_TOKENS, "tokens"),
        Check("context", attention_ratio, 1.0, not long_context, "ratio"),
        Check("experts", float(experts), 1.0, experts == 1, "experts"),
    )
    failed = next((c.key for c in checks if not c.passed), None)
    network = hardware.USUAL_NETWORK[spec.key]
    chosen_from = []  # the options of the axis the fix was chosen among

    def zero3():
        """ZeRO-3 over the node-aligned shard group that fits with the least communication
        (``hsdp.shard_group_options``), or over every GPU if none fits."""
        options = hsdp.shard_group_options(params, gpus, hbm_bytes=hbm, gpus_per_node=gpus_per_node,
                                           intra_link=spec.scale_up_link, inter_link=network, num_units=shape.layers,
                                           activation_bytes=acts, largest_unit_params=unit)
        chosen_from[:] = [Option("hsdp" if o.group < gpus else "fsdp", o.group, o.fits, o.per_device_bytes, o.comm_s)
                          for o in options]
        best = _cheapest(chosen_from)
        if best is None:
            widest = options[-1]
            room = hbm - layer  # what the resident shards may use (activations aside)
            need = _power_of_two_at_least(state / room) if room > 0 else 0
            over = widest.per_device_bytes - acts > hbm
            return Fix("fsdp", False, widest.per_device_bytes, gpus, 1, need if over else 0, widest.comm_s)
        return Fix(best.axis, True, best.per_device_bytes, best.group, gpus // best.group, 0, best.comm_s)

    def tensor_parallel(passes):
        """TP with sequence parallelism (weights, optimizer state and activations / t) at the degree
        inside a node that ``passes(t, per_device_bytes)`` with the least communication; if none
        does, the widest."""
        degrees = [t for t in (2 ** k for k in range(1, 7)) if t <= min(gpus_per_node, gpus)
                   and shape.heads % t == 0 and shape.hidden % t == 0] or [1]
        options = []
        for t in degrees:
            per_device = state / t + stack_activations(t)
            comm_s = shape.layers * tp_layer_time(micro, seq, shape.hidden, t, gpu=spec.key,
                                                  gpus_per_node=gpus_per_node, inter_link=network).comm_s
            options.append(Option("tp", t, passes(t, per_device), per_device, comm_s))
        chosen_from[:] = options
        best = _cheapest(options) or options[-1]
        return Fix("tp", best.per_device_bytes <= hbm, best.per_device_bytes, best.group, 1, 0, best.comm_s)

    def tensor():
        """TP for memory: the cheapest degree that brings the GPU within HBM."""
        return tensor_parallel(lambda t, per_device: per_device <= hbm)

    def context_parallel():
        """CP at the smallest power of two that brings activations (÷ C) within HBM,
        and the sequence per rank under 6h (attention no longer the larger part)."""
        degree = _power_of_two_at_least(attention_ratio)
        if state + acts > hbm and state < hbm:
            degree = max(degree, _power_of_two_at_least(acts / (hbm - state)))
        degree = min(degree, gpus)
        per_device = state + acts / degree
        return Fix("cp", per_device <= hbm, per_device, degree, 1, 0)

    then = None  # (question, axis) decided below, else the next later question that fails
    if failed == "model_state":
        if experts > 1:
            # Expert MLPs hold 2/3 of the weights (8h^2 of 12h^2 per layer); EP spreads them.
            ranks = min(experts, gpus)
            per_device = state * (1 / 3 + 2 / 3 / ranks) + acts
            bottleneck, fix = "experts", Fix("ep", per_device <= hbm, per_device, ranks, 1, 0)
            if not fix.fits:
                then = ("model_state", zero3().axis)
        else:
            bottleneck, fix = "model_state", zero3()
            if not fix.fits and fix.min_gpus == 0:
                if long_context:
                    then = ("context", "cp")
                elif layer + layer_acts > hbm:
                    bottleneck, fix = "layer", tensor()
                else:
                    then = ("activations", "tp")
    elif failed == "activations":
        if long_context:
            bottleneck, fix = "context", context_parallel()
        else:
            bottleneck = "activations"
            zero2 = memory.model_states(params, gpus, 2).total_bytes + acts
            fix = Fix("zero", True, zero2, gpus, 1, 0) if gpus > 1 and zero2 <= hbm else zero3()
            if fix.axis == "zero":
                chosen_from.clear()
            if not fix.fits:
                fix = tensor()
    elif failed is None:
        bottleneck, fix = "none", Fix("ddp", True, state + acts, 1, gpus, 0)
    elif failed == "step_time":
        bottleneck, fix = "step_time", tensor_parallel(lambda t, per_device: tokens / t <= MAX_BATCH_TOKENS)
        if tokens / fix.group > MAX_BATCH_TOKENS:
            then = ("step_time", "pp")  # TP stops at the node edge: pipeline stages across nodes next
    elif failed == "context":
        bottleneck, fix = "context", context_parallel()
    else:
        bottleneck, fix = "experts", Fix("ep", True, state + acts, min(experts, gpus), 1, 0)
    if then is None and fix.fits and fix.min_gpus == 0:
        # The later questions, asked again with the fix in place: TP and CP make each sample
        # span several GPUs, so data parallelism needs a batch that many times smaller.
        split = fix.group if fix.axis in ("tp", "cp") else 1
        for check in checks[2:]:
            if check.key == bottleneck or check.key == "context" and fix.axis == "cp":
                continue
            if check.key == "step_time":
                if tokens / split <= MAX_BATCH_TOKENS:
                    continue
                # a TP fix already as wide as a node allows hands over to pipeline stages
                widest = fix.axis == "tp" and fix.group == max(o.group for o in chosen_from)
                then = ("step_time", "pp" if widest else "tp")
                break
            if not check.passed:
                then = (check.key, _LATER_AXIS[check.key])
                break
    if fix.axis not in ("fsdp", "hsdp", "tp"):
        chosen_from.clear()  # an option list belongs to the fix drawn from it
    return Ladder(checks, bottleneck, fix.axis, fix, then[0] if then else None, then[1] if then else None,
                  state, acts, layer, hbm, tuple(chosen_from))
