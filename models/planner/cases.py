"""Published training runs the planner is held to: a fitting set its constants were chosen
on and a checking set no constant was tuned on (docs/MODELS.md, "Calibration").

Which runs are here. A run is admitted when its source is the authors' own (paper, the
framework's repository or documentation), it trains in bf16 or fp16 on a GPU the planner has
a preset for, and it states the model and the whole layout: tensor, pipeline, data, context
and expert degrees, microbatch, global batch, sequence length and recomputation (virtual
stages when interleaved). Runs that change the layer itself (MegaScale's parallel blocks),
use FP8 or leave the microbatch out
(the Megatron-Core README's H100 table, Nemotron-4's report, MegaScale) are left out; so is
MT-NLG, whose numbers survive only in third-party copies. From a long sweep of one source
the largest and smallest GPU counts are kept (llm-foundry: the largest count at 2,048
tokens, per model from 1B and per GPU), so that no one source outweighs the others. One
exception is stated where it applies: Llama 3 405B (Meta publishes neither the microbatch
nor the interleaving depth; 1 and 8 are assumed); torchtitan's December 2024 H100 runs
(Grand Teton H100s with 96 GB of HBM2e at 500 W, priced as the 80 GB H100 SXM: no preset
has their clock or memory); DeepSeek-V3 on 1,024 H100s (NVIDIA's recipe recomputes the
MLA up-projections, the MLPs and the experts, ``--recompute-modules mla_up_proj mlp moe``:
priced as full recomputation, the nearest the planner states). A run is priced with the sharding and
gradient dtype its authors' code sets (IBM's 7B: HSDP in 8-GPU groups; IBM's and llm-foundry's
"PURE" runs: bf16 gradient reduction), and the expert dispatch and routing its code sets
(DeepSeek-V3 on 1,024 H100s: DeepEP through Megatron-Core's flex dispatcher with forced
balanced routing; NeMo AutoModel's DeepSeek-V3 and Kimi K2: DeepEP with AutoModel's fake
balanced gate, ``ep_routing='round_robin'``). The quotes behind every number are in
tests/data/published_runs.json.

The fitting set: Megatron-LM 2021 Table 1 (``GEMM_SHAPE_EFFICIENCY``, ``ELEMENTWISE_TRAFFIC``),
its ZeRO-3 rows for the 175B model (``DEEPSPEED_ZERO3_NICS``, ``DEEPSPEED_ZERO3_OVERLAP``) and
torchtitan's A100 runs without selective checkpointing (``ELEMENTWISE_TRAFFIC_UNFUSED``).
Everything else checks.
"""
from dataclasses import dataclass

from models import hardware
from models.planner.model import Cluster, Plan, Transformer

FIT, CHECK = "fit", "check"

# quantity -> how the source states it: TFLOP/s per GPU counted by Narayanan et al. 2021
# Eq. 3 (hardware FLOPs, full recomputation); model TFLOP/s per GPU counted 6N + 12·L·h·s
# per token (PaLM's convention, which Meta cites for Llama 3); a measured step; tokens per
# second per GPU; days for a token count; GiB of memory.
QUANTITIES = {
    "hardware_tflops_eq3": "TFLOP/s per GPU (Eq. 3)",
    "model_tflops_palm": "model TFLOP/s per GPU",
    "step_time_s": "seconds per step",
    "tokens_per_s_per_gpu": "tokens/s per GPU",
    "train_days": "days",
    "model_state_gib": "GiB of model states",
    "activations_gib": "GiB of activations",
}
THROUGHPUT = ("hardware_tflops_eq3", "model_tflops_palm", "tokens_per_s_per_gpu")  # higher is faster
DURATION = ("step_time_s", "train_days")  # lower is faster


@dataclass(frozen=True)
class Source:
    key: str
    citation: str


SOURCES = {s.key: s for s in (
    Source("narayanan2021", "Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters "
                            "Using Megatron-LM (SC'21), Tables 1-2; microbatches from Megatron-LM's sc21 scripts"),
    Source("korthikanti2022", "Korthikanti et al. 2022, Reducing Activation Recomputation in Large Transformer "
                              "Models, Fig. 1 and Tables 3-5"),
    Source("bloom2022", "BigScience 2022, BLOOM-176B training (tr11-176B-ml README and chronicles)"),
    Source("dgxc", "NVIDIA DGX Cloud benchmarking recipes (NVIDIA/dgxc-benchmarking, releases 25.03, 25.04 and "
                   "25.08), NeMo / Megatron-Core"),
    Source("llama3", "Llama Team 2024, The Llama 3 Herd of Models, Table 4 and Sec. 3.3.2"),
    Source("ibm2024", "Team PyTorch at IBM and Meta 2024, Maximizing training throughput using PyTorch FSDP "
                      "(pytorch.org), Table 1"),
    Source("llmfoundry", "MosaicML llm-foundry, scripts/train/benchmarking/README.md (Composer + PyTorch FSDP)"),
    Source("torchtitan2024", "torchtitan 2024, performance table of its documentation: FSDP2 on 64 A100s"),
    Source("automodel", "NVIDIA NeMo AutoModel, docs/performance-summary.md (DGX-H100, BF16) and the benchmark "
                        "configurations it runs, examples/benchmark/configs/deepseek_v3_te_deepep.yaml and "
                        "kimi_k2_te_deepep.yaml (PyTorch FSDP2 with pipelining and DeepEP)"),
    Source("torchtitan2024h100", "torchtitan team, benchmarks/llama3_h100_202412_torchtitan.md (December 2024, "
                                 "torchtitan 9dec370): FSDP2 on 8 and 128 H100s, Tables 1 and 3"),
)}


