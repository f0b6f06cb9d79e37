"""Figure 10: HSDP as a 2-D mesh; the shard group size trades memory per GPU against the fabric
that carries the per-layer collectives (models.hsdp, models.memory)."""
from functools import lru_cache

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
    f"per step ({UNITS} layers of one unit each; the thin top is the replica AllReduce)."
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


WIDTH, LEFT = 560, 96
MAX_ROWS, MAX_COLS = 8, 24
FABRIC_COLOUR = {hsdp.INTRA_NODE: "intra", hsdp.INTER_NODE: "inter"}
FABRIC_NAME = {hsdp.INTRA_NODE: "inside a node", hsdp.INTER_NODE: "across nodes", hsdp.NO_FABRIC: "no traffic"}


def _mesh(state, step, top):
    """The mesh, R rows (shard groups) by S columns (replica groups), as far as MAX_ROWS x MAX_COLS."""
    shard, replicas, gpus = state["shard"], step.replicas, state["gpus"]
    rows, cols = min(replicas, MAX_ROWS), min(shard, MAX_COLS)
    pitch = 17
    size = pitch - 5
    x0, y0 = LEFT, top + 26
    cell = lambda r, c: (x0 + c * pitch, y0 + r * pitch)
    if shard >= gpus:  # ranks run node by node and a shard group is consecutive ranks
        nodes = [(r, c, r, min(c + gpus, cols) - 1) for r in range(rows) for c in range(0, cols, gpus)]
    else:
        nodes = [(r, 0, min(r + gpus // shard, rows) - 1, cols - 1) for r in range(0, rows, gpus // shard)]
    parts = [
        svg.text(0, top + 12, f"Rows: shard groups of {fmt.gpus(shard)}, " + (
            f"AllGather and ReduceScatter at every layer, {FABRIC_NAME[step.shard_fabric]}" if shard > 1
            else "nothing to gather: every GPU holds the whole model"), class_="svg-label-soft"),
        svg.boxes(((cell(r0, c0)[0] - 2, cell(r0, c0)[1] - 2, (c1 - c0) * pitch + size + 4, (r1 - r0) * pitch + size + 4)
                   for r0, c0, r1, c1 in nodes), class_="svg-lane"),
    ]
    mid = size / 2
    if shard > 1:
        parts.append(svg.segments(((x0 + mid, cell(r, 0)[1] + mid, cell(0, cols - 1)[0] + mid, cell(r, 0)[1] + mid)
                                   for r in range(rows)), class_=f"stroke-{FABRIC_COLOUR[step.shard_fabric]}", stroke_width=3))
    if replicas > 1:
        parts.append(svg.segments(((cell(0, c)[0] + mid, y0 + mid, cell(0, c)[0] + mid, cell(rows - 1, 0)[1] + mid)
                                   for c in range(cols)), class_=f"stroke-{FABRIC_COLOUR[step.replica_fabric]}",
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
             f"Outlined: nodes of {fmt.gpus(gpus)}." + (f" Drawn: {' and '.join(shown)}." if shown else "")]
    parts.append(svg.texts(((0, bottom + 16 + 15 * i, line) for i, line in enumerate(lines)), class_="svg-label-soft"))
    return parts, bottom + 16 + 15 * len(lines)


def _trade(state, top):
    """Every shard group size of this world: memory per GPU and communication per step, as bars."""
    sizes = [s for s in POWERS if s <= state["N"]]
    runs = [_step(state["params"], state["N"], s, state["gpus"], state["intra"], state["inter"])[0] for s in sizes]
    width, height = WIDTH - LEFT - 12, 64
    pitch = width / len(sizes)
    bar = min(pitch * 0.7, 26)
    hbm = hardware.gpu(REFERENCE_GPU).hbm_bytes
    memory_scale = height / max(max(r.memory.total_bytes for r in runs), hbm)
    comm_scale = height / (max(r.total_comm_s for r in runs) or 1.0)
    memory_base, comm_base = top + 16 + height, top + 16 + 2 * height + 30
    chosen = sizes.index(state["shard"])
    bars = {}  # (palette key, width) -> boxes
    for i, r in enumerate(runs):
        x = LEFT + pitch * i + pitch / 2
        memory = max(r.memory.total_bytes * memory_scale, 1.0)
        bars.setdefault(("memory", bar), []).append((x - bar / 2, memory_base - memory, bar, memory))
        layer = (r.allgather_s + r.reducescatter_s) * comm_scale
        once = r.allreduce_s * comm_scale
        if layer:
            bars.setdefault((FABRIC_COLOUR[r.shard_fabric], bar), []).append((x - bar / 2, comm_base - layer, bar, layer))
        if once:
            bars.setdefault((FABRIC_COLOUR[r.replica_fabric], bar / 2), []).append((x - bar / 4, comm_base - layer - once, bar / 2, once))
    parts = [svg.boxes(boxes, class_=f"fill-{key}") for (key, _), boxes in sorted(bars.items())]
    x = LEFT + pitch * chosen + pitch / 2
    parts.append(svg.boxes(((x - pitch / 2 + 1, top + 2, pitch - 2, comm_base - top + 6),), fill="none", class_="svg-axis"))
    parts += [
        svg.texts(((LEFT - 8, memory_base - height + 12, "model state"), (LEFT - 8, memory_base - height + 26, "per GPU"),
                   (LEFT - 8, comm_base - height + 12, "comm"), (LEFT - 8, comm_base - height + 26, "per step")),
                  class_="svg-label-soft", text_anchor="end"),
        svg.segments(((LEFT, memory_base, LEFT + width, memory_base), (LEFT, comm_base, LEFT + width, comm_base)), class_="svg-axis"),
        svg.segments(((LEFT, memory_base - hbm * memory_scale, LEFT + width, memory_base - hbm * memory_scale),),
                     class_="svg-axis", stroke_dasharray="4 3"),
        svg.text(LEFT + width, memory_base - hbm * memory_scale - 4, f"HBM of one {hardware.gpu(REFERENCE_GPU).name}",
                 class_="svg-label-soft", text_anchor="end"),
        svg.texts(((LEFT + pitch * (i + 0.5), comm_base + 15, s) for i, s in enumerate(sizes)), class_="svg-label-soft",
                  text_anchor="middle"),
        svg.text(LEFT + width, comm_base + 31, "shard group size, GPUs (thin top: the replica AllReduce)",
                 class_="svg-label-soft", text_anchor="end"),
    ]
    return parts, comm_base + 38


def render(state):
    step, traffic = _step(state["params"], state["N"], state["shard"], state["gpus"], state["intra"], state["inter"])
    mesh, bottom = _mesh(state, step, 0)
    trade, height = _trade(state, bottom + 6)
    label = (f"HSDP mesh of {fmt.gpus(state['N'])}: {step.replicas} replicas of shard groups of {fmt.gpus(state['shard'])}, "
             f"nodes of {state['gpus']}")
    drawing = svg.document(WIDTH, height, mesh + trade, label=label)
    gb = lambda b: fmt.gigabytes(b)
    crosses = 1 if step.shard_fabric == hsdp.INTER_NODE else 0
    readouts = (
        Readout("model_state_bytes_per_device", "model state per GPU", gb(step.memory.total_bytes),
                step.memory.total_bytes, "memory"),
        Readout("intra_node_bytes_per_step", "sent inside the node per GPU per step", gb(traffic.intra_node_bytes),
                traffic.intra_node_bytes, "intra" if traffic.intra_node_bytes > 0 else None),
        Readout("inter_node_bytes_per_step", "sent across nodes per GPU per step", gb(traffic.inter_node_bytes),
                traffic.inter_node_bytes, "inter" if traffic.inter_node_bytes > 0 else None),
        Readout("step_comm_s", "communication per step (before overlap)", fmt.duration(step.total_comm_s), step.total_comm_s),
        Readout("allreduce_s", "of which the replica AllReduce", fmt.duration(step.allreduce_s), step.allreduce_s),
        Readout("crosses_node", "shard group spans nodes", "yes" if crosses else "no", crosses),
    )
    alt = (
        f"{label}. Per GPU: {gb(step.memory.total_bytes)} of model state; per step {gb(traffic.intra_node_bytes)} sent "
        f"inside the node and {gb(traffic.inter_node_bytes)} across nodes; {fmt.duration(step.total_comm_s)} of "
        f"communication. The shard group {'spans' if crosses else 'stays inside'} "
        f"{'nodes' if crosses else 'one node'}. Bar charts compare every shard group size from 1 to {state['N']}."
    )
    return View(svg=drawing, readouts=readouts, alt=alt)
