"""Figure 04: where a global batch comes from, and how a distributed sampler breaks it."""
import math
from collections import defaultdict
from functools import lru_cache

from figures import palette, svg
from figures.contract import Readout, Select, Slider, View
from models import fmt, sampler

NUMBER = 4
TITLE = "Where a global batch comes from, and how a sampler breaks it"
CAPTION = (
    "One optimizer step as a grid of microbatches and, below it, the dataset as one strip per epoch, each sample "
    "coloured by the rank that read it. A broken sampler changes the strip and leaves the dashboard as it was."
)
NOTE = (
    "The grid has a column per data-parallel rank and a row per accumulation step. In the strip, a red cell with a "
    "count was read more than once that epoch and an empty one never. At the bottom, what a training dashboard "
    "reports sits beside what an audit of the sample indices finds."
)
TRIES = (
    ("64 ranks", {"dp": 64}),
    ("No rank offset", {"variant": "no_rank_offset"}),
    ("No rank offset, 2 ranks", {"variant": "no_rank_offset", "dp": 2}),
    ("set_epoch never called", {"variant": "epoch_not_set", "epochs": 4}),
)

POWERS = tuple(2**k for k in range(7))  # 1 .. 64
VARIANT_LABELS = {
    "correct": "correct (rank offset, set_epoch)",
    "no_rank_offset": "broken: every rank reads rank 0's shard",
    "epoch_not_set": "broken: set_epoch never called",
}

CONTROLS = (
    Slider("micro", "Microbatch b_micro", stops=POWERS, default=1),
    Slider("accum", "Accumulation steps A", stops=POWERS, default=2),
    Slider("dp", "Data-parallel ranks N", stops=tuple(2**k for k in range(11)), default=8),
    Slider("dataset", "Samples in the dataset", stops=(16, 32, 64, 128, 256, 512), default=128),
    Select("variant", "Sampler", options=tuple(VARIANT_LABELS.items()), default="correct"),
    Slider("epochs", "Epochs shown", min=1, max=4, step=1, default=2),
)
PRIMARY = ("dp", "variant")

WIDTH, X0, X1 = 400, 4, 396
SHORT_GAP, SHORT_GRID_HEIGHT = 24, 48  # a short screen's two columns, and its grid's most height
DRAWN_RANKS = 16  # ranks with a colour of their own (8 hues, the second eight lighter); the rest grey
MAX_ROWS = 16
CHECK, CROSS = "\u2713", "\u2717"
GREY, WARN, EMPTY = DRAWN_RANKS, DRAWN_RANKS + 1, DRAWN_RANKS + 2  # strip cell codes after the drawn ranks


def _rank_colour(rank):
    """(palette key, opacity) of a rank: 8 hues, the second eight lighter; ranks from 16 on
    have no colour of their own (None: the page's neutral grey)."""
    if rank >= DRAWN_RANKS:
        return None, 1.0
    return palette.rank_key(rank), (1.0 if rank < palette.RANK_COLOURS else 0.55)


def _batch_grid(parts, state, batch, steps, grid_height=128.0, gap=30):
    cols, rows = min(state["dp"], DRAWN_RANKS), min(state["accum"], MAX_ROWS)
    cell_w, cell_h = min(24.0, (X1 - X0) / cols), min(14.0, grid_height / rows)
    top = 80
    share = (f"an epoch of {state['dataset']} samples takes {fmt.decimal(steps)} steps" if steps >= 1 else
             f"one step = {fmt.decimal(1 / steps)} epochs of {state['dataset']} samples")
    product = f"{state['micro']} \u00d7 {state['accum']} \u00d7 {state['dp']} = {fmt.count(batch)} samples"
    title = f"One step: {product}"
    if svg.text_width(title, svg.COMPACT_LABEL, bold=True) > X1:  # (64 x 64 x 1,024 ran past the drawing's edge)
        title = product  # the line under it starts "one step = ..." there
    parts += [
        svg.text(0, 14, title, class_="svg-label svg-strong"),
        svg.text(0, 33, share, class_="svg-label" if steps >= 1 else "svg-label svg-strong",
                 style=None if steps >= 1 else "fill:var(--c-warn)"),
        svg.text(0, 51, f"a cell: a microbatch of {state['micro']}; a column: a rank;", class_="svg-label-soft"),
        svg.text(0, 69, "a row: an accumulation step", class_="svg-label-soft"),
    ]
    for c in range(cols):  # a column of microbatches per rank, in the rank's colour; the step's grid carries the point
        colour, opacity = _rank_colour(c)
        parts.append(svg.boxes([(X0 + c * cell_w, top + r * cell_h, cell_w - 1.5, cell_h - 1.5) for r in range(rows)],
                               class_=f"{f'fill-{colour}' if colour else 'svg-neutral-fill'} {svg.KEY}",
                               fill_opacity=opacity if opacity < 1 else None))
    bottom = top + rows * cell_h
    if cell_w >= 14:  # rank numbers under the columns, stroked (one path)
        parts.append(svg.numerals([([X0 + (c + 0.5) * cell_w - 0.75 for c in range(cols)], bottom + 8, range(cols))],
                                  height=8.0, style="stroke:var(--ink-soft)", stroke_width=1.2))
        bottom += 12
    hidden = [f"{state['dp'] - cols} more ranks"] * (state["dp"] > cols)
    hidden += [f"{state['accum'] - rows} more steps"] * (state["accum"] > rows)
    if hidden:  # beside the grid where it fits (it ran past the drawing's edge at 8 ranks), else under it
        words = f"not drawn: {' and '.join(hidden)}"
        beside = X0 + cols * cell_w + 6
        fits = beside + svg.text_width(words, svg.COMPACT_LABEL) <= X1
        parts.append(svg.text(beside if fits else X0, bottom + 20, words, class_="svg-label-soft"))
        bottom += 22
    return bottom + gap


