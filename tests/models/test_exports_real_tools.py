"""Every preset's exports run through the real tools: the launch line builds the model the
planner priced, with the parallel layout it priced.

* torchtitan 0.2.2, when importable: the TOML is parsed by its ``ConfigManager``; its
  ``ParallelDims`` is built and its device mesh made over a fake process group (torch's
  ``fake`` backend: no GPU, no network); a flavor the export registers is registered as its
  comment says; the model is built on the meta device, as train.py builds it; its shape
  (parameters, layers, width, heads, key/value heads, FFN, vocabulary, rope_theta, experts,
  MLA widths, sequence length) is compared with the planner's model. A plan the export
  refuses is one torchtitan refuses too (its train spec has no pipelining).
* Megatron-LM core_v0.19.0, when ``MEGATRON_LM`` names its source tree: the arguments go
  through ``parse_args(ignore_unknown_args=False)``, ``validate_args`` and
  ``core_transformer_config_from_args``, and the config's normalization, position embedding,
  rotary base, biases, query groups, FFN, MLA and MoE fields are compared with the planner's.
  On a CPU-only Python 3.11 four things stand in for what a GPU node has: ``typing.override``
  as the identity (Python 3.12), ``get_device_arch_version`` and
  ``torch.cuda.get_device_capability`` reporting the cluster's GPU (9 for an H100, 10 for a
  B200: validate_args asks both), and
  ``--no-rope-fusion`` added to the command (the fused RoPE needs Transformer Engine).
  A torchtitan config asking for DeepEP (``expert_parallel_comm_backend = "deepep"``) fails
  to import its GPU kernels here; the model is then built with the standard all-to-all.

Both skip cleanly when the tools are absent; ``make check-exports`` installs them in a side
environment and runs this module."""
import contextlib
import copy
import dataclasses
import importlib
import io
import os
import re
import sys
import tomllib
import typing
from pathlib import Path

import pytest

from models import planner
from models.planner import exports

# (cluster, GPUs, global batch) each preset is exported for: its published scale or near it.
SCALES = {"gpt3-175b": ("dgx-a100-80gb", 1024, 1536), "llama3-8b": ("dgx-h100", 8, 32),
          "llama3-70b": ("dgx-h100", 512, 512), "llama3-405b": ("dgx-h100", 16384, 2048),
          "mt-nlg-530b": ("dgx-a100-80gb", 2240, 1920), "mixtral-8x7b": ("dgx-h100", 64, 256),
          "deepseek-v3": ("dgx-h100", 256, 1024), "kimi-k2": ("dgx-h100", 256, 1024),
          "deepseek-v2-lite": ("dgx-h100", 16, 256)}


def test_every_preset_has_a_scale():
    assert set(SCALES) == set(planner.MODELS)


def _plans(preset, framework):
    """The plans exported for a preset: the search's best two for ``framework``, its best
    without a pipeline, the hand-built export cases of test_planner_exports and the
    checking set's published runs of the model."""
    from tests.models.test_planner_exports import EXPORT_CASES

    cluster_key, gpus, batch = SCALES[preset]
    model, cluster = planner.model_preset(preset), planner.cluster_preset(cluster_key, gpus)
    plans = []
    for fixed, top in (({"framework": framework}, 2), ({"framework": framework, "pp": 1}, 1)):
        try:
            found = planner.search(model, cluster, batch, top=top, fixed=fixed).candidates
        except ValueError:  # no such layout at this scale (e.g. no pp=1 layout of 2,240 GPUs)
            found = ()
        plans += [(cluster, c.plan) for c in found if c.plan not in [p for _, p in plans]]
    plans += [(planner.cluster_preset(c, g), p) for key, c, g, p in EXPORT_CASES if key == preset]
    plans += [(case.cluster, case.plan) for case in planner.CASES if case.model == model
              and (case.cluster, case.plan) not in plans]  # the checking set's runs of this model
    assert plans, preset
    return model, plans


# ---- torchtitan ----------------------------------------------------------------------------

def _torchtitan():
    titan = pytest.importorskip("torchtitan", reason="torchtitan is not installed (make check-exports)")
    from importlib.metadata import version

    assert version("torchtitan") == "0.2.2", "the exports are written for torchtitan 0.2.2"
    return titan


@contextlib.contextmanager
def _fake_world(size):
    """torch.distributed over the ``fake`` backend: every collective returns at once."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _register(text, spec):
    """Register the flavor the export's comment asks for, exactly as written there."""
    from torchtitan.models.moe import MoEArgs

    for line in text.splitlines():
        found = re.match(r'# register "([^"]+)" in torchtitan/models/(\w+)/__init__.py as (.*)$', line)
        if found:
            flavor, name, expression = found.groups()
            scope = {**vars(importlib.import_module(f"torchtitan.models.{name}")), "MoEArgs": MoEArgs,
                     "replace": dataclasses.replace}
            spec.model_args[flavor] = eval(expression, scope)  # the reader pastes this line into torchtitan


