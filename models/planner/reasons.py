"""Why a plan wins, loses or does not fit: sentences with numbers."""
import math
from dataclasses import replace

from models import fmt, memory
from models.planner.cost import predict
from models.planner.validation import band
from models.planner.model import GRAD_BYTES, OPTIMIZER_BYTES, PARAM_BYTES, RUNTIME_RESERVE_BYTES, TIME_PARTS

# ---- reasons -----------------------------------------------------------------------------

PART_NAMES = {
    "compute": "compute", "recompute": "recomputation", "bubble": "pipeline bubble",
    "tp_comm": "exposed TP communication", "cp_comm": "exposed context-parallel ring traffic",
    "ep_comm": "expert All-to-All", "pp_comm": "pipeline sends", "dp_comm": "exposed DP/ZeRO communication",
    "optimizer": "optimizer step",
}
MEMORY_NAMES = {"params": "weights", "grads": "gradients", "optimizer": "optimizer state",
                "activations": "activations", "buffers": "ZeRO-3 gathered layers"}
SCHEDULE_NAMES = {"1f1b": "1F1B", "interleaved": "interleaved 1F1B", "zb-h1": "zero-bubble ZB-H1", "gpipe": "GPipe"}


def _span(values):
    low, high = min(values), max(values)
    return str(low) if low == high else f"{low}-{high}"


def _dropped(by_axis):
    """'tp=1: nothing fits (smallest 112 GB per GPU)' for every searched value of an axis
    none of whose plans fit."""
    lines = []
    for (axis, value), (footprint, fits) in sorted(by_axis.items()):
        if not fits:
            lines.append(f"{axis}={value}: nothing fits (smallest footprint {fmt.gigabytes(footprint)} per GPU)")
    return lines


def _ladder(model, cluster, plan, estimate, considered, fitting, by_axis):
    """The best plan's reasoning, in the order of the article's ladder, with its numbers."""
    spec = cluster.spec
    usable = cluster.usable_bytes
    states = model.params * (PARAM_BYTES + GRAD_BYTES + OPTIMIZER_BYTES)
    t = estimate.time_breakdown
    step = estimate.step_time_s
    lines = []
    ways = math.ceil(states / usable)
    lines.append(
        f"Model states: {fmt.si_count(model.params)} parameters \u00d7 18 bytes (bf16 weights, fp32 gradients and Adam) = "
        f"{fmt.gigabytes(states)} unsharded; one {spec.name} offers {fmt.gigabytes(usable)} usable "
        + ("\u2192 they fit on one GPU: data parallelism alone would do." if ways <= 1
           else f"\u2192 shard them at least {ways} ways."))

    def end(axis):  # "; tp=1, 2 did not fit." or "."
        refused = [str(value) for (a, value), (_, fits) in sorted(by_axis.items()) if a == axis and not fits]
        return f"; {axis}={', '.join(refused)} did not fit." if refused else "."

    if plan.tp > 1:
        hiding = ("Megatron-Core overlaps its collectives with the GEMMs they feed; what stays exposed: "
                  if plan.tp_comm_overlap else "its AllReduces cannot hide: ")
        lines.append(
            f"Tensor parallelism tp={plan.tp} inside a node ({cluster.intra_link.name}): every layer's weights and "
            f"inner activations / {plan.tp}; {hiding}{fmt.duration(t['tp_comm'])} per step "
            f"({fmt.percent(t['tp_comm'] / step)})" + end("tp"))
    else:
        lines.append("No tensor parallelism: every layer fits on one GPU, and tp would only add blocking AllReduces.")
    if plan.pp > 1:
        chunks = f", {plan.virtual_stages} chunks per rank" if plan.virtual_stages > 1 else ""
        lines.append(
            f"Pipeline pp={plan.pp}: {_span(estimate.stage_layers)} layers per rank; "
            f"{SCHEDULE_NAMES[plan.schedule]} over {estimate.microbatches} microbatches of {plan.microbatch}{chunks} "
            f"\u2192 bubble {fmt.duration(t['bubble'])} ({fmt.percent(estimate.bubble_fraction)} of the step)" + end("pp"))
    else:
        lines.append("No pipeline parallelism: no bubble, no point-to-point sends.")
    # ZeRO shards over every data and context rank (Megatron-Core's data-parallel group with
    # context parallelism is dp x cp); HSDP, inside groups of shard_group of them
    if plan.shard_group:
        over = f"inside groups of {plan.shard_group} of the {plan.dp * plan.cp} data-parallel ranks"
    elif plan.cp > 1:
        over = f"over the dp \u00d7 cp = {plan.dp} \u00d7 {plan.cp} = {plan.dp * plan.cp} data- and context-parallel ranks"
    else:
        over = f"over the {plan.dp} data-parallel ranks"
    lines.append(
        f"Data parallelism dp={plan.dp}: {plan.global_batch // plan.dp} sequences per replica; "
        f"{memory.STAGE_LABELS[plan.zero]} {over} leaves {fmt.gigabytes(estimate.model_state_bytes)} of model "
        f"states per GPU; " + (f"{fmt.duration(t['dp_comm'])} of its communication is not hidden by the backward pass."
                               if t["dp_comm"] > 0 else "its communication hides behind compute."))
    if plan.cp > 1:
        lines.append(
            f"Context parallelism cp={plan.cp}: each {model.seq_len}-token sequence is split {plan.cp} ways; "
            + (f"the K/V ring exposes {fmt.duration(t['cp_comm'])} per step." if t["cp_comm"] > 0
               else "the K/V ring hides behind the attention blocks."))
    if model.moe:
        lines.append(
            f"Expert parallelism ep={plan.ep}: {model.experts // plan.ep} of {model.experts} experts per rank; "
            f"the All-to-All costs {fmt.duration(t['ep_comm'])} per step ({fmt.percent(t['ep_comm'] / step)}).")
    activations = estimate.memory_breakdown["activations"]
    if plan.recompute == "none":
        lines.append(f"No recomputation: activations take {fmt.gigabytes(activations)} and fit.")
    else:
        lighter = predict(model, cluster, replace(plan, recompute="none"))
        lines.append(
            f"{RECOMPUTE_NAMES[plan.recompute]}: activations {fmt.gigabytes(activations)} instead of "
            f"{fmt.gigabytes(lighter.memory_breakdown['activations'])}"
            + (", which would not fit" if not lighter.fits else "")
            + f"; it costs {fmt.duration(t['recompute'])} per step.")
    lines.append(
        f"Searched {considered:,} plans ({fitting:,} fit): step {fmt.duration(step)}, MFU {fmt.percent(estimate.mfu)}, "
        f"{fmt.gigabytes(estimate.memory_bytes)} of {fmt.gigabytes(usable)} per GPU.")
    return tuple(lines)


