"""Figure 19: the decision tree. Describe a model and a GPU budget; the ladder lights the
first question that fails and the least communication-heavy axis that fixes it."""
from figures import svg
from figures.contract import Readout, Select, Slider, View
from models import fmt, hardware, ladder, memory, shapes, strategies

LEDGER = memory.OPTIMIZERS["adam_mixed"]  # the model state the ladder counts (ZeRO Sec. 3.1: 2 + 2 + 12 bytes)

NUMBER = 19
TITLE = "The decision tree"
CAPTION = (
    "Each question is asked of one GPU, in order, and the first that fails lights its branch, the fix that costs the "
    "least communication, and what to check after it. The default, a 7.5B model on 64 A100s, cannot hold its 120 GB "
    "of model state on one GPU."
)
NOTE = (
    "The number that decides each branch is printed on it, so you can see how far a setting is from flipping it. "
    f"Model state counts {LEDGER.bytes_per_param:g} bytes per parameter: bf16 weights and gradients, fp32 master "
    "weights and Adam's two moments (no fp32 gradient copy). Where several sizes of a fix pass, each is priced as "
    "Figure 10 prices shard groups and Figure 12 tensor-parallel groups (the GPU's NVLink in a node of 8, its usual "
    "network card between nodes) and the one that spends least time communicating is lit."
)
TRIES = (
    ("A 1.7B model", {"params": 1_700_000_000}),
    ("1.7B at 128k tokens", {"params": 1_700_000_000, "seq": 131072}),
    ("1.7B on 4,096 GPUs", {"params": 1_700_000_000, "gpus": 4096}),
)

CONTROLS = (
    Slider("params", "Parameters", stops=shapes.PARAMS, default=7_500_000_000, format=fmt.si_count),
    Slider("seq", "Sequence length", stops=tuple(2**k for k in range(9, 18)), default=2048, unit="tokens"),
    Select("gpu", "GPU", options=tuple((key, spec.name) for key, spec in hardware.GPUS.items()), default="a100_80gb"),
    Slider("gpus", "GPUs", stops=tuple(2**k for k in range(15)), default=64, format=fmt.gpus),
    Slider("experts", "Experts (1 = dense)", stops=(1, 8, 16, 32, 64, 128, 256), default=1),
    Slider("micro", "Microbatch", stops=(1, 2, 4, 8, 16, 32), default=1, unit="sequences"),
)
PRIMARY = ("params", "gpus")  # on a phone: the model and the budget, the two that move the path most

QUESTION = {
    "model_state": f"Does the model state, {LEDGER.bytes_per_param:g} bytes a parameter, fit one GPU?",
    "activations": "Do one microbatch's activations fit beside it?",
    "step_time": "Can data parallelism alone keep every GPU busy?",
    "context": "Is attention a small part of each layer?",
    "experts": "Is the model dense (one expert)?",
}
LEAF = {  # the generic fix on each "no" branch
    "model_state": "Shard it: ZeRO-3 (FSDP, HSDP)",
    "activations": "Free ZeRO stages, then ZeRO-3, then TP",
    "step_time": "Tensor parallel in a node, then pipeline",
    "context": "Context parallel: split the sequence",
    "experts": "Expert parallel: spread the experts",
}
BOTTLENECK = {
    "none": "nothing fails", "model_state": "model-state memory", "activations": "activation memory",
    "layer": "one oversized layer", "step_time": "step time (the batch limit)", "context": "long-context attention",
    "experts": "many experts",
}
AXIS_NAME = {  # as a readout names the fix, mid-sentence
    "ddp": "data parallel + ZeRO-1", "zero": "ZeRO-1/2", "fsdp": "FSDP (ZeRO-3)", "hsdp": strategies.SHORT_NAMES["hsdp"],
    **{axis: strategies.SHORT_NAMES[axis].lower() + " parallel" for axis in ("tp", "pp", "cp", "ep")},
}
# palette keys; HSDP is both: shard groups in the ZeRO hue, replica groups in the DP hue (its chip is half each)
COLOUR = {"ddp": "dp", "zero": "zero", "fsdp": "zero", "hsdp": "zero", "tp": "tp", "pp": "pp", "cp": "cp", "ep": "ep"}

WIDTH, SPINE_X, SPINE_W, LEAF_X, LEAF_W = 720, 6, 384, 414, 300
TOP, ROW, BOX_H, LEAF_H = 50, 84, 44, 72


