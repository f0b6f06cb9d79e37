"""Failures at scale: checkpoint interval, expected waste, stragglers, and how runs hang.

What it models
--------------
* Optimum checkpoint interval: Young 1974 (first order, sqrt(2 delta M)) and Daly 2006 (higher
  order), plus the exact optimum of Daly's exponential-failure model and its expected wall time.
* Cluster failure arithmetic: N independent nodes of MTBF M fail, together, every M/N on average
  (the minimum of N exponential lifetimes); the article's 512 nodes at one year -> ~17 h.
* The straggler tax: a synchronous step waits for the slowest of n ranks, E[max of n normals],
  computed exactly by numerical integration (not the sqrt(2 ln n) asymptote, which is also given),
  or sampled with a seeded ``random.Random``.
* Hangs: each rank runs a list of collective calls; a call completes only when every rank of its
  group has entered a matching call (same op, group, shape, dtype) -- the rule the article states
  ("Hangs, not crashes"). The simulator reports where each rank is parked when progress stops and
  when a watchdog of ``timeout_s`` would fire. Presets are the article's four failure modes plus a
  mismatched-order variant, a slow rank and a healthy baseline.

What it does not model: correlated failures (a switch taking down a rack), failures during restart
beyond Daly's e^(R/M) factor, non-normal step-time tails, or NCCL's actual behaviour on
mismatched buffers (it may corrupt silently instead of hanging; the simulator conservatively
treats any mismatch as a hang).
"""
import math
import random
from dataclasses import dataclass, field
from functools import lru_cache
from statistics import NormalDist

from models._validate import choice, finite, finite_result, non_negative, non_negative_int, positive, positive_int

__all__ = [
    "young_daly_interval_s", "daly_interval_s", "optimal_interval_s", "expected_wall_time_s",
    "waste_fraction", "first_order_waste_fraction", "cluster_mtbf_s", "expected_failures",
    "observed_mtbf_s", "FailureBudget", "failure_budget",
    "expected_max_normal", "expected_max_normal_asymptotic", "sample_rank_times",
    "sample_max_normal", "straggler_tax",
    "Call", "Parked", "Completed", "HangReport", "HangScenario", "simulate_collectives",
    "HANG_PRESETS", "hang_preset", "simulate_preset", "DEFAULT_NCCL_TIMEOUT_S",
    "HOUR_S", "DAY_S", "YEAR_S",
]

HOUR_S = 3600.0
DAY_S = 24 * HOUR_S
YEAR_S = 365 * DAY_S
# PyTorch ProcessGroupNCCL: kProcessGroupNCCLDefaultTimeout = 10 min (ProcessGroupNCCL.hpp).
DEFAULT_NCCL_TIMEOUT_S = 600.0
_EXP_LIMIT = 700.0  # math.exp overflows just past 709




# ---- checkpoint interval ---------------------------------------------------------------------

def young_daly_interval_s(checkpoint_s, mtbf_s):
    """tau = sqrt(2 delta M) (Young 1974, "A first order approximation to the optimum checkpoint
    interval", CACM 17(9))."""
    positive("checkpoint_s", checkpoint_s)
    positive("mtbf_s", mtbf_s)
    return finite_result("interval", math.sqrt(2.0) * math.sqrt(checkpoint_s) * math.sqrt(mtbf_s))


def daly_interval_s(checkpoint_s, mtbf_s):
    """Daly 2006 (FGCS 22(3), "A higher order estimate of the optimum checkpoint interval for restart
    dumps"): tau = sqrt(2 delta M) [1 + (1/3) sqrt(delta/2M) + (1/9)(delta/2M)] - delta
    for delta < 2M, else tau = M."""
    positive("checkpoint_s", checkpoint_s)
    positive("mtbf_s", mtbf_s)
    if checkpoint_s >= 2.0 * mtbf_s:
        return float(mtbf_s)
    ratio = checkpoint_s / (2.0 * mtbf_s)
    young = young_daly_interval_s(checkpoint_s, mtbf_s)
    return finite_result("interval", young * (1.0 + math.sqrt(ratio) / 3.0 + ratio / 9.0) - checkpoint_s)


def _log1p_neg_plus(x):
    """log(1 - x) + x, accurate for small x (series), for 0 <= x < 1."""
    if x < 1e-4:
        return -(x * x) * (0.5 + x * (1.0 / 3.0 + x * (0.25 + x * 0.2)))
    return math.log1p(-x) + x


def optimal_interval_s(checkpoint_s, mtbf_s):
    """The exact minimiser of Daly's expected wall time (``expected_wall_time_s``):
    d/dtau [ (e^((tau+delta)/M) - 1) / tau ] = 0  <=>  e^((tau+delta)/M) (1 - tau/M) = 1.
    Independent of the restart time. Daly's higher-order formula approximates this root."""
    positive("checkpoint_s", checkpoint_s)
    positive("mtbf_s", mtbf_s)
    d = checkpoint_s / mtbf_s
    # Solve log(1 - x) + x + d = 0 for x = tau/M in (0, 1); the left side decreases in x.
    lo, hi = 0.0, 1.0
    guess = min(math.sqrt(2.0 * d), 0.5)  # Young's x as a bracket hint
    if _log1p_neg_plus(guess) + d > 0:
        lo = guess
    else:
        hi = guess
        while hi > 1e-300 and _log1p_neg_plus(hi / 2.0) + d <= 0:
            hi /= 2.0
        lo = hi / 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            break
        if _log1p_neg_plus(mid) + d > 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi) * mtbf_s