# How a sentence names each recompute mode (model.RECOMPUTE_OPTIONS).
RECOMPUTE_NAMES = {"selective": "Selective recomputation", "full": "Full recomputation",
                   "op": "Per-op selective checkpointing (torchtitan)"}


def _variants(model, cluster, plan):
    """Plans one change away that need less memory: (what changes, plan)."""
    options = []
    if plan.recompute != "full":
        options.append(("full recomputation", replace(plan, recompute="full")))
    if plan.zero < 3 and plan.dp * plan.cp > 1:
        options.append(("ZeRO-3", replace(plan, zero=3)))
    if plan.microbatch > 1:
        options.append(("microbatch 1", replace(plan, microbatch=1)))
    if plan.dp % 2 == 0:
        options.append((f"pp={plan.pp * 2}", replace(plan, pp=plan.pp * 2, dp=plan.dp // 2,
                                                     microbatch=max(1, plan.microbatch))))
        if plan.tp * 2 <= cluster.gpus_per_node:
            options.append((f"tp={plan.tp * 2}", replace(plan, tp=plan.tp * 2, dp=plan.dp // 2)))
    result = []
    for label, variant in options:
        try:
            result.append((label, variant, predict(model, cluster, variant)))
        except ValueError:
            continue
    return result


def explain(model, cluster, plan, best=None, *, estimate=None):
    """Why ``plan`` does not fit, or how it compares with ``best`` (a (Plan, Estimate)
    pair, e.g. the recommended one): sentences with numbers."""
    estimate = estimate or predict(model, cluster, plan)
    usable = estimate.usable_bytes
    lines = []
    if not estimate.fits:
        parts = sorted(estimate.memory_breakdown.items(), key=lambda item: -item[1])
        lines.append(
            f"Does not fit: {fmt.gigabytes(estimate.memory_bytes)} per GPU on pipeline rank {estimate.worst_stage} against "
            f"{fmt.gigabytes(usable)} usable ("
            + ", ".join(f"{MEMORY_NAMES[k]} {fmt.gigabytes(v)}" for k, v in parts if v > 0) + ").")
        fixes = sorted(_variants(model, cluster, plan), key=lambda item: item[2].memory_bytes)
        if fixes:
            lines.append("Less memory: " + "; ".join(
                f"{label} \u2192 {fmt.gigabytes(e.memory_bytes)}" + (" (fits)" if e.fits else "") for label, _, e in fixes[:3])
                + ".")
    if best is not None:
        best_plan, best_estimate = best
        if best_plan == plan:
            lines.append("This is the recommended plan.")
        else:
            ratio = estimate.step_time_s / best_estimate.step_time_s - 1
            if abs(ratio) < 5e-4:
                lines.append(f"As fast as the recommended plan ({fmt.duration(estimate.step_time_s)} per step).")
            elif ratio > 0:
                diffs = sorted(((estimate.time_breakdown[k] - best_estimate.time_breakdown[k], k) for k in TIME_PARTS),
                               reverse=True)
                worse = [f"{PART_NAMES[k]} +{fmt.duration(d)}" for d, k in diffs[:3] if d > 1e-4 * best_estimate.step_time_s]
                reach = band(model, cluster, best_plan).reach
                lines.append(
                    f"{fmt.percent(ratio)} slower than the recommended plan ({fmt.duration(estimate.step_time_s)} against "
                    f"{fmt.duration(best_estimate.step_time_s)} per step)" + (": " + ", ".join(worse) if worse else "") + "."
                    + (f" That is within the \u00b1{fmt.two_significant(reach * 100)}% band published runs support: "
                       f"the two are tied." if ratio <= reach else ""))
            else:
                lines.append(
                    f"{fmt.percent(-ratio)} faster than the recommended plan ({fmt.duration(estimate.step_time_s)} against "
                    f"{fmt.duration(best_estimate.step_time_s)} per step)"
                    + (", but it does not fit." if not estimate.fits else ": the search does not try this layout."))
            delta = estimate.memory_bytes - best_estimate.memory_bytes
            lines.append(f"Memory {fmt.gigabytes(estimate.memory_bytes)} per GPU, {fmt.gigabytes(abs(delta))} "
                         f"{'more' if delta >= 0 else 'less'} than the recommended plan.")
    if not lines:
        lines.append(f"Fits: {fmt.gigabytes(estimate.memory_bytes)} of {fmt.gigabytes(usable)} per GPU; step "
                     f"{fmt.duration(estimate.step_time_s)}, MFU {fmt.percent(estimate.mfu)}.")
    return tuple(lines)


def _no_layout_message(model, cluster, global_batch, fixed, errors):
    if errors:
        return errors[0]
    pinned = ", ".join(f"{k}={v}" for k, v in fixed.items())
    return (f"global_batch={global_batch}: no layout of {cluster.gpus} GPUs divides it into data-parallel replicas"
            + (f" with {pinned}" if pinned else "") + ".")


def _nothing_fits_message(model, cluster, result):
    smallest = result.smallest
    e = smallest.estimate
    usable = e.usable_bytes
    states = e.model_state_bytes
    rest = e.memory_bytes - states
    message = (f"gpus={cluster.gpus}: nothing fits; the smallest footprint found is {fmt.gigabytes(e.memory_bytes)} per GPU "
               f"({smallest.plan.label()}) against {fmt.gigabytes(usable)} usable per {cluster.spec.name}")
    if rest >= usable:
        return message + (f": its activations and buffers alone take {fmt.gigabytes(rest)}; a shorter seq_len, a smaller "
                          "model or a GPU with more memory would make it fit.")
    needed = cluster.gpus * states / (usable - rest)
    nodes = math.ceil(needed / cluster.gpus_per_node)
    hbm_needed = e.memory_bytes + RUNTIME_RESERVE_BYTES + cluster.memory_margin_bytes
    return message + (f": about {nodes * cluster.gpus_per_node} GPUs (spreading its {fmt.gigabytes(states)} of model states "
                      f"per GPU thinner) or GPUs with at least {fmt.gigabytes(hbm_needed)} of memory would make it fit.")


