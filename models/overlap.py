"""Compute/communication overlap: why "hidden" communication is not free, and how far each
parallelism axis' collective sits from the operation that consumes its result.

What it models
--------------
1. ``overlap_step``: one window of compute (``compute_s`` of work at full speed) with one
   collective (``comm_s`` on an idle link) issued at the start of the window. The timeline
   diagram ("nominal") assumes the two do not interfere: step = max(compute, comm). The
   article's "three resources" model (reference article, section "Overlap is not free" and
   Figure 06 "The three resources a 'free' overlap actually consumes") adds the interference:
     * SMs: NCCL kernels occupy streaming multiprocessors, so compute runs at (1 - sm_contention);
     * memory bandwidth: the collective reads/writes HBM, slowing memory-bound compute by
       ``memory_contention``;
     * the link: another stream on the same link leaves this collective ``link_share`` of it.
   While both run, compute progresses at rate (1 - sm_contention) * (1 - memory_contention) and
   the collective takes comm_s / link_share; afterwards compute runs at full speed.
   Compute slowdown multiplies because the two losses are independent throughput factors
   (a modelling choice of this module, not a published formula).
2. ``AXIS_COLLECTIVES`` and ``hidden_comm``: the "distance from consumer" of each axis'
   collective (reference article, "Overlap, strategy by strategy" and Figure 18), and how much of
   a collective can hide given the compute available before its consumer: hidden = min(comm, window).

What it does not model
----------------------
Kernel-level scheduling, copy-engine contention, the order in which several collectives share a
window, or how the contention fractions vary during a GEMM. The contention fractions are inputs;
``sm_contention_from_channels`` gives one way to estimate the SM share.
"""
import math
from dataclasses import dataclass

from models._validate import choice, fraction, non_negative, positive, positive_int


def sm_contention_from_channels(channels, sm_count):
    """Fraction of SMs a collective holds: NCCL runs one CUDA block per channel, each block
    occupying one SM (NCCL environment docs, NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS: "reducing
    the number of channels also reduces the number of CUDA blocks used for communication")."""
    positive_int("channels", channels)
    positive_int("sm_count", sm_count)
    if channels > sm_count:
        raise ValueError(f"channels must be <= sm_count={sm_count}, got {channels}")
    return channels / sm_count


@dataclass(frozen=True)
class OverlapResult:
    nominal_step_s: float  # timeline diagram: max(compute, comm), no interference
    step_s: float  # with SM, memory-bandwidth and link contention
    serial_step_s: float  # no overlap at all: compute + comm (comm at the shared link rate)
    comm_alone_s: float  # the collective's duration while overlapping (comm_s / link_share)
    nominal_exposed_comm_s: float
    exposed_comm_s: float  # the part of the step during which only communication runs
    compute_rate_during_overlap: float  # 1 = full speed
    compute_stretch_s: float  # how much later the compute finishes than it would alone
    compute_slowdown: float  # share of compute throughput lost: stretch / compute's elapsed time
    nominal_overlap_fraction: float  # share of comm hidden in the diagram
    overlap_efficiency: float  # share of comm time actually removed from the serial step
    mfu_without_collective: float
    mfu_with_collective: float
    mfu_nominal: float


