"""Figure 14: ring attention and Ulysses on the same sequence, side by side."""
import math
from functools import lru_cache
from itertools import groupby
from typing import NamedTuple

from figures import palette, svg
from figures.contract import Readout, Select, Slider, View
from models import context, fmt, hardware

NUMBER = 14
TITLE = "Ring attention and Ulysses, side by side"
CAPTION = (
    "The same causal attention split over C ranks two ways, ring attention and Ulysses, for one layer's forward "
    "pass, with both schemes' communication time for every C at the bottom."
)
NOTE = (
    "Top left, the score matrix cut into chunks and coloured by the rank whose queries it holds; top right, what "
    "each rank computes at each of the ring's C steps (grey: idle). Ulysses swaps a split by tokens for a split by "
    "heads with All-to-Alls, which works only while every rank gets a whole KV head. Communication is priced on the "
    "node's own links, then on the network."
)
TRIES = (
    ("Two chunks per rank", {"layout": "two_chunks"}),
    ("Multi-head attention", {"kv_heads": 64}),
    ("16 ranks", {"C": 16}),
)
SCALE_UP = ("nvlink3", "nvlink4", "nvlink5", "infinity_fabric_mi300x", "pcie4_x16", "pcie5_x16")
NETWORK = ("ib_hdr", "ib_ndr", "ib_xdr", "roce_400gbe")
POWERS = tuple(2 ** k for k in range(8))

CONTROLS = (
    Slider("C", "Context-parallel ranks C", stops=POWERS[:7], default=8),
    Slider("s", "Sequence length s", stops=tuple(2 ** k for k in range(12, 21)), default=131072, format=fmt.count),
    Slider("h", "Hidden size h", stops=tuple(2 ** k for k in range(10, 16)), default=8192, format=fmt.count),
    Slider("heads", "Query heads", stops=POWERS[3:], default=64),
    Slider("kv_heads", "KV heads", stops=POWERS, default=8),
    Select("layout", "Ring layout", options=(("contiguous", "contiguous chunks"),
                                             ("two_chunks", "two chunks per rank (mirrored)")), default="contiguous"),
    Select("intra", "Inside a node", options=tuple((k, hardware.LINKS[k].name) for k in SCALE_UP), default="nvlink4"),
    Select("inter", "Between nodes", options=tuple((k, hardware.LINKS[k].name) for k in NETWORK), default="ib_ndr"),
    Select("gpus", "GPUs per node", options=((4, "4"), (8, "8"), (16, "16"), (72, "72 (an NVL72 rack)")), default=8),
)
PRIMARY = ("C", "kv_heads")  # the ranks, and the KV heads that bound Ulysses


def constrain(state):
    """Grouped-query attention: the KV heads are a divisor of the query heads."""
    state["kv_heads"] = min(state["kv_heads"], state["heads"])
    return state


def limits(state):
    """The KV-heads slider's range: up to the query heads."""
    return {"kv_heads": state["heads"]}


WIDTH, LEFT, SIDE = 480, 6, 200


class _Layout(NamedTuple):
    """Where the drawing's parts go: wide, or on a phone (render(narrow=True)), where the
    panels are smaller, texts wrap, and the chart's legend moves under it."""

    width: float
    side: float  # of the score matrix and of the ring schedule
    panels: tuple  # x of the left and the right panel
    heads: tuple  # x of the captions over them
    wrap: tuple = None  # widths the left and right column's texts wrap at (wide: one line each)
    band: float = 80  # the height of Ulysses' two panels
    chart_height: float = 150  # of the time chart


WIDE = _Layout(WIDTH, SIDE, (LEFT + 14, LEFT + 264), (LEFT, LEFT + 250))
SHORT_GAP = 40  # between a phone's panels and its chart, side by side on a phone on its side
# a phone: smaller panels and chart, so that the drawing fits under the figure's bar on a
# 390 x 844 screen (tests/test_figure_numbers_11_14.py)
NARROW = _Layout(320, 104, (12, 174), (LEFT, 166), (156, 146), band=56, chart_height=116)
SHORT = NARROW._replace(side=96, band=48)  # a phone on its side: a phone's panels, a little smaller


def _lines(content, width, size):
    """``content`` broken at spaces into the fewest lines no wider than ``width`` at
    ``size``, as even in length as they can be (no last line of one word). A number stays
    on the line of the word after it (its unit)."""
    return svg.wrap(content, width, size, keep=svg.with_its_unit, even=True)


