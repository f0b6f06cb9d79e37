"""Figure 07: adding GPUs does not add memory -- DDP's per-device bar stays put while N grows."""
import math

from figures import svg
from figures.contract import Readout, Select, Slider, View
from figures.fig08_zero_ladder import MODEL_SIZES, PARTS
from models import fmt, hardware, memory

NUMBER = 7
TITLE = "Adding GPUs does not add memory"
CAPTION = (
    "Plain data parallelism on 1 to 4,096 GPUs: what each GPU must hold stays put as N grows, while what the whole "
    "job needs and what its GPUs bring climb together."
)
NOTE = (
    "Top: per GPU, the parameters, gradients, optimizer state and any activations you add, against the chosen GPU's "
    "HBM. Bottom: the whole job, on a log axis of N. Sizes are in GB of 10⁹ bytes: a card sold as 80GB holds "
    "80 GiB, 85.9 GB."
)
TRIES = (
    ("4,096 GPUs", {"N": 4096}),
    ("An MI300X", {"gpu": "mi300x"}),
    ("A 1.3B model", {"params": 1_300_000_000}),
)

DEVICE_COUNTS = tuple(2**k for k in range(13))  # 1 .. 4096
ACTIVATION_GB = (0, 1, 2, 5, 10, 20, 50, 100, 200)

CONTROLS = (
    Slider("params", "Parameters \u03a8", stops=MODEL_SIZES, default=7_000_000_000, format=fmt.si_count),
    Slider("N", "GPUs N", stops=DEVICE_COUNTS, default=8, format=fmt.gpus),
    Select("gpu", "GPU", options=tuple((k, g.name) for k, g in hardware.GPUS.items()), default="h100_sxm"),
    Select("optimizer", "Optimizer", options=tuple((k, o.label) for k, o in memory.OPTIMIZERS.items()), default="adam_mixed"),
    Slider("activations_gb", "Activations per GPU", stops=ACTIVATION_GB, default=0, unit="GB"),
)
PRIMARY = ("N", "params")  # N moves nothing per GPU; the model's size does

LAYERS = PARTS + (("activations", "Activations"),)  # palette keys, bottom to top
WIDTH, X0, X1 = 400, 64, 392  # X0: room for "100 GB" at 14.5 px left of the axis
PER_GPU = (62, 214)  # top panel: y of its top and its axis
HEADROOM = 24  # drawing units above the tallest bar (or line), where a label can go
JOB = (340, 484)  # bottom panel
HEIGHT = 526
SHORT_GAP = 24  # between the two panels, side by side on a short screen
SLOT = (X1 - X0) / len(DEVICE_COUNTS)
WARN, OK = "fill:var(--c-warn)", None  # a verdict that passes stays in ink: only red means something


def _x(n):
    return X0 + (math.log2(n) + 0.5) * SLOT


def _n_axis(bottom):
    return [
        svg.segments([(X0, bottom, X1, bottom)], class_="svg-axis"),
        svg.texts(((_x(n), bottom + 18, n) for n in DEVICE_COUNTS[::2]), class_="svg-label-soft", text_anchor="middle"),
        svg.text(X1, bottom + 37, "GPUs N (log scale)", class_="svg-label-soft", text_anchor="end"),
    ]


def _bytes_line(state, optimizer, wall):
    """What each GPU's bar is made of: the bytes per parameter (ZeRO's 2 + 2 + 12 for mixed-
    precision Adam; the planner counts 18, checkpoints 14: the prose says why)."""
    terms = " + ".join(fmt.decimal(b) for b in (optimizer.param_bytes, optimizer.grad_bytes, optimizer.optimizer_bytes))
    if not wall.activations_bytes:
        return f"{fmt.si_count(state['params'])} parameters \u00d7 ({terms}) bytes"
    return f"{fmt.si_count(state['params'])} \u00d7 ({terms}) B + {fmt.data_size(wall.activations_bytes)} activations"


