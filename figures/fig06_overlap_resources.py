"""Figure 06: the three resources a "free" overlap consumes -- link, SMs, HBM bandwidth."""
from figures import svg
from figures.contract import Readout, Select, Slider, View, log_stops
from models import fmt, hardware, overlap

NUMBER = 6
TITLE = "The three resources a \u201cfree\u201d overlap actually consumes"
CAPTION = (
    "A GEMM and a ring AllReduce start together, and the gauges show what the collective takes from the GEMM while "
    "it runs: its link, the SMs its NCCL channels hold, and a share of HBM bandwidth."
)
NOTE = (
    "Below the gauges, the timeline a diagram draws sits above the one a profiler records, where the GEMM runs "
    "slower for as long as the collective is on. The overlap efficiency is the share of the collective's time that "
    "really comes off the step."
)
TRIES = (
    ("64 NCCL channels", {"channels": 64}),
    ("A mostly memory-bound GEMM", {"mem_bound": 0.8}),
    ("A 50 GB/s link", {"bw_GBps": 50}),
)

# The GPU whose SMs (and HBM bandwidth) the collective shares, by its SM count.
GPU_BY_SMS = {108: "a100_80gb", 132: "h100_sxm", 148: "b200", 304: "mi300x"}

CONTROLS = (
    Slider("compute_ms", "GEMM alone", stops=log_stops(0.1, 1000, (1, 2, 5)), default=10, unit="ms"),
    Slider("comm_mb", "Bytes the collective moves", stops=log_stops(1, 10000, (1, 2, 5)), default=2000, unit="MB"),
    Slider("bw_GBps", "Link bandwidth", stops=tuple(sorted(log_stops(10, 1000, (1, 2, 5)) + (25, 450, 900))),
           default=450, unit="GB/s"),
    Slider("channels", "NCCL channels", stops=tuple(2**k for k in range(7)), default=16),
    Select("sms", "SMs on the GPU", options=tuple(
        (n, f"{n} ({hardware.GPUS[key].short_name})")
        for n, key in GPU_BY_SMS.items()), default=132),
    Slider("mem_bound", "Memory-bound share of the GEMM", stops=tuple(i / 10 for i in range(11)), default=0.3,
           format=lambda v: fmt.percent(v, 0)),
)
PRIMARY = ("comm_mb", "channels")  # what the collective moves, and the SMs its channels hold

WIDTH, X0, X1 = 400, 4, 392
GAUGE_TOP, GAUGE_PITCH, BAR = 26, 68, 19
LANES_TOP, LANE_PITCH, LANE = 264, 76, 18
SHORT_GAP = 24  # between the gauges and the timelines on a short screen (a phone on its side)


def _gauges(parts, r, state, hbm_bps):
    """The three resources as bars: the collective's share in purple, the rest empty; what is
    left for the GEMM is said under each bar, never on it."""
    gauges = (
        ("Link", 1.0, f"{fmt.decimal(state['bw_GBps'])} GB/s, all of it, for {fmt.duration(r.comm_s)}"),
        ("SMs", r.sm_share, f"{state['channels']} of {state['sms']} held by NCCL channels"),
        ("HBM bandwidth", r.hbm_share, f"{fmt.data_size(r.hbm_traffic_bytes_per_s)}/s of "
                                       f"{fmt.data_size(hbm_bps)}/s"),
    )
    parts.append(svg.text(0, 15, "What the collective takes while it runs", class_="svg-label svg-strong"))
    for i, (name, share, detail) in enumerate(gauges):
        y = GAUGE_TOP + i * GAUGE_PITCH
        taken = (X1 - X0) * share
        rest = ("the GEMM needs none of it" if name == "Link"
                else f"{fmt.percent(share, 0)} taken, {fmt.percent(1 - share, 0)} left for the GEMM")
        parts += [
            svg.text(X0, y + 13, f"{name}: {detail}", class_="svg-label"),
            svg.boxes([(X0, y + 19, X1 - X0, BAR)], class_="svg-lane"),
            svg.boxes([(X0, y + 19, taken, BAR)], class_="fill-comm"),
            svg.text(X1, y + 55, rest, class_="svg-label-soft", text_anchor="end"),
        ]


