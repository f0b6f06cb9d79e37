"""Figure 21: the planner lab — search every layout, explain the best, price any other."""
import re
import textwrap
from collections import OrderedDict
from functools import lru_cache

from figures import html, svg
from figures.contract import Number, Readout, Select, View
from models import fmt, hardware, planner
from models.planner import validation
from models.planner.limits import LIMITS

NUMBER = 21
TITLE = "The planner lab"
CAPTION = (
    "Pick a model and a cluster: the planner prices every layout that fits and shows the fastest, with its "
    "reasoning, the memory one GPU holds and where a step's time goes. Pin any degree of the plan to see what it "
    "costs."
)
NOTE = (
    "Any field of a preset can be overridden: an empty field, or 'preset', keeps the preset's value (shown greyed "
    "in the field), and a number no real run could have (0 layers, a network under 1 Gb/s) is refused beside its "
    "field; counts may be typed as 15T, 300B or 16,384. A pinned degree is priced against the planner's own pick, with the reason it loses. Under "
    "the plan, copy it as Megatron-LM arguments or a torchtitan config; at the bottom, the planner is checked "
    "against published runs."
)
TRIES = (
    ("Llama 3 405B on 16,384 H100s", {"model": "llama3-405b", "cluster": "dgx-h100", "gpus": 16384, "batch": 2048}),
    ("Full recomputation", {"recompute": "full"}),
    ("Pin tp = 8", {"tp": 8}),
    ("Pin tp = 1", {"tp": 1}),
)

AUTO, PRESET = "auto", "preset"
# (control key, Transformer field): each typed field's range is the planner's (limits.LIMITS,
# shared with the command line); empty (0 in the state) keeps the preset's value
MODEL_FIELDS = (("layers", "layers"), ("hidden", "hidden"), ("heads", "heads"), ("kv_heads", "kv_heads"),
                ("ffn", "ffn"), ("vocab", "vocab"), ("seq", "seq_len"), ("experts", "experts"),
                ("expert_ffn", "expert_ffn"))
MODEL_LABELS = {"layers": "Layers", "hidden": "Hidden size", "heads": "Attention heads", "kv_heads": "KV heads",
                "ffn": "FFN size", "vocab": "Vocabulary", "seq": "Sequence length", "experts": "Experts",
                "expert_ffn": "Expert FFN size"}
MODEL_CHOICES = (("gated", "gated_mlp", ((PRESET, "preset"), ("on", "SwiGLU"), ("off", "GeLU"))),
                 ("top_k", "top_k", ((PRESET, "preset"),) + tuple((k, str(k)) for k in (1, 2, 4, 6, 8))),
                 ("shared", "shared_experts", ((PRESET, "preset"),) + tuple((k, str(k)) for k in (0, 1, 2, 4))))
PLAN_CHOICES = (("tp", (1, 2, 4, 8, 16)), ("pp", (1, 2, 4, 8, 16, 32, 64, 128)), ("cp", (1, 2, 4, 8, 16, 32)),
                ("ep", (1, 2, 4, 8, 16, 32, 64, 128, 256)), ("microbatch", (1, 2, 4, 8, 16)),
                ("virtual_stages", (1, 2, 3, 4, 6, 8)), ("zero", (0, 1, 2, 3)),
                ("recompute", planner.RECOMPUTE_OPTIONS), ("sequence_parallel", ("on", "off")),
                ("schedule", planner.SCHEDULES))
PLAN_LABELS = {"tp": "Tensor parallel tp", "pp": "Pipeline stages pp", "cp": "Context parallel cp",
               "ep": "Expert parallel ep", "microbatch": "Microbatch", "virtual_stages": "Chunks per rank v",
               "zero": "ZeRO stage", "recompute": "Recompute", "sequence_parallel": "Sequence parallelism",
               "schedule": "Schedule"}
LINKS = tuple((key, link.name) for key, link in hardware.LINKS.items())
FRAMEWORKS = validation.FRAMEWORK_NAMES


