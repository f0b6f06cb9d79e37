"""Figure 09: one FSDP step drawn twice, without and with prefetch, from models.fsdp's schedule."""
from functools import lru_cache

from figures import svg
from figures.contract import Readout, Slider, Toggle, View
from models import fmt, fsdp

NUMBER = 9
TITLE = "FSDP with and without prefetch"
CAPTION = (
    "The same FSDP step twice, one unit per layer: above, each unit's AllGather waits for the previous unit's "
    "compute; below, it is issued while that compute runs."
)
NOTE = (
    "Purple bars are collectives on the wire (thick: AllGather; thin: ReduceScatter), light slate forward and dark slate backward "
    "compute (twice as long), and dashed red marks compute waiting on the wire. The strip under each timeline "
    "counts the units gathered in full. The Prefetch switch picks the timeline the readouts describe."
)
TRIES = (
    ("Gathers slower than compute", {"gather_ms": 20}),
    ("No reshard after forward", {"reshard": False}),
    ("128 units", {"units": 128}),
    ("128 units, no prefetch", {"units": 128, "prefetch": False}),
)

TIME_STOPS = (0.5, 1, 2, 5, 10, 20, 50, 100)  # milliseconds, 1-2-5 per decade
CONTROLS = (
    Slider("units", "FSDP units (layers)", stops=(1, 2, 4, 8, 16, 32, 64, 128), default=8),
    Slider("compute_ms", "Forward compute per unit", stops=TIME_STOPS, default=10, unit="ms"),
    Slider("gather_ms", "AllGather per unit", stops=TIME_STOPS, default=5, unit="ms"),
    Toggle("prefetch", "Prefetch (readouts follow this row)", default=True),
    Toggle("reshard", "Reshard after forward", default=True),
)

WIDTH, LEFT, RIGHT, PEAK_LABEL = 640, 96, 8, 58
LANE, STRIP, HEADER, GAP = 14, 26, 30, 12
PANEL = HEADER + 2 * LANE + 4 + STRIP
ROWS = ((False, "Without prefetch"), (True, "With prefetch"))


@lru_cache(maxsize=32)
def _step(units, compute_ms, gather_ms, prefetch, reshard):
    return fsdp.fsdp_lanes(units, compute_ms / 1e3, gather_ms / 1e3, prefetch=prefetch, reshard_after_forward=reshard)


LANE_OF = {"allgather": 0, "reducescatter": 0, "compute": 1}


def _timeline(step, top, px_per_s, peak_scale, chosen, title):
    """One row: header, wire lane, compute lane, gathered-units strip."""
    resident = step.resident
    lanes_top = top + HEADER
    span = step.step_time_s * px_per_s
    header = (f"{title}: step {fmt.duration(step.step_time_s)}, compute waits "
              f"{fmt.duration(step.exposed_comm_s)}, peak {resident.peak} gathered "
              f"unit{'s' if resident.peak != 1 else ''}")
    parts = [
        svg.text(0, top + 18, header + ("  \u25c0 readouts" if chosen else ""),
                 class_="svg-label" if chosen else "svg-label-soft", font_weight="600" if chosen else None),
        svg.boxes(((LEFT, lanes_top + i * LANE, span, LANE) for i in (0, 1)), class_="svg-lane"),
        svg.texts(((LEFT - 6, lanes_top + LANE * (i + 0.5) + 4, name) for i, name in enumerate(("wire", "compute"))),
                  class_="svg-label-soft", text_anchor="end"),
        svg.text(LEFT - 6, lanes_top + 2 * LANE + 4 + STRIP / 2 + 4, "gathered", class_="svg-label-soft", text_anchor="end"),
    ]
    place = dict(x=LEFT, y=lanes_top, x_scale=px_per_s, lane_height=LANE)
    for kind, phase, duration, starts in step.lanes:
        if starts:
            colour = "comm" if kind != "compute" else phase
            thin = kind == "reducescatter"
            parts.append(svg.lanes(((LANE_OF[kind], duration, starts),), fill_ratio=0.35 if thin else 0.8,
                                   class_=f"stroke-{colour}", **place))
    parts.append(svg.segments(((LEFT + a * px_per_s, lanes_top + 1.5 * LANE, LEFT + b * px_per_s, lanes_top + 1.5 * LANE)
                               for a, b in step.idle), class_="stroke-exposed", stroke_width=4, stroke_dasharray="3 2"))
    _, _, forward, forward_starts = step.lanes[1]
    _, _, backward, backward_starts = step.lanes[3]
    if forward * px_per_s >= 13:  # unit numbers on compute bars wide enough to hold them
        units = len(forward_starts)
        y = lanes_top + 1.5 * LANE
        parts.append(svg.numerals((([LEFT + (t + forward / 2) * px_per_s for t in forward_starts], y, range(1, units + 1)),),
                                  class_="op-label on-forward"))
        parts.append(svg.numerals((([LEFT + (t + backward / 2) * px_per_s for t in backward_starts], y, range(units, 0, -1)),),
                                  class_="op-label on-backward"))
    base = lanes_top + 2 * LANE + 4 + STRIP
    parts.append(svg.step_area(resident.curve, step.step_time_s, x=LEFT, y=base, x_scale=px_per_s,
                               y_scale=(STRIP - 4) / peak_scale, class_="fill-buffers"))  # gathered copies of the weights
    parts.append(svg.segments(((LEFT, base, LEFT + span, base),), class_="svg-axis"))
    parts.append(svg.text(LEFT + span + 4, base - resident.peak * (STRIP - 4) / peak_scale + 9, f"peak {resident.peak}",
                          class_="svg-label-soft"))
    return parts


