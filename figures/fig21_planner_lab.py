"""Figure 21: the planner lab — search every layout, explain the best, price any other."""
from collections import OrderedDict
from functools import lru_cache

from figures import html, svg
from figures.contract import Number, Readout, Select, View
from models import fmt, hardware, planner

NUMBER = 21
TITLE = "The planner lab"
CAPTION = (
    "Pick a model and a cluster, or override any field (0 or 'preset' keeps the preset's value), then a global "
    "batch, a sequence length (0: the model's) and the tokens to train on. The planner prices every layout that "
    "fits and shows the fastest with its reasoning, the memory one GPU holds against its HBM and where a step's "
    "time goes. Set any degree of the plan yourself to see what it costs and why it loses; copy the plan as "
    "Megatron-LM arguments or a torchtitan config; compare the model with the published runs at the bottom."
)

AUTO, PRESET = "auto", "preset"
MODEL_FIELDS = (("layers", "layers", 1024), ("hidden", "hidden", 131072), ("heads", "heads", 1024),
                ("kv_heads", "kv_heads", 1024), ("ffn", "ffn", 524288), ("vocab", "vocab", 2_000_000),
                ("seq", "seq_len", 1_048_576), ("experts", "experts", 1024), ("expert_ffn", "expert_ffn", 524288))
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

CONTROLS = (
    Select("model", "Model", tuple((k, p.label) for k, p in planner.MODELS.items()), default="gpt3-175b"),
    *(Number(key, f"{key.replace('_', ' ')} (0: preset)", 0, top, 0, integer=True, samples=(2, 96))
      for key, _, top in MODEL_FIELDS),
    *(Select(key, key.replace("_", " "), options, default=PRESET) for key, _, options in MODEL_CHOICES),
    Select("cluster", "Nodes", tuple((k, p.label) for k, p in planner.CLUSTERS.items()), default="dgx-a100-80gb"),
    Number("gpus", "GPUs", 1, 131072, 1024, integer=True, samples=(8, 64, 16384)),
    Select("gpu", "GPU", ((PRESET, "preset"),) + tuple((k, g.name) for k, g in hardware.GPUS.items()), default=PRESET),
    Select("per_node", "GPUs per node", ((PRESET, "preset"),) + tuple((n, str(n)) for n in (1, 2, 4, 8, 16, 32, 72)),
           default=PRESET),
    Select("intra", "Link in a node", ((PRESET, "preset"),) + LINKS, default=PRESET),
    Select("inter", "Network link", ((PRESET, "preset"),) + LINKS, default=PRESET),
    Number("nic_gbps", "Network per GPU (0: the link's)", 0, 10000, 0, unit="Gb/s", samples=(100, 400)),
    Number("batch", "Global batch", 1, 1_000_000, 1536, unit="sequences", integer=True, samples=(16, 2048)),
    Number("tokens", "Tokens to train", 1e6, 1e15, 300e9, samples=(15.6e12,)),
    *(Select(key, PLAN_LABELS[key], ((AUTO, "auto"),) + tuple((v, str(v)) for v in values), default=AUTO)
      for key, values in PLAN_CHOICES),
)

MEMORY_COLOURS = {"params": "params", "grads": "grads", "optimizer": "optimizer", "activations": "activations",
                  "buffers": "buffers"}
TIME_COLOURS = {"compute": "compute", "recompute": "forward", "bubble": "idle", "tp_comm": "tp", "cp_comm": "cp",
                "ep_comm": "ep", "pp_comm": "pp", "dp_comm": "dp", "optimizer": "optimizer_step"}
# Drawn 400 units wide with 14.5-unit labels (the "svg-compact" drawings): 11 px on a phone.
WIDTH, BAR, PAD, CHAR = 400, 26, 4, 8.2  # CHAR: width of one 14.5-unit label character