def _typed(key, label, limit, default, blank=None, **options):
    """A typed field over the planner's range for that input (``limits.LIMITS``)."""
    bound = LIMITS[limit]
    return Number(key, label, bound.low, bound.high, default, unit=bound.unit if bound.unit != "tokens" else "",
                  integer=bound.integer, blank=blank, blank_text="the preset's value" if blank is not None else "",
                  **options)


CONTROLS = (
    Select("model", "Model", tuple((k, p.label) for k, p in planner.MODELS.items()), default="gpt3-175b"),
    *(_typed(key, MODEL_LABELS[key], field, 0, blank=0, samples=(2, 96)) for key, field in MODEL_FIELDS),
    *(Select(key, key.replace("_", " "), options, default=PRESET) for key, _, options in MODEL_CHOICES),
    Select("cluster", "Nodes", tuple((k, p.label) for k, p in planner.CLUSTERS.items()), default="dgx-a100-80gb"),
    _typed("gpus", "GPUs", "gpus", 1024, samples=(8, 64, 16384)),
    Select("gpu", "GPU", ((PRESET, "preset"),) + tuple((k, g.name) for k, g in hardware.GPUS.items()), default=PRESET),
    Select("per_node", "GPUs per node", ((PRESET, "preset"),) + tuple((n, str(n)) for n in (1, 2, 4, 8, 16, 32, 72)),
           default=PRESET),
    Select("intra", "Link in a node", ((PRESET, "preset"),) + LINKS, default=PRESET),
    Select("inter", "Network link", ((PRESET, "preset"),) + LINKS, default=PRESET),
    _typed("nic_gbps", "Network per GPU", "inter_gbps", 0, blank=0, samples=(100, 400)),
    _typed("margin_gb", "Memory margin per GPU", "memory_margin_gb", 4, samples=(0, 8)),
    Select("framework", "Framework", tuple(FRAMEWORKS.items()), default="megatron"),
    _typed("batch", "Global batch", "global_batch", 1536, samples=(16, 2048)),
    _typed("tokens", "Tokens to train", "tokens", 300e9, samples=(15.6e12,)),
    *(Select(key, PLAN_LABELS[key], ((AUTO, "auto"),) + tuple((v, str(v)) for v in values), default=AUTO)
      for key, values in PLAN_CHOICES),
)

# On a phone the model and the GPU count stay in view; the pins fold on their own, the rest
# (node type included) under "More controls", in a bar capped at 40% of the screen that ends
# in Done (figure.html, issue 43).
PRIMARY = ("model", "gpus")
READOUTS_FIRST = True  # the estimate and its bands under the drawing, not under the reasoning and launch blocks
GROUPS = (
    ("Model", tuple(key for key, _ in MODEL_FIELDS) + tuple(key for key, _, _ in MODEL_CHOICES)),
    ("Cluster", ("cluster", "gpu", "per_node", "intra", "inter", "nic_gbps", "margin_gb")),
    ("Training", ("framework", "batch", "tokens")),
    ("Pin the plan", tuple(key for key, _ in PLAN_CHOICES)),
)
FOLDS = ("Pin the plan",)
# A planner message names the inputs it is about ("tp=16 does not divide kv_heads=8"): the
# control each comes from, where the page shows the message (_field_errors).
FIELD_CONTROLS = {**{field: key for key, field in MODEL_FIELDS}, **{field: key for key, field, _ in MODEL_CHOICES},
                  **{key: key for key, _ in PLAN_CHOICES}, "gpus": "gpus", "gpus_per_node": "per_node",
                  "framework": "framework",
                  "memory_margin_bytes": "margin_gb", "global_batch": "batch", "inter_bytes_per_s": "nic_gbps"}


FIGURE_DEFAULTS = {c.key: c.default for c in CONTROLS}
_LABELS = {c.key: c.label[0].upper() + c.label[1:] for c in CONTROLS}