def render(state):
    args = (state["units"], state["compute_ms"], state["gather_ms"])
    runs = {prefetch: _step(*args, prefetch, state["reshard"]) for prefetch, _ in ROWS}
    longest = max(step.step_time_s for step in runs.values())
    px_per_s = (WIDTH - LEFT - RIGHT - PEAK_LABEL) / longest
    peak_scale = max(2, *(step.resident.peak for step in runs.values()))
    parts = []
    for index, (prefetch, title) in enumerate(ROWS):
        parts += _timeline(runs[prefetch], index * (PANEL + GAP), px_per_s, peak_scale, prefetch == state["prefetch"], title)
    axis_y = 2 * PANEL + GAP + 8
    parts.append(svg.time_axis(LEFT, LEFT + longest * px_per_s, axis_y, longest, "time in the step, {unit}", most=7))
    step, other = runs[state["prefetch"]], runs[not state["prefetch"]]
    label = (f"Two FSDP timelines of {state['units']} units, {fmt.decimal(state['compute_ms'])} ms forward compute and "
             f"{fmt.decimal(state['gather_ms'])} ms AllGather per unit")
    drawing = svg.document(WIDTH, axis_y + 46, parts, label=label)
    units_text = lambda n: f"{n} unit" if n == 1 else f"{n} units"
    readouts = (
        Readout("step_time_s", "step time", fmt.duration(step.step_time_s), step.step_time_s),
        Readout("exposed_comm_s", "compute waiting on the wire", fmt.duration(step.exposed_comm_s), step.exposed_comm_s, "exposed"),
        Readout("peak_unsharded_units", "peak gathered units", units_text(step.resident.peak), step.resident.peak, "buffers"),
        Readout("comm_busy_s", "time on the wire", fmt.duration(step.comm_busy_s), step.comm_busy_s, "comm"),
        Readout("other_step_time_s", f"step time {'without' if state['prefetch'] else 'with'} prefetch",
                fmt.duration(other.step_time_s), other.step_time_s),
    )
    alt = (
        f"{label}, reshard after forward {'on' if state['reshard'] else 'off'}. Without prefetch the step takes "
        f"{fmt.duration(runs[False].step_time_s)} and compute waits {fmt.duration(runs[False].exposed_comm_s)}, with at most "
        f"{units_text(runs[False].resident.peak)} gathered; with prefetch {fmt.duration(runs[True].step_time_s)}, compute waits "
        f"{fmt.duration(runs[True].exposed_comm_s)}, at most {units_text(runs[True].resident.peak)} gathered."
    )
    return View(svg=drawing, readouts=readouts, alt=alt)
