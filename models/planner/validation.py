"""The planner against published runs: the error of every case, the errors of each regime,
and the band an estimate carries because of them (docs/MODELS.md, "Calibration").

An error is signed the same way for every end-to-end quantity: how much faster the planner
says the run goes than it went, ``predicted throughput / published throughput - 1`` (a
step time or a training time enters inverted). For a memory case it is the plain relative
error of the bytes."""
import math
from dataclasses import dataclass
from functools import lru_cache

from models import flops
from models.planner.cases import CASES, CHECK, DURATION, FIT, QUANTITIES, SOURCES, Case
from models.planner.model import Transformer
from models.planner.cost import predict, train_time_s

VALIDATION = CASES
GiB = 2**30

# A band is never narrower than this on either side: a regime whose few checks happen to
# agree closely says little about the next plan.
MIN_BAND = 0.05
# A regime needs this many checking runs to set its own band's centre and spread; with
# fewer, the next broader group's are used (the same framework on any GPU, then every
# checking run).
MIN_REGIME_CHECKS = 3

FRAMEWORK_NAMES = {"megatron": "Megatron-LM", "fsdp": "PyTorch FSDP", "deepspeed": "DeepSpeed"}
GENERATION_NAMES = {"a100_40gb": "A100", "a100_80gb": "A100", "h100_sxm": "H100", "h200": "H100",
                    "b200": "B200", "mi300x": "MI300X"}


def regime(model, cluster, plan):
    """The group of runs an estimate is judged by: GPU generation and framework, and
    whether the model is a mixture of experts ("H100 · PyTorch FSDP", "H100 · MoE")."""
    gpu = GENERATION_NAMES[cluster.gpu]
    return f"{gpu} · MoE" if model.moe else f"{gpu} · {FRAMEWORK_NAMES[plan.framework]}"


@dataclass(frozen=True)
class Check:
    case: Case
    predicted: float
    memory_bytes: float  # the planner's peak memory for the run (the worst pipeline rank)

    @property
    def verdict(self):
        """The planner's memory verdict for the run (``memory_verdict``): a run that ran
        should never be "does not fit"."""
        return memory_verdict(self.memory_bytes, self.case.cluster.usable_bytes)

    @property
    def error(self):
        """Predicted over published throughput, less one (see the module docstring)."""
        if self.case.quantity in DURATION:
            return self.case.published / self.predicted - 1
        return self.predicted / self.case.published - 1

    @property
    def regime(self):
        return regime(self.case.model, self.case.cluster, self.case.plan)

    @property
    def source(self):
        return SOURCES[self.case.source]


def measure(case, estimate):
    """The number a case publishes, from the planner's estimate, counted the source's way."""
    q = case.quantity
    gpus = case.cluster.gpus
    if q == "hardware_tflops_eq3":
        m, p = case.model, case.plan
        eq3 = flops.training_flops(p.global_batch, m.seq_len, m.layers, m.hidden, m.vocab, recompute=True)
        return eq3 / (estimate.step_time_s * gpus) / 1e12
    if q == "model_tflops_palm":
        return estimate.model_tflops_per_gpu
    if q == "step_time_s":
        return estimate.step_time_s
    if q == "tokens_per_s_per_gpu":
        return estimate.tokens_per_s / gpus
    if q == "train_days":
        return train_time_s(estimate, case.tokens) / 86400
    if q == "model_state_gib":
        # The published figure counts the transformer layers' weights (18 bytes x 12lh^2/t
        # per layer): pipeline rank 1 holds just those; with one stage, rank 0 (with the
        # embedding) is all there is.
        params, grads, optimizer = estimate.stage_memory[1 if len(estimate.stage_memory) > 1 else 0][:3]
        return (params + grads + optimizer) / GiB
    if q == "activations_gib":
        return estimate.memory_breakdown["activations"] / GiB
    raise ValueError(f"quantity must be one of {', '.join(QUANTITIES)}, got {q!r}")


