"""Pipeline-parallel schedules: an event-level simulation and the closed forms.

What it models
    P devices ("stages") hold consecutive slices of the layers; a batch is cut into
    m microbatches. Every device runs its forward (F) and backward (B, and for
    zero-bubble schedules the weight-gradient half W) passes in the fixed order its
    schedule prescribes; an op starts when its device is free AND its inputs exist:

    * F of microbatch i on virtual stage k needs F of i on k-1,
    * B of i on k needs B of i on k+1 (the last virtual stage needs its own F of i),
    * W of i on k needs B of i on k.

    Four schedules: GPipe (Huang et al. 2019), 1F1B / PipeDream-Flush and interleaved
    1F1B (Narayanan et al. 2021, Sec. 2.2.1 and 2.2.2, as coded in Megatron-LM's
    ``forward_backward_pipelining_without/with_interleaving``) and ZB-H1 (Qi et al.
    2023, "Zero Bubble Pipeline Parallelism", ICLR 2024, Sec. 3.1). The simulation
    yields a Gantt chart, the bubble (idle) ratio and the peak number of live
    activation stashes per device; ``bubble_ratio_formula`` and ``bubble_over_ideal``
    give the papers' closed forms. For uniform stages the simulation reproduces them
    exactly: GPipe and 1F1B for every m; interleaved for every m >= P (Megatron-LM
    needs P | m by default; we group microbatches by Megatron's own
    ``microbatch_group_size_per_vp_stage`` rule, see ``interleaved_group_size``);
    ZB-H1 for m >= P. Below m = P the pipeline never fills: interleaved then takes
    (vP + m - 1)(t_f + t_b)/v and ZB-H1 (2P + 2m - 1) T for T_F = T_B = T_W = T
    (derived here, checked by the tests), both above their closed forms.

    Memory: 1F1B holds min(P - d, m) stashes on device d (GPipe: m everywhere);
    interleaved holds Korthikanti et al. 2022's (1 + (P-1)/(P v)) times 1F1B's on
    stage 0 when P | m (more when groups are longer than P); ZB-H1 frees a stash
    only after its W, so every device peaks at min(P, m), the same peak as 1F1B's
    stage 0 (Qi et al. 2023: "same memory as 1F1B").

What it does not model
    Point-to-point transfer time (sends are free and instantaneous), the optimizer
    step, the data-parallel gradient all-reduce, kernel-efficiency loss of small
    microbatches, and activation recomputation. Memory is counted in stashes, not
    bytes: one stash = one microbatch's activations for a whole stage, so a chunk of
    an interleaved stage counts 1/chunks.
"""
import gc
import math
from dataclasses import dataclass, field, fields, replace
from functools import cached_property, lru_cache
from itertools import accumulate, repeat
from operator import floordiv, itemgetter, truediv

from models._validate import at_most, choice, positive, positive_int

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zb-h1")
SCHEDULE_LABELS = {
    "gpipe": "GPipe",
    "1f1b": "1F1B",
    "interleaved": "Interleaved 1F1B",
    "zb-h1": "Zero bubble (ZB-H1)",
}

# Bounds keep one slider move cheap in the browser (the simulation is O(ops)).
MAX_CHUNKS = 4
MAX_OPS_PER_KIND = 65536  # stages * microbatches * chunks


def _tuple_backed(cls):
    """Give a tuple subclass declared as a dataclass (fields in tuple order) named,
    read-only fields. Simulations build such rows by the thousand at C speed
    (``tuple.__new__(cls, row)``); the dataclass supplies names, repr, equality and
    immutability, so ``Cls(a, b, ...)`` works as usual."""
    names = [f.name for f in fields(cls)]

    def __new__(klass, /, *values, **named):
        if set(named) != set(names[len(values):]):
            raise TypeError(f"{cls.__name__} takes the fields {', '.join(names)}")
        return tuple.__new__(klass, values + tuple(named[name] for name in names[len(values):]))

    cls.__new__ = __new__
    cls.__getnewargs__ = lambda self: tuple(self)  # copy / pickle rebuild through __new__
    for index, name in enumerate(names):
        setattr(cls, name, property(itemgetter(index), doc=f"field {index} of the tuple"))
    return cls


