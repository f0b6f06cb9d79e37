"""Per-device memory of model states under data parallelism, ZeRO and FSDP.

What it models: the persistent "ledger" of training -- parameters, gradients and
optimizer state -- per device, as the ZeRO paper counts it (Rajbhandari et al.,
SC'20, Sec. 3 and 5, Fig. 1, Table 1): Psi parameters cost ``param_bytes``,
``grad_bytes`` and ``optimizer_bytes`` (the paper's K) each, and stage s of ZeRO
divides the first s of {optimizer state, gradients, parameters} by the
data-parallel degree. Also: the per-step data-parallel communication volume
(ZeRO Sec. 7), CPU offload (ZeRO-Offload / ZeRO-Infinity), DeepSpeed's own
memory estimators (reproduced exactly, including their quirks), FSDP's peak
(resident shards + one gathered unit) and HSDP (shard inside a group, replicate
across groups).

What it does not model: activations, temporary communication buckets,
allocator fragmentation, or the (N-1)/N factor of ring collectives in the
communication volume (ZeRO Sec. 7 drops it too; see ``models.collectives``).

Bytes vs elements: every ``*_bytes`` is bytes; ``comm_volume_elements`` counts
elements (parameters). GB = 1e9 (ZeRO tables), GiB = 2**30 (DeepSpeed).
"""
import math
from dataclasses import dataclass

from models._validate import GB, GiB, at_most, choice, divides, non_negative, positive, positive_int

__all__ = [
    "STAGES", "STAGE_LABELS", "Optimizer", "OPTIMIZERS", "MEGATRON_ADAM", "ModelStates", "model_states",
    "model_states_for", "ledger_fraction", "Collective", "comm_collectives", "comm_volume_psi",
    "comm_volume_elements", "OffloadedStates", "offloaded_model_states", "DeepSpeedEstimate",
    "deepspeed_zero2_estimate", "deepspeed_zero3_estimate", "FsdpPeak", "fsdp_peak_memory",
    "hsdp_model_states", "MAX_DEVICES", "GB", "GiB",
]

