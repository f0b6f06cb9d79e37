"""Figure 11: one MLP or attention block on T ranks, every matrix printed as a heatmap."""
from functools import lru_cache

from figures import palette, svg
from figures.contract import Button, Readout, Select, Slider, View
from models import fmt, tensor

NUMBER = 11
TITLE = "Column-parallel then row-parallel, block by block"
ARTICLE_B, ARTICLE_S, ARTICLE_H = 1, 4096, 8192  # the text's worked example; bf16 (2 bytes)
CAPTION = (
    "A real block with 4 tokens and hidden size 8, computed on T ranks: follow the outlined token down the steps, "
    "from a first cut that needs no communication to the one AllReduce that finishes the block."
)
NOTE = (
    "Each cell is one number, shaded by its value and coloured by the rank that holds it (numbered beside it); grey "
    "means every rank holds the same matrix. The second cut leaves T partial sums, and the AllReduce adds them up to "
    "the one-device result. Cut rows first and the nonlinearity meets partial sums. The AllReduce size is for "
    "b = 1, s = 4,096, h = 8,192 in bf16."
)
TRIES = (
    ("Rows first", {"order": "row_first"}),
    ("Eight ranks", {"T": 8}),
    ("The attention block", {"block": "attention"}),
)
SEEDS = 100


def _new_matrices(state):
    return {**state, "seed": (state["seed"] + 1) % SEEDS}


CONTROLS = (
    Slider("T", "Ranks T", stops=(1, 2, 4, 8), default=2),
    Select("block", "Block", options=(("mlp", "MLP"), ("attention", "Attention")), default="mlp"),
    Select("order", "Order of the cuts", options=(("column_row", "columns, then rows (Megatron)"),
                                                   ("row_first", "rows first")), default="column_row"),
    Slider("seed", "Matrices (seed)", min=0, max=SEEDS - 1, step=1, default=1),
    Button("new_matrices", "New random matrices", press=_new_matrices),
)
PRIMARY = ("T", "order")  # how many ranks, and which cut comes first

LABEL = svg.LABEL_SIZES["svg-label"]
WIDTH, LEFT, LEVELS = 480, 6, 6  # narrow: on a phone the drawing keeps its labels legible
# On a phone: 320 units with 11-unit labels. Matrices wrap onto further lines sooner, and the
# step titles, the collective's band and the verdict wrap onto lines of their own.
NARROW_WIDTH = 320
# ... and no taller than the room under the figure's bar on a 390 x 844 phone (844 - 191 px,
# 353 px to 320 units, 5 px to spare): where the matrices would run longer, their cells
# shrink (down to 2 units) while every label keeps its size.
NARROW_HEIGHT = 587
# On a phone on its side: steps 1-2 beside steps 3-4 across 720 units, in the largest cells
# (the most even columns) that keep the drawing within SHORT_HEIGHT; searched once, as
# tests/test_short_layouts.py does again, because the search costs a redraw ~20 layouts.
SHORT_WIDTH, SHORT_HEIGHT, SHORT_SPLIT = 720, 292, 2
SHORT_FIRST_WIDTHS = (300, 360, 420, 480)  # the first column's widths the search tries
SHORT_LAYOUT = {  # (block, order, T): (cell, first column's width)
    ("mlp", "column_row", 1): (5, 300), ("mlp", "row_first", 1): (4, 300),
    ("attention", "column_row", 1): (8, 480), ("attention", "row_first", 1): (8, 360),
    ("mlp", "column_row", 2): (4, 300), ("mlp", "row_first", 2): (3, 360),
    ("attention", "column_row", 2): (7, 300), ("attention", "row_first", 2): (6, 420),
    ("mlp", "column_row", 4): (4, 300), ("mlp", "row_first", 4): (3, 420),
    ("attention", "column_row", 4): (7, 300), ("attention", "row_first", 4): (5, 480),
    ("mlp", "column_row", 8): (3, 300), ("mlp", "row_first", 8): (2, 420),
    ("attention", "column_row", 8): (4, 300), ("attention", "row_first", 8): (4, 480),
}
LINE = 15  # from one wrapped line's baseline to the next
NUMERAL_PX = 6  # an owner's number (svg.numerals' height; 4 px wide)
CELL = {"mlp": 6, "attention": 8}  # px per matrix entry: the MLP's 4h-wide matrices need smaller cells
SEPARATORS = {"column_row": (("\u00d7", "="), (), ("\u2192",), ("vs",)),
              "row_first": (("\u00d7", "="), ("\u2260",), ("\u00d7", "="), ("vs",))}