def _number(check, r, state):
    gb = fmt.gigabytes
    if check.key == "model_state":
        return f"{gb(check.value)} against {gb(check.limit)} on one {hardware.gpu(state['gpu']).name}"
    if check.key == "activations":
        return f"{gb(r.model_state_bytes)} + {gb(r.activation_bytes)} = {gb(check.value)} against {gb(check.limit)}"
    if check.key == "step_time":
        return (f"{state['micro']} x {state['seq']} tokens x {fmt.gpus(state['gpus'])} = {_tokens(check.value)}"
                f" against {_tokens(check.limit)}")
    if check.key == "context":
        return f"attention / dense FLOPs = seq / 6h = {fmt.decimal(check.value)} against 1"
    return f"{int(check.value)} expert{'s' if check.value > 1 else ''}"


def _title(text):
    return text[:1].upper() + text[1:]


def _tokens(count):
    return f"{fmt.si_count(float(f'{count:.3g}'))} tokens"


def _fix_text(r):
    fix, gb = r.fix, fmt.gigabytes
    per = f"{gb(fix.per_device_bytes)} a GPU"
    if r.first_bottleneck == "none":
        return _title(AXIS_NAME["ddp"]), f"{fix.replicas} replicas, {per}"
    if fix.axis in ("fsdp", "hsdp") and not fix.fits:
        if fix.min_gpus:
            return "Shard it: FSDP over every GPU", f"still {per}: needs {fix.min_gpus} GPUs or more"
        return "Shard it: FSDP over every GPU", f"still {per}: activations too"
    detail = {
        "zero": f"ZeRO-2 over {fix.group}: {per}",
        "fsdp": f"ZeRO-3 over all {fix.group}: {per}",
        "hsdp": f"groups of {fix.group}, {fix.replicas} replicas: {per}",
        "tp": f"TP {fix.group} with sequence parallel: {per}",
        "cp": f"CP {fix.group}: {per}",
        "ep": f"experts over {fix.group} ranks: {per}",
    }[fix.axis]
    title = {"layer": "One layer too big: tensor parallel", "experts": "Expert parallel: spread the experts",
             "context": "Long context: context parallel"}.get(r.first_bottleneck, _title(AXIS_NAME[fix.axis]))
    return title, detail if fix.fits else detail + ", still too much"


def _price_text(r, short=False):
    """Why this size of the fix: the communication it was chosen by, against the others that
    pass (``short``: as the lit leaf has room for)."""
    fix = r.fix
    if fix.comm_s is None or not fix.fits or not r.options:
        return ""
    passing = [o for o in r.options if o.passes]
    verb = "pass" if r.first_bottleneck == "step_time" else "fit"
    took = fmt.duration(fix.comm_s)
    if not passing:
        return f"widest in a node: {took} a step" if short else f"{took} of communication a step, the widest in a node"
    if short:
        return f"least communication: {took} a step ({len(passing)} {verb})"
    if len(passing) == 1:
        return f"{took} of communication a step, the only size that {verb}s"
    return f"{took} of communication a step, least of {len(passing)} that {verb}"


def _compared(r):
    """Every size the fix was chosen among, with its price: "groups of 2: 665 ms, ..."."""
    if not r.options:
        return "none: this fix has one size"
    if not any(o.passes for o in r.options):
        return f"none of the {len(r.options)} sizes {'brings the batch within its limit' if r.first_bottleneck == 'step_time' else 'fits'}"
    name = "TP {}" if r.fix.axis == "tp" else "groups of {}"
    fails = " (batch too large)" if r.first_bottleneck == "step_time" else " (does not fit)"
    return ", ".join(f"{name.format(o.group)}: {fmt.duration(o.comm_s)}" + ("" if o.passes else fails)
                     for o in r.options)


def _fit_leaf(text):
    """A leaf's detail as drawn: shortened (" a GPU" dropped, then "still" too) where the full
    sentence, which the readout keeps, would run out of the leaf's box."""
    for short in (text, text.replace(" a GPU", ""), text.replace(" a GPU", "").replace(", still too much", ", too much")):
        if svg.text_width(short, svg.LABEL_SIZES["svg-label-soft"]) <= LEAF_W - 18:
            return short
    return short


def _then_text(r):
    if r.fix.min_gpus:
        return "then: a bigger GPU budget"
    if r.then is None and not r.fix.fits:
        return "then: more GPUs, or fewer tokens a microbatch"
    if r.then is None:
        return "then: nothing else fails"
    return f"then: {AXIS_NAME[r.then_axis]}, for {BOTTLENECK[r.then]}"


START = "Start: make one GPU efficient first (bf16, fused Adam, FlashAttention, selective recomputation)"
DRAWING_LABEL = "Decision tree: five questions asked in order on one GPU, each with a fix on its no branch"


