"""Figure 16: one rank's tokens routed to experts, capacity and drops, the two All-to-Alls, router collapse."""
import math
from collections import namedtuple

from figures import svg
from figures.contract import Button, Readout, Select, Slider, View
from models import experts, fmt

NUMBER = 16
TITLE = "Token routing, capacity, and the two all-to-alls"
CAPTION = (
    "One rank's tokens travel through the dispatch All-to-All to the k experts the router picked for each, fill "
    "them up to their capacity lines, and come back through the combine All-to-All."
)
NOTE = (
    "A dot stands for several tokens (the drawing says how many). Tokens that overflow an expert fall through its "
    "floor in red and ride the residual instead. Train one step moves the router as training would: with the "
    "balancing weight α at 0, a few experts soon swallow the batch."
)
TRIES = (
    ("An even router", {"skew": 0}),
    ("Even router, capacity 1.0", {"skew": 0, "cf": "1"}),
    ("No balancing, 20 steps", {"alpha": 0, "step": 20}),
    ("Collapsed, no capacity limit", {"alpha": 0, "step": 20, "cf": "none"}),
    ("Top-1 routing", {"k": 1}),
)

MAX_STEPS = 20
POWERS = tuple(2**i for i in range(9))  # 1 .. 256
CF_OPTIONS = (("1", "1.0"), ("1.1", "1.1"), ("1.25", "1.25"), ("1.5", "1.5"), ("2", "2.0"), ("none", "no limit (dropless)"))
HIDDEN = (1024, 2048, 4096, 5120, 6144, 7168, 8192, 12288, 16384)


def _advance(state):
    return {**state, "step": min(MAX_STEPS, state["step"] + 1)}


CONTROLS = (
    Slider("T", "Tokens per rank", stops=tuple(2**i for i in range(8, 18)), default=8192, format="{:,}".format),
    Slider("E", "Experts E", stops=POWERS[1:], default=64),
    Slider("k", "Experts per token k", min=1, max=8, step=1, default=2),
    Select("cf", "Capacity factor", CF_OPTIONS, default="1.25"),
    Slider("skew", "Router skew (bias spread)", stops=(0, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3), default=0.2),
    Slider("alpha", "Balancing weight α", stops=(0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1), default=0.01),
    Slider("step", "Training steps", min=0, max=MAX_STEPS, step=1, default=0),
    Button("advance", "Train one step", press=_advance),
    Slider("ep", "Expert-parallel ranks EP", stops=POWERS, default=8),
    Slider("h", "Hidden size h", stops=HIDDEN, default=4096, format="{:,}".format),
)
PRIMARY = ("cf", "skew")  # what fills the experts past their capacity lines, or not
GROUPS = (
    ("Tokens and experts", ("T", "E", "k")),
    ("Router training", ("alpha", "step", "advance")),
    ("All-to-All", ("ep", "h")),
)


def constrain(state):
    """k distinct experts per token and at least one expert per EP rank: k, EP <= E."""
    return {**state, "k": min(state["k"], state["E"]), "ep": min(state["ep"], state["E"])}


def limits(state):
    """The k and EP sliders' ranges: up to the experts."""
    return {"k": state["E"], "ep": state["E"]}


WIDTH, MARGIN = 720, 8
MAX_DRAWN_EXPERTS = 64  # beyond this a column is under 10 px: draw experts 0-63, count them all
PITCH, DOT = 4, 3  # a token dot and its spacing, px
MAX_ROWS = 54  # dot rows, kept and dropped
UNITS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000)
TOP = 104  # where the experts' boxes start, below the dispatch fan and the rank labels
LINE = 14  # between two lines of text

# The geometry of one drawing. Wide: the article's figure column, drawn 1:1. Narrow: a phone's
# column, 320 units (labels stay 11 px): every expert still in one row, the gaps between EP
# ranks together at most ``gaps`` units, and smaller dots (one stands for as many tokens as
# on a wide screen: the readouts say the same), the first of NARROW whose columns stay within
# NARROW_DOTS_HIGH, so that the experts and their drops fit a phone's screen below its
# controls; the key's lines stacked, each All-to-All named between the rank's box and its fan.
_Layout = namedtuple("_Layout", "width margin group_gap gaps pitch dot drop_pitch stagger")
WIDE = _Layout(WIDTH, MARGIN, 6, None, PITCH, DOT, PITCH + 2, 2)
NARROW = tuple(_Layout(320, 8, 4, 32, pitch, pitch * 0.75, pitch * 1.5, pitch / 2) for pitch in (3, 2.5, 2))
NARROW_DOTS_HIGH = 360  # units: the tallest column of kept and dropped dots a phone's drawing aims for
# A phone on its side (render(short=True)): the wide drawing with smaller dots where its columns
# would run taller than SHORT_DOTS_HIGH, so that it fits under a two-row bar at 844 x 390.
SHORT = tuple(_Layout(WIDTH, MARGIN, 6, None, pitch, pitch * 0.75, pitch * 1.5, pitch / 2) for pitch in (4, 3, 2.5, 2, 1.5))
SHORT_DOTS_HIGH = 76


