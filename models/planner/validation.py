"""The planner against published measurements."""
from dataclasses import dataclass

from models.planner.cost import predict, train_time_s
from models.planner.model import Cluster, Plan, Transformer

# ---- validation: the planner against the published cases --------------------------------

GiB = 2**30


@dataclass(frozen=True)
class Case:
    """A published measurement the planner predicts. ``case_id`` is the id in
    ``shared/reference/published_cases.json``; ``key`` the number there."""

    case_id: str
    key: str
    label: str
    quantity: str  # "hardware_tflops_per_gpu", "train_days", "model_state_gib", "activations_gib"
    published: float
    model: Transformer
    cluster: Cluster
    plan: Plan
    tokens: float = 0.0
    end_to_end: bool = True


def _megatron2021(case_id, label, layers, hidden, heads, tp, pp, dp, mb, global_batch, v, published):
    # Narayanan et al. 2021 Table 1 on Selene (DGX A100 80GB, 8 HDR NICs per node); micro
    # batch sizes and interleaving depths from NVIDIA/Megatron-LM
    # examples/academic_paper_scripts/sc21/run_table_1.sh: fp16, full ("uniform")
    # recomputation, no distributed optimizer, no sequence parallelism, no FlashAttention.
    return Case(case_id, "tflops_per_gpu", label, "hardware_tflops_per_gpu", published,
                Transformer(layers, hidden, heads, 2048, 51200), Cluster("a100_80gb", tp * pp * dp, 8),
                Plan(tp=tp, pp=pp, dp=dp, microbatch=mb, global_batch=global_batch, virtual_stages=v,
                     schedule="interleaved" if v > 1 else "1f1b", zero=0, recompute="full",
                     sequence_parallel=False, flash_attention=False))


def _korthikanti(case_id, size, heads, hidden, layers, pp, gpus, batch, micro, v, published):
    # Korthikanti et al. 2022 Fig. 1 (values as read by the Calculon authors), tp = 8,
    # Megatron's 18 bytes per parameter, no FlashAttention; first pipeline stage.
    model = Transformer(layers, hidden, heads, 2048, 51200)
    cluster = Cluster("a100_80gb", gpus, 8)
    common = dict(tp=8, pp=pp, dp=gpus // (8 * pp), microbatch=micro, global_batch=batch, virtual_stages=v,
                  schedule="interleaved" if v > 1 else "1f1b", zero=0, flash_attention=False)
    baseline = Plan(recompute="none", sequence_parallel=False, **common)
    reduced = Plan(recompute="selective", sequence_parallel=True, **common)
    states, tp_act, sp_act = published
    return (
        Case(case_id, "params_plus_optimizer_GiB", f"{size} weights, gradients, optimizer", "model_state_gib", states,
             model, cluster, baseline, end_to_end=False),
        Case(case_id, "activations_tp_baseline_GiB", f"{size} activations, tensor parallel", "activations_gib", tp_act,
             model, cluster, baseline, end_to_end=False),
        Case(case_id, "activations_sp_selective_GiB", f"{size} activations, + SP + selective", "activations_gib", sp_act,
             model, cluster, reduced, end_to_end=False),
    )


VALIDATION = (
    _megatron2021("megatron2021-table1-1.7B", "GPT 1.7B, 32 A100s", 24, 2304, 24, 1, 1, 32, 16, 512, 1, 137),
    _megatron2021("megatron2021-table1-18B", "GPT 18B, 256 A100s", 40, 6144, 48, 8, 1, 32, 8, 1024, 1, 135),
    _megatron2021("megatron2021-table1-145B", "GPT 145B, 1,536 A100s", 80, 12288, 96, 8, 8, 24, 2, 2304, 2, 148),
    _megatron2021("megatron2021-table1-1T", "GPT 1T, 3,072 A100s", 128, 25600, 160, 8, 64, 6, 1, 3072, 1, 163),
    # Eq. 4 for the same 1T run: 450B tokens at the measured rate.
    Case("megatron2021-eq4-training-time", "days", "GPT 1T, 450B tokens", "train_days", 84,
         Transformer(128, 25600, 160, 2048, 51200), Cluster("a100_80gb", 3072, 8),
         Plan(tp=8, pp=64, dp=6, microbatch=1, global_batch=3072, zero=0, recompute="full",
              sequence_parallel=False, flash_attention=False), tokens=450e9),
    *_korthikanti("korthikanti-fig1-22B", "22B", 64, 6144, 48, 1, 8, 4, 4, 1, (45.5625, 59.25, 9.5625)),
    *_korthikanti("korthikanti-fig1-175B", "175B", 96, 12288, 96, 8, 64, 64, 1, 3, (45.5625, 66.84375, 12.3515625)),
    *_korthikanti("korthikanti-fig1-530B", "530B", 128, 20480, 105, 35, 280, 280, 1, 3,
                  (31.640625, 114.0234375, 23.076171875)),
    *_korthikanti("korthikanti-fig1-1T", "1T", 160, 25600, 128, 64, 512, 512, 1, 1, (32.958984375, 131.25, 26.5625)),
)


@dataclass(frozen=True)
class Check:
    case: Case
    predicted: float

    @property
    def error(self):
        """(predicted - published) / published."""
        return self.predicted / self.case.published - 1


def measure(case, estimate):
    """The number a case publishes, from the planner's estimate."""
    if case.quantity == "hardware_tflops_per_gpu":
        return estimate.hardware_tflops_per_gpu
    if case.quantity == "train_days":
        return train_time_s(estimate, case.tokens) / 86400
    if case.quantity == "model_state_gib":
        # The published figure counts the transformer layers' weights (18 bytes x 12lh^2/t
        # per layer): pipeline rank 1 holds just those; with one stage, rank 0 (with the
        # embedding) is all there is.
        params, grads, optimizer = estimate.stage_memory[1 if len(estimate.stage_memory) > 1 else 0][:3]
        return (params + grads + optimizer) / GiB
    return estimate.memory_breakdown["activations"] / GiB


def validate():
    """Every published case, predicted: a tuple of ``Check``s."""
    return tuple(Check(case, measure(case, predict(case.model, case.cluster, case.plan))) for case in VALIDATION)