@dataclass(frozen=True)
class Case:
    """A published measurement the planner predicts: ``quantity`` (a key of QUANTITIES) of
    ``model`` run as ``plan`` on ``cluster``. ``role`` FIT or CHECK; ``key`` the number's
    name in shared/reference/published_cases.json for the cases that file holds."""

    case_id: str
    source: str
    role: str
    quantity: str
    published: float
    model: Transformer
    cluster: Cluster
    plan: Plan
    label: str = ""
    key: str = ""
    tokens: float = 0.0
    note: str = ""

    @property
    def end_to_end(self):
        return self.quantity in THROUGHPUT + DURATION


# ---- the models (each as its source states it; dropout only where the run trained with it)
GPT_1_7B = Transformer(24, 2304, 24, 2048, 51200)
GPT_3_6B = Transformer(30, 3072, 32, 2048, 51200)
GPT_7_5B = Transformer(36, 4096, 32, 2048, 51200)
GPT_18B = Transformer(40, 6144, 48, 2048, 51200)
GPT_39B = Transformer(48, 8192, 64, 2048, 51200)
GPT_76B = Transformer(60, 10240, 80, 2048, 51200)
GPT_145B = Transformer(80, 12288, 96, 2048, 51200)
GPT_310B = Transformer(96, 16384, 128, 2048, 51200)
GPT_530B = Transformer(105, 20480, 128, 2048, 51200)
GPT_1T = Transformer(128, 25600, 160, 2048, 51200)
GPT_3_175B = Transformer(96, 12288, 96, 2048, 51200)
LLAMA_2_13B = Transformer(40, 5120, 40, 4096, 32000, ffn=13824, gated_mlp=True, tied_embeddings=False, dropout=False)
LLAMA_3_70B = Transformer(80, 8192, 64, 8192, 128256, ffn=28672, kv_heads=8, gated_mlp=True,
                          tied_embeddings=False, dropout=False)
LLAMA_2_70B = Transformer(80, 8192, 64, 4096, 32000, ffn=28672, kv_heads=8, gated_mlp=True,
                          tied_embeddings=False, dropout=False)
GPT_22B = Transformer(48, 6144, 64, 2048, 51200)
BLOOM_176B = Transformer(70, 14336, 112, 2048, 250880, dropout=False)
LLAMA_3_8B = Transformer(32, 4096, 32, 8192, 128256, ffn=14336, kv_heads=8, gated_mlp=True,
                         tied_embeddings=False, dropout=False)
LLAMA_3_405B = Transformer(126, 16384, 128, 8192, 128256, ffn=53248, kv_heads=8, gated_mlp=True,
                           tied_embeddings=False, dropout=False)
NEMOTRON_4_15B = Transformer(32, 6144, 48, 4096, 256000, kv_heads=8, tied_embeddings=False, dropout=False)
NEMOTRON_4_340B = Transformer(96, 18432, 96, 4096, 256000, kv_heads=8, tied_embeddings=False, dropout=False)
GPT_3_175B_NEMO = Transformer(96, 12288, 96, 2048, 51200, tied_embeddings=False, dropout=False)
GROK_1_314B = Transformer(64, 6144, 48, 8192, 128256, ffn=32768, kv_heads=8, gated_mlp=True, experts=8,
                          top_k=2, tied_embeddings=False, dropout=False)
LLAMA_3_405B_128K = Transformer(126, 16384, 128, 131072, 128256, ffn=53248, kv_heads=8, gated_mlp=True,
                                tied_embeddings=False, dropout=False)
LLAMA_2_7B = Transformer(32, 4096, 32, 4096, 32000, ffn=11008, gated_mlp=True, tied_embeddings=False, dropout=False)
LLAMA_2_34B = Transformer(48, 8192, 64, 4096, 32000, ffn=22016, kv_heads=8, gated_mlp=True,
                          tied_embeddings=False, dropout=False)
MPT_13B = Transformer(40, 5120, 40, 2048, 50368, dropout=False)
MPT_1B = Transformer(24, 2048, 16, 2048, 50368, dropout=False)
MPT_30B = Transformer(48, 7168, 56, 2048, 50368, dropout=False)
MPT_3B = Transformer(32, 2560, 20, 2048, 50368, dropout=False)
MPT_70B = Transformer(80, 8192, 64, 2048, 50368, dropout=False)
MPT_7B = Transformer(32, 4096, 32, 2048, 50368, dropout=False)
DEEPSEEK_V3 = Transformer(61, 7168, 128, 4096, 129280, ffn=18432, gated_mlp=True, experts=256, top_k=8,
                          shared_experts=1, expert_ffn=2048, dense_layers=3, tied_embeddings=False, dropout=False,
                          q_lora_rank=1536, kv_lora_rank=512, qk_head_dim=128, qk_rope_head_dim=64, v_head_dim=128,
                          router_score="sigmoid", route_groups=8, route_group_limit=4, norm="rmsnorm",
                          rope_theta=10000, bias=False)
KIMI_K2 = Transformer(61, 7168, 64, 4096, 163840, ffn=18432, gated_mlp=True, experts=384, top_k=8, shared_experts=1,
                      expert_ffn=2048, dense_layers=1, tied_embeddings=False, dropout=False, q_lora_rank=1536,
                      kv_lora_rank=512, qk_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, router_score="sigmoid",
                      norm="rmsnorm", rope_theta=50000, bias=False)

