"""Figure 17: the device mesh, explorable: ranks grouped by node, one rank's process groups, and which leave a node."""
import itertools
import math
from collections import namedtuple
from bisect import bisect_left
from functools import lru_cache

from figures import html, svg
from figures.contract import Readout, Select, Slider, View
from models import fmt
from models.mesh import AXES, GROUP_AXES, Mesh, axis_crosses_node, group_ranks, nodes_of

NUMBER = 17
TITLE = "The device mesh, explorable"
CAPTION = (
    "Every square is a GPU rank, boxed by node and numbered in launch order, with the axis listed first in the "
    "order varying fastest. Click a rank to fill its group on the chosen axis and mark its other groups."
)
NOTE = (
    "Links between the members of a group are solid inside a node and dashed where the group crosses the network. "
    "List data parallelism first and the tensor-parallel groups leave their nodes."
)
TRIES = (
    ("Order dp-tp-cp-pp", {"order": "dp-tp-cp-pp"}),
    ("TP 16 on 8-GPU nodes", {"tp": 16}),
    ("Expert groups of 8", {"ep": 8, "axis": "ep"}),
)

POWERS = tuple(2**i for i in range(13))  # 1 .. 4096
MAX_WORLD = 4096
ORDERS = tuple("-".join(p) for p in itertools.permutations(AXES))  # fastest first; Megatron-Core's spelling
LABELS = {"tp": "TP", "cp": "CP", "dp": "DP", "pp": "PP", "ep": "EP", "edp": "expert DP"}
COLOURS = {"tp": "tp", "cp": "cp", "dp": "dp", "pp": "pp", "ep": "ep", "edp": "dp"}  # palette keys

CONTROLS = (
    Slider("tp", "Tensor parallel TP", stops=POWERS[:7], default=8),
    Slider("cp", "Context parallel CP", stops=POWERS[:7], default=1),
    Slider("dp", "Data parallel DP", stops=POWERS, default=8),
    Slider("pp", "Pipeline stages PP", stops=POWERS[:8], default=8),
    Slider("ep", "Expert parallel EP (inside DP\u00d7CP)", stops=POWERS, default=1),
    Select("order", "Order, fastest first", tuple((o, o) for o in ORDERS), default="tp-cp-dp-pp"),
    Slider("gpus", "GPUs per node", stops=(4, 8, 16, 32, 64, 72), default=8),
    Slider("rank", "Rank", min=0, max=MAX_WORLD - 1, step=1, default=77),
    Select("axis", "Highlight the group of", tuple((a, LABELS[a]) for a in GROUP_AXES), default="tp"),
)
PRIMARY = ("rank", "axis")  # which rank, and which of its groups: what the drawing answers
GROUPS = (("Parallel degrees", ("tp", "cp", "dp", "pp", "ep")), ("Layout", ("order", "gpus")))


def constrain(state):
    """World <= 4,096 (DP gives way first, then PP, CP, TP), EP divides DP x CP, rank < world."""
    state = dict(state)
    for axis in ("dp", "pp", "cp", "tp"):
        while state["tp"] * state["cp"] * state["dp"] * state["pp"] > MAX_WORLD and state[axis] > 1:
            state[axis] //= 2
    state["ep"] = min(state["ep"], state["dp"] * state["cp"])
    state["rank"] = min(state["rank"], state["tp"] * state["cp"] * state["dp"] * state["pp"] - 1)
    return state