STAGES = (0, 1, 2, 3)
STAGE_LABELS = {0: "DDP", 1: "ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}

# More devices than any cluster will have; keeps int -> float conversions safe.
MAX_DEVICES = 2**40


@dataclass(frozen=True)
class Optimizer:
    """Bytes per parameter of each ledger term (ZeRO Sec. 3.1: 2 + 2 + K for mixed-precision Adam)."""

    key: str
    label: str
    param_bytes: float
    grad_bytes: float
    optimizer_bytes: float
    recipe: str = ""  # what each term holds, for a reader comparing byte counts across figures

    @property
    def bytes_per_param(self):
        return self.param_bytes + self.grad_bytes + self.optimizer_bytes


OPTIMIZERS = {
    # ZeRO Sec. 3.1: fp16 params + fp16 grads + fp32 master copy, momentum, variance (K = 12).
    "adam_mixed": Optimizer("adam_mixed", "Adam, mixed precision (K=12)", 2, 2, 12,
                            "bf16 weights 2 + bf16 gradients 2 + fp32 master weights, momentum and variance 12"),
    # Same recipe with one moment: fp32 master copy + momentum (K = 8).
    "sgd_momentum": Optimizer("sgd_momentum", "SGD + momentum, mixed precision (K=8)", 2, 2, 8,
                              "bf16 weights 2 + bf16 gradients 2 + fp32 master weights and momentum 8"),
    # Pure fp32 Adam: params and grads in fp32, no master copy, two fp32 moments (K = 8).
    "adam_fp32": Optimizer("adam_fp32", "Adam, fp32 (K=8)", 4, 4, 8,
                           "fp32 weights 4 + fp32 gradients 4 + fp32 momentum and variance 8"),
}

# Megatron-LM's ledger (megatron/training/theoretical_memory_usage.py; Korthikanti et al. 2022
# Fig. 1): gradients accumulate in fp32 "main grads", so 2 + 4 + 12 = 18 bytes. Not one of the
# ZeRO ladder's choices above; the planner and Figure 18 count with it.
MEGATRON_ADAM = Optimizer("megatron_adam", "Adam, Megatron-LM (fp32 main gradients)", 2, 4, 12,
                          "bf16 weights 2 + fp32 main gradients 4 + fp32 master weights, momentum and variance 12")


@dataclass(frozen=True)
class ModelStates:
    """Per-device bytes of each ledger term; ``total_bytes`` is their sum."""

    params_bytes: float
    grads_bytes: float
    optimizer_bytes: float
    total_bytes: float

    @property
    def total_gb(self):
        return self.total_bytes / GB

    @property
    def total_gib(self):
        return self.total_bytes / GiB


def _states(params_bytes, grads_bytes, optimizer_bytes, *, what="params"):
    total = params_bytes + grads_bytes + optimizer_bytes
    if not math.isfinite(total):
        raise ValueError(f"{what} is too large: the byte count overflows a float")
    return ModelStates(float(params_bytes), float(grads_bytes), float(optimizer_bytes), float(total))


def _check_params(name, value):
    positive(name, value)
    return float(value)


def _check_degree(name, value):
    positive_int(name, value)
    at_most(name, value, MAX_DEVICES)
    return int(value)


def _check_bytes(param_bytes, grad_bytes, optimizer_bytes):
    non_negative("param_bytes", param_bytes)
    non_negative("grad_bytes", grad_bytes)
    non_negative("optimizer_bytes", optimizer_bytes)


def model_states(params, dp, stage, *, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    """Per-device model-state bytes for ZeRO ``stage`` at data-parallel degree ``dp``.

    ZeRO Sec. 5 / Fig. 1: DDP (2+2+K)Psi; P_os 4Psi + K Psi/N; P_os+g 2Psi + (2+K)Psi/N;
    P_os+g+p (2+2+K)Psi/N.
    """
    params = _check_params("params", params)
    dp = _check_degree("dp", dp)
    choice("stage", stage, STAGES)
    _check_bytes(param_bytes, grad_bytes, optimizer_bytes)
    optimizer_share = 1 / dp if stage >= 1 else 1.0
    grad_share = 1 / dp if stage >= 2 else 1.0
    param_share = 1 / dp if stage >= 3 else 1.0
    return _states(
        param_bytes * params * param_share,
        grad_bytes * params * grad_share,
        optimizer_bytes * params * optimizer_share,
    )


def model_states_for(params, dp, stage, optimizer="adam_mixed"):
    """``model_states`` with the byte sizes of one of ``OPTIMIZERS`` (by key)."""
    choice("optimizer", optimizer, tuple(OPTIMIZERS))
    o = OPTIMIZERS[optimizer]
    return model_states(params, dp, stage, param_bytes=o.param_bytes, grad_bytes=o.grad_bytes,
                        optimizer_bytes=o.optimizer_bytes)


def ledger_fraction(dp, stage=3, *, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    """Fraction of the full per-replica ledger one rank holds (stage 3: exactly 1/dp).

    The article: 8-way sharding keeps 12.5% of the ledger, 64-way 1.6% (ZeRO Sec. 5: 16Psi/N).
    """
    unsharded = model_states(1.0, 1, 0, param_bytes=param_bytes, grad_bytes=grad_bytes,
                             optimizer_bytes=optimizer_bytes).total_bytes
    if unsharded == 0:
        raise ValueError("param_bytes, grad_bytes and optimizer_bytes must not all be 0")
    sharded = model_states(1.0, dp, stage, param_bytes=param_bytes, grad_bytes=grad_bytes,
                           optimizer_bytes=optimizer_bytes).total_bytes
    return sharded / unsharded


@dataclass(frozen=True)
class Collective:
    """One data-parallel collective of a training step, its volume in units of Psi."""

    op: str       # "allreduce", "reducescatter", "allgather" (names of models.collectives)
    tensor: str   # "grads" or "params"
    phase: str    # "forward", "backward" or "step"
    psi: float


def comm_collectives(stage, *, reshard_after_forward=True):
    """The collectives each stage issues per step (ZeRO Sec. 7).

    DDP AllReduces gradients (2Psi, counting AllReduce = ReduceScatter + AllGather);
    ZeRO-1/2 ReduceScatter gradients then AllGather updated params (Psi + Psi);
    ZeRO-3 AllGathers params in forward and again in backward, ReduceScatters grads (3Psi).
    Without resharding after forward the backward AllGather disappears (PyTorch FSDP
    ``reshard_after_forward=False``), back to 2Psi.
    """
    choice("stage", stage, STAGES)
    if not isinstance(reshard_after_forward, bool):
        raise ValueError(f"reshard_after_forward must be True or False, got {reshard_after_forward!r}")
    if stage == 0:
        return (Collective("allreduce", "grads", "backward", 2.0),)
    if stage in (1, 2):
        return (Collective("reducescatter", "grads", "backward", 1.0),
                Collective("allgather", "params", "step", 1.0))
    ops = [Collective("allgather", "params", "forward", 1.0)]
    if reshard_after_forward:
        ops.append(Collective("allgather", "params", "backward", 1.0))
    ops.append(Collective("reducescatter", "grads", "backward", 1.0))
    return tuple(ops)


def comm_volume_psi(stage, *, reshard_after_forward=True):
    """Per-device per-step data-parallel volume as a multiple of Psi (ZeRO Sec. 7: 2, 2, 2, 3)."""
    return sum(c.psi for c in comm_collectives(stage, reshard_after_forward=reshard_after_forward))


def comm_volume_elements(params, stage, *, reshard_after_forward=True):
    """Per-device per-step data-parallel volume in ELEMENTS (multiply by bytes/element for bytes)."""
    params = _check_params("params", params)
    volume = comm_volume_psi(stage, reshard_after_forward=reshard_after_forward) * params
    if not math.isfinite(volume):
        raise ValueError("params is too large: the volume overflows a float")
    return volume


@dataclass(frozen=True)
class OffloadedStates:
    """Where each ledger term lives per rank: HBM (``device``) and host RAM (``host``)."""

    device: ModelStates
    host: ModelStates


def offloaded_model_states(params, dp, stage, *, offload_optimizer=False, offload_params=False,
                           param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    """Per-rank device/host split with CPU offload.

    ZeRO-Offload (Ren et al., ATC'21, Sec. 4): built on ZeRO-2, the optimizer-state partition
    and its gradient partition live on the host (the CPU runs the update); the GPU keeps fp16
    params only -- DeepSpeed's estimate gives 2Psi for ZeRO-2 + offload. ZeRO-Infinity
    (Rajbhandari et al., SC'21) adds parameter offload, ZeRO-3 only. Transient GPU gradient
    buckets are not counted.
    """
    base = model_states(params, dp, stage, param_bytes=param_bytes, grad_bytes=grad_bytes,
                        optimizer_bytes=optimizer_bytes)
    for name, flag in (("offload_optimizer", offload_optimizer), ("offload_params", offload_params)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be True or False, got {flag!r}")
    if offload_optimizer and stage < 2:
        raise ValueError(f"offload_optimizer needs stage >= 2 (ZeRO-Offload builds on ZeRO-2), got stage={stage}")
    if offload_params and stage < 3:
        raise ValueError(f"offload_params needs stage 3 (parameters must be sharded), got stage={stage}")
    device = [base.params_bytes, base.grads_bytes, base.optimizer_bytes]
    host = [0.0, 0.0, 0.0]
    if offload_optimizer:
        host[1], host[2] = device[1], device[2]
        device[1] = device[2] = 0.0
    if offload_params:
        host[0], device[0] = device[0], 0.0
    return OffloadedStates(_states(*device), _states(*host))


@dataclass(frozen=True)
class DeepSpeedEstimate:
    """DeepSpeed's estimate, in bytes (it prints them as 'GB' but divides by 2**30)."""

    cpu_bytes: float
    gpu_bytes: float
    largest_layer_bytes: float = 0.0

    @property
    def cpu_gib(self):
        return self.cpu_bytes / GiB

    @property
    def gpu_gib(self):
        return self.gpu_bytes / GiB


def _truncate(value, what):
    # DeepSpeed returns int(...) of its float arithmetic; reproduce that rounding.
    if not math.isfinite(value):
        raise ValueError(f"{what} is too large: the estimate overflows a float")
    return float(math.trunc(value))


def _check_flag(name, value):
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def deepspeed_zero2_estimate(total_params, *, num_gpus_per_node=1, num_nodes=1, cpu_offload=True,
                             additional_buffer_factor=1.5):
    """DeepSpeed ``estimate_zero2_model_states_mem_needs`` (deepspeed/runtime/zero/stage_1_and_2.py).

    GPU: 2P with offload, else 4P + 16P/N -- NOT the ZeRO paper's 2P + 14P/N: DeepSpeed keeps fp16
    params and grads whole and partitions 16 B/param (fp32 params, fp32 grads, m, v).
    CPU: P * max(4N, 16) * buffer with offload, else P * 4 * gpus_per_node * buffer.
    """
    total_params = _check_params("total_params", total_params)
    num_gpus_per_node = _check_degree("num_gpus_per_node", num_gpus_per_node)
    num_nodes = _check_degree("num_nodes", num_nodes)
    _check_flag("cpu_offload", cpu_offload)
    positive("additional_buffer_factor", additional_buffer_factor)
    total_gpus = num_nodes * num_gpus_per_node
    if cpu_offload:
        gpu = 2 * total_params
        cpu = total_params * max(4 * total_gpus, 16) * additional_buffer_factor
    else:
        gpu = 4 * total_params + _truncate(16 * total_params / total_gpus, "total_params")
        cpu = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return DeepSpeedEstimate(_truncate(cpu, "total_params"), _truncate(gpu, "total_params"))


def deepspeed_zero3_estimate(total_params, largest_layer_params, *, num_gpus_per_node=1, num_nodes=1,
                             cpu_offload=True, cpu_offload_params=True, zero_init=True,
                             additional_buffer_factor=1.5):
    """DeepSpeed ``estimate_zero3_model_states_mem_needs`` (deepspeed/runtime/zero/stage3.py).

    GPU: 4L (L = largest layer: fp16 params + fp16 grads gathered) + 18P/N without offload,
    4L + 2P/N offloading the optimizer only, 4L offloading both. CPU: see the branches; the
    per-node factor is 1/num_nodes and the buffer factor is 1.5 by default.
    """
    total_params = _check_params("total_params", total_params)
    non_negative("largest_layer_params", largest_layer_params)
    at_most("largest_layer_params", largest_layer_params, total_params)
    num_gpus_per_node = _check_degree("num_gpus_per_node", num_gpus_per_node)
    num_nodes = _check_degree("num_nodes", num_nodes)
    for name, flag in (("cpu_offload", cpu_offload), ("cpu_offload_params", cpu_offload_params),
                       ("zero_init", zero_init)):
        _check_flag(name, flag)
    positive("additional_buffer_factor", additional_buffer_factor)
    total_gpus = num_nodes * num_gpus_per_node
    gpus_factor = 1 / num_nodes
    largest_layer_bytes = 4 * largest_layer_params
    if cpu_offload and cpu_offload_params:
        gpu = largest_layer_bytes
        per_param = 18 * gpus_factor if zero_init else max(4 * num_gpus_per_node, 18 * gpus_factor)
        cpu = total_params * per_param * additional_buffer_factor
    elif cpu_offload:
        gpu = largest_layer_bytes + _truncate(2 * total_params / total_gpus, "total_params")
        per_param = 16 * gpus_factor if zero_init else max(4 * num_gpus_per_node, 16 * gpus_factor)
        cpu = total_params * per_param * additional_buffer_factor
    else:
        # DeepSpeed ignores cpu_offload_params when cpu_offload is False.
        gpu = largest_layer_bytes + _truncate(18 * total_params / total_gpus, "total_params")
        if zero_init:
            cpu = largest_layer_params * 4 * num_gpus_per_node * additional_buffer_factor
        else:
            cpu = total_params * 4 * num_gpus_per_node * additional_buffer_factor
    return DeepSpeedEstimate(_truncate(cpu, "total_params"), _truncate(gpu, "total_params"),
                             float(largest_layer_bytes))


@dataclass(frozen=True)
class FsdpPeak:
    """FSDP peak per device: resident ZeRO-3 shards + full gathered params + unsharded grads."""

    resident_bytes: float
    gathered_params_bytes: float
    unsharded_grads_bytes: float
    peak_bytes: float


def fsdp_peak_memory(params, shard_degree, largest_unit_params, *, param_bytes=2, grad_bytes=2,
                     optimizer_bytes=12, prefetch=False, reshard_after_forward=True):
    """Peak model-state bytes of an FSDP step (the article: 'peak usage is set by the largest
    unit's gathered size'; ZeRO-3 ledger from ZeRO Sec. 5).

    peak = (p+g+K)Psi/N + p*U (* 2 with prefetch: the next unit is gathered while this one
    computes) + g*U (the unit's full gradient before its ReduceScatter). With
    ``reshard_after_forward=False`` every unit stays gathered until its backward, so all p*Psi
    is resident at the start of backward. The gathered unit is counted in full, including the
    rank's own shard (as DeepSpeed's 4*largest_layer_params does).
    """
    params = _check_params("params", params)
    positive("largest_unit_params", largest_unit_params)
    at_most("largest_unit_params", largest_unit_params, params)
    for name, flag in (("prefetch", prefetch), ("reshard_after_forward", reshard_after_forward)):
        _check_flag(name, flag)
    resident = model_states(params, shard_degree, 3, param_bytes=param_bytes, grad_bytes=grad_bytes,
                            optimizer_bytes=optimizer_bytes).total_bytes
    if reshard_after_forward:
        gathered = param_bytes * largest_unit_params * (2 if prefetch else 1)
        gathered = min(gathered, param_bytes * params)
    else:
        gathered = param_bytes * params
    grads = grad_bytes * largest_unit_params
    peak = resident + gathered + grads
    if not math.isfinite(peak):
        raise ValueError("params is too large: the byte count overflows a float")
    return FsdpPeak(resident, float(gathered), float(grads), peak)


def hsdp_model_states(params, world_size, shard_group_size, *, stage=3, param_bytes=2, grad_bytes=2,
                      optimizer_bytes=12):
    """HSDP per-device ledger: ZeRO ``stage`` with degree g inside a shard group, replicated
    across world_size/g groups -- memory depends on g only (PyTorch FSDP HYBRID_SHARD)."""
    world_size = _check_degree("world_size", world_size)
    shard_group_size = _check_degree("shard_group_size", shard_group_size)
    divides("shard_group_size", shard_group_size, "world_size", world_size)
    return model_states(params, shard_group_size, stage, param_bytes=param_bytes, grad_bytes=grad_bytes,
                        optimizer_bytes=optimizer_bytes)


# ---------------------------------------------------------------------------------------------
# Figure 07: the memory wall of plain data parallelism
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DdpMemory:
    """Per-device and whole-job memory of plain data parallelism (DDP = ZeRO stage 0) on N
    devices: every term is replicated, so only the aggregate depends on N."""

    states: ModelStates  # per device, (p+g+K)Psi whatever N is (ZeRO Sec. 3, 5)
    activations_bytes: float  # per device, as given
    per_device_bytes: float  # states + activations
    aggregate_bytes: float  # N x per device
    aggregate_hbm_bytes: float  # N x the device's HBM
    fits: bool  # per device <= HBM
    largest_params_that_fit: float  # HBM / (p+g+K): model states alone fill the device


def ddp_memory(params, devices, hbm_bytes, *, optimizer="adam_mixed", activations_bytes=0.0):
    """Per-device memory under DDP and what N devices hold in total (reference article, "Why
    DDP stops being enough": adding GPUs multiplies aggregate memory, not per-device memory)."""
    devices = _check_degree("devices", devices)
    positive("hbm_bytes", hbm_bytes)
    non_negative("activations_bytes", activations_bytes)
    states = model_states_for(params, 1, 0, optimizer)
    per_device = states.total_bytes + float(activations_bytes)
    o = OPTIMIZERS[optimizer]
    return DdpMemory(
        states=states,
        activations_bytes=float(activations_bytes),
        per_device_bytes=per_device,
        aggregate_bytes=devices * per_device,
        aggregate_hbm_bytes=devices * float(hbm_bytes),
        fits=per_device <= hbm_bytes,
        largest_params_that_fit=float(hbm_bytes) / o.bytes_per_param,
    )


__all__ += ["DdpMemory", "ddp_memory"]


def optimizer_step_traffic_bytes(*, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    """HBM bytes one mixed-precision optimizer step moves per parameter it updates: it reads the
    gradient and the K bytes of optimizer state (master weight and moments), writes the state
    back and writes the working weight: grad + 2K + param (the ZeRO Sec. 3.1 ledger, 2 + 2 + K,
    with the state read and written). Adam with bf16 gradients: 2 + 24 + 2 = 28; with
    Megatron-LM's fp32 main gradients: 4 + 24 + 2 = 30."""
    _check_bytes(param_bytes, grad_bytes, optimizer_bytes)
    return grad_bytes + 2 * optimizer_bytes + param_bytes


__all__ += ["optimizer_step_traffic_bytes"]