@lru_cache(maxsize=1)
def validate():
    """Every published case, predicted: a tuple of ``Check``s (cached: the cases and the
    model are fixed for the life of the process)."""
    checks = []
    for case in VALIDATION:
        estimate = predict(case.model, case.cluster, case.plan)
        checks.append(Check(case, measure(case, estimate), estimate.memory_bytes))
    return tuple(checks)


@dataclass(frozen=True)
class Summary:
    """Errors of a group of end-to-end checks: count, mean and largest |error|, and the
    lowest and highest signed error."""

    count: int
    mean_abs: float
    max_abs: float
    low: float
    high: float


def summarize(checks):
    errors = [c.error for c in checks]
    if not errors:
        return Summary(0, 0.0, 0.0, 0.0, 0.0)
    return Summary(len(errors), sum(abs(e) for e in errors) / len(errors), max(abs(e) for e in errors),
                   min(errors), max(errors))


def end_to_end(role=None):
    """The end-to-end checks (throughput and time), of one role or both."""
    return tuple(c for c in validate() if c.case.end_to_end and (role is None or c.case.role == role))


@lru_cache(maxsize=None)
def regime_summary(name, role=CHECK):
    return summarize([c for c in end_to_end(role) if c.regime == name])


@dataclass(frozen=True)
class Band:
    """How far the truth may sit from an estimate: ``low`` and ``high`` multiply a
    throughput (tokens/s, MFU); a duration takes their inverses. ``basis`` says which
    published runs set it; ``checks`` how many, from ``sources`` sources."""

    low: float
    high: float
    regime: str
    basis: str
    checks: int
    sources: int = 0

    def throughput(self, value):
        return value * self.low, value * self.high

    def duration(self, value):
        return value / self.high, value / self.low

    @property
    def reach(self):
        """The largest error the band allows on either side, as a fraction: how far a
        published run may sit from the estimate (the lab's "±" figure)."""
        return max(1 / self.low - 1, 1 - 1 / self.high)

    @property
    def half_width(self):
        """Half the band's width, as a fraction of the estimate (``high - low`` over two)."""
        return (self.high - self.low) / 2


# ---- bands that hold across sources (docs/MODELS.md, "Calibration") ------------------------
#
# A run's log error ln(1 + error) is modelled as regime offset + source offset + scatter, a
# one-way random-effects model per regime (Gelman & Hill 2007, Data Analysis Using
# Regression and Multilevel/Hierarchical Models, Sec. 12.5; DerSimonian & Laird 1986,
# Meta-analysis in clinical trials, for the spread of source means): a reader's stack is a
# new source, so its run sits off the regime's centre by the spread of source means plus the
# scatter within one source. Each regime's two variances are shrunk toward the values pooled
# over every regime (PRIOR_DOF degrees of freedom of prior weight), so a regime with one or
# two sources takes the typical spread between sources rather than none. The band's multiple
# of that spread is an empirical quantile of leave-one-source-out residuals (the jackknife+
# of Barber et al. 2021, Predictive Inference with the Jackknife+, Ann. Statist. 49(1), with
# a source as the unit left out), so it is measured the way the band is used: on runs from a
# source it never saw. The source is the unit there too: each source's residuals weigh one
# source in all, whatever its number of runs (the pooled CDF of Dunn, Wasserman & Ramdas
# 2023, Distribution-Free Prediction Sets for Two-Layer Hierarchical Models, JASA 118(544),
# Sec. 3), and the quantile carries conformal prediction's finite-sample step, one more unit
# than were seen (Barber et al. 2021, Sec. 3), counted in sources: with about ten sources that
# step is what widens the band for having so few.

# The share of a new source's runs the band is to hold: issue 41's 80%, with no margin of its
# own (the step of one more source is the margin the theory asks for).
COVERAGE_LEVEL = 0.80
# Prior weight, in degrees of freedom, of the variances pooled over every regime.
PRIOR_DOF = 1


