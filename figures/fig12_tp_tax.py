"""Figure 12: per-layer time as T grows, compute shrinking and AllReduces jumping at the node edge."""
import math

from figures import svg
from figures.contract import Readout, Select, Slider, View
from models import fmt, hardware, tensor

NUMBER = 12
TITLE = "The tensor-parallel tax, on the fast fabric and off it"
CAPTION = (
    "One transformer layer's training-step time on one rank of a tensor-parallel group of T, for T from 1 to 64: "
    "the matrix multiplies shrink as T grows, the four AllReduces on top do not. Click a bar to pick its T."
)
NOTE = (
    "Light and dark slate are the forward and backward matrix multiplies, which lose efficiency as they narrow (an "
    "illustrative curve, not a measurement). Nothing hides the AllReduces: lavender while they run on NVLink inside a "
    "node, plum on the network once the group spills past it. A node is one NVLink domain only as far as the GPU's "
    "NVLink reaches: 8 for an H100, 72 in Blackwell's NVL72 rack, drawn here with the B200's numbers (the rack's "
    "GB200s peak about 10% higher, 2.5 against 2.25 PFLOP/s dense BF16, on the same 1.8 TB/s NVLink 5)."
)
TRIES = (
    ("T = 16, across nodes", {"T": 16}),
    ("An NVL72 rack (Blackwell)", {"gpus": 72, "gpu": "b200"}),
    ("Hidden size 4,096", {"hidden": 4096}),
    ("h = 4,096 at T = 2", {"hidden": 4096, "T": 2}),
)
DEGREES = (1, 2, 4, 8, 16, 32, 64)
NETWORK_LINKS = ("ib_hdr", "ib_ndr", "ib_xdr", "roce_400gbe")
GPUS = ("a100_80gb", "h100_sxm", "b200", "mi300x")  # one of each speed: an H200 or a 40 GB A100 would draw the same bars

CONTROLS = (
    Slider("T", "Tensor-parallel degree T", stops=DEGREES, default=8),
    Slider("hidden", "Hidden size h", stops=tuple(2 ** k for k in range(10, 16)), default=8192, format=fmt.count),
    Slider("seq", "Sequence length s", stops=tuple(2 ** k for k in range(9, 18)), default=4096, format=fmt.count),
    Slider("micro", "Microbatch b", stops=(1, 2, 4, 8, 16), default=1),
    Select("gpus", "GPUs per node", options=((4, "4"), (8, "8"), (16, "16"), (72, "72 (a Blackwell NVL72 rack)")), default=8),
    Select("gpu", "GPU", options=tuple((k, hardware.GPUS[k].name) for k in GPUS), default="h100_sxm"),
    Select("inter", "Network", options=tuple((k, hardware.LINKS[k].name) for k in NETWORK_LINKS), default="ib_ndr"),
)
PRIMARY = ("T", "gpus")  # the bar to read, and where the node edge falls

WIDTH, LEFT, TOP, PLOT_HEIGHT = 460, 64, 30, 250
# a phone on its side (render(short=True)): the columns spread wider and shorter, so the
# chart and its note fit under a two-row bar at 844 x 390
SHORT_WIDTH, SHORT_PLOT_HEIGHT, SHORT_TOP = 720, 136, 44  # (a row of its own over the columns' times)
BAR = 34
# On a phone (render(narrow=True)) the bars lie down: one row per T, time across, the node
# edge a dashed line between two rows with its two fabrics named above and below it.
ROWS_WIDTH, ROWS_LEFT, ROW, ROW_BAR, EDGE_GAP = 320, 84, 30, 22, 36


def _tick(seconds, top_s):
    """An axis label in the unit of the axis's top: "250 us", "5 ms", "150 s"."""
    if top_s >= 10:
        return f"{fmt.decimal(seconds)} s"
    return f"{fmt.decimal(seconds * 1e3)} ms" if top_s >= 1e-3 else f"{fmt.decimal(seconds * 1e6)} \u00b5s"


def _stack(t):
    """A bar's parts, from its base: colour key and seconds."""
    return (("forward", t.forward_compute_s), ("backward", t.backward_compute_s),
            ("inter" if t.crosses_node else "intra", t.comm_s))