def hints(state):
    """What each empty field stands for: the preset model's value, the network link's rate."""
    model = planner.MODELS[state["model"]].model
    shown = {key: f"{getattr(model, field):,}" for key, field in MODEL_FIELDS}
    link = state["inter"] if state["inter"] != PRESET else planner.CLUSTERS[state["cluster"]].inter
    shown["nic_gbps"] = f"{hardware.LINKS[link].bandwidth_bytes_per_s * 8 / 1e9:g}" if link else ""
    return shown


def _field_errors(message, state):
    """Where the page shows a planner message, once: ``{control key: message}``, else empty.
    The message names the inputs it is about ("tp=16 does not divide kv_heads=8"); it goes
    next to the one the reader set (not left at its preset, auto or default): the field
    they changed, the message naming the other. Where several were set, the key lists
    them ("tp kv_heads") and the page picks the one the reader touched last; where none
    was (a node type whose nodes do not divide the GPUs), the first named."""
    # "tp=16", and the inputs some messages name in words: "of 1024 GPUs", "the interleaved schedule"
    found = re.findall(r"\b([a-z_]+)=|\b\d+ (GPUs)\b|\binterleaved (schedule)\b", message)
    names = (name or ("gpus" if gpus else schedule) for name, gpus, schedule in found)
    named = list(dict.fromkeys(FIELD_CONTROLS[name] for name in names if name in FIELD_CONTROLS))
    if not named:
        return {}
    set_by_reader = [key for key in named if state[key] != FIGURE_DEFAULTS[key]]
    return {" ".join(set_by_reader) if set_by_reader else named[0]: message}


MEMORY_COLOURS = {"params": "params", "grads": "grads", "optimizer": "optimizer", "activations": "activations",
                  "buffers": "buffers"}
TIME_COLOURS = {"compute": "compute", "recompute": "forward", "bubble": "idle", "tp_comm": "tp", "cp_comm": "cp",
                "ep_comm": "ep", "pp_comm": "pp", "dp_comm": "dp", "optimizer": "optimizer_step"}
# Drawn 400 units wide with 14.5-unit labels (the "svg-compact" drawings): 11 px on a phone.
WIDTH, BAR, PAD, CHAR = 400, 26, 4, 8.2  # CHAR: width of one 14.5-unit label character


def _inputs(state):
    """(model, cluster, fixed plan fields) the state describes; ValueError says what is wrong."""
    changes = {field: state[key] for key, field in MODEL_FIELDS if state[key]}
    for key, field, _ in MODEL_CHOICES:
        if state[key] != PRESET:
            changes[field] = {"on": True, "off": False}.get(state[key], state[key])
    model = planner.model_preset(state["model"], **changes)
    node = {k: state[key] for key, k in (("gpu", "gpu"), ("per_node", "gpus_per_node"), ("intra", "intra"),
                                         ("inter", "inter")) if state[key] != PRESET}
    if state["nic_gbps"]:
        node["inter_bytes_per_s"] = state["nic_gbps"] * 1e9 / 8
    cluster = planner.cluster_preset(state["cluster"], state["gpus"], memory_margin_bytes=state["margin_gb"] * 1e9,
                                     **node)
    return model, cluster, tuple((key, {"on": True, "off": False}.get(state[key], state[key]))
                                 for key, _ in PLAN_CHOICES if state[key] != AUTO)


def _searched(state, fixed):
    """What a search pins: the reader's pins and the framework (a setting, not a pin)."""
    return (("framework", state["framework"]),) + fixed


SEARCHES_KEPT = 256  # about every state one change away from the reader's, and some history
_searches = OrderedDict()  # (model, cluster, batch, fixed) -> Search, or the ValueError's message


def _search_steps(model, cluster, batch, fixed, keep):
    """A search as ``planner.search_steps`` runs it (a generator), its answer kept for
    the next render: the Search, or ValueError."""
    key = (model, cluster, batch, fixed)
    if key not in _searches:
        try:
            _searches[key] = yield from planner.search_steps(model, cluster, batch, top=5, fixed=dict(fixed), keep=keep)
        except ValueError as error:
            _searches[key] = str(error)
        while len(_searches) > SEARCHES_KEPT:
            _searches.popitem(last=False)
    _searches.move_to_end(key)
    found = _searches[key]
    if isinstance(found, str):
        raise ValueError(found)
    return found


