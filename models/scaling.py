"""Scaling efficiency, MFU at scale, and the critical batch size.

What it models
--------------
* Strong scaling (fixed global batch: per-device compute T1/N) and weak scaling (fixed
  per-device batch: compute stays T1), each with a data-parallel gradient AllReduce whose
  time comes either from a caller's ``comm_time_s(n)`` or from ``models.collectives.time_s``
  (ring AllReduce of ``gradient_bytes``), of which a fraction ``overlap`` runs under compute.
* Efficiency, as the article defines it ("Scaling efficiency"): eta_N = T1 / (N * T_N) where T1
  is the time of the SAME work on one device. Strong scaling: the work is fixed, so
  eta = T1 / (N * T_N). Weak scaling: the work on N devices is N times the one-device work, whose
  one-device time is N * T1, so eta = T1 / T_N. (Standard HPC usage: Amdahl 1967 fixed-size,
  Gustafson 1988 "Reevaluating Amdahl's law", fixed-time/scaled-size.)
* MFU at scale = baseline MFU * eta (article: 94% scaling of a 30% MFU baseline is 28% MFU).
* McCandlish et al. 2018, "An Empirical Model of Large-Batch Training", Sec. 2 (Eqs. 2.11-2.12):
  steps S = S_min (1 + B_noise / B), examples E = E_min (1 + B / B_noise), so
  (S/S_min - 1)(E/E_min - 1) = 1 and B_crit = E_min / S_min (= B_noise in this model).
* Kaplan et al. 2020, "Scaling Laws for Neural Language Models", Eq. 1.4:
  B_crit(L) = B_* / L^(1/alpha_B), B_* ~ 2e8 tokens, alpha_B ~ 0.21.
* ``time_to_target``: as the world size grows under weak scaling, tokens/s keep climbing but past
  B_crit each extra token buys less progress, so tokens-to-target climb too (article Figure 23).

What it does not model: pipeline bubbles, TP/CP communication, contention between collectives,
learning-rate retuning at large batch, or how B_noise drifts as the loss falls (Kaplan's L
dependence is exposed separately, not fed back into the step count).
"""
import math
from dataclasses import dataclass

from models import collectives
from models._validate import choice, finite_result, fraction, non_negative, positive, positive_int

__all__ = [
    "ScalingPoint", "TargetPoint", "MAX_WORLD_SIZE",
    "exposed_comm_s", "step_time_s", "allreduce_comm", "strong_scaling", "weak_scaling",
    "strong_efficiency", "weak_efficiency", "mfu_at_scale",
    "critical_batch", "steps_to_target", "examples_to_target", "steps_for_examples",
    "kaplan_critical_batch_tokens", "time_to_target",
]

MAX_WORLD_SIZE = 2**40  # ints beyond this stop being exact floats in the efficiency ratios




def exposed_comm_s(compute_s, comm_s, overlap):
    """Communication left on the critical path: overlap*comm runs under compute, but can hide
    at most compute_s of it (DDP bucketing overlaps the backward pass; article "Overlap")."""
    non_negative("compute_s", compute_s)
    non_negative("comm_s", comm_s)
    fraction("overlap", overlap)
    return comm_s - min(overlap * comm_s, compute_s)


def step_time_s(compute_s, comm_s, overlap):
    """T_step = compute + exposed communication."""
    return compute_s + exposed_comm_s(compute_s, comm_s, overlap)


def allreduce_comm(gradient_bytes, *, alpha_s, bandwidth_bytes_per_s, algorithm="ring"):
    """A ``comm_time_s(n)`` function: one AllReduce of the gradients over n data-parallel ranks,
    timed by ``models.collectives.time_s`` (ring: 2(n-1) alpha + 2(n-1)/n * bytes / beta)."""
    non_negative("gradient_bytes", gradient_bytes)
    non_negative("alpha_s", alpha_s)
    positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    choice("algorithm", algorithm, collectives.ALGORITHMS)

    def comm_time_s(n):
        return collectives.time_s(
            "allreduce", gradient_bytes, n,
            alpha_s=alpha_s, bandwidth_bytes_per_s=bandwidth_bytes_per_s, algorithm=algorithm,
        )

    return comm_time_s


