"""Figure 18: one device's training step, with a lane per strategy showing where its
collectives fire and which part of them the compute has to wait for."""
from figures import svg
from figures.contract import Readout, Select, Slider, Toggle, View
from models import fmt, hardware, shapes, strategies
from models import step_timeline as model

NUMBER = 18
TITLE = "Where each strategy's communication sits"
CAPTION = (
    "One H100's training step with a lane for each strategy switched on: a thin bar is a collective in flight while "
    "compute goes on, a tall red bar is time the compute waits for it. It starts from Megatron-LM's layout for its "
    "145.6B model (TP 8, PP 8, DP 24)."
)
NOTE = (
    "The step runs forward, backward, then the optimizer. Every toggle keeps the GPUs and the global batch (in "
    "sequences, so in tokens) and only reshares the work; the time axis stays that of the default layout (dashed "
    "line) unless the step outgrows it. Context and expert parallelism add waiting of their own; with tensor and "
    "pipeline parallelism off, a whole backward pass of two sequences is left to hide the gradient traffic, and "
    "the model may no longer fit."
)
TRIES = (
    ("Data parallelism alone", {"tp": False, "pp": False}),
    ("Add context parallelism", {"cp": True}),
    ("Add expert parallelism", {"ep": True}),
)

NETWORKS = ("ib_hdr", "ib_ndr", "ib_xdr", "roce_400gbe")
GPU_COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 8192, 16384)
# Global batches in sequences: Narayanan et al. 2021 Table 1's (512 ... 3,072; 2,304 for 145.6B) and powers of two
BATCHES = (256, 512, 768, 1024, 1536, 2048, 2304, 3072, 4096, 6144, 8192, 16384)
CARD = {"dp": "dp", "fsdp": "zero", "tp": "tp", "pp": "pp", "cp": "cp", "ep": "ep"}  # strategies' keys
COLOUR = {"dp": "dp", "fsdp": "zero", "tp": "tp", "pp": "pp", "cp": "cp", "ep": "ep"}  # palette keys
LANE_LABEL = {axis: strategies.SHORT_NAMES[CARD[axis]] for axis in model.AXES}
LANE_LABEL["fsdp"] = "FSDP"
DEFAULT_ON = ("dp", "tp", "pp")

CONTROLS = (
    *(Toggle(axis, LANE_LABEL[axis], default=axis in DEFAULT_ON) for axis in model.AXES),
    Slider("params", "Parameters", stops=shapes.PARAMS, default=145_600_000_000, format=fmt.si_count),
    Slider("gpus", "GPUs", stops=GPU_COUNTS, default=1536, format=fmt.gpus),
    Select("link", "Network between nodes", options=tuple((k, hardware.link(k).name) for k in NETWORKS), default="ib_ndr"),
    Slider("batch", "Global batch, held by every toggle", stops=BATCHES, default=model.GLOBAL_BATCH_SEQUENCES,
           format=lambda n: f"{n:,} sequences"),
)

WIDTH, X0, X1 = 720, 6, 714
LABEL_H, LANE_H, GAP = 16, 18, 8
KIND_FILL = {"forward": "forward", "backward": "backward", "bubble": "idle", "optimizer": "optimizer_step"}
FABRIC = {"intra-node": "inside a node", "inter-node": "across nodes"}
TICK_STEPS = tuple(m * 10.0 ** e for e in range(-4, 4) for m in (1, 2, 5))


def _enabled(state):
    return frozenset(axis for axis in model.AXES if state[axis])


def _row(pairs, scale):
    """(start_s, end_s) pairs as a flat x0, x1, ... list in pixels, neighbours closer than
    half a pixel merged and every bar at least 0.6 px long: thousands of sub-pixel
    collectives become the few hundred bars a 720 px row can show."""
    xs = []
    last = -1.0  # end of the bar being built, in pixels from X0
    first = 0.0
    for start, end in sorted(pairs):
        start *= scale
        if start - last < 0.5:
            end *= scale
            if end > last:
                last = end
            continue
        if last >= 0:
            xs += (X0 + first, X0 + (last if last - first >= 0.6 else first + 0.6))
        first, last = start, end * scale
    if last >= 0:
        xs += (X0 + first, X0 + (last if last - first >= 0.6 else first + 0.6))
    return xs


def _lane_text(axis, step):
    traffic = next((a for a in step.axes if a.axis == axis), None)
    if traffic is None:
        lay = step.layout
        why = "no data-parallel ranks to hold experts" if axis == "ep" else f"no GPUs left: degree 1 on {fmt.gpus(lay.gpus)}"
        return f"{LANE_LABEL[axis]}: {why}", ""
    left = (f"{LANE_LABEL[axis]}: {traffic.collective}, {traffic.calls} per step, "
            f"{traffic.group} ranks {FABRIC[traffic.fabric]}")
    return left, f"waits {fmt.duration(traffic.exposed_s)} of {fmt.duration(traffic.comm_s)}"