def _search(model, cluster, batch, fixed):
    return planner.run_steps(_search_steps(model, cluster, batch, fixed, keep=True))


def prepare(state):
    """What ``render(state)`` spends its time on, its searches, a slice at a time (a
    generator): the worker runs it ahead, between the reader's calls, keeping none of the
    planner's contexts (the reader's pair stays kept)."""
    try:
        model, cluster, fixed = _inputs(state)
        yield from _search_steps(model, cluster, state["batch"], _searched(state, ()), keep=False)
        if fixed:
            yield from _search_steps(model, cluster, state["batch"], _searched(state, fixed), keep=False)
    except ValueError:
        return  # render says why


def _bar(top, title, parts, colours, names, scale, fmt_value, marks=(), title_style=None, key_element=False):
    """One stacked horizontal bar: its title, marks (x, label) under it and a legend that
    names every part with its value (colour is never the only cue)."""
    out = [svg.text(PAD, top + 14, title, class_="svg-label svg-strong", style=title_style)]
    bars = []
    x, legend_x, legend_y = PAD, PAD, top + BAR + (56 if marks else 40)
    for key, value in parts:
        if value <= 0:
            continue
        width = value * scale
        bars.append(svg.boxes([(x, top + 22, width, BAR)], class_=f"fill-{colours[key]}"))
        label = f"{names[key]} {fmt_value(value)}"
        if legend_x + 16 + CHAR * len(label) > WIDTH:
            legend_x, legend_y = PAD, legend_y + 20
        out.append(svg.boxes([(legend_x, legend_y - 10, 11, 11)], class_=f"fill-{colours[key]}"))
        out.append(svg.text(legend_x + 15, legend_y, label, class_="svg-label-soft"))
        legend_x += 28 + CHAR * len(label)
        x += width
    out.insert(1, svg.group(bars, class_=svg.KEY if key_element else None))
    labels = []
    below = top + 22 + BAR + 18
    if len(marks) == 2 and marks[1][0] - marks[0][0] < 40:  # too close to name apart: one label for both
        marks = ((marks[0][0], f"{marks[0][1]}, {marks[1][1]}"), (marks[1][0], ""))
    for mark_x, label in marks:  # under the bar, beside their lines, clear of each other
        out.append(svg.segments([(mark_x, top + 18, mark_x, top + 22 + BAR + 6)], class_="stroke-capacity",
                                stroke_dasharray="4 3"))
        if label:
            labels.append(svg.Label(mark_x - 3, below, label, anchor="end",
                                    alternatives=((mark_x + 3, below, "start"),), moves=("left",)))
    if labels:
        size, bold = svg.label_size("svg-label svg-strong", compact=True)
        heading = svg.text_box(PAD, top + 14, title, size, "start", bold)
        out.append(svg.labels(labels, (0, top, WIDTH, BAR + 60), obstacles=(heading,), compact=True))
    return out, legend_y + 8


def _drawing(plan, e, verdict):
    scale = (WIDTH - 2 * PAD) / max(e.memory_bytes, e.hbm_bytes) / 1.02
    title = (f"Memory per GPU: {fmt.gigabytes(e.memory_bytes).removesuffix(' GB')} of "
             f"{fmt.gigabytes(e.usable_bytes)}" + {"fits": "", "at the edge": ", at the edge",
                                                   "does not fit": ", too much"}[verdict])
    parts, bottom = _bar(0, title, e.memory_breakdown.items(), MEMORY_COLOURS, planner.MEMORY_NAMES, scale,
                         fmt.gigabytes, ((PAD + e.usable_bytes * scale, "usable"), (PAD + e.hbm_bytes * scale, "HBM")),
                         title_style="fill:var(--c-warn)" if verdict == "does not fit" else None, key_element=True)
    more, bottom = _bar(bottom + 14, f"Step time: {fmt.duration(e.step_time_s)}", e.time_breakdown.items(),
                        TIME_COLOURS, planner.PART_NAMES, (WIDTH - 2 * PAD) / e.step_time_s, fmt.duration)
    return svg.document(WIDTH, bottom, parts + more, label=f"Per-GPU memory and step time of {plan.label()}",
                        class_="svg-compact")