def _log_error(check):
    return math.log1p(check.error)


@dataclass(frozen=True)
class Spread:
    """Variances of log errors pooled over regimes: ``within`` one source's runs of one
    regime, and ``between`` the source means of one regime."""

    within: float
    between: float


def _cells(checks):
    """Log errors grouped by (regime, source): one source's runs of one regime."""
    cells = {}
    for c in checks:
        cells.setdefault((c.regime, c.case.source), []).append(_log_error(c))
    return cells


def _sums(cells):
    """(mean of cell means, within-cell sum of squares and its degrees of freedom, sum of
    squares of cell means about their mean and its degrees of freedom)."""
    means = [sum(es) / len(es) for es in cells]
    centre = sum(means) / len(means)
    within = sum((e - m) ** 2 for es, m in zip(cells, means) for e in es)
    return (centre, within, sum(len(es) - 1 for es in cells), sum((m - centre) ** 2 for m in means),
            len(cells) - 1)


def _spread(pool):
    """The variances pooled over the regimes of ``pool`` (degrees-of-freedom weighted); a
    pool whose regimes have one source each takes the within-source variance for both."""
    by_regime = {}
    for (name, _), errors in _cells(pool).items():
        by_regime.setdefault(name, []).append(errors)
    sums = [_sums(cells) for cells in by_regime.values()]
    within_dof, between_dof = sum(s[2] for s in sums), sum(s[4] for s in sums)
    within = sum(s[1] for s in sums) / within_dof if within_dof else 0.0
    return Spread(within, sum(s[3] for s in sums) / between_dof if between_dof else within)


def _group(pool, model_moe, framework, name):
    """The runs of ``pool`` an estimate in regime ``name`` is judged by, and what they are:
    the regime's, or with fewer than MIN_REGIME_CHECKS the same framework's on any GPU,
    then every run."""
    runs = [c for c in pool if c.regime == name]
    if len(runs) >= MIN_REGIME_CHECKS:
        return runs, "regime"
    runs = [c for c in pool if c.case.plan.framework == framework and c.case.model.moe == model_moe]
    if len(runs) >= MIN_REGIME_CHECKS:
        return runs, "framework"
    return list(pool), "all"


def _centre_and_sd(runs, spread):
    """Centre and standard deviation of a new source's log error among ``runs``: the mean
    of the k source means (one per source and regime), and sqrt(between x (1 + 1/k) +
    within), each variance shrunk toward ``spread`` (Gelman & Hill 2007, Sec. 12.5): the
    new source's own offset, the uncertainty of the centre, and one run's scatter."""
    cells = list(_cells(runs).values())
    centre, within, within_dof, between, between_dof = _sums(cells)
    within = (PRIOR_DOF * spread.within + within) / (PRIOR_DOF + within_dof)
    between = (PRIOR_DOF * spread.between + between) / (PRIOR_DOF + between_dof)
    return centre, math.sqrt(between * (1 + 1 / len(cells)) + within)


def _residuals(pool):
    """Every run of ``pool`` against the centre and spread its regime has without its own
    source, in standard deviations (the leave-one-source-out residuals): a dict from each
    source to its runs' residuals."""
    out = {}
    for source in {c.case.source for c in pool}:
        others = [c for c in pool if c.case.source != source]
        if not others:
            continue
        spread = _spread(others)
        for c in pool:
            if c.case.source == source:
                runs, _ = _group(others, c.case.model.moe, c.case.plan.framework, c.regime)
                centre, sd = _centre_and_sd(runs, spread)
                out.setdefault(source, []).append(abs(_log_error(c) - centre) / sd if sd else 0.0)
    return out