MODEL_NAMES = {
    GPT_1_7B: 'GPT 1.7B',
    GPT_3_6B: 'GPT 3.6B',
    GPT_7_5B: 'GPT 7.5B',
    GPT_18B: 'GPT 18B',
    GPT_39B: 'GPT 39B',
    GPT_76B: 'GPT 76B',
    GPT_145B: 'GPT 145B',
    GPT_310B: 'GPT 310B',
    GPT_530B: 'GPT 530B',
    GPT_1T: 'GPT 1T',
    GPT_3_175B: 'GPT-3 175B',
    LLAMA_2_13B: 'Llama 2 13B',
    LLAMA_3_70B: 'Llama 3 70B',
    LLAMA_2_70B: 'Llama 2 70B',
    GPT_22B: 'GPT 22B',
    BLOOM_176B: 'BLOOM 176B',
    LLAMA_3_8B: 'Llama 3 8B',
    LLAMA_3_405B: 'Llama 3 405B',
    NEMOTRON_4_15B: 'Nemotron-4 15B',
    NEMOTRON_4_340B: 'Nemotron-4 340B',
    GPT_3_175B_NEMO: 'GPT-3 175B',
    GROK_1_314B: 'Grok-1 314B',
    LLAMA_3_405B_128K: 'Llama 3 405B, 131k tokens',
    LLAMA_2_7B: 'Llama 2 7B',
    LLAMA_2_34B: 'Llama 2 34B',
    MPT_13B: 'MPT 13B',
    MPT_1B: 'MPT 1B',
    MPT_30B: 'MPT 30B',
    MPT_3B: 'MPT 3B',
    MPT_70B: 'MPT 70B',
    MPT_7B: 'MPT 7B',
    DEEPSEEK_V3: 'DeepSeek-V3 671B',
    KIMI_K2: 'Kimi K2 1T',
}


def _case(case_id, source, role, quantity, published, model, cluster, plan, note=""):
    """A run's case; its label names the model, the GPUs and the framework. The cluster
    keeps no margin: a run that ran fitted in HBM less the runtime's reserve."""
    cluster = Cluster(cluster.gpu, cluster.gpus, cluster.gpus_per_node, cluster.intra, cluster.inter,
                      cluster.inter_bytes_per_s, memory_margin_bytes=0)
    label = f"{MODEL_NAMES[model]} on {cluster.gpus:,} \u00d7 {hardware.GPUS[cluster.gpu].short_name}"
    key = "tflops_per_gpu" if case_id.startswith("megatron2021-table1-") else ""
    return Case(case_id, source, role, quantity, published, model, cluster, plan, label, key, note=note)


def _korthikanti_memory(size, heads, hidden, layers, pp, gpus, batch, micro, v, published):
    # Korthikanti et al. 2022 Fig. 1 (values as read by the Calculon authors), tp = 8,
    # Megatron's 18 bytes per parameter, no FlashAttention; first pipeline stage.
    model = Transformer(layers, hidden, heads, 2048, 51200)
    cluster = Cluster("a100_80gb", gpus, 8, memory_margin_bytes=0)
    common = dict(tp=8, pp=pp, dp=gpus // (8 * pp), microbatch=micro, global_batch=batch, virtual_stages=v,
                  schedule="interleaved" if v > 1 else "1f1b", zero=0, flash_attention=False)
    baseline = Plan(recompute="none", sequence_parallel=False, **common)
    reduced = Plan(recompute="selective", sequence_parallel=True, **common)
    states, tp_act, sp_act = published
    case_id = f"korthikanti-fig1-{size}"
    return (
        Case(case_id, "korthikanti2022", CHECK, "model_state_gib", states, model, cluster, baseline,
             f"{size}: weights, gradients, optimizer", "params_plus_optimizer_GiB"),
        Case(case_id, "korthikanti2022", CHECK, "activations_gib", tp_act, model, cluster, baseline,
             f"{size}: activations, tensor parallel", "activations_tp_baseline_GiB"),
        Case(case_id, "korthikanti2022", CHECK, "activations_gib", sp_act, model, cluster, reduced,
             f"{size}: activations, + SP + selective", "activations_sp_selective_GiB"),
    )


LLAMA3_NOTE = "Meta states neither microbatch nor interleaving depth: 1 and 8 assumed"