def _chip(x, y, height, axis):
    """The lit fix's colour bar, in its axis's hue (HSDP's: half shard groups, half replicas)."""
    parts = [svg.boxes(((x, y, 6, height),), class_=f"fill-{COLOUR[axis]}")]
    if axis == "hsdp":
        parts.append(svg.boxes(((x, y + height / 2, 6, height / 2),), class_="fill-dp"))
    return parts


OFF_PATH = "svg-off-path"  # marks (no style of its own) the text of branches the inputs did not take


def _write(texts, soft):
    """``(x, y, text, lit)`` rows as labels. The unlit ones are in the soft ink, not faded:
    they still say what each other branch would do, so they keep the soft ink's contrast
    (their boxes and links are what is dimmed)."""
    off = [(x, ty, t) for x, ty, t, on in texts + soft if not on]
    return [svg.texts([(x, ty, t) for x, ty, t, on in texts if on], class_="svg-label"),
            svg.texts([(x, ty, t) for x, ty, t, on in soft if on], class_="svg-label-soft"),
            svg.texts(off, class_=f"svg-label-soft {OFF_PATH}")]


def _tree(r, state, failed):
    """The wide drawing: the questions down a spine on the left, each no branch's fix on the right."""
    parts = [
        svg.boxes(((SPINE_X, 4, WIDTH - 2 * SPINE_X, 34),), class_="svg-lane svg-lit"),
        svg.text(SPINE_X + 8, 25, START, class_="svg-label"),
    ]
    lit_links, dim_links, texts, soft = [], [], [], []
    mid = SPINE_X + SPINE_W / 2
    for i, check in enumerate(r.checks):
        y = TOP + i * ROW
        lit = i <= failed
        (lit_links if lit else dim_links).append((mid, y - (ROW - BOX_H if i else TOP - 38), mid, y))
        parts.append(svg.boxes(((SPINE_X, y, SPINE_W, BOX_H),), class_="svg-lane " + ("svg-lit" if lit else "svg-dim")))
        texts.append((SPINE_X + 8, y + 18, QUESTION[check.key], lit))
        soft.append((SPINE_X + 8, y + 36, _number(check, r, state), lit))
        if check.passed:
            soft.append((mid + 6, y + BOX_H + 12, "yes", lit))
        branch = i == failed
        (lit_links if branch else dim_links).append((SPINE_X + SPINE_W, y + BOX_H / 2, LEAF_X, y + BOX_H / 2))
        soft.append((SPINE_X + SPINE_W + 8, y + BOX_H / 2 - 5, "no", branch))
        leaf = _fix_text(r) if branch else (LEAF[check.key], "")
        parts.append(svg.boxes(((LEAF_X, y - 6, LEAF_W, LEAF_H),),
                               class_="svg-lane " + (f"svg-lit {svg.KEY}" if branch else "svg-dim")))
        if branch:
            parts += _chip(LEAF_X, y - 6, LEAF_H, r.recommended_axis)
            soft.append((LEAF_X + 12, y + 27, _fit_leaf(leaf[1]), True))
            soft.append((LEAF_X + 12, y + 43, _price_text(r, short=True), True))
            soft.append((LEAF_X + 12, y + 59, _then_text(r), True))
        texts.append((LEAF_X + 12, y + 10, leaf[0], branch))
    y = TOP + len(r.checks) * ROW
    done = failed == len(r.checks)
    (lit_links if done else dim_links).append((mid, y - (ROW - BOX_H), mid, y))
    parts.append(svg.boxes(((SPINE_X, y, SPINE_W, BOX_H),), class_="svg-lane " + (f"svg-lit {svg.KEY}" if done else "svg-dim")))
    if done:
        parts += _chip(SPINE_X, y, BOX_H, "ddp")
        title, detail = _fix_text(r)
        texts.append((SPINE_X + 12, y + 18, f"Nothing fails: {title}", True))
        soft.append((SPINE_X + 12, y + 36, detail, True))
    else:
        texts.append((SPINE_X + 12, y + 18, "Nothing fails: " + AXIS_NAME["ddp"], False))
    parts.append(svg.segments(dim_links, class_="svg-link"))
    parts.append(svg.segments(lit_links, class_="svg-link svg-link-lit"))
    parts += _write(texts, soft)
    return svg.document(WIDTH, y + BOX_H + 6, parts, label=DRAWING_LABEL)


