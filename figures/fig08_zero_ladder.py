"""Figure 08: the ZeRO ladder — per-device model-state bytes for DDP and ZeRO-1/2/3."""
import math

from figures import palette
from figures.contract import Readout, Select, Slider, View
from models import fmt, hardware, memory

NUMBER = 8
TITLE = "The ZeRO ladder"
CAPTION = (
    "Per-device bytes of parameters, gradients and optimizer state, and their total, under plain data parallelism and "
    "the three ZeRO stages, side by side. The default, 7.5B parameters sharded 64 ways, gives the ZeRO paper's "
    "120 / 31.4 / 16.6 / 1.88 GB."
)
NOTE = (
    "Sizes are in decimal GB (10⁹ bytes), on a log scale, so nothing is stacked: every bar rises from the floor to "
    "its own size. Under each stage, its communication volume in units of Ψ and its total. As N grows, the bars of ZeRO-1 and ZeRO-2 stop shrinking; only ZeRO-3 shards every part of the ledger."
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
KEY = (("memory", "total"), ("params", "parameters"), ("grads", "gradients"), ("optimizer", "optimizer state"))
KEY_ROW_PX = 17
VERDICT_DROP_PX = 54  # under the three lines of a stage's name
TOTAL_WIDTH, PART_WIDTH, PART_OFFSETS = 0.84, 0.24, (-0.26, 0.0, 0.26)  # in stages (one apart on the x axis)


def _log_range(low, high, plot_px=248, headroom_px=12):
    """The y axis, in decades: from the decade at or below ``low`` to above ``high``, with
    ``headroom_px`` left over the tallest bar (its total is named under the axis)."""
    bottom = math.floor(math.log10(low))
    top = math.log10(high)
    top += (top - bottom) * headroom_px / (plot_px - headroom_px)
    return bottom, top


def _key():
    """The bars' colours, two to a row over the plot (a phone's chart is ~290 px wide): a
    square in the colour (a font colour, so a dark page recolours it with the bars) and the
    name in ink."""
    items = []
    for k, (part, name) in enumerate(KEY):
        where = {"xref": "paper", "yref": "paper", "x": 0.5 * (k % 2), "y": 1, "xanchor": "left", "yanchor": "bottom",
                 "showarrow": False, "yshift": KEY_ROW_PX * (1 - k // 2)}
        items += [{**where, "text": "\u25a0", "font": {"size": 12, "color": palette.plot(part)}},
                  {**where, "text": name, "font": {"size": 12}, "xshift": 14}]
    return items


def render(state):
    optimizer = memory.OPTIMIZERS[state["optimizer"]]
    gpu = hardware.gpu(state["gpu"])
    chosen = state["stage"]
    ladder = {s: memory.model_states_for(state["params"], state["N"], s, state["optimizer"]) for s in memory.STAGES}
    fits = {s: ladder[s].total_bytes <= gpu.hbm_bytes for s in memory.STAGES}
    opacity = {s: 1.0 if s == chosen else 0.35 for s in memory.STAGES}
    # A log axis: at 1T parameters DDP holds 16 TB a device and ZeRO-3 on 1,024 GPUs 15.6 GB,
    # a bar a thousand times shorter; on a linear axis it (and the HBM line) would be under a pixel.
    # On a log axis a stack lies (a part's share of a bar is not its share of the bytes), so
    # nothing is stacked: each stage is its total (a wide bar) with its three parts side by
    # side in front of it, every bar from the axis floor to its own value.
    totals = {s: ladder[s].total_bytes / 1e9 for s in memory.STAGES}
    parts_gb = [getattr(ladder[s], f"{part}_bytes") / 1e9 for s in memory.STAGES for part, _ in PARTS]
    bottom, top = _log_range(min(min(parts_gb + list(totals.values())), gpu.hbm_bytes / 1e9) / 4,
                             max(max(totals.values()), gpu.hbm_bytes / 1e9))
    floor = 10.0 ** bottom
    bars = []  # (stage, x, width, name, colour key, GB): the total first, its parts drawn over it
    for s in memory.STAGES:
        bars.append((s, s, TOTAL_WIDTH, "Total", "memory", totals[s]))
        bars += [(s, s + offset, PART_WIDTH, name, part, getattr(ladder[s], f"{part}_bytes") / 1e9)
                 for (part, name), offset in zip(PARTS, PART_OFFSETS)]
    data = [{
        "type": "bar",
        "x": [x for _, x, _, _, _, _ in bars],
        "width": [width for _, _, width, _, _, _ in bars],
        "y": [max(size - floor, 0.0) for *_, size in bars],
        "base": [floor] * len(bars),
        "text": [""] * len(bars),  # each stage's total is named under it, never beside the HBM line
        "customdata": [[memory.STAGE_LABELS[s], name, size] for s, _, _, name, _, size in bars],
        "marker": {"color": [palette.plot(key) for *_, key, _ in bars], "opacity": [opacity[s] for s, *_ in bars]},
        "hovertemplate": "%{customdata[0]}<br>%{customdata[1]}: %{customdata[2]:.3g} GB<extra></extra>",
        "showlegend": False,
    }]
    ticks = [f"{memory.STAGE_LABELS[s]}<br>{memory.comm_volume_psi(s):g}Ψ comm<br>{fmt.gigabytes(ladder[s].total_bytes)}"
             for s in memory.STAGES]
    # under a stage that does not fit, in the colour of bad: two lines, as a phone's stage is ~65 px wide
    verdicts = [{"xref": "x", "yref": "paper", "x": s, "y": 0, "yanchor": "top", "yshift": -VERDICT_DROP_PX,
                 "showarrow": False, "text": "does not<br>fit", "font": {"size": 12, "color": palette.plot("warn")}}
                for s in memory.STAGES if not fits[s]]
    decades = range(math.ceil(bottom), math.floor(top) + 1)
    hbm_gb = gpu.hbm_bytes / 1e9
    layout = {
        "barmode": "overlay",
        "showlegend": False,
        "dragmode": False,  # a ladder of four stages has nothing to zoom into; no drag layers to redraw
        "height": 420,
        "margin": {"l": 64, "r": 10, "t": 96, "b": 60 if all(fits.values()) else 92},
        # upright names (plotly tilts crowded ones), one stage per quarter of the width
        "xaxis": {"fixedrange": True, "range": [-0.5, len(memory.STAGES) - 0.5], "tickvals": list(memory.STAGES),
                  "tickangle": 0, "tickfont": {"size": 12}, "showgrid": False,
                  "ticktext": ticks, "ticklabeloverflow": "allow", "zeroline": False},
        # Decades named in bytes (GB are 10⁹ bytes), set here: no axis title, redrawn on every
        # move (~1 ms); the log scale is said in the key above the plot. ticklabeloverflow
        # "allow": the default ("hide past div") measures every tick label once per label on
        # each redraw; these labels sit in a fixed margin and cannot overflow.
        "yaxis": {"type": "log", "range": [bottom, top], "fixedrange": True, "tickvals": [10.0 ** d for d in decades],
                  "ticktext": [fmt.data_size(10.0 ** d * 1e9) for d in decades], "ticklabeloverflow": "allow"},
        "shapes": [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": hbm_gb, "y1": hbm_gb,
                    "line": {"color": palette.plot("capacity"), "width": 2, "dash": "dash"}}],
        "annotations": [{"xref": "paper", "yref": "paper", "x": 0, "y": 1, "xanchor": "left", "yanchor": "bottom",
                         "showarrow": False, "align": "left", "font": {"size": 12}, "yshift": 2 * KEY_ROW_PX,
                         "text": f"- - - HBM of one {gpu.short_name}: {fmt.gigabytes(gpu.hbm_bytes)}<br>"
                                 "log scale, every bar from the floor"}] + _key() + verdicts,
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
        f"Bars, on a log scale, of per-device model-state bytes (each stage's total and its three parts side by side) at {fmt.si_count(state['params'])} parameters, "
        f"sharded {state['N']} ways, {optimizer.label}: "
        + ", ".join(f"{memory.STAGE_LABELS[s]} {fmt.gigabytes(ladder[s].total_bytes)}"
                    + ("" if fits[s] else " (does not fit)") for s in memory.STAGES)
        + f", against the {fmt.gigabytes(gpu.hbm_bytes)} of HBM of one {gpu.name}. {stage_name} is highlighted."
    )
    note = ("" if fits[chosen] else
            f"{stage_name} does not fit: its model states alone need {fmt.gigabytes(states.total_bytes)} per device, "
            f"and one {gpu.short_name} has {fmt.gigabytes(gpu.hbm_bytes)}, before any activation.")
    return View(plot={"data": data, "layout": layout}, readouts=readouts, alt=alt, note=note)