def _write(items, x, y, content, width, class_):
    """Adds ``content`` at (x, y) to ``items``, broken into lines 16 units apart where a
    ``width`` is given; returns how many lines it took."""
    lines = [content] if width is None else _lines(content, width, svg.label_size(class_)[0])
    items += [(x, y + 16 * n, line) for n, line in enumerate(lines)]
    return len(lines)


def _causal_panel(x0, y0, work, fills, triangles, side):
    """The s x s score matrix in chunks: row = query chunk (its rank's colour), column = key chunk."""
    chunks = work.ranks * (2 if work.layout == "two_chunks" else 1)
    owner = [0] * chunks
    for rank in range(work.ranks):
        for chunk in ((rank,) if work.layout == "contiguous" else (rank, chunks - 1 - rank)):
            owner[chunk] = rank
    cell = side / chunks
    for q in range(chunks):
        key = palette.rank_key(owner[q])
        y = y0 + q * cell
        if q:
            fills.setdefault(key, []).append((x0, y, q * cell, cell))
        x = x0 + q * cell  # the diagonal chunk: only its lower half is visible
        triangles.setdefault(key, []).append(((x, y), (x + cell, y + cell), (x, y + cell)))


def _schedule_panel(x0, y0, work, fills, side):
    """Ring step (row) x rank (column): how many visible chunk pairs the rank computes then."""
    cell = side / work.ranks
    most = max(max(row) for row in work.schedule)
    for step, row in enumerate(work.schedule):
        start = 0
        for pairs, run in groupby(row):
            length = len(list(run))
            key = "idle" if pairs == 0 else f"compute@{int(round(3 * pairs / most))}"  # compute, shaded by its work
            fills.setdefault(key, []).append((x0 + start * cell, y0 + step * cell, length * cell, cell))
            start += length


CHART_LEFT = LEFT + 58  # the time chart's axis
REFERENCE_GPU = "h100_sxm"  # whose attention compute the ring hides behind