def _fills(segments):
    """The bars' parts, one path per colour (faded: every bar but the chosen T's)."""
    parts = []
    for key, boxes in sorted(segments.items()):
        colour, faded = key.split("-")[0], key.endswith("-faded")
        parts.append(svg.boxes(boxes, class_=f"fill-{colour}", fill_opacity=0.35 if faded else None))
    return parts


def _lines(content, width, size):
    """``content`` broken at spaces into the fewest lines no wider than ``width`` at
    ``size``, as even in length as they can be (no last line of one word). A number stays
    on the line of the word after it (its unit)."""
    return svg.wrap(content, width, size, keep=svg.with_its_unit, even=True)


def _columns(times, chosen, intra, network, width=WIDTH, plot_height=PLOT_HEIGHT, top=TOP, names_y=None):
    """The wide drawing: a column per T, time up, ``width`` wide with a plot ``plot_height``
    tall, the fabrics' names at ``names_y`` (default: just over the plot). Returns its parts and height."""
    names_y = top - 10 if names_y is None else names_y
    slot = (width - LEFT - 8) / len(DEGREES)
    step = svg.ticks(0, max(t.layer_s for t in times), 6)[1]  # a round grid step, five or fewer to the top
    top_s = step * math.ceil(max(t.layer_s for t in times) / step)
    scale = plot_height / top_s
    base = top + plot_height
    segments = {}
    labels, hits = [], []
    for i, t in enumerate(times):
        x = LEFT + i * slot + (slot - BAR) / 2
        faded = "" if t.tp == chosen.tp else "-faded"
        y = base
        for key, seconds in _stack(t):
            segments.setdefault(key + faded, []).append((x, y - seconds * scale, BAR, seconds * scale))
            y -= seconds * scale
        labels.append((x + BAR / 2, y - 5, fmt.duration(t.layer_s)))
        labels.append((x + BAR / 2, base + 16, f"T = {t.tp}"))
        labels.append((x + BAR / 2, base + 31, fmt.percent(t.gemm_efficiency, 0)))
        hits.append((x - 4, top - 16, BAR + 8, base - top + 52, f"T={t.tp}", f"show T = {t.tp}"))
    parts = [svg.segments([(LEFT, base - v * scale, width - 8, base - v * scale)
                           for v in (k * step for k in range(int(round(top_s / step)) + 1))], class_="svg-axis"),
             svg.texts(((LEFT - 6, base - k * step * scale + 4, _tick(k * step, top_s))
                        for k in range(int(round(top_s / step)) + 1)), class_="svg-label-soft", text_anchor="end")]
    parts += _fills(segments)
    inside = [t.tp for t in times if not t.crosses_node]
    x = LEFT + DEGREES.index(chosen.tp) * slot + (slot - BAR) / 2
    parts.append(svg.boxes([(x, base - chosen.layer_s * scale, BAR, chosen.layer_s * scale)], fill="none",
                           class_="svg-ink-stroke" if len(inside) < len(DEGREES) else f"svg-ink-stroke {svg.KEY}",
                           stroke_width=1.5))
    parts.append(svg.texts(labels, class_="svg-label", text_anchor="middle"))
    parts.append(svg.text(0, base + 31, "GEMM eff.", class_="svg-label-soft"))
    if len(inside) < len(DEGREES):  # the node boundary, between the last T that fits and the first that does not
        edge = LEFT + len(inside) * slot
        parts.append(svg.segments([(edge, names_y - 10, edge, base + 36)], class_=f"svg-ink-stroke {svg.KEY}",
                                  stroke_dasharray="4 3"))
        parts.append(svg.text(edge - 6, names_y, f"< {intra}", class_="svg-label-soft", text_anchor="end"))
        beyond = f"{network} >"  # named in full where it fits right of the edge, else "network"
        if edge + 6 + svg.text_width(beyond, svg.LABEL_SIZES["svg-label-soft"]) > width:
            beyond = "network >"
        parts.append(svg.text(edge + 6, names_y, beyond, class_="svg-label-soft"))
    else:
        parts.append(svg.text(LEFT, names_y, f"every T up to 64 fits in one {intra} domain", class_="svg-label"))
    parts.append(svg.hit_areas(hits, class_="svg-hit"))
    return parts, base + 44


