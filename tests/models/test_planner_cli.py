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


# ---- hostile input (issue 42.5): every number checked against models.planner.limits before any
# arithmetic, one line and exit 2, never a traceback --------------------------------------------

SMALL = ("--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "8", "--global-batch", "32")
MIXTRAL = ("--model", "mixtral-8x7b", "--cluster", "dgx-h100", "--gpus", "64", "--global-batch", "256")
HSDP = ("--model", "llama3-8b", "--cluster", "dgx-h100", "--gpus", "32", "--global-batch", "32", "--framework", "fsdp",
        "--zero", "3")
HOSTILE = [
    # zero and negative degrees, with and without an export
    (("predict", *SMALL, "--tp", "0"), "tp=0: at least 1"),
    (("predict", *SMALL, "--pp", "0"), "pp=0: at least 1"),
    (("predict", *SMALL, "--cp", "0"), "cp=0: at least 1"),
    (("predict", *SMALL, "--tp", "0", "--export", "megatron"), "tp=0: at least"),
    (("predict", *SMALL, "--pp", "0", "--export", "torchtitan"), "pp=0: at least"),
    (("predict", *SMALL, "--cp", "0", "--export", "megatron"), "cp=0: at least"),
    (("recommend", *SMALL, "--tp", "0"), "tp=0: at least"),
    (("predict", *SMALL, "--tp", "-8"), "tp=-8: at least"),
    (("predict", *SMALL, "--dp", "0"), "dp=0: at least"),
    (("predict", *SMALL, "--ep", "0"), "ep=0: at least"),
    (("predict", *SMALL, "--microbatch", "0"), "microbatch=0: at least"),
    (("predict", *SMALL, "--virtual-stages", "0"), "virtual_stages=0: at least"),
    (("predict", *SMALL, "--zero", "4"), "zero=4: at most 3"),
    (("predict", *SMALL, "--zero", "-1"), "zero=-1: at least"),
    (("predict", *SMALL, "--shard-group", "-2"), "shard_group=-2: at least"),
    (("recommend", *SMALL, "--top", "0"), "top=0: at least 1"),
    # sizes no machine has
    (("predict", *SMALL, "--seq-len", "1000000000000"), "seq_len=1000000000000: at most 1,048,576 tokens"),
    (("predict", *SMALL, "--seq-len", "0"), "seq_len=0: at least"),
    (("predict", *SMALL, "--layers", "0"), "layers=0: at least 1"),
    (("predict", *SMALL, "--layers", "100000"), "layers=100000: at most"),
    (("predict", *SMALL, "--hidden", "10000000"), "hidden=10000000: at most"),
    (("predict", *SMALL, "--heads", "0"), "heads=0: at least"),
    (("predict", *SMALL, "--vocab", "0"), "vocab=0: at least"),
    (("predict", *SMALL, "--ffn", "-1"), "ffn=-1: at least"),
    (("predict", *SMALL, "--kv-heads", "0"), "kv_heads=0: at least"),
    (("predict", *SMALL, "--experts", "100000"), "experts=100000: at most"),
    (("predict", *SMALL, "--rope-theta", "-1"), "rope_theta=-1.0: at least"),
    (("predict", *SMALL, "--rope-theta", "nan"), "rope_theta must be a number"),
    (("predict", "--model", "llama3-8b", "--gpus", "0", "--global-batch", "32"), "gpus=0: at least 1"),
    (("predict", "--model", "llama3-8b", "--gpus", "99999999", "--global-batch", "32"), "gpus=99999999: at most"),
    (("predict", *SMALL, "--gpus-per-node", "0"), "gpus_per_node=0: at least 1"),
    (("predict", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "0"), "global_batch=0: at least"),
    (("predict", "--model", "llama3-8b", "--gpus", "8", "--global-batch", "10000000000"), "global_batch=10000000000"),
    # networks, margins and token counts outside physics
    (("predict", *SMALL, "--inter-gbps", "1e-300"), "inter_gbps=1e-300: at least 1 Gb/s"),
    (("predict", *SMALL, "--inter-gbps", "0"), "inter_gbps=0.0: at least"),
    (("predict", *SMALL, "--inter-gbps", "-400"), "inter_gbps=-400.0: at least"),
    (("predict", *SMALL, "--inter-gbps", "inf"), "inter_gbps=inf: at most"),
    (("predict", *SMALL, "--inter-gbps", "nan"), "inter_gbps must be a number"),
    (("predict", *SMALL, "--inter-gbps", "1e308"), "inter_gbps=1e+308: at most"),
    (("predict", *SMALL, "--memory-margin-gb", "-1"), "memory_margin_gb=-1.0: at least 0 GB"),
    (("predict", *SMALL, "--memory-margin-gb", "1e9"), "memory_margin_gb=1000000000.0: at most"),
    (("predict", *SMALL, "--tokens", "1e30"), "tokens=1e+30: at most 1,000T tokens"),
    (("predict", *SMALL, "--tokens=-inf"), "tokens=-inf: at least"),
    # plans an export cannot launch: one line, not the traceback of issue 41
    (("predict", *HSDP, "--export", "megatron", "--shard-group", "8"), "the planner exports HSDP for torchtitan only"),
    (("predict", *HSDP, "--export", "torchtitan", "--cp", "4", "--shard-group", "2"),
     "shard_group=2 is not a multiple of cp=4"),
    (("predict", *MIXTRAL, "--pp", "2", "--export", "torchtitan"), "torchtitan v0.2.2 cannot run this plan"),
    (("predict", *SMALL, "--framework", "fsdp", "--recompute", "op", "--export", "megatron"),
     "Megatron-LM does not have"),
]
# Unreadable values: argparse's one-line reason and the short usage hint, not its whole block.
UNREADABLE = [
    (("predict", *SMALL, "--tp", "x"), "argument --tp: invalid int value: 'x'"),
    (("predict", *SMALL, "--tp", "1.5"), "argument --tp: invalid int value: '1.5'"),
    (("predict", *SMALL, "--inter-gbps", "fast"), "argument --inter-gbps: invalid float value: 'fast'"),
    (("predict", *SMALL, "--recompute", "some"), "argument --recompute: invalid choice: 'some'"),
    (("predict", *SMALL, "--export", "deepspeed"), "argument --export: invalid choice: 'deepspeed'"),
    (("predict", "--model", "llama3-8b"), "the following arguments are required: --gpus, --global-batch"),
    (("predict", *SMALL, "--gpus"), "argument --gpus: expected one argument"),
    (("predict", *SMALL, "--no-such-flag"), "unrecognized arguments: --no-such-flag"),
    (("forecast", *SMALL), "argument command: invalid choice: 'forecast'"),
]


@pytest.mark.parametrize("args,message", HOSTILE,
                         ids=lambda x: " ".join(x[len(SMALL):]) if isinstance(x, tuple) else "")
def test_hostile_input_exits_2_with_one_line(args, message):
    done = run(*args)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr.count("\n") == 1 and message in done.stderr and " error: " in done.stderr, done.stderr


@pytest.mark.parametrize("args,message", UNREADABLE, ids=lambda x: " ".join(x[-2:]) if isinstance(x, tuple) else "")
def test_unreadable_input_exits_2_with_one_line_and_a_short_usage(args, message):
    done = run(*args)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    error, usage = done.stderr.splitlines()
    assert message in error and usage.startswith("usage: python -m models.planner {predict,recommend}"), done.stderr
    assert "--help" in usage


def test_the_table_is_long_enough_and_every_bound_lives_in_one_place():
    from models.planner import cli, limits

    assert len(HOSTILE) + len(UNREADABLE) >= 40
    assert set(cli.NUMBER_OPTIONS) <= set(limits.LIMITS)


def test_a_closed_pipe_ends_quietly():
    """``... | head -1``: the reader stops reading; no BrokenPipeError traceback."""
    process = subprocess.Popen([sys.executable, "-m", "models.planner", "recommend", *GPT3_ARGS, "--top", "50",
                                "--json"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.readline()
    process.stdout.close()
    stderr = process.stderr.read().decode()
    process.wait(timeout=120)
    assert "Traceback" not in stderr and "BrokenPipe" not in stderr, stderr


def test_the_block_a_launch_line_builds_is_an_option():
    done = run("predict", "--layers", "24", "--hidden", "2048", "--heads", "16", "--seq-len", "4096", "--vocab", "50000",
               "--gated-mlp", "--no-tied-embeddings", "--norm", "rmsnorm", "--rope-theta", "500000", "--no-bias",
               "--gpu", "h100_sxm", "--gpus", "8", "--global-batch", "64", "--export", "megatron")
    assert done.returncode == 0, done.stderr
    model, _, _ = planner.parse_megatron_args(done.stdout)
    assert (model.norm, model.rope_theta, model.bias) == ("rmsnorm", 500000, False)
    assert "--normalization RMSNorm" in done.stdout and "--rotary-base 500000" in done.stdout