@_tuple_backed
@dataclass(frozen=True, init=False)
class Op(tuple):
    """One pass of one microbatch on one device; times in seconds from step start."""

    __slots__ = ()
    stage: int  # device index, 0 = first
    kind: str  # "F", "B" (full backward, or input-gradient half for zb-h1), "W"
    microbatch: int
    chunk: int  # model chunk on this device (0 unless interleaved)
    start: float
    end: float


@_tuple_backed
@dataclass(frozen=True, init=False)
class Passes(tuple):
    """Every pass of one kind and chunk on one device: one per microbatch, all of one
    length. This is the Gantt chart's natural unit (one row of same-coloured bars), and
    the compact form a figure draws from without touching ~10^4 ``Op`` objects."""

    __slots__ = ()
    stage: int
    kind: str  # "F", "B" or "W", as in Op
    chunk: int
    duration_s: float  # each pass's length
    starts: tuple  # start time of microbatch i's pass at index i, seconds from step start


@dataclass(frozen=True)
class Timeline:
    """Result of ``simulate``: the Gantt chart and what it costs."""

    schedule: str
    stages: int
    microbatches: int
    chunks: int
    passes: tuple = field(repr=False)  # of Passes, by (stage, kind F-B-W, chunk)
    makespan: float  # seconds from the first F to the last op
    busy_per_stage: tuple  # seconds each device computes
    idle_per_stage: tuple  # makespan - busy: the bubble on each device
    bubble_ratio: float  # total idle / (stages * makespan)
    peak_stashes_per_stage: tuple  # max live activation stashes (1 = one microbatch, whole stage)
    peak_stashes: float  # max over stages
    worst_stage: int  # stage with the most peak stashes (lowest index on ties)

    @cached_property
    def ops(self):
        """Every pass as an ``Op``, sorted by (stage, start): built on first use, since
        drawing needs only ``passes``. A device runs one op at a time, so starts on one
        stage are distinct and this is each device's program order."""
        rows = []
        for p in self.passes:
            ends = [start + p.duration_s for start in p.starts]
            rows += zip(repeat(p.stage), repeat(p.kind), range(len(p.starts)), repeat(p.chunk), p.starts, ends)
        rows.sort(key=itemgetter(0, 4))
        return tuple(map(tuple.__new__, repeat(Op), rows))


# ---------------------------------------------------------------------------
# Per-device op orders, as lists of op ids. Op ids number every pass of the step:
# kind * block + virtual_stage * m + microbatch, kind 0 = F, 1 = B, 2 = W, where
# block = virtual stages * m. Virtual stage k lives on device k % P as chunk k // P.
#
# Every id list (orders, dependency table) is cut from ONE list whose item i is i, so a
# simulation copies references to the same int objects instead of creating ~2 x 10^4
# new ones: an int costs ~45 ns to create in Pyodide, ~15% of Figure 15's simulations.
_OP_IDS = []


def _op_ids(count):
    """The shared list whose item i is i, at least ``count`` long. Read it, never change
    it. It only grows, to the largest step simulated so far: at most
    3 * MAX_OPS_PER_KIND + 1 items (~6 MB), ~8,200 (~260 KB) for Figure 15."""
    if len(_OP_IDS) < count:
        _OP_IDS.extend(range(len(_OP_IDS), count))
    return _OP_IDS


def _interleave(*sequences):
    """a[0], b[0], ..., a[1], b[1], ... for sequences a, b, ... of equal length, by
    slice assignment (no Python step per element)."""
    merged = [0] * (len(sequences) * len(sequences[0]))
    for offset, sequence in enumerate(sequences):
        merged[offset::len(sequences)] = sequence
    return merged


def _one_f_one_b(forwards, backwards, warmup):
    # Narayanan et al. 2021, Sec. 2.2.1 (Megatron-LM forward_backward_pipelining_
    # without_interleaving): `warmup` forwards, then one forward / one backward,
    # then the remaining backwards.
    steady = len(forwards) - warmup
    return (
        forwards[:warmup]
        + _interleave(forwards[warmup:], backwards[:steady])
        + backwards[steady:]
    )