def _per_gpu_panel(state, wall, hbm, gpu):
    top, bottom = PER_GPU
    scale_top = max(wall.per_device_bytes, hbm)
    y = lambda b: bottom - b / scale_top * (bottom - top - HEADROOM)  # noqa: E731 (a linear scale)
    ticks = [t * 1e9 for t in svg.ticks(0, scale_top / 1e9, 5)]  # round numbers of GB
    verdict = "fits on every GPU, at any N" if wall.fits else "fits on no GPU, at any N"
    optimizer = memory.OPTIMIZERS[state["optimizer"]]
    parts = [
        svg.text(0, 14, "Memory per GPU", class_="svg-label svg-strong"),
        svg.text(0, 32, _bytes_line(state, optimizer, wall), class_="svg-label"),
        svg.text(0, 50, f"{fmt.gigabytes(wall.per_device_bytes)} per GPU: {verdict}", class_="svg-label",
                 style=OK if wall.fits else WARN),
        svg.segments([(X0, y(t), X1, y(t)) for t in ticks[1:]], class_="svg-axis", stroke_dasharray="2 3"),
        svg.texts(((X0 - 6, y(t) + 5, fmt.data_size(t) if t else "0") for t in ticks), class_="svg-label-soft",
                  text_anchor="end"),
    ]
    sizes = [getattr(wall.states, f"{key}_bytes") for key, _ in PARTS] + [wall.activations_bytes]
    below = 0.0
    for (key, _), size in zip(LAYERS, sizes):  # one path per part: thirteen equal stacks
        if size > 0:
            parts.append(svg.boxes([(_x(n) - SLOT * 0.34, y(below + size), SLOT * 0.68, y(below) - y(below + size))
                                    for n in DEVICE_COUNTS], class_=f"fill-{key}"))
        below += size
    chosen = (_x(state["N"]) - SLOT * 0.48, y(below) - 3, SLOT * 0.96, bottom - y(below) + 3)
    # The HBM line's label: above the line's right end, else below it, else slid up clear of
    # the bars (into the headroom over them), never on a bar; a dotted leader then runs down
    # to the line, right of the last bar.
    label = svg.Label(X1, y(hbm) - 6, f"HBM of one {gpu.short_name}: {fmt.gigabytes(hbm)}", anchor="end",
                      alternatives=((X1, y(hbm) + 18, "end"),), moves=("up",), class_="svg-label")
    bars = [(_x(n) - SLOT * 0.34, y(below), SLOT * 0.68, bottom - y(below)) for n in DEVICE_COUNTS] + [chosen]
    [(x, at, anchor, _)] = svg.place_labels([label], (X0, top - 4, X1 - X0, bottom - top + 4), obstacles=bars, compact=True)
    parts += [
        svg.boxes([chosen], class_=f"svg-ink {svg.KEY}", stroke_width=1.5),  # the point: this bar against the HBM line
        svg.segments([(X0, y(hbm), X1, y(hbm))], class_="stroke-capacity", stroke_width=2, stroke_dasharray="6 4"),
        svg.text(x, at, label.text, text_anchor=anchor, class_="svg-label"),
    ]
    if abs(at - label.y) > 1 and at < y(hbm):
        parts.append(svg.segments([(X1 - 1.5, at + 5, X1 - 1.5, y(hbm))], class_="stroke-capacity", stroke_dasharray="1 3"))
    return parts + _n_axis(bottom)


def _job_panel(state, walls):
    top, bottom = JOB
    need = [w.aggregate_bytes for w in walls]
    have = [w.aggregate_hbm_bytes for w in walls]
    low = 10 ** math.floor(math.log10(min(need[0], have[0])))
    span = math.ceil(math.log10(max(need[-1], have[-1]) / low))
    y = lambda b: bottom - math.log10(b / low) / span * (bottom - top)  # noqa: E731 (a log scale)
    decades = [low * 10**k for k in range(0, span + 1, 1 if span <= 5 else 2)]
    index = DEVICE_COUNTS.index(state["N"])
    parts = [
        svg.text(0, top - 56, "The whole job", class_="svg-label svg-strong"),
        svg.segments([(X0, y(d), X1, y(d)) for d in decades[1:]], class_="svg-axis", stroke_dasharray="2 3"),
        svg.texts(((X0 - 6, y(d) + 4, fmt.data_size(d)) for d in decades),
                  class_="svg-label-soft", text_anchor="end"),
    ]
    legend = ((need, "memory", f"the job needs {fmt.data_size(need[index])}"),
              (have, "capacity", f"{fmt.gpus(state['N'])} have {fmt.data_size(have[index])} of HBM"))
    for row, (values, key, label) in enumerate(legend):
        points = [(_x(n), y(v)) for n, v in zip(DEVICE_COUNTS, values)]
        x, at = points[index]
        dash = "6 4" if key == "capacity" else None  # a capacity is a dashed line, as the HBM line above
        parts += [
            svg.segments([(*a, *b) for a, b in zip(points, points[1:])], class_=f"stroke-{key}", stroke_width=2,
                         stroke_dasharray=dash),
            svg.boxes([(x - 3.5, at - 3.5, 7, 7)], class_=f"fill-{key}"),
            svg.segments([(X0, top - 36 + 18 * row, X0 + 20, top - 36 + 18 * row)], class_=f"stroke-{key}", stroke_width=2.5,
                         stroke_dasharray=dash),
            svg.text(X0 + 26, top - 32 + 18 * row, label, class_="svg-label"),
        ]
    return parts + _n_axis(bottom)