def limits(state):
    """Each slider's highest stop that keeps the others where they are: TP, CP, DP and PP up to
    what 4,096 GPUs hold with the other three as set (raising one never lowers another), EP up
    to DP x CP, the rank to the last one. ``constrain``'s order only settles a typed-in address."""
    degrees = {axis: state[axis] for axis in ("tp", "cp", "dp", "pp")}
    world = math.prod(degrees.values())
    return {**{axis: MAX_WORLD // (world // degree) for axis, degree in degrees.items()},
            "ep": state["dp"] * state["cp"], "rank": world - 1}


@lru_cache(maxsize=64)
def _crosses(mesh, axis):  # per mesh: moving the rank or the highlighted axis recomputes nothing
    return axis_crosses_node(mesh, axis)


WIDTH, LEFT, TOP = 720, 8, 58
MAX_CELLS = 512  # a world up to this size is drawn whole
MAX_SUBSET = 256  # a larger one: this many ranks' worth of the nodes that hold the chosen rank's groups
# Each axis's mark on a member cell of the chosen rank's group (besides colour): a side or a diagonal.
MARKS = {"tp": (0, 0, 1, 0), "cp": (1, 0, 1, 1), "dp": (0, 1, 1, 1), "pp": (0, 0, 0, 1), "ep": (0, 0, 1, 1), "edp": (1, 0, 0, 1)}
LINE = 16  # between two lines of text
MAX_COLS = 8  # squares across a node's box

# The geometry of one drawing: its width, the height its node boxes may take, the largest world
# drawn whole and the ranks' worth of nodes drawn of a larger one. Wide: the article's figure
# column. Narrow: a phone's column (320 units, labels stay 11 px), where the grid must stay on
# screen below the controls: a world of up to 128 ranks whole, else the chosen rank's node and
# its groups' (128 ranks' worth), the text wrapped and the legend in one column.
_Layout = namedtuple("_Layout", "width grid_height cells subset")
WIDE = _Layout(WIDTH, 400, MAX_CELLS, MAX_SUBSET)
NARROW = _Layout(320, 340, 128, 128)
# A phone on its side: the wide drawing's nodes in a grid beside a column of the texts.
TEXT_W = 272  # the texts' column
SHORT = _Layout(WIDTH - TEXT_W - 14, 272, MAX_CELLS, MAX_SUBSET)


def _nodes_to_draw(mesh, groups, rank, axis, layout=WIDE):
    """All nodes of a world of up to ``layout.cells`` ranks. Beyond, ``layout.subset`` ranks' worth:
    the chosen rank's node, the first and last node of each of its groups (the highlighted one
    first), then the nodes of the highlighted group's other members, then of the other groups'."""
    g = mesh.gpus_per_node
    if mesh.world_size <= layout.cells:
        return list(range(mesh.nodes))
    axes = (axis,) + tuple(a for a in GROUP_AXES if a != axis)
    limit, chosen = max(1, layout.subset // g), {rank // g: None}
    for member in itertools.chain([m for a in axes for m in (groups[a][0], groups[a][-1])], *(groups[a] for a in axes)):
        if len(chosen) == limit:
            break
        chosen.setdefault(member // g)
    return sorted(chosen)


def _layout(count, g, layout=WIDE):
    """Cell pitch, columns per node box and node boxes per row: the largest cells (<= 36 px) that keep
    the drawing within ``layout.width`` x ~``layout.grid_height``."""
    cols = min(g, MAX_COLS)
    for pitch in range(36, 6, -1):
        per_row = max(1, int((layout.width - 2 * LEFT + 6) // (cols * pitch + 6)))
        if math.ceil(count / per_row) * (math.ceil(g / cols) * pitch + 14) <= layout.grid_height:
            break
    return pitch, cols, per_row


def _grid(nodes, g, world, pitch, cols, per_row, top=TOP, left=LEFT):
    """Where everything sits: {rank: top-left of its square}, the node boxes, and the squares as
    dashed segments, one per row of squares across a row of node boxes (a dash per square, the
    dash pattern skipping the gap between boxes). Only the world's last node may be part-filled."""
    box_w, rows_per_node = cols * pitch, math.ceil(g / cols)
    box_h = rows_per_node * pitch
    place = [(left + (i % per_row) * (box_w + 6), top + 12 + (i // per_row) * (box_h + 14)) for i in range(len(nodes))]
    boxes = [(x - 1, y - 1, box_w + 2, box_h + 2) for x, y in place]
    cell = {node * g + local: (x + (local % cols) * pitch, y + (local // cols) * pitch)
            for node, (x, y) in zip(nodes, place) for local in range(min(g, world - node * g))}
    squares = []
    for start in range(0, len(nodes), per_row):
        (x, y), (last_x, _), last = place[start], place[min(start + per_row, len(nodes)) - 1], nodes[min(start + per_row, len(nodes)) - 1]
        filled = min(g, world - last * g)  # squares in this row's last box
        for row in range(rows_per_node):
            in_last = min(cols, max(0, filled - row * cols))
            end = last_x + in_last * pitch - 1 if in_last else last_x - 7
            if end > x:
                squares.append((x + 1, y + row * pitch + pitch / 2 - 1, end, y + row * pitch + pitch / 2 - 1))
    return cell, boxes, squares


def _links(group, runs):
    """The group's neighbours to link, both drawn (``runs`` of its drawn members): the ends of each
    run of squares side by side, and the end of one run to the start of the next where they follow
    each other in the group."""
    links = [(first, first + n - 1) for first, n in runs if n > 1]
    ends = [(first, first + n - 1) for first, n in runs]
    return links + [(a_end, b_first) for (_, a_end), (b_first, _) in zip(ends, ends[1:])
                    if group[bisect_left(group, a_end) + 1] == b_first]


def _fabrics(links, g):
    """The fabrics the links cross: "intra" for a link inside a node, "inter" for one between nodes."""
    return {"intra" if a // g == b // g else "inter" for a, b in links}


def _wrap(text, width, class_):
    """``text`` broken at spaces into lines no wider than ``width`` drawing units."""
    return svg.wrap(text, width, *svg.label_size(class_))


def _drawing(state, mesh, groups, crosses, nodes, narrow, short=False):
    """The grid of ``nodes``: the chosen rank outlined, its group on the chosen axis filled and
    linked (the drawing's key), its other groups marked; the text above it and the legend below
    (``short``: the texts in a column to its left), laid out for the page's width."""
    layout = NARROW if narrow else SHORT if short else WIDE
    rank, axis, g, world = state["rank"], state["axis"], state["gpus"], mesh.world_size
    capped = len(nodes) < mesh.nodes
    pitch, cols, per_row = _layout(len(nodes), g, layout)
    box_w, box_h = cols * pitch, math.ceil(g / cols) * pitch
    ranks = f"{world:,} ranks on {mesh.nodes:,} node{'s' if mesh.nodes > 1 else ''} of {fmt.gpus(g)}"
    order = f"order {state['order']}, fastest first"
    outlined = f"rank {rank} (outlined): its {LABELS[axis]} group is filled"
    marks = ("its other groups are marked", "on an edge", "(TP top, CP right, DP bottom, PP left)", "or a diagonal (EP, expert DP)")
    capped_text = (f"Capped: {len(nodes)} of the {mesh.nodes:,} nodes drawn", f"rank {rank}'s and its groups'",
                   "(the table lists every member)")
    if short:  # the same sentences, wrapped to the texts' column
        head = _wrap(f"{ranks}, {order}", TEXT_W, "svg-label") + _wrap(f"{outlined}, {' '.join(marks)}", TEXT_W, "svg-label")
        cap = _wrap(f"{capped_text[0]}, {capped_text[1]} {capped_text[2]}", TEXT_W, "svg-label svg-strong")
    elif narrow:  # the same sentences a phrase a line (the node numbers speak for themselves)
        fit = layout.width - 2 * LEFT
        head = [line for phrase in (ranks, order, outlined + ",", f"{marks[0]} {marks[1]}", *marks[2:])
                for line in _wrap(phrase, fit, "svg-label")]
        cap = [line for phrase in (capped_text[0] + ",", *capped_text[1:]) for line in _wrap(phrase, fit, "svg-label svg-strong")]
    else:
        head = [ranks + (" (numbered above each box)" if box_w >= 24 else "") + f", {order}",
                f"{outlined}, {marks[0]}", " ".join(marks[1:])]
        cap = [f"{capped_text[0]}, {capped_text[1]} {capped_text[2]}"]
    cap = cap if capped else []
    top = 0 if short else TOP + LINE * (len(head) - 3 + len(cap))  # the grid starts below the text
    left = WIDTH - layout.width + LEFT if short else LEFT
    cell, boxes, squares = _grid(nodes, g, world, pitch, cols, per_row, top, left)
    drawn = {a: _drawn(members, cell) for a, members in groups.items()}  # each group's members on screen
    bottom = top + 12 + math.ceil(len(nodes) / per_row) * (box_h + 14)
    size, gap = pitch - 2, 6  # a square, and the gap between node boxes
    dashes = " ".join([f"{size - 2} {pitch - size + 2}"] * (cols - 1) + [f"{size - 2} {pitch - size + 2 + gap}"])
    runs = {a: _runs(members, g, cols) for a, members in drawn.items()}  # squares side by side: one dash each
    along = f"{size} {pitch - size}"  # the dash pattern that draws a run of squares as one segment
    parts = [
        svg.boxes(boxes if g > 1 else [], class_="svg-lane"),
        svg.segments(squares, class_="svg-axis", stroke_width=size - 2, stroke_dasharray=dashes),
        svg.segments([(x, y + size / 2, x + (n - 1) * pitch + size, y + size / 2)
                      for x, y, n in ((*cell[first], n) for first, n in runs[axis])],
                     class_=f"stroke-{COLOURS[axis]} {svg.KEY}", stroke_width=size, stroke_dasharray=along),
    ]
    for a in GROUP_AXES:  # the other groups of the chosen rank: a side or diagonal of each member's square
        if a != axis and mesh.degree(a) > 1 and (a in AXES or mesh.ep > 1):  # EP = 1: no expert groups
            x0, y0, x1, y1 = MARKS[a]
            if y0 == y1:  # a top or bottom edge: a run of squares takes one dashed segment
                marks = [(x, y + y0 * size, x + (n - 1) * pitch + size, y + y0 * size)
                         for x, y, n in ((*cell[first], n) for first, n in runs[a])]
            else:
                marks = [(x + x0 * size, y + y0 * size, x + x1 * size, y + y1 * size) for x, y in map(cell.__getitem__, drawn[a])]
            parts.append(svg.segments(marks, class_=f"stroke-{COLOURS[a]}", stroke_width=2.5,
                                      stroke_dasharray=along if y0 == y1 else None))
    half = pitch / 2 - 1
    links = _links(groups[axis], runs[axis])  # neighbours in the group, both drawn
    for same, name, dash in ((True, "intra", None), (False, "inter", "4 3")):
        fabric_links = [(cell[a][0] + half, cell[a][1] + half, cell[b][0] + half, cell[b][1] + half)
                        for a, b in links if (a // g == b // g) == same]
        parts.append(svg.segments(fabric_links, class_=f"stroke-{name}", stroke_width=1.5, stroke_dasharray=dash))
    x, y = cell[rank]
    parts.append(svg.boxes([(x - 1.5, y - 1.5, size + 3, size + 3)], class_=f"svg-ink {svg.KEY}", stroke_width=2.5))
    if box_w >= 24:  # room for a four-digit node number above each box
        rows = {}
        for i, node in enumerate(nodes):
            rows.setdefault(i // per_row, []).append((left + (i % per_row) * (box_w + gap) + box_w / 2, node))
        parts.append(svg.numerals([([x for x, _ in row], top + 6 + r * (box_h + 14), tuple(n for _, n in row))
                                   for r, row in rows.items()], height=6, class_="svg-ink", stroke_opacity=0.5,
                                  stroke_width=1.2))
    if pitch >= 24:  # rank numbers inside the squares
        parts.append(svg.numerals([([cell[r][0] + half for r in line], cell[line[0]][1] + half, tuple(line))
                                   for line in _lines(cell)], height=6, class_="svg-ink", stroke_width=1.2))
    labelled = world <= 64  # a tab stop per square only while they are few: the rank slider reaches every one
    if labelled:
        parts.append(svg.hit_areas([(*cell[r], pitch, pitch, f"rank={r}", f"rank {r}") for r in cell],
                                   class_="svg-hit", fill="transparent"))
    else:  # a strip per run of squares: hundreds of targets would dominate every redraw
        parts.append(svg.hit_strips([(*cell[r], pitch, pitch, r) for r in sorted(cell)], "rank",
                                    class_="svg-hit", fill="transparent"))
    parts.append(svg.texts([(LEFT, 14 + LINE * i, line) for i, line in enumerate(head)], class_="svg-label"))
    if capped:
        parts.append(svg.texts([(LEFT, 14 + LINE * (len(head) + i), line) for i, line in enumerate(cap)],
                               class_="svg-label svg-strong"))
    legend = [f"{LABELS[a]} groups of {mesh.degree(a)}: "
              + ("cross nodes" if crosses[a] else "stay inside nodes" if mesh.degree(a) > 1 else "off") for a in GROUP_AXES]
    if short:  # the legend under the texts, a line each
        legend = [line for entry in legend for line in _wrap(entry, TEXT_W, "svg-label")]
        below = LINE * (len(head) + len(cap)) + 8
        parts.append(svg.texts([(LEFT, below + 12 + LINE * i, line) for i, line in enumerate(legend)], class_="svg-label"))
        height = max(bottom, below + 12 + LINE * len(legend) - 8)
    else:
        columns = 1 if narrow else 2
        parts.append(svg.texts([(LEFT + (i % columns) * 360, bottom + 12 + (i // columns) * 16, line)
                                for i, line in enumerate(legend)], class_="svg-label"))
        height = bottom + 12 + 16 * ((len(GROUP_AXES) + columns - 1) // columns)
    return svg.document(WIDTH if short else layout.width, height, parts, label=(
        f"Grid of {len(cell)} of {world} ranks grouped by node{' (capped)' if capped else ''}, with rank {rank}'s "
        f"{LABELS[axis]} group filled")), _fabrics(links, g)


def render(state, narrow=False, short=False):
    order = tuple(state["order"].split("-"))
    mesh = Mesh(dp=state["dp"], tp=state["tp"], pp=state["pp"], cp=state["cp"], ep=state["ep"],
                order=order, gpus_per_node=state["gpus"])
    rank, axis, g, world = state["rank"], state["axis"], state["gpus"], mesh.world_size
    coords, expert = mesh.coords(rank), mesh.expert_coords(rank)
    groups = {a: group_ranks(mesh, a, rank) for a in GROUP_AXES}
    on_nodes = {a: nodes_of(members, g) for a, members in groups.items()}
    crosses = {a: _crosses(mesh, a) for a in GROUP_AXES}
    nodes = _nodes_to_draw(mesh, groups, rank, axis)  # the wide drawing's: the note and the alt speak of them
    drawing, fabrics = _drawing(state, mesh, groups, crosses,
                                _nodes_to_draw(mesh, groups, rank, axis, NARROW) if narrow else nodes, narrow, short)
    capped = len(nodes) < mesh.nodes
    on_screen = _ranks_on(nodes, g, world) if capped else None
    if narrow:  # a readout's swatch for the fabrics the wide drawing links, at every width
        fabrics = _fabrics(_links(groups[axis], _runs(_drawn(groups[axis], on_screen) if capped else groups[axis],
                                                      g, min(g, MAX_COLS))), g)
    fastest = "-".join(a for a in order if getattr(mesh, a) > 1) or "all degrees 1"
    home = mesh.node(rank)
    notes = []
    if capped:
        complete = all(len(_drawn(groups[a], on_screen)) == len(groups[a]) for a in GROUP_AXES)
        notes.append(f"{world:,} ranks on {mesh.nodes:,} nodes: drawn are the {len(nodes)} nodes that hold rank {rank}'s "
                     + ("groups." if complete else "node and as many of its groups' nodes as fit; the table lists "
                        "every member."))
    if world == MAX_WORLD:  # the degrees' sliders stop here: say why one will not go further
        notes.append(f"The world is {MAX_WORLD:,} GPUs, the most this figure lays out: to raise one degree, lower "
                     "another first.")
    if mesh.ep > 1 and mesh.ep == mesh.dp * mesh.cp:
        notes.append(f"EP is {mesh.ep}, all of DP \u00d7 CP: lowering DP or CP lowers it with them.")
    if world > 1 and rank == world - 1:  # constrain() keeps the rank inside the world: say so before it moves
        notes.append(f"Rank {rank:,} is the last of the {world:,}: lowering a degree brings it down to the new last rank.")
    if crosses["tp"]:
        notes.append(f"Flagged: tensor-parallel groups of {mesh.tp} ranks straddle node boundaries, so every TP "
                     "AllReduce leaves NVLink for the network.")
    spans = len(on_nodes[axis])
    readouts = (
        *(Readout(f"coord_{a}", f"{LABELS[a]} coordinate", f"{coords[a]} of {getattr(mesh, a)}", coords[a],
                  COLOURS[a] if a == axis or mesh.degree(a) > 1 else None)  # a swatch for a group the grid marks
          for a in AXES),
        Readout("coord_ep", "EP / expert-DP coordinate", f"{expert['ep']} of {mesh.ep} / {expert['edp']} of "
                f"{mesh.degree('edp')}", expert["ep"], "ep" if axis == "ep" or mesh.ep > 1 else None),
        Readout("group_size", f"{LABELS[axis]} group size", f"{mesh.degree(axis)} rank{'s' if mesh.degree(axis) > 1 else ''}",
                mesh.degree(axis)),
        Readout("crosses_node", f"some {LABELS[axis]} group crosses nodes",
                "yes" if crosses[axis] else "no", int(crosses[axis]),
                next(iter({"inter" if crosses[axis] else "intra"} & fabrics), None)),
        Readout("group_nodes", f"rank {rank}'s {LABELS[axis]} group spans",
                f"{spans} nodes" if spans > 1 else f"1 node (node {home})", spans),
        Readout("world_size", "world size", f"{world:,} GPUs on {mesh.nodes:,} node{'s' if mesh.nodes > 1 else ''}", world),
        Readout("node", f"rank {rank} is on node", str(home), home),
    )
    named = {a: fmt.rank_list(groups[a]) for a in GROUP_AXES}
    table_rows = [(LABELS[a], f"{(coords[a] if a in AXES else expert[a])} of {mesh.degree(a)}",
                   named[a], fmt.rank_list(on_nodes[a]), "yes" if crosses[a] else "no") for a in GROUP_AXES]
    table = html.table(("axis", "coordinate", f"rank {rank}'s group", "on nodes", "any group crosses nodes"), table_rows,
                       caption=f"Every process group of rank {rank} (fastest axis first: {fastest})",
                       row_classes=["chosen" if a == axis else None for a in GROUP_AXES])
    alt = (
        f"{world:,} ranks (TP {mesh.tp} x CP {mesh.cp} x DP {mesh.dp} x PP {mesh.pp}, EP {mesh.ep} inside DP x CP) "
        f"on {mesh.nodes:,} nodes of {fmt.gpus(g)}, order {state['order']}. Rank {rank} is on node {home} with coordinates "
        + ", ".join(f"{a} {coords[a]}" for a in AXES)
        + f". Its {LABELS[axis]} group, ranks {named[axis]}, is highlighted and "
        + ("crosses nodes." if spans > 1 else "stays inside its node.")
        + " Axes whose groups cross nodes: " + (", ".join(LABELS[a] for a in GROUP_AXES if crosses[a]) or "none") + "."
        + (f" The drawing is capped: it shows {len(nodes)} of the {mesh.nodes:,} nodes, rank {rank}'s and its "
           "groups'." if capped else "")
    )
    return View(svg=drawing, readouts=readouts, note=" ".join(notes), alt=alt, html=table)


def _ranks_on(nodes, g, world):
    """The ranks on ``nodes`` (the world's last node may be part-filled)."""
    return {node * g + local for node in nodes for local in range(min(g, world - node * g))}


def _drawn(members, cell):
    """The members (ascending) that have a square: walk the shorter of the two."""
    if len(members) <= len(cell):
        return [r for r in members if r in cell]
    found = []
    for r in sorted(cell):
        i = bisect_left(members, r)
        if i < len(members) and members[i] == r:
            found.append(r)
    return found


def _runs(members, g, cols):
    """Ascending members as runs of squares side by side (consecutive ranks on one row of a node's
    box): ``(first, count)`` each."""
    runs = []
    for r in members:
        if runs and r == runs[-1][0] + runs[-1][1] and r % g % cols:
            runs[-1][1] += 1
        else:
            runs.append([r, 1])
    return runs


def _lines(cell):
    """Ranks whose squares share a row, left to right: one numeral row each."""
    lines = {}
    for r, (x, y) in sorted(cell.items(), key=lambda item: (item[1][1], item[1][0])):
        lines.setdefault(y, []).append(r)
    return list(lines.values())