CASES = (
    _case('megatron2021-table1-1.7B', 'narayanan2021', FIT, 'hardware_tflops_eq3', 137, GPT_1_7B,
          Cluster('a100_80gb', 32, 8),
          Plan(dp=32, microbatch=16, global_batch=512, recompute='full', sequence_parallel=False,
          flash_attention=False)),
    _case('sc21-t1-3.6b', 'narayanan2021', FIT, 'hardware_tflops_eq3', 138, GPT_3_6B, Cluster('a100_80gb', 64, 8),
          Plan(tp=2, dp=32, microbatch=16, global_batch=512, recompute='full', sequence_parallel=False,
          flash_attention=False)),
    _case('sc21-t1-7.5b', 'narayanan2021', FIT, 'hardware_tflops_eq3', 142, GPT_7_5B, Cluster('a100_80gb', 128, 8),
          Plan(tp=4, dp=32, microbatch=16, global_batch=512, recompute='full', sequence_parallel=False,
          flash_attention=False)),
    _case('megatron2021-table1-18B', 'narayanan2021', FIT, 'hardware_tflops_eq3', 135, GPT_18B,
          Cluster('a100_80gb', 256, 8),
          Plan(tp=8, dp=32, microbatch=8, global_batch=1024, recompute='full', sequence_parallel=False,
          flash_attention=False)),
    _case('sc21-t1-39b', 'narayanan2021', FIT, 'hardware_tflops_eq3', 138, GPT_39B, Cluster('a100_80gb', 512, 8),
          Plan(tp=8, pp=2, dp=32, microbatch=4, global_batch=1536, recompute='full', sequence_parallel=False,
          flash_attention=False)),
    _case('sc21-t1-76b', 'narayanan2021', FIT, 'hardware_tflops_eq3', 140, GPT_76B, Cluster('a100_80gb', 1024, 8),
          Plan(tp=8, pp=4, dp=32, microbatch=2, global_batch=1792, virtual_stages=3, recompute='full',
          sequence_parallel=False, schedule='interleaved', flash_attention=False)),
    _case('megatron2021-table1-145B', 'narayanan2021', FIT, 'hardware_tflops_eq3', 148, GPT_145B,
          Cluster('a100_80gb', 1536, 8),
          Plan(tp=8, pp=8, dp=24, microbatch=2, global_batch=2304, virtual_stages=2, recompute='full',
          sequence_parallel=False, schedule='interleaved', flash_attention=False)),
    _case('sc21-t1-310b', 'narayanan2021', FIT, 'hardware_tflops_eq3', 155, GPT_310B, Cluster('a100_80gb', 1920, 8),
          Plan(tp=8, pp=16, dp=15, global_batch=2160, virtual_stages=2, recompute='full', sequence_parallel=False,
          schedule='interleaved', flash_attention=False)),
    _case('sc21-t1-530b', 'narayanan2021', FIT, 'hardware_tflops_eq3', 163, GPT_530B, Cluster('a100_80gb', 2520, 8),
          Plan(tp=8, pp=35, dp=9, global_batch=2520, virtual_stages=3, recompute='full', sequence_parallel=False,
          schedule='interleaved', flash_attention=False)),
    _case('megatron2021-table1-1T', 'narayanan2021', FIT, 'hardware_tflops_eq3', 163, GPT_1T,
          Cluster('a100_80gb', 3072, 8),
          Plan(tp=8, pp=64, dp=6, global_batch=3072, recompute='full', sequence_parallel=False,
          flash_attention=False)),
    _case('sc21-t2-zero3-175b-384gpu', 'narayanan2021', FIT, 'hardware_tflops_eq3', 144, GPT_3_175B,
          Cluster('a100_80gb', 384, 8),
          Plan(dp=384, microbatch=4, global_batch=1536, zero=3, recompute='full', sequence_parallel=False,
          flash_attention=False, framework='deepspeed')),
    _case('sc21-t2-zero3-175b-768gpu', 'narayanan2021', FIT, 'hardware_tflops_eq3', 88, GPT_3_175B,
          Cluster('a100_80gb', 768, 8),
          Plan(dp=768, microbatch=2, global_batch=1536, zero=3, recompute='full', sequence_parallel=False,
          flash_attention=False, framework='deepspeed')),
    _case('sc21-t2-zero3-175b-1536gpu', 'narayanan2021', FIT, 'hardware_tflops_eq3', 44, GPT_3_175B,
          Cluster('a100_80gb', 1536, 8),
          Plan(dp=1536, global_batch=1536, zero=3, recompute='full', sequence_parallel=False, flash_attention=False,
          framework='deepspeed')),
    _case('ttdocs_llama2_13b_64a100_noac', 'torchtitan2024', FIT, 'tokens_per_s_per_gpu', 2162, LLAMA_2_13B,
          Cluster('a100_80gb', 64, 8),
          Plan(dp=64, microbatch=2, global_batch=128, zero=3, recompute='none', sequence_parallel=False,
          framework='fsdp')),
    _case('ttdocs_llama3_70b_64a100_full_ac', 'torchtitan2024', FIT, 'tokens_per_s_per_gpu', 331, LLAMA_3_70B,
          Cluster('a100_80gb', 64, 8),
          Plan(dp=64, global_batch=64, zero=3, recompute='full', sequence_parallel=False, framework='fsdp')),
    _case('ttdocs_llama2_70b_64a100_lbs2_full', 'torchtitan2024', FIT, 'tokens_per_s_per_gpu', 353,
          LLAMA_2_70B, Cluster('a100_80gb', 64, 8),
          Plan(dp=64, microbatch=2, global_batch=128, zero=3, recompute='full', sequence_parallel=False,
          framework='fsdp')),
    _case('ttdocs_llama3_8b_64a100_op_sac', 'torchtitan2024', CHECK, 'tokens_per_s_per_gpu', 2973, LLAMA_3_8B,
          Cluster('a100_80gb', 64, 8),
          Plan(dp=64, global_batch=64, zero=3, recompute='op', sequence_parallel=False, framework='fsdp')),
    _case('ttbench_llama31_8b_8h100_fsdp_op_sac', 'torchtitan2024h100', CHECK, 'tokens_per_s_per_gpu', 5762,
          LLAMA_3_8B, Cluster('h100_sxm', 8, 8),
          Plan(dp=8, microbatch=2, global_batch=16, zero=3, recompute='op', sequence_parallel=False,
          framework='fsdp'),
          "Grand Teton H100s (96 GB HBM2e, 500 W) priced as the H100 SXM 80GB"),
    _case('ttbench_llama31_8b_128h100_fsdp_op_sac', 'torchtitan2024h100', CHECK, 'tokens_per_s_per_gpu', 5605,
          LLAMA_3_8B, Cluster('h100_sxm', 128, 8),
          Plan(dp=128, microbatch=2, global_batch=256, zero=3, recompute='op', sequence_parallel=False,
          framework='fsdp'),
          "Grand Teton H100s (96 GB HBM2e, 500 W) priced as the H100 SXM 80GB"),
    _case('dgxc-v2508-h100-deepseek-v3-bf16-1024gpu', 'dgxc', CHECK, 'step_time_s', 36.189, DEEPSEEK_V3,
          Cluster('h100_sxm', 1024, 8),
          Plan(pp=8, dp=128, ep=64, global_batch=8192, virtual_stages=2, zero=1, recompute='full',
          sequence_parallel=False, schedule='interleaved', ep_dispatch='deepep'),
          "recipe recomputes the MLA up-projections, MLPs and experts: priced as full recomputation; on H100 it "
          "dispatches with DeepEP (flex) and forces balanced routing through the 8-group, 4-group-limited router"),
    _case('automodel-h100-deepseek-v3-bf16-256gpu', 'automodel', CHECK, 'step_time_s', 8.18, DEEPSEEK_V3,
          Cluster('h100_sxm', 256, 8),
          Plan(pp=4, dp=64, ep=64, global_batch=512, virtual_stages=8, zero=2, recompute='full',
          sequence_parallel=False, schedule='interleaved', framework='fsdp', ep_dispatch='deepep',
          ep_routing='round_robin'),
          "DeepEP dispatch; AutoModel's fake balanced gate sends each token to 8 consecutive experts"),
    _case('automodel-h100-kimi-k2-bf16-256gpu', 'automodel', CHECK, 'step_time_s', 8.86, KIMI_K2,
          Cluster('h100_sxm', 256, 8),
          Plan(pp=8, dp=32, ep=32, global_batch=512, virtual_stages=4, zero=2, recompute='full',
          sequence_parallel=False, schedule='interleaved', framework='fsdp', ep_dispatch='deepep',
          ep_routing='round_robin'),
          "DeepEP dispatch; AutoModel's fake balanced gate sends each token to 8 consecutive experts"),
    _case('sc21-t2-ptdp-175b-384gpu', 'narayanan2021', CHECK, 'hardware_tflops_eq3', 153, GPT_3_175B,
          Cluster('a100_80gb', 384, 8),
          Plan(tp=8, pp=12, dp=4, global_batch=1536, recompute='full', sequence_parallel=False,
          flash_attention=False)),
    _case('sc21-t2-ptdp-175b-768gpu', 'narayanan2021', CHECK, 'hardware_tflops_eq3', 149, GPT_3_175B,
          Cluster('a100_80gb', 768, 8),
          Plan(tp=8, pp=12, dp=8, global_batch=1536, recompute='full', sequence_parallel=False,
          flash_attention=False)),
    _case('sc21-t2-ptdp-175b-1536gpu', 'narayanan2021', CHECK, 'hardware_tflops_eq3', 141, GPT_3_175B,
          Cluster('a100_80gb', 1536, 8),
          Plan(tp=8, pp=12, dp=16, global_batch=1536, recompute='full', sequence_parallel=False,
          flash_attention=False)),
    _case('sc21-t2-ptdp-530b-560gpu', 'narayanan2021', CHECK, 'hardware_tflops_eq3', 171, GPT_530B,
          Cluster('a100_80gb', 560, 8),
          Plan(tp=8, pp=35, dp=2, global_batch=2240, recompute='full', sequence_parallel=False,
          flash_attention=False)),
    _case('sc21-t2-ptdp-530b-1120gpu', 'narayanan2021', CHECK, 'hardware_tflops_eq3', 167, GPT_530B,
          Cluster('a100_80gb', 1120, 8),
          Plan(tp=8, pp=35, dp=4, global_batch=2240, recompute='full', sequence_parallel=False,
          flash_attention=False)),
    _case('sc21-t2-ptdp-530b-2240gpu', 'narayanan2021', CHECK, 'hardware_tflops_eq3', 159, GPT_530B,
          Cluster('a100_80gb', 2240, 8),
          Plan(tp=8, pp=35, dp=8, global_batch=2240, recompute='full', sequence_parallel=False,
          flash_attention=False)),
    _case('sc21-t2-zero3-530b-640gpu', 'narayanan2021', CHECK, 'hardware_tflops_eq3', 138, GPT_530B,
          Cluster('a100_80gb', 640, 8),
          Plan(dp=640, microbatch=4, global_batch=2560, zero=3, recompute='full', sequence_parallel=False,
          flash_attention=False, framework='deepspeed')),
    _case('sc21-t2-zero3-530b-1120gpu', 'narayanan2021', CHECK, 'hardware_tflops_eq3', 98, GPT_530B,
          Cluster('a100_80gb', 1120, 8),
          Plan(dp=1120, microbatch=2, global_batch=2240, zero=3, recompute='full', sequence_parallel=False,
          flash_attention=False, framework='deepspeed')),
    _case('sc21-t2-zero3-530b-2240gpu', 'narayanan2021', CHECK, 'hardware_tflops_eq3', 48, GPT_530B,
          Cluster('a100_80gb', 2240, 8),
          Plan(dp=2240, global_batch=2240, zero=3, recompute='full', sequence_parallel=False, flash_attention=False,
          framework='deepspeed')),
    _case('korthikanti-t5-22b-sp-selective', 'korthikanti2022', CHECK, 'step_time_s', 1.1, GPT_22B,
          Cluster('a100_80gb', 8, 8),
          Plan(tp=8, microbatch=4, global_batch=4, flash_attention=False)),
    _case('korthikanti-t5-175b-sp-selective', 'korthikanti2022', CHECK, 'step_time_s', 13.75, GPT_3_175B,
          Cluster('a100_80gb', 64, 8),
          Plan(tp=8, pp=8, global_batch=64, virtual_stages=3, schedule='interleaved', flash_attention=False)),
    _case('korthikanti-t5-530b-sp-selective', 'korthikanti2022', CHECK, 'step_time_s', 37.83, GPT_530B,
          Cluster('a100_80gb', 280, 8),
          Plan(tp=8, pp=35, global_batch=280, virtual_stages=3, schedule='interleaved', flash_attention=False)),
    _case('korthikanti-t5-1t-sp-selective', 'korthikanti2022', CHECK, 'step_time_s', 71.49, GPT_1T,
          Cluster('a100_80gb', 512, 8),
          Plan(tp=8, pp=64, global_batch=512, flash_attention=False)),
    _case('korthikanti-t5-22b-full-recompute', 'korthikanti2022', CHECK, 'step_time_s', 1.42, GPT_22B,
          Cluster('a100_80gb', 8, 8),
          Plan(sequence_parallel=False, tp=8, microbatch=4, global_batch=4, recompute='full', flash_attention=False)),
    _case('korthikanti-t5-175b-full-recompute', 'korthikanti2022', CHECK, 'step_time_s', 18.13, GPT_3_175B,
          Cluster('a100_80gb', 64, 8),
          Plan(sequence_parallel=False, tp=8, pp=8, global_batch=64, virtual_stages=3, recompute='full',
          schedule='interleaved', flash_attention=False)),
    _case('korthikanti-t5-530b-full-recompute', 'korthikanti2022', CHECK, 'step_time_s', 49.05, GPT_530B,
          Cluster('a100_80gb', 280, 8),
          Plan(sequence_parallel=False, tp=8, pp=35, global_batch=280, virtual_stages=3, recompute='full',
          schedule='interleaved', flash_attention=False)),
    _case('korthikanti-t5-1t-full-recompute', 'korthikanti2022', CHECK, 'step_time_s', 94.42, GPT_1T,
          Cluster('a100_80gb', 512, 8),
          Plan(sequence_parallel=False, tp=8, pp=64, global_batch=512, recompute='full', flash_attention=False)),
    _case('bloom176b_384a100_gbs2048', 'bloom2022', CHECK, 'step_time_s', 105.22, BLOOM_176B,
          Cluster('a100_80gb', 384, 8, inter_bytes_per_s=6.25e+09),
          Plan(tp=4, pp=12, dp=8, microbatch=2, global_batch=2048, zero=1, recompute='full', sequence_parallel=False,
          flash_attention=False, framework='deepspeed'),
          "Jean Zay nodes: 4 Omni-Path 100 Gb/s links a node (BLOOM paper, arXiv 2211.05100, p. 18), 50 Gb/s a GPU"),
    _case('dgxc-v2504-h100-sxm-llama3-8b-bf16-8gpu', 'dgxc', CHECK, 'step_time_s', 12.27, LLAMA_3_8B,
          Cluster('h100_sxm', 8, 8),
          Plan(dp=4, cp=2, global_batch=128, zero=1, recompute='none', sequence_parallel=False)),
    _case('dgxc-v2504-h100-sxm-llama3-8b-bf16-128gpu', 'dgxc', CHECK, 'step_time_s', 12.33, LLAMA_3_8B,
          Cluster('h100_sxm', 128, 8),
          Plan(dp=64, cp=2, global_batch=2048, zero=1, recompute='none', sequence_parallel=False)),
    _case('dgxc-v2504-h100-sxm-llama3-70b-bf16-64gpu', 'dgxc', CHECK, 'step_time_s', 14.66, LLAMA_3_70B,
          Cluster('h100_sxm', 64, 8),
          Plan(tp=4, pp=4, dp=2, cp=2, global_batch=128, virtual_stages=5, zero=1, recompute='none',
          schedule='interleaved', tp_comm_overlap=True)),
    _case('dgxc-v2504-h100-sxm-llama3-70b-bf16-2048gpu', 'dgxc', CHECK, 'step_time_s', 14.66, LLAMA_3_70B,
          Cluster('h100_sxm', 2048, 8),
          Plan(tp=4, pp=4, dp=64, cp=2, global_batch=4096, virtual_stages=5, zero=1, recompute='none',
          schedule='interleaved', tp_comm_overlap=True)),
    _case('dgxc-v2504-h100-sxm-llama31-405b-bf16-512gpu', 'dgxc', CHECK, 'step_time_s', 19.78, LLAMA_3_405B,
          Cluster('h100_sxm', 512, 8),
          Plan(tp=8, pp=8, dp=4, cp=2, global_batch=256, virtual_stages=8, zero=1, recompute='none',
          schedule='interleaved', tp_comm_overlap=True)),
    _case('dgxc-v2504-h100-sxm-llama31-405b-bf16-2048gpu', 'dgxc', CHECK, 'step_time_s', 19.87, LLAMA_3_405B,
          Cluster('h100_sxm', 2048, 8),
          Plan(tp=8, pp=8, dp=16, cp=2, global_batch=1024, virtual_stages=8, zero=1, recompute='none',
          schedule='interleaved', tp_comm_overlap=True)),
    _case('dgxc-v2504-h100-sxm-nemotron4-15b-bf16-16gpu', 'dgxc', CHECK, 'step_time_s', 2.66, NEMOTRON_4_15B,
          Cluster('h100_sxm', 16, 8),
          Plan(tp=2, dp=8, microbatch=2, global_batch=64, zero=1, recompute='none', tp_comm_overlap=True)),
    _case('dgxc-v2504-h100-sxm-nemotron4-15b-bf16-2048gpu', 'dgxc', CHECK, 'step_time_s', 2.78, NEMOTRON_4_15B,
          Cluster('h100_sxm', 2048, 8),
          Plan(tp=2, dp=1024, microbatch=2, global_batch=8192, zero=1, recompute='none', tp_comm_overlap=True)),
    _case('dgxc-v2503-h100-sxm-nemotron4-340b-bf16-256gpu', 'dgxc', CHECK, 'step_time_s', 4.67,
          NEMOTRON_4_340B, Cluster('h100_sxm', 256, 8),
          Plan(tp=8, pp=8, dp=4, global_batch=64, virtual_stages=12, zero=1, recompute='none',
          schedule='interleaved', tp_comm_overlap=True)),
    _case('dgxc-v2503-h100-sxm-nemotron4-340b-bf16-2048gpu', 'dgxc', CHECK, 'step_time_s', 4.84,
          NEMOTRON_4_340B, Cluster('h100_sxm', 2048, 8),
          Plan(tp=8, pp=8, dp=32, global_batch=512, virtual_stages=12, zero=1, recompute='none',
          schedule='interleaved', tp_comm_overlap=True)),
    _case('dgxc-v2503-h100-sxm-gpt3-175b-bf16-128gpu', 'dgxc', CHECK, 'step_time_s', 8.309, GPT_3_175B_NEMO,
          Cluster('h100_sxm', 128, 8),
          Plan(tp=4, pp=8, dp=4, global_batch=256, virtual_stages=12, zero=1, recompute='none',
          schedule='interleaved', tp_comm_overlap=True)),
    _case('dgxc-v2503-h100-sxm-gpt3-175b-bf16-2048gpu', 'dgxc', CHECK, 'step_time_s', 8.49, GPT_3_175B_NEMO,
          Cluster('h100_sxm', 2048, 8),
          Plan(tp=4, pp=8, dp=64, global_batch=4096, virtual_stages=12, zero=1, recompute='none',
          schedule='interleaved', tp_comm_overlap=True)),
    _case('dgxc-v2503-h100-sxm-grok1-314b-bf16-512gpu', 'dgxc', CHECK, 'step_time_s', 21.01, GROK_1_314B,
          Cluster('h100_sxm', 512, 8),
          Plan(tp=4, pp=8, dp=8, cp=2, ep=8, global_batch=1024, virtual_stages=8, zero=1, recompute='none',
          schedule='interleaved', tp_comm_overlap=True)),
    _case('dgxc-v2503-h100-sxm-grok1-314b-bf16-2048gpu', 'dgxc', CHECK, 'step_time_s', 21.29, GROK_1_314B,
          Cluster('h100_sxm', 2048, 8),
          Plan(tp=4, pp=8, dp=32, cp=2, ep=8, global_batch=4096, virtual_stages=8, zero=1, recompute='none',
          schedule='interleaved', tp_comm_overlap=True)),
    _case('llama3_405b_t4_8192gpu', 'llama3', CHECK, 'model_tflops_palm', 430, LLAMA_3_405B,
          Cluster('h100_sxm', 8192, 8),
          Plan(tp=8, pp=16, dp=64, global_batch=2048, virtual_stages=8, zero=2, recompute='none',
          schedule='interleaved', framework='fsdp'),
          LLAMA3_NOTE),
    _case('llama3_405b_t4_16384gpu', 'llama3', CHECK, 'model_tflops_palm', 400, LLAMA_3_405B,
          Cluster('h100_sxm', 16384, 8),
          Plan(tp=8, pp=16, dp=128, global_batch=2048, virtual_stages=8, zero=2, recompute='none',
          schedule='interleaved', framework='fsdp'),
          LLAMA3_NOTE),
    _case('llama3_405b_t4_16384gpu_cp16_128k', 'llama3', CHECK, 'model_tflops_palm', 380, LLAMA_3_405B_128K,
          Cluster('h100_sxm', 16384, 8),
          Plan(tp=8, pp=16, dp=8, cp=16, global_batch=128, virtual_stages=8, zero=2, recompute='none',
          schedule='interleaved', framework='fsdp'),
          LLAMA3_NOTE),
    _case('ibm_fsdp_llama2_7b_a100_80gb', 'ibm2024', CHECK, 'tokens_per_s_per_gpu', 3700, LLAMA_2_7B,
          Cluster('a100_80gb', 128, 8, inter_bytes_per_s=6.25e+09),
          Plan(dp=128, microbatch=2, global_batch=256, zero=3, recompute='none', sequence_parallel=False,
          framework='fsdp', shard_group=8, grad_reduce='bf16')),
    _case('ibm_fsdp_llama2_34b_a100_80gb', 'ibm2024', CHECK, 'tokens_per_s_per_gpu', 700, LLAMA_2_34B,
          Cluster('a100_80gb', 128, 8, inter_bytes_per_s=6.25e+09),
          Plan(dp=128, microbatch=2, global_batch=256, zero=3, recompute='full', sequence_parallel=False,
          framework='fsdp', grad_reduce='bf16')),
    _case('ibm_fsdp_llama2_70b_a100_80gb', 'ibm2024', CHECK, 'tokens_per_s_per_gpu', 370, LLAMA_2_70B,
          Cluster('a100_80gb', 128, 8, inter_bytes_per_s=6.25e+09),
          Plan(dp=128, microbatch=2, global_batch=256, zero=3, recompute='full', sequence_parallel=False,
          framework='fsdp', grad_reduce='bf16')),
    _case('ibm_fsdp_llama2_7b_h100_sxm', 'ibm2024', CHECK, 'tokens_per_s_per_gpu', 7500, LLAMA_2_7B,
          Cluster('h100_sxm', 96, 8, inter_bytes_per_s=1.25e+10),
          Plan(dp=96, microbatch=2, global_batch=192, zero=3, recompute='none', sequence_parallel=False,
          framework='fsdp', shard_group=8, grad_reduce='bf16')),
    _case('ibm_fsdp_llama2_34b_h100_sxm', 'ibm2024', CHECK, 'tokens_per_s_per_gpu', 1550, LLAMA_2_34B,
          Cluster('h100_sxm', 96, 8, inter_bytes_per_s=1.25e+10),
          Plan(dp=96, microbatch=2, global_batch=192, zero=3, recompute='full', sequence_parallel=False,
          framework='fsdp', grad_reduce='bf16')),
    _case('ibm_fsdp_llama2_70b_h100_sxm', 'ibm2024', CHECK, 'tokens_per_s_per_gpu', 800, LLAMA_2_70B,
          Cluster('h100_sxm', 96, 8, inter_bytes_per_s=1.25e+10),
          Plan(dp=96, microbatch=2, global_batch=192, zero=3, recompute='full', sequence_parallel=False,
          framework='fsdp', grad_reduce='bf16')),
    _case('mpt_13b_a100_40gb_128gpu_s2048_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 1972.0, MPT_13B,
          Cluster('a100_40gb', 128, 8),
          Plan(dp=128, microbatch=16, global_batch=2048, zero=3, recompute='full', sequence_parallel=False,
          framework='fsdp', grad_reduce='bf16')),
    _case('mpt_13b_a100_80gb_8gpu_s2048_amp_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 2262.0,
          MPT_13B, Cluster('a100_80gb', 8, 8),
          Plan(dp=8, microbatch=2, global_batch=48, zero=3, recompute='none', sequence_parallel=False,
          framework='fsdp')),
    _case('mpt_13b_h100_80gb_512gpu_s2048_amp_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 4952.0,
          MPT_13B, Cluster('h100_sxm', 512, 8),
          Plan(dp=512, microbatch=16, global_batch=8192, zero=3, recompute='full', sequence_parallel=False,
          framework='fsdp')),
    _case('mpt_1b_a100_40gb_128gpu_s2048_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 18647.0, MPT_1B,
          Cluster('a100_40gb', 128, 8),
          Plan(dp=128, microbatch=10, global_batch=1280, zero=3, recompute='none', sequence_parallel=False,
          framework='fsdp', grad_reduce='bf16')),
    _case('mpt_1b_a100_80gb_8gpu_s2048_amp_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 20513.0, MPT_1B,
          Cluster('a100_80gb', 8, 8),
          Plan(dp=8, microbatch=14, global_batch=448, zero=3, recompute='none', sequence_parallel=False,
          framework='fsdp')),
    _case('mpt_1b_h100_80gb_512gpu_s2048_amp_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 39837.0,
          MPT_1B, Cluster('h100_sxm', 512, 8),
          Plan(dp=512, microbatch=12, global_batch=6144, zero=2, recompute='none', sequence_parallel=False,
          framework='fsdp')),
    _case('mpt_30b_a100_40gb_128gpu_s2048_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 865.0, MPT_30B,
          Cluster('a100_40gb', 128, 8),
          Plan(dp=128, microbatch=6, global_batch=768, zero=3, recompute='full', sequence_parallel=False,
          framework='fsdp', grad_reduce='bf16')),
    _case('mpt_30b_a100_80gb_8gpu_s2048_amp_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 916.0, MPT_30B,
          Cluster('a100_80gb', 8, 8),
          Plan(dp=8, microbatch=3, global_batch=504, zero=3, recompute='full', sequence_parallel=False,
          framework='fsdp')),
    _case('mpt_30b_h100_80gb_512gpu_s2048_amp_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 2115.0,
          MPT_30B, Cluster('h100_sxm', 512, 8),
          Plan(dp=512, microbatch=8, global_batch=4096, zero=3, recompute='full', sequence_parallel=False,
          framework='fsdp')),
    _case('mpt_3b_a100_40gb_128gpu_s2048_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 9538.0, MPT_3B,
          Cluster('a100_40gb', 128, 8),
          Plan(dp=128, microbatch=6, global_batch=768, zero=3, recompute='none', sequence_parallel=False,
          framework='fsdp', grad_reduce='bf16')),
    _case('mpt_3b_a100_80gb_8gpu_s2048_amp_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 10811.0, MPT_3B,
          Cluster('a100_80gb', 8, 8),
          Plan(dp=8, microbatch=10, global_batch=160, zero=3, recompute='none', sequence_parallel=False,
          framework='fsdp')),
    _case('mpt_3b_h100_80gb_512gpu_s2048_amp_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 21664.0,
          MPT_3B, Cluster('h100_sxm', 512, 8),
          Plan(dp=512, microbatch=8, global_batch=4096, zero=2, recompute='none', sequence_parallel=False,
          framework='fsdp')),
    _case('mpt_70b_a100_40gb_128gpu_s2048_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 376.0, MPT_70B,
          Cluster('a100_40gb', 128, 8),
          Plan(dp=128, microbatch=4, global_batch=512, zero=3, recompute='full', sequence_parallel=False,
          framework='fsdp', grad_reduce='bf16')),
    _case('mpt_70b_a100_80gb_64gpu_s2048_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 410.0, MPT_70B,
          Cluster('a100_80gb', 64, 8),
          Plan(dp=64, microbatch=8, global_batch=2048, zero=3, recompute='full', sequence_parallel=False,
          framework='fsdp', grad_reduce='bf16')),
    _case('mpt_70b_h100_80gb_512gpu_s2048_amp_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 1007.0,
          MPT_70B, Cluster('h100_sxm', 512, 8),
          Plan(dp=512, microbatch=8, global_batch=4096, zero=3, recompute='full', sequence_parallel=False,
          framework='fsdp')),
    _case('mpt_7b_a100_40gb_128gpu_s2048_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 3623.0, MPT_7B,
          Cluster('a100_40gb', 128, 8),
          Plan(dp=128, microbatch=18, global_batch=2304, zero=3, recompute='full', sequence_parallel=False,
          framework='fsdp', grad_reduce='bf16')),
    _case('mpt_7b_a100_80gb_8gpu_s2048_amp_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 4641.0, MPT_7B,
          Cluster('a100_80gb', 8, 8),
          Plan(dp=8, microbatch=6, global_batch=96, zero=3, recompute='none', sequence_parallel=False,
          framework='fsdp')),
    _case('mpt_7b_h100_80gb_512gpu_s2048_amp_bf16', 'llmfoundry', CHECK, 'tokens_per_s_per_gpu', 9670.0,
          MPT_7B, Cluster('h100_sxm', 512, 8),
          Plan(dp=512, microbatch=6, global_batch=3072, zero=3, recompute='none', sequence_parallel=False,
          framework='fsdp')),
    # Narayanan et al. 2021 Eq. 4 for the 1T run of Table 1: 450B tokens at its measured rate.
    Case("megatron2021-eq4-training-time", "narayanan2021", FIT, "train_days", 84,
         GPT_1T, Cluster("a100_80gb", 3072, 8, memory_margin_bytes=0),
         Plan(tp=8, pp=64, dp=6, microbatch=1, global_batch=3072, zero=0, recompute="full", sequence_parallel=False,
              flash_attention=False), "GPT 1T, 450B tokens", "days", tokens=450e9),
    *_korthikanti_memory("22B", 64, 6144, 48, 1, 8, 4, 4, 1, (45.5625, 59.25, 9.5625)),
    *_korthikanti_memory("175B", 96, 12288, 96, 8, 64, 64, 1, 3, (45.5625, 66.84375, 12.3515625)),
    *_korthikanti_memory("530B", 128, 20480, 105, 35, 280, 280, 1, 3, (31.640625, 114.0234375, 23.076171875)),
    *_korthikanti_memory("1T", 160, 25600, 128, 64, 512, 512, 1, 1, (32.958984375, 131.25, 26.5625)),
)
