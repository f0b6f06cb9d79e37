"""Figure 10: HSDP as a 2-D mesh; the shard group size trades memory per GPU against the fabric
that carries the per-layer collectives (models.hsdp, models.memory)."""
import math
from functools import lru_cache
from typing import NamedTuple

from figures import svg
from figures.contract import Readout, Select, Slider, View, log_stops
from models import fmt, hardware, hsdp

NUMBER = 10
UNITS = 32  # FSDP units (transformer blocks) per step: each pays its collectives' latency once
TITLE = "HSDP: putting the chatty collective on the fast wire"
CAPTION = (
    "Each square is a GPU and each outlined box a node: a row is one shard group, a column one replica group, and "
    "the bars compare every shard group size the world allows."
)
NOTE = (
    "A shard group runs an AllGather and a ReduceScatter at every layer, a replica group one AllReduce per step; "
    "rings are lavender inside a node and plum across nodes. The bars give model state per GPU and communication "
    f"per step ({UNITS} layers of one unit each; the thin top is the replica AllReduce). The memory axis is "
    "logarithmic, a power of ten per grid line; a bar over the dashed HBM line is red: that group does not fit."
)
TRIES = (
    ("Flat FSDP over 512", {"shard": 512}),
    ("Shard groups of 2", {"shard": 2}),
    ("1T parameters", {"params": 1_000_000_000_000}),
    ("1T, shard groups of 256", {"params": 1_000_000_000_000, "shard": 256}),
)

POWERS = tuple(2 ** k for k in range(13))  # 1 ... 4096
INTRA_LINKS = ("nvlink3", "nvlink4", "nvlink5", "infinity_fabric_mi300x", "pcie4_x16", "pcie5_x16")
INTER_LINKS = ("ib_hdr", "ib_ndr", "ib_xdr", "roce_400gbe")
REFERENCE_GPU = "h100_sxm"  # whose HBM the memory chart marks

CONTROLS = (
    Slider("params", "Parameters", stops=log_stops(1e9, 1e12), default=7_500_000_000, format=fmt.si_count),
    Slider("N", "GPUs in the world", stops=POWERS[3:], default=512, format=fmt.gpus),
    Slider("shard", "Shard group size", stops=POWERS, default=8, format=fmt.gpus),
    Slider("gpus", "GPUs per node", stops=(2, 4, 8, 16), default=8, format=fmt.gpus),
    Select("intra", "Inside a node", options=tuple((k, hardware.LINKS[k].name) for k in INTRA_LINKS), default="nvlink4"),
    Select("inter", "Across nodes", options=tuple((k, hardware.LINKS[k].name) for k in INTER_LINKS), default="ib_ndr"),
)
PRIMARY = ("shard", "gpus")  # the shard group against the node: on which wire the chatty collective runs


def constrain(state):
    """A shard group divides the world: no larger than N (every size here is a power of two)."""
    state["shard"] = min(state["shard"], state["N"])
    return state


def limits(state):
    """The shard slider's range: up to the world."""
    return {"shard": state["N"]}


@lru_cache(maxsize=256)
def _step(params, world, shard, gpus, intra, inter):
    inside, across = hardware.link(intra), hardware.link(inter)
    step = hsdp.hsdp_step(params, world, shard, gpus_per_node=gpus, num_units=UNITS, alpha_s=inside.alpha_s,
                          inter_node_alpha_s=across.alpha_s, intra_node_bandwidth_bytes_per_s=inside.bandwidth_bytes_per_s,
                          inter_node_bandwidth_bytes_per_s=across.bandwidth_bytes_per_s)
    return step, hsdp.hsdp_traffic(params, world, shard, gpus_per_node=gpus)


MAX_ROWS = 8


class _Layout(NamedTuple):
    """The drawing's geometry and wording: one per width (a wide screen, a phone's column)."""
    width: float
    left: float  # the charts' value axis (and, wide, the mesh's left edge)
    mesh_left: float
    max_cols: int  # GPUs of a shard group drawn
    wrap: float  # the mesh's lines wrap at this width (0: they do not)
    memory_title: str
    comm_title: str
    size_caption: tuple  # the size axis' caption, one line each
    max_rows: int = MAX_ROWS  # shard groups drawn
    pitch: float = 17  # between the mesh's squares
    chart_x: float = 0  # the charts' left edge (their titles')
    chart_h: float = 80  # each chart's height
    chart_gap: float = 60  # from the memory chart's base to the top of the communication chart's
    time_ticks: int = 5  # on the communication chart's axis (a shorter chart: fewer, so their names keep apart)
    beside: bool = False  # the charts beside the mesh, not under it


