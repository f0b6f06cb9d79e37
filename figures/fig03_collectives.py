"""Figure 03: the collectives as shapes -- a step-through of each algorithm, then its alpha-beta cost."""
import math
from functools import lru_cache
from types import SimpleNamespace

from figures import palette, svg
from figures.contract import Button, Readout, Select, Slider, View, log_stops
from models import collectives, fmt

NUMBER = 3
TITLE = "The collectives, as shapes"
CAPTION = (
    "Each column is a rank and each square a chunk of its buffer, coloured by whose data it holds: step through an "
    "operation one round of transfers at a time. With it, the alpha-beta time of the same operation over N ranks, "
    "split into its latency and bandwidth parts."
)
NOTE = (
    "Stripes mark a sum. A ring AllReduce turns into a ReduceScatter followed by an AllGather, a tree Broadcast "
    "fans out, an All-to-All swaps every pair. The buffer size is the full buffer: AllGather's output, "
    "ReduceScatter's input, each rank's send buffer for All-to-All. Bandwidth is per rank, in one direction."
)
TRIES = (
    ("Tree Broadcast", {"op": "broadcast", "algo": "tree"}),
    ("All-to-All", {"op": "alltoall"}),
    ("1 MB over 1,024 ranks", {"N": 1024, "size": 1_000_000}),
    ("The same, by tree", {"N": 1024, "size": 1_000_000, "algo": "tree"}),
)

OPS = (("allreduce", "AllReduce"), ("reducescatter", "ReduceScatter"), ("allgather", "AllGather"),
       ("broadcast", "Broadcast"), ("reduce", "Reduce"), ("alltoall", "All-to-All"))
LABEL = dict(OPS)
ALGORITHM_WORDS = {"ring": "ring", "chain": "pipelined chain", "pairwise": "pairwise exchange", "binomial": "binomial tree",
                   "recursive_halving": "recursive halving", "recursive_doubling": "recursive doubling"}
BUS_FORMULA = {"allreduce": "2(N-1)/N", "reducescatter": "(N-1)/N", "allgather": "(N-1)/N", "alltoall": "(N-1)/N",
               "broadcast": "1", "reduce": "1"}
DRAWN = 8  # ranks the step-through draws
TREE_DRAWN = ("binomial", "recursive_halving", "recursive_doubling")  # messages drawn as arcs between ranks
SIZES = log_stops(1e3, 1e10, (1, 2, 5))
WIDTH, LEFT = 720, 64
# On a phone: a 320-unit drawing; ranks numbered under a "rank" heading, lines wrapped, the
# buffer sizes labelled every other decade.
NARROW_WIDTH, NARROW_LEFT = 320, 52
# On a phone on its side: the step-through in a 420-unit column with smaller chunks and lower
# arcs, the cost beside it in 296 units, its chart shorter.
SHORT_STEPS_W, SHORT_COST_W, SHORT_GAP = 420, 296, 4


@lru_cache(maxsize=64)
def _simulation(op, algo, ranks):
    """The step-through: Bruck's tree All-to-All is not simulated, so it shows the pairwise exchange."""
    width = 1 if op == "allgather" else ranks  # Broadcast and Reduce: the buffer cut into `ranks` chunks
    values = [[r * ranks + c for c in range(width)] for r in range(ranks)]
    return collectives.simulate(op, values, algorithm=algo if op in collectives.TREE_SIMULATED_OPS else "ring")


def _sim(state):
    return _simulation(state["op"], state["algo"], min(state["N"], DRAWN))


def constrain(state):
    """The step slider stops at the drawn algorithm's last step."""
    state["step"] = min(state["step"], len(_sim(state).steps))
    return state


def limits(state):
    """The step slider's range: the drawn algorithm's steps."""
    return {"step": len(_sim(state).steps)}


def _next(state):
    return {**state, "step": 0 if state["step"] >= len(_sim(state).steps) else state["step"] + 1}


CONTROLS = (
    Select("op", "Operation", options=OPS, default="allreduce"),
    Select("algo", "Algorithm", options=(("ring", "ring / chain"), ("tree", "tree")), default="ring"),
    Slider("N", "Ranks N", stops=tuple(2**k for k in range(1, 11)), default=8),
    Slider("step", "Step", min=0, max=2 * (DRAWN - 1), step=1, default=7),
    Button("next", "Next step", press=_next),
    Slider("size", "Buffer size", stops=SIZES, default=1_000_000_000, format=fmt.data_size),
    Slider("alpha_us", "Latency per step \u03b1", stops=(0.5, 1, 2, 5, 10, 20, 50, 100), default=10, unit="\u00b5s"),
    Slider("bw_GBps", "Bandwidth per rank \u03b2", stops=(1, 2, 5, 10, 12.5, 20, 25, 50, 100, 200, 450, 500, 900, 1000),
           default=100, unit="GB/s"),
)
PRIMARY = ("op", "step")
GROUPS = (("Step-through", ("algo", "N", "next")), ("Cost", ("size", "alpha_us", "bw_GBps")))


