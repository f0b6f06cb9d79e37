"""The FSDP step as a schedule: per-unit AllGather, compute, free, ReduceScatter.

What it models: one training step of fully sharded data parallelism (ZeRO-3 executed the way
PyTorch FSDP executes it; Zhao et al., "PyTorch FSDP", VLDB'23, Sec. 3-4). The model is a list
of units (typically one transformer block each). Forward: AllGather unit i's parameters,
compute, free the gathered copy. Backward, in reverse order: AllGather again (only if
``reshard_after_forward``), compute the gradient (``backward_factor`` x forward time, 2x by
default), ReduceScatter the full gradient to shards. There is one communication stream and one
compute stream, each running its operations one at a time in issue order.

Prefetch (FSDP ``forward_prefetch`` / ``BACKWARD_PRE``): the next unit's AllGather is issued
when the current unit starts computing, so at most two units are gathered at once. Without
prefetch it is issued only when the compute stream needs it -- and in backward it queues behind
the previous unit's ReduceScatter on the single communication stream.

Collective times come from ``models.collectives.time_s`` (ring alpha-beta), with the full
buffer size (the gathered unit, the unsharded gradient) as the message size.

What it does not model: the optimizer step (local, no communication), activations, the root
module's special-casing (every unit reshards, including the last, so backward opens with one
exposed AllGather), rate limiting, CPU offload, or contention between the two streams.
Memory counts the ZeRO-3 resident shards (ZeRO Sec. 5: (p+g+K)Psi/N) plus each gathered unit
in full (p bytes x unit params) while alive, plus each unit's unsharded gradient (g bytes x unit
params) from the start of its backward compute until its ReduceScatter ends.
"""
import math
from dataclasses import dataclass

from models import collectives
from models._validate import at_most, non_negative, positive, positive_int
from models.memory import MAX_DEVICES, model_states

__all__ = ["Event", "FsdpStep", "simulate_fsdp_step", "uniform_units", "MAX_UNITS"]

# A figure draws every unit; thousands of units is already per-parameter wrapping.
MAX_UNITS = 4096


@dataclass(frozen=True)
class Event:
    """One bar on the timeline. ``kind`` is "allgather", "compute", "reducescatter" or "free"
    (zero-length: the gathered parameters of ``unit`` are released)."""

    kind: str
    phase: str     # "forward" or "backward"
    unit: int
    stream: str    # "comm" or "compute"
    start_s: float
    end_s: float

    @property
    def duration_s(self):
        return self.end_s - self.start_s


@dataclass(frozen=True)
class FsdpStep:
    """The simulated step. ``memory_curve`` is a step function: ((time_s, bytes), ...), each
    value holding from its time until the next point's time."""

    events: tuple
    step_time_s: float
    compute_s: float
    comm_busy_s: float
    exposed_comm_s: float          # time the compute stream sits idle waiting on communication
    comm_volume_elements: float    # sum of collective buffer sizes, in parameters (ZeRO: 3Psi)
    resident_bytes: float
    peak_bytes: float
    mean_bytes: float              # time-average over the step
    memory_curve: tuple


def uniform_units(params, n_units):
    """``n_units`` equal units totalling ``params`` (one transformer block each, typically)."""
    positive("params", params)
    positive_int("n_units", n_units)
    at_most("n_units", n_units, MAX_UNITS)
    return (float(params) / n_units,) * int(n_units)


def _check_units(unit_params):
    if isinstance(unit_params, (str, bytes)) or not hasattr(unit_params, "__len__"):
        raise ValueError(f"unit_params must be a list of parameter counts, got {unit_params!r}")
    if not unit_params:
        raise ValueError("unit_params must not be empty")
    at_most("len(unit_params)", len(unit_params), MAX_UNITS)
    for i, count in enumerate(unit_params):
        positive(f"unit_params[{i}]", count)
    return tuple(float(c) for c in unit_params)


def _check_forward(forward_s, n):
    if isinstance(forward_s, (int, float)) and not isinstance(forward_s, bool):
        non_negative("forward_s", forward_s)
        return (float(forward_s),) * n
    if isinstance(forward_s, (str, bytes)) or not hasattr(forward_s, "__len__"):
        raise ValueError(f"forward_s must be a number or a list of seconds per unit, got {forward_s!r}")
    if len(forward_s) != n:
        raise ValueError(f"forward_s has {len(forward_s)} entries but unit_params has {n}")
    for i, t in enumerate(forward_s):
        non_negative(f"forward_s[{i}]", t)
    return tuple(float(t) for t in forward_s)