def _inputs(state):
    """(model, cluster, fixed plan fields) the state describes; ValueError says what is wrong."""
    changes = {field: state[key] for key, field, _ in MODEL_FIELDS if state[key]}
    for key, field, _ in MODEL_CHOICES:
        if state[key] != PRESET:
            changes[field] = {"on": True, "off": False}.get(state[key], state[key])
    model = planner.model_preset(state["model"], **changes)
    node = {k: state[key] for key, k in (("gpu", "gpu"), ("per_node", "gpus_per_node"), ("intra", "intra"),
                                         ("inter", "inter")) if state[key] != PRESET}
    if state["nic_gbps"]:
        node["inter_bytes_per_s"] = state["nic_gbps"] * 1e9 / 8
    cluster = planner.cluster_preset(state["cluster"], state["gpus"], **node)
    return model, cluster, tuple((key, {"on": True, "off": False}.get(state[key], state[key]))
                                 for key, _ in PLAN_CHOICES if state[key] != AUTO)


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
        yield from _search_steps(model, cluster, state["batch"], (), keep=False)
        if fixed:
            yield from _search_steps(model, cluster, state["batch"], fixed, keep=False)
    except ValueError:
        return  # render says why


@lru_cache(maxsize=1)
def _worst_error():
    return max(abs(check.error) for check in planner.validate())


def _bar(top, title, parts, colours, names, scale, fmt_value, marks=(), title_style=None):
    """One stacked horizontal bar: its title, marks (x, label) under it and a legend that
    names every part with its value (colour is never the only cue)."""
    out = [svg.text(PAD, top + 14, title, class_="svg-label svg-strong", style=title_style)]
    x, legend_x, legend_y = PAD, PAD, top + BAR + (56 if marks else 40)
    for key, value in parts:
        if value <= 0:
            continue
        width = value * scale
        out.append(svg.boxes([(x, top + 22, width, BAR)], class_=f"fill-{colours[key]}"))
        label = f"{names[key]} {fmt_value(value)}"
        if legend_x + 16 + CHAR * len(label) > WIDTH:
            legend_x, legend_y = PAD, legend_y + 20
        out.append(svg.boxes([(legend_x, legend_y - 10, 11, 11)], class_=f"fill-{colours[key]}"))
        out.append(svg.text(legend_x + 15, legend_y, label, class_="svg-label-soft"))
        legend_x += 28 + CHAR * len(label)
        x += width
    for (mark_x, label), label_y in zip(marks, (top + 22 + BAR + 18, top + 14)):  # usable below, HBM above
        out.append(svg.segments([(mark_x, top + 18, mark_x, top + 22 + BAR + 6)], class_="stroke-capacity",
                                stroke_dasharray="4 3"))
        out.append(svg.text(mark_x - 3, label_y, label, class_="svg-label-soft", text_anchor="end"))
    return out, legend_y + 8


def _drawing(plan, e):
    scale = (WIDTH - 2 * PAD) / max(e.memory_bytes, e.hbm_bytes) / 1.02
    title = (f"Memory per GPU: {fmt.gigabytes(e.memory_bytes)} of {fmt.gigabytes(e.usable_bytes)}"
             + ("" if e.fits else ", too much"))
    parts, bottom = _bar(0, title, e.memory_breakdown.items(), MEMORY_COLOURS, planner.MEMORY_NAMES, scale,
                         fmt.gigabytes, ((PAD + e.usable_bytes * scale, "usable"), (PAD + e.hbm_bytes * scale, "HBM")),
                         title_style=None if e.fits else "fill:var(--c-warn)")
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


def _table(candidates, shown, best):
    rows = [(i + 1, c.plan.label(), fmt.duration(c.estimate.step_time_s), fmt.percent(c.estimate.mfu),
             fmt.gigabytes(c.estimate.memory_bytes),
             fmt.percent(c.estimate.step_time_s / best.estimate.step_time_s - 1) if best else "")
            for i, c in enumerate(candidates)]
    return html.table(("#", "plan", "step", "MFU", "memory per GPU", "slower than best"), rows,
                      label="The five fastest plans that fit",
                      row_classes=["chosen" if c.plan == shown.plan else None for c in candidates])


