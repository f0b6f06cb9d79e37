"""Hybrid sharded data parallelism (HSDP): shard inside a group, replicate across groups.

What it models: the world of ``world_size`` GPUs as a 2-D mesh (replicas x shard group), as in
PyTorch FSDP ``HYBRID_SHARD`` (Zhao et al., VLDB'23, Sec. 3.2.2) and ZeRO++'s hierarchical
partitioning (Wang et al. 2023). Per step:

* inside each shard group of g ranks: AllGather the parameters in forward (and again in backward
  if ``reshard_after_forward``), ReduceScatter the gradients -- ZeRO-3's 3Psi (ZeRO Sec. 7);
* across the world_size/g replicas: AllReduce of each rank's 1/g gradient shard (2 Psi/g).

Each pass is split into ``num_units`` equal collectives (one per FSDP unit), so small units pay
alpha many times. Collective times come from ``models.collectives.time_s`` (ring alpha-beta).

Placement assumptions: ranks are numbered node by node and shard groups are consecutive ranks.
A shard group stays inside one node (intra-node fabric) iff g divides ``gpus_per_node``;
otherwise it crosses nodes. A replica group (ranks r, r+g, r+2g, ...) crosses nodes whenever the
world spans more than one node. A ring that crosses nodes runs at the inter-node bandwidth: a
flat ring is as fast as its slowest link (hierarchical / multi-ring NCCL algorithms, which can
do better, are not modelled). Bandwidths are per GPU, one direction.

What it does not model: overlap of these collectives with compute (see ``models.fsdp``),
activations (pass them as ``activation_bytes`` to ``smallest_fitting_group``), congestion.
"""
import math
from dataclasses import dataclass

from models import collectives, hardware
from models._validate import at_most, divides, non_negative, positive, positive_int
from models.memory import MAX_DEVICES, ModelStates, fsdp_peak_memory, hsdp_model_states

__all__ = ["INTRA_NODE", "INTER_NODE", "HsdpStep", "hsdp_step", "shard_group_sizes",
           "smallest_fitting_group", "GroupOption", "shard_group_options", "shard_fabric", "replica_fabric"]

INTRA_NODE = "intra-node"
INTER_NODE = "inter-node"
NO_FABRIC = "none"  # a group of one rank sends nothing

MAX_UNITS = 4096


@dataclass(frozen=True)
class HsdpStep:
    shard_group_size: int
    replicas: int
    shard_fabric: str
    replica_fabric: str
    allgather_s: float       # all parameter AllGathers of the step, inside the shard group
    reducescatter_s: float   # gradient ReduceScatters, inside the shard group
    allreduce_s: float       # AllReduce of the 1/g gradient shard across replicas
    total_comm_s: float      # sum, no overlap
    memory: ModelStates      # per-device model states (ZeRO-3 at degree g)


def _check_world(world_size, gpus_per_node):
    world_size = positive_int("world_size", world_size)
    at_most("world_size", world_size, MAX_DEVICES)
    gpus_per_node = positive_int("gpus_per_node", gpus_per_node)
    at_most("gpus_per_node", gpus_per_node, MAX_DEVICES)
    if world_size > gpus_per_node:
        divides("gpus_per_node", gpus_per_node, "world_size", world_size)
    return world_size, gpus_per_node


def _check_group(shard_group_size, world_size):
    shard_group_size = positive_int("shard_group_size", shard_group_size)
    divides("shard_group_size", shard_group_size, "world_size", world_size)
    return shard_group_size


def shard_fabric(world_size, shard_group_size, gpus_per_node):
    """Fabric a shard group's collectives cross (module docstring: consecutive ranks)."""
    world_size, gpus_per_node = _check_world(world_size, gpus_per_node)
    g = _check_group(shard_group_size, world_size)
    if g == 1:
        return NO_FABRIC
    if world_size <= gpus_per_node or gpus_per_node % g == 0:
        return INTRA_NODE
    return INTER_NODE


def replica_fabric(world_size, shard_group_size, gpus_per_node):
    """Fabric the replica AllReduce crosses (ranks r, r+g, ...: one node only if the world is)."""
    world_size, gpus_per_node = _check_world(world_size, gpus_per_node)
    g = _check_group(shard_group_size, world_size)
    if world_size == g:
        return NO_FABRIC
    return INTRA_NODE if world_size <= gpus_per_node else INTER_NODE