def expected_wall_time_s(work_s, interval_s, checkpoint_s, mtbf_s, restart_s=0.0):
    """T_w = M e^(R/M) (e^((tau+delta)/M) - 1) T_s / tau: expected wall time to finish T_s seconds of
    work checkpointing every tau, exponential failures of mean M, restart R (Daly 2006's model)."""
    positive("work_s", work_s)
    exponent = _check_interval_args(interval_s, checkpoint_s, mtbf_s, restart_s)
    if exponent + restart_s / mtbf_s > _EXP_LIMIT:
        raise ValueError(
            f"interval_s={interval_s}, checkpoint_s={checkpoint_s} and restart_s={restart_s} are so "
            f"long against mtbf_s={mtbf_s} that the run practically never finishes"
        )
    value = mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1(exponent) * (work_s / interval_s)
    if not math.isfinite(value):
        raise ValueError("expected wall time overflows the float range for these inputs")
    return value


def _check_interval_args(interval_s, checkpoint_s, mtbf_s, restart_s):
    positive("interval_s", interval_s)
    non_negative("checkpoint_s", checkpoint_s)
    positive("mtbf_s", mtbf_s)
    non_negative("restart_s", restart_s)
    return (interval_s + checkpoint_s) / mtbf_s


def waste_fraction(interval_s, checkpoint_s, mtbf_s, restart_s=0.0):
    """Fraction of wall time not spent on useful work, 1 - T_s / T_w, under Daly's model.
    Tends to 1 (never to inf) as the interval or the checkpoint grows against the MTBF."""
    exponent = _check_interval_args(interval_s, checkpoint_s, mtbf_s, restart_s)
    log_overhead = restart_s / mtbf_s + _log_expm1(exponent) + math.log(mtbf_s) - math.log(interval_s)
    if log_overhead > _EXP_LIMIT:
        return 1.0
    return max(0.0, -math.expm1(-log_overhead))


def _log_expm1(x):
    """log(e^x - 1) without overflow."""
    return x + math.log1p(-math.exp(-x)) if x > 30 else math.log(math.expm1(x))


def first_order_waste_fraction(interval_s, checkpoint_s, mtbf_s, restart_s=0.0):
    """delta/tau + (tau + delta)/(2M) + R/M: checkpoint overhead plus half an interval of rework
    and a restart per failure (Young 1974's cost model; minimised at sqrt(2 delta M))."""
    _check_interval_args(interval_s, checkpoint_s, mtbf_s, restart_s)
    waste = checkpoint_s / interval_s + (interval_s + checkpoint_s) / (2.0 * mtbf_s) + restart_s / mtbf_s
    return finite_result("waste fraction", waste)


# ---- cluster failure arithmetic ---------------------------------------------------------------

def cluster_mtbf_s(node_mtbf_s, nodes):
    """M / N: the first of N independent exponential failures (rates add). Article: 1 year / 512 ~ 17 h."""
    positive("node_mtbf_s", node_mtbf_s)
    positive_int("nodes", nodes)
    return node_mtbf_s / nodes


def expected_failures(duration_s, node_mtbf_s, nodes):
    """Expected failures in ``duration_s``: duration * N / M (Poisson process of rate N/M)."""
    non_negative("duration_s", duration_s)
    return finite_result("expected failures", duration_s / cluster_mtbf_s(node_mtbf_s, nodes))


def observed_mtbf_s(failures, duration_s, units):
    """Per-unit MTBF implied by ``failures`` observed over ``duration_s`` on ``units`` components:
    duration * units / failures (Llama 3: 419 unexpected interruptions, 54 days, 16,384 GPUs)."""
    positive_int("failures", failures)
    positive("duration_s", duration_s)
    positive_int("units", units)
    return finite_result("mtbf", duration_s * units / failures)


@dataclass(frozen=True)
class FailureBudget:
    cluster_mtbf_s: float
    expected_failures: float
    checkpoint_overhead_s: float  # run / tau checkpoints of delta each
    lost_work_s: float  # first order: (tau + delta)/2 recomputed per failure
    restart_overhead_s: float  # R per failure
    waste_fraction: float  # Daly's model, ``waste_fraction``


def failure_budget(duration_s, node_mtbf_s, nodes, *, interval_s, checkpoint_s, restart_s=0.0):
    """What failures cost a run of ``duration_s`` wall-clock on ``nodes`` nodes (first-order ledger)."""
    positive("duration_s", duration_s)
    m = cluster_mtbf_s(node_mtbf_s, nodes)
    _check_interval_args(interval_s, checkpoint_s, m, restart_s)
    failures = duration_s / m
    ledger = (
        m, failures,
        duration_s / (interval_s + checkpoint_s) * checkpoint_s,
        failures * 0.5 * (interval_s + checkpoint_s),
        failures * restart_s,
        waste_fraction(interval_s, checkpoint_s, m, restart_s),
    )
    for name, value in zip(FailureBudget.__dataclass_fields__, ledger):
        finite_result(name, value)
    return FailureBudget(*ledger)


# ---- the straggler tax ------------------------------------------------------------------------

def _gauss_legendre(n):
    """Nodes and weights on [-1, 1] by Newton on P_n (Golub-Welsch would need linear algebra)."""
    nodes, weights = [], []
    for i in range(1, n + 1):
        x = math.cos(math.pi * (i - 0.25) / (n + 0.5))
        for _ in range(100):
            p0, p1 = 1.0, x
            for k in range(2, n + 1):
                p0, p1 = p1, ((2 * k - 1) * x * p1 - (k - 1) * p0) / k
            dp = n * (x * p1 - p0) / (x * x - 1.0)
            step = p1 / dp
            x -= step
            if abs(step) < 1e-16:
                break
        nodes.append(x)
        weights.append(2.0 / ((1.0 - x * x) * dp * dp))
    return tuple(nodes), tuple(weights)


_GL_NODES, _GL_WEIGHTS = _gauss_legendre(16)
_SQRT2 = math.sqrt(2.0)


