"""Figure 02: one training step, cut six ways -- what one device keeps, what it sends, and when."""
from types import SimpleNamespace

from figures import html, svg
from figures.contract import Readout, Select, Slider, View
from models import checkpoint, cuts, fmt, strategies

NUMBER = 2
TITLE = "One step, six cuts"
CAPTION = (
    "The same training step cut six ways: in each panel the darker part is what one device keeps after the cut, "
    "and purple marks are where its collective fires. Bytes sent are what one device puts on the wire in one "
    "optimizer step, in bf16 over ring algorithms, for 8 microbatches of one 4,096-token sequence per model replica."
)
NOTE = (
    "In a panel, layers run left to right and tokens top to bottom, with a line between sequences; the strip "
    "beneath is the state every layer keeps from one step to the next: "
    f"{cuts.LEDGER_BYTES_PER_PARAM} bytes per parameter, bf16 weights and gradients plus fp32 master weights and "
    "Adam's two moments (no fp32 gradient copy; a checkpoint, which leaves out the gradients, keeps "
    f"{checkpoint.checkpoint_bytes_per_param()}). Click a panel to choose its cut. The hidden size follows from "
    "parameters ≈ 12 × layers × hidden², and the pipeline's bytes are an interior stage's."
)
TRIES = (
    ("Tensor cut", {"cut": "tensor"}),
    ("ZeRO-3 cut", {"cut": "zero"}),
    ("70B over 80 layers", {"params": 70_000_000_000, "layers": 80}),
    ("70B, tensor cut", {"params": 70_000_000_000, "layers": 80, "cut": "tensor"}),
)

PARAMS = tuple(int(b * 1e9) for b in (1, 2, 5, 7, 7.5, 10, 13, 20, 50, 70, 100, 175, 200, 405, 500, 1000))
CONTROLS = (
    Select("cut", "Cut", options=tuple((c, cuts.CUT_LABELS[c]) for c in cuts.CUTS), default="data"),
    Slider("degree", "Degree", stops=(2, 4, 8, 16, 32, 64), default=8),
    Slider("params", "Parameters", stops=PARAMS, default=7_000_000_000, format=fmt.si_count),
    Slider("layers", "Layers", stops=(8, 16, 24, 32, 40, 48, 64, 80, 96, 128), default=32),
)
PRIMARY = ("cut", "degree")

AXIS_COLOUR = {"data": "dp", "zero": "zero", "tensor": "tp", "pipeline": "pp", "context": "cp", "expert": "ep"}
TABLE_ROW = {"data": "DDP", "zero": "FSDP / ZeRO-3", "tensor": "Tensor", "pipeline": "Pipeline",
             "context": "Context", "expert": "Expert"}  # strategies.COMPARISON_ROWS, by strategy
PANEL_W, PANEL_H, GAP, BLOCK_W, BLOCK_H, STRIP_H, SEQUENCES, MAX_MARKS = 232, 190, 12, 216, 80, 12, 4, 16
# On a phone: two columns of three narrower panels, their titles and texts wrapped to the
# panel, so that all six (and the chosen one) fit on one screen of a 320-unit drawing.
NARROW_PANEL_W, NARROW_BLOCK_H, LINE = 154, 48, 15
SHORT_PANEL_W, SHORT_GAP = 116, 6  # a phone on its side (render(short=True)): the six phone's panels in one row


def constrain(state):
    """A pipeline stage needs at least one layer: degree <= layers."""
    if state["cut"] == "pipeline" and state["degree"] > state["layers"]:
        state["degree"] = max(d for d in CONTROLS[1].stops if d <= state["layers"])
    return state


def limits(state):
    """The degree slider's range: up to the layers when cutting the pipeline."""
    return {"degree": state["layers"] if state["cut"] == "pipeline" else CONTROLS[1].max}


def _step(cut, state):
    try:
        return cuts.step_cut(cut, state["params"], state["layers"], state["degree"])
    except ValueError as error:  # the pipeline at more stages than layers
        return str(error)


def _wrap(text, width, size, bold=False):
    """``text`` in lines no wider than ``width`` at ``size`` (words kept whole); ``width``
    None: one line."""
    if width is None or svg.text_width(text, size, bold) <= width:
        return [text]
    return svg.wrap(text, width, size, bold)


MIN_SLICE = 3.0  # the thinnest kept slice drawn (units): thinner, it would vanish into a hairline
WIDENED = "*"  # marks a panel whose kept slice is drawn thicker than to scale (the note says so)