def _strips(parts, state, audit, top, with_legend=True):
    """Each epoch's strip: cells as bars on lanes (svg.lanes, x in cells), one path per colour for
    all epochs; a label's worth of empty lanes above each epoch's block."""
    size = state["dataset"]
    per_row = size if size <= 32 else (32 if size <= 128 else 64)
    cell = (X1 - X0) / per_row
    row_h = min(cell, 14.0)
    lines, label_lanes = -(-size // per_row), math.ceil(22 / row_h)
    block = lines + label_lanes
    y0 = top + 8
    parts.append(svg.text(0, top, "Each epoch: which rank drew each sample", class_="svg-label svg-strong"))
    rows, numbered = defaultdict(list), []  # (colour code, lane) -> cells; codes: ranks, then GREY, WARN, EMPTY
    for e, strip in enumerate(audit.strips):
        repeat = f", same order as epoch {strip.epoch - 1}" if strip.same_order_as_previous_epoch else ""
        parts.append(svg.text(X0, y0 + (e * block + label_lanes) * row_h - 6,
                              f"epoch {strip.epoch}: {strip.unique_samples}/{size} drawn{repeat}",
                              class_="svg-label", style="fill:var(--c-warn)" if repeat or strip.unique_samples < size else None))
        codes = [(rank if rank < GREY else GREY) if drawn == 1 else (WARN if drawn else EMPTY)
                 for rank, drawn in zip(strip.first_rank, strip.times_drawn)]
        for line in range(lines):
            lane = e * block + label_lanes + line
            for column, code in enumerate(codes[line * per_row:(line + 1) * per_row]):
                rows[code, lane].append(column)
        if cell >= 10:  # how often each repeated sample was drawn, on its cell
            numbered += [((X0 + (i % per_row + 0.46) * cell,), y0 + (e * block + label_lanes + i // per_row + 0.5) * row_h,
                          (n,)) for i, n in enumerate(strip.times_drawn) if n > 1]
    by_colour = defaultdict(list)
    for (code, lane), starts in rows.items():
        by_colour[code].append((lane, 0.92, starts))
    for code, lanes in sorted(by_colour.items()):
        colour, opacity = _rank_colour(code) if code <= GREY else ("warn" if code == WARN else "empty", 1.0)
        parts.append(svg.lanes(lanes, x=X0, y=y0, x_scale=cell, lane_height=row_h, fill_ratio=0.88,
                               class_="svg-empty" if colour == "empty" else f"stroke-{colour}" if colour else "svg-neutral-stroke",
                               stroke_opacity=opacity if opacity < 1 else None))
    if numbered:
        parts.append(svg.numerals(numbered, class_="op-label on-warn"))
    y = y0 + len(audit.strips) * block * row_h
    if not with_legend:
        return y + 12
    return _strip_legend(parts, state, audit, y)


def _strip_legend(parts, state, audit, y):
    """What the strips' colours leave unsaid (grey ranks, padding), from ``y``; returns the bottom."""
    legend = [f"ranks {DRAWN_RANKS} to {state['dp'] - 1} in grey"] * (state["dp"] > DRAWN_RANKS)
    if audit.padding_draws and state["variant"] == "correct":
        legend.append(f"{fmt.count(audit.padding_draws)} repeats are padding (ranks > samples)")
    parts.append(svg.texts(((X0, y + 16 + 19 * i, line) for i, line in enumerate(legend)), class_="svg-label-soft"))
    return y + 34 + 19 * len(legend)


def _dashboard(parts, state, audit, batch, top):
    ok, bad = None, "fill:var(--c-warn)"  # what passes stays in ink: only what fails is coloured (red)
    dashboard = (
        f"{fmt.count(batch)} per step",
        f"{fmt.count(audit.draws_per_epoch)} per epoch",
        f"{fmt.count(audit.draws_per_rank_per_epoch)} per rank and epoch",
        "loss curve looks fine",
    )
    checks = (
        (audit.unique_fraction == 1, f"{fmt.percent(audit.unique_fraction)} distinct"),
        (audit.duplicated_samples == 0, f"{fmt.count(audit.duplicated_samples)} repeats"),
        (audit.missing_samples == 0, f"{fmt.count(audit.missing_samples)} never drawn"),
        (audit.repeated_epochs == 0, f"{audit.repeated_epochs} repeated epoch{'s' if audit.repeated_epochs != 1 else ''}"),
    )
    parts += [
        svg.text(X0, top, "The dashboard", class_="svg-label svg-strong"),
        svg.text(206, top, "An index audit", class_="svg-label svg-strong"),
        svg.text(X0, top + 18, "(any sampler)", class_="svg-label-soft"),
        svg.texts(((X0, top + 40 + 19 * i, f"{CHECK} {line}") for i, line in enumerate(dashboard)), class_="svg-label",
                  style=ok),
    ]
    for i, (fine, line) in enumerate(checks):
        parts.append(svg.text(206, top + 40 + 19 * i, f"{CHECK if fine else CROSS} {line}", class_="svg-label",
                              style=ok if fine else bad))
    return top + 40 + 19 * len(checks)


@lru_cache(maxsize=32)  # moving the batch controls leaves the audit as it was
def _audit(dataset, dp, epochs, variant):
    return sampler.sampler_audit(dataset, dp, epochs, variant=variant)


def render(state, short=False):
    batch = sampler.global_batch_samples(state["micro"], state["accum"], state["dp"])
    steps = sampler.steps_per_epoch(state["dataset"], state["micro"], state["accum"], state["dp"])
    audit = _audit(state["dataset"], state["dp"], state["epochs"], state["variant"])
    parts = []
    if short:  # a phone on its side: the step (its grid shorter) and the dashboard beside the strips
        left = _dashboard(parts, state, audit, batch, _batch_grid(parts, state, batch, steps, SHORT_GRID_HEIGHT, gap=24))
        strips = []
        right = _strips(strips, state, audit, 14, with_legend=False)
        if right <= left:  # the strips' words under whichever column ends first
            right = _strip_legend(strips, state, audit, right - 10)
        else:
            left = _strip_legend(parts, state, audit, left - 10)
        height = max(left, right)
        parts.append(svg.group(strips, transform=f"translate({WIDTH + SHORT_GAP} 0)"))
        width = 2 * WIDTH + SHORT_GAP
    else:
        bottom = _batch_grid(parts, state, batch, steps)
        bottom = _strips(parts, state, audit, bottom)
        height, width = _dashboard(parts, state, audit, batch, bottom), WIDTH
    drawing = svg.document(width, height, parts, class_="svg-compact",
                           label="The global batch as a grid of microbatches, and the dataset as strips coloured by rank")
    readouts = (
        Readout("global_batch", "samples per optimizer step", fmt.count(batch), batch),
        Readout("unique_fraction", "distinct / drawn", fmt.percent(audit.unique_fraction),
                audit.unique_fraction),  # the red cells are the repeated draws: that readout's swatch
        Readout("duplicated_samples", "repeated draws within an epoch", fmt.count(audit.duplicated_samples),
                audit.duplicated_samples, "warn" if audit.duplicated_samples else None),
        Readout("repeated_epochs", "epochs repeating an order", fmt.count(audit.repeated_epochs),
                audit.repeated_epochs),
        Readout("draws", "samples drawn", fmt.count(audit.draws), audit.draws),
        Readout("steps_per_epoch", "optimizer steps per epoch", fmt.decimal(steps, 3) if steps >= 1 else
                f"{fmt.decimal(steps, 3)}: one step spans {fmt.decimal(1 / steps)} epochs", steps),
    )
    notes = []
    if steps < 1:
        notes.append(f"One step of {fmt.count(batch)} samples draws more than the {state['dataset']}-sample dataset: "
                     f"it spans {fmt.decimal(1 / steps)} epochs, so every sample is in it more than once. Real datasets "
                     "hold millions of steps' worth.")
    if state["variant"] == "epoch_not_set" and state["epochs"] == 1:
        notes.append("With one epoch shown, an epoch that repeats the one before cannot show: show two or more.")
    note = " ".join(notes)
    alt = (
        f"A grid of {state['dp']} ranks by {state['accum']} accumulation steps of {state['micro']}-sample microbatches: "
        f"{fmt.count(batch)} samples per optimizer step, {fmt.decimal(steps, 3)} steps per epoch. Below, "
        f"{state['epochs']} strip(s) of {state['dataset']} samples "
        f"drawn by the {VARIANT_LABELS[state['variant']]} sampler: {fmt.percent(audit.unique_fraction)} of the "
        f"{fmt.count(audit.draws)} draws are distinct within their epoch, {fmt.count(audit.duplicated_samples)} repeat a "
        f"sample, {fmt.count(audit.missing_samples)} sample slots go undrawn and {audit.repeated_epochs} epoch(s) repeat "
        f"the previous order, while the dashboard's counts are the same as with a correct sampler."
    )
    return View(svg=drawing, readouts=readouts, note=note, alt=alt)