def _layout(narrow, column=None):
    """The drawing's geometry: its width, the left margin of its labels, where the cost
    texts start, the right margin, the width lines wrap at (None: never), which buffer
    sizes (powers of ten) are labelled, the largest chunk, the room above the chunks for the
    rank labels (and a tree's arcs, rising ``arc_step`` a rank they jump) and the chart's
    height. ``column``: the width of a column of a phone on its side, laid out as a phone's."""
    if column:
        return SimpleNamespace(width=column, left=NARROW_LEFT, text_x=8, right=12, wrap=column - 12, decades=range(3, 11, 2),
                               narrow=True, chunk=12, ring_room=38, tree_room=58, arc_step=4, chart_h=96)
    if not narrow:
        return SimpleNamespace(width=WIDTH, left=LEFT, text_x=LEFT, right=24, wrap=None, decades=range(3, 11), narrow=False,
                               chunk=28, ring_room=40, tree_room=78, arc_step=5, chart_h=150)
    return SimpleNamespace(width=NARROW_WIDTH, left=NARROW_LEFT, text_x=8, right=16, wrap=NARROW_WIDTH - 12,
                           decades=range(3, 11, 2), narrow=True, chunk=28, ring_room=40, tree_room=78, arc_step=5, chart_h=150)


def _wrap(text, width, css):
    """``text`` in lines no wider than ``width`` when drawn with classes ``css`` (words kept
    whole); ``width`` None: one line."""
    size, bold = svg.label_size(css)
    if width is None or svg.text_width(text, size, bold) <= width:
        return [text]
    head, colon, tail = text.partition(": ")  # a title: "AllReduce over 8 ranks, ring:" / "step 7 of 14" where each fits
    if colon and "svg-title" in css and all(svg.text_width(part, size, bold) <= width for part in (head + ":", tail)):
        return [head + ":", tail]
    return svg.wrap(text, width, size, bold)


def _key(css, items):
    """``css`` and, where it draws something, the class of the step's data movement (svg.KEY)."""
    return f"{css} {svg.KEY}" if items else css


def _phase(sim, step):
    if step == 0:
        return "before the first transfer: every rank holds only its own data"
    half = len(sim.steps) // 2
    if sim.op == "allreduce" and sim.algorithm == "ring":
        return f"{'reduce-scatter' if step <= half else 'all-gather'} phase"
    if sim.op == "allreduce":
        return f"{'reduce up' if step <= half else 'broadcast down'} the tree"
    return "every pair swaps one chunk at once" if sim.algorithm == "pairwise" else ""


def _header(sim, step, n, steps_at_n, wrap=None, cost_at="below"):
    """The step-through's title, then its phase, then (only when N is too many to draw) what
    is drawn instead, where the cost is (``cost_at``); each wrapped at ``wrap``."""
    lines = [(f"{LABEL[sim.op]} over {sim.ranks} ranks, {ALGORITHM_WORDS[sim.algorithm]}: step {step} of {len(sim.steps)}",
              "svg-title"), (_phase(sim, step), "svg-label-soft")]
    if n > sim.ranks:
        lines.append((f"Capped: drawn on {sim.ranks} ranks; at N = {n:,} the same algorithm takes {steps_at_n:,} steps "
                      f"(priced {cost_at})", "svg-label svg-strong"))
    return [(part, css) for text, css in lines for part in _wrap(text, wrap, css)]


