"""Figure 13: a layer as a strip of TP and SP regions, and what each layout keeps in memory."""
from figures import svg
from figures.contract import Readout, Select, Slider, Toggle, View
from models import activations, fmt, tensor

NUMBER = 13
TITLE = "Alternating layouts: TP regions and SP regions"
CAPTION = (
    "One transformer layer's forward pass on rank 0 of a tensor-parallel group of t, each region sketched with the "
    "part of its s × h activation this rank holds. Below, the bytes one layer keeps for the backward pass."
)
NOTE = (
    "With sequence parallelism on, the LayerNorm and dropout regions hold a 1/t slice of the tokens, the AllReduce "
    "at each exit becomes a ReduceScatter and an AllGather appears at each entrance, and the bytes sent stay the "
    "same. The memory accounting is Table 2 of Korthikanti et al. (2022); the defaults are their 22B model."
)
TRIES = (
    ("Sequence parallelism", {"sp": True}),
    ("SP and selective recompute", {"sp": True, "recompute": "selective"}),
    ("One 128k sequence", {"t": 1, "s": 131072, "b": 1, "h": 4096, "a": 32, "recompute": "selective"}),
)
HIDDEN_SIZES = (1024, 2048, 4096, 6144, 8192, 12288, 16384, 20480, 25600)  # with the paper's 22B-1T models
HEADS = (8, 16, 32, 64, 96, 128, 160)
TP_DEGREES = (1, 2, 4, 8, 16, 32)

CONTROLS = (
    Slider("t", "Tensor-parallel degree t", stops=TP_DEGREES, default=8),
    Slider("s", "Sequence length s", stops=tuple(2 ** k for k in range(9, 18)), default=2048, format=fmt.count),
    Slider("b", "Microbatch b", stops=(1, 2, 4, 8, 16), default=4),
    Slider("h", "Hidden size h", stops=HIDDEN_SIZES, default=6144, format=fmt.count),
    Slider("a", "Attention heads a", stops=HEADS, default=64),
    Toggle("sp", "Sequence parallelism", default=False),
    Select("recompute", "Recompute", options=(("none", "none"), ("selective", "selective (attention scores)"),
                                              ("full", "full (keep the layer input)")), default="none"),
)
PRIMARY = ("sp", "t")  # the layout, and how many ways it splits


def constrain(state):
    """Heads must divide h, and t the heads: snap a to the nearest head count that divides h,
    then t down to the largest degree that divides a."""
    if state["h"] % state["a"]:
        state["a"] = min((a for a in HEADS if state["h"] % a == 0), key=lambda a: abs(a - state["a"]))
    if state["a"] % state["t"]:
        state["t"] = max(t for t in TP_DEGREES if t <= state["t"] and state["a"] % t == 0)
    return state


def limits(state):
    """The heads slider's range: the most heads that divide h; t's: the largest degree dividing a."""
    return {"a": max(a for a in HEADS if state["h"] % a == 0), "t": max(t for t in TP_DEGREES if state["a"] % t == 0)}


def _heads_note(state):
    """What the heads and t sliders cannot reach in this state, and why (no silent snap: issue 43)."""
    h, a = state["h"], state["a"]
    skipped = [n for n in HEADS if h % n]
    top = max(n for n in HEADS if h % n == 0)
    sentences = []
    if skipped:
        names = " and ".join(", ".join(map(str, skipped)).rsplit(", ", 1))
        what = []
        if any(n > top for n in skipped):
            what.append(f"the heads slider stops at {top}")
        for n in (n for n in skipped if n < top):
            nearest = min((m for m in HEADS if h % m == 0), key=lambda m: abs(m - n))
            what.append(f"{'its' if what else 'the heads slider’s'} {n} stop gives {nearest}, the nearest that divides")
        sentences.append(f"Heads must divide h = {fmt.count(h)}, and {names} do{'es' if len(skipped) == 1 else ''} "
                         f"not: {' and '.join(what)}.")
    t_top = max(t for t in TP_DEGREES if a % t == 0)
    if t_top < TP_DEGREES[-1]:
        sentences.append(f"t must divide the {a} heads: its slider stops at {t_top}.")
    return " ".join(sentences)


def _heads_allowed(state):
    return ", ".join(str(a) for a in HEADS if state["h"] % a == 0)


WIDTH, LEFT = 480, 6
BOXES = (("LayerNorm", "sp", 78), ("entry", "pill", 96), ("{block}", "tp", 86), ("exit", "pill", 96),
         ("dropout + add", "sp", 96))  # a pill holds "ReduceScatter" (91 units at 12 px)
PARTS = (("outside_tp_bytes", "LayerNorm, dropout, residual"), ("inside_tp_bytes", "inside attention and MLP"),
         ("attention_scores_bytes", "attention scores"))
