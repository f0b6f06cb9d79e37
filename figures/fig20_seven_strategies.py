"""Figure 20: one toy model cut seven ways, in seven panels stepping through one training
step in lock-step: what each device holds, which devices compute, what is on the wire."""
from figures import svg
from figures.contract import Play, Readout, Select, Slider, View
from models import fmt, memory, strategies, tour

NUMBER = 20
TITLE = "The same seven strategies, as one moving picture"
CAPTION = (
    f"A toy GPT of {tour.TOY.layers} layers, width {tour.TOY.hidden} ({tour.TOY.params / 1e6:.1f}M parameters, "
    f"{tour.TOY.state_bytes / 1e6:.0f} MB of model state), trained on a batch of {tour.TOY.tokens:,} "
    "tokens and cut seven ways, one panel each. Press Play, or step through the frames, to watch every cut take the "
    "same step."
)
NOTE = (
    "In each panel a column is a device and a row one layer: the bar is the share of that layer's state the device "
    "holds (weights, gradients, optimizer state), the outlined row is being computed, and the lines underneath are "
    "collectives, with the bytes they put on the wire. Click a panel to enlarge it."
)
TRIES = (
    ("Enlarge ZeRO / FSDP", {"focus": "zero"}),
    ("The pipeline, going backward", {"focus": "pp", "phase": 4}),
    ("Two devices each", {"devices": 2}),
)

NAMES = {key: strategies.SHORT_NAMES[key] for key in tour.STRATEGIES}
CARD_WORDS = {key: (strategies.card(key).sharded, strategies.card(key).communication)
              for key in tour.STRATEGIES if key != "hsdp"}
CARD_WORDS["hsdp"] = ("Split: " + strategies.HSDP_SPLIT + ".", strategies.card("zero").communication)
FRAME_LABEL = {f.index: (f"{f.phase}, layer {f.layer + 1} of {tour.TOY.layers}" if f.layer is not None else "optimizer step")
               for f in tour.FRAMES}
OP_NAME = {"allreduce": "AllReduce", "allgather": "AllGather", "reducescatter": "ReduceScatter",
           "alltoall": "All-to-All", "sendrecv": "Send/Recv"}

CONTROLS = (
    Play("playing", "Play", drives="phase", interval_ms=900),
    Slider("phase", "Frame", min=0, max=len(tour.FRAMES) - 1, step=1, default=0, format=FRAME_LABEL.get),
    Select("focus", "Enlarge", options=(("all", "All seven"),) + tuple((k, NAMES[k]) for k in tour.STRATEGIES),
           default="all"),
    Select("devices", "Devices", options=((2, "2 devices"), (4, "4 devices")), default=4),
)
PRIMARY = ("playing", "phase")  # on a phone: Play (the caption says to press it) and the frame; a tap on a panel enlarges it

PW, PH, GAP = 172, 204, 8  # one panel, in its own coordinates


class _Metrics:
    """Where a panel's parts sit, in its own coordinates: ``pw`` x ``ph``, its name on one
    line over the share each device holds (``compact``: the share at the name's right end),
    the devices from ``dev_top`` in rows ``row_h`` a layer, then ``bus_h`` a collective."""

    def __init__(self, pw, ph, dev_top, row_h, bus_h, compact):
        self.pw, self.ph, self.dev_top, self.row_h, self.bus_h, self.compact = pw, ph, dev_top, row_h, bus_h, compact


FULL = _Metrics(PW, PH, 42, 18, 25, compact=False)
# a phone's panel, two a row: the share beside the name, slimmer layer rows and collectives, so
# that all seven fit under the figure's bar on a 390 x 844 screen (tests/test_figures_18_20.py)
COMPACT = _Metrics(156, 141, 24, 11, 21, compact=True)
WIDTH = 4 * PW + 3 * GAP + 2 * 8
_ADAM = memory.OPTIMIZERS["adam_mixed"]  # the toy's 16 bytes a parameter (tour.STATE_BYTES_PER_PARAM)
LEDGER = tuple((part, part_bytes / tour.STATE_BYTES_PER_PARAM) for part, part_bytes in (
    ("params", _ADAM.param_bytes), ("grads", _ADAM.grad_bytes), ("optimizer", _ADAM.optimizer_bytes)))