def _integrate(f, a, b, panel):
    """Composite 16-point Gauss-Legendre on [a, b] with panels of width <= ``panel``."""
    if b <= a:
        return 0.0
    count = max(1, math.ceil((b - a) / panel))
    h = (b - a) / count
    total = 0.0
    for p in range(count):
        mid = a + (p + 0.5) * h
        half = 0.5 * h
        total += half * sum([w * f(mid + half * x) for x, w in zip(_GL_NODES, _GL_WEIGHTS)])
    return total


def _upper_tail(x):
    """Q(x) = 1 - Phi(x), accurate in the upper tail (erfc, not 1 - erf)."""
    return 0.5 * math.erfc(x / _SQRT2)


def _standard_max_mean(n):
    """E[max of n iid N(0,1)] = int_0^inf (1 - Phi^n) dx - int_-inf^0 Phi^n dx.

    (Integration by parts of int x n phi Phi^(n-1) dx; this form has no cancellation and is
    smooth, so Gauss-Legendre converges fast.)"""
    if n == 1:
        return 0.0

    def above(x):  # 1 - Phi(x)^n for x >= 0
        return -math.expm1(n * math.log1p(-_upper_tail(x)))

    def below(x):  # Phi(x)^n for x <= 0
        phi = _upper_tail(-x)
        return math.exp(n * math.log(phi)) if phi > 0 else 0.0

    # Where n Q(x) ~ 45, Phi^n = e^-45 ~ 3e-20: below it 1 - Phi^n is 1 to double precision.
    start = 0.0
    if n * _upper_tail(0.0) > 45:
        lo, hi = 0.0, 40.0
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            if n * _upper_tail(mid) > 45:
                lo = mid
            else:
                hi = mid
        start = lo
    # Beyond x_max, n Q(x) < 1e-17 (Q ~ phi(x)/x): the tail integral is negligible.
    x_max = math.sqrt(2.0 * math.log(n) + 80.0)
    # Panels of width 1 with 16 nodes: ~1e-9 absolute error (checked against a 2.6M-point trapezoid).
    negative = _integrate(below, -9.0, 0.0, 1.0) if n < 64 else 0.0  # Phi^n <= 2^-n on x < 0
    return start + _integrate(above, start, x_max, 1.0) - negative


def expected_max_normal(n, mean, std):
    """E[max of n iid N(mean, std^2)] = mean + std * int x n phi(x) Phi(x)^(n-1) dx, to ~1e-9 std
    (order statistics of the normal: e.g. David & Nagaraja, "Order Statistics", 3rd ed., §4;
    n=2 gives mean + std/sqrt(pi))."""
    n = positive_int("n", n)
    finite("mean", mean)
    non_negative("std", std)
    if n > 10**15:
        raise ValueError(f"n must be <= 1e15, got {n}")
    return finite_result("expected max", mean + std * _standard_max_mean(n))


def expected_max_normal_asymptotic(n, mean, std):
    """mean + std sqrt(2 ln n): the leading-order growth the article quotes (overestimates at
    moderate n; e.g. n=1000 gives 3.72 sigma vs the exact 3.24 sigma)."""
    n = positive_int("n", n)
    finite("mean", mean)
    non_negative("std", std)
    return finite_result("expected max", mean + std * math.sqrt(2.0 * math.log(n)))


def straggler_tax(n, mean, std):
    """E[max]/mean - 1: how much slower a synchronous step is than the average rank."""
    positive("mean", mean)
    return finite_result("straggler tax", expected_max_normal(n, mean, std) / mean - 1.0)


MAX_SAMPLED_DRAWS = 2_000_000  # rank-times drawn per call; ~1 s of CPython


def sample_rank_times(n, mean, std, *, seed):
    """One step's per-rank times, N(mean, std^2), from ``random.Random(seed).gauss``."""
    n = positive_int("n", n)
    finite("mean", mean)
    non_negative("std", std)
    if n > MAX_SAMPLED_DRAWS:
        raise ValueError(f"n must be <= {MAX_SAMPLED_DRAWS} for sampling, got {n}")
    rng = random.Random(seed)
    times = tuple(rng.gauss(mean, std) for _ in range(n))
    if not all(math.isfinite(t) for t in times):
        raise ValueError("rank times overflow the float range for these inputs")
    return times


def sample_max_normal(n, mean, std, *, steps, seed):
    """Step times (max over n ranks) for ``steps`` steps, seeded; their mean -> expected_max_normal."""
    n = positive_int("n", n)
    steps = positive_int("steps", steps)
    finite("mean", mean)
    non_negative("std", std)
    if n * steps > MAX_SAMPLED_DRAWS:
        raise ValueError(f"n*steps must be <= {MAX_SAMPLED_DRAWS}, got {n * steps}")
    gauss = random.Random(seed).gauss
    maxima = tuple(max(gauss(mean, std) for _ in range(n)) for _ in range(steps))
    if not all(math.isfinite(m) for m in maxima):
        raise ValueError("step times overflow the float range for these inputs")
    return maxima


# ---- hangs --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Call:
    """One collective a rank issues: it computes for ``compute_s`` first, then enters the call."""

    op: str
    group: tuple
    shape: tuple = ()
    dtype: str = "bf16"
    compute_s: float = 1.0
    duration_s: float = 0.05
    label: str = ""

    def __post_init__(self):
        if not isinstance(self.op, str) or not self.op:
            raise ValueError(f"op must be a non-empty string, got {self.op!r}")
        try:
            group = tuple(sorted(self.group))
        except TypeError:
            raise ValueError(f"group must be a collection of ranks, got {self.group!r}") from None
        if not group or len(set(group)) != len(group):
            raise ValueError(f"group must list distinct ranks, got {self.group!r}")
        for r in group:
            if isinstance(r, bool) or not isinstance(r, int) or r < 0:
                raise ValueError(f"group must hold ranks >= 0, got {r!r}")
        object.__setattr__(self, "group", group)
        object.__setattr__(self, "shape", tuple(self.shape))
        non_negative("compute_s", self.compute_s)
        non_negative("duration_s", self.duration_s)

    def signature(self):
        return (self.op, self.group, self.shape, self.dtype)

    def describe(self):
        name = self.label or self.op
        return f"{name} [{self.op} on group {list(self.group)}, shape {self.shape}, {self.dtype}]"