def _step(state, enabled):
    return model.step_timeline(state["params"], state["gpus"], enabled, global_batch=state["batch"], link=state["link"])


def _banner(state, step):
    """The lines above the lanes: the batch every toggle holds, then what is wrong with this layout."""
    lay, mem, tokens = step.layout, step.memory, state["batch"] * shapes.shape_for(state["params"]).seq
    lines = [(f"Global batch {state['batch']:,} sequences ({fmt.si_count(tokens)} tokens), the same for every toggle: "
              f"{step.replica_sequences:,} per {'replica' if lay.data > 1 else 'model copy'}", "svg-label-soft", None)]
    if not mem.fits:
        lines.append((f"Does not fit: {fmt.data_size(mem.total_bytes)} per GPU against {fmt.data_size(mem.hbm_bytes)} "
                      f"({fmt.data_size(mem.model_state_bytes)} of model state, {fmt.data_size(mem.activation_bytes)} of "
                      "activations)", "svg-label svg-strong", "fill:var(--c-warn)"))
    if step.uneven:
        lines.append((f"{state['batch']:,} sequences do not split evenly over {lay.data:,} replicas: "
                      + (f"{step.idle_replicas:,} get none" if step.idle_replicas else "some get one fewer")
                      + "; the busiest sets the step", "svg-label", "fill:var(--c-warn)"))
    return [svg.text(X0, 12 + 16 * i, text, class_=css, style=style) for i, (text, css, style) in enumerate(lines)], 16 * len(lines) + 4


