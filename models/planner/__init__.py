"""The planner: predict one parallel layout's step time and memory, search every layout
that fits, and say why the best one wins (Figure 21; ``python -m models.planner``).

What it models
--------------
A decoder-only transformer (GPT-style, or Llama-style with GQA and SwiGLU, or a mixture
of experts, with multi-head or multi-head latent attention) trained on ``gpus`` GPUs split into tensor (tp), context (cp), data (dp) and
pipeline (pp) parallel groups, with expert parallelism (ep) carved out of dp x cp as
Megatron-Core does (``models.mesh``). Every number is built from the ledgers of this
package:

* memory: the model-state ledger of ``models.memory`` with Megatron-LM's byte sizes
  (bf16 weights, fp32 main gradients, fp32 Adam: 2 + 4 + 12 = 18 bytes per parameter;
  ``--use-distributed-optimizer`` is ZeRO-1: 6 + 12/dp), sharded by ZeRO over dp x cp;
  the activation ledger of Korthikanti et al. 2022 (``models.activations``) per layer,
  extended to GQA, SwiGLU, experts and MLA (DeepSeek-V2 Sec. 2.1), with Korthikanti's
  selective or full recomputation or torchtitan's per-op selective checkpointing, times the
  microbatches a pipeline stage holds;
* time: GEMMs at ``GEMM_EFFICIENCY`` of peak under a roofline (the per-rank shape decides
  whether a GEMM is compute- or memory-bound), elementwise kernels as HBM traffic
  (``ELEMENTWISE_TRAFFIC`` bytes per byte of the activation ledger), the collectives of
  every axis priced by ``models.collectives`` on the fabric the axis lands on
  (``models.mesh`` rank order tp-cp-dp-pp), hidden where ``models.overlap`` says they can
  hide, and the pipeline bubble of the schedule (``models.pipeline`` closed forms);
* FLOPs: model FLOPs 6N + 12·layers·hidden·seq per token (PaLM / Megatron convention, not
  halved for causality; with MLA the attention term uses its query/key and value head
  widths); hardware FLOPs add recomputation (Megatron-LM 2021's convention).

What it does not model
----------------------
Kernel-by-kernel timing, stragglers, congestion between axes sharing a NIC, NCCL protocol
choice, expert load imbalance, allocator fragmentation beyond a fixed reserve, and
DeepSeek-V3's multi-token-prediction module (not priced: the preset is the 671B main model).
Calibrated only against the published cases (docs/MODELS.md, "Planner").

The package
-----------
``model`` the inputs and outputs (Transformer, Cluster, Plan, Estimate, ...); ``cost`` the
cost model and ``predict``; ``layouts`` the search; ``reasons`` the sentences that explain
a plan; ``presets`` published models and nodes; ``validation`` the published cases;
``exports`` Megatron-LM and torchtitan launch configurations; ``limits`` the bounds every
input must keep; ``cli`` the command line.
"""
from models.planner.cost import (
    ATTENTION_EFFICIENCY, DEEPSPEED_ZERO3_NICS, DEEPSPEED_ZERO3_OVERLAP, ELEMENTWISE_TRAFFIC,
    ELEMENTWISE_TRAFFIC_UNFUSED, GEMM_SHAPE_EFFICIENCY, predict, train_time_s)
from models.planner.exports import (
    TORCHTITAN_FLAVORS, megatron_args, parse_megatron_args, parse_torchtitan_toml, torchtitan_toml)
from models.planner.limits import LIMITS, Limit
from models.planner.layouts import PLAN_FIELDS, SEARCHED_FIELDS, recommend, run_steps, search, search_steps
from models.planner.model import (
    ADAM_STEP_BYTES, GRAD_BYTES, MEMORY_PARTS, OPTIMIZER_BYTES, PARAM_BYTES, RECOMPUTE_OPTIONS, SCHEDULES,
    TIME_PARTS, DEFAULT_MEMORY_MARGIN_BYTES, FRAMEWORKS, RUNTIME_RESERVE_BYTES, USUAL_NETWORK, Candidate, Cluster,
    Estimate, Plan, Search, Transformer)
from models.planner.presets import CLUSTERS, MODELS, cluster_preset, model_preset
from models.planner.reasons import MEMORY_NAMES, PART_NAMES, SCHEDULE_NAMES, explain
from models.planner.cases import CASES, SOURCES, Case
from models.planner.validation import VALIDATION, Band, Check, band, measure, regime, validate

__all__ = [
    "GEMM_SHAPE_EFFICIENCY", "ATTENTION_EFFICIENCY", "ELEMENTWISE_TRAFFIC", "ELEMENTWISE_TRAFFIC_UNFUSED",
    "DEEPSPEED_ZERO3_NICS", "DEEPSPEED_ZERO3_OVERLAP", "RUNTIME_RESERVE_BYTES", "DEFAULT_MEMORY_MARGIN_BYTES",
    "FRAMEWORKS",
    "PARAM_BYTES", "GRAD_BYTES", "OPTIMIZER_BYTES", "ADAM_STEP_BYTES", "RECOMPUTE_OPTIONS", "SCHEDULES",
    "Transformer", "Cluster", "Plan", "Estimate", "Candidate", "Search", "predict", "search", "search_steps",
    "run_steps", "recommend", "explain", "train_time_s", "MODELS", "CLUSTERS", "model_preset", "cluster_preset",
    "USUAL_NETWORK", "MEMORY_PARTS", "TIME_PARTS", "MEMORY_NAMES", "PART_NAMES", "SCHEDULE_NAMES", "PLAN_FIELDS",
    "SEARCHED_FIELDS", "VALIDATION", "CASES", "SOURCES", "Case", "Check", "Band", "band", "regime", "measure",
    "validate", "megatron_args", "torchtitan_toml",
    "parse_megatron_args", "parse_torchtitan_toml", "TORCHTITAN_FLAVORS", "LIMITS", "Limit",
]
