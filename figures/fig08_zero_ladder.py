"""Figure 08: the ZeRO ladder — per-device model-state bytes for DDP and ZeRO-1/2/3."""
from figures import palette
from figures.contract import Readout, Select, Slider, View
from models import fmt, memory

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
)

PARTS = (("params", "Parameters"), ("grads", "Gradients"), ("optimizer", "Optimizer state"))  # palette keys


def render(state):
    optimizer = memory.OPTIMIZERS[state["optimizer"]]
    chosen = state["stage"]
    ladder = {s: memory.model_states_for(state["params"], state["N"], s, state["optimizer"]) for s in memory.STAGES}
    labels = {s: f"{memory.STAGE_LABELS[s]}<br>{memory.comm_volume_psi(s):g}Ψ comm" for s in memory.STAGES}
    opacity = {s: 1.0 if s == chosen else 0.35 for s in memory.STAGES}
    # One bar trace for all twelve segments (each stacked on its explicit base), with each
    # stack's total as the text of its top segment: plotly redraws one trace per move
    # instead of four, and the readouts carry the legend.
    segments = [(s, name, palette.plot(part), getattr(ladder[s], f"{part}_bytes") / 1e9)
                for part, name in PARTS for s in memory.STAGES]
    top = len(segments) - len(memory.STAGES)
    below = dict.fromkeys(memory.STAGES, 0.0)
    bases = []
    for s, _, _, height in segments:
        bases.append(below[s])
        below[s] += height
    data = [{
        "type": "bar",
        "x": [labels[s] for s, _, _, _ in segments],
        "y": [height for _, _, _, height in segments],
        "base": bases,
        "text": [""] * top + [fmt.gigabytes(ladder[s].total_bytes) for s, _, _, _ in segments[top:]],
        "textposition": "outside",
        "cliponaxis": False,
        "customdata": [name for _, name, _, _ in segments],
        "marker": {"color": [color for _, _, color, _ in segments], "opacity": [opacity[s] for s, _, _, _ in segments]},
        "hovertemplate": "%{x}<br>%{customdata}: %{y:.3g} GB<extra></extra>",
        "showlegend": False,
    }]
    layout = {
        "barmode": "overlay",
        "showlegend": False,
        "dragmode": False,  # a ladder of four bars has nothing to zoom into; no drag layers to redraw
        "height": 380,
        "margin": {"l": 64, "r": 10, "t": 30, "b": 60},
        "xaxis": {"fixedrange": True},
        # The unit rides on the tick labels (the caption says GB are 10⁹ bytes): an axis
        # title is redrawn on every move (~1 ms). ticklabeloverflow "allow": the default
        # ("hide past div") measures every tick label once per label on each redraw;
        # these labels sit in a fixed margin and cannot overflow.
        "yaxis": {"ticksuffix": " GB", "rangemode": "tozero", "fixedrange": True,
                  "nticks": 6, "ticklabeloverflow": "allow"},
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
    )
    alt = (
        f"Stacked bars of per-device model-state bytes at {fmt.si_count(state['params'])} parameters, "
        f"sharded {state['N']} ways, {optimizer.label}: "
        + ", ".join(f"{memory.STAGE_LABELS[s]} {fmt.gigabytes(ladder[s].total_bytes)}" for s in memory.STAGES)
        + f". {stage_name} is highlighted."
    )
    return View(plot={"data": data, "layout": layout}, readouts=readouts, alt=alt)
