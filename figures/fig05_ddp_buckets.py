"""Figure 05: gradient buckets firing during the backward pass (PyTorch DDP's bucketing rules)."""
from figures import svg
from figures.contract import Readout, Slider, View, log_stops
from models import ddp, fmt

NUMBER = 5
TITLE = "Gradient buckets firing during the backward pass"
CAPTION = (
    "Gradients drop into buckets as the backward pass runs from the last layer to the first, and each full bucket "
    "launches a ring AllReduce over 64 ranks; whatever still runs after the backward ends is the exposed tail. "
    "Find the bucket cap that makes it shortest."
)
NOTE = (
    "The top lane is backward compute (dark slate) and the one beneath it communication (purple); the grey start of each "
    "transfer is its 2(N−1)α of latency, and the exposed tail is drawn in red. Buckets fill in PyTorch "
    "DDP's order: a first bucket of 1 MiB, then buckets of the cap."
)
TRIES = (
    ("1 MiB buckets", {"bucket_mb": 1}),
    ("1 GiB buckets", {"bucket_mb": 1024}),
    ("A 450 GB/s link", {"bw_GBps": 450}),
)

RANKS = 64  # eight nodes of eight GPUs: the ring the buckets reduce over
MODEL_SIZES = tuple(int(b * 1e9) for b in (0.125, 0.35, 0.76, 1.3, 2.7, 6.7, 13, 30, 70, 175, 1000))  # GPT-3 family, 70B, 1T

CONTROLS = (
    Slider("bucket_mb", "Bucket cap (bucket_cap_mb)", stops=(1, 2, 5, 10, 20, 25, 50, 100, 200, 500, 1024),
           default=ddp.DEFAULT_BUCKET_CAP_MB, unit="MiB"),
    Slider("params", "Parameters \u03a8", stops=MODEL_SIZES, default=1_300_000_000, format=fmt.si_count),
    Slider("layers", "Layers (one gradient tensor each)", stops=tuple(2**k for k in range(11)), default=256),
    Slider("bw_GBps", "Link bandwidth per rank", stops=tuple(sorted(log_stops(1, 1000, (1, 2, 5)) + (25, 450))),
           default=50, unit="GB/s"),
    Slider("alpha_us", "Latency \u03b1 per ring step", stops=log_stops(1, 100, (1, 2, 5)), default=5, unit="\u00b5s"),
    Slider("backward_ms", "Backward compute", stops=log_stops(10, 10000, (1, 2, 5)), default=200, unit="ms"),
)
PRIMARY = ("bucket_mb", "bw_GBps")

WIDTH, X0, X1 = 400, 4, 386
COMPUTE_Y, COMM_Y, LANE = 72, 126, 22
US = 1e6  # the lanes' clock: whole microseconds keep a thousand bars' path short


def _bars(starts_s, lengths_s, counts):
    """Lane rows for ``svg.lanes``: bars grouped by (parity, length), in microseconds; buckets of
    equal size have equal lengths, so a thousand buckets make at most four rows."""
    rows = {}
    for index, (start, length, count) in enumerate(zip(starts_s, lengths_s, counts)):
        rows.setdefault((index % 2, count, max(1, round(length * US))), []).append(round(start * US))
    return rows


def _lane(rows, y, scale, colour, bright_opacity=1.0):
    return [svg.lanes([(0, length, starts)], x=X0, y=y, x_scale=scale / US, lane_height=LANE, fill_ratio=1.0,
                      class_=f"stroke-{colour}", stroke_opacity=bright_opacity if parity == 0 else 0.6)
            for (parity, _, length), starts in rows.items()]