def _gpipe_order(stages, microbatches, device, block, ids):
    # GPipe (Huang et al. 2019, Fig. 2c): all forwards, then all backwards, last
    # microbatch first, as autograd unwinds the accumulated graph.
    first = device * microbatches
    return ids[first:first + microbatches] + ids[block + first:block + first + microbatches][::-1]


def _one_f_one_b_order(stages, microbatches, device, block, ids):
    # PipeDream-Flush: min(P-d-1, m) warm-up forwards on device d.
    first = device * microbatches
    forwards = ids[first:first + microbatches]
    backwards = ids[block + first:block + first + microbatches]
    return _one_f_one_b(forwards, backwards, min(stages - device - 1, microbatches))


def interleaved_group_size(stages, microbatches):
    """Microbatches per group in the interleaved schedule (Megatron-LM
    ``microbatch_group_size_per_vp_stage``): the smallest N >= P such that the last
    group, m mod N, is empty or holds at least P microbatches (Megatron-LM's own
    validity rule); N = P whenever P divides m. Below m = P there is a single
    group of all m microbatches (Megatron rejects this; the simulation runs it)."""
    stages = positive_int("stages", stages)
    microbatches = positive_int("microbatches", microbatches)
    if microbatches <= stages:
        return microbatches
    for size in range(stages, microbatches + 1):
        rest = microbatches % size
        if rest == 0 or rest >= stages:
            return size
    return microbatches  # unreachable: size = m always qualifies


def _interleaved_orders(stages, microbatches, chunks, block, ids):
    # Narayanan et al. 2021, Sec. 2.2.2; Megatron-LM get_schedule_table and
    # get_pp_rank_microbatches: groups of N microbatches go through chunk 0, then
    # chunk 1, ...; device d runs (P-d-1)*2 + (v-1)*N warm-up forwards (capped at
    # m*v), then 1F1B over these "virtual microbatches"; backward k walks the same
    # table with the chunk order reversed.
    group = interleaved_group_size(stages, microbatches)
    chunk_stride = stages * microbatches  # id distance between chunks of one device
    # The table as runs of consecutive ids on device 0, (first id, count): one per group
    # and chunk. Device d's ids are d*m higher.
    runs = [(c, first, min(group, microbatches - first)) for first in range(0, microbatches, group) for c in range(chunks)]
    forward_runs = [(c * chunk_stride + first, count) for c, first, count in runs]
    backward_runs = [(block + (chunks - 1 - c) * chunk_stride + first, count) for c, first, count in runs]
    total = microbatches * chunks
    orders = []
    for d in range(stages):
        shift = d * microbatches
        warmup = min((stages - d - 1) * 2 + (chunks - 1) * group, total)
        forwards, backwards = [], []
        for a, n in forward_runs:  # a plain loop of += beats chain.from_iterable 2:1 in Pyodide
            forwards += ids[shift + a:shift + a + n]
        for a, n in backward_runs:
            backwards += ids[shift + a:shift + a + n]
        orders.append(_one_f_one_b(forwards, backwards, warmup))
    return orders


def _zb_h1_order(stages, microbatches, device, block, ids):
    # ZB-H1 (Qi et al. 2023, Sec. 3.1, Fig. 3): 1F1B's warm-up, then F, B and the W
    # of the microbatch `device` backwards earlier; this rule reproduces the paper's
    # bubble (P-1)(T_F+T_B-T_W) and 1F1B's peak memory (both checked by the tests). Holding up to d W's on
    # device d lets its B's go upstream sooner; the held W's fill the tail bubble.
    # A stash is freed by its W, so every device peaks at min(P, m) stashes, which is
    # 1F1B's peak (on stage 0), now reached on every stage.
    m = microbatches
    first = device * m
    forwards = ids[first:first + m]
    backwards = ids[block + first:block + first + m]
    weights = ids[2 * block + first:2 * block + first + m]
    warmup = min(stages - device - 1, m)
    # Step j = 0 .. m-1 after the warm-up runs F(warmup + j) while forwards are left
    # (j < with_forward), then B(j), then W(j - device) once `device` W's are held
    # (j >= releasing); the W's still held run at the end.
    with_forward, releasing = m - warmup, min(device, m)
    low, high = min(with_forward, releasing), max(with_forward, releasing)
    if with_forward <= releasing:  # steps low..high-1 run a B alone
        middle = backwards[low:high]
    else:  # they run F, B and W
        middle = _interleave(forwards[warmup + low:warmup + high], backwards[low:high],
                             weights[low - releasing:high - releasing])
    return (
        forwards[:warmup]
        + _interleave(forwards[warmup:warmup + low], backwards[:low])
        + middle
        + _interleave(backwards[high:], weights[high - releasing:m - releasing])
        + weights[m - releasing:]
    )