def _timeline(parts, r, state):
    res = r.result
    longest = res.serial_step_s
    scale = (X1 - X0) / longest
    x = lambda t: X0 + t * scale  # noqa: E731 (a time scale)
    gemm = state["compute_ms"] / 1e3
    slowed_until = r.slowed_until_s
    # (title, GEMM bars (start, end, opacity), when the AllReduce starts, where its exposed part starts, step)
    rows = (
        ("What a timeline diagram draws", ((0, gemm, 1.0),), 0.0, gemm, res.nominal_step_s),
        ("What the profiler records", ((0, slowed_until, 0.45), (slowed_until, r.compute_overlapped_s, 1.0)), 0.0,
         r.compute_overlapped_s, res.step_s),
        ("No overlap at all", ((0, gemm, 1.0),), gemm, gemm, res.serial_step_s),
    )
    for i, (title, bars, comm_start, exposed_from, step) in enumerate(rows):
        y = LANES_TOP + i * LANE_PITCH
        comm_end = comm_start + r.comm_s
        key = f" {svg.KEY}" if i == 1 else ""  # the point: the profiler's slowed GEMM and exposed AllReduce
        parts += [
            svg.text(X0, y - 6, f"{title}: step {fmt.duration(step)}", class_="svg-label"),
            *(svg.boxes([(x(a), y, (b - a) * scale, LANE)], class_="fill-compute" + (key if o < 1 else ""), fill_opacity=o)
              for a, b, o in bars),
            svg.boxes([(x(comm_start), y + LANE + 3, r.comm_s * scale, LANE)], class_="fill-comm"),
            svg.boxes([(x(exposed_from), y + LANE + 3, max(0.0, comm_end - exposed_from) * scale, LANE)],
                      class_="fill-exposed" + key),
            svg.segments([(x(step), y - 2, x(step), y + 2 * LANE + 6)], class_="svg-ink", stroke_width=1.5),
        ]
    # In the profiler's row, what the faded stretch of the GEMM means: said in the lane of the
    # AllReduce that causes it, right after that bar (never on a bar); left out if it has no room.
    row = LANES_TOP + LANE_PITCH
    rate = fmt.percent(res.compute_rate_during_overlap, 0)
    baseline, step_x = row + 2 * LANE - 1, x(res.step_s)
    taken = [(X0, row + LANE + 3, r.comm_s * scale, LANE), (step_x - 1, row - 2, 2, 2 * LANE + 8)]
    for slowed in (f"GEMM at {rate} speed", f"GEMM at {rate}"):
        label = svg.Label(x(r.comm_s) + 6, baseline, slowed, alternatives=((step_x + 6, baseline, "start"),), moves=(),
                          class_="svg-label")
        [(at, _, _, box)] = svg.place_labels([label], (X0, row, X1 - X0, 2 * LANE + 6), obstacles=taken, compact=True)
        if not any(svg.boxes_touch(box, t) for t in taken):
            parts.append(svg.text(at, baseline, slowed, class_="svg-label"))
            break
    axis_y = LANES_TOP + 3 * LANE_PITCH - 10
    parts.append(svg.time_axis(X0, X1, axis_y, longest, "{unit}; slate GEMM, purple AllReduce, red exposed",
                               width=WIDTH, compact=True))
    return axis_y + 46


def render(state, short=False):
    gpu = hardware.gpu(GPU_BY_SMS[state["sms"]])
    r = overlap.three_resource_overlap(
        state["compute_ms"] / 1e3, state["comm_mb"] * 1e6, state["bw_GBps"] * 1e9, channels=state["channels"],
        sm_count=state["sms"], mem_bound=state["mem_bound"], hbm_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s)
    parts, timelines = [], []
    _gauges(parts, r, state, gpu.hbm_bandwidth_bytes_per_s)
    height, width = _timeline(timelines, r, state), WIDTH
    if short:  # a phone on its side: the timelines beside the gauges, their tops level
        lift = LANES_TOP - GAUGE_TOP - 16
        parts.append(svg.group(timelines, transform=f"translate({WIDTH + SHORT_GAP} {-lift})"))
        height, width = max(GAUGE_TOP + 3 * GAUGE_PITCH, height - lift), 2 * WIDTH + SHORT_GAP
    else:
        parts += timelines
    drawing = svg.document(width, height, parts, class_="svg-compact",
                           label="Three gauges of what an overlapped collective takes, and the step it leaves")
    res = r.result
    readouts = (
        Readout("overlap_efficiency", "overlap efficiency", fmt.percent(r.overlap_efficiency, 0), r.overlap_efficiency),
        Readout("exposed_comm_s", "exposed communication", fmt.duration(r.exposed_comm_s), r.exposed_comm_s, "exposed"),
        Readout("compute_slowdown", "GEMM time, overlapped / alone", f"{r.compute_slowdown:.3f}\u00d7", r.compute_slowdown,
                "compute"),
        Readout("step_time_s", "step", fmt.duration(r.step_s), r.step_s),
        Readout("nominal_step_s", "step in the diagram", fmt.duration(res.nominal_step_s), res.nominal_step_s),
        Readout("comm_s", "AllReduce on an idle link", fmt.duration(r.comm_s), r.comm_s, "comm"),
    )
    alt = (
        f"Gauges: the AllReduce uses its whole {fmt.decimal(state['bw_GBps'])} GB/s link for {fmt.duration(r.comm_s)}, "
        f"holds {fmt.percent(r.sm_share)} of the {state['sms']} SMs and takes {fmt.percent(r.hbm_share)} of the "
        f"{gpu.name}'s HBM bandwidth. Timelines: the diagram's step is {fmt.duration(res.nominal_step_s)}; with the "
        f"GEMM slowed to {fmt.percent(res.compute_rate_during_overlap)} while the collective runs, the measured step is "
        f"{fmt.duration(r.step_s)} ({fmt.duration(r.exposed_comm_s)} exposed); without overlap it would be "
        f"{fmt.duration(res.serial_step_s)}. Overlap efficiency {fmt.percent(r.overlap_efficiency)}."
    )
    note = ("At this link speed the AllReduce's memory traffic would exceed the GPU's HBM bandwidth; the model caps "
            "its share at 100% and still runs it at link speed, so its own slowdown is not shown." if r.hbm_share >= 1 else "")
    return View(svg=drawing, readouts=readouts, alt=alt, note=note)