@lru_cache(maxsize=1)
def _validation_table():
    rows = [(check.case.label, check.case.quantity.replace("_", " "), f"{check.case.published:g}",
             f"{check.predicted:.4g}", fmt.percent(check.error)) for check in planner.validate()]
    return html.table(("published case", "quantity", "published", "planner", "error"), rows,
                      caption="The planner against every published measurement it knows (docs/MODELS.md).")


def render(state):
    try:
        model, cluster, fixed = _inputs(state)
        found = _search(model, cluster, state["batch"], ())
        pinned = _search(model, cluster, state["batch"], fixed) if fixed else found
    except ValueError as error:
        message = str(error)
        inputs = ", ".join(f"{c.key}={state[c.key]}" for c in CONTROLS)  # every input: a change always shows
        drawing = svg.document(WIDTH, 30, [svg.text(PAD, 20, "No plan: see the note below", class_="svg-label")],
                               label=f"No plan for {inputs}: {message}", class_="svg-compact")
        return View(svg=drawing, readouts=(Readout("plan", "plan", "none", "none"),), note=message,
                    alt=f"No plan is drawn: {message}", html=html.join(html.heading("Validation"), _validation_table()))
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
    note = pinned.message
    days = planner.train_time_s(e, state["tokens"])
    worst = _worst_error()
    changed = ", ".join(f"{c.key}={c.display(state[c.key]) if isinstance(c, Number) else state[c.key]}"
                        for c in CONTROLS[1:] if c.key not in ("cluster", "gpus", "batch", "tokens")
                        and state[c.key] != (0 if isinstance(c, Number) else c.default))
    preset = state["model"] if not any(state[k] for k, _, _ in MODEL_FIELDS) else None
    readouts = (
        Readout("plan", "plan", shown.plan.label(), shown.plan.label().replace(" ", "-")),
        Readout("step_time_s", "step time", fmt.duration(e.step_time_s), e.step_time_s),
        Readout("mfu", "MFU", fmt.percent(e.mfu), e.mfu),
        Readout("tokens_per_s", "throughput", fmt.rate(e.tokens_per_s, "tokens/s"), e.tokens_per_s),
        Readout("train_time_s", f"{fmt.si_count(state['tokens'])} tokens in", fmt.days(days), days),
        Readout("memory_bytes", "memory per GPU", fmt.gigabytes(e.memory_bytes), e.memory_bytes),
        Readout("fits", "fits in HBM", "yes" if e.fits else "no", "fits" if e.fits else "does-not-fit",
                None if e.fits else "warn"),
        Readout("validation_error", "largest error on the published cases", fmt.percent(worst), worst),
        Readout("settings", "your overrides and pins", changed or "none", changed.replace(" ", "") or "none"),
    )
    blocks = html.join(
        html.heading(heading), html.paragraph(f"{shown.plan.label()} on {cluster.gpus:,} x {cluster.spec.name}: "
                                              f"{model.layers} layers, hidden {model.hidden}, {model.seq_len}-token "
                                              f"sequences, {fmt.si_count(model.params)} parameters."),
        html.items(reasons, ordered=True),
        html.heading("The five fastest plans" + (" with your settings" if fixed else "")),
        _table(pinned.candidates, shown, best) if pinned.candidates else html.paragraph("None fits."),
        html.heading("Launch it"),
        html.code(planner.megatron_args(model, cluster, shown.plan), label="Megatron-LM arguments"),
        html.code(planner.torchtitan_toml(model, cluster, shown.plan, preset), label="torchtitan TOML"),
        html.heading("Validation"), _validation_table(),
    )
    return View(svg=_drawing(shown.plan, e), readouts=readouts, note=note, alt=_alt(shown.plan, e), html=blocks)
