"""Figure 25: the straggler tax: a synchronous step waits for the slowest of N ranks."""
import math
from dataclasses import dataclass, replace

from figures import svg
from figures.contract import Button, Readout, Slider, View
from models import fmt, reliability

NUMBER = 25
TITLE = "The straggler tax"
CAPTION = (
    "One step's per-rank times, all drawn from the same normal distribution, and the step itself, which waits for "
    "the slowest rank; below, that straggler tax against N."
)
NOTE = (
    "The spread is cv = σ/μ, and the hatched grey band is the time a rank at the mean waits in the step drawn, up to "
    "its slowest rank (a bad card included). The lower "
    "chart puts N on a log axis and draws the exact tax (solid) beside the √(2 ln N) rule of thumb (dashed)."
)
TRIES = (
    ("8 GPUs", {"N": 8}),
    ("16,384 GPUs", {"N": 16384}),
    ("64 GPUs, 1% spread", {"N": 64, "cv": 0.01}),
    ("...and one card 5% slow", {"N": 64, "cv": 0.01, "bad": 0.05}),
)

POWERS_OF_TWO = tuple(2**k for k in range(15))
CONTROLS = (
    Slider("N", "World size N", stops=POWERS_OF_TWO, default=4096, format=fmt.gpus),
    Slider("cv", "Step-time spread cv = σ/μ", min=0, max=0.2, step=0.01, default=0.03, format=fmt.percent),
    Slider("bad", "One bad card, slower by", stops=(0, 0.01, 0.02, 0.03, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1),
           default=0, format=lambda v: fmt.percent(v, 0)),
    Slider("seed", "Random seed", min=1, max=20, step=1, default=1),
    Button("resample", "Draw another step", press=lambda state: {**state, "seed": state["seed"] % 20 + 1}),
)
PRIMARY = ("N", "cv")  # how many ranks wait, and how much their times spread

W, LEFT, RIGHT, HIST_TOP, HIST_H, TAX_TOP, TAX_H = 720, 56, 24, 74, 120, 272, 130
BINS = 48
HIST_BOTTOM, TAX_BOTTOM = HIST_TOP + HIST_H, TAX_TOP + TAX_H


@dataclass(frozen=True)
class _Layout:
    """Where things go: the wide drawing, or a phone's column (``narrow``: long lines wrapped, the
    histogram edge to edge, the tax curves named in a legend under their plot)."""
    width: float = W
    left: float = LEFT  # the histogram's and the tax plot's left edge
    right: float = RIGHT
    hist_top: float = HIST_TOP
    hist_h: float = HIST_H
    tax_top: float = TAX_TOP
    tax_h: float = TAX_H
    tax_left: float = LEFT  # the tax plot's axis (its percentages before it)
    tax_right: float = RIGHT + 150  # right of the tax plot: its curves' names (in a legend: only "16K")
    legend: bool = False
    wrap: bool = False
    ticks: int = 8  # at most this many ticks under the histogram
    flip_x: float = W - 240  # a marker's label goes left of a line from here on
    flip_n: int = 2048  # the tax plot's "N = ..." goes left of its line from this N on
    tax_title: str = "The tax, E[slowest]/μ − 1, against the world size"

    @property
    def hist_bottom(self):
        return self.hist_top + self.hist_h

    @property
    def tax_bottom(self):
        return self.tax_top + self.tax_h


WIDE = _Layout()
NARROW = _Layout(width=320, left=16, right=22, hist_top=HIST_TOP + 20, tax_top=HIST_TOP + 20 + HIST_H + 78, tax_left=42,
                 tax_right=13, legend=True, wrap=True, ticks=5, flip_x=320 - 170, flip_n=512,
                 tax_title="The tax, E[slowest]/μ − 1, against world size")
# A phone on its side (render(short=True)): the histogram and the tax side by side, each laid
# out as a phone's column, SHORT_COLUMN wide, so that both fit under a two-row bar at 844 x 390.
SHORT_COLUMN, SHORT_GAP = 350, 20
SHORT = replace(NARROW, width=SHORT_COLUMN, hist_top=HIST_TOP, tax_top=36, flip_x=SHORT_COLUMN - 170)
LEGEND_ROW = 18


