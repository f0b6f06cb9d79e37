"""Figure 01: one program, many ranks -- the rendezvous, the ranks it hands out, and the process
groups carved out of the world; one rank that skips a collective stalls its whole group."""
import math
from types import SimpleNamespace

from figures import html, svg
from figures.contract import Readout, Slider, Toggle, View
from models import mesh as mesh_model, reliability

NUMBER = 1
TITLE = "One program, many ranks"
CAPTION = (
    "Every GPU runs the same script as one process; the figure follows one rank and fills in its tensor-parallel "
    "and data-parallel groups. Click any GPU to follow it instead."
)
NOTE = (
    "The number in a cell is the process's global rank, and its place inside its node is its local rank; before "
    "any collective runs, every process checks in with the rendezvous store. The tensor-parallel group (orange) is "
    "a run of consecutive ranks in one node, the data-parallel group (blue) one rank from each tensor-parallel "
    "group. With the divergent branch on, the followed rank skips the gradient AllReduce, and the rest of its "
    "data-parallel group waits inside that collective until the watchdog fires."
)
TRIES = (
    ("Skip the AllReduce", {"diverge": True}),
    ("256 ranks, one skips", {"nodes": 32, "tp": 1, "diverge": True}),
    ("Tensor-parallel groups of 8", {"tp": 8}),
)

CONTROLS = (
    Slider("nodes", "Nodes", stops=(1, 2, 4, 8, 16, 32), default=2),
    Slider("gpus", "GPUs per node", stops=(1, 2, 4, 8), default=8),
    Slider("tp", "Tensor-parallel size", stops=(1, 2, 4, 8), default=4),
    Slider("rank", "Followed rank", min=0, max=255, step=1, default=13),
    Toggle("diverge", "Followed rank skips the gradient AllReduce", default=False),
)
PRIMARY = ("rank", "diverge")

WIDTH, TOP, NODE_GAP, PAD = 720, 74, 12, 6
# On a phone: a 320-unit drawing; the nodes' grid (where the followed rank and its groups
# are) kept within NARROW_GRID_H so that it is on screen at once, by smaller cells, more
# nodes a row and, for many nodes, a node's GPUs in two rows.
NARROW_WIDTH, NARROW_PAD, NARROW_NODE_GAP, NARROW_ROW_GAP, NARROW_GRID_H = 320, 3, 4, 5, 370
NARROW_CELLS = (34, 26, 20, 17, 14, 12)
LINE = 18  # between lines of the text under the nodes


def constrain(state):
    """tp divides the GPUs of a node (all powers of two: tp <= gpus); the rank exists."""
    state["tp"] = min(state["tp"], state["gpus"])
    state["rank"] = min(state["rank"], state["nodes"] * state["gpus"] - 1)
    return state


def limits(state):
    """Each constrained slider's range in this state: TP up to a node's GPUs, the rank to the last one."""
    return {"tp": state["gpus"], "rank": state["nodes"] * state["gpus"] - 1}


def _ranks(group):
    """A group's ranks in words: '12-15', '1, 5, 9, 13', '1, 5, 9, ..., 253 (64 ranks)'."""
    if len(group) > 2 and group[-1] - group[0] == len(group) - 1:
        return f"{group[0]}\u2013{group[-1]}"
    if len(group) <= 6:
        return ", ".join(map(str, group))
    return f"{group[0]}, {group[1]}, {group[2]}, \u2026, {group[-1]} ({len(group)} ranks)"


def _wrap(text, width, size, bold=False):
    """``text`` in lines no wider than ``width`` at ``size`` (words kept whole); ``width``
    None: one line."""
    if width is None or svg.text_width(text, size, bold) <= width:
        return [text]
    # a word of one or two letters ("s.", "of") starts no line
    return svg.wrap(text, width, size, bold, keep=lambda before, word: len(word) <= 2)