@dataclass(frozen=True)
class ScalingPoint:
    world_size: int
    compute_s: float
    comm_s: float
    exposed_comm_s: float
    step_s: float
    efficiency: float
    mfu: float | None  # baseline_mfu * efficiency, if a baseline was given


def _comm_function(comm_time_s, gradient_bytes, alpha_s, bandwidth_bytes_per_s, algorithm):
    if comm_time_s is not None:
        if not callable(comm_time_s):
            raise ValueError(f"comm_time_s must be a function of the world size, got {comm_time_s!r}")
        if gradient_bytes is not None:
            raise ValueError(
                "give either comm_time_s or gradient_bytes (+ alpha_s, bandwidth_bytes_per_s), not both"
            )
        return comm_time_s
    if gradient_bytes is None or alpha_s is None or bandwidth_bytes_per_s is None:
        raise ValueError(
            "comm_time_s is missing: pass comm_time_s=f(n), or gradient_bytes, alpha_s and "
            "bandwidth_bytes_per_s for a ring AllReduce"
        )
    return allreduce_comm(gradient_bytes, alpha_s=alpha_s, bandwidth_bytes_per_s=bandwidth_bytes_per_s,
                          algorithm=algorithm)


def _checked_comm(comm, n):
    value = comm(n)
    non_negative(f"comm_time_s({n})", value)
    return float(value)


def _world_sizes(world_sizes):
    if isinstance(world_sizes, int) and not isinstance(world_sizes, bool):
        world_sizes = (world_sizes,)
    try:
        sizes = tuple(world_sizes)
    except TypeError:
        raise ValueError(f"world_sizes must be a list of positive integers, got {world_sizes!r}") from None
    if not sizes:
        raise ValueError("world_sizes must not be empty")
    checked = []
    for n in sizes:
        n = positive_int("world_sizes", n)
        if n > MAX_WORLD_SIZE:
            raise ValueError(f"world_sizes must be <= {MAX_WORLD_SIZE}, got {n}")
        checked.append(n)
    return tuple(checked)


def strong_efficiency(t1_s, n, tn_s):
    """eta = T1 / (N * T_N), fixed total work (article "Scaling efficiency")."""
    positive("t1_s", t1_s)
    positive_int("n", n)
    positive("tn_s", tn_s)
    return t1_s / (n * tn_s)


def weak_efficiency(t1_s, tn_s):
    """eta = T1 / T_N, fixed per-device work (T1 = one device doing its share)."""
    positive("t1_s", t1_s)
    positive("tn_s", tn_s)
    return t1_s / tn_s


def mfu_at_scale(baseline_mfu, efficiency):
    """MFU of the scaled run = baseline MFU * eta (article: 0.30 * 0.94 = 0.28)."""
    fraction("baseline_mfu", baseline_mfu)
    non_negative("efficiency", efficiency)
    return baseline_mfu * efficiency


def _scaling(mode, t1_s, world_sizes, comm_time_s, gradient_bytes, alpha_s, bandwidth_bytes_per_s,
             overlap, baseline_mfu, algorithm):
    positive("t1_s", t1_s)
    fraction("overlap", overlap)
    if baseline_mfu is not None:
        fraction("baseline_mfu", baseline_mfu)
    comm = _comm_function(comm_time_s, gradient_bytes, alpha_s, bandwidth_bytes_per_s, algorithm)
    points = []
    for n in _world_sizes(world_sizes):
        compute = t1_s / n if mode == "strong" else float(t1_s)
        comm_s = _checked_comm(comm, n) if n > 1 else 0.0
        exposed = exposed_comm_s(compute, comm_s, overlap)
        step = compute + exposed
        eta = t1_s / (n * step) if mode == "strong" else t1_s / step
        finite_result("step_s", step)
        mfu = None if baseline_mfu is None else baseline_mfu * eta
        points.append(ScalingPoint(n, compute, comm_s, exposed, step, eta, mfu))
    return tuple(points)


def strong_scaling(t1_s, world_sizes, *, comm_time_s=None, gradient_bytes=None, alpha_s=None,
                   bandwidth_bytes_per_s=None, overlap=0.0, baseline_mfu=None, algorithm="ring"):
    """Fixed global batch: compute T1/N per device, comm from ``comm_time_s(N)`` or a ring
    AllReduce of ``gradient_bytes``; eta = T1 / (N * T_N)."""
    return _scaling("strong", t1_s, world_sizes, comm_time_s, gradient_bytes, alpha_s,
                    bandwidth_bytes_per_s, overlap, baseline_mfu, algorithm)