# On a phone: the path the inputs take, as a list down the column. Each question asked is a
# box (its other branch's fix named in it, dimmed); the first no leads to the lit fix; the
# questions not asked, and the end no question reaches, are listed dimmed in one box.
NARROW_W, NARROW_X, LINE, STEP = 320, 6, 16, 22


def _wrap(text, css, room, even=False):
    return svg.wrap(" ".join(text.split()), room, *svg.label_size(css), even=even)


def _path(r, state, failed):
    """The narrow drawing: the questions along the chosen path, one under the other."""
    x, w = NARROW_X, NARROW_W - 2 * NARROW_X
    spine = x + 20  # the links down the list
    parts, texts, soft, links = [], [], [], []

    def box(y, rows, lit=True, chip=None, key=False):
        """A box from ``y`` holding ``rows`` of ``(text, css, lit)``, each wrapped; returns its bottom."""
        indent = 12 if chip else 8
        lines = [(line, css, on) for text, css, on in rows for line in _wrap(text, css, w - indent - 8)]
        height = LINE * len(lines) + 10
        parts.append(svg.boxes(((x, y, w, height),), class_="svg-lane " + ("svg-lit" if lit else "svg-dim")
                               + (f" {svg.KEY}" if key else "")))
        if chip:
            parts.extend(_chip(x, y, height, chip))
        for i, (line, css, on) in enumerate(lines):
            (texts if css == "svg-label" else soft).append((x + indent, y + 17 + LINE * i, line, on))
        return y + height

    def link(y, answer=None):
        links.append((spine, y, spine, y + STEP))
        if answer:
            soft.append((spine + 6, y + 15, answer, True))
        return y + STEP

    y = box(4, [(START, "svg-label", True)])
    for i, check in enumerate(r.checks[:failed + 1]):
        y = link(y, "yes" if i else None)
        rows = [(QUESTION[check.key], "svg-label", True), (_number(check, r, state), "svg-label-soft", True)]
        if check.passed:  # the branch not taken, summarised
            rows.append((f"if no: {LEAF[check.key]}", "svg-label-soft", False))
        y = box(y, rows)
    title, detail = _fix_text(r)
    if failed < len(r.checks):
        y = box(link(y, "no"), [(title, "svg-label", True), (detail, "svg-label-soft", True)]
                + ([(_price_text(r, short=True), "svg-label-soft", True)] if _price_text(r) else [])
                + [(_then_text(r), "svg-label-soft", True)], chip=r.recommended_axis, key=True)
        rest = [(f"- {QUESTION[check.key]}", "svg-label-soft", False) for check in r.checks[failed + 1:]]
        y = box(y + 10, [("Not asked after a no:", "svg-label-soft", False)] + rest
                + [("Nothing fails: " + AXIS_NAME["ddp"], "svg-label", False)], lit=False)
    else:
        y = box(link(y, "yes"), [(f"Nothing fails: {title}", "svg-label", True), (detail, "svg-label-soft", True)],
                chip="ddp", key=True)
    parts.append(svg.segments(links, class_="svg-link svg-link-lit"))
    parts += _write(texts, soft)
    return svg.document(NARROW_W, y + 6, parts, label=DRAWING_LABEL)


# On a phone on its side: the questions as rows of one table, each answered at its end, with
# the fix its no would call for beside it; the lit fix sits under the question that failed.
SHORT_W, SHORT_X, SPLIT_X, SHORT_LINE = 720, 4, 444, 14