def source_quantile(residuals, level):
    """The smallest residual at which the residuals' share, each source weighing one in all
    (a source of n runs gives each 1/n), reaches ``level`` x (K + 1) for K sources: the
    conformal quantile with a source as the unit (Dunn, Wasserman & Ramdas 2023, Sec. 3;
    Barber et al. 2021, Sec. 3). When that share is more than the K sources hold, the largest
    residual (a band cannot be built wider than what was seen)."""
    weighted = sorted((r, 1 / len(rs)) for rs in residuals.values() for r in rs)
    if not weighted:
        return 0.0
    need = level * (len(residuals) + 1)
    share = 0.0
    for r, weight in weighted:
        share += weight
        if share >= need - 1e-9:
            return r
    return weighted[-1][0]


def _multiple(pool):
    """How many standard deviations the band spans each side: the source-weighted quantile
    of the leave-one-source-out residuals at COVERAGE_LEVEL (``source_quantile``)."""
    return source_quantile(_residuals(pool), COVERAGE_LEVEL)


def _band_from(pool, model_moe, framework, name, multiple=None):
    """The band for an estimate in regime ``name`` from the checking runs ``pool``."""
    runs, basis = _group(pool, model_moe, framework, name)
    centre, sd = _centre_and_sd(runs, _spread(pool))
    multiple = _multiple(pool) if multiple is None else multiple
    fast = max(math.expm1(centre + multiple * sd), MIN_BAND)  # the planner this much too fast
    slow = min(math.expm1(centre - multiple * sd), -MIN_BAND)
    sources = len({c.case.source for c in runs})
    other = {"regime": f"{name} runs the planner was not fitted to",
             "framework": f"{FRAMEWORK_NAMES[framework]} runs on any GPU (no {name} runs to check against, or too few)",
             "all": f"checking runs of every kind (no {name} runs to check against, or too few)"}[basis]
    text = (f"{len(runs)} published {other}, from {sources} source{'s' if sources > 1 else ''}, widened by how "
            f"far one source's runs sit from another's")
    return Band(1 / (1 + fast), 1 / (1 + slow), name, text, len(runs), sources)


@lru_cache(maxsize=None)
def _page_band(model_moe, framework, name):
    pool = end_to_end(CHECK)
    return _band_from(pool, model_moe, framework, name, band_multiple())


@lru_cache(maxsize=1)
def band_multiple():
    return _multiple(end_to_end(CHECK))


def band(model, cluster, plan):
    """The band of an estimate for this plan, from every checking run: its regime's centre
    and spread (or a broader group's when the regime has fewer than MIN_REGIME_CHECKS runs),
    as many standard deviations each side as held the leave-one-source-out residuals to
    COVERAGE_LEVEL counted in sources (``source_quantile``), and at least MIN_BAND on each
    side. A published run went at
    predicted / (1 + error)."""
    return _page_band(model.moe, plan.framework, regime(model, cluster, plan))


@dataclass(frozen=True)
class HeldOut:
    """One checking run and the band it would have been shown had its source never been
    published (built from the other sources' checking runs alone)."""

    check: Check
    band: Band
    # The run's log error less the band's centre, in the band's standard deviations (signed:
    # - the planner too slow), and how many of them the band spans each side: a run is
    # inside when |distance| <= multiple, or within MIN_BAND where that is wider.
    distance: float = 0.0
    multiple: float = 0.0

    @property
    def inside(self):
        """The published throughput within the band: ``low <= 1 / (1 + error) <= high``."""
        return self.band.low <= 1 / (1 + self.check.error) <= self.band.high


@lru_cache(maxsize=1)
def leave_one_source_out():
    """Every checking run with the band it would have been shown, built from the other
    sources' checking runs only (the multiple too), and how far from that band's centre it
    fell: a tuple of ``HeldOut``."""
    checks = end_to_end(CHECK)
    held = []
    for source in SOURCES:
        others = [c for c in checks if c.case.source != source]
        mine = [c for c in checks if c.case.source == source]
        if not mine:
            continue
        multiple, spread = _multiple(others), _spread(others)
        for c in mine:
            centre, sd = _centre_and_sd(_group(others, c.case.model.moe, c.case.plan.framework, c.regime)[0], spread)
            held.append(HeldOut(c, _band_from(others, c.case.model.moe, c.case.plan.framework, c.regime, multiple),
                                (_log_error(c) - centre) / sd if sd else 0.0, multiple))
    return tuple(held)