def _check_flag(name, value):
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def simulate_fsdp_step(unit_params, forward_s, *, shard_degree, bandwidth_bytes_per_s, alpha_s=0.0,
                       param_bytes=2, grad_bytes=2, optimizer_bytes=12, backward_factor=2.0,
                       prefetch=True, reshard_after_forward=True, algorithm="ring"):
    """Simulate one FSDP step; see the module docstring for the schedule and its assumptions.

    ``unit_params``: parameters per unit, in forward order. ``forward_s``: forward compute seconds,
    one number for every unit or one per unit. ``shard_degree``: ranks sharing each unit.
    ``bandwidth_bytes_per_s`` (one direction, per rank) and ``alpha_s`` feed the ring cost model.
    """
    units = _check_units(unit_params)
    n = len(units)
    forward = _check_forward(forward_s, n)
    positive_int("shard_degree", shard_degree)
    at_most("shard_degree", shard_degree, MAX_DEVICES)
    positive("bandwidth_bytes_per_s", bandwidth_bytes_per_s)
    non_negative("alpha_s", alpha_s)
    positive("param_bytes", param_bytes)
    positive("grad_bytes", grad_bytes)
    non_negative("optimizer_bytes", optimizer_bytes)
    non_negative("backward_factor", backward_factor)
    _check_flag("prefetch", prefetch)
    _check_flag("reshard_after_forward", reshard_after_forward)
    shard_degree = int(shard_degree)
    total_params = math.fsum(units)
    resident = model_states(total_params, shard_degree, 3, param_bytes=param_bytes, grad_bytes=grad_bytes,
                            optimizer_bytes=optimizer_bytes).total_bytes

    cache = {}

    def collective_s(op, nbytes):
        key = (op, nbytes)
        if key not in cache:
            if shard_degree == 1:
                cache[key] = 0.0  # nothing to gather from or scatter to
            else:
                cache[key] = float(collectives.time_s(op, nbytes, shard_degree, alpha_s=alpha_s,
                                                      bandwidth_bytes_per_s=bandwidth_bytes_per_s,
                                                      algorithm=algorithm))
        return cache[key]

    gather_s = [collective_s("allgather", param_bytes * u) for u in units]
    scatter_s = [collective_s("reducescatter", grad_bytes * u) for u in units]
    backward = [backward_factor * t for t in forward]

    events = []
    deltas = []  # (time_s, bytes): memory allocated (+) or released (-)
    comm_free = 0.0
    compute_free = 0.0
    compute_waiting = 0.0

    def communicate(kind, phase, unit, issue_s, duration_s):
        nonlocal comm_free
        start = max(comm_free, issue_s)
        comm_free = start + duration_s
        events.append(Event(kind, phase, unit, "comm", start, comm_free))
        return start, comm_free

    def compute(phase, unit, ready_s, duration_s):
        nonlocal compute_free, compute_waiting
        start = max(compute_free, ready_s)
        compute_waiting += start - compute_free
        compute_free = start + duration_s
        events.append(Event("compute", phase, unit, "compute", start, compute_free))
        return start, compute_free

    def release_params(phase, unit, at_s):
        events.append(Event("free", phase, unit, "compute", at_s, at_s))
        deltas.append((at_s, -param_bytes * units[unit]))

    # Forward, units 0..n-1.
    previous_start = previous_end = 0.0
    for i in range(n):
        issue = 0.0 if i == 0 else (previous_start if prefetch else previous_end)
        gather_start, gather_end = communicate("allgather", "forward", i, issue, gather_s[i])
        deltas.append((gather_start, param_bytes * units[i]))
        previous_start, previous_end = compute("forward", i, gather_end, forward[i])
        if reshard_after_forward:
            release_params("forward", i, previous_end)
    forward_end = compute_free

    # Backward, units n-1..0. Prefetch issues unit j's AllGather when unit j+1 starts computing,
    # ahead of unit j+1's ReduceScatter; without prefetch it queues behind that ReduceScatter.
    backward_start = [0.0] * n
    backward_end = [0.0] * n

    def reduce_scatter(j):
        start, end = communicate("reducescatter", "backward", j, backward_end[j], scatter_s[j])
        deltas.append((end, -grad_bytes * units[j]))

    for j in range(n - 1, -1, -1):
        later = j + 1 if j < n - 1 else None
        ready = 0.0
        if not prefetch and later is not None:
            reduce_scatter(later)
        if reshard_after_forward:
            if later is None:
                issue = forward_end
            else:
                issue = backward_start[later] if prefetch else backward_end[later]
            gather_start, ready = communicate("allgather", "backward", j, issue, gather_s[j])
            deltas.append((gather_start, param_bytes * units[j]))
        if prefetch and later is not None:
            reduce_scatter(later)
        backward_start[j], backward_end[j] = compute("backward", j, ready, backward[j])
        deltas.append((backward_start[j], grad_bytes * units[j]))
        release_params("backward", j, backward_end[j])
    reduce_scatter(0)

    step_time = max(comm_free, compute_free)
    compute_total = math.fsum(forward) + math.fsum(backward)
    comm_busy = math.fsum(e.duration_s for e in events if e.stream == "comm")
    gathers_per_unit = 2 if reshard_after_forward else 1
    volume = (gathers_per_unit + 1) * total_params

    # Releases before allocations at the same instant: a freed buffer is reused at once.
    deltas.sort(key=lambda d: (d[0], d[1]))
    curve = [(0.0, resident)]
    level = resident
    peak = resident
    area = 0.0
    last_t = 0.0
    for t, change in deltas:
        area += level * (t - last_t)
        last_t = t
        level += change
        if t == curve[-1][0]:
            curve[-1] = (t, level)
        elif level != curve[-1][1]:
            curve.append((t, level))
        peak = max(peak, level)
    area += level * (step_time - last_t)
    mean = area / step_time if step_time > 0 else peak
    if not all(math.isfinite(x) for x in (step_time, peak, mean, volume)):
        raise ValueError("unit_params or forward_s is too large: the schedule overflows a float")

    return FsdpStep(
        events=tuple(sorted(events, key=lambda e: (e.start_s, e.stream != "comm"))),
        step_time_s=step_time,
        compute_s=compute_total,
        comm_busy_s=comm_busy,
        exposed_comm_s=compute_waiting + (step_time - compute_free),
        comm_volume_elements=volume,
        resident_bytes=resident,
        peak_bytes=peak,
        mean_bytes=mean,
        memory_curve=tuple(curve),
    )