COLLECTIVE_TEXT = {
    ("column_row", "AllReduce"): "AllReduce: every rank gets the sum of the {} partial sums",
    ("row_first", "AllReduce"): "AllReduce after the nonlinearity: the sum comes too late",
    ("row_first", "AllGather"): "AllGather: every rank collects the {} output slices",
}


def _wrap(text, width, size=LABEL):
    """``text`` broken at spaces into lines no wider than ``width``."""
    return svg.wrap(text, width, size)


def _cells(px, cell):
    """The whole cells that hold ``px`` px."""
    return -(-px // cell)


def _pieces_layout(panel, columns, cell):
    """(dx, dy, piece, owner) of each piece of a panel in matrix cells, and the panel's size.
    Partial sums wrap onto further lines when they do not fit across. Each owner's number
    (NUMERAL_PX, beside a rank block, else under its piece) keeps clear of the next piece."""
    placed, x, y, line = [], 0, 0, 0
    for owner, piece in enumerate(panel.pieces):
        width, height = len(piece[0]), len(piece)
        if panel.layout == "partial" and x and x + width > columns:
            x, y = 0, y + line + max(3, _cells(NUMERAL_PX + 6, cell))
        placed.append((x, y, piece, owner))
        line = max(line, height)
        if panel.layout == "rows":
            y += height + max(1, _cells(NUMERAL_PX + 2 - height * cell, cell))  # a gap between rank blocks
        else:
            x += width + (max(1, _cells(NUMERAL_PX + 1 - width * cell, cell)) if panel.layout == "columns" else 2)
    width = max(dx + len(p[0]) for dx, _, p, _ in placed)
    height = max(dy + len(p) for _, dy, p, _ in placed)
    return placed, width, height


@lru_cache(maxsize=64)
def _drawing(block, order, tp, seed, drawing_width=WIDTH, cell=None, split=None, first_width=None):
    """The heatmaps on a grid of matrix cells (one unit = one entry, ``cell`` px: CELL[block]
    unless given), ``drawing_width`` units wide: every (colour, shade) is one svg.lanes path,
    each matrix row one string format. ``split``: the steps from this one on in a second
    column, beside the first, which is ``first_width`` units wide (a phone on its side)."""
    walk = tensor.block_walkthrough(block, order, tp, seed)
    cell = cell or CELL[block]
    step_width = first_width if split else drawing_width  # a column of steps
    columns = (step_width - 2 * LEFT) // cell
    ox, first_bottom = 0, 0  # the column's left edge, in cells; where the first column ends
    label_rows = -(-16 // cell)  # room for a panel name
    rows, outlines, followed, labels, numerals, bands, top = {}, [], [], [], [], [], 0
    for index, (step, separators) in enumerate(zip(walk.steps, SEPARATORS[order])):
        if index == split:
            ox, first_bottom, top = -(-step_width // cell), top, 0
            step_width = drawing_width - ox * cell
            columns = (step_width - 2 * LEFT) // cell
        values = [v for panel in step.panels for piece in panel.pieces for row in piece for v in row]
        low = min(values)
        scale = LEVELS / ((max(values) - low) or 1.0)
        title = _wrap(f"{index + 1}. {step.title}", step_width - 2 * LEFT)
        labels += [(LEFT + ox * cell, top * cell + 14 + LINE * i, line, "svg-label") for i, line in enumerate(title)]
        title_rows = -(-(24 + LINE * (len(title) - 1)) // cell)  # room for the step's title
        if cell < CELL[block]:  # shrunk cells: rows enough to keep the panel names a line under it
            title_rows = max(title_rows, -(-(33 + LINE * (len(title) - 1)) // cell) - 1)
        x, line_top, line_height, pending = 0, top + title_rows - label_rows + 1, 0, ""
        for panel, separator in zip(step.panels, separators + ("",)):
            placed, width, height = _pieces_layout(panel, columns, cell)
            sign = -(-20 // cell) if pending else 0
            beside = -(-12 // cell) if panel.layout == "rows" else 0  # the owners' numbers drawn beside rank blocks
            name_cells = -(-svg.text_width(panel.name, svg.LABEL_SIZES["svg-label-soft"]) // cell)
            if x and x + sign + max(width + beside, name_cells) > columns:  # (small cells: a name outruns its matrix)
                x, line_top, line_height = 0, line_top + line_height, 0
            if x + sign + width > columns:
                # partial sums wrap sooner to leave room for the sign before them (8 MLP partial
                # sums once ran past the wide drawing's right edge)
                placed, width, height = _pieces_layout(panel, columns - x - sign, cell)
            y = line_top + label_rows
            if pending:  # the sign between two panels, at the start of a line if the second one wrapped
                labels.append((LEFT + (ox + x) * cell + 2, (y + min(height, 8) / 2) * cell + 4, pending, "svg-label"))
                x += sign
            labels.append((LEFT + (ox + x) * cell, y * cell - 4, panel.name, "svg-label-soft"))
            for dx, dy, piece, owner in placed:
                colour = "replicated" if panel.layout in ("replicated", "single") else palette.rank_key(owner)
                for r, row in enumerate(piece):
                    buckets = [[] for _ in range(LEVELS)]
                    for c, v in enumerate(row):
                        buckets[min(int((v - low) * scale), LEVELS - 1)].append(ox + x + dx + c)
                    for level, starts in enumerate(buckets):
                        if starts:
                            rows.setdefault((colour, level), []).append((y + dy + r, 1, starts))
                px, py, pw, ph = LEFT + (ox + x + dx) * cell, (y + dy) * cell, len(piece[0]) * cell, len(piece) * cell
                outlines.append((px, py, pw, ph))
                if not panel.weight:  # the first token's row, to follow down the steps
                    followed.append((px - 0.5, py - 0.5, pw + 1, cell + 1))
                if colour != "replicated":  # the owner's number beside its block: colour is never the only cue
                    beside = panel.layout == "rows"
                    numerals.append(((px + pw + 6 if beside else px + pw / 2,), py + ph / 2 if beside else py + ph + 7, (owner,)))
            name_width = -(-len(panel.name) * 7 // cell)  # an 11 px label is ~6.5 px per character
            x += max(width + (3 if panel.layout == "rows" else 1), name_width)
            numbered_under = panel.layout not in ("replicated", "single", "rows")  # owners' numbers under its pieces
            line_height = max(line_height, height + label_rows + (max(2, _cells(NUMERAL_PX + 5, cell)) if numbered_under else 2))
            pending = separator
        top = line_top + line_height
        if step.collective_after and tp > 1:
            band = _wrap(COLLECTIVE_TEXT[order, step.collective_after].format(tp), step_width - 2 * LEFT - 12)
            bands.append((LEFT + ox * cell, top * cell, step_width - 2 * LEFT, 18 + LINE * (len(band) - 1)))
            labels += [(LEFT + ox * cell + 6, top * cell + 13 + LINE * i, line, "svg-label") for i, line in enumerate(band)]
            top += -(-(24 + LINE * (len(band) - 1)) // cell)
    verdict_ok = walk.max_abs_error <= 1e-12
    # the verdict under the steps, or under the shorter column where there are two
    vx, bottom, tallest = 0, max(top, first_bottom) * cell + 4, max(top, first_bottom) * cell
    if split:
        vx, bottom = (ox * cell, top * cell + 4) if top <= first_bottom else (0, first_bottom * cell + 4)
        step_width = drawing_width - vx if vx else first_width
    verdict = [("matches one device" if verdict_ok else "differs from one device") + ":",
               f"largest |difference| {fmt.scientific(walk.max_abs_error)}"]
    if svg.text_width(" ".join(verdict), LABEL) <= step_width - 2 * LEFT - 16:  # else on two lines
        verdict = [" ".join(verdict)]
    labels += [(vx + LEFT + 16, bottom + 10 + LINE * i, line, "svg-label") for i, line in enumerate(verdict)]
    parts = [svg.lanes(lanes, x=LEFT, y=0, x_scale=cell, lane_height=cell, fill_ratio=1, class_=f"stroke-{colour}",
                       stroke_opacity=round(0.15 + 0.85 * level / (LEVELS - 1), 2))
             for (colour, level), lanes in sorted(rows.items())]
    parts += [svg.boxes(outlines, fill="none", class_="svg-axis"),
              svg.boxes(followed, class_="svg-ink-stroke", stroke_width=1.5),
              svg.boxes(bands, class_=f"fill-comm {svg.KEY}", fill_opacity=0.25),  # the point: what the cuts cost
              svg.boxes([(vx + LEFT, bottom + 1, 10, 10)], class_="svg-ink-fill" if verdict_ok else "fill-warn"),
              svg.numerals(numerals, class_="svg-ink-stroke", stroke_width=1.2)]
    for css in ("svg-label", "svg-label-soft"):
        parts.append(svg.texts(((x, y, t) for x, y, t, c in labels if c == css), class_=css))
    return walk, parts, max(tallest + 4, bottom + 20 + LINE * (len(verdict) - 1))


def render(state, narrow=False, short=False):
    tp, block, order = state["T"], state["block"], state["order"]
    width = NARROW_WIDTH if narrow else SHORT_WIDTH if short else WIDTH
    if short:
        cell, first_width = SHORT_LAYOUT[block, order, tp]
        walk, parts, height = _drawing(block, order, tp, state["seed"], width, cell, SHORT_SPLIT, first_width)
    else:
        walk, parts, height = _drawing(block, order, tp, state["seed"], width)
    cell = CELL[block]
    while narrow and height > NARROW_HEIGHT and cell > 2:
        cell -= 1
        walk, parts, height = _drawing(block, order, tp, state["seed"], width, cell)
    collectives = tensor.block_collectives(block, order, ARTICLE_B, ARTICLE_S, ARTICLE_H, tp)
    kinds = " + ".join(c.kind for c in collectives)
    allreduce = next((c for c in collectives if c.kind == "AllReduce"), None)
    gather = next((c for c in collectives if c.kind == "AllGather"), None)  # the block's output, b x s x h
    size = f"b = {ARTICLE_B}, s = {ARTICLE_S:,}, h = {ARTICLE_H:,}, bf16"
    name = "MLP" if block == "mlp" else "attention"
    readouts = (
        Readout("collectives_forward", "collectives in the forward pass",
                f"{len(collectives)} ({kinds})" if collectives else "none (T = 1)", walk.collectives_forward),
        Readout("max_abs_error", "largest |parallel - one device|", fmt.scientific(walk.max_abs_error),
                walk.max_abs_error, None if walk.max_abs_error <= 1e-12 else "warn"),
        Readout("allreduce_bytes", f"bytes per AllReduce ({size})",
                fmt.data_size(allreduce.message_bytes) if allreduce else "none (T = 1)",
                allreduce.message_bytes if allreduce else 0.0, "comm" if allreduce and tp > 1 else None),
        Readout("allreduce_sent_bytes", "sent by each rank in that AllReduce",
                fmt.data_size(allreduce.wire_bytes_per_rank) if allreduce else "none (T = 1)",
                allreduce.wire_bytes_per_rank if allreduce else 0.0),
    )
    note = ""
    if order == "row_first" and tp > 1:
        note = (f"Rows first, the {name}'s nonlinearity sees partial sums: summing afterwards is not the same "
                f"thing, and the output is off by up to {fmt.scientific(walk.max_abs_error)}. Done right, the "
                f"AllReduce goes before the nonlinearity, on a tensor {fmt.decimal(allreduce.message_bytes / gather.message_bytes)} "
                f"times wider ({fmt.data_size(allreduce.message_bytes)} at {size}), and an AllGather follows: "
                f"{len(collectives)} collectives, not 1.")
    alt = (f"The {name} block on {tp} rank{'s' if tp > 1 else ''}, "
           f"{'columns then rows' if order == 'column_row' else 'rows first'}, in four steps of heatmaps coloured by "
           f"owning rank. Forward collectives: {readouts[0].text}. Largest difference from the one-device result: "
           f"{readouts[1].text}. Each AllReduce at {size}: {readouts[2].text}.")
    drawing = svg.document(width, height, parts, label=alt, class_=None if short else "svg-narrow")
    return View(svg=drawing, readouts=readouts, note=note, alt=alt)