def _grid(width, nodes, gpus, cell, across, pad, gap, row_gap, least=0):
    """Nodes as boxes in rows, each holding its GPUs' cells ``across`` a row (centred in a
    node at least ``least`` wide): the geometry."""
    node_w = max(least, across * (cell + 2) - 2 + 2 * pad)
    node_h = 16 + -(-gpus // across) * (cell + 2) - 2 + pad
    cols = max(1, min(nodes, int((width - 8) // (node_w + gap))))
    return SimpleNamespace(cell=cell, across=across, pad=pad, gap=gap, row_gap=row_gap, node_w=node_w, node_h=node_h,
                           cols=cols, height=math.ceil(nodes / cols) * (node_h + row_gap))


def _layout(narrow, nodes, gpus, world):
    """The drawing's width, text wrap width and nodes' grid: wide, cells sized by the world
    size; on a phone, the largest cells whose grid fits NARROW_GRID_H (a node's GPUs in two
    rows when that lets larger cells fit)."""
    if not narrow:
        cell = 34 if world <= 16 else 26 if world <= 32 else 20 if world <= 64 else 17
        return WIDTH, None, _grid(WIDTH, nodes, gpus, cell, gpus, PAD, NODE_GAP, 10)
    least = svg.text_width(f"node {nodes - 1}", *svg.label_size("svg-label-soft")) + 2 * NARROW_PAD
    # the nodes span all but 2 units a side (their outlines stay inside the drawing)
    grids = [_grid(NARROW_WIDTH + 4 + NARROW_NODE_GAP, nodes, gpus, cell, across, NARROW_PAD, NARROW_NODE_GAP, NARROW_ROW_GAP, least)
             for cell in NARROW_CELLS for across in dict.fromkeys((gpus, max(1, gpus // 2)))]
    grids = [g for g in grids if g.node_w <= NARROW_WIDTH]
    return NARROW_WIDTH, NARROW_WIDTH - 12, next((g for g in grids if g.height <= NARROW_GRID_H), grids[-1])


def render(state, narrow=False):
    nodes, gpus, tp, rank = state["nodes"], state["gpus"], state["tp"], state["rank"]
    mesh = mesh_model.Mesh(dp=nodes * gpus // tp, tp=tp, gpus_per_node=gpus)
    world, coords = mesh.world_size, mesh.coords(rank)
    tp_group, dp_group = mesh.group("tp", rank), mesh.group("dp", rank)
    hang = reliability.skipped_collective(dp_group, rank) if state["diverge"] else None
    node, local = mesh.node(rank), rank % gpus
    # layout: nodes as boxes in rows, each holding its GPUs' cells in local-rank order
    width, wrap, g = _layout(narrow, nodes, gpus, world)
    cell, pitch, size = g.cell, g.cell + 2, svg.label_size("svg-label")
    store = ["rendezvous store", "(TCPStore, MASTER_ADDR:29500)"] if narrow else ["rendezvous store (TCPStore, MASTER_ADDR:29500)"]
    store += _wrap(f"{world} of {world} processes joined: world size {world}", wrap, *size)
    store_w, store_h = (340 if not narrow else width - 4), 40 + 17 * (len(store) - 2)
    top = TOP + store_h - 40
    left = (width - g.cols * g.node_w - (g.cols - 1) * g.gap) / 2
    corners = [(left + (n % g.cols) * (g.node_w + g.gap), top + (n // g.cols) * (g.node_h + g.row_gap)) for n in range(nodes)]
    inset = (g.node_w - g.across * pitch + 2) / 2  # the pad, or more in a node wider than its cells
    cells = [(x + inset + (i % g.across) * pitch, y + 16 + (i // g.across) * pitch)
             for x, y in corners for i in range(gpus)]  # index = global rank

    def square(ranks, grow=0, **attributes):  # the cells of these ranks, grown by `grow` on each side
        return svg.boxes(((cells[r][0] - grow, cells[r][1] - grow, cell + 2 * grow, cell + 2 * grow) for r in ranks), **attributes)

    def key(css, marked):  # the followed rank and its groups carry the point: marked where drawn
        return f"{css} {svg.KEY}" if marked else css

    tp_others = [r for r in tp_group if r != rank]
    dp_others = [r for r in dp_group if r != rank and not hang]
    blocked = hang.blocked if hang else ()
    bottom = top + g.height
    numbered = [([cells[r][0] + cell / 2 for r in range(first, first + g.across)], cells[first][1] + cell / 2,
                 range(first, first + g.across)) for first in range(0, world, g.across)]  # each row of cells' ranks
    parts = [
        svg.segments(((width / 2, 4 + store_h, x + g.node_w / 2, y) for x, y in corners[:g.cols]), class_="svg-axis"),
        svg.boxes(((width / 2 - store_w / 2, 4, store_w, store_h),), class_="svg-box"),
        svg.texts(((width / 2, 20 + 17 * i, line) for i, line in enumerate(store)), class_="svg-label", text_anchor="middle"),
        svg.boxes(((x, y, g.node_w, g.node_h) for x, y in corners), class_="svg-box"),
        svg.texts(((x + g.pad, y + 12, f"node {n}") for n, (x, y) in enumerate(corners)), class_="svg-label-soft"),
        square(range(world), class_="svg-lane"),
        square(tp_others, class_=key("fill-tp", tp_others), fill_opacity="0.6"),
        square(dp_others, class_=key("fill-dp", dp_others), fill_opacity="0.45"),
        svg.boxes(((cells[rank][0], cells[rank][1], cell / 2, cell),), class_="fill-tp", fill_opacity="0.6"),
        svg.boxes(((cells[rank][0] + cell / 2, cells[rank][1], cell / 2, cell),), class_="fill-dp", fill_opacity="0.45"),
        square(blocked, class_=key("fill-warn", blocked), fill_opacity="0.4"),
        square(blocked, 1, class_="stroke-warn", fill="none", stroke_dasharray="3 2"),
        svg.numerals(numbered, height=8.0 if cell > 20 else 6.0 if cell > 17 else 5.0 if cell > 13 else 4.0,
                     class_="svg-numeral"),
        square((rank,), 2, class_=key("svg-focus", True)),
    ]
    focusable = world <= 32  # a tab stop per GPU only while they are few; the rank slider reaches every one
    parts.append(svg.hit_areas(((x, y, cell, cell, f"rank={r}") + ((f"follow rank {r}",) if focusable else ())
                                for r, (x, y) in enumerate(cells)), class_="svg-hit"))
    tp_text, dp_text = _ranks(tp_group), _ranks(dp_group)
    lines = [f"Rank {rank}: node {node}, local rank {local} (cuda:{local}); place {coords['tp']} of {tp} in its "
             f"TP group, {coords['dp']} of {len(dp_group)} in its DP group."]
    if hang and hang.blocked:
        lines += [f"Rank {rank} took the other branch and skipped all_reduce(grads, group=dp_group).",
                  f"Ranks {_ranks(hang.blocked)} wait inside it (red, dashed): nothing crashes, nothing prints,",
                  f"until the NCCL watchdog kills the job after {hang.watchdog_at_s:.0f} s."]
    elif hang:
        lines.append(f"Rank {rank} is alone in its DP group: skipping that AllReduce stalls nobody (and averages nothing).")
    # the groups' key: side by side, or on a phone one under the other; then what happens, wrapped
    tp_lines, dp_lines = _wrap(f"TP group: ranks {tp_text}", wrap and wrap - 18, *size), \
        _wrap(f"DP group: ranks {dp_text}", wrap and wrap - 18, *size)
    dp_x, dp_y = (width / 2, bottom) if not narrow else (12, bottom + LINE * len(tp_lines))
    text_top = max(bottom, dp_y + LINE * (len(dp_lines) - 1))
    told = [part for line in lines for part in _wrap(line, wrap, *svg.label_size("svg-label-soft" if hang else "svg-label"))]
    parts += [
        svg.boxes(((12, bottom + 4, 12, 12),), class_="fill-tp", fill_opacity="0.6"),
        svg.boxes(((dp_x, dp_y + 4, 12, 12),), class_="fill-dp", fill_opacity="0.45"),
        svg.texts([(30, bottom + 14 + LINE * i, line) for i, line in enumerate(tp_lines)]
                  + [(dp_x + 18, dp_y + 14 + LINE * i, line) for i, line in enumerate(dp_lines)], class_="svg-label"),
        svg.texts(((12, text_top + 36 + LINE * i, line) for i, line in enumerate(told)),
                  class_="svg-label" if not hang else "svg-label-soft"),
    ]
    label = f"{nodes} nodes of {gpus} GPUs: {world} ranks around a rendezvous store; rank {rank} and its groups highlighted"
    drawing = svg.document(width, text_top + 24 + LINE * len(told), parts, label=label)
    readouts = (
        Readout("world_size", "world size", f"{world} ranks", world),
        Readout("node", f"rank {rank} runs on", f"node {node}", node),
        Readout("local_rank", "its local rank", f"{local} (cuda:{local})", local),
        Readout("tp_group_first", "first rank of its TP group", str(tp_group[0]), tp_group[0], "tp"),
        Readout("dp_group_size", "DP group size", f"{len(dp_group)} ranks", len(dp_group), "dp"),
        Readout("blocked_ranks", "ranks left waiting", str(len(hang.blocked)) if hang else "0 (no branch taken)",
                len(hang.blocked) if hang else 0, "warn" if hang and hang.blocked else None),
    )
    alt = (f"{nodes} node{'s' if nodes > 1 else ''} of {gpus} GPUs: {world} processes of one program, each "
           f"checked into the rendezvous store. Rank {rank} sits on node {node} as local rank {local}; its "
           f"tensor-parallel group is ranks {tp_text}, its data-parallel group ranks {dp_text}. " + " ".join(lines[1:]))
    program = (
        ('dist.init_process_group("nccl")', f"rendezvous: blocks until all {world} join"),
        ("rank = dist.get_rank()", f"{rank} in this process"),
        ('local_rank = int(os.environ["LOCAL_RANK"])', f"{local}: this process drives cuda:{local} of node {node}"),
        ("torch.cuda.set_device(local_rank)", ""),
        (f'mesh = init_device_mesh("cuda", ({world // tp}, {tp}), mesh_dim_names=("dp", "tp"))', ""),
        ('tp_group = mesh["tp"].get_group()', f"ranks {tp_text}"),
        ('dp_group = mesh["dp"].get_group()', f"ranks {dp_text}"),
        ("...", ""),
        ("if batch_has_valid_tokens:", f"False on rank {rank} only" if hang else "True on every rank"),
        ("    dist.all_reduce(grads, group=dp_group)", "a collective: every member must call it"),
    )
    code = "\n".join(f"{line:<44}# {note}" if note else line for line, note in program)
    return View(svg=drawing, readouts=readouts, alt=alt,
                html=html.code(code, label="the program every rank runs", copy=False))