@dataclass(frozen=True)
class Completed:
    rank_call_index: tuple  # per member: (rank, index of the call in its program)
    op: str
    group: tuple
    label: str
    start_s: float  # when the last member arrived
    end_s: float
    max_wait_s: float  # the earliest arrival's wait
    first_arrival_rank: int


@dataclass(frozen=True)
class Parked:
    rank: int
    call_index: int
    call: Call
    entered_s: float
    waiting_on: tuple  # ranks of the group that have not entered a matching call
    reason: str


@dataclass(frozen=True)
class HangReport:
    status: str  # "completed", "hang", "watchdog" (would finish, but a wait exceeds timeout_s)
    completed: tuple  # Completed, in order of start time
    parked: tuple  # Parked, one per rank stuck when progress stopped
    finished_ranks: tuple
    dead_ranks: tuple
    last_progress_s: float
    watchdog_fired: bool
    watchdog_rank: int | None
    watchdog_at_s: float | None
    diagnosis: str


def _normalise_programs(programs):
    if isinstance(programs, dict):
        ranks = sorted(programs)
        if ranks != list(range(len(ranks))):
            raise ValueError(f"programs must be keyed by ranks 0..N-1, got {ranks}")
        programs = [programs[r] for r in ranks]
    if not isinstance(programs, (list, tuple)) or not programs:
        raise ValueError("programs must be a non-empty list (one list of Calls per rank)")
    world = len(programs)
    result = []
    for rank, program in enumerate(programs):
        calls = tuple(program)
        for k, call in enumerate(calls):
            if not isinstance(call, Call):
                raise ValueError(f"programs[{rank}][{k}] must be a Call, got {call!r}")
            if rank not in call.group:
                raise ValueError(
                    f"programs[{rank}][{k}].group {list(call.group)} does not contain rank {rank}"
                )
            if call.group[-1] >= world:
                raise ValueError(
                    f"programs[{rank}][{k}].group {list(call.group)} names a rank >= world size {world}"
                )
        result.append(calls)
    return result


def _rank_map(name, value, world, check):
    if value is None:
        return {}
    if isinstance(value, (set, frozenset, list, tuple)):
        value = {r: 0 for r in value} if name == "dead_ranks" else dict(value)
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a dict rank -> value, got {value!r}")
    for r, v in value.items():
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < world:
            raise ValueError(f"{name} has rank {r!r} outside 0..{world - 1}")
        check(f"{name}[{r}]", v)
    return dict(value)


def simulate_collectives(programs, *, timeout_s=DEFAULT_NCCL_TIMEOUT_S, dead_ranks=None, slowdown=None):
    """Run every rank's list of ``Call`` until all finish or no collective can complete.

    A call completes when every rank of its group is parked in a call with the same
    (op, group, shape, dtype); it starts when the last member arrives and lasts ``duration_s``.
    ``dead_ranks``: {rank: index of the call it dies before entering} (a set means "dead from the
    start"). ``slowdown``: {rank: factor on its compute_s}. The watchdog fires on the first rank
    whose wait inside one call exceeds ``timeout_s`` (PyTorch's NCCL watchdog, default 10 min).
    """
    programs = _normalise_programs(programs)
    world = len(programs)
    positive("timeout_s", timeout_s)
    dead_at = _rank_map("dead_ranks", dead_ranks, world, non_negative_int)
    slow = _rank_map("slowdown", slowdown, world, positive)

    pc = [0] * world
    ready_s = [0.0] * world

    def alive(r):
        return pc[r] < dead_at.get(r, len(programs[r]) + 1)

    def active(r):
        return alive(r) and pc[r] < len(programs[r])

    def entry_s(r):
        return ready_s[r] + programs[r][pc[r]].compute_s * slow.get(r, 1.0)

    completed = []
    progress = True
    while progress:
        progress = False
        for r in range(world):
            if not active(r):
                continue
            call = programs[r][pc[r]]
            members = call.group
            if not all(active(m) and programs[m][pc[m]].signature() == call.signature() for m in members):
                continue
            entries = {m: entry_s(m) for m in members}
            start = max(entries.values())
            end = start + max(programs[m][pc[m]].duration_s for m in members)
            first = min(members, key=lambda m: (entries[m], m))
            completed.append(Completed(
                tuple((m, pc[m]) for m in members), call.op, members, call.label,
                start, end, start - entries[first], first,
            ))
            for m in members:
                pc[m] += 1
                ready_s[m] = end
            progress = True

    finished = tuple(r for r in range(world) if pc[r] >= len(programs[r]))
    dead = tuple(r for r in range(world) if r not in finished and not alive(r))
    parked = []
    for r in range(world):
        if not active(r):
            continue
        call = programs[r][pc[r]]
        waiting, reasons = [], []
        for m in call.group:
            if m == r:
                continue
            if m in dead:
                waiting.append(m)
                reasons.append(f"rank {m} is dead (gone before its call #{pc[m]})")
            elif m in finished:
                waiting.append(m)
                reasons.append(f"rank {m} finished its program without entering this call")
            else:
                other = programs[m][pc[m]]
                if other.group != call.group:
                    waiting.append(m)
                    reasons.append(f"rank {m} is parked in {other.describe()}")
                elif other.signature() != call.signature():
                    waiting.append(m)
                    reasons.append(f"rank {m} entered a different call: {other.describe()}")
        reason = "; ".join(reasons) if reasons else "all members present"
        parked.append(Parked(r, pc[r], call, entry_s(r), tuple(waiting), reason))

    last_progress = max((c.end_s for c in completed), default=0.0)
    # Watchdog: the first wait longer than timeout_s, among finished calls and parked ranks.
    candidates = []
    for c in completed:
        if c.max_wait_s > timeout_s:
            candidates.append((c.start_s - c.max_wait_s + timeout_s, c.first_arrival_rank))
    for p in parked:
        candidates.append((p.entered_s + timeout_s, p.rank))
    watchdog = min(candidates) if candidates else None

    if parked:
        status = "hang"
    elif watchdog is not None:
        status = "watchdog"
    else:
        status = "completed"
    diagnosis = _diagnose(status, parked, dead, watchdog, completed, timeout_s)
    return HangReport(
        status, tuple(sorted(completed, key=lambda c: (c.start_s, c.group))), tuple(parked), finished, dead,
        last_progress, watchdog is not None,
        None if watchdog is None else watchdog[1], None if watchdog is None else watchdog[0], diagnosis,
    )