def _time_chart(state, sweep, ok, top, layout):
    """Forward time per layer against C on a log axis: ring attention's sends and Ulysses'
    All-to-Alls, and the attention compute one rank does (the ring hides below that line).
    Wide, the legend is over the chart; narrow, under it, and the chart (the key) is one
    group. Returns the parts and the y the chart's last text ends above."""
    C, s, h, kv = state["C"], state["s"], state["h"], state["kv_heads"]
    narrow = layout.wrap is not None
    width, CHART_HEIGHT = layout.width, layout.chart_height  # noqa: N806 (the chart's one height)
    compute = [context.attention_compute_s(s, h, c, gpu=REFERENCE_GPU) for c in POWERS[:7]]
    legend = top + 6
    base = (top + 24 if narrow else legend + 48) + CHART_HEIGHT  # narrow: a row over it names the network
    values = [v for t in sweep for v in (t.ring_s, t.ulysses_s) if v] + compute
    low, high = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
    high += high == low
    y = lambda v: base - (math.log10(v) - low) / (high - low) * CHART_HEIGHT  # noqa: E731 (a log scale)
    slot = (width - CHART_LEFT - 8) / 7
    x = lambda i: CHART_LEFT + (i + 0.5) * slot  # noqa: E731
    decades = range(low, high + 1, 1 if high - low <= 6 else 2)
    ring = [(x(i), y(t.ring_s)) for i, t in enumerate(sweep) if t.ring_s]
    ulysses = [(x(i), y(t.ulysses_s)) for i, t in enumerate(sweep) if t.ulysses_s]
    wait = [(x(i), y(v)) for i, v in enumerate(compute)]
    marks = [(px - 4, py - 4, 8, 8) for px, py in ring + ulysses]
    series = [
        svg.segments([(CHART_LEFT, y(10.0 ** d), width - 8, y(10.0 ** d)) for d in decades], class_="svg-axis",
                     stroke_dasharray="1 3"),
        svg.segments([(CHART_LEFT, base, width - 8, base)], class_="svg-axis"),
        svg.polyline(wait, class_="svg-ink svg-dash", stroke_width=1.5),
        svg.polyline(ring, class_="stroke-comm", stroke_width=2),
        svg.polyline(ulysses, class_="stroke-exposed", stroke_width=2),
        svg.circles([(px, py, 4) for px, py in ring], class_="fill-comm"),
        svg.boxes([(px - 3.5, py - 3.5, 7, 7) for px, py in ulysses], class_="fill-exposed"),
    ]
    # the legend: a mark of each series, then its meaning (narrow: under the C axis, wrapped)
    peak = f"{fmt.percent(context.ATTENTION_KERNEL_FRACTION, 0)} of peak"
    entries = ("ring attention's sends: hidden while under the dashed line",
               "Ulysses' All-to-Alls: attention waits for them",
               f"attention compute of one rank ({hardware.gpu(REFERENCE_GPU).short_name}, {peak})")
    if narrow:  # a line each (the GPU is named in the readouts)
        entries = ("ring's sends: hidden while under the dashed line", entries[1], f"attention compute of one rank, {peak}")
    rows, meanings = [], []
    line = legend + 5 if not narrow else base + 40
    for entry in entries:
        rows.append(line)
        line += 16 * _write(meanings, LEFT + 16, line, entry, width - LEFT - 16 if narrow else None, "svg-label-soft")
    keys = [
        svg.circles([(LEFT + 5, rows[0] - 4, 4)], class_="fill-comm"),
        svg.boxes([(LEFT + 1.5, rows[1] - 7.5, 7, 7)], class_="fill-exposed"),
        svg.segments([(LEFT, rows[2] - 4, LEFT + 12, rows[2] - 4)], class_="svg-ink svg-dash", stroke_width=1.5),
        svg.texts(meanings, class_="svg-label-soft"),
    ]
    i = POWERS.index(C)
    chosen = [svg.segments([(x(i), base - CHART_HEIGHT - 4, x(i), base)], class_="svg-ink" if narrow else f"svg-ink {svg.KEY}",
                           stroke_width=1)]
    labels = [svg.Label(CHART_LEFT - 6, y(10.0 ** d) + 4, fmt.duration(10.0 ** d), anchor="end", moves=()) for d in decades]
    labels += [svg.Label(x(j), base + 15, f"C={c}", anchor="middle", moves=(),
                         class_="svg-label" if c == C else "svg-label-soft") for j, c in enumerate(POWERS[:7])]
    axis_labels = len(labels)
    here = [(sweep[i].ring_s, "ring"), (sweep[i].ulysses_s, "Ulysses"), (compute[i], "compute")]
    for seconds, name in here:  # the chosen C's three values, beside their marks
        if seconds:
            labels.append(svg.Label(x(i) + 8, y(seconds) + 4, f"{name} {fmt.duration(seconds)}",
                                    alternatives=((x(i) - 8, y(seconds) + 4, "end"),), moves=("up", "down"),
                                    class_="svg-label svg-halo"))
    elsewhere = ((x(i) - 8, base - 6, "end"),)  # left of the chosen C; wide, else over the series
    if not narrow:  # (a phone's row over the chart names the network)
        elsewhere += ((width - 8, base - CHART_HEIGHT + 6, "end"), (CHART_LEFT, base - CHART_HEIGHT + 6, "start"))
    if not sweep[i].ring_s:
        labels.append(svg.Label(x(i) + 8, base - 6, "no sends" if narrow else "no sends at C = 1",
                                alternatives=elsewhere, class_="svg-label"))
    if not ok:  # the KV heads' reason is in the readouts and over the Ulysses panels (a phone: no room for more)
        labels.append(svg.Label(x(i) + 8, base - 6, "no Ulysses" if narrow else f"no Ulysses past C = {kv}",
                                alternatives=elsewhere, class_="svg-label"))
    edges = []
    for j, t in enumerate(sweep):
        if t.crosses_node and not sweep[j - 1].crosses_node:
            edge = x(j) - slot / 2
            edges.append((edge - 1.5, base - CHART_HEIGHT - 4, 3, CHART_HEIGHT + 8))
            chosen.append(svg.segments([(edge, base - CHART_HEIGHT - 4, edge, base + 4)], class_="svg-ink-stroke",
                                       stroke_dasharray="4 3"))
            network, row = f"{hardware.LINKS[t.link].short_name} \u2192", base - CHART_HEIGHT + 6
            if narrow:  # over the chart
                row = base - CHART_HEIGHT - 14
            # wide, the name reads from the edge into the network's side (the chosen C's line may be on the other)
            room = max(edge - 4, width - edge - 4) if narrow else width - 8 - edge - 4
            if svg.text_width(network, svg.LABEL_SIZES["svg-label-soft"]) > room:  # named in full where it fits
                network = "network \u2192"
            # wide, placed before the values and notes (its row in the chart is its own); narrow, after them
            labels.insert(len(labels) if narrow else axis_labels,
                          svg.Label(edge + 4, row, network, alternatives=((edge - 4, row, "end"),), moves=("down",)))
    bounds = (0, base - CHART_HEIGHT - 26, width, 46 + CHART_HEIGHT) if narrow else (0, legend + 40, width, base + 20 - legend - 40)
    # no label across a line: the chosen C's, the node edge's, the three series' (and their marks)
    marks.append((x(i) - 1.5, base - CHART_HEIGHT - 4, 3, CHART_HEIGHT + 4))
    if not narrow:  # a phone's chart has no room to keep its haloed values off the node edge and the series too
        marks += edges + [box for line in (ring, ulysses, wait) for box in svg.line_boxes(line)]
    chosen.append(svg.labels(labels, bounds, obstacles=marks))
    if narrow:
        return [svg.group(series + chosen, class_=svg.KEY), *keys], line - 16
    return series + keys + chosen, base + 14