def render(state, short=False):
    gpu = hardware.gpu(state["gpu"])
    hbm = gpu.hbm_bytes
    walls = [memory.ddp_memory(state["params"], n, hbm, optimizer=state["optimizer"],
                               activations_bytes=state["activations_gb"] * 1e9) for n in DEVICE_COUNTS]
    wall = walls[DEVICE_COUNTS.index(state["N"])]
    width, height, job = WIDTH, HEIGHT, _job_panel(state, walls)
    if short:  # a phone on its side: the whole job beside the GPU, its title level with the GPU's
        lift = JOB[0] - 56 - 14
        width, height = 2 * WIDTH + SHORT_GAP, HEIGHT - lift
        job = [svg.group(job, transform=f"translate({WIDTH + SHORT_GAP} {-lift})")]
    drawing = svg.document(
        width, height, _per_gpu_panel(state, wall, hbm, gpu) + job,
        label=f"DDP memory per GPU and for the whole job, N = 1 to 4,096, at {fmt.si_count(state['params'])} parameters",
        class_="svg-compact",
    )
    sizes = [(key, name, getattr(wall.states, f"{key}_bytes")) for key, name in PARTS]
    optimizer = memory.OPTIMIZERS[state["optimizer"]]
    readouts = (
        Readout("per_device_bytes", "per GPU, any N", fmt.gigabytes(wall.per_device_bytes), wall.per_device_bytes),
        Readout("bytes_per_param", "model state per parameter",
                f"{fmt.decimal(optimizer.bytes_per_param)} bytes: {optimizer.recipe}", optimizer.bytes_per_param),
        Readout("aggregate_bytes", f"whole job, {fmt.gpus(state['N'])}", fmt.data_size(wall.aggregate_bytes),
                wall.aggregate_bytes, "memory"),
        Readout("fits", f"fits in {fmt.gigabytes(hbm)} of HBM", "yes" if wall.fits else "no", int(wall.fits),
                None if wall.fits else "warn"),
        Readout("largest_params_that_fit", "largest model whose states fit",
                f"{fmt.si_count(wall.largest_params_that_fit)} parameters", wall.largest_params_that_fit),
        *(Readout(f"{key}_bytes", name.lower(), fmt.gigabytes(size), size, key if size > 0 else None)
          for key, name, size in sizes),  # a swatch only for a part the bars draw
        Readout("activations_bytes", "activations", fmt.gigabytes(wall.activations_bytes), wall.activations_bytes,
                "activations" if wall.activations_bytes > 0 else None),
    )
    alt = (
        f"Top: thirteen identical bars, one per N from 1 to 4,096 GPUs, each {fmt.gigabytes(wall.per_device_bytes)} "
        f"per GPU ({', '.join(f'{name.lower()} {fmt.gigabytes(size)}' for _, name, size in sizes)}, activations "
        f"{fmt.gigabytes(wall.activations_bytes)}), {'below' if wall.fits else 'above'} the {gpu.name}'s "
        f"{fmt.gigabytes(hbm)} HBM line. Bottom: what the job needs climbs from {fmt.data_size(walls[0].aggregate_bytes)} "
        f"to {fmt.data_size(walls[-1].aggregate_bytes)} alongside the HBM of N GPUs; at N = {state['N']} it needs "
        f"{fmt.data_size(wall.aggregate_bytes)} and has {fmt.data_size(wall.aggregate_hbm_bytes)}."
    )
    return View(svg=drawing, readouts=readouts, alt=alt)