def _diagnose(status, parked, dead, watchdog, completed, timeout_s):
    if status == "completed":
        worst = max((c.max_wait_s for c in completed), default=0.0)
        return f"every collective completed; longest wait {worst:.3g} s (timeout {timeout_s:.3g} s)"
    if status == "watchdog":
        return (f"no deadlock, but rank {watchdog[1]} waited longer than timeout_s={timeout_s:.3g} s: "
                f"the watchdog kills the job at t={watchdog[0]:.3g} s although it would have finished")
    stuck = ", ".join(f"rank {p.rank} in {p.call.label or p.call.op}" for p in parked)
    text = f"progress stopped: {stuck}"
    if dead:
        text += f"; dead: {', '.join(str(r) for r in dead)}"
    return text + f"; the watchdog fires on rank {watchdog[1]} at t={watchdog[0]:.3g} s"


@dataclass(frozen=True)
class HangScenario:
    name: str
    title: str
    description: str
    programs: tuple
    dead_ranks: dict = field(default_factory=dict)
    slowdown: dict = field(default_factory=dict)


# Four ranks as a 2 x 2 mesh: TP groups {0,1},{2,3}; DP groups {0,2},{1,3}; world {0,1,2,3}.
_WORLD = (0, 1, 2, 3)
_TP = {0: (0, 1), 1: (0, 1), 2: (2, 3), 3: (2, 3)}
_DP = {0: (0, 2), 1: (1, 3), 2: (0, 2), 3: (1, 3)}


def _tp_allreduce(r, group=None, seq=1024):
    return Call("allreduce", group or _TP[r], (4, seq, 4096), "bf16", label="TP activation AllReduce")


def _valid_tokens(r):
    return Call("allreduce", _WORLD, (1,), "fp32", compute_s=0.2, label="valid-token count AllReduce")


def _metrics(r, seq=1024):
    return Call("allgather", _WORLD, (4, seq), "fp32", compute_s=0.1, label="metrics AllGather")


def _grads(r):
    return Call("allreduce", _DP[r], (25_000_000,), "bf16", label="gradient AllReduce")


def _healthy(r):
    return [_tp_allreduce(r), _valid_tokens(r), _metrics(r), _grads(r)]


def _scenarios():
    healthy = tuple(tuple(_healthy(r)) for r in _WORLD)

    def with_rank(rank, program):
        return tuple(tuple(program) if r == rank else healthy[r] for r in _WORLD)

    return {
        "healthy": HangScenario(
            "healthy", "Healthy step",
            "Every rank issues the same collectives in the same order; each completes when its last "
            "participant arrives.",
            healthy,
        ),
        "divergent_control_flow": HangScenario(
            "divergent_control_flow", "Divergent control flow",
            "Rank 3's batch has no valid targets, so an `if` skips the valid-token AllReduce. Ranks 0-2 "
            "park inside it forever; rank 3 runs ahead and parks in the next collective, the metrics "
            "AllGather.",
            with_rank(3, [_tp_allreduce(3), _metrics(3), _grads(3)]),
        ),
        "mismatched_shapes": HangScenario(
            "mismatched_shapes", "Mismatched collectives (shapes)",
            "Right operation, wrong buffer: rank 2 pads its sequence to 1000 tokens instead of 1024, "
            "so the metrics AllGather sizes disagree. NCCL does not check; in a real run this may "
            "corrupt silently rather than hang.",
            with_rank(2, [_tp_allreduce(2, seq=1024), _valid_tokens(2), _metrics(2, seq=1000), _grads(2)]),
        ),
        "mismatched_order": HangScenario(
            "mismatched_order", "Mismatched collectives (order)",
            "Rank 1 logs its metrics before counting valid tokens: same group, calls in a different "
            "order, so the k-th collective on each rank is not the same operation.",
            with_rank(1, [_tp_allreduce(1), _metrics(1), _valid_tokens(1), _grads(1)]),
        ),
        "wrong_process_group": HangScenario(
            "wrong_process_group", "Wrong process group",
            "Rank 1 passes the data-parallel group {1,3} to the tensor-parallel AllReduce. Rank 0 waits "
            "for rank 1 in {0,1}; rank 1 waits for rank 3, which is already further along. (Had every "
            "rank made the same mistake, it would complete -- with a silently wrong answer.)",
            with_rank(1, [_tp_allreduce(1, group=_DP[1]), _valid_tokens(1), _metrics(1), _grads(1)]),
        ),
        "dead_rank": HangScenario(
            "dead_rank", "A rank that is simply gone",
            "Rank 2 is killed by the OOM reaper after its first collective. Nothing will ever arrive "
            "from it; three ranks park in the valid-token AllReduce until the watchdog fires.",
            healthy, dead_ranks={2: 1},
        ),
        "slow_rank": HangScenario(
            "slow_rank", "A slow rank (no hang)",
            "Rank 1 computes 5x slower (thermal throttling). Every collective completes, but each waits "
            "for rank 1: the whole group runs at its pace. With a short timeout the watchdog fires.",
            healthy, slowdown={1: 5.0},
        ),
    }