def _slice(cut, d, layers, g):
    """The kept slice's true thickness in a panel (units) and the room it sits in: the batch's
    or state's 1/d (data, zero), a layer's 1/d (tensor) or its experts' (expert), the layers'
    (pipeline), a sequence's tokens' (context)."""
    lw = g.block_w / layers
    return {"data": (g.block_h / d, g.block_h), "zero": (STRIP_H / d, STRIP_H), "tensor": (lw / d, lw),
            "pipeline": (g.block_w / d, g.block_w), "context": (g.block_h / SEQUENCES / d, g.block_h / SEQUENCES),
            "expert": (lw / 2 / d, lw / 2)}[cut]


def _thick(extent, room):
    """A kept slice's drawn thickness: to scale, or MIN_SLICE where that is thinner (at most half its room)."""
    return max(extent, min(MIN_SLICE, room / 2))


_NARROWEST = SimpleNamespace(block_w=NARROW_PANEL_W - 16, block_h=NARROW_BLOCK_H)  # a phone's panel


def _widened(cut, d, layers):
    """Whether a cut's kept slice is drawn thicker than to scale: decided on a phone's panel,
    the smallest, so that every width marks and notes the same panels."""
    extent, room = _slice(cut, d, layers, _NARROWEST)
    return _thick(extent, room) > extent


def _texts(cut, d, step, wrap=None, widened=False, title_wrap=None):
    """A panel's title lines (the cut, then its degree, where one line is wider than
    ``wrap``; a mark where its slice is not to scale), then its text's lines: what its
    collective is and when it fires."""
    what, when = (step.what, step.when) if not isinstance(step, str) else ("not possible here:", "more stages than layers")
    name = cuts.CUT_LABELS[cut] + (" (as MoE)" if cut == "expert" else "")  # a dense model has no experts: NOTE
    ways = f"{d} ways" + (f" {WIDENED}" if widened and not isinstance(step, str) else "")
    title = [f"{name}, {ways}"]
    title_wrap = wrap if title_wrap is None else title_wrap
    size = svg.label_size("svg-title")
    if title_wrap is not None and svg.text_width(title[0], *size) > title_wrap:
        title = [f"{name},", ways]
        if title_wrap < NARROW_PANEL_W - 16 and svg.text_width(title[0], *size) > title_wrap:  # a short screen's panel: the name wraps
            title = svg.wrap(f"{name}, {ways}", title_wrap, *size)
    soft = svg.label_size("svg-label-soft")
    return title, _wrap(what, wrap, *soft) + _wrap(when, wrap, *soft)


def _layout(narrow, d, layers, steps, short=False):
    """The panels' geometry: three columns of two rows, or on a phone two columns of three
    with each text wrapped to its panel (every panel as tall as the one with most lines)."""
    if not narrow:  # the texts on one line each; a title that outgrows its panel in two
        title_lines = max(len(_texts(cut, d, step, None, _widened(cut, d, layers), PANEL_W - 16)[0])
                          for cut, step in steps.items())
        return SimpleNamespace(columns=3, panel_w=PANEL_W, panel_h=PANEL_H + LINE * (title_lines - 1), block_w=BLOCK_W,
                               block_h=BLOCK_H, wrap=None, title_wrap=PANEL_W - 16, title_lines=title_lines)
    panel_w = SHORT_PANEL_W if short else NARROW_PANEL_W  # short: a phone on its side, all six in a row
    wrap = panel_w - 16
    title_lines, text_lines = 1, 2
    for cut, step in steps.items():
        title, lines = _texts(cut, d, step, wrap, _widened(cut, d, layers))
        title_lines, text_lines = max(title_lines, len(title)), max(text_lines, len(lines))
    # title, block, strip and texts as in a wide panel, the extra lines added
    panel_h = 30 + LINE * (title_lines - 1) + NARROW_BLOCK_H + 14 + STRIP_H + 20 + LINE * (text_lines - 1) + 9
    return SimpleNamespace(columns=6 if short else 2, panel_w=panel_w, panel_h=panel_h, block_w=panel_w - 16,
                           block_h=NARROW_BLOCK_H, wrap=wrap, title_wrap=wrap, title_lines=title_lines)


