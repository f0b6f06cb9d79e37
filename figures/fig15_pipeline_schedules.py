"""Figure 15: four pipeline schedules on one clock, drawn from the event-level simulation."""
from figures import fmt, svg
from figures.contract import Readout, Slider, View
from models import pipeline

NUMBER = 15
TITLE = "Four pipeline schedules on one clock"
CAPTION = (
    "GPipe, 1F1B, interleaved 1F1B and zero-bubble (ZB-H1) for the same P stages and m microbatches, on a shared "
    "time axis. Blue is forward, red backward, teal the deferred weight-gradient half; gaps are the bubble. "
    "Try P = 8, m = 8, then drag m towards 64 and watch the bubble fall."
)

CONTROLS = (
    Slider("P", "Stages P", min=2, max=16, step=1, default=4),
    Slider("m", "Microbatches m", min=1, max=64, step=1, default=8),
    Slider("v", "Chunks per device v (interleaved)", min=1, max=4, step=1, default=2),
)

WIDTH, LEFT, RIGHT = 960, 112, 12
PANEL_GAP, HEADER = 16, 20
TICKS = 12  # clock ticks per forward pass: op times are multiples of 1/v (v <= 4) and 1/2, so bars land on whole ticks


def _simulate_all(state):
    timelines, errors = {}, {}
    for name in pipeline.SCHEDULES:
        chunks = state["v"] if name == "interleaved" else 1
        try:
            timelines[name] = pipeline.simulate(name, state["P"], state["m"], chunks)
        except ValueError as error:
            errors[name] = str(error)
    return timelines, errors


def _panel(name, timeline, error, top, row_height, px_per_unit, stages):
    label = pipeline.SCHEDULE_LABELS[name]
    if error:
        return [svg.text(LEFT, top + 14, f"{label}: {error}", class_="svg-label")], HEADER
    header = (
        f"{label} — bubble {fmt.percent(timeline.bubble_ratio)}, "
        f"peak {timeline.peak_stashes:g} microbatch stashes (stage {timeline.worst_stage})"
    )
    parts = [svg.text(0, top + 14, header, class_="svg-label")]
    lanes_top = top + HEADER
    for stage in range(stages):
        y = lanes_top + stage * row_height
        parts.append(svg.rect(LEFT, y, timeline.makespan * px_per_unit, row_height, class_="svg-lane"))
        if row_height >= 9 or stage in (0, stages - 1):
            parts.append(svg.text(LEFT - 6, y + row_height / 2 + 4, f"stage {stage}", class_="svg-label-soft", text_anchor="end"))
    spans = _bars_by_kind(timeline.ops)
    labels = []
    if min(op.end - op.start for op in timeline.ops) * px_per_unit >= 13 and row_height >= 11:
        for op in timeline.ops:
            x = LEFT + (op.start + op.end) / 2 * px_per_unit
            labels.append(svg.text(x, lanes_top + (op.stage + 0.5) * row_height, op.microbatch + 1, class_="op-label"))
    for (kind, chunk), bars in sorted(spans.items()):
        parts.append(svg.lanes(bars, x=LEFT, y=lanes_top, x_scale=px_per_unit / TICKS, lane_height=row_height,
                               class_=f"op op-{kind} op-chunk-{chunk}"))
    parts.extend(labels)
    return parts, HEADER + stages * row_height


def _bars_by_kind(ops):
    """Ops as whole-tick bars per (kind, chunk); back-to-back bars of one kind on one lane
    merge (they look the same once drawn, and the microbatch labels tell them apart)."""
    bars = {}
    for op in ops:
        key = (op.kind, op.chunk)
        start, end = int(op.start * TICKS + 0.5), int(op.end * TICKS + 0.5)
        same = bars.get(key)
        if same is None:
            bars[key] = [[start, end - start, op.stage]]
            continue
        last = same[-1]
        if last[2] == op.stage and last[0] + last[1] == start:
            last[1] = end - last[0]
        else:
            same.append([start, end - start, op.stage])
    return bars


def render(state):
    stages = state["P"]
    timelines, errors = _simulate_all(state)
    longest = max(t.makespan for t in timelines.values())
    px_per_unit = (WIDTH - LEFT - RIGHT) / longest
    row_height = max(6.0, min(16.0, 128.0 / stages))
    parts, top = [], 0.0
    for name in pipeline.SCHEDULES:
        panel, height = _panel(name, timelines.get(name), errors.get(name), top, row_height, px_per_unit, stages)
        parts.extend(panel)
        top += height + PANEL_GAP
    axis_y = top
    parts.append(svg.line(LEFT, axis_y, WIDTH - RIGHT, axis_y, class_="svg-axis"))
    tick = max(1, round(longest / 12))
    for t in range(0, int(longest) + 1, tick):
        x = LEFT + t * px_per_unit
        parts.append(svg.line(x, axis_y, x, axis_y + 4, class_="svg-axis"))
        parts.append(svg.text(x, axis_y + 16, t, class_="svg-label-soft", text_anchor="middle"))
    parts.append(svg.text(0, axis_y + 16, "time (forward passes)", class_="svg-label-soft"))
    drawing = svg.document(
        WIDTH, axis_y + 24, parts,
        label=f"Gantt charts of four pipeline schedules for P={stages} stages and m={state['m']} microbatches",
    )
    readouts = []
    for name in pipeline.SCHEDULES:
        label = pipeline.SCHEDULE_LABELS[name]
        if name in errors:
            readouts.append(Readout(f"bubble_{name}", f"{label} bubble", "not defined here"))
            continue
        timeline = timelines[name]
        readouts.append(Readout(f"bubble_{name}", f"{label} bubble", fmt.percent(timeline.bubble_ratio), timeline.bubble_ratio))
        readouts.append(Readout(f"stashes_{name}", f"{label} peak stashes", f"{timeline.peak_stashes:g}", timeline.peak_stashes))
    note = " ".join(f"{pipeline.SCHEDULE_LABELS[n]}: {e}" for n, e in errors.items())
    return View(svg=drawing, readouts=tuple(readouts), note=note)
