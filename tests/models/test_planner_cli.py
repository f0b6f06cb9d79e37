"""``python -m models.planner predict|recommend``, run as a reader runs it (subprocess)."""
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from models import planner

ROOT = Path(__file__).resolve().parents[2]


def run(*args):
    return subprocess.run([sys.executable, "-m", "models.planner", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)


GPT3_ARGS = ("--model", "gpt3-175b", "--cluster", "dgx-a100-80gb", "--gpus", "1024", "--global-batch", "1536")


def test_predict_prints_a_readable_estimate():
    done = run("predict", *GPT3_ARGS, "--tp", "8", "--pp", "8", "--recompute", "full", "--tokens", "300e9")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    plan = planner.Plan(tp=8, pp=8, dp=16, global_batch=1536, recompute="full")
    estimate = planner.predict(planner.model_preset("gpt3-175b"), planner.cluster_preset("dgx-a100-80gb", 1024), plan)
    assert "plan       tp8 pp8 dp16 mb1 DDP full recompute (1F1B)" in out
    assert f"MFU {estimate.mfu * 100:.1f}%" in out
    assert "300B tokens in" in out and "days" in out


def test_predict_json_carries_the_estimate():
    done = run("predict", *GPT3_ARGS, "--tp", "8", "--pp", "8", "--zero", "1", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    [candidate] = payload["candidates"]
    plan = planner.Plan(**candidate["plan"])
    estimate = planner.predict(planner.Transformer(**payload["model"]), planner.Cluster(**payload["cluster"]), plan)
    assert candidate["estimate"]["step_time_s"] == estimate.step_time_s
    assert candidate["estimate"]["memory_breakdown"] == estimate.memory_breakdown
    assert candidate["reasons"]


def test_recommend_json_lists_the_top_plans_best_first():
    done = run("recommend", *GPT3_ARGS, "--top", "3", "--json")
    assert done.returncode == 0, done.stderr
    payload = json.loads(done.stdout)
    steps = [c["estimate"]["step_time_s"] for c in payload["candidates"]]
    assert len(steps) == 3 and steps == sorted(steps)
    best = planner.recommend(planner.model_preset("gpt3-175b"), planner.cluster_preset("dgx-a100-80gb", 1024), 1536)[0]
    assert payload["candidates"][0]["plan"] == {f: getattr(best.plan, f) for f in planner.PLAN_FIELDS}
    assert payload["considered"] >= payload["fitting"] > 0


def test_recommend_fixes_the_plan_fields_it_is_given_and_explains():
    done = run("recommend", *GPT3_ARGS, "--tp", "8", "--recompute", "full", "--top", "2")
    assert done.returncode == 0, done.stderr
    assert "plan       tp8 " in done.stdout and "full recompute" in done.stdout
    assert "why:" in done.stdout and "Model states: 174.6B parameters" in done.stdout
    assert "alternatives:" in done.stdout


def test_every_model_field_is_an_option():
    done = run("predict", "--layers", "24", "--hidden", "2048", "--heads", "16", "--seq-len", "4096", "--vocab", "50000",
               "--kv-heads", "4", "--ffn", "5632", "--gated-mlp", "--no-tied-embeddings", "--gpu", "h100_sxm",
               "--gpus", "8", "--global-batch", "64", "--zero", "3", "--json")
    assert done.returncode == 0, done.stderr
    model = json.loads(done.stdout)["model"]
    assert (model["kv_heads"], model["ffn"], model["gated_mlp"], model["tied_embeddings"]) == (4, 5632, True, False)


def test_exports_print_launch_configs():
    megatron = run("recommend", *GPT3_ARGS, "--export", "megatron")
    assert megatron.returncode == 0, megatron.stderr
    model, gpus, plan = planner.parse_megatron_args(megatron.stdout)
    assert gpus == 1024 and model == planner.model_preset("gpt3-175b")
    titan = run("recommend", "--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "32",
                "--export", "torchtitan")
    assert titan.returncode == 0, titan.stderr
    assert tomllib.loads(titan.stdout)["model"] == {"name": "llama3", "flavor": "8B"}


@pytest.mark.parametrize("args,message", [
    (("predict", "--model", "gpt3-175b", "--gpus", "12", "--global-batch", "8"), "gpus=12 must be a multiple"),
    (("predict", "--model", "gpt3-175b", "--gpus", "8", "--global-batch", "8", "--tp", "3", "--dp", "1"),
     "gpus=8 must equal"),
    (("predict", "--model", "gpt3-175b", "--gpus", "8", "--global-batch", "8", "--tp", "8", "--schedule", "interleaved"),
     "virtual_stages=1"),
    (("predict", "--layers", "4", "--gpus", "8", "--global-batch", "8"), "model: give --model PRESET"),
    (("predict", "--layers", "4", "--hidden", "100", "--heads", "3", "--seq-len", "8", "--vocab", "8", "--gpus", "8",
      "--global-batch", "8"), "heads=3 does not divide hidden=100"),
    (("recommend", "--model", "llama3-405b", "--gpus", "8", "--global-batch", "16"), "nothing fits"),
    (("predict", "--model", "gpt3-175b", "--gpus", "8", "--global-batch", "8", "--tokens", "-1"), "tokens"),
])
def test_bad_input_exits_2_with_a_clear_message(args, message):
    done = run(*args)
    assert done.returncode == 2
    assert message in done.stderr and "error:" in done.stderr
    assert "Traceback" not in done.stderr


def test_unreadable_options_exit_2_through_argparse():
    done = run("predict", "--model", "gpt3-175b", "--gpus", "eight", "--global-batch", "8")
    assert done.returncode == 2 and "invalid int value" in done.stderr
    done = run("predict", "--model", "gpt-5", "--gpus", "8", "--global-batch", "8")
    assert done.returncode == 2 and "invalid choice" in done.stderr


def test_framework_and_margin_are_options_and_the_output_says_how_sure_it_is():
    args = ("--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "32", "--zero", "3")
    done = run("predict", *args, "--framework", "fsdp", "--memory-margin-gb", "8")
    assert done.returncode == 0, done.stderr
    model, plan = planner.model_preset("llama3-8b"), planner.Plan(dp=8, global_batch=32, zero=3, framework="fsdp")
    cluster = planner.cluster_preset("dgx-h100", 8, memory_margin_bytes=8e9)
    estimate, band = planner.predict(model, cluster, plan), planner.band(model, cluster, plan)
    low, high = band.throughput(estimate.mfu)
    assert "run by fsdp" in done.stdout and "8.00 GB margin kept" in done.stdout
    assert f"MFU {estimate.mfu * 100:.1f}% (likely {low * 100:.1f}% to {high * 100:.1f}%)" in done.stdout
    assert "H100 · PyTorch FSDP runs the planner was not fitted to" in done.stdout
    megatron = run("predict", *args)
    assert "run by megatron" in megatron.stdout and megatron.stdout != done.stdout
    assert run("predict", *args, "--framework", "jax").returncode == 2


def test_predict_prices_hsdp_and_bf16_gradients_that_recommend_does_not_search():
    args = ("--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "96", "--global-batch", "192",
            "--microbatch", "2", "--zero", "3", "--framework", "fsdp", "--recompute", "full")
    done = run("predict", *args, "--shard-group", "8", "--grad-reduce", "bf16", "--export", "torchtitan")
    assert done.returncode == 0, done.stderr
    assert "ZeRO-3 HSDP 8x12 bf16 grads full recompute" in done.stdout
    assert "data_parallel_replicate_degree = 12" in done.stdout
    refused = run("predict", *args, "--shard-group", "5")
    assert refused.returncode == 2 and "shard_group=5 does not divide dp x cp=96" in refused.stderr
    assert run("recommend", *args[:8], "--shard-group", "8").returncode == 2  # not an option of the search