# On a phone (render(narrow=True)) each block's strip runs down a column, the two blocks
# side by side, and the byte bars below are drawn 320 units wide.
NARROW_WIDTH, COLUMN, REGION, PILL, GAP = 320, 150, 64, 28, 4


class _Ink:
    """What a part of the drawing puts on the page, by kind: filled boxes by colour key,
    collective pills by class, outlines, and texts (labels, headings, soft notes)."""

    def __init__(self):
        self.fills, self.pills, self.outlines, self.heads, self.labels, self.soft = {}, {}, [], [], [], []

    def parts(self, key_labels=False):
        parts = [svg.boxes(boxes, class_=css, fill_opacity=0.4) for css, boxes in sorted(self.pills.items())]
        parts += [svg.boxes(boxes, class_=f"fill-{key}") for key, boxes in sorted(self.fills.items())]
        return parts + [svg.boxes(self.outlines, fill="none", class_="svg-ink-stroke"),
                        svg.texts(self.labels, class_=f"svg-label {svg.KEY}" if key_labels else "svg-label",
                                  text_anchor="middle"),
                        svg.texts(self.heads, class_="svg-label"),
                        svg.texts(self.soft, class_="svg-label-soft", text_anchor="middle")]


def _glyph(x, y, region, sp, t, fills, outlines):
    """A 40 x 22 sketch of the s x h tensor with rank 0's part filled."""
    outlines.append((x, y, 40, 22))
    if region == "tp":
        fills.setdefault("tp", []).append((x, y, 40 / t, 22))
    elif sp:
        fills.setdefault("sp", []).append((x, y, 40, 22 / t))
    else:
        fills.setdefault("replicated", []).append((x, y, 40, 22))


def _strip(ink, t, sp, kept, narrow):
    """The attention and MLP blocks as strips of regions: wide, one row each; narrow, one
    column each, side by side. Returns the y below them."""
    for row, block in enumerate(("attention", "MLP")):
        x, y = (LEFT + row * (COLUMN + 8), 26) if narrow else (LEFT, 26 + row * 92)
        ink.heads.append((x, y - 8, f"{block} block"))
        for name, region, width in BOXES:
            width, height = (COLUMN, PILL if region == "pill" else REGION) if narrow else (width, 64)
            if region == "pill":
                kind = ("AllGather" if name == "entry" else "ReduceScatter") if sp else (
                    "identity" if name == "entry" else "AllReduce")
                if t == 1:
                    kind = "identity"
                operator = ("g" if sp else "f") if name == "entry" else ("g\u0304" if sp else "f\u0304")
                pill = 2 if narrow else 20  # the pill's top in its cell; narrow, its operator sits inside it
                ink.pills.setdefault("fill-comm" if kind != "identity" else "svg-neutral-fill", []).append(
                    (x + 2, y + pill, width - 4, 24))
                ink.labels.append((x + width / 2, y + pill + 16, kind))
                ink.soft.append((x + width - 14, y + pill + 16, operator) if narrow
                                else (x + width / 2, y + 60, operator))
            else:
                ink.outlines.append((x, y, width, 64))
                ink.labels.append((x + width / 2, y + 15, name.format(block=block)))
                _glyph(x + width / 2 - 20, y + 22, region, sp, t, ink.fills, ink.outlines)
                ink.soft.append((x + width / 2, y + 58, kept[region]))
            if narrow:
                y += height + GAP
            else:
                x += width + 5
    return y + 16 if narrow else 26 + 2 * 92  # where a third row of boxes would start