def check_torchtitan(model, cluster, plan, preset, tmp_path):
    """Run the export through torchtitan as its train.py would, up to the first step."""
    import torch
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims
    from torchtitan.protocols.train_spec import get_train_spec

    try:
        text = planner.torchtitan_toml(model, cluster, plan, preset)
    except ValueError as refusal:  # torchtitan refuses it too: train.py "does not support pipelining"
        name = exports._torchtitan_registration(model)[0]
        assert plan.pp > 1 and get_train_spec(name).pipelining_fn is None and "has no pipelining" in str(refusal)
        return "refused"
    path = tmp_path / "job.toml"
    path.write_text(text)
    job = ConfigManager().parse_args(["--job.config_file", str(path)])
    p = job.parallelism
    dims = ParallelDims(dp_shard=p.data_parallel_shard_degree, dp_replicate=p.data_parallel_replicate_degree,
                        cp=p.context_parallel_degree, tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                        ep=p.expert_parallel_degree, etp=p.expert_tensor_parallel_degree, world_size=cluster.gpus)
    with _fake_world(cluster.gpus):
        dims.build_mesh()
    assert (dims.dp_replicate * dims.dp_shard, dims.tp, dims.pp, dims.cp) == (plan.dp, plan.tp, plan.pp, plan.cp)
    assert dims.ep == (plan.ep if model.moe else 1)
    spec = get_train_spec(job.model.name)
    if dims.pp > 1:
        assert spec.pipelining_fn is not None
    _register(text, spec)
    args = copy.deepcopy(spec.model_args[job.model.flavor])
    args.update_from_config(job)  # refuses FlexAttention with context parallelism
    try:
        with torch.device("meta"):
            built = spec.model_cls(args)
    except ImportError as missing:  # DeepEP's kernels are a GPU package: the config asked for them
        assert p.expert_parallel_comm_backend == "deepep" and "DeepEP" in str(missing)
        args.moe_impl = "standard"  # the same model with torchtitan's all-to-all
        with torch.device("meta"):
            built = spec.model_cls(args)
    compare_torchtitan(model, built, args, text)
    return "built"


def compare_torchtitan(model, built, args, text):
    layers = list(built.layers.values())
    assert (len(layers), args.dim, args.n_heads, built.tok_embeddings.num_embeddings, args.max_seq_len) == (
        model.layers, model.hidden, model.heads, model.vocab, model.seq_len)
    assert getattr(args, "n_kv_heads", None) in (model.kv_heads, None if model.mla else model.kv_heads)
    dense = [layer.feed_forward for layer in layers if getattr(layer, "feed_forward", None) is not None]
    assert all(ffn.w1.out_features == model.ffn for ffn in dense)
    assert len(dense) == (model.dense_layers if model.moe else model.layers)
    if model.rope_theta:
        assert args.rope_theta == model.rope_theta
    if model.moe:
        moe = args.moe_args
        assert (moe.num_experts, moe.top_k, moe.num_shared_experts, args.moe_inter_dim, moe.score_func) == (
            model.experts, model.top_k, model.shared_experts, model.expert_ffn, model.router_score)
        groups = (moe.num_expert_groups or 1, moe.num_limited_groups or 1)
        assert groups == (model.route_groups, model.route_group_limit)
        experts = [layer.moe.experts.w1.shape for layer in layers if getattr(layer, "moe", None) is not None]
        assert experts == [(model.experts, model.expert_ffn, model.hidden)] * model.moe_layers
    if model.mla:
        assert (args.q_lora_rank, args.kv_lora_rank, args.qk_nope_head_dim, args.qk_rope_head_dim, args.v_head_dim) \
            == (model.q_lora_rank, model.kv_lora_rank, model.qk_head_dim, model.qk_rope_head_dim, model.v_head_dim)
    params = sum(p.numel() for p in built.parameters())
    if "the nearest is" in text:  # torchtitan has no such model: the comment names what differs
        assert params != model.params
    else:
        assert params == model.params