_causal_work = lru_cache(maxsize=16)(context.causal_work)  # depends on C and the layout only


def render(state, narrow=False, short=False):
    C, s, h, heads, kv, layout = (state[k] for k in ("C", "s", "h", "heads", "kv_heads", "layout"))
    # a phone on its side (short): a phone's panels, and its chart beside them
    short, narrow = short and not narrow, narrow or short
    work = _causal_work(C, layout)
    ok = context.ulysses_fits(C, heads, kv)
    ring = context.ring_communication(s, h, C, heads=heads, kv_heads=kv)
    ulysses = context.ulysses_communication(s, h, heads, C, kv_heads=kv) if ok else None
    sweep = [context.context_comm_time(s, h, heads, c, kv_heads=kv, intra_link=state["intra"], inter_link=state["inter"],
                                       gpus_per_node=state["gpus"]) for c in POWERS[:7]]  # every C, for the chart
    times = sweep[POWERS.index(C)]
    compute = context.attention_compute_s(s, h, C, gpu=REFERENCE_GPU)
    hidden = times.ring_s <= compute
    fills, triangles, labels, soft, edges = {}, {}, [], [], []
    at = SHORT if short else NARROW if narrow else WIDE
    (left, right), side, band = at.panels, at.side, at.band
    wrap, full = (at.wrap, at.width - LEFT) if narrow else ((None, None), None)  # where texts wrap, if they do
    labels.append((LEFT, 14, "Ring attention"))
    lines = max(_write(soft, at.heads[0], 30, "scores by query owner", wrap[0], "svg-label-soft"),
                _write(soft, at.heads[1], 30, "steps \u2193 \u00d7 ranks \u2192" if narrow else
                       "ring step (down) \u00d7 rank (across)", wrap[1], "svg-label-soft"))
    top = 40 + 16 * (lines - 1)
    _causal_panel(left, top, work, fills, triangles, side)
    _schedule_panel(right, top, work, fills, side)
    idle = context.ring_idle_steps(work)[0]
    lines = max(_write(soft, left, top + side + 16, f"busiest rank / mean: {fmt.decimal(work.imbalance)}", wrap[0],
                       "svg-label-soft"),
                _write(soft, right, top + side + 16, f"rank 0: idle {idle} of {C}" if narrow else
                       f"rank 0 idle for {idle} of {C} steps", wrap[1], "svg-label-soft"))
    y = top + side + 50 + 16 * (lines - 1)
    y += 16 * (_write(labels, LEFT, y, "Ulysses: All-to-All, by tokens \u2192 by heads" if narrow else
                      "Ulysses: All-to-All from a split by tokens to a split by heads", full, "svg-label") - 1)
    before, after = (left, y + 14), (right, y + 14)
    for r in range(C):  # before: rank r holds tokens r·s/C onward, every head
        fills.setdefault(palette.rank_key(r), []).append((before[0], before[1] + r * band / C, side, band / C))
    groups = C if ok else kv
    for g in range(groups):  # after: each rank whole KV heads over every token (past the KV heads: one each)
        fills.setdefault(palette.rank_key(g), []).append((after[0] + g * side / groups, after[1], side / groups, band))
    lines = _write(soft, before[0], y + band + 30, f"{s // C:,} tokens each" if narrow else
                   f"by tokens: {s // C:,} per rank, all heads", wrap[0], "svg-label-soft")
    if ok:
        lines = max(lines, _write(soft, after[0], y + band + 30, f"{kv // C} of {kv} KV heads each" if narrow else
                                  f"by heads: {kv // C} of {kv} KV heads per rank", wrap[1], "svg-label-soft"))
    else:
        fills.setdefault("warn", []).append((after[0], y + band + 20, 10, 10))
        lines = max(lines, _write(labels, after[0] + 14, y + band + 30, f"{kv} KV head{'s' if kv > 1 else ''} for {C} ranks",
                                  wrap[1] and wrap[1] - 14, "svg-label"))
    outlines = [(left, top, side, side), (right, top, side, side), (*before, side, band), (*after, side, band)]
    ulysses_text = f"Ulysses {fmt.data_size(ulysses.forward_bytes_per_rank)}" if ok else "Ulysses cannot split the heads"
    sent = ("" if narrow else f"at C = {C}, ") + f"sent per device: ring {fmt.data_size(ring.forward_bytes_per_rank)}, {ulysses_text}"
    width = at.width
    if short:  # the chart's column starts at the top, beside the panels
        panels_end = y + band + 18 + 16 * (lines - 1)  # (the drawing ends 16 under its last baseline)
        chart_labels, chart_soft = [], []
        y = 14 + 16 * (_write(chart_labels, LEFT, 14, "one layer's forward, per rank, by C (log scale)", full, "svg-label") - 1)
        lines = _write(chart_soft, LEFT, y + 16, sent, full, "svg-label-soft")
        chart, y = _time_chart(state, sweep, ok, y + 28 + 16 * (lines - 1), at)
        chart = [svg.group([svg.texts(chart_labels, class_="svg-label"), svg.texts(chart_soft, class_="svg-label-soft"), *chart],
                           transform=f"translate({at.width + SHORT_GAP} 0)")]
        y, width = max(y, panels_end), 2 * at.width + SHORT_GAP
    else:
        y += band + 60 + 16 * (lines - 1)
        y += 16 * (_write(labels, LEFT, y, "one layer's forward, per rank, by C (log scale)", full, "svg-label") - 1)
        lines = _write(soft, LEFT, y + 16, sent, full, "svg-label-soft")  # (a phone's bar shows C, over it)
        chart, y = _time_chart(state, sweep, ok, y + 28 + 16 * (lines - 1), at)
    parts = [svg.boxes(boxes, class_=f"fill-{key.split('@')[0]}",
                       fill_opacity=(0.35, 0.35, 0.65, 1.0)[int(key[-1])] if "@" in key else None)
             for key, boxes in sorted(fills.items())]
    parts += [svg.polygons(points, class_=f"fill-{key}") for key, points in sorted(triangles.items())]
    parts += [svg.boxes(outlines, fill="none", class_="svg-ink-stroke"),
              svg.segments(edges, class_="svg-ink-stroke", stroke_dasharray="4 3"),
              svg.texts(labels, class_="svg-label"), svg.texts(soft, class_="svg-label-soft"), *chart]
    readouts = (
        Readout("ulysses_bytes_per_device", "Ulysses, sent per device",
                fmt.data_size(ulysses.forward_bytes_per_rank) if ok else f"not possible: C = {C} > {kv} KV heads",
                ulysses.forward_bytes_per_rank if ok else None),
        Readout("ring_bytes_per_device", "ring, sent per device", fmt.data_size(ring.forward_bytes_per_rank),
                ring.forward_bytes_per_rank),
        Readout("ulysses_ok", "Ulysses fits (C <= KV heads)", "yes" if ok else "no", 1 if ok else 0, None if ok else "warn"),
        Readout("causal_imbalance", "busiest rank's attention work / mean", fmt.decimal(work.imbalance), work.imbalance),
        Readout("rank0_idle_steps", "ring steps rank 0 sits idle", f"{idle} of {C}", idle, "idle" if idle else None),
        Readout("ring_time_s", "ring transfers (hide behind compute)", fmt.duration(times.ring_s), times.ring_s, "comm"),
        Readout("ulysses_time_s", "Ulysses All-to-Alls (attention waits)",
                fmt.duration(times.ulysses_s) if ok else "not possible", times.ulysses_s, "exposed"),
        Readout("attention_compute_s", f"a rank's attention compute ({hardware.gpu(REFERENCE_GPU).short_name})",
                fmt.duration(compute), compute),
        Readout("ring_hidden", "ring sends hidden behind it", "yes" if hidden else "no", int(hidden)),
    )
    alt = (f"Causal attention over {C} ranks, {s:,} tokens, {layout.replace('_', ' ')} layout: the busiest rank does "
           f"{fmt.decimal(work.imbalance)} times the mean work. Ring attention sends {readouts[1].text} per device; "
           + (f"Ulysses sends {readouts[0].text}." if ok else f"Ulysses cannot run: {C} ranks, {kv} KV heads.")
           + f" Per layer the ring's sends take {fmt.duration(times.ring_s)}, "
           + ("under" if hidden else "over") + f" the {fmt.duration(compute)} of attention compute they hide behind.")
    return View(svg=svg.document(width, y + 16, parts, label=alt, class_="svg-narrow"), readouts=readouts, alt=alt)