def weak_scaling(t1_s, world_sizes, *, comm_time_s=None, gradient_bytes=None, alpha_s=None,
                 bandwidth_bytes_per_s=None, overlap=0.0, baseline_mfu=None, algorithm="ring"):
    """Fixed per-device batch: compute stays T1, only exposed comm grows; eta = T1 / T_N."""
    return _scaling("weak", t1_s, world_sizes, comm_time_s, gradient_bytes, alpha_s,
                    bandwidth_bytes_per_s, overlap, baseline_mfu, algorithm)


# ---- the critical batch size ------------------------------------------------------------------

def critical_batch(s_min, e_min):
    """B_crit = E_min / S_min (McCandlish et al. 2018, Eq. 2.12)."""
    positive("s_min", s_min)
    positive("e_min", e_min)
    b_crit = finite_result("critical batch", e_min / s_min)
    if b_crit == 0:
        raise ValueError(f"e_min={e_min} / s_min={s_min} underflows to a zero critical batch")
    return b_crit


def steps_to_target(batch, *, s_min, e_min):
    """Optimizer steps to reach the target loss: S = S_min (1 + B_crit / B) (McCandlish 2018 §2)."""
    positive("batch", batch)
    return finite_result("steps", s_min * (1.0 + critical_batch(s_min, e_min) / batch))


def examples_to_target(batch, *, s_min, e_min):
    """Examples (or tokens) consumed to reach the target: E = E_min (1 + B / B_crit) = B * S."""
    positive("batch", batch)
    return finite_result("examples", e_min * (1.0 + batch / critical_batch(s_min, e_min)))


def steps_for_examples(examples, *, s_min, e_min):
    """The trade-off curve (S/S_min - 1)(E/E_min - 1) = 1 solved for S (McCandlish 2018 Eq. 2.11)."""
    positive("examples", examples)
    critical_batch(s_min, e_min)
    if examples <= e_min:
        raise ValueError(
            f"examples must be > e_min={e_min} (no batch size reaches the target with fewer), got {examples}"
        )
    return finite_result("steps", s_min * (1.0 + 1.0 / (examples / e_min - 1.0)))


def kaplan_critical_batch_tokens(loss_nats, *, b_star_tokens=2e8, alpha_b=0.21):
    """B_crit(L) = B_* / L^(1/alpha_B), tokens (Kaplan et al. 2020, Eq. 1.4; constants approximate)."""
    positive("loss_nats", loss_nats)
    positive("b_star_tokens", b_star_tokens)
    positive("alpha_b", alpha_b)
    log_value = math.log(b_star_tokens) - math.log(loss_nats) / alpha_b
    if log_value > 700:
        raise ValueError(
            f"loss_nats={loss_nats} with alpha_b={alpha_b} gives a critical batch beyond float range"
        )
    return math.exp(log_value)


@dataclass(frozen=True)
class TargetPoint:
    world_size: int
    global_batch: float  # per_device_batch * world_size, in the same unit (tokens or examples)
    step_s: float
    throughput_per_s: float  # global_batch / step_s
    efficiency: float  # weak-scaling eta = T1 / T_N
    steps: float
    examples_to_target: float
    time_to_target_s: float
    data_efficiency: float  # E_min / E = 1 / (1 + B / B_crit): 1/2 at B = B_crit