def _rows(times, chosen, intra, network):
    """The narrow drawing: a row per T, time across, the node edge between two rows (the
    key: the dashed line, its fabrics' names and the bars either side). Returns its parts
    and height."""
    soft, label = svg.LABEL_SIZES["svg-label-soft"], svg.LABEL_SIZES["svg-label"]
    inside = sum(1 for t in times if not t.crosses_node)
    edge = inside < len(times)
    head = [] if edge else _lines(f"every T up to 64 fits in one {intra} domain", ROWS_WIDTH, label)
    top = 20 + (16 * len(head) + 4 if head else 0)  # under the note that every T fits, and "GEMM eff."
    row_y = lambda i: top + i * ROW + (EDGE_GAP if edge and i >= inside else 0)  # noqa: E731
    base = row_y(len(times)) + 2
    # the longest bar as long as its time label, right of it, lets it be; grid lines at a
    # round step, three or four of them
    room = ROWS_WIDTH - ROWS_LEFT
    scale = min((room - 5 - svg.text_width(fmt.duration(t.layer_s), label)) / t.layer_s for t in times)
    longest = max(t.layer_s for t in times)
    step = svg.ticks(0, longest, 4)[1]
    top_s = step * math.ceil(longest / step)
    grid = [k * step for k in range(int(round(top_s / step)) + 1) if k * step * scale <= room - 20]
    segments, key_segments = {}, {}
    labels, effs, hits = [], [], []
    for i, t in enumerate(times):
        y = row_y(i) + (ROW - ROW_BAR) / 2
        faded = "" if t.tp == chosen.tp else "-faded"
        into = key_segments if edge and i in (inside - 1, inside) else segments
        x = ROWS_LEFT
        for key, seconds in _stack(t):
            into.setdefault(key + faded, []).append((x, y, seconds * scale, ROW_BAR))
            x += seconds * scale
        labels.append((x + 5, y + ROW_BAR / 2 + 4, fmt.duration(t.layer_s)))
        labels.append((0, y + ROW_BAR / 2 + 4, f"T = {t.tp}"))
        effs.append((ROWS_LEFT - 6, y + ROW_BAR / 2 + 4, fmt.percent(t.gemm_efficiency, 0)))
        hits.append((0, row_y(i), ROWS_WIDTH, ROW, f"T={t.tp}", f"show T = {t.tp}"))
    spans = ((top - 4, row_y(inside) - EDGE_GAP), (row_y(inside), base)) if edge else ((top - 4, base),)
    parts = [svg.segments([(ROWS_LEFT + v * scale, y0, ROWS_LEFT + v * scale, y1) for v in grid for y0, y1 in spans],
                          class_="svg-axis"),
             svg.texts(((ROWS_LEFT + v * scale, base + 15, _tick(v, top_s)) for v in grid), class_="svg-label-soft",
                       text_anchor="middle")]
    parts += _fills(segments)
    y = row_y(DEGREES.index(chosen.tp)) + (ROW - ROW_BAR) / 2
    parts.append(svg.boxes([(ROWS_LEFT, y, chosen.layer_s * scale, ROW_BAR)], fill="none",
                           class_="svg-ink-stroke" if edge else f"svg-ink-stroke {svg.KEY}", stroke_width=1.5))
    if edge:  # the dashed node edge across the gap, its fabrics named above and below it
        line = row_y(inside) - EDGE_GAP / 2
        below = f"\u2193 {network}"
        if svg.text_width(below, soft) > ROWS_WIDTH:
            below = "\u2193 network"
        parts.append(svg.group([*_fills(key_segments),
                                svg.segments([(0, line, ROWS_WIDTH, line)], class_="svg-ink-stroke",
                                             stroke_dasharray="4 3"),
                                svg.texts(((0, line - 5, f"\u2191 {intra}"), (0, line + 14, below)),
                                          class_="svg-label-soft")], class_=svg.KEY))
    else:
        parts.append(svg.texts(((0, 14 + 16 * n, text) for n, text in enumerate(head)), class_="svg-label"))
    parts.append(svg.texts(labels, class_="svg-label"))
    parts.append(svg.texts(effs + [(ROWS_LEFT - 6, top - 8, "GEMM eff.")], class_="svg-label-soft", text_anchor="end"))
    parts.append(svg.hit_areas(hits, class_="svg-hit"))
    return parts, base + 24


