"""Figure 08: the ZeRO ladder — per-device model-state bytes for DDP and ZeRO-1/2/3."""
import math

from figures import palette
from figures.contract import Readout, Select, Slider, View
from models import fmt, hardware, memory

NUMBER = 8
TITLE = "The ZeRO ladder"
CAPTION = (
    "Per-device bytes of parameters, gradients and optimizer state under plain data parallelism and the three ZeRO "
    "stages, side by side. The default, 7.5B parameters sharded 64 ways, gives the ZeRO paper's "
    "120 / 31.4 / 16.6 / 1.88 GB."
)
NOTE = (
    "Sizes are in decimal GB (10⁹ bytes), and each stage's label gives its communication volume in units of "
    "Ψ. As N grows, the bars of ZeRO-1 and ZeRO-2 stop shrinking; only ZeRO-3 shards every part of the ledger."
)
TRIES = (
    ("8-way sharding", {"N": 8}),
    ("1,024-way sharding", {"N": 1024}),
    ("SGD with momentum", {"optimizer": "sgd_momentum"}),
    ("Adam in fp32, ZeRO-1", {"stage": 1, "optimizer": "adam_fp32"}),
)

MODEL_SIZES = tuple(
    int(b * 1e9) for b in (1, 1.3, 2.7, 7, 7.5, 8, 13, 20, 30, 34, 40, 65, 70, 128, 175, 340, 405, 530, 671, 1000)
)
SHARD_DEGREES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)

CONTROLS = (
    Slider("params", "Parameters Ψ", stops=MODEL_SIZES, default=7_500_000_000, format=fmt.si_count),
    Slider("N", "Shard degree N", stops=SHARD_DEGREES, default=64, format=fmt.gpus),
    Select("stage", "Stage", options=tuple((s, memory.STAGE_LABELS[s]) for s in memory.STAGES), default=3),
    Select("optimizer", "Optimizer", options=tuple((k, o.label) for k, o in memory.OPTIMIZERS.items()), default="adam_mixed"),
    Select("gpu", "GPU (its HBM is the dashed line)", options=tuple((k, g.name) for k, g in hardware.GPUS.items()),
           default="h100_sxm"),
)
PRIMARY = ("N", "params")  # how many ways the state is sharded, and how big it is

PARTS = (("params", "Parameters"), ("grads", "Gradients"), ("optimizer", "Optimizer state"))  # palette keys


def _log_range(low, high, plot_px=276, headroom_px=44):
    """The y axis, in decades: from the decade at or below ``low`` to above ``high``, with
    ``headroom_px`` left over the tallest bar for its two-line label."""
    bottom = math.floor(math.log10(low))
    top = math.log10(high)
    top += (top - bottom) * headroom_px / (plot_px - headroom_px)
    return bottom, top