def _panel(pf, at=FULL):
    """One strategy's panel laid out ``at`` (its ``_Metrics``), in its own coordinates."""
    n, pw, row_h, dev_top = pf.devices, at.pw, at.row_h, at.dev_top
    width = (pw - 16 - (n - 1) * 6) / n
    left = [8 + d * (width + 6) for d in range(n)]
    frame = pf.frame
    share = fmt.percent(pf.held_fraction, 0)
    parts = [svg.boxes(((0, 0, pw, at.ph),), class_="svg-lane"),
             svg.text(6 if at.compact else 8, 15 if at.compact else 16, NAMES[pf.strategy], class_="svg-label")]
    if at.compact:
        parts.append(svg.text(pw - 6, 15, share, class_="svg-label-soft", text_anchor="end"))
    else:
        parts.append(svg.text(8, 31, f"each device holds {share}", class_="svg-label-soft"))
    bottom = dev_top + tour.TOY.layers * row_h + 4
    busy = [d for d in range(n) if pf.computing[d]]
    idle = [d for d in range(n) if not pf.computing[d]]
    if pf.strategy == "hsdp" and n > tour.HSDP_GROUP:  # the shard groups, each a replica of the others
        parts.append(svg.boxes([(left[s] - 3, dev_top - 7, tour.HSDP_GROUP * width + 6 * tour.HSDP_GROUP, bottom - dev_top + 10)
                                for s in range(0, n, tour.HSDP_GROUP)], class_="svg-group"))
    for devices, dim in ((busy, ""), (idle, " svg-dim")):
        parts.append(svg.boxes([(left[d], dev_top - 4, width, bottom - dev_top + 4) for d in devices], class_="svg-lane" + dim))
        held = [(left[d] + 3, dev_top + j * row_h, (width - 6) * pf.holdings[d][j], row_h - (4 if at.compact else 5))
                for d in devices for j in range(tour.TOY.layers) if pf.holdings[d][j] > 0]
        parts += _ledger_bars(held, dim)
    rows = range(tour.TOY.layers) if frame.layer is None else (frame.layer,)
    active = [(left[d] + 1.5, dev_top + j * row_h - 1.5, width - 3, row_h - 2) for d in busy for j in rows
              if pf.holdings[d][j] > 0]
    kind = "optimizer_step" if frame.layer is None else frame.phase
    parts.append(svg.boxes(active, class_=f"svg-active stroke-{kind}"))
    centre = [x + width / 2 for x in left]
    wires, labels = [], []
    for k, transfer in enumerate(pf.transfers):
        y = bottom + (10 if at.compact else 12) + k * at.bus_h
        reach = (10 if at.compact else 12) if k == 0 else 5  # the first comb's teeth reach up to the devices
        if pf.strategy == "pp":  # one activation (or its gradient) to the neighbouring stage: an arrow
            src, dst = transfer.groups[0]
            step = 1 if dst > src else -1
            tip = centre[dst] - step * 4
            wires += [(centre[src], y, tip, y), (tip, y, tip - step * 5, y - 4), (tip, y, tip - step * 5, y + 4)]
        else:  # a comb under the devices of each group
            for g, members in enumerate(transfer.groups):
                ly = y + 4 * (g if members[-1] - members[0] >= len(members) else 0)  # interleaved groups: offset
                wires.append((centre[members[0]], ly, centre[members[-1]], ly))
                wires += [(centre[d], ly - reach, centre[d], ly) for d in members]
        labels.append((6 if at.compact else 8, y + (13 if at.compact else 15), f"{_op_name(transfer)} {fmt.data_size(transfer.wire_bytes)}"))
    if not pf.transfers:
        labels.append((6 if at.compact else 8, bottom + (23 if at.compact else 27), "nothing on the wire"))
    parts.append(svg.segments(wires, class_="svg-wire stroke-comm"))
    parts.append(svg.texts(labels, class_="svg-label-soft"))
    return parts


def _ledger_bars(boxes, dim=""):
    """Each share of a layer's state as its ledger: weights, gradients, optimizer state
    side by side in the proportions 2 : 2 : 12 bytes a parameter (ZeRO Sec. 3.1)."""
    parts, offset = [], 0.0
    for part, share in LEDGER:
        parts.append(svg.boxes([(x + w * offset, y, w * share, h) for x, y, w, h in boxes], class_=f"fill-{part}{dim}"))
        offset += share
    return parts


def _op_name(transfer):
    return "Ring Send/Recv" if transfer.op == "sendrecv" and len(transfer.groups[0]) > 2 else OP_NAME[transfer.op]


def _wrap(text, limit=54):
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > limit:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return lines + [line] if line else lines