def _domain_note(state, domain, intra):
    """Where the GPU's scale-up fabric joins fewer GPUs than the node holds: what the drawing does."""
    if domain >= state["gpus"]:
        return ""
    name = hardware.gpu(state["gpu"]).short_name
    rack = " (72 in one domain is a Blackwell NVL72 rack: pick the B200)" if state["gpus"] == 72 else ""
    return (f"Each {name} node joins at most {domain} GPUs on one {intra}, not {state['gpus']}, so the node edge is "
            f"drawn at {domain}{rack}.")


def render(state, narrow=False, short=False):
    intra = hardware.LINKS[hardware.gpu(state["gpu"]).scale_up_link].short_name
    domain = hardware.scale_up_domain(state["gpu"], state["gpus"])
    times = [tensor.tp_layer_time(state["micro"], state["seq"], state["hidden"], t, gpu=state["gpu"],
                                  gpus_per_node=domain, inter_link=state["inter"]) for t in DEGREES]
    chosen = times[DEGREES.index(state["T"])]
    network = hardware.LINKS[state["inter"]].short_name
    width = ROWS_WIDTH if narrow else SHORT_WIDTH if short else WIDTH
    if narrow:
        parts, height = _rows(times, chosen, intra, network)
    else:
        parts, height = _columns(times, chosen, intra, network, *((width, SHORT_PLOT_HEIGHT, SHORT_TOP, SHORT_TOP - 26) if short else ()))
    note = _domain_note(state, domain, intra)
    if note:  # under the chart, in full: the control the reader moved did not do what its label says
        size = svg.LABEL_SIZES["svg-label"]
        lines = _lines(note, width - 4, size)
        parts.append(svg.texts(((0, height + 6 + 16 * i, line) for i, line in enumerate(lines)), class_="svg-label"))
        height += 12 + 16 * len(lines)
    readouts = (
        Readout("layer_time_s", f"layer time at T = {chosen.tp}", fmt.duration(chosen.layer_s), chosen.layer_s),
        Readout("tp_comm_fraction", "spent in AllReduces", fmt.percent(chosen.comm_fraction),
                chosen.comm_fraction, "inter" if chosen.crosses_node else "intra"),
        Readout("crosses_node", "group crosses the node edge",
                f"yes, T = {chosen.tp} > {domain}, the GPUs one scale-up fabric joins" if chosen.crosses_node else "no",
                1 if chosen.crosses_node else 0),
        Readout("speedup", "speedup over T = 1", f"{fmt.decimal(chosen.speedup)}x", chosen.speedup),
        Readout("allreduce_s", "one AllReduce", fmt.duration(chosen.allreduce_s) if chosen.tp > 1 else "none at T = 1",
                chosen.allreduce_s),
        Readout("gemm_efficiency", "GEMM efficiency (illustrative)", fmt.percent(chosen.gemm_efficiency, 0),
                chosen.gemm_efficiency),
        Readout("forward_compute_s", "forward GEMMs", fmt.duration(chosen.forward_compute_s), chosen.forward_compute_s, "forward"),
        Readout("backward_compute_s", "backward GEMMs", fmt.duration(chosen.backward_compute_s), chosen.backward_compute_s, "backward"),
    )
    readouts += (Readout("nvlink_domain", f"GPUs on one {intra}", f"{domain} GPUs", domain),)
    alt = (f"Stacked bars of one layer's time for T = 1 to 64 at h = {state['hidden']}, s = {state['seq']}, "
           f"b = {state['micro']}: " + ", ".join(f"T = {t.tp} {fmt.duration(t.layer_s)}" for t in times)
           + f". At T = {chosen.tp}, {fmt.percent(chosen.comm_fraction)} of it is AllReduce "
           + (f"on the network ({network})." if chosen.crosses_node else f"inside the node ({intra}).")
           + (f" {note}" if note else ""))
    return View(svg=svg.document(width, height, parts, label=alt, class_="svg-narrow"),
                readouts=readouts, alt=alt)
