"""Figure 15: four pipeline schedules on one clock, drawn from the event-level simulation."""
import math
from collections import namedtuple
from functools import lru_cache
from operator import itemgetter

from figures import svg
from figures.contract import Readout, Slider, View
from models import fmt, pipeline

NUMBER = 15
TITLE = "Four pipeline schedules on one clock"
CAPTION = (
    "GPipe, 1F1B, interleaved 1F1B and zero-bubble (ZB-H1) run the same P stages and m microbatches on one "
    "shared clock, so the idle gaps, the bubble, compare directly."
)
NOTE = (
    "Light slate bars are forward passes, dark slate the backward passes, teal slate the weight-gradient half that "
    "ZB-H1 defers; the hatched grey gaps are the bubble; "
    "each bar carries its microbatch number where it fits. A row is one device, and the lengths of the four "
    "panels are to scale with each other."
)
TRIES = (
    ("8 stages, 8 microbatches", {"P": 8, "m": 8}),
    ("8 stages, 64 microbatches", {"P": 8, "m": 64}),
    ("Interleave 4 chunks", {"P": 8, "m": 8, "v": 4}),
    ("A single microbatch", {"m": 1}),
)

CONTROLS = (
    Slider("P", "Stages P", min=2, max=16, step=1, default=4),
    Slider("m", "Microbatches m", min=1, max=64, step=1, default=8),
    Slider("v", "Chunks per device v (interleaved)", min=1, max=4, step=1, default=2),
)
PRIMARY = ("P", "m")

WIDTH, LEFT, RIGHT = 720, 64, 12  # drawn 1:1 in the article's figure column (labels stay 11 px)
PANEL_GAP, HEADER = 16, 20
LABEL_PITCH_PX = 13  # closest two "stage k" labels may sit, centre to centre
THINNED_STAGE_LABELS = 6
# Axis labels fall on round numbers of forward passes, at most 10 of them (each <text>
# costs Chromium ~20 us of layout per redraw); a step is at most 2.5x the one before it,
# so at least 5 labels show.
NICE_TICK_STEPS = (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000)
MAX_TICK_LABELS = 10
MAX_LABELLED_OPS = 1200  # beyond this no bar is 13 px wide: skip the label pass entirely
# The figure's clock: a forward pass takes 12 ticks, so every op of every schedule (1, 2,
# 1/v or 2/v forward passes long, v <= 4) starts and ends on a whole tick: the times are
# exact and the Gantt paths hold short integers.
TICKS_PER_FORWARD = 12


# The geometry of one drawing: in the article's figure column (drawn 1:1, labels stay
# 11 px), or in a phone's (320 units, its smallest label 11): there each schedule's title
# and its peak take two lines, stages are named "s0", fewer ticks, the caption two lines.
_Layout = namedtuple("_Layout", "width left right header stage_name max_ticks caption")
_LAYOUTS = {
    False: _Layout(WIDTH, LEFT, RIGHT, HEADER, "stage {}", MAX_TICK_LABELS,
                   ("time, in forward passes of one microbatch on one stage",)),
    True: _Layout(320, 30, 12, 34, "s{}", 6, ("time, in forward passes", "of one microbatch on one stage")),
}
# a phone on its side (render(short=True)): two such columns, lanes as short as 2 units a
# stage, so a title's second line keeps a little more room over its first stage's name
_LAYOUTS["short"] = _LAYOUTS[True]._replace(width=350, header=38)
LINE = 14  # between two lines of a title or caption
SHORT_COLUMN, SHORT_GAP, SHORT_LANES = 350, 20, 60  # a phone on its side: two columns (render(short=True))


@lru_cache(maxsize=16)  # the readouts and the panel ask for the same timeline: validate it once
def _simulate(name, stages, microbatches, chunks):
    return pipeline.simulate(name, stages, microbatches, chunks,
                             forward_s=TICKS_PER_FORWARD, backward_s=2 * TICKS_PER_FORWARD)


def _simulate_all(state):
    timelines, errors = {}, {}
    for name in pipeline.SCHEDULES:
        try:
            timelines[name] = _simulate(name, state["P"], state["m"], _chunks(name, state))
        except ValueError as error:
            errors[name] = str(error)
    return timelines, errors


def _chunks(name, state):
    return state["v"] if name == "interleaved" else 1


def _named_stages(stages, row_height):
    """The lanes that get a "stage k" label: every lane if rows are tall enough for the
    11 px labels not to touch, else every k-th lane, at most THINNED_STAGE_LABELS of
    them; always the first and the last. Each <text> costs Chromium ~20 us of layout
    per redraw, and the tightest views are the largest."""
    stride = math.ceil(LABEL_PITCH_PX / row_height)
    if stride > 1:
        stride = max(stride, math.ceil(stages / THINNED_STAGE_LABELS))
    # every stride-th lane that is a full stride short of the last, then the last
    return list(range(0, max(stages - stride, 1), stride)) + [stages - 1]