LEGEND = (("ledger", "state held: weights,"), ("", "gradients, optimizer"),
          ("svg-active stroke-forward", "computing, forward"), ("svg-active stroke-backward", "computing, backward"),
          ("svg-active stroke-optimizer_step", "optimizer step"), ("svg-wire stroke-comm", "collective on the wire"),
          ("svg-lane svg-dim", "idle device"))


def _legend(x, y, items=LEGEND, row=20, swatch=32):
    """The swatches (``swatch`` wide) and what they mean, one a row from ``y``."""
    parts = []
    text_x = x + 8 + swatch + 6
    for i, (css, text) in enumerate(items):
        ry = y + i * row
        if css == "ledger":
            parts += _ledger_bars(((x + 8, ry, swatch, 12),))
        elif css == "share":
            parts.append(svg.text(x + 8 + swatch, ry + 10, "%", class_="svg-label-soft", text_anchor="end"))
        elif "wire" in css:
            parts.append(svg.segments(((x + 8, ry + 6, x + 8 + swatch, ry + 6),), class_=css))
        elif css:
            parts.append(svg.boxes(((x + 8, ry, swatch, 12),), class_=css))
        parts.append(svg.text(text_x, ry + 10, text, class_="svg-label-soft"))
    return parts


def _detail(pf):
    """Sentences about the focused panel, for its side column and the alt text."""
    split, moves = CARD_WORDS[pf.strategy]
    lines = [f"Each device holds {fmt.percent(pf.held_fraction, 1)} of the model state. {split}"]
    for t in pf.transfers:
        lines.append(f"{_op_name(t)} of {t.what}: {fmt.data_size(t.wire_bytes)} on the wire.")
    if not pf.transfers:
        lines.append("Nothing on the wire in this frame.")
    waiting = [d for d in range(pf.devices) if not pf.computing[d]]
    if waiting:
        lines.append(f"Devices {', '.join(str(d) for d in waiting)} wait: the bubble of a one-microbatch pipeline.")
    lines.append(f"Per step: {moves.rstrip('.')}.")
    return lines