def _step_through(sim, step, top, n, steps_at_n, g):
    """Columns of chunk squares, one per rank, after `step` rounds; arrows for that round's transfers."""
    ranks, left = sim.ranks, g.left
    col = min(84.0, (g.width - left) / ranks)
    q = min(float(g.chunk), col - 18)
    x0 = left + (g.width - left - ranks * col) / 2 + (col - q) / 2
    tree = sim.algorithm in TREE_DRAWN
    beside = g.wrap and g.width > NARROW_WIDTH  # a phone on its side: the cost is beside the step-through
    lines = [[(8, text, css)] for text, css in _header(sim, step, n, steps_at_n, g.wrap, "at right" if beside else "below")]
    if beside:  # no line for no phase, and the phase after the title's last line where it fits there
        lines = [line for line in lines if line[0][1]]
        phase = next((i for i, [(_, _, css)] in enumerate(lines) if css == "svg-label-soft"), None)
        if phase:
            (_, title, css), (_, words, soft) = lines[phase - 1][0], lines[phase][0]
            x = 8 + svg.text_width(title, *svg.label_size(css)) + 10
            if x + svg.text_width(words, *svg.label_size(soft)) <= g.wrap:
                lines[phase - 1:phase + 1] = [[(8, title, css), (x, words, soft)]]
    top += 17 * (len(lines) - 1)  # the rank labels and the grid go under the header's lines
    grid_top, pitch = top + (g.tree_room if tree else g.ring_room), q + 8
    xy = lambda r, c: (x0 + r * col, grid_top + c * pitch)
    sources = sim.steps[step - 1].sources if step else sim.initial_sources
    bands, empty = {}, []
    for r, row in enumerate(sources):
        for c, held in enumerate(row):
            x, y = xy(r, c)
            for i, src in enumerate(held):  # one horizontal stripe per contributing rank
                bands.setdefault(palette.rank_key(src), []).append((x, y + i * q / len(held), q, q / len(held)))
            if not held:
                empty.append((x, y, q, q))
    arrows, routed, landed, links, swaps = [], [], [], {}, []
    for t in sim.steps[step - 1].transfers if step else ():
        (sx, sy), (dx, dy) = xy(t.src, t.chunk), xy(t.dst, t.slot)
        landed.append((dx, dy, q, q))
        if sim.algorithm == "pairwise":  # every pair swaps along one line: bow each way apart
            length = ((dx - sx) ** 2 + (dy - sy) ** 2) ** 0.5
            ux, uy = (dx - sx) / length * q * 0.55, (dy - sy) / length * q * 0.55
            swaps.append((sx + q / 2 + ux, sy + q / 2 + uy, dx + q / 2 - ux, dy + q / 2 - uy))
        elif tree:  # a tree's messages jump over ranks: one arc per pair of ranks, above the columns
            links[t.src, t.dst] = (sx + q / 2, dx + q / 2, grid_top - 6, 6 + g.arc_step * abs(t.dst - t.src) + 4 * (t.dst < t.src))
        elif t.src == ranks - 1 and t.dst == 0 and ranks > 2:  # the ring closes below the columns
            low = grid_top + len(sources[0]) * pitch + 2 + 3 * t.slot / len(sources[0])
            routed.append(((sx + q, sy + q / 2), (sx + q + 5, sy + q / 2), (sx + q + 5, low), (dx - 6, low), (dx - 6, dy + q / 2)))
            arrows.append((dx - 6, dy + q / 2, dx - 1, dy + q / 2))
        else:
            forward = 1 if dx > sx else -1
            arrows.append((sx + q / 2 + forward * q / 2, sy + q / 2, dx + q / 2 - forward * (q / 2 + 1), dy + q / 2))
    bottom = grid_top + len(sources[0]) * pitch + 8
    head = top - 17 * (len(lines) - 1)
    # a rank's label under its column: "rank 3", or on a phone its number under a "rank" heading
    rank_labels = [(x + q / 2, top + 32, f"{r}" if g.narrow else f"rank {r}") for r in range(ranks) for x, _ in (xy(r, 0),)]
    parts = [
        *(svg.text(x, head + 14 + 17 * i, text, class_=css) for i, line in enumerate(lines) for x, text, css in line if text),
        svg.texts(rank_labels, class_="svg-label-soft", text_anchor="middle"),
        *([svg.text(left - 4, top + 32, "rank", class_="svg-label-soft", text_anchor="end")] if g.narrow else []),
        svg.texts(((left - 4, xy(0, c)[1] + q / 2 + 4, f"chunk {c}") for c in range(len(sources[0]))),
                  class_="svg-label-soft", text_anchor="end"),
        svg.boxes(empty, class_="svg-lane", stroke_dasharray="3 2"),
        # the step's data movement carries the point: where chunks land and the arrows that bring them
        # (before the first step, the data each rank starts with)
        *(svg.boxes(items, class_=_key(f"fill-{key}", not step)) for key, items in sorted(bands.items())),
        svg.boxes(landed, class_=_key("stroke-comm", landed), fill="none", stroke_width="2.5"),
        *(svg.polyline(points, class_=_key("svg-arrow", True)) for points in routed),
        svg.arrows(arrows, head=5.0, class_=_key("svg-arrow", arrows)),
        svg.arcs(links.values(), head=5.0, class_=_key("svg-arrow", links)),
        svg.bows(swaps, bend=0.12, head=5.0, class_=_key("svg-arrow", swaps)),
    ]
    return parts, bottom