def _alt(plan, e):
    parts = ", ".join(f"{planner.MEMORY_NAMES[k]} {fmt.gigabytes(v)}" for k, v in e.memory_breakdown.items() if v > 0)
    times = ", ".join(f"{planner.PART_NAMES[k]} {fmt.duration(v)}" for k, v in e.time_breakdown.items() if v > 0)
    return (f"Two bars for {plan.label()}. Memory per GPU {fmt.gigabytes(e.memory_bytes)} against "
            f"{fmt.gigabytes(e.usable_bytes)} usable ({'fits' if e.fits else 'does not fit'}): {parts}. "
            f"Step time {fmt.duration(e.step_time_s)}: {times}.")


def _table(candidates, shown, best, band):
    """The fastest plans, fastest first; those the band cannot tell from the fastest
    (``validation.ties``) share one row label, "tied", instead of a rank."""
    tied = validation.ties([c.estimate.step_time_s for c in candidates], band) if len(candidates) > 1 else 1
    rows = [("tied" if tied > 1 and i < tied else i + 1, c.plan.label(), fmt.duration(c.estimate.step_time_s),
             fmt.percent(c.estimate.mfu), fmt.gigabytes(c.estimate.memory_bytes),
             fmt.percent(c.estimate.step_time_s / best.estimate.step_time_s - 1) if best else "")
            for i, c in enumerate(candidates)]
    caption = (("All" if tied == len(candidates) else f"The first {tied}") + " are tied: their steps differ by "
               f"less than the \u00b1{fmt.two_significant(band.reach * 100)}% band, so the planner cannot rank "
               f"them; profile them" if tied > 1 else None)
    return html.table(("#", "plan", "step", "MFU", "memory per GPU", "slower than best"), rows, caption=caption, name_column=1,
                      label="The five fastest plans that fit",
                      row_classes=["chosen" if c.plan == shown.plan else None for c in candidates])


# How each kind of published number is written: its value, with its unit, to the precision
# the source states it (three significant figures at most).
QUANTITY_FORMATS = {
    "hardware_tflops_eq3": lambda v: f"{v:.0f} TFLOP/s", "model_tflops_palm": lambda v: f"{v:.0f} TFLOP/s",
    "step_time_s": lambda v: f"{v:.3g} s", "tokens_per_s_per_gpu": lambda v: f"{v:,.0f} tokens/s",
    "train_days": lambda v: f"{v:.0f} days",
}


@lru_cache(maxsize=1)
def _validation_tables():
    """Every published run, a table per regime: fitting runs first, then the checking runs
    (whose errors set the bands), numbers right-aligned; then the memory cases."""
    blocks = []
    for name in validation.regimes():
        checks = sorted((c for c in planner.validate() if c.case.end_to_end and c.regime == name),
                        key=lambda c: (c.case.role != validation.FIT, c.case.label))
        s = validation.regime_summary(name)
        caption = f"{name}: " + (f"{s.count} checking runs, mean error {fmt.percent(s.mean_abs)}, largest "
                                 f"{fmt.percent(s.max_abs)}" if s.count else "fitting runs only")
        rows = [(c.case.label, c.case.plan.label(), c.source.citation.split(",")[0],
                 "fitting" if c.case.role == validation.FIT else "checking",
                 QUANTITY_FORMATS[c.case.quantity](c.case.published), QUANTITY_FORMATS[c.case.quantity](c.predicted),
                 f"{c.error:+.1%}", c.verdict) for c in checks]
        blocks.append(html.table(("published run", "priced as", "source", "set", "published", "planner", "error",
                                  "memory"), rows, caption=caption, numeric=(4, 5, 6)))
    memory = [c for c in planner.validate() if not c.case.end_to_end]
    rows = [(c.case.label, f"{c.case.published:.3g} GiB", f"{c.predicted:.3g} GiB", f"{c.error:+.1%}") for c in memory]
    blocks.append(html.table(("Korthikanti et al. 2022, Fig. 1", "published", "planner", "error"), rows,
                             caption="Memory per GPU, no constant fitted", numeric=(1, 2, 3)))
    blocks.append(_held_out_table())
    runs = [c for c in planner.validate() if c.case.end_to_end]
    checking = validation.summarize([c for c in runs if c.case.role != validation.FIT])
    held = validation.coverage()
    summary = (f"Validation: {len(runs)} published runs ({sum(c.case.role == validation.FIT for c in runs)} fitting, "
               f"{checking.count} checking: mean error {fmt.percent(checking.mean_abs)}, largest "
               f"{fmt.percent(checking.max_abs)}; {fmt.percent(held.share, 0)} inside ranges built without their "
               f"source)")
    return html.fold(summary, *blocks)