def _bytes(ink, layer, comm, sp, recompute, below, width, beside=False):
    """The bytes kept for the backward pass and sent in the forward pass, with SP and
    without (the chosen layout's outlined), under ``below``, in ``width`` (``beside``: the two
    side by side, each in half of it). Returns the drawing's height."""
    kept_width = (width - 12) / 2 if beside else width
    lines = ["kept for backward per layer, per device"]
    if recompute != "none":  # on the heading's line where it fits (wide), else under it
        lines.append(f"({recompute} recompute)")
        if svg.text_width(" ".join(lines), svg.LABEL_SIZES["svg-label"]) <= kept_width - LEFT:
            lines = [" ".join(lines)]
    if beside:  # half the width: the heading wrapped to it
        lines = svg.wrap(" ".join(lines), kept_width - LEFT, svg.LABEL_SIZES["svg-label"], even=True)
    top = below - 8 + 16 * len(lines)  # 218 in the wide drawing: one heading line under the strips
    ink.heads += [(LEFT, top - 10 - 16 * (len(lines) - 1 - n), line) for n, line in enumerate(lines)]
    scale = (kept_width - LEFT - 150) / max(layer[False].total_bytes, 1.0)
    for i, v in enumerate((False, True)):
        y, x = top + i * 30, LEFT + 64
        ink.soft.append((LEFT + 30, y + 15, "with SP" if v else "TP only"))
        for key, _ in PARTS:
            length = getattr(layer[v], key) * scale
            colour = {"outside_tp_bytes": "sp" if v else "replicated", "inside_tp_bytes": "tp",
                      "attention_scores_bytes": "activations"}[key]
            ink.fills.setdefault(colour, []).append((x, y, length, 20))
            x += length
        ink.soft.append((x + 34, y + 15, fmt.data_size(layer[v].total_bytes)))
        if v == sp:
            ink.outlines.append((LEFT + 64, y, x - LEFT - 64, 20))
    x0, y = (kept_width + 12, top - 10 - 16 * (len(lines) - 1)) if beside else (0, top + 70)
    ink.heads.append((x0 + LEFT, y, "sent per device, forward pass" if beside else "sent per device in the forward pass"))
    y = max(y, top - 10) if beside else y  # its bars level with the kept bytes' where the heading wraps
    for i, v in enumerate((False, True)):
        length = comm[v] / max(comm[False], 1.0) * (kept_width - LEFT - 150)
        ink.fills.setdefault("comm", []).append((x0 + LEFT + 64, y + 10 + i * 22, length, 14))
        ink.soft.append((x0 + LEFT + 30, y + 22 + i * 22, "with SP" if v else "TP only"))
        ink.soft.append((x0 + LEFT + 98 + length, y + 22 + i * 22, fmt.data_size(comm[v]) if comm[v] else "none"))
    return top + 58 if beside else top + 128


def render(state, narrow=False, short=False):
    t, s, b, h, a, sp, recompute = (state[k] for k in ("t", "s", "b", "h", "a", "sp", "recompute"))
    kept = {"sp": "s/t \u00d7 h" if sp and t > 1 else "s \u00d7 h, whole", "tp": "s \u00d7 h/t" if t > 1 else "s \u00d7 h"}
    layer = {v: activations.layer_activations(s, b, h, a, tp=t, sequence_parallel=v, recompute=recompute)
             for v in (False, True)}
    chosen = layer[sp]
    comm = {v: tensor.tp_forward_bytes_per_rank(b, s, h, t, sequence_parallel=v) for v in (False, True)}
    strip = _Ink()
    bars = _Ink() if narrow else strip  # wide: one ink, drawn in the order it always was
    below = _strip(strip, t, sp, kept, narrow)
    # a phone on its side (short): the kept and the sent bytes side by side under the strips
    height = _bytes(bars, layer, comm, sp, recompute, below, NARROW_WIDTH if narrow else WIDTH, beside=short and not narrow)
    if narrow:  # the key: both strips, what each region holds and the collectives between them
        parts = [svg.group(strip.parts(), class_=svg.KEY), *bars.parts()]
    else:
        parts = strip.parts(key_labels=True)  # the key: the regions' and collectives' names
    saving = activations.sp_saving_fraction(s, b, h, a, tp=t, recompute=recompute)
    baseline = activations.fraction_of_tp_baseline(s, b, h, a, tp=t, sequence_parallel=sp, recompute=recompute)
    collectives = ("2 ReduceScatter + 2 AllGather" if sp else "2 AllReduce") if t > 1 else "none (t = 1)"
    readouts = (
        Readout("activation_bytes_per_layer", "kept per layer, per device", fmt.data_size(chosen.total_bytes),
                chosen.total_bytes),  # the whole outlined bar: no one colour
        Readout("comm_bytes_per_layer", f"sent per layer, forward ({collectives})", fmt.data_size(comm[sp]),
                comm[sp], "comm"),
        Readout("saving_fraction", "saved by SP at this recompute", fmt.percent(saving), saving),
        Readout("tp_baseline_fraction", "of plain TP without recompute", fmt.percent(baseline), baseline),
        *(Readout(key, name, fmt.data_size(getattr(chosen, key)), getattr(chosen, key),
                  {"outside_tp_bytes": "sp" if sp else "replicated", "inside_tp_bytes": "tp"}.get(key, "activations"))
          for key, name in PARTS),
        Readout("heads_allowed", f"head counts that divide h = {fmt.count(h)}", _heads_allowed(state)),
    )
    alt = (f"A layer as two strips of regions at t = {t}, sequence parallelism {'on' if sp else 'off'}: LayerNorm "
           f"and dropout hold {kept['sp']}, attention and MLP hold {kept['tp']}; {collectives} per forward pass. "
           f"Activation bytes per layer: {fmt.data_size(layer[False].total_bytes)} without SP, "
           f"{fmt.data_size(layer[True].total_bytes)} with it ({recompute} recompute); "
           f"{fmt.data_size(comm[sp])} sent either way.")
    return View(svg=svg.document(NARROW_WIDTH if narrow else WIDTH, height, parts, label=alt, class_="svg-narrow"),
                readouts=readouts, alt=alt, note=_heads_note(state))