def render(state):
    enabled = _enabled(state)
    step = _step(state, enabled)
    reference = _step(state, frozenset(DEFAULT_ON))  # the default toggles, same model, GPUs, batch, network
    lay, mem = step.layout, step.memory
    span_s = max(step.step_time_s, reference.step_time_s)  # one axis for both: a toggle never rescales silently
    scale = (X1 - X0) / span_s
    parts, y = _banner(state, step)
    rows = []  # the y of each lane's bar: the default layout's end is marked across them, not across labels
    # compute lane: one path per kind, each phase named once where it is wide enough
    where = "one device of the first pipeline stage" if lay.pp > 1 else "one device"
    parts.append(svg.text(X0, y + 12, f"Compute ({where})", class_="svg-label"))
    y += LABEL_H
    rows.append(y)
    names = []
    for kind, fill in KIND_FILL.items():
        pairs = step.stretches("compute", kind)
        if not pairs:
            continue
        parts.append(svg.spans(_row(pairs, scale), y=y + LANE_H / 2, height=LANE_H, class_=f"stroke-{fill}"))
        start, end = pairs[0][0] * scale + X0, pairs[-1][1] * scale + X0
        if end - start > 64:
            names.append(((start + end) / 2, y + 13, "bubble" if kind == "bubble" else kind, fill))
    for fill in sorted({fill for *_, fill in names}):  # each name in the ink that reads on its bar
        parts.append(svg.texts([(x, ty, name) for x, ty, name, f in names if f == fill],
                               class_=f"svg-bar-label on-{fill}", text_anchor="middle"))
    y += LANE_H + GAP
    for axis in model.AXES:
        if axis not in enabled:
            continue
        left, right = _lane_text(axis, step)
        parts.append(svg.boxes(((X0, y + 2, 10, 10),), class_=f"fill-{COLOUR[axis]}"))  # the lane's hue, as its readout's swatch
        parts.append(svg.text(X0 + 14, y + 12, left, class_="svg-label"))
        parts.append(svg.text(X1, y + 12, right, class_="svg-label-soft", text_anchor="end"))
        y += LABEL_H
        rows.append(y)
        parts.append(svg.boxes(((X0, y, X1 - X0, LANE_H),), class_="svg-lane"))
        for kind, height, css in (("comm", 5, f"stroke-{COLOUR[axis]}"), ("exposed", LANE_H - 2, "stroke-exposed")):
            pairs = step.stretches(axis, kind)
            if pairs:  # thin: in flight while compute goes on; tall: the compute waits
                parts.append(svg.spans(_row(pairs, scale), y=y + LANE_H / 2, height=height, class_=css))
        y += LANE_H + GAP
    same = enabled == frozenset(DEFAULT_ON)
    if not same:  # where the default layout's step ends, across every lane
        x = X0 + reference.step_time_s * scale
        parts.append(svg.segments([(x, row - 3, x, row + LANE_H + 3) for row in rows] + [(x, y - GAP, x, y)],
                                  class_="svg-ink svg-dash", stroke_width=1.5))
    parts.append(svg.time_axis(X0, X1, y, span_s, "time from the step's start ({unit})"))
    change = step.step_time_s / reference.step_time_s - 1
    key = (f"this step {fmt.duration(step.step_time_s)}" + ("" if same else
           f"; dashed: the default layout (DP, TP, PP) on the same GPUs and batch, {fmt.duration(reference.step_time_s)} "
           f"({'+' if change >= 0 else '-'}{fmt.percent(abs(change), 0)})"))
    parts.append(svg.text(X0, y + 60, key, class_="svg-label-soft"))  # a row of its own, under the axis's caption
    degrees = _degrees(lay, enabled)
    drawing = svg.document(WIDTH, y + 66, parts, label=f"Timeline of one training step with {degrees}")
    fit = (f"{fmt.data_size(mem.total_bytes)} of {fmt.data_size(mem.hbm_bytes)}: "
           + ("fits" if mem.fits else "does not fit"))
    tokens = state["batch"] * shapes.shape_for(state["params"]).seq
    readouts = [
        Readout("step_time_s", "step time", fmt.duration(step.step_time_s) + ("" if mem.fits else ", if it fit"),
                step.step_time_s),
        Readout("exposed_comm_s", "communication the compute waits for", fmt.duration(step.exposed_comm_s),
                step.exposed_comm_s, "exposed" if step.exposed_comm_s > 0 else None),
        Readout("hidden_comm_s", "communication hidden under compute", fmt.duration(step.hidden_comm_s),
                step.hidden_comm_s),  # drawn thin, in each strategy's hue
        *(Readout(f"exposed_{axis}_s", f"waiting on {LANE_LABEL[axis]}", fmt.duration(step.exposed_s(axis)),
                  step.exposed_s(axis), COLOUR[axis]) for axis in model.AXES if axis in enabled),
        Readout("layout", "layout", degrees),
        Readout("memory_per_gpu_bytes", "memory per GPU (model state at 16 B per parameter, plus activations)", fit, mem.total_bytes, None if mem.fits else "warn"),
        Readout("global_batch_tokens", "global batch, the same for every toggle",
                f"{state['batch']:,} sequences, {fmt.si_count(tokens)} tokens", tokens),
        Readout("replica_sequences", "sequences per replica" + (" (the busiest)" if step.uneven else ""),
                fmt.count(step.replica_sequences), step.replica_sequences),
        Readout("reference_step_s", "the default layout's step (DP, TP, PP)", fmt.duration(reference.step_time_s),
                reference.step_time_s),
    ]
    if lay.pp > 1:
        readouts.append(Readout("bubble_s", "pipeline bubble (idle)", fmt.duration(step.bubble_s), step.bubble_s, "idle"))
    notes = []
    notes.append(("This layout does not fit: it needs " if not mem.fits else "Memory: ")
                 + f"{fmt.data_size(mem.total_bytes)} on each GPU of {fmt.data_size(mem.hbm_bytes)}, model state at "
                 f"{model.MODEL_STATE_BYTES_PER_PARAM:g} bytes per parameter (bf16 weights and gradients, fp32 master "
                 "weights and two Adam moments) plus activations"
                 + ("; the timeline shows what the step would cost if it did." if not mem.fits else "."))
    if lay.gpus_used < lay.gpus:
        notes.append(f"With no data axis on, only {fmt.gpus(lay.gpus_used)} of the {lay.gpus} hold the model and "
                     f"work through the whole batch; turn on DP or FSDP to use the rest.")
    if "dp" in enabled and "fsdp" in enabled:
        notes.append(f"DP and FSDP together are HSDP: shards in groups of {lay.shard}, gradients reduced "
                     f"across {lay.replicas} replicas.")
    waits = ", ".join(f"{LANE_LABEL[a.axis]} {fmt.duration(a.exposed_s)}" for a in step.axes) or "nothing"
    alt = (
        f"Timeline of one device's step: {fmt.si_count(state['params'])} parameters, {degrees}, "
        f"{hardware.link(state['link']).name} between nodes, a global batch of {state['batch']:,} sequences "
        f"({step.replica_sequences:,} per replica). Forward {fmt.duration(step.forward_s)}, "
        f"backward {fmt.duration(step.backward_s)}, bubble {fmt.duration(step.bubble_s)}, optimizer "
        f"{fmt.duration(step.optimizer_s)}; the compute waits on {waits}; "
        f"{fmt.duration(step.hidden_comm_s)} of communication hides; the step takes {fmt.duration(step.step_time_s)}"
        + ("" if same else f", against {fmt.duration(reference.step_time_s)} for the default layout (dashed line)")
        + f". Memory per GPU {fit}."
    )
    return View(svg=drawing, readouts=tuple(readouts), note=" ".join(notes), alt=alt)


def _degrees(lay, enabled):
    """The layout in words; the data axis named for what it is: DP, FSDP, or both (HSDP)."""
    if "dp" in enabled and "fsdp" in enabled:
        data = [("HSDP", f"{lay.shard} x {lay.replicas}")] if lay.data > 1 else []
    else:
        data = [("FSDP" if "fsdp" in enabled else "DP", lay.data)]
    named = [("TP", lay.tp), ("CP", lay.cp), ("PP", lay.pp)] + data
    text = " x ".join(f"{name} {degree}" for name, degree in named if degree != 1) or "one GPU per model copy"
    experts = f", experts over {lay.ep} of those ranks" if lay.ep > 1 else ""
    return f"{text}{experts} on {fmt.gpus(lay.gpus_used)}"
