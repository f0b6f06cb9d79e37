"""Figure 01: one program, many ranks -- the rendezvous, the ranks it hands out, and the process
groups carved out of the world; one rank that skips a collective stalls its whole group."""
import math

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

WIDTH, TOP, NODE_GAP, PAD = 720, 74, 12, 6


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


def render(state):
    nodes, gpus, tp, rank = state["nodes"], state["gpus"], state["tp"], state["rank"]
    mesh = mesh_model.Mesh(dp=nodes * gpus // tp, tp=tp, gpus_per_node=gpus)
    world, coords = mesh.world_size, mesh.coords(rank)
    tp_group, dp_group = mesh.group("tp", rank), mesh.group("dp", rank)
    hang = reliability.skipped_collective(dp_group, rank) if state["diverge"] else None
    node, local = mesh.node(rank), rank % gpus
    # layout: nodes as boxes in rows, each holding its GPUs' cells in local-rank order
    cell = 34 if world <= 16 else 26 if world <= 32 else 20 if world <= 64 else 17
    node_w, node_h = gpus * (cell + 2) - 2 + 2 * PAD, 16 + cell + PAD
    cols = max(1, min(nodes, (WIDTH - 8) // (node_w + NODE_GAP)))
    left = (WIDTH - cols * node_w - (cols - 1) * NODE_GAP) / 2
    corners = [(left + (n % cols) * (node_w + NODE_GAP), TOP + (n // cols) * (node_h + 10)) for n in range(nodes)]
    cells = [(x + PAD + g * (cell + 2), y + 16) for x, y in corners for g in range(gpus)]  # index = global rank

    def square(ranks, grow=0, **attributes):  # the cells of these ranks, grown by `grow` on each side
        return svg.boxes(((cells[r][0] - grow, cells[r][1] - grow, cell + 2 * grow, cell + 2 * grow) for r in ranks), **attributes)

    bottom = TOP + math.ceil(nodes / cols) * (node_h + 10)
    parts = [
        svg.segments(((WIDTH / 2, 44, x + node_w / 2, y) for x, y in corners[:cols]), class_="svg-axis"),
        svg.boxes(((WIDTH / 2 - 170, 4, 340, 40),), class_="svg-box"),
        svg.texts(((WIDTH / 2, 20, "rendezvous store (TCPStore, MASTER_ADDR:29500)"),
                   (WIDTH / 2, 37, f"{world} of {world} processes joined: world size {world}")),
                  class_="svg-label", text_anchor="middle"),
        svg.boxes(((x, y, node_w, node_h) for x, y in corners), class_="svg-box"),
        svg.texts(((x + PAD, y + 12, f"node {n}") for n, (x, y) in enumerate(corners)), class_="svg-label-soft"),
        square(range(world), class_="svg-lane"),
        square([r for r in tp_group if r != rank], class_="fill-tp", fill_opacity="0.6"),
        square([r for r in dp_group if r != rank and not hang], class_="fill-dp", fill_opacity="0.45"),
        svg.boxes(((cells[rank][0], cells[rank][1], cell / 2, cell),), class_="fill-tp", fill_opacity="0.6"),
        svg.boxes(((cells[rank][0] + cell / 2, cells[rank][1], cell / 2, cell),), class_="fill-dp", fill_opacity="0.45"),
        square(hang.blocked if hang else (), class_="fill-warn", fill_opacity="0.4"),
        square(hang.blocked if hang else (), 1, class_="stroke-warn", fill="none", stroke_dasharray="3 2"),
        svg.numerals((([x + cell / 2 for x, _ in cells[n * gpus:(n + 1) * gpus]], corners[n][1] + 16 + cell / 2,
                       range(n * gpus, (n + 1) * gpus)) for n in range(nodes)), height=8.0 if cell > 20 else 6.0 if cell > 17 else 5.0,
                     class_="svg-numeral"),
        square((rank,), 2, class_="svg-focus"),
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
    parts += [
        svg.boxes(((12, bottom + 4, 12, 12),), class_="fill-tp", fill_opacity="0.6"),
        svg.boxes(((WIDTH / 2, bottom + 4, 12, 12),), class_="fill-dp", fill_opacity="0.45"),
        svg.texts(((30, bottom + 14, f"TP group: ranks {tp_text}"), (WIDTH / 2 + 18, bottom + 14, f"DP group: ranks {dp_text}")),
                  class_="svg-label"),
        svg.texts(((12, bottom + 36 + 18 * i, line) for i, line in enumerate(lines)),
                  class_="svg-label" if not hang else "svg-label-soft"),
    ]
    label = f"{nodes} nodes of {gpus} GPUs: {world} ranks around a rendezvous store; rank {rank} and its groups highlighted"
    drawing = svg.document(WIDTH, bottom + 24 + 18 * len(lines), parts, label=label)
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