HANG_PRESETS = _scenarios()


def hang_preset(name):
    choice("name", name, tuple(HANG_PRESETS))
    return HANG_PRESETS[name]


def simulate_preset(name, *, timeout_s=DEFAULT_NCCL_TIMEOUT_S):
    scenario = hang_preset(name)
    return simulate_collectives(
        scenario.programs, timeout_s=timeout_s, dead_ranks=scenario.dead_ranks, slowdown=scenario.slowdown
    )


# ---- Figure 24: a hang on the run's clock -------------------------------------------------------

# A rank stuck in I/O: alive, in no collective, blocked in a read (a network filesystem that stops
# answering and recovers after 20 minutes). Its peers cannot tell it from a dead rank.
IO_STALL_S = 1200.0
HANG_PRESETS["io_stall"] = HangScenario(
    "io_stall", "A rank stuck in I/O",
    "Rank 2 blocks for 20 minutes reading its next batch from a network filesystem that has stopped "
    "answering. It is alive and inside no collective, so its own flight record shows nothing pending; "
    "the other three park in the valid-token AllReduce. A watchdog shorter than the stall kills a job "
    "that would have recovered.",
    tuple(
        (_tp_allreduce(2), Call("allreduce", _WORLD, (1,), "fp32", compute_s=0.2 + IO_STALL_S,
                                label="valid-token count AllReduce"), _metrics(2), _grads(2))
        if r == 2 else tuple(_healthy(r)) for r in _WORLD
    ),
)
def culprits(name):
    """The ranks at fault in a preset: those whose program departs from the healthy step's, that
    die, or that run slow (the ranks a hang's victims end up waiting on); () when healthy."""
    scenario, healthy = hang_preset(name), HANG_PRESETS["healthy"].programs
    return tuple(r for r in _WORLD if scenario.programs[r] != healthy[r] or r in scenario.dead_ranks
                 or r in scenario.slowdown)


__all__ += ["culprits"]


# The mesh's process groups by their ranks, named as a launcher would name them.
GROUP_NAMES = {_WORLD: "world", (0, 1): "tp0", (2, 3): "tp1", (0, 2): "dp0", (1, 3): "dp1"}


@dataclass(frozen=True)
class RankCall:
    """One collective a rank entered, as a flight recorder keeps it (PyTorch ProcessGroupNCCL's
    trace buffer: process group, per-group sequence number, op, sizes, state). Times on the run's clock."""

    rank: int
    index: int  # position in the rank's program
    call: Call
    group_seq: int  # 1-based count of this rank's calls on this group (the per-group SeqNum)
    entered_s: float
    started_s: float | None  # when the last member arrived; None: never
    ended_s: float | None
    waiting_on: tuple  # ranks that never arrive (a parked call); () once it completes

    def state_at(self, t_s):
        """The flight recorder's state of this entry at ``t_s``: scheduled (enqueued, waiting for its
        peers), started (the transfer is running) or completed."""
        if self.ended_s is not None and self.ended_s <= t_s:
            return "completed"
        return "started" if self.started_s is not None and self.started_s <= t_s else "scheduled"

    @property
    def numel_in(self):
        return math.prod(self.call.shape)

    @property
    def numel_out(self):
        return self.numel_in * (len(self.call.group) if self.call.op == "allgather" else 1)


@dataclass(frozen=True)
class HangTimeline:
    scenario: HangScenario
    report: HangReport  # step-relative times (0 = the faulty step's start)
    timeout_s: float
    step_start_s: float  # on the run's clock
    fault_s: float | None  # the moment the run first departs from a healthy one (= at_s); None: healthy
    records: tuple  # RankCall, by rank then program order
    previous: tuple  # each rank's last RankCall of the healthy step before (empty if none ran)
    compute: tuple  # (rank, start_s, end_s): each rank's work before each call it entered or was due to enter
    dead_at_s: dict  # rank -> when it was last seen (end of its last collective)
    first_stuck: RankCall | None  # the call on which the watchdog fires first
    watchdog_at_s: float | None
    blocked_ranks: tuple  # ranks inside a collective when the watchdog fires
    detected_after_s: float | None  # watchdog_at_s - fault_s
    longest_wait_s: float  # the longest time a rank sat inside one collective (up to the watchdog)

    def waits_at(self, t_s):
        """``(waiter, waited)`` rank pairs at ``t_s``: every rank inside a collective, and each member
        of its group that has not entered the matching call (for a call that never completes, the
        simulator's ``waiting_on``: absent, dead, finished or parked elsewhere)."""
        pairs = []
        for r in self.records:
            if r.entered_s > t_s or (r.started_s is not None and r.started_s <= t_s):
                continue
            if r.started_s is None:
                pairs += [(r.rank, m) for m in r.waiting_on]
                continue
            arrived = {o.rank for o in self.records if o.call.group == r.call.group and o.started_s == r.started_s
                       and o.entered_s <= t_s}
            pairs += [(r.rank, m) for m in r.call.group if m not in arrived]
        return tuple(pairs)

    def last_call_at(self, rank, t_s):
        """The rank's newest flight-recorder entry at ``t_s`` (None if it has none)."""
        entered = [r for r in self.previous + self.records if r.rank == rank and r.entered_s <= t_s]
        return entered[-1] if entered else None