@pytest.mark.parametrize("preset", list(SCALES))
def test_torchtitan_builds_the_priced_model(preset, tmp_path):
    _torchtitan()
    model, plans = _plans(preset, "fsdp")
    outcomes = [check_torchtitan(model, cluster, plan, preset, tmp_path) for cluster, plan in plans]
    # a preset re-typed at another sequence length (the lab then names no preset) keeps its flavor
    cluster, plan = plans[0]
    shorter = dataclasses.replace(model, seq_len=model.seq_len // 2)
    outcomes.append(check_torchtitan(shorter, cluster, plan, None, tmp_path))
    assert "built" in outcomes, outcomes
    print(f"torchtitan {preset}: {outcomes.count('built')} built, {outcomes.count('refused')} refused")


# ---- Megatron-LM ---------------------------------------------------------------------------

MEGATRON_LM = os.environ.get("MEGATRON_LM")


def _megatron():
    if not MEGATRON_LM:
        pytest.skip("MEGATRON_LM is not set to a Megatron-LM core_v0.19.0 source tree (make check-exports)")
    pytest.importorskip("torch", reason="Megatron-LM's parser needs torch (make check-exports)")
    if not hasattr(typing, "override"):  # Python 3.12's typing.override, used as a decorator only
        typing.override = lambda function: function
    if MEGATRON_LM not in sys.path:
        sys.path.insert(0, MEGATRON_LM)
    from megatron.training import arguments

    return arguments


# Compute capability of each GPU (NVIDIA's CUDA GPU list): what the stand-ins report.
ARCH = {"a100_40gb": 8, "a100_80gb": 8, "h100_sxm": 9, "h200": 9, "b200": 10}


def megatron_config(text, cluster, monkeypatch):
    """(args, TransformerConfig) of Megatron-LM's own parsing of an export, on the
    cluster's GPU as far as validate_args asks."""
    import torch

    arguments = _megatron()
    monkeypatch.setattr(arguments, "get_device_arch_version", lambda: ARCH[cluster.gpu])
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (ARCH[cluster.gpu], 0))
    gpus = cluster.gpus
    from megatron.training.argument_utils import core_transformer_config_from_args

    words = exports._split_args(text)
    launch = words.index("torchrun")
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)  # only what this export sets
    for assignment in words[:launch]:
        monkeypatch.setenv(*assignment.split("=", 1))
    monkeypatch.setenv("WORLD_SIZE", str(gpus))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(sys, "argv", ["pretrain_gpt.py"] + words[words.index("pretrain_gpt.py") + 1:]
                        + ["--no-rope-fusion"])
    with contextlib.redirect_stdout(io.StringIO()):
        args = arguments.parse_args(ignore_unknown_args=False)
        arguments.validate_args(args)
        config = core_transformer_config_from_args(args)
    return args, config


def compare_megatron(model, plan, args, config):
    assert (config.num_layers, config.hidden_size, config.num_attention_heads, config.ffn_hidden_size) == (
        model.layers, model.hidden, model.heads, model.ffn)
    assert config.normalization == {"layernorm": "LayerNorm", "rmsnorm": "RMSNorm"}[model.norm]
    assert args.position_embedding_type == ("rope" if model.rope_theta else "learned_absolute")
    if model.rope_theta:
        assert args.rotary_base == model.rope_theta
    assert config.add_bias_linear == model.bias
    assert config.gated_linear_unit == model.gated_mlp
    assert args.untie_embeddings_and_output_weights == (not model.tied_embeddings)
    assert (args.seq_length, args.vocab_size) == (model.seq_len, model.vocab)
    assert (config.hidden_dropout > 0, config.attention_dropout > 0) == (model.dropout, model.dropout)
    assert type(config).__name__ == ("MLATransformerConfig" if model.mla else "TransformerConfig")
    if model.mla:
        assert (config.q_lora_rank or 0, config.kv_lora_rank, config.qk_head_dim, config.qk_pos_emb_head_dim,
                config.v_head_dim) == (model.q_lora_rank, model.kv_lora_rank, model.qk_head_dim,
                                       model.qk_rope_head_dim, model.v_head_dim)
    else:
        assert config.num_query_groups == model.kv_heads
    assert (config.tensor_model_parallel_size, config.pipeline_model_parallel_size,
            config.context_parallel_size, args.data_parallel_size) == (plan.tp, plan.pp, plan.cp, plan.dp)
    if model.moe:
        assert (config.num_moe_experts, config.moe_router_topk, config.moe_ffn_hidden_size,
                config.moe_router_score_function, config.moe_grouped_gemm) == (
            model.experts, model.top_k, model.expert_ffn, model.router_score, True)
        assert config.moe_shared_expert_intermediate_size == (model.shared_experts * model.expert_ffn or None)
        assert (config.expert_model_parallel_size, config.expert_tensor_parallel_size) == (plan.ep, plan.tp)
        assert (config.moe_router_num_groups or 1, config.moe_router_group_topk or 1) == (
            model.route_groups, model.route_group_limit)
        if plan.ep > 1:
            assert (config.moe_token_dispatcher_type, config.moe_flex_dispatcher_backend) == (
                ("flex", "deepep") if plan.ep_dispatch == "deepep" else ("alltoall", "deepep"))
        layers = config.moe_layer_freq if isinstance(config.moe_layer_freq, list) else [1] * model.layers
        assert layers == [0] * model.dense_layers + [1] * model.moe_layers
    else:
        assert config.num_moe_experts is None


@pytest.mark.parametrize("preset", list(SCALES))
def test_megatron_builds_the_priced_model(preset, monkeypatch):
    _megatron()
    model, plans = _plans(preset, "megatron")
    for cluster, plan in plans:
        args, config = megatron_config(planner.megatron_args(model, cluster, plan), cluster, monkeypatch)
        compare_megatron(model, plan, args, config)
    print(f"Megatron-LM {preset}: {len(plans)} exports accepted")