PASS_COLOUR = {"F": "forward", "B": "backward", "W": "weight"}  # palette keys of the three passes
_LANE_ROW = itemgetter(0, 3, 4)  # a Passes' (stage, duration_s, starts), as svg.lanes reads a row


@lru_cache(maxsize=64)
def _panel(name, stages, microbatches, chunks, top, row_height, px_per_tick, narrow=False, key=False):
    """One schedule's Gantt panel as SVG markup (``key``: its idle lanes, the bubble, carry
    the drawing's point). Cached: moving v redraws only the interleaved panel, and
    dragging a slider back over old values costs nothing."""
    layout = _LAYOUTS[narrow]
    left = layout.left
    timeline = _simulate(name, stages, microbatches, chunks)
    title = f"{pipeline.SCHEDULE_LABELS[name]} — bubble {fmt.percent(timeline.bubble_ratio)}"
    peak = f"peak {fmt.decimal(timeline.peak_stashes)} microbatch stashes (stage {timeline.worst_stage})"
    lanes_top = top + layout.header
    width = timeline.makespan * px_per_tick
    parts = [
        svg.texts([(0, top + 14, f"{title}, {peak}")] if not narrow else [(0, top + 14, title), (0, top + 14 + LINE, peak)],
                  class_="svg-label"),
        svg.boxes(((left, lanes_top + stage * row_height, width, row_height) for stage in range(stages)),
                  class_=f"fill-idle {svg.KEY}" if key else "fill-idle"),
        svg.texts(((left - 6, lanes_top + (stage + 0.5) * row_height + 4, layout.stage_name.format(stage))
                   for stage in _named_stages(stages, row_height)), class_="svg-label-soft", text_anchor="end"),
    ]
    passes = timeline.passes
    # Passes come by (stage, kind, chunk): every colour's rows, one per stage, are one
    # stride-`colours` slice, cut without a Python step per pass.
    colours = len(passes) // stages
    for kind, chunk, first in sorted((p.kind, p.chunk, j) for j, p in enumerate(passes[:colours])):
        rows = map(_LANE_ROW, passes[first::colours])  # (stage, duration, starts) of each stage
        parts.append(svg.lanes(rows, x=left, y=lanes_top, x_scale=px_per_tick, lane_height=row_height,
                               class_=f"op op-{kind} op-chunk-{chunk} stroke-{PASS_COLOUR[kind]}"))
    if row_height >= 11 and len(passes) * microbatches <= MAX_LABELLED_OPS:
        for kind, chunk in sorted({(p.kind, p.chunk) for p in passes}):  # a path per bar colour: numerals in its ink
            numbered = [  # microbatch numbers centred on every bar wide enough to hold them
                ([centre + start * px_per_tick for start in starts],
                 lanes_top + (stage + 0.5) * row_height, range(1, microbatches + 1))
                for stage, op, part, duration, starts in passes
                if op == kind and part == chunk and duration * px_per_tick >= 13
                for centre in (left + duration / 2 * px_per_tick,)
            ]
            if numbered:
                parts.append(svg.numerals(numbered, class_=f"op-label op-chunk-{chunk} on-{PASS_COLOUR[kind]}"))
    return "".join(parts)


def _drawing(state, timelines, errors, narrow):
    """The four panels stacked on one time axis, laid out for the page's width; the first
    schedule's bubble is the drawing's key."""
    parts, height = _stack(state, timelines, errors, narrow)
    return svg.document(
        _LAYOUTS[narrow].width, height, parts,
        label=f"Gantt charts of four pipeline schedules for P={state['P']} stages and m={state['m']} microbatches",
    )


def _short_drawing(state, timelines, errors):
    """A phone on its side: two columns of two schedules, each laid out as a phone's column
    SHORT_COLUMN wide with lanes at most SHORT_LANES tall, on one clock."""
    left, left_height = _stack(state, timelines, errors, "short", pipeline.SCHEDULES[:2], SHORT_COLUMN, SHORT_LANES)
    right, right_height = _stack(state, timelines, errors, "short", pipeline.SCHEDULES[2:], SHORT_COLUMN, SHORT_LANES)
    return svg.document(
        2 * SHORT_COLUMN + SHORT_GAP, max(left_height, right_height),
        left + [svg.group(right, transform=f"translate({SHORT_COLUMN + SHORT_GAP} 0)")],
        label=f"Gantt charts of four pipeline schedules for P={state['P']} stages and m={state['m']} microbatches",
    )