def _panel(cut, d, layers, x, y, chosen, step, g):
    """One cut: the step block and state strip, the part device 0 keeps, where the collective fires."""
    block_w, block_h = g.block_w, g.block_h
    bx, by, lw = x + 8, y + 30 + LINE * (g.title_lines - 1), block_w / layers
    sy, band = by + block_h + 14, block_h / SEQUENCES
    every = max(1, -(-layers // MAX_MARKS))  # thin the per-layer marks to at most MAX_MARKS
    keep, cut_lines, marks = [], [], []
    widened = _widened(cut, d, layers)
    extent, room = _slice(cut, d, layers, g)
    part = _thick(extent, room) if widened else extent  # the kept slice as drawn: to scale, or MIN_SLICE (marked)
    if cut in ("data", "zero"):  # device 0 keeps 1/d of the batch; zero also 1/d of the state
        keep += [(bx, by, block_w, _thick(block_h / d, block_h) if widened else block_h / d),
                 (bx, sy, block_w, part if cut == "zero" else STRIP_H)]
        cut_lines += [(bx, by + k * block_h / d, bx + block_w, by + k * block_h / d) for k in range(1, d) if block_h / d >= 3]
        marks += [(bx + block_w + 3, sy + 4)] if cut == "data" else [(bx + (l + 0.5) * lw - 2, sy - 9) for l in range(0, layers, every)]
    elif cut == "tensor":  # a 1/d sliver of every layer's matrices and state
        keep += [(bx + l * lw, top, part, h) for l in range(layers) for top, h in ((by, block_h), (sy, STRIP_H))]
        marks += [(bx + (l + 0.5) * lw - 2, by - 7) for l in range(0, layers, every)]
    elif cut == "pipeline":  # the first 1/d of the layers, and their state
        keep += [(bx, by, part, block_h), (bx, sy, part, STRIP_H)]
        cut_lines += [(bx + k * block_w / d, by - 2, bx + k * block_w / d, sy + STRIP_H + 2) for k in range(1, d)]
        marks += [(bx + k * block_w / d - 2, by + block_h / 2 - 2) for k in range(1, d, max(1, -(-d // 16)))]
    elif cut == "context":  # 1/d of every sequence's tokens; the whole state
        keep += [(bx, by + q * band, block_w, part) for q in range(SEQUENCES)] + [(bx, sy, block_w, STRIP_H)]
        marks += [(bx + (l + 0.25) * lw - 2, by - 7) for l in range(0, layers, every)]
    else:  # expert: every attention half, 1/d of every layer's experts
        keep += [(bx + l * lw + half, top, part if half else lw / 2, h)
                 for l in range(layers) for half in (0, lw / 2) for top, h in ((by, block_h), (sy, STRIP_H))]
        marks += [(bx + (l + 0.75) * lw - 2, by - 7) for l in range(0, layers, every)]
    colour = AXIS_COLOUR[cut]  # every cut in its axis's hue; the ones not chosen are muted (svg-muted)
    title, lines = _texts(cut, d, step, g.wrap, widened, g.title_wrap)
    parts = [
        svg.boxes(((bx, by, block_w, block_h), (bx, sy, block_w, STRIP_H)), class_=f"fill-{colour}", fill_opacity="0.22"),
        svg.segments([(bx, by + q * band, bx + block_w, by + q * band) for q in range(1, SEQUENCES)]
                     + [(bx + l * lw, sy, bx + l * lw, sy + STRIP_H) for l in range(1, layers) if lw >= 3], class_="svg-axis"),
        svg.boxes(keep, class_=f"fill-{colour}"),
        svg.segments(cut_lines, class_="svg-cut"),
        svg.boxes(((mx, my, 4, 4) for mx, my in marks), class_="fill-comm"),
    ]
    # the words stay at full strength in every panel (muted, the soft ink fell to 2.15:1): only
    # the drawing of a cut not chosen is muted
    words = [*(svg.text(x + 8, y + 15 + LINE * i, line, class_="svg-title") for i, line in enumerate(title)),
             svg.texts(((x + 8, sy + STRIP_H + 20 + LINE * i, line) for i, line in enumerate(lines)), class_="svg-label-soft")]
    if chosen:  # the chosen panel carries the point (the piece its cut leaves one GPU): its outline is svg-key
        parts.append(svg.boxes(((x + 1, y + 1, g.panel_w - 2, g.panel_h - 2),), class_=f"svg-focus {svg.KEY}"))
    return svg.group(parts, class_=None if chosen else "svg-muted") + "".join(words)


def render(state, narrow=False, short=False):
    chosen, d, layers = state["cut"], state["degree"], state["layers"]
    steps = {cut: _step(cut, state) for cut in cuts.CUTS}
    g = _layout(narrow or short, d, layers, steps, short=short and not narrow)
    gap = SHORT_GAP if g.columns == 6 else GAP
    corner = {cut: ((i % g.columns) * (g.panel_w + gap), (i // g.columns) * (g.panel_h + gap)) for i, cut in enumerate(cuts.CUTS)}
    parts = [_panel(cut, d, layers, *corner[cut], cut == chosen, steps[cut], g) for cut in cuts.CUTS]
    parts.append(svg.hit_areas(((x, y, g.panel_w, g.panel_h, f"cut={cut}", f"show the {cuts.CUT_LABELS[cut]} cut")
                                for cut, (x, y) in corner.items()), class_="svg-hit"))
    rows = -(-len(cuts.CUTS) // g.columns)
    drawing = svg.document(g.columns * g.panel_w + (g.columns - 1) * gap, rows * g.panel_h + (rows - 1) * gap, parts,
                           label=f"One training step cut six ways at degree {d}; the {cuts.CUT_LABELS[chosen]} cut is chosen")
    step, card = steps[chosen], strategies.card(cuts.CARD_KEYS[chosen])
    readouts = (
        Readout("model_state_bytes_per_device", f"model state per device ({cuts.LEDGER_BYTES_PER_PARAM} B per parameter)",
                fmt.gigabytes(step.model_state_bytes), step.model_state_bytes),
        Readout("comm_bytes_per_step_per_device", "sent per device per step", fmt.gigabytes(step.comm_bytes),
                step.comm_bytes, "comm"),
        Readout("collective", "collective", f"{step.what}, {step.when}, over {step.group}", step.collective),
        Readout("messages_per_step", "collectives per device per step", f"{step.messages:,}", step.messages),
        Readout("hidden", "hidden size h", f"{step.hidden:,}", step.hidden),
    )
    rows = {r.strategy: r for r in strategies.COMPARISON_ROWS}
    table = html.table(
        ("cut", "what is split", "model state / device", "sent / device / step", "collectives / step"),
        [(cuts.CUT_LABELS[c], rows[TABLE_ROW[c]].split)
         + ((fmt.gigabytes(s.model_state_bytes), fmt.gigabytes(s.comm_bytes), f"{s.messages:,}") if not isinstance(s, str)
            else ("more stages than layers", "", "")) for c, s in steps.items()],
        row_classes=["chosen" if c == chosen else None for c in cuts.CUTS],
        caption=f"{fmt.si_count(state['params'])} parameters, {layers} layers, h = {step.hidden:,}, degree {d}",
    )
    card_lines = html.items([f"Communication: {card.communication}", f"How often: {card.frequency}",
                             f"Keeps whole: {card.replicated}"])
    alt = (f"Six panels, one per cut of a {fmt.si_count(state['params'])}-parameter, {layers}-layer step at degree {d}. "
           + " ".join(f"{cuts.CUT_LABELS[c]}: {fmt.gigabytes(s.model_state_bytes)} kept, {fmt.gigabytes(s.comm_bytes)} sent "
                      f"in {s.messages:,} collectives." if not isinstance(s, str) else f"{cuts.CUT_LABELS[c]}: {s}."
                      for c, s in steps.items())
           + f" The {cuts.CUT_LABELS[chosen]} panel is highlighted.")
    return View(svg=drawing, readouts=readouts, alt=alt, html=html.join(table, html.heading(card.name), card_lines),
                note=_note(d, layers, steps))


def _note(d, layers, steps):
    """What the drawing does not show to scale, and what the Expert panel means for a dense model."""
    widened = [cuts.CUT_LABELS[c] for c in cuts.CUTS if _widened(c, d, layers) and not isinstance(steps[c], str)]
    sentences = [f"Expert (as MoE): a dense model has no experts, so this panel splits each layer's MLP as if it "
                 f"were {cuts.EXPERTS} experts, each token routed to {cuts.TOP_K}: what the model's mixture-of-experts "
                 "version would keep and send."]
    if widened:
        names = " and ".join(", ".join(widened).rsplit(", ", 1))
        sentences.append(f"{WIDENED} Not to scale: the slice one device keeps in the {names} "
                         f"panel{'s' if len(widened) > 1 else ''} would be thinner than a line, so it is drawn "
                         f"{MIN_SLICE:g} units thick.")
    return " ".join(sentences)
