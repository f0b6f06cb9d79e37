"""``python -m models.planner predict|recommend ...``."""
import argparse
import os
import sys
from dataclasses import fields

from models import fmt, hardware
from models._validate import positive, positive_int
from models.planner.cost import predict, train_time_s
from models.planner.exports import megatron_args, torchtitan_toml
from models.planner.layouts import search
from models.planner.limits import check
from models.planner.model import (
    FRAMEWORKS, GRAD_REDUCE_BYTES, NORMS, RECOMPUTE_OPTIONS, ROUTER_SCORES, SCHEDULES, Candidate, Cluster, Plan,
    Transformer)
from models.planner.presets import CLUSTERS, MODELS, cluster_preset, model_preset
from models.planner.reasons import MEMORY_NAMES, PART_NAMES, SCHEDULE_NAMES, explain
from models.planner.validation import band, memory_verdict, ties

# ---- command line: python -m models.planner predict|recommend ... -----------------------

MODEL_OPTIONS = (("layers", int), ("hidden", int), ("heads", int), ("seq_len", int), ("vocab", int), ("ffn", int),
                 ("kv_heads", int), ("experts", int), ("top_k", int), ("shared_experts", int), ("expert_ffn", int),
                 ("dense_layers", int), ("q_lora_rank", int), ("kv_lora_rank", int), ("qk_head_dim", int),
                 ("qk_rope_head_dim", int), ("v_head_dim", int), ("rope_theta", float))
PLAN_OPTIONS = (("tp", int), ("pp", int), ("dp", int), ("cp", int), ("ep", int), ("microbatch", int),
                ("virtual_stages", int), ("zero", int))


# Every number a reader types, checked against models.planner.limits before any arithmetic.
NUMBER_OPTIONS = tuple(o for o, _ in MODEL_OPTIONS) + ("gpus", "gpus_per_node", "inter_gbps", "memory_margin_gb",
                                                        "global_batch") + tuple(o for o, _ in PLAN_OPTIONS) + (
    "shard_group", "tokens", "top")
USAGE = ("usage: python -m models.planner {predict,recommend} (--model PRESET | --layers N --hidden N --heads N "
         "--seq-len N --vocab N) --gpus N --global-batch N [options]; --help lists them")


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error and a short usage hint instead of the whole block."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n{USAGE}\n")


def _parser():
    parser = _Parser(
        prog="python -m models.planner",
        description="Predict a parallel layout's step time and memory, or recommend the fastest layouts that fit.")
    commands = parser.add_subparsers(dest="command", required=True)
    for name, summary in (("predict", "price one plan"), ("recommend", "search every plan, best first")):
        sub = commands.add_parser(name, help=summary, description=summary)
        model = sub.add_argument_group("model (a preset, or every field; a field after --model overrides it)")
        model.add_argument("--model", choices=tuple(MODELS), help="preset")
        for option, kind in MODEL_OPTIONS:
            model.add_argument("--" + option.replace("_", "-"), type=kind, default=None)
        model.add_argument("--gated-mlp", action=argparse.BooleanOptionalAction, default=None, help="SwiGLU MLP")
        model.add_argument("--tied-embeddings", action=argparse.BooleanOptionalAction, default=None)
        model.add_argument("--norm", choices=NORMS, help="layer normalisation")
        model.add_argument("--bias", action=argparse.BooleanOptionalAction, default=None,
                           help="biases on the linear layers")
        model.add_argument("--router-score", choices=ROUTER_SCORES, help="how the MoE router scores experts")
        cluster = sub.add_argument_group("cluster")
        cluster.add_argument("--cluster", choices=tuple(CLUSTERS), help="node preset")
        cluster.add_argument("--gpu", choices=tuple(hardware.GPUS))
        cluster.add_argument("--gpus", type=int, required=True)
        cluster.add_argument("--gpus-per-node", type=int)
        cluster.add_argument("--intra", choices=tuple(hardware.LINKS), help="link inside a node")
        cluster.add_argument("--inter", choices=tuple(hardware.LINKS), help="network link (one per GPU)")
        cluster.add_argument("--inter-gbps", type=float, help="network bandwidth per GPU, Gb/s one direction")
        cluster.add_argument("--memory-margin-gb", type=float,
                             help="GB each GPU keeps free beyond the runtime's reserve (default 4)")
        plan = sub.add_argument_group("plan" + (" (each one given is fixed; the rest are searched)"
                                                if name == "recommend" else ""))
        plan.add_argument("--global-batch", type=int, required=True, help="sequences per step")
        for option, kind in PLAN_OPTIONS:
            if name == "recommend" and option == "dp":
                continue
            plan.add_argument("--" + option.replace("_", "-"), type=kind, default=None)
        plan.add_argument("--recompute", choices=RECOMPUTE_OPTIONS)
        plan.add_argument("--framework", choices=FRAMEWORKS, help="what runs the plan (default megatron)")
        plan.add_argument("--schedule", choices=SCHEDULES)
        plan.add_argument("--sequence-parallel", action=argparse.BooleanOptionalAction, default=None)
        plan.add_argument("--flash-attention", action=argparse.BooleanOptionalAction, default=None)
        if name == "predict":  # the search does not choose these: FSDP over all dp x cp ranks, fp32 gradients
            plan.add_argument("--shard-group", type=int, help="HSDP: shard inside groups of this many data ranks")
            plan.add_argument("--grad-reduce", choices=tuple(GRAD_REDUCE_BYTES), help="gradient dtype on the wire")
        out = sub.add_argument_group("output")
        out.add_argument("--tokens", type=float, help="tokens to train on: adds the days it takes")
        out.add_argument("--json", action="store_true", help="machine-readable output")
        out.add_argument("--export", choices=("megatron", "torchtitan"), help="print the plan as a launch config")
        if name == "recommend":
            out.add_argument("--top", type=int, default=5)
    return parser


