"""Figure 23: strong scaling, weak scaling and the critical batch size on one log axis."""
import math
from dataclasses import dataclass
from functools import lru_cache

from figures import svg
from figures.contract import Readout, Slider, View
from models import fmt, hardware, scaling

NUMBER = 23
TITLE = "Strong scaling, weak scaling, and the critical batch size"
CAPTION = (
    "Efficiency against world size N on a log axis: strong scaling, weak scaling, and what the weak run really earns "
    "once its growing global batch passes the critical batch B_noise."
)
NOTE = (
    "Grey is strong scaling of a fixed global batch, dashed once a device would get less than one sample; blue "
    "is weak scaling, a fixed batch per device; the thick line is the weak run's real return. The dotted curve, "
    "E_min/E, is the share of examples that still buy progress. Past the B = B_noise line, blue stays near the top "
    "while the thick line halves."
)
TRIES = (
    ("16,384 GPUs", {"N": 16384}),
    ("128 GPUs", {"N": 128}),
    ("B_noise = 16,384", {"b_noise": 16384}),
)

POWERS_OF_TWO = tuple(2**k for k in range(18))
CONTROLS = (
    Slider("N", "World size N", stops=POWERS_OF_TWO[:15], default=256, format=fmt.gpus),
    Slider("per_device_batch", "Samples per device (weak scaling)", stops=POWERS_OF_TWO[:7], default=2),
    Slider("global_batch", "Global batch (strong scaling)", stops=POWERS_OF_TWO[6:], default=1024, format=fmt.count, unit="samples"),
    Slider("b_noise", "Critical batch B_noise", stops=POWERS_OF_TWO[6:], default=2048, format=fmt.count, unit="samples"),
    Slider("step_ms", "One device's compute per sample", stops=(10, 20, 50, 100, 200, 500, 1000, 2000, 5000), default=500, unit="ms"),
    Slider("grad_gb", "Gradients per AllReduce", stops=(0.1, 0.2, 0.5, 1, 2, 5, 10, 14, 20, 50, 100, 140, 200, 500, 1000, 2000), default=14, unit="GB"),
    Slider("bw_GBps", "Network bandwidth per GPU", stops=(5, 10, 12.5, 25, 50, 100, 200, 500), default=50, unit="GB/s"),
    Slider("overlap", "Gradient communication hidden", min=0, max=1, step=0.05, default=0.9, format=fmt.percent),
)
PRIMARY = ("N", "b_noise")  # where the reader stands, and where the knee sits
GROUPS = (("Batch", ("per_device_batch", "global_batch")),
          ("One step's cost", ("step_ms", "grad_gb", "bw_GBps", "overlap")))

# Curve samples: quarter powers of two, so every N the slider offers is on the curve.
SIZES = tuple(sorted({round(2 ** (k / 4)) for k in range(57)}))
ALPHA_S = hardware.link("ib_ndr").alpha_s  # one ring step across the network
W, H, LEFT, RIGHT, TOP, BOTTOM = 720, 340, 48, 150, 44, 40
CURVES = (  # (readout key, line class, line style, label): weak scaling is data parallelism's curve (its hue);
    # the others have no palette meaning, so they are drawn in ink (efficiency is not communication, waiting or bad)
    ("strong_efficiency", "svg-ink-stroke", "", "strong scaling"),
    ("weak_efficiency", "stroke-dp", "", "weak scaling"),
    ("sample_efficiency", "svg-ink-stroke", "svg-dot", "sample efficiency"),
    ("effective_efficiency", "svg-ink", "", "training efficiency"),
)
MARKER = {"svg-ink-stroke": "svg-neutral-fill", "stroke-dp": "fill-dp", "svg-ink": "svg-ink-fill"}  # the dot on each curve at N


@dataclass(frozen=True)
class _Layout:
    """Where things go: the wide drawing, or a phone's column (``legend``: the curves named under
    the plot, not at their right ends, so the plot takes the whole width)."""
    width: float = W
    height: float = H
    left: float = LEFT
    right: float = RIGHT  # the margin right of the plot
    top: float = TOP
    bottom: float = BOTTOM  # under the plot, down to the axis's caption
    legend: bool = False

    def x(self, n):
        return self.left + (self.width - self.left - self.right) * math.log2(n) / 14

    def y(self, e):
        return self.top + (self.height - self.top - self.bottom) * (1 - min(max(e, 0.0), 1.0))


LEGEND_ROW, LEGEND_COLUMN = 18, 164  # the narrow legend: two columns of two curves
WIDE = _Layout()
NARROW = _Layout(width=320, height=264 + BOTTOM, left=40, right=13, top=TOP, legend=True)
# a phone on its side (render(short=True)): the wide drawing with a shorter plot, so that it and
# its sentence fit under a three-row bar at 844 x 390
SHORT = _Layout(height=TOP + 96 + BOTTOM)