def _stack(state, timelines, errors, narrow, schedules=pipeline.SCHEDULES, width=None, lanes=128.0):
    """``schedules``' panels stacked over one time axis (the longest of all four sets the
    clock), ``width`` wide, each panel's lanes at most ``lanes`` tall: ``(parts, height)``."""
    layout = _LAYOUTS[narrow]
    stages, left, right, width = state["P"], layout.left, layout.right, width or layout.width
    longest = max(t.makespan for t in timelines.values()) / TICKS_PER_FORWARD  # in forward passes
    px_per_unit = (width - left - right) / longest
    row_height = max(6.0 if lanes >= 128 else 2.0, min(16.0, lanes / stages))
    parts, top = [], 0.0
    for name in schedules:
        if name in errors:
            message = f"{pipeline.SCHEDULE_LABELS[name]}: {errors[name]}"
            lines = _wrap(message, width - left, "svg-label") if narrow else [message]
            parts.append(svg.texts(((left, top + 14 + i * LINE, line) for i, line in enumerate(lines)), class_="svg-label"))
            top += layout.header + (len(lines) - 1) * LINE * bool(narrow) + PANEL_GAP
            continue
        parts.append(_panel(name, stages, state["m"], _chunks(name, state), top, row_height, px_per_unit / TICKS_PER_FORWARD,
                            narrow, name == pipeline.SCHEDULES[0]))
        top += layout.header + stages * row_height + PANEL_GAP
    axis_y = top
    tick = next(step for step in NICE_TICK_STEPS if longest / step < layout.max_ticks)
    ticks = [(left + t * px_per_unit, t) for t in range(0, int(longest) + 1, tick)]
    parts.append(svg.segments([(left, axis_y, width - right, axis_y)] + [(x, axis_y, x, axis_y + 4) for x, _ in ticks],
                              class_="svg-axis"))
    parts.append(svg.texts(((x, axis_y + 16, t) for x, t in ticks), class_="svg-label-soft", text_anchor="middle"))
    parts.append(svg.texts(((width - right, axis_y + 32 + i * LINE, line) for i, line in enumerate(layout.caption)),
                           class_="svg-label-soft", text_anchor="end"))
    return parts, axis_y + 38 + (len(layout.caption) - 1) * LINE


def _wrap(text, width, class_):
    """``text`` broken at spaces into lines no wider than ``width`` drawing units."""
    return svg.wrap(text, width, *svg.label_size(class_))


def render(state, narrow=False, short=False):
    stages = state["P"]
    timelines, errors = _simulate_all(state)
    drawing = _short_drawing(state, timelines, errors) if short and not narrow else _drawing(state, timelines, errors, narrow)
    readouts = []
    for name in pipeline.SCHEDULES:
        label = pipeline.SCHEDULE_LABELS[name]
        if name in errors:
            readouts.append(Readout(f"bubble_{name}", f"{label} bubble", "not defined here"))
            continue
        timeline = timelines[name]
        readouts.append(Readout(f"bubble_{name}", f"{label} bubble", fmt.percent(timeline.bubble_ratio), timeline.bubble_ratio))
        readouts.append(Readout(f"stashes_{name}", f"{label} peak stashes", fmt.decimal(timeline.peak_stashes), timeline.peak_stashes))
    notes = [f"{pipeline.SCHEDULE_LABELS[n]}: {e}" for n, e in errors.items()]
    group = pipeline.interleaved_group_size(stages, state["m"])
    if state["v"] > 1 and state["m"] < stages:
        notes.append(
            f"Interleaved: with fewer microbatches than stages (m = {state['m']} < P = {stages}) Megatron-LM "
            "refuses to interleave; the simulation runs them as one group, and its bubble exceeds (P−1)/(v·m+P−1)."
        )
    elif state["v"] > 1 and group != stages:
        notes.append(
            f"Interleaved: Megatron-LM needs m to be a multiple of P (m = {state['m']}, P = {stages}); "
            f"this simulation runs microbatches in groups of {group} instead of {stages}, which keeps the "
            "bubble at (P−1)/(v·m+P−1) but holds more activations."
        )
    note = " ".join(notes)
    alt = (
        f"Four Gantt charts on one time axis, P = {stages} stages by m = {state['m']} microbatches "
        f"(interleaved with v = {state['v']} chunks per device). Bubble: "
        + "; ".join(f"{pipeline.SCHEDULE_LABELS[n]} " + (fmt.percent(t.bubble_ratio) if n in timelines else "not defined")
                    for n in pipeline.SCHEDULES for t in (timelines.get(n),))
        + "."
    )
    return View(svg=drawing, readouts=tuple(readouts), note=note, alt=alt)
