"""Figure 14: ring attention and Ulysses on the same sequence, side by side."""
from functools import lru_cache
from itertools import groupby

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


def constrain(state):
    """Grouped-query attention: the KV heads are a divisor of the query heads."""
    state["kv_heads"] = min(state["kv_heads"], state["heads"])
    return state


def limits(state):
    """The KV-heads slider's range: up to the query heads."""
    return {"kv_heads": state["heads"]}


WIDTH, LEFT, SIDE = 480, 6, 200


def _causal_panel(x0, y0, work, fills, triangles):
    """The s x s score matrix in chunks: row = query chunk (its rank's colour), column = key chunk."""
    chunks = work.ranks * (2 if work.layout == "two_chunks" else 1)
    owner = [0] * chunks
    for rank in range(work.ranks):
        for chunk in ((rank,) if work.layout == "contiguous" else (rank, chunks - 1 - rank)):
            owner[chunk] = rank
    cell = SIDE / chunks
    for q in range(chunks):
        key = palette.rank_key(owner[q])
        y = y0 + q * cell
        if q:
            fills.setdefault(key, []).append((x0, y, q * cell, cell))
        x = x0 + q * cell  # the diagonal chunk: only its lower half is visible
        triangles.setdefault(key, []).append(((x, y), (x + cell, y + cell), (x, y + cell)))


def _schedule_panel(x0, y0, work, fills):
    """Ring step (row) x rank (column): how many visible chunk pairs the rank computes then."""
    cell = SIDE / work.ranks
    most = max(max(row) for row in work.schedule)
    for step, row in enumerate(work.schedule):
        start = 0
        for pairs, run in groupby(row):
            length = len(list(run))
            key = "idle" if pairs == 0 else f"compute@{int(round(3 * pairs / most))}"  # compute, shaded by its work
            fills.setdefault(key, []).append((x0 + start * cell, y0 + step * cell, length * cell, cell))
            start += length


_causal_work = lru_cache(maxsize=16)(context.causal_work)  # depends on C and the layout only