def _held_out_table():
    """Leave-one-source-out, per regime: how many checking runs fell inside the range they
    would have been shown had their source never been published, and how wide it was."""
    rows = []
    for name in (None,) + validation.regimes():
        c = validation.coverage(name)
        if c.runs:
            rows.append((name or "all checking runs", c.sources, f"{c.inside} of {c.runs}", fmt.percent(c.share, 0),
                         f"\u00b1{fmt.percent(c.median_half_width)}"))
    return html.table(("regime", "sources", "inside", "share", "median range"), rows, numeric=(1, 2, 3, 4),
                      caption="Each source's runs against the range built from the other sources' runs alone")


def _bands(e, band, verdict, days):
    """The estimate's readouts as ranges its regime's checking runs support."""
    memory = validation.memory_band()
    gb = lambda v: f"{fmt.two_significant(v / 1e9)} GB"
    return {
        "step_time_s": fmt.span(*band.duration(e.step_time_s), fmt.duration),
        "mfu": fmt.span(*band.throughput(e.mfu), lambda v: f"{v * 100:.0f}%"),
        "tokens_per_s": fmt.span(*band.throughput(e.tokens_per_s), lambda v: fmt.rate(float(fmt.two_significant(v)),
                                                                                       "tokens/s")),
        "train_time_s": fmt.span(*band.duration(days), lambda s: f"{fmt.two_significant(s / 86400)} days"),
        "memory_bytes": fmt.span(e.memory_bytes * (1 - memory), e.memory_bytes * (1 + memory), gb),
    }


def _no_plan(message, state):
    """The view when the inputs cannot be met. The message is shown once: next to the field
    it is about (the drawing names that field), or, about no field, in the drawing."""
    errors = _field_errors(message, state)
    fields = [key for keys in errors for key in keys.split()]
    said = (f"See {' or '.join(_LABELS[key] for key in fields)}, marked in the controls." if errors else message)
    lines = textwrap.wrap(said, 42)[:4]
    inputs = ", ".join(f"{c.key}={state[c.key]}" for c in CONTROLS)  # every input: a change always shows
    drawing = svg.document(WIDTH, 28 + 20 * len(lines),
                           [svg.group([svg.text(PAD, 20, "No plan for these inputs.", class_="svg-label"),
                                       svg.texts(((PAD, 40 + 20 * i, line) for i, line in enumerate(lines)),
                                                 class_="svg-label-soft")], class_=svg.KEY)],
                           label=f"No plan for {inputs}: {message}", class_="svg-compact")
    return View(svg=drawing, readouts=(Readout("plan", "plan", "none", "none"),), alt=f"No plan is drawn: {message}",
                field_errors=errors, html=_validation_tables())


def _launch(export, label, *args):
    """A launch config, or the export's one-line reason why this plan has none."""
    try:
        return html.code(export(*args), label=label)
    except ValueError as error:
        return html.paragraph(f"{label}: {error}")