def _rank_records(scenario, report, shift, prior_steps=0):
    """Every call each rank entered, with entry times rebuilt from the simulation's rule
    (a rank enters call k when call k-1 ends plus call k's compute). ``prior_steps`` healthy steps
    ran before, so each group's sequence numbers continue from theirs."""
    done = {}
    for c in report.completed:
        for member, index in c.rank_call_index:
            done[member, index] = c
    parked = {p.rank: p for p in report.parked}
    records, compute, dead_at = [], [], {}
    for rank, program in enumerate(scenario.programs):
        ready, seqs = 0.0, {}
        for call in HANG_PRESETS["healthy"].programs[rank]:
            seqs[call.group] = seqs.get(call.group, 0) + prior_steps
        for index, call in enumerate(program):
            seqs[call.group] = seqs.get(call.group, 0) + 1
            entered = ready + call.compute_s * scenario.slowdown.get(rank, 1.0)
            if (rank, index) in done:
                c = done[rank, index]
                records.append(RankCall(rank, index, call, seqs[call.group], entered + shift, c.start_s + shift,
                                        c.end_s + shift, ()))
            elif rank in parked and parked[rank].call_index == index:
                records.append(RankCall(rank, index, call, seqs[call.group], parked[rank].entered_s + shift, None,
                                        None, parked[rank].waiting_on))
            else:
                if rank in report.dead_ranks:
                    dead_at[rank] = ready + shift
                else:
                    compute.append((rank, ready + shift, entered + shift))
                break
            compute.append((rank, ready + shift, entered + shift))
            if (rank, index) not in done:
                break
            ready = done[rank, index].end_s
    return tuple(records), tuple(compute), dead_at


def _divergence_s(records, healthy):
    """The first moment a rank's calls differ from the healthy run's: a call entered late, a
    different call, or no call where a healthy rank would enter one."""
    expected = {(r.rank, r.index): r for r in healthy}
    seen = {(r.rank, r.index): r for r in records}
    moments = []
    for key, want in expected.items():
        got = seen.get(key)
        if got is None:
            moments.append(want.entered_s)
        elif got.call.signature() != want.call.signature() or abs(got.entered_s - want.entered_s) > 1e-9:
            moments.append(min(got.entered_s, want.entered_s))
    return min(moments) if moments else None