class _Layout:
    """How the panels are set out: ``columns`` of panels laid out ``at`` (``_Metrics``),
    ``gap`` apart from a ``margin``, in a drawing ``width`` wide; the focused panel drawn at
    ``zoom``."""

    def __init__(self, width, columns, at, gap, margin, zoom, narrow, legend_in_place=None):
        self.width, self.columns, self.at, self.gap, self.margin = width, columns, at, gap, margin
        self.zoom, self.narrow = zoom, narrow
        self.legend_in_place = narrow if legend_in_place is None else legend_in_place  # the short legend, eighth

    def origin(self, i):
        return self.margin + (i % self.columns) * (self.at.pw + self.gap), (i // self.columns) * (self.at.ph + self.gap)


WIDE = _Layout(WIDTH, 4, FULL, GAP, 8, 2, narrow=False)  # four panels a row, the legend in the eighth place
# a phone: two compact panels a row in 320 units, the legend in the eighth place (the frame is
# the bar's, over the drawing); the focused panel as wide as the drawing, its sentences under it
NARROW = _Layout(320, 2, COMPACT, 4, 2, (320 - 16) / COMPACT.pw, narrow=True)
# a phone on its side: four panels a row as wide, but as short as a phone's, the short legend
# in the eighth place; the focused one at twice the size with its sentences beside it
SHORT = _Layout(WIDTH, 4, _Metrics(PW, COMPACT.ph, COMPACT.dev_top, COMPACT.row_h, COMPACT.bus_h, compact=True),
                GAP, 8, 2, narrow=False, legend_in_place=True)
# the phone's legend, in a panel's room: the share beside each name, then the swatches
NARROW_LEGEND = (("share", "each device's share"), ("ledger", "state held: weights,"), ("", "gradients, optimizer"),
                 ("svg-active stroke-forward", "forward pass"), ("svg-active stroke-backward", "backward pass"),
                 ("svg-active stroke-optimizer_step", "optimizer step"), ("svg-wire stroke-comm", "on the wire"),
                 ("svg-lane svg-dim", "idle device"))


def _fit(text, css, room):
    """``text`` as the lines it takes ``room`` wide."""
    return svg.wrap(" ".join(text.split()), room, *svg.label_size(css))


def _all_panels(frames, frame_text, geo):
    """Every strategy's panel, each a button that enlarges it; the first marked as the
    drawing's point (where the comparison starts). Returns the parts and the height."""
    parts = []
    at = geo.at
    for i, key in enumerate(tour.STRATEGIES):
        x, y = geo.origin(i)
        parts.append(svg.group(_panel(frames[key], at), transform=f"translate({x} {y})",
                               class_="panel-button" + (f" {svg.KEY}" if i == 0 else "")))
        parts.append(svg.hit_areas([(x, y, at.pw, at.ph, f"focus={key}", f"Enlarge the {NAMES[key]} panel")],
                                   class_="svg-hit"))
    x, y = geo.origin(len(tour.STRATEGIES))
    if not geo.legend_in_place:
        parts.append(svg.text(x + 8, y + 18, frame_text, class_="svg-label"))
        return parts + _legend(x, y + 34), 2 * PH + GAP
    return parts + _legend(x, y + 4, NARROW_LEGEND, row=17, swatch=16), y + at.ph


def _one_panel(pf, focus, frame_text, geo):
    """The focused panel enlarged (a button back to all seven), its sentences beside it
    (wide) or under it (a phone). Returns the parts and the height."""
    zoom = f"{geo.zoom:.4g}"
    at = geo.at
    parts = [svg.group(_panel(pf, at), transform=f"translate(8 0) scale({zoom})", class_=f"panel-button {svg.KEY}"),
             svg.hit_areas([(8, 0, geo.zoom * at.pw, geo.zoom * at.ph, "focus=all", "Show all seven panels")], class_="svg-hit")]
    if geo.narrow:
        x, y, room = 8, geo.zoom * at.ph + 22, geo.width - 16
        wrap = lambda sentence: _fit(sentence, "svg-label-soft", room)
    else:
        x, y, wrap = 8 + 2 * PW + 20, 18, _wrap
    title = f"{NAMES[focus]}: {frame_text.lower()}"
    lines = [(x, y, title, "svg-label")]
    y += 26
    for sentence in _detail(pf):
        for line in wrap(sentence):
            lines.append((x, y, line, "svg-label-soft"))
            y += 16
        y += 8
    for css in ("svg-label", "svg-label-soft"):
        parts.append(svg.texts([(lx, ly, t) for lx, ly, t, c in lines if c == css], class_=css))
    return parts, (y if geo.narrow else max(geo.zoom * at.ph, y))


def render(state, narrow=False, short=False):
    geo = NARROW if narrow else SHORT if short else WIDE
    frames = {key: tour.panel(key, state["devices"], state["phase"]) for key in tour.STRATEGIES}
    frame = tour.FRAMES[state["phase"]]
    frame_text = FRAME_LABEL[frame.index].capitalize() + (" (playing)" if state["playing"] else "")
    focus = state["focus"]
    if focus == "all":
        parts, height = _all_panels(frames, frame_text, geo)
        moving = sum(pf.moving_bytes for pf in frames.values())
        held = min(pf.held_fraction for pf in frames.values())
        moving_label, held_label = "on the wire now, all seven", "smallest share one device holds"
        alt_panels = "; ".join(f"{NAMES[k]}: holds {fmt.percent(pf.held_fraction, 0)}, "
                               + (", ".join(f"{_op_name(t)} {fmt.data_size(t.wire_bytes)}" for t in pf.transfers)
                                  or "nothing on the wire") for k, pf in frames.items())
    else:
        pf = frames[focus]
        parts, height = _one_panel(pf, focus, frame_text, geo)
        moving, held = pf.moving_bytes, pf.held_fraction
        moving_label, held_label = f"on the wire now, {NAMES[focus]}", f"share one device holds, {NAMES[focus]}"
        alt_panels = " ".join(_detail(pf)).rstrip(".")
    drawing = svg.document(geo.width, height, parts, label=f"Seven strategies on {state['devices']} devices: {frame_text}")
    readouts = (
        Readout("phase_name", "frame", FRAME_LABEL[frame.index], frame.phase),
        Readout("moving_bytes", moving_label, fmt.data_size(moving), moving, "comm" if moving else None),
        Readout("held_fraction", held_label, fmt.percent(held, 1), held),
    )
    alt = (f"{'Seven panels' if focus == 'all' else NAMES[focus] + ' enlarged'}, one toy model on "
           f"{state['devices']} devices, frame {frame.index + 1} of {len(tour.FRAMES)}: {FRAME_LABEL[frame.index]}. "
           f"{alt_panels}.")
    return View(svg=drawing, readouts=readouts, alt=alt)
