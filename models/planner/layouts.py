"""The search: price every layout of a model on a cluster and rank the ones that fit."""
import math
from dataclasses import fields, replace

from models._validate import choice, divides, positive_int
from models.planner.cost import _check, _context, _finish, _terms, predict
from models.planner.model import SCHEDULES, Candidate, Plan, Search
from models.planner.reasons import _dropped, _ladder, _no_layout_message, _nothing_fits_message, explain

# ---- the search --------------------------------------------------------------------------

PLAN_FIELDS = tuple(f.name for f in fields(Plan))
SEARCHED_FIELDS = ("tp", "pp", "cp", "ep", "microbatch", "virtual_stages", "zero", "recompute", "framework",
                   "tp_comm_overlap",
                   "sequence_parallel", "schedule", "flash_attention")
VIRTUAL_STAGES = (2, 3, 4, 6, 8)  # interleaving depths the search tries
# Context parallelism is searched only while each rank keeps >= 4096 tokens of a sequence:
# below that a ring step's attention block is too short to hide the next K/V block
# behind (NVIDIA's Megatron-Core guidance: context parallelism for long sequences).
MIN_CP_TOKENS = 4096
MAX_MICROBATCH = 16


def _powers_of_two(limit):
    value, result = 1, []
    while value <= limit:
        result.append(value)
        value *= 2
    return result


def _divisors(n, limit):
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def _check_fixed(fixed):
    fixed = dict(fixed or {})
    for key in fixed:
        if key not in SEARCHED_FIELDS:
            raise ValueError(f"fixed: {key!r} is not a plan field the search chooses; choose from "
                             f"{', '.join(SEARCHED_FIELDS)}")
    pinned = {k: v for k, v in fixed.items() if k not in ("schedule", "virtual_stages")}
    Plan(global_batch=pinned.get("microbatch", 1), **pinned)  # the pinned values' types and ranges
    if "schedule" in fixed:
        choice("schedule", fixed["schedule"], SCHEDULES)
    if "virtual_stages" in fixed:
        positive_int("virtual_stages", fixed["virtual_stages"])
    return fixed


def _check_pinned(model, cluster, fixed):
    """Pinned degrees that no layout of this model on this cluster can take: say why."""
    if "tp" in fixed:
        for name in ("heads", "kv_heads", "ffn") + (("expert_ffn",) if model.moe else ()):
            divides("tp", fixed["tp"], name, getattr(model, name))
    for axis in ("tp", "pp", "cp"):
        if axis in fixed:
            divides(axis, fixed[axis], "gpus", cluster.gpus)
    if fixed.get("cp", 1) > 1:
        divides("2*cp", 2 * fixed["cp"], "seq_len", model.seq_len)
    if fixed.get("pp", 1) > model.layers:
        raise ValueError(f"pp={fixed['pp']} must be <= layers={model.layers} (a pipeline rank needs a layer)")
    if fixed.get("ep", 1) > 1:
        if not model.moe:
            raise ValueError(f"ep={fixed['ep']} needs a mixture-of-experts model (experts > 1)")
        divides("ep", fixed["ep"], "experts", model.experts)


def _options(fixed, key, default):
    return [fixed[key]] if key in fixed else default


def search(model, cluster, global_batch, *, top=5, fixed=None):
    """Price every layout of ``model`` on ``cluster`` for ``global_batch`` sequences per
    step and keep the fastest that fit: a ``Search``. ``fixed`` pins plan fields (for
    example ``{"tp": 4}``); the rest are searched: tp (powers of two inside a node that
    divide the heads), cp (powers of two keeping >= 4096 tokens per rank), pp (divisors
    of the remaining GPUs, <= layers), dp (the rest), ep (divisors of the experts inside
    dp·cp), microbatch (powers of two up to 16, upward while the step gets faster, and no
    larger than leaves a pipeline as many microbatches as stages), virtual stages (1, or 2, 3, 4, 6, 8 interleaved,
    deeper while the step gets faster), ZeRO
    stage, recompute mode and sequence parallelism. Dominated choices are priced only
    when pinned: sequence parallelism off (the same traffic as plain TP, more memory),
    DDP (ZeRO-1 moves fewer bytes and holds less), selective recompute under
    FlashAttention (which already drops the score matrix)."""
    return run_steps(search_steps(model, cluster, global_batch, top=top, fixed=fixed))