WIDE = _Layout(560, 96, 96, 24, 0, "Model state per GPU, for every shard group size",
               "Communication time per step, before overlap (time, not bytes)",
               ("shard group size, GPUs (thin top: the replica AllReduce)",))
# A phone: 320 units with 11-unit labels; up to 16 GPUs of a group, the mesh's lines wrapped,
# shorter chart titles, the size caption on two lines, every other size named when they crowd.
NARROW = _Layout(320, 58, 8, 16, 320, "Model state per GPU, by shard group size",
                 "Communication time per step, before overlap", ("shard group size, GPUs", "thin top: the replica AllReduce"))
# A phone on its side: the mesh (up to 6 x 14 GPUs) in a column of its own, the charts beside it, shorter.
MESH_W = 236
SHORT = _Layout(720, MESH_W + 70, 4, 14, MESH_W, "Model state per GPU, by shard group size",
                "Communication time per step, before overlap", ("shard group size, GPUs (thin top: the replica AllReduce)",),
                max_rows=6, pitch=15, chart_x=MESH_W + 14, chart_h=62, chart_gap=45, time_ticks=3, beside=True)
FABRIC_COLOUR = {hsdp.INTRA_NODE: "intra", hsdp.INTER_NODE: "inter"}
FABRIC_NAME = {hsdp.INTRA_NODE: "inside a node", hsdp.INTER_NODE: "across nodes", hsdp.NO_FABRIC: "no traffic"}


def _wrap(text, width, size=11):
    """``text`` broken at spaces into lines no wider than ``width`` (0: one line)."""
    return svg.wrap(text, width or float("inf"), size)