def _columns(drawn, per_rank, layout=WIDE):
    """x of each drawn expert column, its width, and each drawn EP rank's (first column, last column)."""
    groups = [(g, min(g + per_rank, drawn) - 1) for g in range(0, drawn, per_rank)]
    gap = layout.group_gap if layout.gaps is None else min(layout.group_gap, max(1, layout.gaps / max(1, len(groups) - 1)))
    pitch = min(48.0, (layout.width - 2 * layout.margin - gap * (len(groups) - 1)) / drawn)
    left = (layout.width - pitch * drawn - gap * (len(groups) - 1)) / 2
    xs = [left + i * pitch + gap * (i // per_rank) for i in range(drawn)]
    return xs, pitch - 2, groups


def _per_row(width, layout):
    """Dots side by side in a column ``width`` wide."""
    return max(1, int((width + layout.pitch - layout.dot) // layout.pitch))


def _unit(kept, dropped, capacity, per_row):
    """Tokens per dot: the smallest round number that keeps every column within MAX_ROWS rows."""
    tallest, deepest = max(kept + [capacity or 0]), max(dropped)
    return next((u for u in UNITS if math.ceil(tallest / u / per_row) + math.ceil(deepest / u / per_row) <= MAX_ROWS),
                UNITS[-1])


def _dot_columns(xs, counts, per_row, floor, direction, layout=WIDE):
    """Each column's dots, filled row by row, as ``per_row`` vertical dashed segments (a dash per
    dot: any number of dots is a few segments). Kept dots stack up from ``floor``; dropped ones
    (direction +1) fall below it, spaced wider and staggered."""
    pitch, first = layout.pitch, layout.pitch - layout.dot / 2  # the first dot's centre from the column's left
    items = []
    for x, n in zip(xs, counts):
        rows, extra = divmod(n, per_row)
        for j in range(min(n, per_row)):
            length = (rows + (j < extra)) * (pitch if direction < 0 else layout.drop_pitch)
            top = floor + 3 + (j % 2) * layout.stagger if direction > 0 else floor
            items.append((x + first + j * pitch, top, x + first + j * pitch, top + direction * length))
    return items


def _wrap(text, width, class_):
    """``text`` broken at spaces into lines no wider than ``width`` drawing units."""
    return svg.wrap(text, width, *svg.label_size(class_))


def _rank_labels(centres, narrow):
    """``(x, label)`` above each EP rank drawn, or every k-th: "rank g" while few, else g."""
    count = len(centres)
    if not narrow:
        stride = max(1, math.ceil(count / 12))
        return [(centres[g], f"rank {g}" if count <= 12 else g) for g in range(0, count, stride)]
    named = count <= 4
    widest = svg.text_width(f"rank {count - 1}" if named else count - 1, *svg.label_size("svg-label-soft"))
    pitch = centres[1] - centres[0] if count > 1 else math.inf
    stride = math.ceil((widest + 6) / pitch) if count > 1 else 1
    return [(centres[g], f"rank {g}" if named else g) for g in range(0, count, stride)]


def _drawing(state, routing, capacity, a2a, unit, drawn, narrow, short=False):
    """The rank's box, the dispatch fan, every drawn expert's column of tokens (kept up to its
    capacity line, dropped below its floor), the combine fan and the box the outputs return to.
    The experts' boxes and the dropped tokens carry the point (svg.KEY)."""
    tokens, count, k, ep = state["T"], state["E"], state["k"], state["ep"]
    balance, dropped = fmt.portable(routing.balance_loss), fmt.portable(routing.dropped_fraction)
    kept_dots = [round(n / unit) for n in routing.kept[:drawn]]
    drop_dots = [round(n / unit) for n in routing.dropped[:drawn]]
    highest = SHORT_DOTS_HIGH if short else NARROW_DOTS_HIGH
    for layout in NARROW if narrow else SHORT if short else (WIDE,):
        xs, column, groups = _columns(drawn, count // ep, layout)
        per_row = _per_row(column, layout)
        kept_high = math.ceil(max(kept_dots + [(capacity or 0) / unit]) / per_row) * layout.pitch
        drop_high = math.ceil(max(drop_dots) / per_row) * layout.drop_pitch
        if kept_high + drop_high <= highest:
            break
    width, margin = layout.width, layout.margin
    key_text = (f"1 dot = {unit:,} token{'s' if unit > 1 else ''} (expected per batch)",
                f"dashed line: {capacity:,} slots per expert" if capacity is not None else None)
    step_text = f"step {state['step']}: E\u00b7\u03a3fP = {fmt.decimal(balance)}"
    a2a_text = (f"dispatch All-to-All: {fmt.data_size(a2a.per_direction_bytes)} per device" if ep > 1
                else "EP = 1: every expert is on this rank, no All-to-All leaves it")
    parts = []
    if narrow:  # the key's lines stacked; each All-to-All named between the box and its fan
        lines = [line for line in key_text if line] + [step_text]
        source = LINE * len(lines) + 8  # the top of the rank's box
        said = _wrap(a2a_text, width - 2 * margin, "svg-label-soft")
        fan = source + 20 + 6 + LINE * len(said)  # where the dispatch fan starts
        top = fan + 56
        parts += [svg.texts([(margin, LINE * (i + 1), line) for i, line in enumerate(lines)], class_="svg-label-soft"),
                  svg.texts([(width / 2, source + 20 + LINE * (i + 1), line) for i, line in enumerate(said)],
                            class_="svg-label-soft", text_anchor="middle")]
    else:
        source, fan, top = 24, 44, TOP
    floor = top + 14 + kept_high
    bottom = floor + 8 + drop_high
    centres = [(xs[a] + xs[b] + column) / 2 for a, b in groups]
    target = bottom + (64 if narrow else 44)  # the top of the box the outputs return to
    meet = target - (LINE + 12) * narrow  # where the combine fan meets: above its name on a phone
    parts += [
        svg.boxes([(xs[a] - 2, top, xs[b] + column - xs[a] + 4, floor - top) for a, b in groups],
                  class_=f"svg-lane {svg.KEY}"),
        svg.boxes([(width / 2 - 80, source, 160, 20), (width / 2 - 80, target, 160, 20)], class_="svg-lane"),
        svg.texts([(width / 2, source + 14, f"rank 0: {tokens:,} tokens"), (width / 2, target + 14, "rank 0: outputs combined")],
                  class_="svg-label", text_anchor="middle"),
        svg.segments([(width / 2, fan, c, top - 17) for c in centres], class_="stroke-comm", stroke_width=1.2),
        svg.segments([(c, floor, width / 2, meet) for c in centres], class_="stroke-comm", stroke_width=1.2,
                     stroke_dasharray="4 3", stroke_opacity=0.6),
        svg.segments([(xs[a] - 2, floor, xs[b] + column + 2, floor) for a, b in groups], class_="svg-axis"),
        svg.segments(_dot_columns(xs, kept_dots, per_row, floor, -1, layout), class_="stroke-ep", stroke_width=layout.dot,
                     stroke_dasharray=f"{layout.dot} {layout.pitch - layout.dot}"),
        svg.segments(_dot_columns(xs, drop_dots, per_row, floor, +1, layout),
                     class_=f"stroke-warn {svg.KEY}" if max(drop_dots) else "stroke-warn", stroke_width=layout.dot,
                     stroke_dasharray=f"{layout.dot} {layout.drop_pitch - layout.dot}"),
    ]
    if capacity is not None:
        line = floor - capacity / unit / per_row * layout.pitch
        parts.append(svg.segments([(x - 1, line, x + column + 1, line) for x in xs], class_="stroke-capacity",
                                  stroke_width=1.5, stroke_dasharray="3 2"))
    parts.append(svg.texts([(x, top - 4, label) for x, label in _rank_labels(centres, narrow)],
                           class_="svg-label-soft", text_anchor="middle"))
    combine = "combine All-to-All: the same bytes back" if ep > 1 else ""
    verdict = f"dropped {fmt.percent(dropped)}" if capacity else "no limit: nothing dropped"
    if narrow:
        parts += [svg.texts([(width / 2, target - 8, combine)], class_="svg-label-soft", text_anchor="middle"),
                  svg.texts([(width - margin, bottom + 12 if max(drop_dots) else floor + 14, verdict)],
                            class_="svg-label-soft", text_anchor="end")]
    else:
        parts += [
            svg.texts([(margin, 14, key_text[0] + (f"; {key_text[1]}" if key_text[1] else "")), (margin, 64, a2a_text),
                       (margin, target - 8, combine)], class_="svg-label-soft"),
            svg.texts([(width - margin, 14, step_text), (width - margin, bottom + 2 if max(drop_dots) else floor + 14, verdict)],
                      class_="svg-label-soft", text_anchor="end"),
        ]
    return svg.document(width, target + 24, parts, label=(
        f"Tokens of one rank routed top-{k} to {count} experts on {ep} expert-parallel ranks, with the overflow "
        "above each expert's capacity falling below it")), groups


def render(state, narrow=False, short=False):
    tokens, count, k, ep = state["T"], state["E"], state["k"], state["ep"]
    history = experts.expected_collapse(state["step"], count, k, skew=state["skew"], alpha=state["alpha"])
    capacity = None if state["cf"] == "none" else experts.expert_capacity(tokens, count, k, float(state["cf"]))
    routing = experts.expected_routing(tokens, history[-1].router_prob, k, capacity)
    a2a = experts.moe_alltoall_bytes(k, 1, tokens, state["h"], dtype_bytes=2, ep=ep)
    alpha, p = state["alpha"], fmt.portable  # p: the same last digits in CPython and Pyodide
    dropped, balance, busiest = p(routing.dropped_fraction), p(routing.balance_loss), p(routing.busiest_vs_mean)
    wasted = p(routing.wasted_capacity_fraction)
    drawn = min(count, MAX_DRAWN_EXPERTS)
    # tokens per dot: as the wide drawing's columns hold them, at every width (a readout)
    _, column, _ = _columns(drawn, count // ep)
    unit = _unit(list(routing.kept[:drawn]), list(routing.dropped[:drawn]), capacity, _per_row(column, WIDE))
    drop_dots = [round(n / unit) for n in routing.dropped[:drawn]]
    drawing, groups = _drawing(state, routing, capacity, a2a, unit, drawn, narrow, short and not narrow)
    held = "EP rank 0" if len(groups) == 1 else f"EP ranks 0\u2013{len(groups) - 1}"
    note = (f"Drawn: experts 0\u2013{drawn - 1} of {count} (on {held} of {ep}); the readouts count every expert."
            if drawn < count else "")
    readouts = (
        Readout("capacity_per_expert", "capacity per expert",
                f"{capacity:,} tokens" if capacity is not None else "no limit", capacity),
        Readout("dropped_fraction", "tokens dropped", fmt.percent(dropped, 2), dropped, "warn" if max(drop_dots) else None),
        Readout("alltoall_bytes_per_device", "All-to-All bytes per device (dispatch + combine, forward, bf16)",
                fmt.data_size(a2a.forward_bytes), a2a.forward_bytes, "comm"),
        Readout("alltoall_off_rank_bytes", "of which leave the rank", fmt.data_size(a2a.off_rank_forward_bytes),
                a2a.off_rank_forward_bytes),
        Readout("aux_loss", "balancing loss E\u00b7\u03a3f\u1d62P\u1d62",
                f"{balance:.3f}" if balance < 10 else f"{balance:.1f}", balance),
        Readout("weighted_aux_loss", f"as trained, \u03b1 = {fmt.decimal(alpha, 3)}", f"{alpha * balance:.4g}",
                p(alpha * balance)),
        Readout("busiest_vs_mean", "busiest expert's load vs the average", f"{busiest:.2f}\u00d7", busiest),
        Readout("wasted_capacity", "empty expert slots", fmt.percent(wasted) if capacity else "none (no fixed slots)",
                wasted, "capacity" if capacity is not None else None),
        Readout("unit_tokens", "tokens per dot", f"{unit:,}", unit, "ep"),
    )
    alt = (
        f"{tokens:,} tokens on rank 0, each sent to its top {k} of {count} experts spread over {ep} ranks. "
        + (f"Each expert has {capacity:,} slots; on average {fmt.percent(dropped, 2)} of the "
           f"{tokens * k:,} assignments overflow and are dropped" if capacity is not None else
           "No capacity limit: nothing is dropped")
        + f". The busiest expert gets {busiest:.2f} times the average load; balancing loss "
        f"E times sum of f times P = {fmt.decimal(balance, 3)} after {state['step']} training steps "
        f"(alpha {fmt.decimal(alpha, 3)}). Each All-to-All moves {fmt.data_size(a2a.per_direction_bytes)} per device."
    )
    return View(svg=drawing, readouts=readouts, note=note, alt=alt)