def _model_from(args):
    fields_given = {option: getattr(args, option) for option, _ in MODEL_OPTIONS if getattr(args, option) is not None}
    for flag in ("gated_mlp", "tied_embeddings", "norm", "bias", "router_score"):
        if getattr(args, flag) is not None:
            fields_given[flag] = getattr(args, flag)
    if args.model:
        return model_preset(args.model, **fields_given)
    missing = [o for o in ("layers", "hidden", "heads", "seq_len", "vocab") if o not in fields_given]
    if missing:
        raise ValueError("model: give --model PRESET, or --" + ", --".join(m.replace("_", "-") for m in missing))
    return Transformer(**fields_given)


def _cluster_from(args):
    changes = {}
    for option in ("gpu", "gpus_per_node", "intra", "inter"):
        if getattr(args, option) is not None:
            changes[option] = getattr(args, option)
    if args.inter_gbps is not None:
        changes["inter_bytes_per_s"] = positive("inter_gbps", args.inter_gbps) * 1e9 / 8
    if args.memory_margin_gb is not None:
        changes["memory_margin_bytes"] = args.memory_margin_gb * 1e9
    if args.cluster:
        return cluster_preset(args.cluster, args.gpus, **changes)
    return Cluster(gpus=args.gpus, **changes)


def _plan_fields(args):
    given = {}
    for option, _ in PLAN_OPTIONS + (("recompute", str), ("schedule", str), ("sequence_parallel", bool),
                                     ("flash_attention", bool), ("framework", str), ("shard_group", int),
                                     ("grad_reduce", str)):
        value = getattr(args, option, None)
        if value is not None:
            given[option] = value
    return given


def _estimate_json(estimate):
    from dataclasses import asdict

    return asdict(estimate)


def _describe(model_name, model, cluster, plan, estimate, tokens):
    t = estimate.time_breakdown
    b = estimate.memory_breakdown
    sure = band(model, cluster, plan)
    low, high = sure.throughput(estimate.mfu)
    short, long_ = sure.duration(estimate.step_time_s)
    verdict = memory_verdict(estimate.memory_bytes, estimate.usable_bytes)
    lines = [
        f"{model_name} ({fmt.si_count(model.params)} parameters) on {cluster.gpus:,} x {cluster.spec.name}, global batch "
        f"{plan.global_batch} x {model.seq_len} tokens, run by {plan.framework}",
        f"plan       {plan.label()}" + (f" ({SCHEDULE_NAMES[plan.schedule]})" if plan.pp > 1 else ""),
        f"step time  {fmt.duration(estimate.step_time_s)} (likely {fmt.duration(short)} to {fmt.duration(long_)}): "
        + ", ".join(f"{PART_NAMES[k]} {fmt.duration(v)}" for k, v in t.items() if v > 0),
        f"speed      {estimate.tokens_per_s:,.0f} tokens/s; MFU {fmt.percent(estimate.mfu)} (likely {fmt.percent(low)} to "
        f"{fmt.percent(high)}), HFU {fmt.percent(estimate.hfu)}; {estimate.model_tflops_per_gpu:.0f} model TFLOP/s per GPU",
        f"memory     {fmt.gigabytes(estimate.memory_bytes)} of {fmt.gigabytes(estimate.usable_bytes)} usable per GPU, "
        f"{fmt.gigabytes(cluster.memory_margin_bytes)} margin kept ({verdict}): " + ", ".join(
            f"{MEMORY_NAMES[k]} {fmt.gigabytes(v)}" for k, v in b.items() if v > 0),
        f"how sure   the ranges come from {sure.basis}",
    ]
    if tokens:
        lines.append(f"training   {fmt.si_count(tokens)} tokens in {train_time_s(estimate, tokens) / 86400:.1f} days")
    return lines