def hang_timeline(name, *, timeout_s=DEFAULT_NCCL_TIMEOUT_S, at_s=0.0):
    """A preset's step placed on the run's clock so that its fault happens at ``at_s``: where each rank
    is parked, who waits on whom, when the watchdog (PyTorch's NCCL watchdog, default 10 min) fires
    and how long after the fault. ``detected_after_s`` is the timeout whenever the first rank to stop
    is stopped by the fault itself (a dead rank, a skipped or reordered call)."""
    scenario = hang_preset(name)
    non_negative("at_s", at_s)
    positive("timeout_s", timeout_s)
    report = simulate_preset(name, timeout_s=timeout_s)
    healthy_records, _, _ = _rank_records(HANG_PRESETS["healthy"], simulate_preset("healthy", timeout_s=timeout_s), 0.0)
    records, _, _ = _rank_records(scenario, report, 0.0)
    offset = _divergence_s(records, healthy_records)
    shift = float(at_s) - (offset or 0.0)
    healthy_step_s = max(r.ended_s for r in healthy_records)
    prior = int(max(shift, 0.0) // healthy_step_s)
    records, compute, dead_at = _rank_records(scenario, report, shift, prior)
    previous = ()
    if prior:
        before, _, _ = _rank_records(HANG_PRESETS["healthy"], simulate_preset("healthy", timeout_s=timeout_s),
                                     shift - healthy_step_s, prior - 1)
        previous = tuple(max((r for r in before if r.rank == rank), key=lambda r: r.index) for rank in _WORLD)
    fault = None if offset is None else float(at_s)
    watchdog = None if report.watchdog_at_s is None else report.watchdog_at_s + shift
    first = None
    blocked = ()
    if watchdog is not None:
        first = next(r for r in records if r.rank == report.watchdog_rank and r.entered_s <= watchdog + 1e-9
                     and (r.started_s is None or r.started_s > watchdog - 1e-9))
        blocked = tuple(sorted({r.rank for r in records if r.entered_s <= watchdog + 1e-9
                                and (r.started_s is None or r.started_s > watchdog + 1e-9)}))
    end = watchdog if watchdog is not None else math.inf
    longest = max((min(r.started_s if r.started_s is not None else end, end) - r.entered_s for r in records),
                  default=0.0)
    return HangTimeline(
        scenario, report, float(timeout_s), shift, fault, records, previous, compute, dead_at, first, watchdog, blocked,
        None if watchdog is None or fault is None else watchdog - fault, max(0.0, longest),
    )


# ---- Figure 25: one step's per-rank times, and the tax with one bad card -----------------------

MAX_SHOWN_RANKS = 1024  # rank times drawn one by one per call (~1 ms of CPython); the rest by their maximum


@dataclass(frozen=True)
class StepSample:
    world_size: int
    shown_times_s: tuple  # the first min(n, shown) ranks' step times; rank 0 is the bad card if any
    rest_max_s: float | None  # the slowest of the other n - shown ranks (None if every rank is shown)
    step_s: float  # the synchronous step: the slowest of all n ranks
    slowest_rank: int | None  # index into shown_times_s, or None when the slowest is among the rest


def _max_of_normals(rng, count, mean, std):
    """One draw of the maximum of ``count`` iid N(mean, std^2), by inversion: its CDF is Phi^count,
    so max = Phi^-1(U^(1/count)), written with the upper tail so U^(1/count) near 1 loses nothing."""
    upper = -math.expm1(math.log(1.0 - rng.random()) / count)  # 1 - U^(1/count), in (0, 1]
    return mean - std * NormalDist().inv_cdf(max(upper, 1e-300))


def sample_step(n, mean, std, *, seed, bad_slowdown=0.0, shown=MAX_SHOWN_RANKS):
    """One synchronous step over ``n`` ranks whose times are N(mean, std^2): the first ``shown`` ranks
    drawn one by one (``random.Random(seed).gauss``, rank 0 ``bad_slowdown`` slower: its time times
    1 + bad_slowdown), the other n - shown only through their maximum, drawn exactly from Phi^(n-shown).
    The step time is the slowest rank's (article, "A single slow rank": T_step = max_i t_i)."""
    n = positive_int("n", n)
    finite("mean", mean)
    non_negative("std", std)
    non_negative("bad_slowdown", bad_slowdown)
    shown = positive_int("shown", shown)
    if shown > MAX_SAMPLED_DRAWS:
        raise ValueError(f"shown must be <= {MAX_SAMPLED_DRAWS}, got {shown}")
    rng = random.Random(seed)
    count = min(n, shown)
    times = [rng.gauss(mean, std) for _ in range(count)]
    times[0] *= 1.0 + bad_slowdown
    times = tuple(times)
    rest = None if n == count else _max_of_normals(rng, n - count, mean, std)
    if not all(math.isfinite(t) for t in times + ((rest,) if rest is not None else ())):
        raise ValueError("rank times overflow the float range for these inputs")
    slowest = max(range(count), key=times.__getitem__)
    if rest is not None and rest > times[slowest]:
        return StepSample(n, times, rest, rest, None)
    return StepSample(n, times, rest, times[slowest], slowest)


@lru_cache(maxsize=None)
def standard_max_mean(n):
    """E[max of n iid N(0, 1)] (``expected_max_normal(n, 0, 1)``), cached: a curve over world sizes
    asks for the same few n on every redraw."""
    return expected_max_normal(n, 0.0, 1.0)


def expected_max_over_mean(n, cv):
    """E[max of n step times] / mean for step times N(mean, (cv mean)^2): the same float as
    ``expected_max_normal(n, 1, cv)``, from the cached standard maximum."""
    non_negative("cv", cv)
    return finite_result("expected max", 1.0 + cv * standard_max_mean(n))


def bad_card_tax(n, cv, bad_slowdown):
    """The tax E[step]/mean - 1 with one card ``bad_slowdown`` slower, as the larger of the two causes:
    the straggler tax of n healthy ranks (``straggler_tax``) or the bad card's own slowdown. A lower
    bound: E[max(A, B)] >= max(E[A], E[B])."""
    non_negative("bad_slowdown", bad_slowdown)
    return max(expected_max_over_mean(n, cv) - 1.0, float(bad_slowdown))


def histogram_counts(values, low, high, bins):
    """How many ``values`` fall in each of ``bins`` equal bins on [low, high) (the last bin also takes
    ``high``); values outside are not counted."""
    bins = positive_int("bins", bins)
    finite("low", low)
    finite("high", high)
    if not high > low:
        raise ValueError(f"high must be > low={low}, got {high}")
    counts = [0] * bins
    scale = bins / (high - low)
    for value in values:
        if low <= value < high:  # rounding may put a value just below high at index bins
            counts[min(int((value - low) * scale), bins - 1)] += 1
        elif value == high:
            counts[-1] += 1
    return tuple(counts)


def straggler_curve(world_sizes, cv):
    """``(n, exact tax, asymptotic tax)`` for each world size at step-time spread ``cv`` = sigma/mu:
    cv * E[max of n standard normals] (``standard_max_mean``, cached) and cv * sqrt(2 ln n)."""
    non_negative("cv", cv)
    return tuple((positive_int("world_sizes", n), cv * standard_max_mean(n), cv * math.sqrt(2.0 * math.log(n)))
                 for n in world_sizes)
# ---- one rank skips a collective (Figure 01) ---------------------------------------------------

@dataclass(frozen=True)
class SkippedCollective:
    """What a skipped collective does to its group: the members that entered it wait forever."""

    group: tuple  # the collective's ranks, sorted
    skipper: int  # the rank whose branch skipped the call
    blocked: tuple  # every other member: parked inside a call that can never complete
    watchdog_at_s: float  # when the waiting ranks' watchdog kills the job (after entering at 0 s)


def skipped_collective(group, skipper, *, timeout_s=DEFAULT_NCCL_TIMEOUT_S):
    """A rank that skips a collective its group enters (the article's "Hangs, not crashes"): the call
    completes only when every member has entered it, so the others park in it and nothing moves
    until PyTorch's NCCL watchdog fires ``timeout_s`` later (ProcessGroupNCCL, default 10 min).
    The same answer ``simulate_collectives`` gives for a one-call program the skipper leaves out,
    without enumerating the group once per member (groups of the Figure 01 mesh reach 256 ranks)."""
    try:
        members = tuple(sorted(group))
    except TypeError:
        raise ValueError(f"group must be a collection of ranks, got {group!r}") from None
    if not members or len(set(members)) != len(members):
        raise ValueError(f"group must list distinct ranks, got {group!r}")
    for r in members:
        non_negative_int("group", r)
    if isinstance(skipper, bool) or skipper not in members:
        raise ValueError(f"skipper must be a member of group, got {skipper!r}")
    positive("timeout_s", timeout_s)
    return SkippedCollective(members, skipper, tuple(r for r in members if r != skipper), float(timeout_s))


__all__ += ["SkippedCollective", "skipped_collective"]