def _paragraph(layout, x, y, content, step=15, **attributes):
    """``content`` at baseline ``(x, y)``: one line, or (``layout.wrap``) as many as the drawing's
    width needs, never broken between a number and its unit; ``(parts, lines)``."""
    lines = (svg.wrap(content, layout.width - x, *svg.label_size(attributes.get("class_")), keep=svg.with_its_unit)
             if layout.wrap else [content])
    return [svg.text(x, y + k * step, line, **attributes) for k, line in enumerate(lines)], len(lines)


def _nice(span, most):
    return next(s for s in (0.005, 0.01, 0.02, 0.025, 0.05, 0.1, 0.2, 0.25, 0.5, 1.0) if span / s <= most)


def render(state, narrow=False, short=False):
    layout = NARROW if narrow else SHORT if short else WIDE
    n, cv, bad = state["N"], state["cv"], state["bad"]
    step = reliability.sample_step(n, 1.0, cv, seed=state["seed"], bad_slowdown=bad)
    exact = reliability.expected_max_over_mean(n, cv)
    rule = reliability.expected_max_normal_asymptotic(n, 1.0, cv)
    tax = reliability.bad_card_tax(n, cv, bad)
    healthy_tax = reliability.bad_card_tax(n, cv, 0.0)
    title, lines = _paragraph(layout, 6, 14, f"One step on {fmt.count(n)} GPUs" + ("" if n == len(step.shown_times_s) else
                              f": {fmt.count(len(step.shown_times_s))} ranks drawn one by one, the slowest of the other "
                              f"{fmt.count(n - len(step.shown_times_s))} drawn exactly"), class_="svg-label")
    layout = replace(layout, hist_top=layout.hist_top + 15 * (lines - 1), tax_top=layout.tax_top + 15 * (lines - 1))
    W, LEFT, RIGHT, HIST_TOP, HIST_H, HIST_BOTTOM = (layout.width, layout.left, layout.right, layout.hist_top,
                                                     layout.hist_h, layout.hist_bottom)
    spread = max(cv, 0.005)
    lo, hi = 1 - 4.5 * spread, max(1 + 4.6 * spread, step.step_s + spread, rule + spread)
    px = lambda t: LEFT + (W - LEFT - RIGHT) * (t - lo) / (hi - lo)  # noqa: E731
    counts = reliability.histogram_counts(step.shown_times_s, lo, hi, BINS)
    width, tallest = (W - LEFT - RIGHT) / BINS, max(counts)
    tick = _nice(hi - lo, layout.ticks)
    ticks = [k * tick for k in range(math.ceil((lo - 1) / tick), math.floor((hi - 1) / tick) + 1)]
    slowest = step.step_s
    parts = [
        # the wait of the rank at the mean in the step drawn: from μ to the slowest rank, whatever set it
        svg.boxes([(px(1), HIST_TOP - 6, px(max(step.step_s, 1)) - px(1), HIST_H + 6)], class_="fill-idle svg-faint"),
        svg.boxes(((LEFT + k * width, HIST_BOTTOM - HIST_H * c / tallest, width - 1, HIST_H * c / tallest)
                   for k, c in enumerate(counts) if c), class_="fill-compute"),
        svg.segments([(LEFT, HIST_BOTTOM, W - RIGHT, HIST_BOTTOM)] + [(px(1 + v), HIST_BOTTOM, px(1 + v), HIST_BOTTOM + 4) for v in ticks], class_="svg-axis"),
        svg.texts(((px(1 + v), HIST_BOTTOM + 16, "μ" if abs(v) < 1e-9 else f"{'+' if v > 0 else '-'}{fmt.percent(abs(v), 1 if tick < 0.01 else 0)}")
                   for v in ticks), class_="svg-label-soft", text_anchor="middle"),
        svg.text(W - RIGHT, HIST_BOTTOM + 32, "one rank's step time, relative to the mean μ", class_="svg-label-soft", text_anchor="end"),
        svg.segments([(px(1), HIST_TOP - 6, px(1), HIST_BOTTOM)], class_="svg-ink", stroke_width=1),
        svg.segments([(px(exact), HIST_TOP - 20, px(exact), HIST_BOTTOM)], class_=f"svg-ink {svg.KEY}", stroke_width=2.5),
        svg.segments([(px(rule), HIST_TOP - 34, px(rule), HIST_BOTTOM)], class_="svg-ink svg-dash", stroke_width=1.5),
        svg.circles([(px(slowest), HIST_BOTTOM - 4, 4.5)], class_=f"svg-ink-fill {svg.KEY}"),
        *title,
    ]
    # The markers' labels, placed by svg.place_labels: beside their line or dot, on the side
    # with room, and slid up clear of the histogram's bars and of each other.
    bars = [(LEFT + k * width, HIST_BOTTOM - HIST_H * c / tallest, width - 1, HIST_H * c / tallest)
            for k, c in enumerate(counts) if c]
    dots = [(px(slowest) - 4.5, HIST_BOTTOM - 8.5, 9, 9)]
    labels = [_label(layout, px(exact), HIST_TOP - 10, f"E[slowest] = {fmt.decimal(exact, 3)} μ"),
              _label(layout, px(rule), HIST_TOP - 24, f"μ + σ√(2 ln N) = {fmt.decimal(rule, 3)} μ")]
    if bad:
        parts.append(svg.circles([(px(step.shown_times_s[0]), HIST_BOTTOM - 18, 5)], class_="fill-warn"))
        dots.append((px(step.shown_times_s[0]) - 5, HIST_BOTTOM - 23, 10, 10))
        labels.append(_label(layout, px(step.shown_times_s[0]), HIST_BOTTOM - 30, f"bad card (+{fmt.percent(bad, 0)})"))
    # a phone's histogram has no 100 units free beside the dot: the short name there
    labels.append(_label(layout, px(slowest), HIST_BOTTOM - 10, "slowest" if layout.wrap else "slowest this step",
                         soft=True))
    top = 20 + 15 * (lines - 1)  # the labels stay under the title
    # the marker lines are obstacles too: no label is crossed by a line it does not name
    lines = [(px(1) - 1, HIST_TOP - 6, 2, HIST_H + 6), (px(exact) - 1.5, HIST_TOP - 20, 3, HIST_H + 20),
             (px(rule) - 1, HIST_TOP - 34, 2, HIST_H + 34)]
    parts.append(svg.labels(labels, (0, top, W, HIST_BOTTOM - top), obstacles=bars + dots + lines))
    if short:  # the tax beside the histogram, its title level with the histogram's
        tax_panel, height = _tax_panel(replace(layout, tax_top=SHORT.tax_top), n, cv, bad, tax)
        parts.append(svg.group(tax_panel, transform=f"translate({SHORT_COLUMN + SHORT_GAP} 0)"))
        W, height = 2 * SHORT_COLUMN + SHORT_GAP, max(height, HIST_BOTTOM + 36)
    else:
        tax_panel, height = _tax_panel(layout, n, cv, bad, tax)
        parts += tax_panel
    drawing = svg.document(W, height, parts, label=f"Per-rank step times of {n} ranks and the straggler tax against N")
    readouts = (
        Readout("expected_max_over_mean", "E[slowest] / μ, exact", fmt.decimal(exact, 4), exact),
        Readout("asymptotic_over_mean", "1 + cv√(2 ln N)", fmt.decimal(rule, 4), rule),
        Readout("tax_fraction", "Straggler tax", fmt.percent(tax), tax),
        Readout("healthy_tax", "Tax of healthy ranks alone", fmt.percent(healthy_tax), healthy_tax),
        Readout("sampled_step", "This step / μ", fmt.decimal(step.step_s, 4), step.step_s),
    )
    alt = (f"Histogram of {len(step.shown_times_s)} sampled per-rank step times of {n} ranks with spread {fmt.percent(cv)}; "
           f"the expected slowest is {fmt.decimal(exact, 3)} times the mean (rule of thumb {fmt.decimal(rule, 3)}), this step "
           f"{fmt.decimal(step.step_s, 3)}. Below, the tax against N from 1 to 16,384; at N = {n} it is {fmt.percent(tax)}"
           + (f", set by one bad card {fmt.percent(bad, 0)} slow." if bad > healthy_tax else "."))
    return View(svg=drawing, readouts=readouts, alt=alt)