def overlap_step(
    compute_s,
    comm_s,
    *,
    sm_contention=0.0,
    memory_contention=0.0,
    link_share=1.0,
    compute_mfu=1.0,
):
    """Nominal vs achieved overlap of one collective with one window of compute.

    ``compute_mfu`` is the MFU the compute achieves on its own; MFU with the collective is
    compute_mfu * compute_s / step_s (same useful FLOPs over a longer step): the reference
    article's advice to "compare MFU with and without the collective rather than step times".
    """
    non_negative("compute_s", compute_s)
    non_negative("comm_s", comm_s)
    fraction("sm_contention", sm_contention)
    fraction("memory_contention", memory_contention)
    positive("link_share", link_share)
    if link_share > 1:
        raise ValueError(f"link_share must be between 0 and 1, got {link_share!r}")
    positive("compute_mfu", compute_mfu)
    if compute_mfu > 1:
        raise ValueError(f"compute_mfu must be between 0 and 1, got {compute_mfu!r}")
    compute_s, comm_s = float(compute_s), float(comm_s)
    rate = (1.0 - sm_contention) * (1.0 - memory_contention)
    comm_alone_s = comm_s / link_share
    if not math.isfinite(comm_alone_s + compute_s):
        raise ValueError(f"comm_s / link_share + compute_s overflows a float: comm_s={comm_s!r}, link_share={link_share!r}")

    nominal_step_s = max(compute_s, comm_s)
    serial_step_s = compute_s + comm_alone_s
    if compute_s == 0.0 or comm_alone_s == 0.0:
        step_s = serial_step_s  # nothing to overlap with
        compute_finish_s = compute_s
    elif rate > 0 and compute_s / rate <= comm_alone_s:
        compute_finish_s = compute_s / rate  # compute ends first, slowed throughout
        step_s = comm_alone_s
    else:
        done_during_comm = comm_alone_s * rate  # work completed while the collective ran
        compute_finish_s = comm_alone_s + (compute_s - done_during_comm)
        step_s = compute_finish_s

    exposed_comm_s = max(0.0, step_s - compute_finish_s)
    nominal_exposed_comm_s = max(0.0, comm_s - compute_s)
    compute_stretch_s = max(0.0, compute_finish_s - compute_s)
    # Throughput lost, 1 - work / elapsed: bounded in [0, 1] even when compute stalls completely.
    compute_slowdown = min(1.0, compute_stretch_s / compute_finish_s) if compute_finish_s > 0 else 0.0
    nominal_overlap_fraction = min(comm_s, compute_s) / comm_s if comm_s > 0 else 1.0
    overlap_efficiency = (serial_step_s - step_s) / comm_alone_s if comm_alone_s > 0 else 1.0
    # min(1, .) only guards subnormal rounding: step_s >= compute_s always holds.
    mfu_with = compute_mfu * min(1.0, compute_s / step_s) if step_s > 0 else compute_mfu
    mfu_nominal = compute_mfu * min(1.0, compute_s / nominal_step_s) if nominal_step_s > 0 else compute_mfu
    return OverlapResult(
        nominal_step_s=nominal_step_s,
        step_s=step_s,
        serial_step_s=serial_step_s,
        comm_alone_s=comm_alone_s,
        nominal_exposed_comm_s=nominal_exposed_comm_s,
        exposed_comm_s=exposed_comm_s,
        compute_rate_during_overlap=rate,
        compute_stretch_s=compute_stretch_s,
        compute_slowdown=compute_slowdown,
        nominal_overlap_fraction=nominal_overlap_fraction,
        overlap_efficiency=max(0.0, min(1.0, overlap_efficiency)),
        mfu_without_collective=float(compute_mfu),
        mfu_with_collective=mfu_with,
        mfu_nominal=mfu_nominal,
    )


# ---------------------------------------------------------------------------------------------
# Distance from the consumer (reference article, "Overlap, strategy by strategy", Figure 18)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AxisCollective:
    axis: str
    collective: str
    issued: str  # when the collective can start
    consumer: str  # the first operation that needs its result
    window: str  # the compute that can run between the two
    hideability_rank: int  # 1 = most hideable, as ranked in the reference article
    consumer_is_next_op: bool  # True: nothing can run in between, the window is zero
    needs_prefetch: bool  # True: the window exists only if the framework issues it early


AXIS_COLLECTIVES = {
    a.axis: a
    for a in (
        AxisCollective(
            "dp",
            "AllReduce (gradient buckets)",
            "when a bucket's last gradient is produced during the backward pass",
            "the optimizer step",
            "the rest of the backward pass after the bucket fires",
            1,
            False,
            False,
        ),
        AxisCollective(
            "fsdp",
            "AllGather (parameters of the next unit)",
            "as soon as the previous unit starts, if prefetching is on",
            "the next unit's forward or backward",
            "one unit's (layer's) compute",
            2,
            False,
            True,
        ),
        AxisCollective(
            "pp",
            "Send/Recv (activations, gradients)",
            "when a stage finishes a microbatch",
            "the next stage's compute on that microbatch",
            "this stage's compute on the next microbatch",
            3,
            False,
            False,
        ),
        AxisCollective(
            "cp",
            "Ring Send/Recv (K, V blocks)",
            "at the start of each ring rotation",
            "the attention block of the next rotation",
            "one attention block (one rotation's compute)",
            4,
            False,
            False,
        ),
        AxisCollective(
            "ep",
            "All-to-All (token dispatch and combine)",
            "right after routing",
            "the expert GEMM right after dispatch (and the block after combine)",
            "none unless the schedule overlaps another microbatch or a shared expert",
            5,
            False,
            False,
        ),
        AxisCollective(
            "tp",
            "AllReduce (activations)",
            "right after the row-parallel matmul",
            "the very next operation",
            "none",
            6,
            True,
            False,
        ),
    )
}


@dataclass(frozen=True)
class Hiding:
    axis: str
    window_s: float  # compute actually available before the consumer
    hidden_s: float
    exposed_s: float
    hidden_fraction: float


def hidden_comm(axis, comm_s, compute_before_consumer_s, *, prefetch=True):
    """How much of one collective hides behind the compute before its consumer.

    hidden = min(comm, window). The window is forced to zero when the consumer is the very next
    op (TP) or when the axis needs prefetching and ``prefetch`` is False (FSDP without
    prefetch is "fully exposed", reference article).
    """
    choice("axis", axis, tuple(AXIS_COLLECTIVES))
    non_negative("comm_s", comm_s)
    non_negative("compute_before_consumer_s", compute_before_consumer_s)
    spec = AXIS_COLLECTIVES[axis]
    window = float(compute_before_consumer_s)
    if spec.consumer_is_next_op or (spec.needs_prefetch and not prefetch):
        window = 0.0
    hidden = min(float(comm_s), window)
    exposed = float(comm_s) - hidden
    return Hiding(axis, window, hidden, exposed, hidden / comm_s if comm_s > 0 else 1.0)