def _check_numbers(args):
    """Every number given, inside the bounds a real run can have (models.planner.limits)."""
    for option in NUMBER_OPTIONS:
        value = getattr(args, option, None)
        if value is not None:
            check(option, value)


def _print(text):
    """Print; when the reader's pipe closed early (``... | head``) end quietly: stdout is
    pointed at /dev/null so Python's flush at exit raises nothing either."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def main(argv=None):
    """The command line. Exit code 0, or 2 with a one-line message on bad input or a plan
    the chosen export cannot launch."""
    import json

    parser = _parser()
    args = parser.parse_args(argv)
    try:
        _check_numbers(args)
        model = _model_from(args)
        cluster = _cluster_from(args)
        given = _plan_fields(args)
        name = MODELS[args.model].label if args.model else "custom model"
        if args.command == "predict":
            given.setdefault("dp", cluster.gpus // (given.get("tp", 1) * given.get("pp", 1) * given.get("cp", 1)) or 1)
            if given.get("virtual_stages", 1) > 1:
                given.setdefault("schedule", "interleaved")
            plan = Plan(global_batch=args.global_batch, **given)
            estimate = predict(model, cluster, plan)
            chosen = [Candidate(plan, estimate, explain(model, cluster, plan, estimate=estimate))]
            result = None
        else:
            result = search(model, cluster, args.global_batch, top=positive_int("top", args.top), fixed=given)
            if not result.candidates:
                raise ValueError(result.message)
            chosen = list(result.candidates)
        best = chosen[0]
        if args.export:
            text = (megatron_args(model, cluster, best.plan) if args.export == "megatron"
                    else torchtitan_toml(model, cluster, best.plan, args.model))
            _print(text.rstrip("\n"))
            return 0
        if args.json:
            payload = {
                "model": {f.name: getattr(model, f.name) for f in fields(Transformer)},
                "cluster": {f.name: getattr(cluster, f.name) for f in fields(Cluster)},
                "candidates": [{"plan": {f.name: getattr(c.plan, f.name) for f in fields(Plan)},
                                "estimate": _estimate_json(c.estimate), "reasons": list(c.reasons),
                                **({"train_time_s": train_time_s(c.estimate, args.tokens)} if args.tokens else {})}
                               for c in chosen],
            }
            if result is not None:
                payload.update(considered=result.considered, fitting=result.fitting, dropped=list(result.dropped))
            _print(json.dumps(payload, indent=2))
            return 0
        lines = _describe(name, model, cluster, best.plan, best.estimate, args.tokens)
    except (ValueError, ArithmeticError) as error:
        print(f"{parser.prog} {args.command}: error: {error}", file=sys.stderr)
        return 2
    lines += ["", "why:"] + [f"  - {reason}" for reason in best.reasons]
    if result is not None and len(chosen) > 1:
        tied = ties([c.estimate.step_time_s for c in chosen], band(model, cluster, best.plan))
        lines += ["", "alternatives:" + (f" the first {tied - 1} tied with the plan above (within the \u00b1"
                                          f"{band(model, cluster, best.plan).reach:.0%} band: not ranked)" if tied > 1 else "")]
        for c in chosen[1:]:
            lines.append(f"  {c.plan.label():48s} {fmt.duration(c.estimate.step_time_s):>8s}  MFU "
                         f"{fmt.percent(c.estimate.mfu):>6s}  {fmt.gigabytes(c.estimate.memory_bytes):>8s}")
    _print("\n".join(lines))
    return 0