def _tax_panel(layout, n, cv, bad, tax):
    """The tax against N, and the drawing's height below it."""
    TAX_TOP, TAX_H, TAX_BOTTOM, LEFT = layout.tax_top, layout.tax_h, layout.tax_bottom, layout.tax_left
    curve = reliability.straggler_curve(POWERS_OF_TWO, cv)
    top = max(0.01, curve[-1][2], bad) * 1.15
    tick = _nice(top, 5)
    x = lambda m: LEFT + (layout.width - LEFT - layout.tax_right) * math.log2(m) / 14  # noqa: E731
    y = lambda v: TAX_BOTTOM - TAX_H * v / top  # noqa: E731
    right = x(POWERS_OF_TWO[-1])
    title = svg.text(6, TAX_TOP - 22, layout.tax_title, class_="svg-label")
    flip = n >= layout.flip_n
    parts = [
        title,
        svg.segments([(LEFT, y(k * tick), right, y(k * tick)) for k in range(int(top / tick) + 1)], class_="svg-axis"),
        svg.texts(((LEFT - 6, y(k * tick) + 4, fmt.percent(k * tick, 1 if tick < 0.01 else 0)) for k in range(int(top / tick) + 1)),
                  class_="svg-label-soft", text_anchor="end"),
        svg.texts(((x(4**k), TAX_BOTTOM + 16, f"{4**k // 1024}K" if k > 4 else 4**k) for k in range(8)), class_="svg-label-soft", text_anchor="middle"),
        svg.text((LEFT + right) / 2, TAX_BOTTOM + 32, "world size N (GPUs, log scale)", class_="svg-label-soft", text_anchor="middle"),
        svg.polyline([(x(m), y(e)) for m, e, _ in curve], class_="svg-ink", stroke_width=2.5),
        svg.polyline([(x(m), y(a)) for m, _, a in curve], class_="svg-ink svg-dash", stroke_width=1.5),

        svg.segments([(x(n), TAX_TOP, x(n), TAX_BOTTOM)], class_="svg-ink", stroke_width=1),
        svg.circles([(x(n), y(tax), 5)], class_="fill-warn" if bad else "svg-ink-fill"),
        svg.text(x(n) + (-6 if flip else 6), TAX_TOP + 12, f"N = {fmt.count(n)}: {fmt.percent(tax)}", class_="svg-label svg-halo",
                 text_anchor="end" if flip else "start"),
    ]
    ends = [(y(curve[-1][1]) + 4, "exact"), (y(curve[-1][2]) + 4, "√(2 ln N) rule")]
    if bad:
        parts.append(svg.segments([(LEFT, y(bad), right, y(bad))], class_="stroke-warn", stroke_width=2))
        ends.append((y(bad) + 4, f"one bad card, +{fmt.percent(bad, 0)}"))
    if layout.legend:  # each line's stretch and name under the axis: exact and the rule on one row, the bad card below
        lines = (("svg-ink", 2.5, 0, 0), ("svg-ink svg-dash", 1.5, 120, 0), ("stroke-warn", 2, 0, 1))  # class, width, x, row
        for (_, name), (css, stroke, dx, row) in zip(ends, lines):
            at = TAX_BOTTOM + 42 + LEGEND_ROW * row
            parts += [svg.segments([(6 + dx, at + 8, 32 + dx, at + 8)], class_=css, stroke_width=stroke),
                      svg.text(38 + dx, at + 12, name, class_="svg-label")]
        return parts, TAX_BOTTOM + 46 + LEGEND_ROW * (1 + bool(bad))
    ticks = [svg.text_box(x(4**k), TAX_BOTTOM + 16, f"{4**k // 1024}K" if k > 4 else 4**k, 11, "middle") for k in range(8)]
    parts.append(svg.end_labels(ends, right + 8, floor=TAX_BOTTOM + 4, obstacles=ticks, class_="svg-label"))
    return parts, TAX_BOTTOM + 40


def _label(layout, x, y, content, soft=False):
    """A marker's label beside it, on the side with room (the other side if that is taken),
    free to slide up."""
    left = x > layout.flip_x
    sides = ((x - 6, y, "end"), (x + 6, y, "start"))
    first, other = sides if left else sides[::-1]
    return svg.Label(*first[:2], content, anchor=first[2], alternatives=(other,), moves=("up", "left", "right"),
                     class_="svg-label-soft svg-halo" if soft else "svg-label svg-halo")