# ---------------------------------------------------------------------------------------------
# Figure 06: the three resources, from hardware quantities
# ---------------------------------------------------------------------------------------------

# HBM bytes per byte a ring AllReduce step moves over the link: the peer writes the incoming
# chunk into this GPU's buffer (1), the reduction kernel reads it and the local chunk (2) and
# forwards the sum straight to the next peer's buffer. A modelling assumption of this module
# (NCCL ring algorithm, NVIDIA/nccl src/device/prims_simple.h: recv + reduce + send per step).
RING_ALLREDUCE_HBM_BYTES_PER_LINK_BYTE = 3.0


def hbm_share_from_link(link_bytes_per_s, hbm_bytes_per_s, *,
                        hbm_bytes_per_link_byte=RING_ALLREDUCE_HBM_BYTES_PER_LINK_BYTE):
    """Fraction of the GPU's HBM bandwidth a collective streaming at ``link_bytes_per_s``
    takes: min(1, k * link / HBM)."""
    positive("link_bytes_per_s", link_bytes_per_s)
    positive("hbm_bytes_per_s", hbm_bytes_per_s)
    positive("hbm_bytes_per_link_byte", hbm_bytes_per_link_byte)
    return min(1.0, hbm_bytes_per_link_byte * link_bytes_per_s / hbm_bytes_per_s)


@dataclass(frozen=True)
class ThreeResources:
    """A GEMM overlapped with one collective, from hardware quantities (Figure 06)."""

    comm_s: float  # the collective's bytes over the link, on an idle link
    sm_share: float  # SMs its channels hold: channels / SMs
    hbm_share: float  # HBM bandwidth its traffic takes
    hbm_traffic_bytes_per_s: float  # that traffic: hbm_share x the GPU's HBM bandwidth
    sm_contention: float  # what the GEMM loses to the SMs: sm_share x (1 - mem_bound)
    memory_contention: float  # what it loses to HBM: hbm_share x mem_bound
    result: OverlapResult  # overlap_step with those two contentions
    compute_overlapped_s: float  # the GEMM's time from its start to its end, with the collective
    compute_slowdown: float  # compute_overlapped_s / compute_s (>= 1); NOT OverlapResult.compute_slowdown
    slowed_until_s: float  # the GEMM runs slowed while both run: until the first of the two ends
    overlap_efficiency: float  # share of the collective's time that did not add to the step
    exposed_comm_s: float
    step_s: float


def three_resource_overlap(compute_s, comm_bytes, link_bytes_per_s, *, channels, sm_count,
                           mem_bound, hbm_bytes_per_s,
                           hbm_bytes_per_link_byte=RING_ALLREDUCE_HBM_BYTES_PER_LINK_BYTE):
    """``overlap_step`` for a GEMM of ``compute_s`` (alone) beside a collective moving
    ``comm_bytes`` at ``link_bytes_per_s``, holding ``channels`` of ``sm_count`` SMs
    (``sm_contention_from_channels``) and ``hbm_share_from_link`` of the HBM bandwidth.

    A roofline split of the GEMM (a modelling assumption of this module): its compute-bound
    share ``1 - mem_bound`` slows with the SMs taken, its memory-bound share ``mem_bound``
    with the HBM bandwidth taken; the two enter ``overlap_step`` as its SM and memory
    contentions (reference article, "Overlap is not free": link, SMs, memory bandwidth).
    """
    non_negative("compute_s", compute_s)
    non_negative("comm_bytes", comm_bytes)
    fraction("mem_bound", mem_bound)
    comm_s = float(comm_bytes) / positive("link_bytes_per_s", link_bytes_per_s)
    sm_share = sm_contention_from_channels(channels, sm_count)
    hbm_share = hbm_share_from_link(link_bytes_per_s, hbm_bytes_per_s, hbm_bytes_per_link_byte=hbm_bytes_per_link_byte)
    sm_contention = sm_share * (1.0 - mem_bound)
    memory_contention = hbm_share * mem_bound
    result = overlap_step(compute_s, comm_s, sm_contention=sm_contention, memory_contention=memory_contention)
    compute_overlapped_s = float(compute_s) + result.compute_stretch_s
    return ThreeResources(
        comm_s=comm_s,
        sm_share=sm_share,
        hbm_share=hbm_share,
        hbm_traffic_bytes_per_s=hbm_share * hbm_bytes_per_s,
        sm_contention=sm_contention,
        memory_contention=memory_contention,
        result=result,
        compute_overlapped_s=compute_overlapped_s,
        compute_slowdown=compute_overlapped_s / compute_s if compute_s > 0 else 1.0,
        slowed_until_s=min(compute_overlapped_s, comm_s),
        overlap_efficiency=result.overlap_efficiency,
        exposed_comm_s=result.exposed_comm_s,
        step_s=result.step_s,
    )