def _table(r, state, failed):
    """The short drawing: the ladder as a table read down, the path's answers written in."""
    right = SHORT_W - SHORT_X
    parts, texts, soft = [], [], []

    def row(y, cells, css, chip=None):
        """A row from ``y`` of ``(x, room, [(text, css, lit)])`` cells, each text wrapped to its cell's
        room less what it keeps clear at its right (a fourth item); returns its bottom."""
        wrapped = [(x, [(line, c, on) for text, c, on, *clear in rows  # (evened only in a narrow cell: the search costs)
                        for line in _wrap(text, c, room - sum(clear), even=room < 300)]) for x, room, rows in cells]
        height = SHORT_LINE * max(len(lines) for _, lines in wrapped) + 5
        parts.append(svg.boxes(((SHORT_X, y, right - SHORT_X, height),), class_="svg-lane " + css))
        if chip:
            parts.extend(_chip(SHORT_X, y, height, chip))
        for x, lines in wrapped:
            for i, (line, c, on) in enumerate(lines):
                (texts if c == "svg-label" else soft).append((x, y + 13 + SHORT_LINE * i, line, on))
        return y + height

    whole = right - SHORT_X - 24
    y = row(2, [(SHORT_X + 8, whole, [(START, "svg-label", True)])], "svg-lit") + 5
    title, detail = _fix_text(r)
    for i, check in enumerate(r.checks):
        lit, branch = i <= failed, i == failed
        leaf = (f"no: {LEAF[check.key]}" if branch else f"if no: {LEAF[check.key]}", "svg-label-soft" if not branch else "svg-label", branch)
        top = y
        y = row(y, [(SHORT_X + 8, SPLIT_X - SHORT_X - 16, [(QUESTION[check.key], "svg-label", lit, 28),
                                                           (_number(check, r, state), "svg-label-soft", lit)]),
                    (SPLIT_X + 8, right - SPLIT_X - 14, [leaf])], "svg-lit" if lit else "svg-dim")
        parts.append(svg.segments(((SPLIT_X, top, SPLIT_X, y),), class_="svg-link" + (" svg-link-lit" if lit else "")))
        if lit:  # the answer the inputs gave, where the question ends
            parts.append(svg.text(SPLIT_X - 8, top + 13, "no" if branch else "yes", class_="svg-label", text_anchor="end"))
        if branch:
            said = "; ".join([detail] + ([_price_text(r)] if _price_text(r) else []))
            y = row(y + 5, [(SHORT_X + 14, whole - 6, [(title, "svg-label", True), (said, "svg-label-soft", True),
                                                       (_then_text(r), "svg-label-soft", True)])],
                    f"svg-lit {svg.KEY}", chip=r.recommended_axis) + 5
    if failed == len(r.checks):
        y = row(y + 5, [(SHORT_X + 14, whole - 6, [(f"Nothing fails: {title}", "svg-label", True), (detail, "svg-label-soft", True)])],
                f"svg-lit {svg.KEY}", chip="ddp")
    else:
        y = row(y + 5, [(SHORT_X + 8, whole, [("If every answer is yes: " + AXIS_NAME["ddp"], "svg-label-soft", False)])], "svg-dim")
    parts += _write(texts, soft)
    return svg.document(SHORT_W, y + 3, parts, label=DRAWING_LABEL)


def render(state, narrow=False, short=False):
    r = ladder.climb(state["params"], state["seq"], state["gpu"], state["gpus"], state["experts"], state["micro"])
    failed = next((i for i, check in enumerate(r.checks) if not check.passed), len(r.checks))
    drawing = (_path if narrow else _table if short else _tree)(r, state, failed)
    title, detail = _fix_text(r)
    readouts = (
        Readout("first_bottleneck", "fails first", BOTTLENECK[r.first_bottleneck], r.first_bottleneck),
        Readout("recommended_axis", "fix", AXIS_NAME[r.recommended_axis], r.recommended_axis, COLOUR[r.recommended_axis]),
        Readout("model_state_bytes", f"model state, unsharded ({LEDGER.bytes_per_param:g} B per parameter)",
                fmt.gigabytes(r.model_state_bytes), r.model_state_bytes),
        Readout("activation_bytes", "activations, one microbatch", fmt.gigabytes(r.activation_bytes), r.activation_bytes),
        Readout("hbm_bytes", "HBM per GPU", fmt.gigabytes(r.hbm_bytes), r.hbm_bytes),
        Readout("per_device_bytes", "per GPU after the fix", fmt.gigabytes(r.fix.per_device_bytes), r.fix.per_device_bytes),
        Readout("fix", "how", detail),
        Readout("fix_comm_s", "communication per step of the fix, before overlap",
                _price_text(r) or "not priced here", r.fix.comm_s if _price_text(r) else 0.0),
        Readout("compared", "sizes compared (communication per step)", _compared(r)),
        Readout("batch_tokens", "global batch, data parallel alone", _tokens(r.check("step_time").value),
                r.check("step_time").value),
        Readout("then", "then", _then_text(r)[len("then: "):], r.then_axis or "none"),
    )
    asked = "; ".join(f"{QUESTION[c.key]} {'yes' if c.passed else 'no'} ({_number(c, r, state)})"
                      for c in r.checks[:failed + 1])
    shape = shapes.shape_for(state["params"])
    alt = (f"Decision tree for {shape.name} ({fmt.si_count(state['params'])} parameters), {state['seq']} tokens, "
           f"microbatch {state['micro']}, {state['experts']} expert(s), on {fmt.gpus(state['gpus'])} "
           f"{hardware.gpu(state['gpu']).name}. {asked}. Lit fix: {title}, {detail}. {_then_text(r).capitalize()}.")
    return View(svg=drawing, readouts=readouts, alt=alt)