def _device_orders(schedule, stages, microbatches, chunks, block, ids):
    if schedule == "interleaved":
        return _interleaved_orders(stages, microbatches, chunks, block, ids)
    build = {"gpipe": _gpipe_order, "zb-h1": _zb_h1_order}.get(schedule, _one_f_one_b_order)
    return [build(stages, microbatches, d, block, ids) for d in range(stages)]


# ---------------------------------------------------------------------------
# The simulation.


def _validate(schedule, stages, microbatches, chunks):
    choice("schedule", schedule, SCHEDULES)
    stages = positive_int("stages", stages)
    microbatches = positive_int("microbatches", microbatches)
    chunks = positive_int("chunks", chunks)
    at_most("chunks", chunks, MAX_CHUNKS)
    if schedule != "interleaved" and chunks != 1:
        raise ValueError(
            f"chunks={chunks} applies only to the interleaved schedule, not {schedule!r}"
        )
    return stages, microbatches, chunks


def simulate(
    schedule,
    stages,
    microbatches,
    chunks=1,
    *,
    forward_s=1.0,
    backward_s=2.0,
    stage_time_factors=None,
):
    """Run ``schedule`` on ``stages`` devices for one step of ``microbatches``.

    forward_s / backward_s: one microbatch through one whole uniform stage (the
    backward is the full one; zb-h1 splits it into B and W of backward_s/2 each).
    Interleaved: each of the ``chunks`` chunks per device takes 1/chunks of those.
    stage_time_factors: per-device multipliers (heavy first stage: embedding; heavy
    last stage: LM head + loss), default 1.0 each. Results are cached.
    Whole-number times (ticks of a clock) whose every pass lasts a whole number of
    ticks are simulated in exact integer arithmetic and come back as ints.
    """
    stages, microbatches, chunks = _validate(schedule, stages, microbatches, chunks)
    positive("forward_s", forward_s)
    positive("backward_s", backward_s)
    if stage_time_factors is None:
        factors = (1,) * stages
    else:
        try:
            factors = tuple(stage_time_factors)
        except TypeError:
            raise ValueError(
                f"stage_time_factors must be a sequence of numbers, got {stage_time_factors!r}"
            ) from None
        if len(factors) != stages:
            raise ValueError(
                f"stage_time_factors must have one entry per stage ({stages}), got {len(factors)}"
            )
        for d, factor in enumerate(factors):
            positive(f"stage_time_factors[{d}]", factor)
    if stages * microbatches * chunks > MAX_OPS_PER_KIND:
        raise ValueError(
            f"stages={stages}, microbatches={microbatches}, chunks={chunks}: the simulation "
            f"allows stages*microbatches*chunks <= {MAX_OPS_PER_KIND}"
        )
    backward_parts = 2 if schedule == "zb-h1" else 1
    exact = all(type(x) is int for x in (forward_s, backward_s, *factors)) and all(
        pass_ticks * factor % (chunks * parts) == 0
        for pass_ticks, parts in ((forward_s, 1), (backward_s, backward_parts))
        for factor in factors
    )
    if not exact:
        forward_s, backward_s = float(forward_s), float(backward_s)
        factors = tuple(map(float, factors))
    # Building ~10^4 ops would set off dozens of cyclic-GC passes over this call's own
    # large lists; nothing here forms cycles, so pause the collector (halves the time).
    collecting = gc.isenabled()
    gc.disable()
    try:
        timeline = _simulate(schedule, stages, microbatches, chunks, forward_s, backward_s, factors)
    finally:
        if collecting:
            gc.enable()
    if not 0 < timeline.makespan < math.inf:
        raise ValueError(
            f"forward_s={forward_s}, backward_s={backward_s}: step time "
            f"{timeline.makespan} s is not a positive finite number"
        )
    return timeline