# ---------------------------------------------------------------------------------------------
# The same schedule with each collective's duration given directly (Figure 09: a reader sets the
# per-unit compute and AllGather times rather than bytes and bandwidths).

def simulate_fsdp_timed(n_units, forward_s, gather_s, *, backward_factor=2.0, prefetch=True,
                        reshard_after_forward=True):
    """``simulate_fsdp_step`` for ``n_units`` equal units whose AllGather and ReduceScatter each take
    ``gather_s`` (Zhao et al., VLDB'23 Sec. 3-4: the ReduceScatter moves as many bytes as the
    AllGather). It runs the very same schedule: each unit is one parameter of one byte gathered
    over two ranks on a zero-latency ring at 1/(2 gather_s) bytes/s, which takes (N-1)/N x 1 byte
    / bandwidth = ``gather_s`` (``collectives.time_s``). Byte fields of the result (memory) are
    in those units; count gathered units with ``resident_units``.
    """
    n_units = positive_int("n_units", n_units)
    at_most("n_units", n_units, MAX_UNITS)
    positive("forward_s", forward_s)
    positive("gather_s", gather_s)
    bandwidth = 0.5 / gather_s
    if not math.isfinite(bandwidth) or bandwidth <= 0:
        raise ValueError(f"gather_s={gather_s!r} is outside the float range this schedule can time")
    return simulate_fsdp_step((1.0,) * n_units, forward_s, shard_degree=2, bandwidth_bytes_per_s=bandwidth,
                              param_bytes=1, grad_bytes=1, optimizer_bytes=0, backward_factor=backward_factor,
                              prefetch=prefetch, reshard_after_forward=reshard_after_forward)


@dataclass(frozen=True)
class ResidentUnits:
    """How many units hold their full (gathered) parameters over the step: ``curve`` is a step
    function ((time_s, count), ...), each count holding until the next point's time."""

    curve: tuple
    peak: int


def resident_units(step):
    """Units whose full parameters are resident, from ``step``'s events: a unit counts from the
    start of its AllGather to its ``free`` (Zhao et al. Sec. 3.2: reshard frees the unsharded
    FlatParameter). Releases come before gathers at the same instant, as in the memory curve."""
    if not isinstance(step, FsdpStep):
        raise ValueError(f"step must be an FsdpStep, got {step!r}")
    changes = sorted([(e.start_s, -1) for e in step.events if e.kind == "free"]
                     + [(e.start_s, 1) for e in step.events if e.kind == "allgather"])
    return ResidentUnits(*_step_curve(changes))


def _step_curve(changes):
    """``(curve, peak)`` of a count that moves by each ``(time, +1 or -1)`` of ``changes``
    (sorted): the curve as ``((t, count), ...)``, one point per change of the count."""
    curve = [(0.0, 0)]
    count = peak = 0
    for t, change in changes:
        count += change
        peak = max(peak, count)
        if t == curve[-1][0]:
            curve.pop()
        if not curve or count != curve[-1][1]:
            curve.append((t, count))
    return tuple(curve), peak