def render(state):
    C, s, h, heads, kv, layout = (state[k] for k in ("C", "s", "h", "heads", "kv_heads", "layout"))
    work = _causal_work(C, layout)
    ok = context.ulysses_fits(C, heads, kv)
    ring = context.ring_communication(s, h, C, heads=heads, kv_heads=kv)
    ulysses = context.ulysses_communication(s, h, heads, C, kv_heads=kv) if ok else None
    sweep = [context.context_comm_time(s, h, heads, c, kv_heads=kv, intra_link=state["intra"], inter_link=state["inter"],
                                       gpus_per_node=state["gpus"]) for c in POWERS[:7]]  # every C, for the chart
    times = sweep[POWERS.index(C)]
    fills, triangles, labels, soft, edges = {}, {}, [], [], []
    top = 40
    labels.append((LEFT, 14, "Ring attention"))
    soft.append((LEFT, 30, "scores by query owner"))
    soft.append((LEFT + 250, 30, "ring step (down) \u00d7 rank (across)"))
    _causal_panel(LEFT + 14, top, work, fills, triangles)
    _schedule_panel(LEFT + 264, top, work, fills)
    soft.append((LEFT + 14, top + SIDE + 16, f"busiest rank / mean: {fmt.decimal(work.imbalance)}"))
    idle = context.ring_idle_steps(work)[0]
    soft.append((LEFT + 264, top + SIDE + 16, f"rank 0 idle for {idle} of {C} steps"))
    y = top + SIDE + 50
    labels.append((LEFT, y, "Ulysses: All-to-All from a split by tokens to a split by heads"))
    before, after = (LEFT + 14, y + 14), (LEFT + 264, y + 14)
    for r in range(C):  # before: rank r holds tokens r·s/C onward, every head
        fills.setdefault(palette.rank_key(r), []).append((before[0], before[1] + r * 80 / C, SIDE, 80 / C))
    groups = C if ok else kv
    for g in range(groups):  # after: each rank whole KV heads over every token (past the KV heads: one each)
        fills.setdefault(palette.rank_key(g), []).append((after[0] + g * SIDE / groups, after[1], SIDE / groups, 80))
    soft.append((before[0], y + 110, f"by tokens: {s // C:,} per rank, all heads"))
    if ok:
        soft.append((after[0], y + 110, f"by heads: {kv // C} of {kv} KV heads per rank"))
    else:
        fills.setdefault("warn", []).append((after[0], y + 100, 10, 10))
        labels.append((after[0] + 14, y + 110, f"{kv} KV heads for {C} ranks"))
    outlines = [(LEFT + 14, top, SIDE, SIDE), (LEFT + 264, top, SIDE, SIDE), (*before, SIDE, 80), (*after, SIDE, 80)]
    y += 140
    labels.append((LEFT, y, "forward communication time per layer, by C"))
    ulysses_text = f"Ulysses {fmt.data_size(ulysses.forward_bytes_per_rank)}" if ok else "Ulysses cannot split the heads"
    soft.append((LEFT, y + 16, f"at C = {C}, sent per device: ring {fmt.data_size(ring.forward_bytes_per_rank)}, {ulysses_text}"))
    longest = max(max(t.ring_s, t.ulysses_s or 0.0) for t in sweep) or 1.0
    base, slot = y + 150, (WIDTH - LEFT - 44) / 7
    for i, (c, t) in enumerate(zip(POWERS, sweep)):
        x = LEFT + 44 + i * slot
        for j, (key, seconds) in enumerate((("comm", t.ring_s), ("exposed", t.ulysses_s))):
            if seconds is None:  # Ulysses past the KV heads: no bar to draw
                soft.append((x + 4 + 22 * j, base - 4, "n/a"))
                continue
            height = seconds / longest * 100
            fills.setdefault(key, []).append((x + 4 + 22 * j, base - height, 18, height))
            if c == C:
                soft.append((x + 4 + 22 * j, base - height - 4 - 12 * j, fmt.duration(seconds)))
        (labels if c == C else soft).append((x + 6, base + 14, f"C={c}"))
        if t.crosses_node and not sweep[i - 1].crosses_node:
            edges.append((x, base - 126, x, base + 4))
            soft.append((x + 4, base - 116, f"{hardware.LINKS[t.link].short_name} >"))
    for i, (key, name) in enumerate((("comm", "ring: can hide behind compute"), ("exposed", "Ulysses: attention waits"))):
        fills.setdefault(key, []).append((LEFT, y + 24 + 16 * i, 10, 10))
        soft.append((LEFT + 14, y + 33 + 16 * i, name))
    y = base + 10
    parts = [svg.boxes(boxes, class_=f"fill-{key.split('@')[0]}",
                       fill_opacity=(0.35, 0.35, 0.65, 1.0)[int(key[-1])] if "@" in key else None)
             for key, boxes in sorted(fills.items())]
    parts += [svg.polygons(points, class_=f"fill-{key}") for key, points in sorted(triangles.items())]
    parts += [svg.boxes(outlines, fill="none", class_="svg-ink-stroke"),
              svg.segments(edges, class_="svg-ink-stroke", stroke_dasharray="4 3"),
              svg.texts(labels, class_="svg-label"), svg.texts(soft, class_="svg-label-soft")]
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
    )
    alt = (f"Causal attention over {C} ranks, {s:,} tokens, {layout.replace('_', ' ')} layout: the busiest rank does "
           f"{fmt.decimal(work.imbalance)} times the mean work. Ring attention sends {readouts[1].text} per device; "
           + (f"Ulysses sends {readouts[0].text}." if ok else f"Ulysses cannot run: {C} ranks, {kv} KV heads."))
    return View(svg=svg.document(WIDTH, y + 16, parts, label=alt, class_="svg-narrow"), readouts=readouts, alt=alt)
