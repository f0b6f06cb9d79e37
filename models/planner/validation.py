"""The planner against published runs: the error of every case, the errors of each regime,
and the band an estimate carries because of them (docs/MODELS.md, "Calibration").

An error is signed the same way for every end-to-end quantity: how much faster the planner
says the run goes than it went, ``predicted throughput / published throughput - 1`` (a
step time or a training time enters inverted). For a memory case it is the plain relative
error of the bytes."""
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
# A regime needs this many checking runs to set its own band; with fewer, the next broader
# group's errors are used (the same framework on any GPU, then every checking run).
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
    published runs set it."""

    low: float
    high: float
    regime: str
    basis: str
    checks: int

    def throughput(self, value):
        return value * self.low, value * self.high

    def duration(self, value):
        return value / self.high, value / self.low


def band(model, cluster, plan):
    """The band of an estimate for this plan: the checking-set errors of its regime (or of
    a broader group when the regime has fewer than MIN_REGIME_CHECKS runs), widened to at
    least MIN_BAND on each side. A published run went at predicted / (1 + error)."""
    name = regime(model, cluster, plan)
    summary = regime_summary(name)
    basis = f"{summary.count} published {name} runs the planner was not fitted to"
    if summary.count < MIN_REGIME_CHECKS:
        framework = FRAMEWORK_NAMES[plan.framework]
        summary = summarize([c for c in end_to_end(CHECK) if c.case.plan.framework == plan.framework
                             and c.case.model.moe == model.moe])
        basis = (f"no {name} runs to check against (or too few): the {summary.count} {framework} runs on other GPUs")
        if summary.count < MIN_REGIME_CHECKS:
            summary = summarize(end_to_end(CHECK))
            basis = f"no {name} runs to check against: all {summary.count} checking runs"
    low = 1 / (1 + max(summary.high, MIN_BAND))
    high = 1 / (1 + min(summary.low, -MIN_BAND))
    return Band(low, high, name, basis, summary.count)


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
           "regime", "regime_summary", "band", "regimes", "GpuLean", "gpu_leans", "memory_band", "memory_verdict", "FIT", "CHECK"]