# A large timeline holds ~10^4 ops: keep few (memory, GC). typed: 12 and 12.0 are
# different keys, so an int simulation is never answered with a float one.
@lru_cache(maxsize=16, typed=True)
def _simulate(schedule, stages, microbatches, chunks, forward_s, backward_s, factors):
    if schedule == "interleaved" and chunks == 1:
        # With one chunk Megatron-LM runs the plain 1F1B function: same timeline.
        plain = _simulate("1f1b", stages, microbatches, chunks, forward_s, backward_s, factors)
        return replace(plain, schedule=schedule)
    m = microbatches
    virtual_stages = stages * chunks
    block = virtual_stages * m
    split = schedule == "zb-h1"
    kinds = "FBW" if split else "FB"
    done = len(kinds) * block  # a pseudo-op, finished at t=0: first forwards wait on it
    exact = type(forward_s) is int  # simulate() passes ints only if every pass is whole
    divide = floordiv if exact else truediv
    zero = 0 if exact else 0.0  # comparisons stay int-int or float-float (the fast paths)
    # Zero-bubble split (Qi et al. 2023, Sec. 2): T_B = T_W = half the full backward.
    backward_part_s = divide(backward_s, 2) if split else backward_s

    # Per-op-id tables, built with list arithmetic (no per-op Python work).
    ids = _op_ids(done + 1)
    dependency = (
        [done] * m + ids[:block - m]  # F(i, k) <- F(i, k-1)
        + ids[block + m:2 * block]  # B(i, k) <- B(i, k+1)
        + ids[block - m:block]  # ... last virtual stage: B <- its own F
    )
    if split:
        dependency += ids[block:2 * block]  # W(i, k) <- B(i, k)
    duration = []
    for pass_s in (forward_s, backward_part_s, backward_part_s)[: len(kinds)]:
        for k in range(virtual_stages):
            duration += [divide(pass_s * factors[k % stages], chunks)] * m
    # A stash is live from F start until the pass that frees it (W for zb-h1) ends.
    stash_change = [1] * block + [0] * (done - 2 * block) + [-1] * block

    programs = _device_orders(schedule, stages, m, chunks, block, ids)
    end = [None] * done + [zero]  # None: not finished yet
    start = [zero] * done
    free = [zero] * stages
    # Run a device until its next op waits on an unfinished input; park that op, note
    # which input it waits for, and when that input ends put the device back on the
    # stack. Each op is visited once and no pass over idle devices is ever made.
    remaining = [iter(program) for program in programs]
    parked = [done] * stages  # the op a device stopped at (`done`: none)
    # The device waiting on each op (None: none), as a list: a list index is ~25% cheaper
    # per op in Pyodide than a dict lookup, and "is None" tests are the cheapest there are
    # (one bytecode: POP_JUMP_IF_NONE). One slot is enough: the only op with two
    # consumers is B(i, k) of zb-h1 (B(i, k-1) and W(i, k)), and W(i, k) shares B(i, k)'s
    # device, so if it ever had to wait for B(i, k) that device would be stuck anyway;
    # an overwritten waiter then stays parked and the deadlock check below reports it.
    waiter = [None] * (done + 1)
    runnable = list(range(stages - 1, -1, -1))
    while runnable:
        d = runnable.pop()
        t = free[d]
        op = parked[d]
        # The parked op runs first: its input has just ended. Its lines repeat the loop
        # body below on purpose. One body would mean looping over chain((op,), ...) or over
        # program indices (15% slower), or rewinding the list iterator at each park
        # (__setstate__; 10% slower in Pyodide: 9.0 against 8.1 ms for all four schedules
        # at P=16, m=64, v=4), and this loop is Figure 15's critical path.
        if op != done:
            parked[d] = done
            ready = end[dependency[op]]
            if ready > t:
                t = ready
            start[op] = t
            t += duration[op]
            end[op] = t
            if waiter[op] is not None:
                runnable.append(waiter[op])
        for op in remaining[d]:
            ready = end[dependency[op]]
            if ready is None:
                waiter[dependency[op]] = d
                parked[d] = op
                break
            if ready > t:
                t = ready
            start[op] = t
            t += duration[op]
            end[op] = t
            if waiter[op] is not None:
                runnable.append(waiter[op])
        free[d] = t
    if parked.count(done) != stages:  # a device still waits: never seen for these schedules; guards the orders
        raise ValueError(
            f"schedule={schedule!r} deadlocks for stages={stages}, "
            f"microbatches={m}, chunks={chunks}"
        )

    # Each device computes m microbatches x chunks x (F + B [+ W]) = m (F+B) factor.
    busy = tuple(m * (forward_s + backward_s) * factor for factor in factors)
    makespan = max(free)
    idle = tuple(max(makespan - b, zero) for b in busy)  # never -1 ulp
    peaks = tuple(max(accumulate(itemgetter(*p)(stash_change))) / chunks for p in programs)

    # Op ids of one kind and virtual stage k = chunk * P + device are the m consecutive
    # ids from kind * block + k * m: one slice per (device, kind, chunk).
    passes = tuple(
        tuple.__new__(Passes, (d, kind, c, duration[first], tuple(start[first:first + m])))
        for d in range(stages)
        for kind_index, kind in enumerate(kinds)
        for c in range(chunks)
        for first in ((kind_index * virtual_stages + c * stages + d) * m,)
    )
    peak = max(peaks)
    return Timeline(
        schedule=schedule,
        stages=stages,
        microbatches=m,
        chunks=chunks,
        passes=passes,
        makespan=makespan,
        busy_per_stage=busy,
        idle_per_stage=idle,
        bubble_ratio=sum(idle) / (stages * makespan) if makespan > 0 else 0.0,
        peak_stashes_per_stage=peaks,
        peak_stashes=peak,
        worst_stage=peaks.index(peak),
    )