@lru_cache(maxsize=64)  # moving N only moves the marker
def _curves(per_device_batch, global_batch, b_noise, step_ms, grad_gb, bw_gbps, overlap):
    return scaling.scaling_efficiencies(
        SIZES, per_device_batch=per_device_batch, global_batch=global_batch, b_noise=b_noise,
        step_s_per_sample=step_ms / 1000, gradient_bytes=grad_gb * 1e9, alpha_s=ALPHA_S,
        bandwidth_bytes_per_s=bw_gbps * 1e9, overlap=overlap)


def _values(p):
    return {"strong_efficiency": p.strong.efficiency, "weak_efficiency": p.weak.efficiency,
            "sample_efficiency": p.sample_efficiency, "effective_efficiency": p.effective_efficiency}


def render(state, narrow=False, short=False):
    layout = NARROW if narrow else SHORT if short else WIDE
    _x, _y, W, H, LEFT, TOP, BOTTOM = layout.x, layout.y, layout.width, layout.height, layout.left, layout.top, layout.bottom
    points = _curves(state["per_device_batch"], state["global_batch"], state["b_noise"], state["step_ms"],
                     state["grad_gb"], state["bw_GBps"], state["overlap"])
    here = next(p for p in points if p.world_size == state["N"])
    now = _values(here)
    right = W - layout.right
    parts = [
        svg.segments([(LEFT, _y(f), right, _y(f)) for f in (0, 0.25, 0.5, 0.75, 1)], class_="svg-axis"),
        svg.texts(((LEFT - 6, _y(f) + 4, fmt.percent(f, 0)) for f in (0, 0.25, 0.5, 0.75, 1)), class_="svg-label-soft", text_anchor="end"),
        svg.texts(((_x(4**k), H - BOTTOM + 16, f"{4**k // 1024}K" if k > 4 else 4**k) for k in range(8)), class_="svg-label-soft", text_anchor="middle"),
        svg.text((LEFT + right) / 2, H - 6, "world size N (GPUs, log scale)", class_="svg-label-soft", text_anchor="middle"),
        svg.text(LEFT - 40, 14, "efficiency", class_="svg-label-soft"),  # at the top: B_noise's name goes under it
    ]
    crit = scaling.critical_world_size(state["b_noise"], state["per_device_batch"])
    if 1 <= crit <= SIZES[-1]:
        name = f"B = B_noise at N = {fmt.count(crit)}"
        # kept inside the drawing, above the plot (the efficiency axis's name is higher still)
        half = svg.text_width(name, svg.LABEL_SIZES["svg-label-soft"]) / 2 + 1
        spot = min(max(_x(crit), half), W - half)
        parts += [svg.segments([(_x(crit), TOP - 4, _x(crit), H - BOTTOM)], class_=f"svg-ink svg-dash {svg.KEY}", stroke_width=1),
                  svg.text(spot, TOP - 10, name, class_="svg-label-soft", text_anchor="middle")]
    one_sample = [p for p in points if p.strong_batch_per_device >= 1]
    split = [p for p in points if p.strong_batch_per_device <= 1]
    for key, colour, style, _ in CURVES:
        runs = ((one_sample, ""), (split, "svg-dash")) if key == "strong_efficiency" else ((points, style),)
        for run, dash in runs:
            if run:
                parts.append(svg.polyline([(_x(p.world_size), _y(_values(p)[key])) for p in run],
                                          class_=f"{colour} {dash}".strip(), stroke_width=2.5 if colour == "svg-ink" else 2))
    if layout.legend:  # each curve's line and name under the plot
        parts += _legend(H + 6)
    else:  # curve names at the right end, pushed apart so they never overlap
        parts.append(svg.end_labels([(_y(_values(points[-1])[key]) + 4, label) for key, _, _, label in CURVES], right + 14,
                                    floor=H - BOTTOM, leaders_from=right + 2, class_="svg-label"))
    x = _x(state["N"])
    # "N = ..." beside the cursor where no curve, dot or line runs: the curves' segments and the
    # dots are obstacles (at 16K every curve but one ends in the bottom corner it used to sit in)
    reach = svg.text_width(f"N = {fmt.count(SIZES[-1])}", svg.LABEL_SIZES["svg-label"]) + 8  # how far the label goes
    near = [p for p in points if abs(_x(p.world_size) - x) <= reach + 8]  # only these curves' stretches can meet it
    curve_boxes = [box for key, _, _, _ in CURVES
                   for box in svg.line_boxes([(_x(p.world_size), _y(_values(p)[key])) for p in near])]
    dots = [(x - 5, _y(now[key]) - 5, 10, 10) for key, _, _, _ in CURVES]
    lines = [(x - 1, TOP, 2, H - BOTTOM - TOP)]
    if 1 <= crit <= SIZES[-1]:
        lines.append((_x(crit) - 1, TOP, 2, H - BOTTOM - TOP))
    short = layout.legend and state["N"] >= 1024  # a phone's column: "16K", as the axis writes it
    name = f"N = {state['N'] // 1024}K" if short else f"N = {fmt.count(state['N'])}"
    # bottom first, then the top, then every row between (fixed spots: no slide search, ~0.5 ms)
    rows = int((H - BOTTOM - 6 - TOP - 14) // 16)
    heights = (H - BOTTOM - 6, TOP + 14) + tuple(H - BOTTOM - 6 - 16 * k for k in range(1, rows))
    first, second = ("end", "start") if x >= right - 60 else ("start", "end")  # near the right edge: left first
    sides = [(x + (5 if anchor == "start" else -5), y, anchor) for y in heights for anchor in (first, second)]
    label = svg.Label(*sides[0][:2], name, anchor=sides[0][2], alternatives=sides[1:], moves=(),
                      class_="svg-label svg-halo")
    parts += [
        svg.segments([(x, TOP, x, H - BOTTOM)], class_=f"svg-ink {svg.KEY}", stroke_width=1),
        *(svg.circles([(x, _y(now[key]), 4.5)], class_=MARKER[colour]) for key, colour, _, _ in CURVES),
        svg.labels([label], (LEFT, TOP, right - LEFT, H - BOTTOM - TOP), obstacles=curve_boxes + dots + lines),
    ]
    first = H + 2 * LEGEND_ROW + 28 if layout.legend else H + 16  # the sentence's first baseline
    why, count = _why(layout, here, state, first)
    parts += why
    height = first + 18 * (count - 1) + 6
    drawing = svg.document(W, height, parts, label=f"Scaling efficiency against world size; the reader's N = {state['N']}")
    batch = fmt.count(here.weak_global_batch)
    readouts = (
        Readout("strong_efficiency", "Strong scaling", fmt.percent(now["strong_efficiency"]), now["strong_efficiency"]),
        Readout("weak_efficiency", "Weak scaling", fmt.percent(now["weak_efficiency"]), now["weak_efficiency"], "dp"),
        Readout("sample_efficiency", "Sample efficiency E_min/E", fmt.percent(now["sample_efficiency"]), now["sample_efficiency"]),
        Readout("effective_efficiency", "Training efficiency (weak × sample)", fmt.percent(now["effective_efficiency"]), now["effective_efficiency"]),
        Readout("global_batch_weak", "Weak-scaling global batch", f"{batch} samples", here.weak_global_batch),
        Readout("throughput", "Weak-scaling throughput", f"{fmt.count(here.throughput_per_s)} samples/s", here.throughput_per_s),
        Readout("examples_multiplier", "Samples to reach the loss", f"{fmt.decimal(here.examples_multiplier)} × the minimum", here.examples_multiplier),
    )
    note = ""
    if here.strong_batch_per_device < 1:
        note = (f"At N = {fmt.count(state['N'])} the strong-scaling run would give each device "
                f"{fmt.decimal(here.strong_batch_per_device, 3)} of a sample: data parallelism alone cannot split it (dashed).")
    alt = (
        f"Four efficiency curves against world size from 1 to 16,384 GPUs on a log axis. At N = {fmt.count(state['N'])}: "
        f"strong scaling {fmt.percent(now['strong_efficiency'])}, weak scaling {fmt.percent(now['weak_efficiency'])}, "
        f"sample efficiency {fmt.percent(now['sample_efficiency'])} at a global batch of {batch}, training efficiency "
        f"{fmt.percent(now['effective_efficiency'])}. The weak-scaling batch reaches B_noise = {fmt.count(state['b_noise'])} "
        f"at N = {fmt.count(crit)}."
    )
    return View(svg=drawing, readouts=readouts, note=note, alt=alt)


def _why(layout, here, state, y):
    """Why the strong curve sits above, on or below the weak one at N, in a sentence under the
    plot: the two runs differ only in the samples each GPU computes per step, behind which the
    same AllReduce hides. ``(parts, lines)``."""
    strong, weak = here.strong_batch_per_device, state["per_device_batch"]
    per_gpu = "a fraction of a sample" if strong < 1 else f"{fmt.decimal(strong)} sample{'s' if strong != 1 else ''}"
    if strong > weak:
        say = (f"At N = {fmt.count(state['N'])} strong scaling runs above weak: each GPU computes {per_gpu} a step, "
               f"weak scaling's {weak}, so more compute hides the same AllReduce.")
    elif strong == weak:
        say = (f"At N = {fmt.count(state['N'])} strong and weak scaling meet: both give each GPU {per_gpu} a step "
               "and the same AllReduce.")
    else:
        say = (f"At N = {fmt.count(state['N'])} strong scaling runs below weak: each GPU computes {per_gpu} a step, "
               f"weak scaling's {weak}, so less compute hides the same AllReduce.")
    lines = svg.wrap(say, layout.width - 8, *svg.label_size("svg-label"))
    return [svg.text(0, y + 18 * k, line, class_="svg-label") for k, line in enumerate(lines)], len(lines)


def _legend(top):
    """The four curves in two columns: a stretch of each line, then its name."""
    parts = []
    for k, (_, colour, style, label) in enumerate(CURVES):
        x, y = LEGEND_COLUMN * (k % 2), top + LEGEND_ROW * (k // 2)
        parts += [svg.polyline([(x, y + 8), (x + 26, y + 8)], class_=f"{colour} {style}".strip(),
                               stroke_width=2.5 if colour == "svg-ink" else 2),
                  svg.text(x + 32, y + 12, label, class_="svg-label")]
    return parts