def _cost_panel(state, split, top, g):
    """A bar split into the alpha and beta parts, then time against buffer size for both algorithms."""
    alpha_s, bandwidth = state["alpha_us"] * 1e-6, state["bw_GBps"] * 1e9  # display units to SI
    left = g.left
    span = g.width - left - g.right
    lat_w = span * split.latency_share
    title = _wrap(f"{LABEL[state['op']]} of {fmt.data_size(state['size'])} over N = {state['N']} ranks, "
                  f"{state['algo']}: {fmt.duration(split.time_s)}", g.wrap, "svg-title")
    head, top = top, top + 17 * (len(title) - 1)  # the bar and texts go under the title's lines
    texts = [part for line in (
        f"latency: {split.steps} steps \u00d7 {fmt.duration(alpha_s)} = {fmt.duration(split.latency_s)} (grey)",
        f"bandwidth: {fmt.data_size(split.link_bytes)} over {fmt.data_size(bandwidth)}/s = {fmt.duration(split.bandwidth_s)} (purple)",
    ) for part in _wrap(line, g.wrap and g.width - g.text_x - 4, "svg-label")]
    parts = [
        *(svg.text(8, head + 14 + 17 * i, line, class_="svg-title") for i, line in enumerate(title)),
        svg.boxes(((left, top + 22, lat_w, 14),), class_="fill-idle"),
        svg.boxes(((left + lat_w, top + 22, span - lat_w, 14),), class_="fill-comm"),
        svg.texts(((g.text_x, top + 50 + 14 * i, line) for i, line in enumerate(texts)), class_="svg-label"),
    ]
    curves = {algo: [collectives.cost_function(state["op"], state["N"], alpha_s=alpha_s, bandwidth_bytes_per_s=bandwidth,
                                               algorithm=algo)(size) for size in SIZES] for algo in collectives.ALGORITHMS}
    low = math.floor(math.log10(min(min(c) for c in curves.values())))
    high = math.ceil(math.log10(max(max(c) for c in curves.values())))
    chart_top, chart_h = top + 84 + 14 * (len(texts) - 2), float(g.chart_h)
    px = lambda size: left + span * (math.log10(size) - 3) / 7
    py = lambda seconds: chart_top + chart_h * (high - math.log10(seconds)) / max(high - low, 1)
    stride = 1 if high - low <= 6 else 2
    parts += [
        svg.segments([(left, chart_top, left, chart_top + chart_h), (left, chart_top + chart_h, left + span, chart_top + chart_h)]
                     + [(left, py(10.0**k), left + span, py(10.0**k)) for k in range(low, high + 1, stride)], class_="svg-axis"),
        svg.texts(((left - 4, py(10.0**k) + 4, fmt.duration(10.0**k)) for k in range(low, high + 1, stride)),
                  class_="svg-label-soft", text_anchor="end"),
        # the first size starts at the axis, clear of the time labels left of it
        svg.text(px(1e3), chart_top + chart_h + 14, fmt.data_size(1e3), class_="svg-label-soft"),
        svg.texts(((px(10.0**k), chart_top + chart_h + 14, fmt.data_size(10.0**k)) for k in g.decades[1:]),
                  class_="svg-label-soft", text_anchor="middle"),
        svg.segments(((px(state["size"]), chart_top, px(state["size"]), chart_top + chart_h),), class_="svg-cut",
                     stroke_dasharray="3 3"),
    ]
    slower = max(curves, key=lambda algo: curves[algo][0])  # its label goes above its curve, the other's below
    size, _ = svg.label_size("svg-label-soft")
    ticks = [svg.text_box(px(10.0**k), chart_top + chart_h + 14, fmt.data_size(10.0**k), size,
                          "start" if k == 3 else "middle") for k in g.decades]
    names = []
    for algo, times in curves.items():
        chosen = algo == state["algo"]
        parts.append(svg.polyline([(px(s), py(t)) for s, t in zip(SIZES, times)], class_="svg-arrow" if chosen else "svg-cut",
                                  stroke_dasharray=None if chosen else "5 4"))
        above, below = py(times[0]) - 6, py(times[0]) + 14
        first, second = (above, below) if algo == slower else (below, above)
        names.append(svg.Label(px(SIZES[0]) + 4, first, algo + (" (chosen)" if chosen else ""),
                               alternatives=((px(SIZES[0]) + 4, second, "start"),), moves=("up", "right")))
    parts.append(svg.labels(names, (left, chart_top - 20, span, chart_h + 20), obstacles=ticks))
    parts.append(svg.boxes(((px(state["size"]) - 4, py(split.time_s) - 4, 8, 8),), class_="fill-comm"))
    caption = _wrap("time of one collective against buffer size (log-log)", g.wrap and left + span - 4, "svg-label-soft")
    parts.append(svg.texts(((left + span, chart_top + chart_h + 30 + 14 * i, line) for i, line in enumerate(caption)),
                           class_="svg-label-soft", text_anchor="end"))
    return parts, chart_top + chart_h + 36 + 14 * (len(caption) - 1)