def time_to_target(t1_s, per_device_batch, world_sizes, *, s_min, e_min, comm_time_s=None,
                   gradient_bytes=None, alpha_s=None, bandwidth_bytes_per_s=None, overlap=0.0,
                   algorithm="ring"):
    """Weak scaling meets the critical batch: throughput vs examples-to-target vs time-to-target.

    Global batch B = per_device_batch * N; steps S(B) = S_min (1 + B_crit/B); step time from
    ``weak_scaling``; time = S(B) * T_N. Past B_crit, tokens/s keep rising while the tokens needed
    rise with them (article, "Scaling efficiency": "beyond it you spend twice the FLOPs").
    """
    positive("per_device_batch", per_device_batch)
    b_crit = critical_batch(s_min, e_min)
    points = []
    for p in weak_scaling(t1_s, world_sizes, comm_time_s=comm_time_s, gradient_bytes=gradient_bytes,
                          alpha_s=alpha_s, bandwidth_bytes_per_s=bandwidth_bytes_per_s,
                          overlap=overlap, algorithm=algorithm):
        batch = float(per_device_batch) * p.world_size
        steps = s_min * (1.0 + b_crit / batch)
        examples = e_min * (1.0 + batch / b_crit)
        values = (batch / p.step_s, steps, examples, steps * p.step_s)
        names = ("throughput_per_s", "steps", "examples_to_target", "time_to_target_s")
        for name, value in zip(names, values):
            finite_result(name, value)
        points.append(TargetPoint(
            p.world_size, batch, p.step_s, values[0], p.efficiency, steps, examples, values[3],
            1.0 / (1.0 + batch / b_crit),
        ))
    return tuple(points)


# ---- Figure 23: strong, weak and training efficiency on one axis -------------------------------

def sample_efficiency(batch, b_noise):
    """E_min / E = 1 / (1 + B / B_noise): the share of the examples a batch of B still turns into
    progress (McCandlish et al. 2018, Sec. 2, E = E_min (1 + B / B_noise); 1/2 at B = B_noise)."""
    positive("batch", batch)
    positive("b_noise", b_noise)
    return 1.0 / (1.0 + batch / b_noise)


def critical_world_size(b_noise, per_device_batch):
    """The world size at which a weak-scaling global batch (per_device_batch * N) reaches B_noise."""
    positive("b_noise", b_noise)
    positive("per_device_batch", per_device_batch)
    return b_noise / per_device_batch


@dataclass(frozen=True)
class EfficiencyPoint:
    world_size: int
    strong: ScalingPoint  # fixed global batch: each device computes global_batch / N samples
    weak: ScalingPoint  # fixed per-device batch: the global batch grows with N
    strong_batch_per_device: float  # global_batch / N (below 1, data parallelism alone cannot split it)
    weak_global_batch: float  # per_device_batch * N
    sample_efficiency: float  # E_min / E at the weak-scaling global batch
    effective_efficiency: float  # weak.efficiency * sample_efficiency
    throughput_per_s: float  # weak scaling, samples per second of the whole cluster
    examples_multiplier: float  # E / E_min = 1 + B / B_noise: samples spent per sample of progress


def scaling_efficiencies(world_sizes, *, per_device_batch, global_batch, b_noise, step_s_per_sample,
                         gradient_bytes, alpha_s, bandwidth_bytes_per_s, overlap, algorithm="ring"):
    """Figure 23's three curves at each world size: strong scaling of ``global_batch`` samples, weak
    scaling of ``per_device_batch`` samples per device (both with one data-parallel AllReduce of
    ``gradient_bytes``, ``overlap`` of it hidden; ``strong_scaling`` / ``weak_scaling``), and the weak
    run's training efficiency once its batch passes B_noise (McCandlish et al. 2018: E = E_min(1 + B/B_noise))."""
    positive("per_device_batch", per_device_batch)
    positive("global_batch", global_batch)
    positive("b_noise", b_noise)
    positive("step_s_per_sample", step_s_per_sample)
    comm = allreduce_comm(gradient_bytes, alpha_s=alpha_s, bandwidth_bytes_per_s=bandwidth_bytes_per_s,
                          algorithm=algorithm)
    sizes = _world_sizes(world_sizes)
    strong = strong_scaling(global_batch * step_s_per_sample, sizes, comm_time_s=comm, overlap=overlap)
    weak = weak_scaling(per_device_batch * step_s_per_sample, sizes, comm_time_s=comm, overlap=overlap)
    points = []
    for s, w in zip(strong, weak):
        batch = float(per_device_batch) * w.world_size
        sample = sample_efficiency(batch, b_noise)
        points.append(EfficiencyPoint(
            w.world_size, s, w, global_batch / s.world_size, batch, sample, w.efficiency * sample,
            finite_result("throughput_per_s", batch / w.step_s), 1.0 + batch / b_noise,
        ))
    return tuple(points)