@dataclass(frozen=True)
class Coverage:
    """How many held-out runs fell inside their band, from how many sources, and the median
    half-width of those bands."""

    runs: int
    inside: int
    sources: int
    median_half_width: float

    @property
    def share(self):
        return self.inside / self.runs if self.runs else 0.0


def coverage(name=None):
    """Leave-one-source-out coverage of every checking run, or of one regime's."""
    held = [h for h in leave_one_source_out() if name is None or h.check.regime == name]
    widths = sorted(h.band.half_width for h in held)
    median = (widths[(len(widths) - 1) // 2] + widths[len(widths) // 2]) / 2 if widths else 0.0
    return Coverage(len(held), sum(h.inside for h in held), len({h.check.case.source for h in held}), median)


def ties(step_times_s, band):
    """How many of the plans (``step_times_s``, fastest first) the band cannot tell from
    the fastest: those whose step is within ``band.reach`` of it, where the published
    record says either estimate may be off. They are equivalent, not ranked."""
    best = step_times_s[0]
    return sum(1 for t in step_times_s if t <= best * (1 + band.reach))


def memory_band():
    """The relative error a memory estimate carries: the largest error of the memory
    cases, and at least MIN_BAND."""
    return max([MIN_BAND] + [abs(c.error) for c in validate() if not c.case.end_to_end])


def memory_verdict(memory_bytes, usable_bytes, band=None):
    """"fits" when even the high end of the memory band fits, "does not fit" when even its
    low end does not, else "at the edge" (a plan there may or may not run)."""
    band = memory_band() if band is None else band
    if memory_bytes * (1 + band) <= usable_bytes:
        return "fits"
    if memory_bytes * (1 - band) > usable_bytes:
        return "does not fit"
    return "at the edge"


@dataclass(frozen=True)
class GpuLean:
    """One model a source ran on both A100s and H100s: the ratio of the planner's
    H100-over-A100 speed-up to the published one, mean over each GPU's runs (> 1: the
    planner expects too much of the H100)."""

    source: str
    model: Transformer
    a100_errors: tuple
    h100_errors: tuple

    @property
    def ratio(self):
        return (1 + sum(self.h100_errors) / len(self.h100_errors)) / (1 + sum(self.a100_errors) / len(self.a100_errors))


def gpu_leans(checks=None):
    """Every model a source measured on both A100s and H100s, with the planner's lean
    between the two GPUs (docs/MODELS.md, "Calibration"). ``checks``: the end-to-end
    checks to look at (default: every end-to-end run, fitting and checking)."""
    groups = {}
    for c in (end_to_end() if checks is None else checks):
        if c.case.end_to_end:
            gpu = GENERATION_NAMES[c.case.cluster.gpu]
            groups.setdefault((c.case.source, c.case.model), {}).setdefault(gpu, []).append(c.error)
    return tuple(GpuLean(source, model, tuple(gpus["A100"]), tuple(gpus["H100"]))
                 for (source, model), gpus in groups.items() if "A100" in gpus and "H100" in gpus)


def regimes():
    """Every regime with cases, in a fixed order: by GPU generation, then framework."""
    order = list(dict.fromkeys(GENERATION_NAMES.values()))
    names = {c.regime for c in validate()}
    return tuple(sorted(names, key=lambda n: (order.index(n.split(" · ")[0]), n)))


__all__ = ["VALIDATION", "Check", "Summary", "Band", "measure", "validate", "summarize", "end_to_end",
           "regime", "regime_summary", "band", "regimes", "HeldOut", "leave_one_source_out", "Coverage", "coverage",
           "ties", "band_multiple", "source_quantile", "GpuLean", "gpu_leans", "memory_band", "memory_verdict", "FIT", "CHECK"]