def shard_group_sizes(world_size, gpus_per_node=None):
    """Divisors of ``world_size``, ascending; with ``gpus_per_node``, only node-aligned ones
    (g divides a node, or whole nodes make up g)."""
    world_size = positive_int("world_size", world_size)
    at_most("world_size", world_size, MAX_DEVICES)
    if gpus_per_node is not None:
        world_size, gpus_per_node = _check_world(world_size, gpus_per_node)
    small, large = [], []
    d = 1
    while d * d <= world_size:
        if world_size % d == 0:
            small.append(d)
            if d * d != world_size:
                large.append(world_size // d)
        d += 1
    sizes = small + large[::-1]
    if gpus_per_node is not None:
        sizes = [g for g in sizes if gpus_per_node % g == 0 or g % gpus_per_node == 0]
    return tuple(sizes)


def hsdp_step(params, world_size, shard_group_size, *, gpus_per_node, intra_node_bandwidth_bytes_per_s,
              inter_node_bandwidth_bytes_per_s, alpha_s=0.0, inter_node_alpha_s=None, param_bytes=2,
              grad_bytes=2, optimizer_bytes=12, num_units=1, reshard_after_forward=True, algorithm="ring"):
    """Per-step HSDP communication time and per-device model-state memory.

    shard group (g ranks): (2 if reshard_after_forward else 1) x AllGather(p*Psi) + ReduceScatter(g*Psi)
    replicas (world/g ranks): AllReduce(g_bytes * Psi / g)  -- PyTorch FSDP HYBRID_SHARD, ZeRO Sec. 7.
    ``inter_node_alpha_s`` defaults to ``alpha_s``.
    """
    positive("params", params)
    world_size, gpus_per_node = _check_world(world_size, gpus_per_node)
    g = _check_group(shard_group_size, world_size)
    positive("intra_node_bandwidth_bytes_per_s", intra_node_bandwidth_bytes_per_s)
    positive("inter_node_bandwidth_bytes_per_s", inter_node_bandwidth_bytes_per_s)
    non_negative("alpha_s", alpha_s)
    if inter_node_alpha_s is None:
        inter_node_alpha_s = alpha_s
    non_negative("inter_node_alpha_s", inter_node_alpha_s)
    positive("param_bytes", param_bytes)
    positive("grad_bytes", grad_bytes)
    num_units = positive_int("num_units", num_units)
    at_most("num_units", num_units, MAX_UNITS)
    if not isinstance(reshard_after_forward, bool):
        raise ValueError(f"reshard_after_forward must be True or False, got {reshard_after_forward!r}")
    memory = hsdp_model_states(params, world_size, g, stage=3, param_bytes=param_bytes,
                               grad_bytes=grad_bytes, optimizer_bytes=optimizer_bytes)
    replicas = world_size // g
    shard_on = shard_fabric(world_size, g, gpus_per_node)
    replica_on = replica_fabric(world_size, g, gpus_per_node)

    def link(fabric):
        if fabric == INTRA_NODE:
            return alpha_s, intra_node_bandwidth_bytes_per_s
        return inter_node_alpha_s, inter_node_bandwidth_bytes_per_s

    def per_unit(op, total_bytes, ranks, fabric):
        if fabric == NO_FABRIC:
            return 0.0
        alpha, bandwidth = link(fabric)
        return num_units * collectives.time_s(op, total_bytes / num_units, ranks, alpha_s=alpha,
                                              bandwidth_bytes_per_s=bandwidth, algorithm=algorithm)

    gathers = 2 if reshard_after_forward else 1
    allgather = gathers * per_unit("allgather", param_bytes * float(params), g, shard_on)
    reducescatter = per_unit("reducescatter", grad_bytes * float(params), g, shard_on)
    allreduce = per_unit("allreduce", grad_bytes * float(params) / g, replicas, replica_on)
    total = allgather + reducescatter + allreduce
    if not math.isfinite(total):
        raise ValueError("params is too large: the communication time overflows a float")
    return HsdpStep(g, replicas, shard_on, replica_on, allgather, reducescatter, allreduce, total, memory)


def smallest_fitting_group(params, world_size, *, hbm_bytes, activation_bytes=0.0, largest_unit_params=0.0,
                           gpus_per_node=None, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    """Smallest shard-group size g (a divisor of world_size; node-aligned if ``gpus_per_node`` is
    given) whose per-device memory fits ``hbm_bytes``, or None if even g = world_size does not.

    memory(g) = ZeRO-3 model states at degree g (ZeRO Sec. 5: (p+g+K)Psi/g) + ``activation_bytes``,
    plus -- if ``largest_unit_params`` > 0 -- FSDP's gathered unit and its full gradient
    (``memory.fsdp_peak_memory``). The article: "shard exactly as wide as you must to fit".
    """
    positive("params", params)
    positive("hbm_bytes", hbm_bytes)
    non_negative("activation_bytes", activation_bytes)
    non_negative("largest_unit_params", largest_unit_params)
    at_most("largest_unit_params", largest_unit_params, params)
    for g in shard_group_sizes(world_size, gpus_per_node):
        if largest_unit_params > 0:
            states = fsdp_peak_memory(params, g, largest_unit_params, param_bytes=param_bytes,
                                      grad_bytes=grad_bytes, optimizer_bytes=optimizer_bytes).peak_bytes
        else:
            states = hsdp_model_states(params, world_size, g, param_bytes=param_bytes, grad_bytes=grad_bytes,
                                       optimizer_bytes=optimizer_bytes).total_bytes
        if states + activation_bytes <= hbm_bytes:
            return g
    return None


@dataclass(frozen=True)
class GroupOption:
    """One node-aligned shard group size: whether ZeRO-3 at that size fits, and what it sends."""

    group: int
    replicas: int
    fits: bool
    per_device_bytes: float  # FSDP's peak (gathered unit and its gradient) + activation_bytes
    comm_s: float  # hsdp_step's total_comm_s: every collective of the step, before overlap
    inter_node_bytes: float  # hsdp_traffic's bytes one GPU sends across nodes per step


def shard_group_options(params, world_size, *, hbm_bytes, gpus_per_node, intra_link, inter_link, num_units,
                        activation_bytes=0.0, largest_unit_params=0.0):
    """Every node-aligned shard group size of ``world_size`` (``shard_group_sizes``), each with its
    memory (as ``smallest_fitting_group`` counts it) and its step's communication (``hsdp_step`` on
    ``intra_link`` / ``inter_link``, ``models.hardware`` keys, at their peak rates and alphas: the
    prices Figure 10 draws). Where several fit, the cheapest to run is the fewest seconds of
    communication, not the smallest group (ZeRO++ Sec. 3, hierarchical partitioning: keep the
    chatty collective inside a node)."""
    inside, across = hardware.link(intra_link), hardware.link(inter_link)
    world_size, gpus_per_node = _check_world(world_size, min(gpus_per_node, world_size))
    options = []
    for g in shard_group_sizes(world_size, gpus_per_node):
        if largest_unit_params > 0:
            states = fsdp_peak_memory(params, g, largest_unit_params).peak_bytes
        else:
            states = hsdp_model_states(params, world_size, g).total_bytes
        step = hsdp_step(params, world_size, g, gpus_per_node=gpus_per_node, num_units=num_units,
                         alpha_s=inside.alpha_s, inter_node_alpha_s=across.alpha_s,
                         intra_node_bandwidth_bytes_per_s=inside.bandwidth_bytes_per_s,
                         inter_node_bandwidth_bytes_per_s=across.bandwidth_bytes_per_s)
        traffic = hsdp_traffic(params, world_size, g, gpus_per_node=gpus_per_node)
        per_device = states + activation_bytes
        options.append(GroupOption(g, world_size // g, per_device <= hbm_bytes, per_device, step.total_comm_s,
                                   traffic.inter_node_bytes))
    return tuple(options)


@dataclass(frozen=True)
class HsdpTraffic:
    """Bytes one device sends per step (one direction, the busiest rank of each ring), split by
    the fabric that carries them. ``shard_bytes``: the shard group's AllGathers and ReduceScatter;
    ``replica_bytes``: the AllReduce of the 1/g gradient shard across replicas."""

    shard_bytes: float
    replica_bytes: float
    intra_node_bytes: float
    inter_node_bytes: float
    shard_fabric: str
    replica_fabric: str


def hsdp_traffic(params, world_size, shard_group_size, *, gpus_per_node, param_bytes=2, grad_bytes=2,
                 reshard_after_forward=True):
    """Per-device bytes per step on each fabric (ring volumes, ``collectives.volume_bytes_per_rank``):

    shard group (g ranks):   (2 or 1) x (g-1)/g x p Psi + (g-1)/g x g_bytes Psi   (ZeRO Sec. 7: 3 Psi)
    replicas (world/g = R):  2 (R-1)/R x g_bytes Psi / g                         (AllReduce of the shard)

    each on the fabric ``shard_fabric`` / ``replica_fabric`` names (placement as in the module
    docstring). For 7.5B parameters on 64 nodes of 8 GPUs with g = 8: 39.4 GB over NVLink and 3.7 GB
    across nodes; with g = 512, 44.9 GB across nodes (the article, "Hybrid sharding").
    """
    positive("params", params)
    world_size, gpus_per_node = _check_world(world_size, gpus_per_node)
    g = _check_group(shard_group_size, world_size)
    positive("param_bytes", param_bytes)
    positive("grad_bytes", grad_bytes)
    if not isinstance(reshard_after_forward, bool):
        raise ValueError(f"reshard_after_forward must be True or False, got {reshard_after_forward!r}")
    gathers = 2 if reshard_after_forward else 1
    shard = (gathers * collectives.volume_bytes_per_rank("allgather", param_bytes * float(params), g)
             + collectives.volume_bytes_per_rank("reducescatter", grad_bytes * float(params), g))
    replica = collectives.volume_bytes_per_rank("allreduce", grad_bytes * float(params) / g, world_size // g)
    shard_on = shard_fabric(world_size, g, gpus_per_node)
    replica_on = replica_fabric(world_size, g, gpus_per_node)
    on = {INTRA_NODE: 0.0, INTER_NODE: 0.0, NO_FABRIC: 0.0}
    on[shard_on] += shard
    on[replica_on] += replica
    if not math.isfinite(shard + replica):
        raise ValueError("params is too large: the byte count overflows a float")
    return HsdpTraffic(shard, replica, on[INTRA_NODE], on[INTER_NODE], shard_on, replica_on)
