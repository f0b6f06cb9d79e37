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
    "compute goes on, a tall red bar is time the compute waits for it. It starts from the parallel layout "
    "Megatron-LM published for its 145.6B model (TP 8, PP 8, DP 24) and counts memory as Megatron-LM does, 18 bytes "
    "per parameter."
)
NOTE = (
    "The step runs forward, backward, then the optimizer. Every toggle keeps the GPUs and the global batch (in "
    "sequences, so in tokens) and only reshares the work; the time axis stays that of the default layout (dashed "
    "line) unless the step outgrows it. Each replica runs its sequences as microbatches and accumulates their "
    "gradients; the compute lane adds up each kind of work over them (forwards, the bubble, backwards) where the "
    "schedule interleaves them. Context and expert parallelism add waiting of their own; with tensor and pipeline "
    "parallelism off, only the last microbatch's backward pass is left to hide the gradient traffic, and the model "
    "may no longer fit. Memory counts model state at 18 bytes per parameter (bf16 weights, fp32 main gradients, "
    "fp32 master weights and two Adam moments), plus the activations of the microbatches in flight."
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
PRIMARY = ("params", "gpus")  # on a phone: the model and the cluster; the strategies' toggles fold away
GROUPS = (("Strategies", model.AXES), ("Network and batch", ("link", "batch")))

LABEL_H, LANE_H, GAP = 16, 18, 8
KIND_FILL = {"forward": "forward", "backward": "backward", "bubble": "idle", "optimizer": "optimizer_step"}
FABRIC = {"intra-node": "inside a node", "inter-node": "across nodes"}
TICK_STEPS = tuple(m * 10.0 ** e for e in range(-4, 4) for m in (1, 2, 5))


class _Layout:
    """The drawing's geometry: ``width`` and the lanes' left and right ends (``x0``, ``x1``),
    how many ticks the time axis takes, and whether text is wrapped to the width (on a
    phone) or kept on one line (wide)."""

    def __init__(self, width, x0, x1, ticks, narrow):
        self.width, self.x0, self.x1, self.ticks, self.narrow = width, x0, x1, ticks, narrow

    def lines(self, text, css="svg-label", indent=0):
        """``text`` as the lines it takes from ``x0 + indent`` to ``x1``: one line wide."""
        if not self.narrow:
            return [text]
        return svg.wrap(" ".join(text.split()), self.x1 - self.x0 - indent, *svg.label_size(css))


WIDE = _Layout(720, 6, 714, 6, narrow=False)
NARROW = _Layout(320, 6, 314, 5, narrow=True)  # a phone: 320 units at 11-unit labels, text wrapped
WIDTH, X0, X1 = WIDE.width, WIDE.x0, WIDE.x1


def _enabled(state):
    return frozenset(axis for axis in model.AXES if state[axis])


def _row(pairs, scale, x0=X0):
    """(start_s, end_s) pairs as a flat x0, x1, ... list in pixels, neighbours closer than
    half a pixel merged and every bar at least 0.6 px long: thousands of sub-pixel
    collectives become the few hundred bars a 720 px row can show."""
    xs = []
    last = -1.0  # end of the bar being built, in pixels from x0
    first = 0.0
    for start, end in sorted(pairs):
        start *= scale
        if start - last < 0.5:
            end *= scale
            if end > last:
                last = end
            continue
        if last >= 0:
            xs += (x0 + first, x0 + (last if last - first >= 0.6 else first + 0.6))
        first, last = start, end * scale
    if last >= 0:
        xs += (x0 + first, x0 + (last if last - first >= 0.6 else first + 0.6))
    return xs


def _lane_text(axis, step):
    """``(name, what, wait)``: the lane's strategy, its collectives (or why it has none) and
    how long the compute waits for them."""
    traffic = next((a for a in step.axes if a.axis == axis), None)
    if traffic is None:
        lay = step.layout
        why = "no data-parallel ranks to hold experts" if axis == "ep" else f"no GPUs left: degree 1 on {fmt.gpus(lay.gpus)}"
        return LANE_LABEL[axis], why, ""
    what = f"{traffic.collective}, {traffic.calls} per step, {traffic.group} ranks {FABRIC[traffic.fabric]}"
    return LANE_LABEL[axis], what, f"waits {fmt.duration(traffic.exposed_s)} of {fmt.duration(traffic.comm_s)}"


def _step(state, enabled):
    return model.step_timeline(state["params"], state["gpus"], enabled, global_batch=state["batch"], link=state["link"])


def _banner(state, step, geo=WIDE):
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
    lines = [(line, css, style) for text, css, style in lines for line in geo.lines(text, css)]
    return [svg.text(geo.x0, 12 + 16 * i, text, class_=css, style=style) for i, (text, css, style) in enumerate(lines)], 16 * len(lines) + 4


def _microbatches(step):
    """How the replica's sequences are run: microbatches whose gradients accumulate."""
    if step.microbatches == 1:
        return f"one microbatch of {fmt.count(step.microbatch_sequences)}"
    size = "one sequence" if step.microbatch_sequences == 1 else f"{step.microbatch_sequences:,} sequences"
    return f"{step.microbatches:,} microbatches of {size}"


def _lane_label(axis, step, y, geo):
    """The lane's swatch and text above its bar from ``y``: wide, one line (what on the left,
    the wait on the right); on a phone the name and the wait, then what, wrapped. Returns
    the parts and the bar's y."""
    name, what, wait = _lane_text(axis, step)
    parts = [svg.boxes(((geo.x0, y + 2, 10, 10),), class_=f"fill-{COLOUR[axis]}")]  # the lane's hue, as its readout's swatch
    lines = [f"{name}: {what}"] if not geo.narrow else [name] + geo.lines(what, indent=14)
    for i, line in enumerate(lines):
        parts.append(svg.text(geo.x0 + 14, y + 12 + LABEL_H * i, line, class_="svg-label"))
    parts.append(svg.text(geo.x1, y + 12, wait, class_="svg-label-soft", text_anchor="end"))
    return parts, y + LABEL_H * len(lines)


def _drawing(state, step, reference, enabled, geo):
    """The timeline, laid out by ``geo`` (WIDE or NARROW): the same lanes, bars and marks."""
    x0, x1 = geo.x0, geo.x1
    lay = step.layout
    span_s = max(step.step_time_s, reference.step_time_s)  # one axis for both: a toggle never rescales silently
    scale = (x1 - x0) / span_s
    parts, y = _banner(state, step, geo)
    rows = []  # the y of each lane's bar: the default layout's end is marked across them, not across labels
    # compute lane: one path per kind, each phase named once where it is wide enough
    where = ("one device, first pipeline stage" if geo.narrow else "one device of the first pipeline stage") \
        if lay.pp > 1 else "one device"
    for line in geo.lines(f"Compute ({where})"):
        parts.append(svg.text(x0, y + 12, line, class_="svg-label"))
        y += LABEL_H
    if step.microbatches > 1:  # what is drawn is a sum: say so, and what the schedule really does
        schedule = "1F1B runs them one forward, one backward" if lay.pp > 1 else "each runs its forward, then its backward"
        for line in svg.wrap(f"{_microbatches(step)}, each kind of work summed; {schedule}", x1 - x0,
                             *svg.label_size("svg-label-soft")):
            parts.append(svg.text(x0, y + 12, line, class_="svg-label-soft"))
            y += LABEL_H
    rows.append(y)
    names = []
    waits = any(step.stretches(axis, "exposed") for axis in model.AXES if axis in enabled)
    for kind, fill in KIND_FILL.items():
        pairs = step.stretches("compute", kind)
        if not pairs:
            continue
        key = "" if waits or kind != "forward" else f" {svg.KEY}"  # nothing waits: the compute lane is the point
        parts.append(svg.spans(_row(pairs, scale, x0), y=y + LANE_H / 2, height=LANE_H, class_=f"stroke-{fill}{key}"))
        start, end = pairs[0][0] * scale + x0, pairs[-1][1] * scale + x0
        if end - start > 64:
            names.append(((start + end) / 2, y + 13, "bubble" if kind == "bubble" else kind, fill))
    for fill in sorted({fill for *_, fill in names}):  # each name in the ink that reads on its bar
        parts.append(svg.texts([(x, ty, name) for x, ty, name, f in names if f == fill],
                               class_=f"svg-bar-label on-{fill}", text_anchor="middle"))
    y += LANE_H + GAP
    for axis in model.AXES:
        if axis not in enabled:
            continue
        label, y = _lane_label(axis, step, y, geo)
        parts += label
        rows.append(y)
        parts.append(svg.boxes(((x0, y, x1 - x0, LANE_H),), class_="svg-lane"))
        # thin: in flight while compute goes on; tall and red: the compute waits (the figure's point)
        for kind, height, css in (("comm", 5, f"stroke-{COLOUR[axis]}"), ("exposed", LANE_H - 2, f"stroke-exposed {svg.KEY}")):
            pairs = step.stretches(axis, kind)
            if pairs:
                parts.append(svg.spans(_row(pairs, scale, x0), y=y + LANE_H / 2, height=height, class_=css))
        y += LANE_H + GAP
    same = enabled == frozenset(DEFAULT_ON)
    if not same:  # where the default layout's step ends, across every lane
        x = x0 + reference.step_time_s * scale
        parts.append(svg.segments([(x, row - 3, x, row + LANE_H + 3) for row in rows] + [(x, y - GAP, x, y)],
                                  class_="svg-ink svg-dash", stroke_width=1.5))
    caption = "time from the step's start ({unit})"
    if geo.narrow:
        parts.append(svg.time_axis(x0, x1, y, span_s, caption, geo.ticks, width=geo.width))
    else:
        parts.append(svg.time_axis(x0, x1, y, span_s, caption))
    change = step.step_time_s / reference.step_time_s - 1
    key = (f"this step {fmt.duration(step.step_time_s)}" + ("" if same else
           f"; dashed: the default layout (DP, TP, PP) on the same GPUs and batch, {fmt.duration(reference.step_time_s)} "
           f"({'+' if change >= 0 else '-'}{fmt.percent(abs(change), 0)})"))
    lines = geo.lines(key, "svg-label-soft")
    for i, line in enumerate(lines):  # rows of their own, under the axis's caption
        parts.append(svg.text(x0, y + 60 + LABEL_H * i, line, class_="svg-label-soft"))
    return svg.document(geo.width, y + 66 + LABEL_H * (len(lines) - 1), parts,
                        label=f"Timeline of one training step with {_degrees(lay, enabled)}")


def render(state, narrow=False):
    enabled = _enabled(state)
    step = _step(state, enabled)
    reference = _step(state, frozenset(DEFAULT_ON))  # the default toggles, same model, GPUs, batch, network
    lay, mem = step.layout, step.memory
    same = enabled == frozenset(DEFAULT_ON)
    degrees = _degrees(lay, enabled)
    drawing = _drawing(state, step, reference, enabled, NARROW if narrow else WIDE)
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
        Readout("memory_per_gpu_bytes", f"memory per GPU (model state at {model.MODEL_STATE_BYTES_PER_PARAM:g} B per "
                "parameter, plus activations)", fit, mem.total_bytes, None if mem.fits else "warn"),
        Readout("global_batch_tokens", "global batch, the same for every toggle",
                f"{state['batch']:,} sequences, {fmt.si_count(tokens)} tokens", tokens),
        Readout("replica_sequences", "sequences per replica" + (" (the busiest)" if step.uneven else ""),
                fmt.count(step.replica_sequences), step.replica_sequences),
        Readout("microbatches", "microbatches per replica, gradients accumulated", _microbatches(step),
                step.microbatches),
        Readout("reference_step_s", "the default layout's step (DP, TP, PP)", fmt.duration(reference.step_time_s),
                reference.step_time_s),
    ]
    if lay.pp > 1:
        readouts.append(Readout("bubble_s", "pipeline bubble (idle)", fmt.duration(step.bubble_s), step.bubble_s, "idle"))
    notes = []
    notes.append(("This layout does not fit: it needs " if not mem.fits else "Memory: ")
                 + f"{fmt.data_size(mem.total_bytes)} on each GPU of {fmt.data_size(mem.hbm_bytes)}, model state at "
                 f"{model.MODEL_STATE_BYTES_PER_PARAM:g} bytes per parameter as Megatron-LM counts it "
                 f"({model.LEDGER.recipe}) plus the activations of the microbatches in flight "
                 f"({'up to one per pipeline stage' if lay.pp > 1 else 'one at a time'})"
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