def render(state):
    try:
        model, cluster, fixed = _inputs(state)
        found = _search(model, cluster, state["batch"], _searched(state, ()))
        pinned = _search(model, cluster, state["batch"], _searched(state, fixed)) if fixed else found
    except ValueError as error:
        return _no_plan(str(error), state)
    best = found.candidates[0] if found.candidates else None
    shown = pinned.candidates[0] if pinned.candidates else pinned.smallest
    e = shown.estimate
    if fixed:
        reasons = planner.explain(model, cluster, shown.plan, best=(best.plan, best.estimate) if best else None,
                                  estimate=e)
        heading = "Your plan (" + ", ".join(f"{k}={v}" for k, v in fixed) + "; the rest searched)"
    else:
        reasons = shown.reasons
        heading = "Recommended plan" if best else "Nothing fits: the smallest footprint found"
    days = planner.train_time_s(e, state["tokens"])
    band = planner.band(model, cluster, shown.plan)
    regime = validation.regime_summary(band.regime) if band.checks and band.regime in validation.regimes() else None
    judged = band.reach
    held = validation.coverage()
    verdict = validation.memory_verdict(e.memory_bytes, e.usable_bytes)
    ranges = _bands(e, band, verdict, days)
    changed = ", ".join(f"{c.key}={c.display(state[c.key]) if isinstance(c, Number) else state[c.key]}"
                        for c in CONTROLS[1:] if c.key not in ("cluster", "gpus", "batch", "tokens")
                        and state[c.key] != c.default)
    preset = state["model"] if not any(state[k] for k, _ in MODEL_FIELDS) else None
    readouts = (
        Readout("plan", "plan", shown.plan.label(), shown.plan.label().replace(" ", "-")),
        Readout("step_time_s", "step time", ranges["step_time_s"], e.step_time_s),
        Readout("mfu", "MFU", ranges["mfu"], e.mfu),
        Readout("tokens_per_s", "throughput", ranges["tokens_per_s"], e.tokens_per_s),
        Readout("train_time_s", f"{fmt.si_count(state['tokens'])} tokens in", ranges["train_time_s"], days),
        Readout("memory_bytes", "memory per GPU", ranges["memory_bytes"], e.memory_bytes),
        Readout("fits", "fits in HBM", {"fits": "yes", "at the edge": "at the edge", "does not fit": "no"}[verdict],
                verdict.replace(" ", "-"), "warn" if verdict == "does not fit" else None),
        Readout("validation_error", "band from", f"\u00b1{fmt.two_significant(judged * 100)}%: {band.checks} published "
                f"runs" + (f" ({band.regime})" if regime else ""), judged),
        Readout("band_coverage", "such ranges held", f"{fmt.percent(held.share, 0)} of {held.runs} runs from "
                f"other sources", held.share),
        Readout("settings", "your overrides and pins", changed or "none", changed.replace(" ", "") or "none"),
    )
    blocks = html.join(
        html.heading(heading), html.paragraph(
            f"{shown.plan.label()} on {cluster.gpus:,} \u00d7 {cluster.spec.name}, as {FRAMEWORKS[state['framework']]} "
            f"runs it: {model.layers} layers, hidden {model.hidden}, {model.seq_len}-token sequences, "
            f"{fmt.si_count(model.params)} parameters. The ranges come from {band.basis}; "
            f"built the same way from other sources' runs alone, such a range held {fmt.percent(held.share, 0)} of "
            f"{held.runs} published runs; memory keeps a {fmt.gigabytes(cluster.memory_margin_bytes)} "
            f"margin below what HBM leaves after the runtime's reserve."),
        html.items(reasons, ordered=True),
        html.heading("The five fastest plans" + (" with your settings" if fixed else "")),
        _table(pinned.candidates, shown, best, planner.band(model, cluster, pinned.candidates[0].plan))
        if pinned.candidates else html.paragraph("None fits."),
        html.heading("Launch it"),
        _launch(planner.megatron_args, "Megatron-LM arguments", model, cluster, shown.plan),
        _launch(planner.torchtitan_toml, "torchtitan TOML", model, cluster, shown.plan, preset),
        _validation_tables(),
    )
    return View(svg=_drawing(shown.plan, e, verdict), readouts=readouts, note=pinned.message,
                alt=_alt(shown.plan, e), html=blocks)
