"""Figure 09: one FSDP step drawn twice, without and with prefetch, from models.fsdp's schedule."""
from functools import lru_cache
from typing import NamedTuple

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
PRIMARY = ("units", "gather_ms")  # how many gathers there are, and how the wire compares with compute

LANE, GAP = 14, 12
ROWS = ((False, "Without prefetch"), (True, "With prefetch"))


class _Layout(NamedTuple):
    """The drawing's geometry: one per width (a wide screen, a phone's column)."""
    width: float
    left: float  # the lane names' margin
    right: float
    peak_label: float  # room right of the longest timeline for its "peak N"
    strip: float  # the gathered-units strip's height
    header_width: float  # a timeline's header wraps onto lines this wide (0: one line)
    ticks: int  # at most this many on the time axis

    @property
    def lanes_width(self):
        return self.width - self.left - self.right - self.peak_label


WIDE = _Layout(640, 96, 8, 58, 26, 0, 7)
# A phone: 320 units with 11-unit labels. The header wraps, each strip's peak is named in the
# margin under "gathered", and the time axis gets fewer ticks.
NARROW = _Layout(320, 62, 12, 0, 30, 320, 5)


@lru_cache(maxsize=32)
def _step(units, compute_ms, gather_ms, prefetch, reshard):
    return fsdp.fsdp_lanes(units, compute_ms / 1e3, gather_ms / 1e3, prefetch=prefetch, reshard_after_forward=reshard)


LANE_OF = {"allgather": 0, "reducescatter": 0, "compute": 1}


def _header(title, step, chosen, layout):
    """A timeline's lines of header: its name, step time, exposed wait and peak; one line on
    a wide screen. On a phone the name takes a line of its own and the rest wraps at its
    commas. The row the readouts describe is in bold ink."""
    peak = step.resident.peak
    facts = (f"step {fmt.duration(step.step_time_s)}", f"compute waits {fmt.duration(step.exposed_comm_s)}",
             f"peak {peak} gathered unit{'s' if peak != 1 else ''}")
    mark = "  \u25c0 readouts" if chosen else ""
    style = dict(class_="svg-label" if chosen else "svg-label-soft", font_weight="600" if chosen else None)
    if not layout.header_width:
        return [f"{title}: {', '.join(facts)}{mark}"], style
    size = svg.LABEL_SIZES[style["class_"]]
    lines = [title + mark, facts[0]]
    for fact in facts[1:]:  # whole facts to a line, as many as fit
        if svg.text_width(f"{lines[-1]}, {fact}", size, chosen) <= layout.header_width:
            lines[-1] += f", {fact}"
        else:
            lines[-1] += ","
            lines.append(fact)
    return lines, style


def _timeline(step, top, px_per_s, peak_scale, chosen, title, layout):
    """One row: header, wire lane, compute lane, gathered-units strip; returns its parts and bottom."""
    left, strip = layout.left, layout.strip
    resident = step.resident
    lines, style = _header(title, step, chosen, layout)
    if len(lines) == 1:
        header, lanes_top = [svg.text(0, top + 18, lines[0], **style)], top + 30
    else:
        header, lanes_top = [svg.texts(((0, top + 13 + 15 * i, line) for i, line in enumerate(lines)), **style)], top + 15 * len(lines) + 8
    span = step.step_time_s * px_per_s
    parts = header + [
        svg.boxes(((left, lanes_top + i * LANE, span, LANE) for i in (0, 1)), class_="svg-lane"),
        svg.texts(((left - 6, lanes_top + LANE * (i + 0.5) + 4, name) for i, name in enumerate(("wire", "compute"))),
                  class_="svg-label-soft", text_anchor="end"),
    ]
    strip_top = lanes_top + 2 * LANE + 4
    peak_text = f"peak {resident.peak}"
    if layout.peak_label:
        parts.append(svg.text(left - 6, strip_top + strip / 2 + 4, "gathered", class_="svg-label-soft", text_anchor="end"))
    else:  # no room right of the strip: its peak is named under its name
        parts.append(svg.texts(((left - 6, strip_top + 11, "gathered"), (left - 6, strip_top + 26, peak_text)),
                               class_="svg-label-soft", text_anchor="end"))
    place = dict(x=left, y=lanes_top, x_scale=px_per_s, lane_height=LANE)
    for kind, phase, duration, starts in step.lanes:
        if starts:
            colour = "comm" if kind != "compute" else phase
            thin = kind == "reducescatter"
            parts.append(svg.lanes(((LANE_OF[kind], duration, starts),), fill_ratio=0.35 if thin else 0.8,
                                   class_=f"stroke-{colour}", **place))
    # the point: compute waiting on the wire, the gaps prefetch removes
    parts.append(svg.segments(((left + a * px_per_s, lanes_top + 1.5 * LANE, left + b * px_per_s, lanes_top + 1.5 * LANE)
                               for a, b in step.idle), class_=f"stroke-exposed {svg.KEY}", stroke_width=4,
                              stroke_dasharray="3 2"))
    _, _, forward, forward_starts = step.lanes[1]
    _, _, backward, backward_starts = step.lanes[3]
    if forward * px_per_s >= 13:  # unit numbers on compute bars wide enough to hold them
        units = len(forward_starts)
        y = lanes_top + 1.5 * LANE
        parts.append(svg.numerals((([left + (t + forward / 2) * px_per_s for t in forward_starts], y, range(1, units + 1)),),
                                  class_="op-label on-forward"))
        parts.append(svg.numerals((([left + (t + backward / 2) * px_per_s for t in backward_starts], y, range(units, 0, -1)),),
                                  class_="op-label on-backward"))
    base = strip_top + strip
    parts.append(svg.step_area(resident.curve, step.step_time_s, x=left, y=base, x_scale=px_per_s,
                               y_scale=(strip - 4) / peak_scale, class_="fill-buffers"))  # gathered copies of the weights
    parts.append(svg.segments(((left, base, left + span, base),), class_="svg-axis"))
    if layout.peak_label:
        parts.append(svg.text(left + span + 4, base - resident.peak * (strip - 4) / peak_scale + 9, peak_text,
                              class_="svg-label-soft"))
    return parts, base


def render(state, narrow=False):
    layout = NARROW if narrow else WIDE
    args = (state["units"], state["compute_ms"], state["gather_ms"])
    runs = {prefetch: _step(*args, prefetch, state["reshard"]) for prefetch, _ in ROWS}
    longest = max(step.step_time_s for step in runs.values())
    px_per_s = layout.lanes_width / longest
    peak_scale = max(2, *(step.resident.peak for step in runs.values()))
    parts, bottom = [], -GAP
    for prefetch, title in ROWS:
        row, bottom = _timeline(runs[prefetch], bottom + GAP, px_per_s, peak_scale, prefetch == state["prefetch"], title,
                                layout)
        parts += row
    axis_y = bottom + 8
    right = layout.left + longest * px_per_s
    if narrow:  # tick labels kept inside the drawing
        parts.append(svg.time_axis(layout.left, right, axis_y, longest, "time in the step, {unit}", layout.ticks,
                                   width=layout.width))
    else:
        parts.append(svg.time_axis(layout.left, right, axis_y, longest, "time in the step, {unit}", most=layout.ticks))
    step, other = runs[state["prefetch"]], runs[not state["prefetch"]]
    label = (f"Two FSDP timelines of {state['units']} units, {fmt.decimal(state['compute_ms'])} ms forward compute and "
             f"{fmt.decimal(state['gather_ms'])} ms AllGather per unit")
    drawing = svg.document(layout.width, axis_y + 46, parts, label=label)
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