def render(state, narrow=False, short=False):
    sim, step, N, g = _sim(state), state["step"], state["N"], _layout(narrow, SHORT_STEPS_W if short else None)
    split = collectives.cost_split(state["op"], state["size"], N, alpha_s=state["alpha_us"] * 1e-6,
                                   bandwidth_bytes_per_s=state["bw_GBps"] * 1e9, algorithm=state["algo"])
    upper, bottom = _step_through(sim, step, 0, N, split.steps, g)
    if short:  # the cost beside the step-through
        lower, height = _cost_panel(state, split, 0, _layout(True, SHORT_COST_W))
        lower, height = [svg.group(lower, transform=f"translate({SHORT_STEPS_W + SHORT_GAP} 0)")], max(bottom, height)
    else:
        lower, height = _cost_panel(state, split, bottom + 10, g)
    capped = f" (capped: N = {N:,} is drawn on {sim.ranks})" if N > sim.ranks else ""
    drawing = svg.document(SHORT_STEPS_W + SHORT_GAP + SHORT_COST_W if short else g.width, height, upper + lower,
                           label=f"{LABEL[state['op']]} step-through over {sim.ranks} ranks{capped} and its alpha-beta cost")
    notes = []
    if N > DRAWN:
        notes.append(f"The step-through is capped at {DRAWN} ranks; at N = {N:,} the same algorithm takes "
                     f"{split.steps:,} steps.")
    if state["algo"] == "tree" and state["op"] == "alltoall":
        notes.append("Bruck's log-step All-to-All routes blocks through other ranks; the drawing shows the pairwise "
                     "exchange, the cost below is Bruck's.")
    elif state["algo"] == "ring" and state["op"] in ("broadcast", "reduce"):
        notes.append(f"The chain is drawn with the buffer in {sim.ranks} chunks, N + chunks - 2 steps; the cost below "
                     "takes the limit of many small chunks, (N - 1) alpha + n / beta.")
    elif sim.op == "allreduce" and sim.algorithm == "binomial":
        notes.append("NCCL's tree AllReduce runs two binary trees, each on half the buffer, with the same 2 lg N steps.")
    readouts = (
        Readout("time_s", "time", fmt.duration(split.time_s), split.time_s),
        Readout("latency_s", "latency part", fmt.duration(split.latency_s), split.latency_s, "idle"),
        Readout("bandwidth_s", "bandwidth part", fmt.duration(split.bandwidth_s), split.bandwidth_s, "comm"),
        Readout("latency_share", "latency share", fmt.percent(split.latency_share), split.latency_share),
        Readout("bus_factor", "bus factor", f"{BUS_FORMULA[state['op']]} = {split.bus_factor:.4g}", split.bus_factor),
        Readout("bytes_per_rank", "bytes each rank sends", fmt.data_size(split.link_bytes), split.link_bytes),
        Readout("busbw", "bus bandwidth nccl-tests reports", f"{fmt.data_size(split.busbw_bytes_per_s)}/s",
                split.busbw_bytes_per_s),
    )
    alt = (f"{sim.ranks} columns of chunks, one per rank, showing {LABEL[sim.op]} by {ALGORITHM_WORDS[sim.algorithm]} "
           f"at step {step} of {len(sim.steps)}; {_phase(sim, step) or 'transfers drawn as arrows'}. "
           + (f"The drawing is capped at {sim.ranks} ranks: at N = {N:,} the same algorithm takes {split.steps:,} steps. "
              if N > sim.ranks else "") + "With it, "
           f"{LABEL[state['op']]} of {fmt.data_size(state['size'])} over {N} ranks takes {fmt.duration(split.time_s)}: "
           f"{fmt.duration(split.latency_s)} of latency and {fmt.duration(split.bandwidth_s)} of bandwidth, with the ring and "
           "tree times plotted against buffer size.")
    return View(svg=drawing, readouts=readouts, note=" ".join(notes), alt=alt)