# ---------------------------------------------------------------------------
# Closed forms (uniform stages, T_B = 2 T_F, zero-bubble T_B = T_W = T_F).


def bubble_ratio_formula(schedule, stages, microbatches, chunks=1):
    """Idle fraction of the step, bubble / (bubble + ideal compute).

    GPipe, 1F1B: (P-1)/(m+P-1) (Narayanan et al. 2021, Sec. 2.2.1);
    interleaved: (P-1)/(v*m+P-1) (Sec. 2.2.2); zb-h1: bubble (P-1)(T_F+T_B-T_W)
    (Qi et al. 2023, Sec. 3.1) over a step of m(T_F+T_B+T_W) + bubble, which is
    (P-1)/(3m+P-1) for T_F=T_B=T_W. ``simulate`` matches these for uniform stages
    (interleaved and zb-h1 need m >= P; ZB-H1 with T_W > T_F idles (P-1) T_W).
    """
    p, m, v = _validate(schedule, stages, microbatches, chunks)
    if schedule in ("gpipe", "1f1b"):
        return (p - 1) / (m + p - 1)
    if schedule == "interleaved":
        return (p - 1) / (v * m + p - 1)
    return (p - 1) / (3 * m + p - 1)


def bubble_over_ideal(schedule, stages, microbatches, chunks=1):
    """Bubble time / ideal compute time, the papers' other convention.

    (P-1)/m for GPipe and 1F1B, (P-1)/(v*m) interleaved (Narayanan et al. 2021,
    Sec. 2.2.1-2.2.2; Llama 3 Sec. 3.3.2), (P-1)/(3m) for ZB-H1 (Qi et al. 2023,
    sail-sg README table, T_F=T_B=T_W). Equals r/(1-r) for r = bubble_ratio_formula.
    """
    p, m, v = _validate(schedule, stages, microbatches, chunks)
    if schedule in ("gpipe", "1f1b"):
        return (p - 1) / m
    if schedule == "interleaved":
        return (p - 1) / (v * m)
    return (p - 1) / (3 * m)
