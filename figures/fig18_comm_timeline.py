"""Figure 18: one device's training step, with a lane per strategy showing where its
collectives fire and which part of them the compute has to wait for."""
from figures import svg
from figures.contract import Readout, Select, Slider, Toggle, View
from models import fmt, hardware, shapes, strategies
from models import step_timeline as model

NUMBER = 18
TITLE = "Where each strategy's communication sits"
CAPTION = (
    "One H100's training step, forward, backward, optimizer, with a lane per strategy you switch on. "
    "A thin bar is a collective in flight while compute continues; a tall red bar is time the compute "
    "waits for it. The default is Megatron-LM's layout for its 145.6B model (TP 8, PP 8, DP 24). "
    "Switch on context or expert parallelism and watch the red grow; switch tensor and pipeline parallelism "
    "off and see how much gradient traffic a whole backward pass can hide."
)

NETWORKS = ("ib_hdr", "ib_ndr", "ib_xdr", "roce_400gbe")
GPU_COUNTS = (8, 16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 8192, 16384)
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


def render(state):
    enabled = _enabled(state)
    step = model.step_timeline(state["params"], state["gpus"], enabled, link=state["link"])
    lay = step.layout
    scale = (X1 - X0) / step.step_time_s
    parts, y = [], 0.0
    # compute lane: one path per kind, each phase named once where it is wide enough
    where = "one device of the first pipeline stage" if lay.pp > 1 else "one device"
    parts.append(svg.text(X0, y + 12, f"Compute ({where})", class_="svg-label"))
    y += LABEL_H
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
        parts.append(svg.boxes(((X0, y, X1 - X0, LANE_H),), class_="svg-lane"))
        for kind, height, css in (("comm", 5, f"stroke-{COLOUR[axis]}"), ("exposed", LANE_H - 2, "stroke-exposed")):
            pairs = step.stretches(axis, kind)
            if pairs:  # thin: in flight while compute goes on; tall: the compute waits
                parts.append(svg.spans(_row(pairs, scale), y=y + LANE_H / 2, height=height, class_=css))
        y += LANE_H + GAP
    tick = next(t for t in TICK_STEPS if step.step_time_s / t <= 8)
    ticks = [i * tick for i in range(int(step.step_time_s / tick + 1e-9) + 1)]
    parts.append(svg.segments([(X0, y, X1, y)] + [(X0 + t * scale, y, X0 + t * scale, y + 4) for t in ticks], class_="svg-axis"))
    labelled = [(X0 + t * scale, y + 16, fmt.duration(t)) for t in ticks if (X1 - t * scale - X0) > 90]
    parts.append(svg.text(X0, y + 16, "0", class_="svg-label-soft"))
    parts.append(svg.texts(labelled[1:], class_="svg-label-soft", text_anchor="middle"))
    parts.append(svg.text(X1, y + 16, f"step {fmt.duration(step.step_time_s)}", class_="svg-label-soft", text_anchor="end"))
    degrees = _degrees(lay)
    drawing = svg.document(WIDTH, y + 22, parts, label=f"Timeline of one training step with {degrees}")
    readouts = [
        Readout("step_time_s", "step time", fmt.duration(step.step_time_s), step.step_time_s),
        Readout("exposed_comm_s", "communication the compute waits for", fmt.duration(step.exposed_comm_s),
                step.exposed_comm_s, "exposed" if step.exposed_comm_s > 0 else None),
        Readout("hidden_comm_s", "communication hidden under compute", fmt.duration(step.hidden_comm_s),
                step.hidden_comm_s),  # drawn thin, in each strategy's hue
        *(Readout(f"exposed_{axis}_s", f"waiting on {LANE_LABEL[axis]}", fmt.duration(step.exposed_s(axis)),
                  step.exposed_s(axis), COLOUR[axis]) for axis in model.AXES if axis in enabled),
        Readout("layout", "layout", degrees),
    ]
    if lay.pp > 1:
        readouts.append(Readout("bubble_s", "pipeline bubble (idle)", fmt.duration(step.bubble_s), step.bubble_s, "idle"))
    notes = []
    if lay.gpus_used < lay.gpus:
        notes.append(f"With no data axis on, only {fmt.gpus(lay.gpus_used)} of the {lay.gpus} hold the model; "
                     "turn on DP or FSDP to use the rest.")
    if "dp" in enabled and "fsdp" in enabled:
        notes.append(f"DP and FSDP together are HSDP: shards in groups of {lay.shard}, gradients reduced "
                     f"across {lay.replicas} replicas.")
    waits = ", ".join(f"{LANE_LABEL[a.axis]} {fmt.duration(a.exposed_s)}" for a in step.axes) or "nothing"
    alt = (
        f"Timeline of one device's step: {fmt.si_count(state['params'])} parameters, {degrees}, "
        f"{hardware.link(state['link']).name} between nodes. Forward {fmt.duration(step.forward_s)}, "
        f"backward {fmt.duration(step.backward_s)}, bubble {fmt.duration(step.bubble_s)}, optimizer "
        f"{fmt.duration(step.optimizer_s)}; the compute waits on {waits}; "
        f"{fmt.duration(step.hidden_comm_s)} of communication hides; the step takes {fmt.duration(step.step_time_s)}."
    )
    return View(svg=drawing, readouts=tuple(readouts), note=" ".join(notes), alt=alt)


def _degrees(lay):
    named = [("TP", lay.tp), ("CP", lay.cp), ("PP", lay.pp), ("DP", lay.data)]
    text = " x ".join(f"{name} {degree}" for name, degree in named if degree > 1) or "one GPU per model copy"
    experts = f", experts over {lay.ep} of those ranks" if lay.ep > 1 else ""
    return f"{text}{experts} on {fmt.gpus(lay.gpus_used)}"