def render(state):
    optimizer = memory.OPTIMIZERS[state["optimizer"]]
    gpu = hardware.gpu(state["gpu"])
    chosen = state["stage"]
    ladder = {s: memory.model_states_for(state["params"], state["N"], s, state["optimizer"]) for s in memory.STAGES}
    fits = {s: ladder[s].total_bytes <= gpu.hbm_bytes for s in memory.STAGES}
    labels = {s: f"{memory.STAGE_LABELS[s]}<br>{memory.comm_volume_psi(s):g}Ψ comm" for s in memory.STAGES}
    opacity = {s: 1.0 if s == chosen else 0.35 for s in memory.STAGES}
    # A log axis: at 1T parameters DDP holds 16 TB a device and ZeRO-3 on 1,024 GPUs 15.6 GB,
    # a bar a thousand times shorter; on a linear axis it (and the HBM line) would be under a pixel.
    totals = {s: ladder[s].total_bytes / 1e9 for s in memory.STAGES}
    bottom, top = _log_range(min(min(totals.values()), gpu.hbm_bytes / 1e9) / 4,
                             max(max(totals.values()), gpu.hbm_bytes / 1e9))
    # One bar trace for all twelve segments, each stacked on its explicit base (the lowest
    # on the axis floor: a log axis has no zero), with each stack's total (and whether it
    # fits the GPU) as the text of its top segment: plotly redraws one trace per move instead
    # of four, and the readouts carry the legend. Each part ends at its running total, so
    # every boundary reads true against the axis and the HBM line.
    floor = 10.0 ** bottom
    segments = [(s, name, palette.plot(part), getattr(ladder[s], f"{part}_bytes") / 1e9)
                for part, name in PARTS for s in memory.STAGES]
    top_row = len(segments) - len(memory.STAGES)
    below = dict.fromkeys(memory.STAGES, 0.0)
    bases, heights = [], []
    for s, _, _, size in segments:
        base = max(below[s], floor)
        bases.append(base)
        heights.append(max(below[s] + size - base, 0.0))
        below[s] += size
    verdict = {s: fmt.gigabytes(ladder[s].total_bytes) + ("" if fits[s] else "<br>does not fit") for s in memory.STAGES}
    data = [{
        "type": "bar",
        "x": [labels[s] for s, _, _, _ in segments],
        "y": heights,
        "base": bases,
        "text": [""] * top_row + [verdict[s] for s, _, _, _ in segments[top_row:]],
        "textposition": "outside",
        "constraintext": "none",
        "textfont": {"size": 12, "color": [palette.plot("capacity" if fits[s] else "warn") for s, _, _, _ in segments]},
        "cliponaxis": False,
        "customdata": [[name, size] for _, name, _, size in segments],
        "marker": {"color": [color for _, _, color, _ in segments], "opacity": [opacity[s] for s, _, _, _ in segments]},
        "hovertemplate": "%{x}<br>%{customdata[0]}: %{customdata[1]:.3g} GB<extra></extra>",
        "showlegend": False,
    }]
    decades = range(math.ceil(bottom), math.floor(top) + 1)
    hbm_gb = gpu.hbm_bytes / 1e9
    layout = {
        "barmode": "overlay",
        "showlegend": False,
        "dragmode": False,  # a ladder of four bars has nothing to zoom into; no drag layers to redraw
        "height": 380,
        "margin": {"l": 64, "r": 10, "t": 44, "b": 60},
        "xaxis": {"fixedrange": True},
        # Decades named in bytes (GB are 10⁹ bytes), set here: no axis title, redrawn on every
        # move (~1 ms); the log scale is said in the key above the plot. ticklabeloverflow
        # "allow": the default ("hide past div") measures every tick label once per label on
        # each redraw; these labels sit in a fixed margin and cannot overflow.
        "yaxis": {"type": "log", "range": [bottom, top], "fixedrange": True, "tickvals": [10.0 ** d for d in decades],
                  "ticktext": [fmt.data_size(10.0 ** d * 1e9) for d in decades], "ticklabeloverflow": "allow"},
        "shapes": [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": hbm_gb, "y1": hbm_gb,
                    "line": {"color": palette.plot("capacity"), "width": 2, "dash": "dash"}}],
        "annotations": [{"xref": "paper", "yref": "paper", "x": 0, "y": 1, "xanchor": "left", "yanchor": "bottom",
                         "showarrow": False, "align": "left", "font": {"size": 12},
                         "text": f"- - - HBM of one {gpu.short_name}: {fmt.gigabytes(gpu.hbm_bytes)}<br>"
                                 "log scale \u00b7 each colour ends at its running total"}],
    }
    states = ladder[chosen]
    stage_name = memory.STAGE_LABELS[chosen]
    psi = memory.comm_volume_psi(chosen)
    share = memory.ledger_fraction(state["N"], chosen, param_bytes=optimizer.param_bytes,
                                   grad_bytes=optimizer.grad_bytes, optimizer_bytes=optimizer.optimizer_bytes)
    readouts = (
        Readout("per_device_bytes", f"{stage_name}, per device", fmt.gigabytes(states.total_bytes), states.total_bytes),
        *(Readout(f"{part}_bytes", name.lower(), fmt.gigabytes(getattr(states, f"{part}_bytes")),
                  getattr(states, f"{part}_bytes"), part)
          for part, name in PARTS),
        Readout(
            "comm_psi",
            "communication per step",
            f"{psi:g}Ψ = {fmt.si_count(memory.comm_volume_elements(state['params'], chosen))} elements per device",
            psi,
        ),
        Readout("ledger_fraction", "share of the unsharded ledger", fmt.percent(share), share),
        Readout("fits", f"fits in one {gpu.short_name} ({fmt.gigabytes(gpu.hbm_bytes)})",
                "yes" if fits[chosen] else f"no: {fmt.gigabytes(states.total_bytes - gpu.hbm_bytes)} too much",
                int(fits[chosen]), None if fits[chosen] else "warn"),
    )
    alt = (
        f"Stacked bars, on a log scale, of per-device model-state bytes at {fmt.si_count(state['params'])} parameters, "
        f"sharded {state['N']} ways, {optimizer.label}: "
        + ", ".join(f"{memory.STAGE_LABELS[s]} {fmt.gigabytes(ladder[s].total_bytes)}"
                    + ("" if fits[s] else " (does not fit)") for s in memory.STAGES)
        + f", against the {fmt.gigabytes(gpu.hbm_bytes)} of HBM of one {gpu.name}. {stage_name} is highlighted."
    )
    note = ("" if fits[chosen] else
            f"{stage_name} does not fit: its model states alone need {fmt.gigabytes(states.total_bytes)} per device, "
            f"and one {gpu.short_name} has {fmt.gigabytes(gpu.hbm_bytes)}, before any activation.")
    return View(plot={"data": data, "layout": layout}, readouts=readouts, alt=alt, note=note)