def run_steps(steps):
    """Run a generator of steps (``search_steps``) to its end: what it returns."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def search_steps(model, cluster, global_batch, *, top=5, fixed=None, keep=True):
    """``search``, a layout at a time: a generator that yields (None) before each layout
    it looks at and returns the ``Search``, or raises ``ValueError`` as ``search`` does.
    The page's worker searches ahead this way, in slices between the reader's calls.
    ``keep=False``: price in a kept context if there is one, but keep none for this pair
    (a search ahead must not push out the pair the reader is at)."""
    ctx = _context(model, cluster, keep=keep)
    global_batch = positive_int("global_batch", global_batch)
    top = positive_int("top", top)
    fixed = _check_fixed(fixed)
    gpus, per_node = cluster.gpus, cluster.gpus_per_node
    s = model.seq_len
    flash = fixed.get("flash_attention", True)
    framework = fixed.get("framework", "megatron")
    # Megatron-Core overlaps TP communication on Hopper and Blackwell, as NVIDIA's recipes run
    # it (the checked runs that have it are all H100s); no other framework can.
    overlap_tp = fixed.get("tp_comm_overlap", framework == "megatron"
                           and cluster.spec.generation in ("hopper", "blackwell"))
    _check_pinned(model, cluster, fixed)
    widths = [model.heads, model.kv_heads, model.ffn, model.hidden] + ([model.expert_ffn] if model.moe else [])
    tps = _options(fixed, "tp", [t for t in _powers_of_two(min(per_node, gpus)) if all(w % t == 0 for w in widths)])
    cps = _options(fixed, "cp", [c for c in _powers_of_two(gpus) if c == 1 or (s % (2 * c) == 0 and s // c >= MIN_CP_TOKENS)])
    # Fastest first: torchtitan's per-op checkpointing (FSDP only) recomputes less than full.
    recomputes = _options(fixed, "recompute", (["none"] + (["selective"] if not flash else [])
                                               + (["op"] if framework == "fsdp" else []) + ["full"]))
    # A pinned degree, microbatch, chunk count, schedule or sequence parallelism may break a
    # rule the enumeration keeps by construction, so each layout is then checked (a third
    # of a pinned search's time); a pinned ZeRO stage, recompute mode or attention kernel
    # cannot.
    checked = bool(set(fixed) - {"zero", "recompute", "flash_attention", "framework", "tp_comm_overlap"})
    best = []  # per layout: (step, memory, plan fields) of its fastest fitting choice
    smallest = None  # (memory, plan fields)
    considered = fitting = 0
    by_axis = {}  # (axis, value) -> [smallest footprint among its plans, whether any fits]
    errors = []  # why pinned values were refused
    for tp in tps:
        for cp in cps:
            if gpus % (tp * cp):
                continue
            rest = gpus // (tp * cp)
            for pp in _options(fixed, "pp", _divisors(rest, model.layers)):
                if rest % pp:
                    continue
                dp = rest // pp
                if global_batch % dp:
                    continue
                eps = _options(fixed, "ep", [e for e in _divisors(model.experts, model.experts)
                                             if (dp * cp) % e == 0] if model.moe else [1])
                sps = _options(fixed, "sequence_parallel", [tp > 1])
                zeros = _options(fixed, "zero", [1, 2, 3] if dp * cp > 1 else [0])
                for ep in eps:
                    best_before = math.inf
                    for mb in _options(fixed, "microbatch", [b for b in _powers_of_two(MAX_MICROBATCH)
                                                             if (global_batch // dp) % b == 0]):
                        m = global_batch // (dp * mb)
                        if global_batch % (dp * mb):
                            continue
                        if pp > 1 and m < pp and "microbatch" not in fixed and mb > 1:
                            break  # fewer microbatches than stages: the pipeline idles most of the step
                        vs = [1] if pp == 1 else [1] + [v for v in VIRTUAL_STAGES if m % pp == 0
                                                        and model.layers >= pp * v - 2]
                        fit_at_mb = False
                        best_at_mb = math.inf
                        for v in _options(fixed, "virtual_stages", vs):
                            yield
                            schedule = fixed.get("schedule", "interleaved" if v > 1 else "1f1b")
                            if checked:
                                try:
                                    _check(model, cluster, Plan(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, microbatch=mb,
                                                                global_batch=global_batch, virtual_stages=v,
                                                                schedule=schedule, sequence_parallel=sps[0],
                                                                flash_attention=flash, framework=framework,
                                                                tp_comm_overlap=overlap_tp and tp > 1 and sps[0]))
                                except ValueError as error:
                                    errors.append(str(error))
                                    continue
                            elif tp > 1 and (s // cp) % tp:
                                continue
                            # Recompute modes from the fastest: once one fits at the lowest ZeRO stage
                            # nothing slower in this layout can win. ZeRO stages from the lowest: a
                            # higher one only moves more bytes, so the first that fits is the fastest.
                            layout_best = None
                            layout_smallest = math.inf
                            for sp in sps:
                                for recompute in recomputes:
                                    terms = _terms(ctx, tp, pp, dp, cp, ep, mb, v, recompute, sp, schedule, flash,
                                                   global_batch, framework, overlap_tp and tp > 1 and sp)
                                    first_fit = None
                                    for zero in zeros:
                                        considered += 1
                                        step, footprint = _finish(ctx, terms, zero)
                                        if footprint < layout_smallest:
                                            layout_smallest = footprint
                                            if smallest is None or footprint < smallest[0]:
                                                smallest = (footprint, (tp, pp, dp, cp, ep, mb, v, schedule, zero,
                                                                        recompute, sp))
                                        if step is None:
                                            continue
                                        fitting += 1
                                        first_fit = zero
                                        if layout_best is None or (step, footprint) < layout_best[:2]:
                                            layout_best = (step, footprint, (tp, pp, dp, cp, ep, mb, v, schedule,
                                                                             zero, recompute, sp))
                                        break
                                    if first_fit == zeros[0]:
                                        break
                            for axis_key in (("tp", tp), ("pp", pp), ("cp", cp), ("ep", ep)):
                                seen = by_axis.get(axis_key)
                                if seen is None:
                                    by_axis[axis_key] = [layout_smallest, layout_best is not None]
                                else:
                                    if layout_smallest < seen[0]:
                                        seen[0] = layout_smallest
                                    if layout_best is not None:
                                        seen[1] = True
                            if layout_best is not None:
                                fit_at_mb = True
                                best.append(layout_best)
                                if v > 1 and layout_best[0] > best_at_mb and "virtual_stages" not in fixed:
                                    break  # deeper interleaving now sends more than it saves
                                best_at_mb = min(best_at_mb, layout_best[0])
                        if "microbatch" not in fixed:
                            if not fit_at_mb:
                                break  # a larger microbatch only holds more
                            if best_at_mb > best_before:
                                break  # past the microbatch size that runs fastest
                            best_before = best_at_mb
    if smallest is None:
        raise ValueError(_no_layout_message(model, cluster, global_batch, fixed, errors))
    plans = [_plan(fields_, global_batch, flash, framework, overlap_tp) for fields_ in _distinct(best, top)]
    estimates = [predict(model, cluster, plan) for plan in plans]
    smallest_plan = _plan(smallest[1], global_batch, flash, framework, overlap_tp)
    smallest_estimate = predict(model, cluster, smallest_plan)
    dropped = _dropped(by_axis)
    ladder = _ladder(model, cluster, plans[0], estimates[0], considered, fitting, by_axis) if plans else ()
    candidates = []
    for index, (plan, estimate) in enumerate(zip(plans, estimates)):
        yield  # each explanation prices a few variants of its plan
        reasons = ladder if index == 0 else explain(model, cluster, plan, best=(plans[0], estimates[0]),
                                                    estimate=estimate)
        candidates.append(Candidate(plan, estimate, reasons))
    yield
    smallest_candidate = Candidate(smallest_plan, smallest_estimate,
                                   explain(model, cluster, smallest_plan, estimate=smallest_estimate))
    result = Search(tuple(candidates), smallest_candidate, considered, fitting, tuple(dropped), tuple(ladder))
    return result if candidates else replace(result, message=_nothing_fits_message(model, cluster, result))


def _distinct(best, top):
    """The ``top`` fastest layouts, leaving out one that runs within 0.1% of a kept one with
    the same tp, pp, chunks, ep, ZeRO stage and recompute mode (trading dp for cp or for
    microbatch size at the same tokens per rank changes nothing the model prices): the
    simpler one (lower cp, then smaller microbatch) stays."""
    ranked = sorted(best, key=lambda e: (e[0], e[2][3], e[2][5], e[1]))
    kept = []
    for entry in ranked:
        step, _, (tp, pp, dp, cp, ep, mb, v, schedule, zero, recompute, sp) = entry
        shape = (tp, pp, v, ep, zero, recompute)
        if any(shape == (k[2][0], k[2][1], k[2][6], k[2][4], k[2][8], k[2][9]) and step <= k[0] * 1.001 for k in kept):
            continue
        kept.append(entry)
        if len(kept) == top:
            break
    return [entry[2] for entry in kept]


def _plan(choice_fields, global_batch, flash, framework, overlap_tp):
    tp, pp, dp, cp, ep, mb, v, schedule, zero, recompute, sp = choice_fields
    return Plan(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, microbatch=mb, global_batch=global_batch, virtual_stages=v,
                zero=zero, recompute=recompute, sequence_parallel=sp, schedule=schedule, flash_attention=flash,
                framework=framework, tp_comm_overlap=overlap_tp and tp > 1 and sp)


def recommend(model, cluster, global_batch, top=5, *, fixed=None):
    """The ``top`` fastest plans that fit, best first: ``Candidate``s with their plan,
    estimate and reasons (the ladder for the best, the comparison with it for the
    rest). Nothing fits: ``ValueError`` naming the smallest footprint found and what
    would make it fit."""
    result = search(model, cluster, global_batch, top=top, fixed=fixed)
    if not result.candidates:
        raise ValueError(result.message)
    return result.candidates