def _mesh(state, step, top, layout):
    """The mesh, R rows (shard groups) by S columns (replica groups), as far as MAX_ROWS x max_cols."""
    shard, replicas, gpus = state["shard"], step.replicas, state["gpus"]
    rows, cols = min(replicas, layout.max_rows), min(shard, layout.max_cols)
    pitch = layout.pitch
    size = pitch - 5
    heading = _wrap(f"Rows: shard groups of {fmt.gpus(shard)}, " + (
        f"AllGather and ReduceScatter at every layer, {FABRIC_NAME[step.shard_fabric]}" if shard > 1
        else "nothing to gather: every GPU holds the whole model"), layout.wrap)
    x0, y0 = layout.mesh_left, top + 11 + 15 * len(heading)
    cell = lambda r, c: (x0 + c * pitch, y0 + r * pitch)
    if shard >= gpus:  # ranks run node by node and a shard group is consecutive ranks
        nodes = [(r, c, r, min(c + gpus, cols) - 1) for r in range(rows) for c in range(0, cols, gpus)]
    else:
        nodes = [(r, 0, min(r + gpus // shard, rows) - 1, cols - 1) for r in range(0, rows, gpus // shard)]
    parts = [
        (svg.texts(((0, top + 12 + 15 * i, line) for i, line in enumerate(heading)), class_="svg-label-soft")
         if len(heading) > 1 else svg.text(0, top + 12, heading[0], class_="svg-label-soft")),
        svg.boxes(((cell(r0, c0)[0] - 2, cell(r0, c0)[1] - 2, (c1 - c0) * pitch + size + 4, (r1 - r0) * pitch + size + 4)
                   for r0, c0, r1, c1 in nodes), class_="svg-lane"),
    ]
    mid = size / 2
    # the point: where the chatty per-layer collective runs (its rings' colour says on which
    # wire); with no shard group to gather in, the replicas' AllReduce is all the traffic
    key = lambda chatty: f" {svg.KEY}" if chatty == (shard > 1) else ""  # noqa: E731
    if shard > 1:
        parts.append(svg.segments(((x0 + mid, cell(r, 0)[1] + mid, cell(0, cols - 1)[0] + mid, cell(r, 0)[1] + mid)
                                   for r in range(rows)), class_=f"stroke-{FABRIC_COLOUR[step.shard_fabric]}{key(True)}",
                                  stroke_width=3))
    if replicas > 1:
        parts.append(svg.segments(((cell(0, c)[0] + mid, y0 + mid, cell(0, c)[0] + mid, cell(rows - 1, 0)[1] + mid)
                                   for c in range(cols)), class_=f"stroke-{FABRIC_COLOUR[step.replica_fabric]}{key(False)}",
                                  stroke_width=3, stroke_dasharray="4 2"))
    parts.append(svg.boxes((cell(r, c) + (size, size) for r in range(rows) for c in range(cols)), class_="svg-neutral-fill"))
    bottom = y0 + rows * pitch
    shown = []
    if cols < shard:
        shown.append(f"{cols} of the {shard} GPUs of each shard group")
        parts.append(svg.text(cell(0, cols)[0] + 2, y0 + mid + 4, "...", class_="svg-label-soft"))
    if rows < replicas:
        shown.append(f"{rows} of the {replicas} shard groups")
        parts.append(svg.text(x0, bottom + 6, "...", class_="svg-label-soft"))
        bottom += 8
    lines = [f"Columns (dashed): replica groups of {fmt.gpus(replicas)}, AllReduce once per step, "
             f"{FABRIC_NAME[step.replica_fabric]}" if replicas > 1 else "One replica: no AllReduce across groups",
             f"Outlined: nodes of {fmt.gpus(gpus)}."] + ([f"Drawn: {' and '.join(shown)}."] if shown else [])
    lines = [part for line in lines for part in _wrap(line, layout.wrap)]
    parts.append(svg.texts(((0, bottom + 16 + 15 * i, line) for i, line in enumerate(lines)), class_="svg-label-soft"))
    return parts, bottom + 16 + 15 * len(lines)


def _value_axis(parts, labels, base, height, high, name, name_tick, layout):
    """The communication chart's value axis: ``layout.time_ticks`` round ticks from 0 to ``high`` as faint lines across the
    chart, each named with its unit (``name_tick``) in the left margin; returns the scale."""
    scale = (height - 16) / high  # room over the tallest bar for its value
    marks = svg.ticks(0, high, layout.time_ticks)
    parts.append(svg.segments([(layout.left, base - t * scale, layout.width - 12, base - t * scale) for t in marks[1:]],
                              class_="svg-axis", stroke_dasharray="1 3"))
    labels += [svg.Label(layout.left - 6, base - t * scale + 4, name_tick(t) if t else "0", anchor="end",
                         moves=()) for t in marks]
    labels.insert(0, svg.Label(layout.chart_x, base - height - 12, name, class_="svg-label"))
    return scale


def _log_axis(parts, labels, base, height, low, high, name, layout):
    """The memory chart's value axis, logarithmic: a faint line at every power of ten of bytes
    from ``low`` to ``high`` (both powers of ten), named in the left margin. A linear axis up to
    1T parameters' 16 TB squeezed the HBM line and every group that fits into its bottom pixel.
    Returns bytes -> bar height."""
    decades = round(math.log10(high / low))
    scale = (height - 16) / decades

    def rise(value):
        return max(0.0, math.log10(value / low)) * scale

    marks = [low * 10 ** k for k in range(decades + 1)]
    parts.append(svg.segments([(layout.left, base - rise(m), layout.width - 12, base - rise(m)) for m in marks[1:]],
                              class_="svg-axis", stroke_dasharray="1 3"))
    every = 1 if scale >= 14 else 2  # decades too close for a label each: every other one, the top's named
    labels += [svg.Label(layout.left - 6, base - rise(m) + 4, fmt.data_size(m), anchor="end", moves=())
               for k, m in enumerate(marks) if (decades - k) % every == 0]
    labels.insert(0, svg.Label(layout.chart_x, base - height - 12, name, class_="svg-label"))
    return rise


def _trade(state, top, layout):
    """Every shard group size of this world: memory per GPU and communication time per step,
    as bars on value axes with units (time, not bytes: NVLink moves more bytes in less time)."""
    sizes = [s for s in POWERS if s <= state["N"]]
    runs = [_step(state["params"], state["N"], s, state["gpus"], state["intra"], state["inter"])[0] for s in sizes]
    left, width, height = layout.left, layout.width - layout.left - 12, layout.chart_h
    pitch = width / len(sizes)
    bar = min(pitch * 0.7, 26)
    gpu = hardware.gpu(REFERENCE_GPU)
    chosen = sizes.index(state["shard"])
    memory_base, comm_base = top + 30 + height, top + 30 + 2 * height + layout.chart_gap
    parts, labels, obstacles = [], [], []
    held = [r.memory.total_bytes for r in runs]
    low = 10.0 ** math.floor(math.log10(min(held)))
    high = 10.0 ** math.ceil(math.log10(max(max(held), gpu.hbm_bytes) * 1.0001))
    if high / low < 100:  # at least two decades, so the scale reads as one
        low = high / 100
    rise = _log_axis(parts, labels, memory_base, height, low, high, layout.memory_title, layout)
    longest = max(r.total_comm_s for r in runs) or 1.0
    unit, per_s = ("s", 1.0) if longest >= 10 else ("ms", 1e3)
    comm_scale = _value_axis(parts, labels, comm_base, height, longest * per_s,
                             layout.comm_title, lambda t: f"{fmt.decimal(t, 3)} {unit}", layout) * per_s
    bars = {}  # (palette key, width) -> boxes
    for i, r in enumerate(runs):
        x = left + pitch * i + pitch / 2
        memory = max(rise(r.memory.total_bytes), 1.0)
        fits = r.memory.total_bytes <= gpu.hbm_bytes
        bars.setdefault(("memory" if fits else "warn", bar), []).append((x - bar / 2, memory_base - memory, bar, memory))
        layer = (r.allgather_s + r.reducescatter_s) * comm_scale
        once = r.allreduce_s * comm_scale
        if layer:
            bars.setdefault((FABRIC_COLOUR[r.shard_fabric], bar), []).append((x - bar / 2, comm_base - layer, bar, layer))
        if once:
            bars.setdefault((FABRIC_COLOUR[r.replica_fabric], bar / 2), []).append((x - bar / 4, comm_base - layer - once, bar / 2, once))
    parts += [svg.boxes(boxes, class_=f"fill-{key}") for (key, _), boxes in sorted(bars.items())]
    obstacles += [box for boxes in bars.values() for box in boxes]
    # the value axes' ticks: the chosen bars' values keep clear of them (on a phone the first bar is near)
    obstacles += [svg.text_box(t.x, t.y, t.text, svg.LABEL_SIZES["svg-label-soft"], t.anchor) for t in labels[2:]]
    x = left + pitch * chosen + pitch / 2
    parts.append(svg.boxes(((x - pitch / 2 + 1, memory_base - height - 4, pitch - 2, comm_base - memory_base + height + 8),),
                           fill="none", class_="svg-axis"))
    r = runs[chosen]
    hbm_y = memory_base - rise(gpu.hbm_bytes)
    obstacles.append((left, hbm_y - 1, width, 2))  # the chosen bar's value stays off the HBM line
    over = r.memory.total_bytes > gpu.hbm_bytes
    labels[2:2] = [  # after the two titles: the chosen bars' values, then the HBM line's name
        svg.Label(x, memory_base - max(rise(r.memory.total_bytes), 1.0) - 5, fmt.gigabytes(r.memory.total_bytes)
                  + (" (does not fit)" if over else ""), anchor="middle", moves=("up", "right", "left"),
                  class_="svg-label"),
        svg.Label(x, comm_base - r.total_comm_s * comm_scale - 5, fmt.duration(r.total_comm_s), anchor="middle",
                  moves=("up", "right", "left"), class_="svg-label"),
        svg.Label(left + width, hbm_y - 4, f"HBM of one {gpu.short_name}: {fmt.gigabytes(gpu.hbm_bytes)}", anchor="end",
                  alternatives=((left + width, hbm_y + 13, "end"),), moves=("up", "down")),
    ]
    # the sizes, or where they would touch, every other one (the chosen one among them)
    named = [i for i in range(len(sizes)) if (i - chosen) % 2 == 0] if max(
        svg.text_width(str(s), svg.LABEL_SIZES["svg-label-soft"]) for s in sizes) + 4 > pitch else range(len(sizes))
    labels += [svg.Label(left + pitch * (i + 0.5), comm_base + 15, sizes[i], anchor="middle", moves=()) for i in named]
    labels += [svg.Label(left + width, comm_base + 31 + 15 * i, line, anchor="end", moves=())
               for i, line in enumerate(layout.size_caption)]
    legend_y = comm_base + 35 + 15 * len(layout.size_caption)
    parts += [
        svg.segments(((left, memory_base, left + width, memory_base), (left, comm_base, left + width, comm_base)), class_="svg-axis"),
        svg.segments(((left, hbm_y, left + width, hbm_y),), class_="stroke-capacity", stroke_width=1.5, stroke_dasharray="6 4"),
        svg.boxes([(left, legend_y - 9, 10, 10)], class_="fill-intra"),
        svg.boxes([(left + 150, legend_y - 9, 10, 10)], class_="fill-inter"),
        svg.texts(((left + 14, legend_y, "inside a node"), (left + 164, legend_y, "across nodes")), class_="svg-label-soft"),
        svg.labels(labels, (layout.chart_x, top, layout.width - layout.chart_x, legend_y - 12 - top), obstacles=obstacles),
    ]
    if ("warn", bar) in bars:  # the sizes whose state is over the HBM line, named as well as coloured
        legend_y += 17
        parts += [svg.boxes([(left, legend_y - 9, 10, 10)], class_="fill-warn"),
                  svg.text(left + 14, legend_y, "over the HBM line: does not fit", class_="svg-label-soft")]
    return parts, legend_y + 8


def render(state, narrow=False, short=False):
    layout = NARROW if narrow else SHORT if short else WIDE
    step, traffic = _step(state["params"], state["N"], state["shard"], state["gpus"], state["intra"], state["inter"])
    mesh, bottom = _mesh(state, step, 0, layout)
    trade, height = _trade(state, 0 if layout.beside else bottom + 6, layout)
    height = max(height, bottom) if layout.beside else height
    label = (f"HSDP mesh of {fmt.gpus(state['N'])}: {step.replicas} replicas of shard groups of {fmt.gpus(state['shard'])}, "
             f"nodes of {state['gpus']}")
    drawing = svg.document(layout.width, height, mesh + trade, label=label)
    gb = lambda b: fmt.gigabytes(b)
    crosses = 1 if step.shard_fabric == hsdp.INTER_NODE else 0
    fits = step.memory.total_bytes <= hardware.gpu(REFERENCE_GPU).hbm_bytes
    readouts = (
        Readout("model_state_bytes_per_device", "model state per GPU", gb(step.memory.total_bytes),
                step.memory.total_bytes, "memory" if fits else None),  # the red swatch is on "fits"
        Readout("fits", f"model state fits one {hardware.gpu(REFERENCE_GPU).short_name}",
                "yes" if fits else f"no: does not fit, {gb(step.memory.total_bytes)} > "
                f"{gb(hardware.gpu(REFERENCE_GPU).hbm_bytes)} of HBM", int(fits), None if fits else "warn"),
        Readout("intra_node_bytes_per_step", "sent inside the node per GPU per step", gb(traffic.intra_node_bytes),
                traffic.intra_node_bytes, "intra" if traffic.intra_node_bytes > 0 else None),
        Readout("inter_node_bytes_per_step", "sent across nodes per GPU per step", gb(traffic.inter_node_bytes),
                traffic.inter_node_bytes, "inter" if traffic.inter_node_bytes > 0 else None),
        Readout("step_comm_s", "communication per step (before overlap)", fmt.duration(step.total_comm_s), step.total_comm_s),
        Readout("allreduce_s", "of which the replica AllReduce", fmt.duration(step.allreduce_s), step.allreduce_s),
        Readout("shard_comm_s", "of which the shard group's AllGathers and ReduceScatters",
                fmt.duration(step.allgather_s + step.reducescatter_s), step.allgather_s + step.reducescatter_s),
        Readout("crosses_node", "shard group spans nodes", "yes" if crosses else "no", crosses),
    )
    alt = (
        f"{label}. Per GPU: {gb(step.memory.total_bytes)} of model state"
        f"{'' if fits else ', which does not fit one ' + hardware.gpu(REFERENCE_GPU).short_name}; per step {gb(traffic.intra_node_bytes)} sent "
        f"inside the node and {gb(traffic.inter_node_bytes)} across nodes; {fmt.duration(step.total_comm_s)} of "
        f"communication. The shard group {'spans' if crosses else 'stays inside'} "
        f"{'nodes' if crosses else 'one node'}. Bar charts compare every shard group size from 1 to {state['N']}."
    )
    return View(svg=drawing, readouts=readouts, alt=alt)