def render(state):
    step = ddp.uniform_step(state["params"], state["layers"], state["backward_ms"] / 1e3, ranks=RANKS,
                            alpha_s=state["alpha_us"] * 1e-6, bandwidth_bytes_per_s=state["bw_GBps"] * 1e9,
                            bucket_cap_mb=state["bucket_mb"])
    buckets = len(step.bucket_layers)
    end = max(step.comm_end_s, step.backward_end_s)
    scale = (X1 - X0) / end
    x = lambda t: X0 + t * scale  # noqa: E731 (a time scale)
    backward_end = x(step.backward_end_s)
    parts = [
        svg.text(0, 14, f"{fmt.count(buckets)} bucket{'s' if buckets > 1 else ''}: 1 MiB first, then "
                        f"{fmt.count(state['bucket_mb'])} MiB caps", class_="svg-label svg-strong"),
        svg.text(0, 34, f"each layer adds {fmt.data_size(step.layer_bytes)} of bf16 gradients", class_="svg-label-soft"),
        svg.text(X0, COMPUTE_Y - 6, f"backward: layer {state['layers'] - 1} first, layer 0 last", class_="svg-label"),
        svg.text(X0, COMM_Y - 6, f"ring AllReduce of each bucket over {RANKS} ranks", class_="svg-label"),
        *_lane(_bars(step.backward_start_s, step.backward_s, step.bucket_layers), COMPUTE_Y, scale, "backward"),
        *_lane(_bars(step.start_s, step.comm_s, step.bucket_layers), COMM_Y, scale, "comm", 1.0),
        svg.lanes([(0, max(1, round(step.latency_s * US)), [round(t * US) for t in step.start_s])], x=X0, y=COMM_Y,
                  x_scale=scale / US, lane_height=LANE, fill_ratio=1.0, class_="stroke-idle"),
    ]
    if buckets <= 128:  # where each bucket's last gradient lands
        parts.append(svg.segments([(x(t), COMPUTE_Y + LANE, x(t), COMPUTE_Y + LANE + 5) for t in step.ready_s],
                                  class_="svg-axis"))
    if step.exposed_comm_s > 0:
        parts.append(svg.boxes([(backward_end, COMM_Y + LANE + 3, x(step.comm_end_s) - backward_end, 6)],
                               class_=f"fill-exposed {svg.KEY}"))
        label_x = min(max(backward_end, X0 + 150), X1)
        parts.append(svg.text(label_x, COMM_Y + LANE + 26, f"exposed tail {fmt.duration(step.exposed_comm_s)}",
                              class_="svg-label", text_anchor="end" if label_x > X1 - 150 else "start"))
    # where the backward pass ends and the exposed tail starts: with the tail, the figure's point
    parts.append(svg.segments([(backward_end, COMPUTE_Y - 2, backward_end, COMM_Y + LANE + 10)], class_=f"svg-ink {svg.KEY}",
                              stroke_width=1.5, stroke_dasharray="3 2"))
    axis_y = COMM_Y + LANE + 46
    parts.append(svg.time_axis(X0, X1, axis_y, end, "{unit} from the start of the backward pass"))
    drawing = svg.document(WIDTH, axis_y + 46, parts, class_="svg-compact",
                           label="Backward compute lane and bucketed AllReduce lane of one DDP step")
    readouts = (
        Readout("buckets", "buckets", fmt.count(buckets), buckets),
        Readout("exposed_comm_s", "exposed tail", fmt.duration(step.exposed_comm_s), step.exposed_comm_s,
                "exposed" if step.exposed_comm_s > 0 else None),
        Readout("step_comm_s", "AllReduce time, all buckets", fmt.duration(step.total_comm_s), step.total_comm_s, "comm"),
        Readout("overlap_fraction", "hidden under backward", fmt.percent(step.overlap_fraction), step.overlap_fraction),
        Readout("latency_s", "of which latency (\u03b1)", fmt.duration(step.latency_total_s), step.latency_total_s, "idle"),
        Readout("backward_s", "backward", fmt.duration(step.backward_end_s), step.backward_end_s, "backward"),
    )
    alt = (
        f"A {fmt.duration(step.backward_end_s)} backward pass over {state['layers']} layers of a "
        f"{fmt.si_count(state['params'])}-parameter model fills {buckets} buckets (cap {state['bucket_mb']} MiB); "
        f"their AllReduces take {fmt.duration(step.total_comm_s)} in all, {fmt.percent(step.overlap_fraction)} of it "
        f"under the backward pass, leaving an exposed tail of {fmt.duration(step.exposed_comm_s)}."
    )
    return View(svg=drawing, readouts=readouts, alt=alt)