def compute_idle_intervals(step):
    """((start_s, end_s), ...) where the compute stream waits on communication, including the tail
    after the last gradient computation; their lengths add up to ``step.exposed_comm_s``."""
    if not isinstance(step, FsdpStep):
        raise ValueError(f"step must be an FsdpStep, got {step!r}")
    idle = []
    free_at = 0.0
    for e in step.events:
        if e.kind == "compute":
            if e.start_s > free_at:
                idle.append((free_at, e.start_s))
            free_at = e.end_s
    if step.step_time_s > free_at:
        idle.append((free_at, step.step_time_s))
    return tuple(idle)


@dataclass(frozen=True)
class FsdpLanes:
    """``simulate_fsdp_timed``'s step as a Gantt chart needs it: ``lanes`` are
    ``(kind, phase, duration_s, starts)`` -- every bar of one kind and phase, in issue order --
    and the numbers a reader is shown. ``resident`` counts the gathered units over time."""

    lanes: tuple
    step_time_s: float
    compute_s: float
    comm_busy_s: float
    exposed_comm_s: float
    idle: tuple          # ((start_s, end_s), ...) where compute waits on the wire (compute_idle_intervals)
    resident: ResidentUnits


def fsdp_lanes(n_units, forward_s, gather_s, *, backward_factor=2.0, prefetch=True, reshard_after_forward=True):
    """The schedule of ``simulate_fsdp_timed`` (equal units; AllGather and ReduceScatter each
    ``gather_s``), computed as start times per lane without building an ``Event`` per operation:
    the same issue rules as ``simulate_fsdp_step`` (Zhao et al., VLDB'23 Sec. 3-4), the same float
    operations in the same order, ~10x faster, for a figure that redraws 128 units on every move.
    tests/models/test_fsdp.py checks every start and total against ``simulate_fsdp_timed``."""
    n = positive_int("n_units", n_units)
    at_most("n_units", n, MAX_UNITS)
    forward = float(positive("forward_s", forward_s))
    gather = float(positive("gather_s", gather_s))
    non_negative("backward_factor", backward_factor)
    _check_flag("prefetch", prefetch)
    _check_flag("reshard_after_forward", reshard_after_forward)
    backward = backward_factor * forward
    comm_free = compute_free = waiting = 0.0
    f_gather, f_compute, b_gather, b_compute, scatter, changes = [], [], [], [], [], []
    previous_start = previous_end = 0.0
    for i in range(n):
        issue = 0.0 if i == 0 else (previous_start if prefetch else previous_end)
        start = comm_free if comm_free > issue else issue
        comm_free = start + gather
        f_gather.append(start)
        changes.append((start, 1))
        previous_start = compute_free if compute_free > comm_free else comm_free
        waiting += previous_start - compute_free
        compute_free = previous_end = previous_start + forward
        f_compute.append(previous_start)
        if reshard_after_forward:
            changes.append((previous_end, -1))
    forward_end = compute_free
    later_start = later_end = 0.0
    for j in range(n - 1, -1, -1):
        ready = 0.0
        if not prefetch and j < n - 1:
            start = comm_free if comm_free > later_end else later_end
            comm_free = start + gather
            scatter.append(start)
        if reshard_after_forward:
            issue = forward_end if j == n - 1 else (later_start if prefetch else later_end)
            start = comm_free if comm_free > issue else issue
            comm_free = ready = start + gather
            b_gather.append(start)
            changes.append((start, 1))
        if prefetch and j < n - 1:
            start = comm_free if comm_free > later_end else later_end
            comm_free = start + gather
            scatter.append(start)
        later_start = compute_free if compute_free > ready else ready
        waiting += later_start - compute_free
        compute_free = later_end = later_start + backward
        b_compute.append(later_start)
        changes.append((later_end, -1))
    start = comm_free if comm_free > later_end else later_end
    comm_free = start + gather
    scatter.append(start)
    step_time = max(comm_free, compute_free)
    comm_starts = f_gather + b_gather + scatter
    comm_busy = math.fsum([(s + gather) - s for s in comm_starts])
    idle = []
    free_at = 0.0
    for start, length in sorted([(s, forward) for s in f_compute] + [(s, backward) for s in b_compute]):
        if start > free_at:
            idle.append((free_at, start))
        free_at = start + length
    if step_time > free_at:
        idle.append((free_at, step_time))
    changes.sort()
    curve, peak = _step_curve(changes)
    lanes = (("allgather", "forward", gather, tuple(f_gather)), ("compute", "forward", forward, tuple(f_compute)),
             ("allgather", "backward", gather, tuple(b_gather)), ("compute", "backward", backward, tuple(b_compute)),
             ("reducescatter", "backward", gather, tuple(scatter)))
    if not math.isfinite(step_time):
        raise ValueError("forward_s or gather_s is too large: the schedule overflows a float")
    return FsdpLanes(lanes, step_time, n * forward + n * backward, comm_busy,
                     waiting + (step_time - compute_free), tuple(idle), ResidentUnits(curve, peak))
