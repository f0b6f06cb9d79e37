"""Figure 24: how a distributed run hangs: four ranks, their pending collectives, the watchdog."""
from dataclasses import dataclass, replace
from functools import lru_cache

from figures import html, svg
from figures.contract import Readout, Select, Slider, View
from models import fmt, reliability

NUMBER = 24
TITLE = "How a distributed run hangs"
CAPTION = (
    "Four ranks (2-way tensor × 2-way data parallel) on one clock: pick a fault and watch who waits on whom "
    "until the watchdog fires. Below, what a flight-recorder dump would hold and what to grep for."
)
NOTE = (
    "Slate is compute, purple a collective moving data, grey a rank waiting inside a collective for its peers, and "
    "red a rank parked in a collective that can never complete; the red dot marks the rank at fault, where the "
    "fault strikes. The bar on top is the whole run: training until the fault, then the time lost until the "
    "watchdog fires, so moving the fault's time rescales it. The graph on the right shows who waits on whom."
)
TRIES = (
    ("A dead rank", {"fault": "dead_rank"}),
    ("Stuck in I/O", {"fault": "io_stall"}),
    ("Stuck in I/O, 1 h timeout", {"fault": "io_stall", "timeout_s": 3600}),
    ("A slow rank, 2 s timeout", {"fault": "slow_rank", "timeout_s": 2}),
)

FAULTS = ("divergent_control_flow", "mismatched_order", "mismatched_shapes", "wrong_process_group", "dead_rank",
          "io_stall", "slow_rank", "healthy")
CONTROLS = (
    Select("fault", "Fault", options=tuple((k, reliability.HANG_PRESETS[k].title) for k in FAULTS),
           default="divergent_control_flow"),
    Slider("timeout_s", "Watchdog timeout", stops=(2, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600),
           default=int(reliability.DEFAULT_NCCL_TIMEOUT_S), format=fmt.duration),
    Slider("at_s", "The fault happens at", stops=(10, 30, 60, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400),
           default=3600, format=fmt.duration),
)
PRIMARY = ("fault",)  # the story: which fault; the timeout and its time are details

W, LEFT, RIGHT, TOP, ROW, BAR = 720, 62, 546, 82, 50, 18
BOTTOM = TOP + 4 * ROW
RUN_Y = 24  # the run's whole clock, from its start to the watchdog, above the step's lanes
GAP_S, PAD_S, BREAK_PX, MIN_SEGMENT_PX = 8.0, 0.2, 34, 56  # idle stretches longer than GAP_S are cut
OPS = {"allreduce": "AllReduce", "allgather": "AllGather"}


@dataclass(frozen=True)
class _Layout:
    """Where things go. Wide: the lanes with the graph of who waits on whom to their right. Narrow
    (a phone): one column, long lines wrapped (``wrap``, from ``text_left``), the graph under the
    time axis, at most ``ticks`` round ticks on its first stretch of time."""
    width: float = W
    left: float = LEFT  # the lanes, from here to ``right``
    right: float = RIGHT
    top: float = TOP  # the first lane
    row: float = ROW  # from one lane to the next
    run_y: float = RUN_Y
    graph_x: float = 644  # the middle of the graph of who waits on whom ...
    graph_y: float = TOP  # ... and the line its title stands on
    text_left: float = LEFT  # where the run's caption and the lanes' captions start
    wrap: bool = False
    ticks: int = 6

    @property
    def bottom(self):
        return self.top + 4 * self.row

    def nodes(self):
        """The 2 x 2 mesh, TP groups in rows."""
        x, y = self.graph_x, self.graph_y
        return {0: (x - 40, y + 50), 1: (x + 40, y + 50), 2: (x - 40, y + 140), 3: (x + 40, y + 140)}


WIDE = _Layout()
NARROW = _Layout(width=320, left=52, right=296, row=64, graph_x=160, text_left=6, wrap=True, ticks=3)
LINE, HEAD_LINE = 14, 15  # from one wrapped line of text to the next (narrow): 11 px captions, the 12 px header


def _lines(layout, x, content, class_):
    """``content`` as the lines it takes from ``x``: one, or (``layout.wrap``) as many as the
    drawing's width needs, never broken around a number ("rank 3", "ranks 0, 1, 2", "10 min")."""
    if not layout.wrap:
        return [content]
    return svg.wrap(content, layout.width - x, *svg.label_size(class_),
                    keep=lambda before, word: svg.with_its_unit(before, word) or word[:1].isdigit())


@lru_cache(maxsize=64)
def _timeline(fault, timeout_s, at_s):
    return reliability.hang_timeline(fault, timeout_s=timeout_s, at_s=at_s)


def _axis(layout, times):
    """A time axis cut at long idle stretches: [(t0, t1, x0, x1)] segments, padded by PAD_S."""
    LEFT, RIGHT = layout.left, layout.right
    segments = []
    for t in sorted(set(times)):
        if segments and t - segments[-1][1] <= GAP_S:
            segments[-1][1] = t
        else:
            segments.append([t, t])
    span = RIGHT - LEFT - BREAK_PX * (len(segments) - 1)
    total = sum(b - a + 2 * PAD_S for a, b in segments)
    widths = [max(MIN_SEGMENT_PX, span * (b - a + 2 * PAD_S) / total) for a, b in segments]
    scale, x, axis = span / sum(widths), LEFT, []
    for (a, b), width in zip(segments, widths):
        axis.append((a - PAD_S, b + PAD_S, x, x + width * scale))
        x += width * scale + BREAK_PX
    return axis


def _x(axis, t):
    for t0, t1, x0, x1 in axis:
        if t <= t1:
            return x0 + (max(t, t0) - t0) / (t1 - t0) * (x1 - x0)
    return axis[-1][3]


def _ranks(ranks):
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _call(record):
    return f"{record.call.label} ({reliability.GROUP_NAMES[record.call.group]} #{fmt.count(record.group_seq)})"


def render(state, narrow=False):
    layout = NARROW if narrow else WIDE
    t = _timeline(state["fault"], state["timeout_s"], state["at_s"])
    end = t.watchdog_at_s if t.watchdog_at_s is not None else max(r.ended_s for r in t.records)  # the job dies here
    events = [t.step_start_s, end] + [v for r in t.records for v in (r.entered_s, r.started_s, r.ended_s)
                                      if v is not None and v <= end] + list(t.dead_at_s.values())
    axis = _axis(layout, events)
    x = lambda when: _x(axis, min(when, end))  # noqa: E731
    waits = t.waits_at(end if t.watchdog_at_s is not None or t.fault_s is None else t.fault_s)
    culprits = reliability.culprits(state["fault"])
    header = (f"{t.scenario.title}: a step {fmt.duration(t.step_start_s)} into the run" if t.fault_s is None else
              f"{t.scenario.title}: the fault, on {_ranks(culprits)} (red dot), {fmt.duration(t.fault_s)} into the run")
    header = _lines(layout, 6, header, "svg-label")
    if layout.wrap:  # one column: what is under the header and the run's caption moves down as they wrap
        layout = replace(layout, run_y=layout.run_y + HEAD_LINE * (len(header) - 1))
    run, caption_lines = _run(layout, t, end)
    if layout.wrap:
        layout = replace(layout, top=layout.run_y + 24 + LINE * (caption_lines - 1) + 40)
        layout = replace(layout, graph_y=layout.bottom + 72)
    TOP, BOTTOM, ROW = layout.top, layout.bottom, layout.row
    parts = [svg.texts(((6, 14 + HEAD_LINE * k, line) for k, line in enumerate(header)), class_="svg-label"), *run,
             *_lanes(layout, t, x, end, waits, axis), *_time_axis(layout, t, x, axis)]
    markers = [(t.fault_s, "fault", f"svg-ink svg-dash {svg.KEY}")] if t.fault_s is not None else []
    if t.first_stuck is not None:
        markers.append((t.watchdog_at_s, "watchdog fires", "stroke-warn"))
    names = []
    for when, name, style in markers:  # through the lanes, never across the words under them
        lines = [(x(when), TOP - 8, x(when), TOP)] + [(x(when), TOP + r * ROW - 3, x(when), TOP + r * ROW + BAR + 3)
                                                        for r in range(4)] + [(x(when), BOTTOM - 4, x(when), BOTTOM)]
        parts.append(svg.segments(lines, class_=style, stroke_width=2))
        if layout.wrap:  # kept inside the drawing and apart: the fault and the watchdog can be close
            names.append(svg.Label(x(when), TOP - 12, name, anchor="middle", moves=("up",), class_="svg-label"))
        else:
            parts.append(svg.text(x(when), TOP - 12, name, class_="svg-label", text_anchor="middle"))
    if names:
        parts.append(svg.labels(names, (0, TOP - 36, layout.width, 32)))
    if t.fault_s is not None:  # the rank at fault, where the fault strikes: the same meaning for every fault
        parts.append(svg.circles([(x(t.fault_s), TOP + r * ROW + BAR / 2, 4.5) for r in culprits], class_=f"fill-warn {svg.KEY}"))
    parts += _graph(layout, t, waits)
    height = layout.graph_y + 190 if layout.wrap else BOTTOM + 48
    drawing = svg.document(layout.width, height, parts, label=f"Four ranks on a timeline: {t.scenario.title}")
    return View(svg=drawing, readouts=_readouts(t), alt=_alt(t, waits, culprits, end), html=_dump(t, end),
                note=t.scenario.description.replace("`", ""))


def _run(layout, t, end):
    """The run's whole clock, from its start to the watchdog (or the step's end): training until the
    fault, then the GPUs waiting (red once nothing can complete), so the fault's time moves it.
    ``(parts, lines of its caption)``."""
    LEFT, RIGHT, RUN_Y = layout.left, layout.right, layout.run_y
    scale = (RIGHT - LEFT) / end
    fault = t.fault_s if t.fault_s is not None else end
    lost = max(3.0, (end - fault) * scale) if end > fault else 0.0
    after = {"hang": "with nothing able to complete until the watchdog fires",
             "watchdog": "of waiting until the watchdog fires (the step would have finished)",
             "completed": "of waiting, then the step completes"}[t.report.status]
    caption = (f"the run so far: {fmt.duration(fault)} of training, then {fmt.duration(end - fault)} {after}"
               if t.fault_s is not None else f"the run so far: {fmt.duration(fault)} of training, and this step completes")
    lines = _lines(layout, layout.text_left, caption, "svg-label-soft")
    return [svg.text(6, RUN_Y + 8, "run", class_="svg-label"),
            svg.boxes([(LEFT, RUN_Y, RIGHT - LEFT - lost, 9)], class_="fill-compute"),
            svg.boxes([(RIGHT - lost, RUN_Y, lost, 9)] if lost else [],
                      class_="fill-warn" if t.watchdog_at_s is not None else "fill-idle"),
            svg.texts(((layout.text_left, RUN_Y + 24 + LINE * k, line) for k, line in enumerate(lines)),
                      class_="svg-label-soft")], len(lines)


def _lanes(layout, t, x, end, waits, axis):
    """Each rank's lane: compute, waiting inside a collective, data moving, parked; then what it is doing at the end."""
    LEFT, RIGHT, TOP, ROW, BOTTOM = layout.left, layout.right, layout.top, layout.row, layout.bottom
    waiting, moving, parked, labels = [], [], [], []
    for r in t.records:
        if r.entered_s > end:
            continue
        y = TOP + r.rank * ROW
        if r.started_s is None:
            parked.append((x(r.entered_s), y, x(end) - x(r.entered_s), BAR))
        else:
            waiting.append((x(r.entered_s), y, x(r.started_s) - x(r.entered_s), BAR))
            moving.append((x(r.started_s), y, x(r.ended_s) - x(r.started_s), BAR))
    lanes = "svg-lane" if t.fault_s is not None else f"svg-lane {svg.KEY}"  # no fault: the step itself is the point
    parts = [svg.boxes(((LEFT, TOP + r * ROW, RIGHT - LEFT, BAR) for r in range(4)), class_=lanes),
             svg.texts(((6, TOP + r * ROW + 13, f"rank {r}") for r in range(4)), class_="svg-label"),
             svg.boxes(((x(a), TOP + r * ROW, x(b) - x(a), BAR) for r, a, b in t.compute if a < end), class_="fill-compute"),
             svg.boxes(waiting, class_="fill-idle"), svg.boxes(moving, class_="fill-comm"),
             svg.boxes(parked, class_="fill-warn svg-faint stroke-warn")]
    for rank in range(4):
        last = t.last_call_at(rank, end)
        waited = sorted({m for w, m in waits if w == rank})
        if rank in t.dead_at_s:
            text = f"gone: the process died after {_call(last)}"
            parts.append(svg.segments([(x(t.dead_at_s[rank]), TOP + rank * ROW + BAR / 2, x(end), TOP + rank * ROW + BAR / 2)],
                                      class_="stroke-warn svg-dash", stroke_width=2))
        elif waited:
            text = f"in {_call(last)}, waiting on {_ranks(waited)}"
        elif rank in t.report.finished_ranks and t.watchdog_at_s is None:
            text = "finished the step"
        else:
            text = "inside no collective: busy in its own code (I/O, compute, a loop)"
        labels += [(layout.text_left, TOP + rank * ROW + BAR + 14 + LINE * k, line)
                   for k, line in enumerate(_lines(layout, layout.text_left, text, "svg-label-soft"))]
    for (_, _, _, x1), (_, _, x0, _) in zip(axis, axis[1:]):  # the cuts in time: on each lane and the axis
        rows = [TOP + r * ROW for r in range(4)]
        parts += [svg.boxes([(x1 + 6, y - 2, x0 - x1 - 12, BAR + 4) for y in rows] + [(x1 + 6, BOTTOM - 2, x0 - x1 - 12, 4)],
                            class_="svg-panel-fill"),
                  svg.segments([(a, y + BAR + 3, a + 6, y - 3) for y in rows for a in (x1 + 9, x0 - 15)]
                               + [(a, BOTTOM + 4, a + 6, BOTTOM - 4) for a in (x1 + 9, x0 - 15)], class_="svg-ink")]
    return parts + [svg.texts(labels, class_="svg-label-soft svg-halo")]


def _time_axis(layout, t, x, axis):
    """Round ticks from the fault across the first stretch of time, one tick at the start of each later one."""
    LEFT, RIGHT, BOTTOM = layout.left, layout.right, layout.bottom
    origin = t.fault_s if t.fault_s is not None else t.step_start_s
    start, stop = axis[0][0], axis[0][1]
    step = next((s for s in (0.5, 1, 2, 5, 10, 30, 60) if (stop - start) / s <= layout.ticks), 300)
    ticks = [origin + k * step for k in range(int((start - origin) // step), int((stop - origin) // step) + 1)]
    ticks = [v for v in ticks if start <= v <= stop] + [s[0] + PAD_S for s in axis[1:]]
    names = ["0 s" if abs(v - origin) < 1e-9 else f"{'+' if v > origin else '-'}{fmt.duration(abs(v - origin))}" for v in ticks]
    return [svg.segments([(LEFT, BOTTOM, RIGHT, BOTTOM)] + [(x(v), BOTTOM, x(v), BOTTOM + 4) for v in ticks], class_="svg-axis"),
            svg.texts(((x(v), BOTTOM + 16 + 12 * (v > stop), name) for v, name in zip(ticks, names)),
                      class_="svg-label-soft", text_anchor="middle"),
            svg.text(RIGHT, BOTTOM + 42, "time from the fault" if t.fault_s is not None else "time from the step's start",
                     class_="svg-label-soft", text_anchor="end")]


def _graph(layout, t, waits):
    """Who waits on whom (at the watchdog, else at the fault): the 2 x 2 mesh, one arrow per wait."""
    NODES, middle, top = layout.nodes(), layout.graph_x, layout.graph_y
    shorten = lambda a, b, k: a + (b - a) * k  # noqa: E731
    edges = []
    for w, m in sorted(set(waits)):
        (x1, y1), (x2, y2) = NODES[w], NODES[m]
        length = ((x2 - x1) ** 2 + (y2 - y1) ** 2) ** 0.5
        edges.append((shorten(x1, x2, 22 / length), shorten(y1, y2, 22 / length),
                      shorten(x1, x2, 1 - 22 / length), shorten(y1, y2, 1 - 22 / length)))
    gone = [r for r in range(4) if r in t.dead_at_s]
    return [
        svg.text(middle, top - 12, "who waits on whom", class_="svg-label", text_anchor="middle"),
        svg.texts(((middle - 76, NODES[0][1] + 4, "tp0"), (middle - 76, NODES[2][1] + 4, "tp1"), (NODES[2][0], NODES[2][1] + 40, "dp0"),
                   (NODES[3][0], NODES[3][1] + 40, "dp1")), class_="svg-label-soft", text_anchor="middle"),
        svg.circles([(*NODES[r], 17) for r in range(4) if r not in gone], class_="svg-lane"),
        svg.circles([(*NODES[r], 17) for r in gone], class_="svg-lane stroke-warn svg-dash"),
        svg.segments([(NODES[r][0] + dx, NODES[r][1] - 12, NODES[r][0] - dx, NODES[r][1] + 12) for r in gone for dx in (-12, 12)],
                     class_="stroke-warn", stroke_width=1.5),
        svg.text(middle, top + 4, "at the watchdog" if t.watchdog_at_s is not None else "at the fault" if t.fault_s is not None
                 else "nobody waits", class_="svg-label-soft", text_anchor="middle"),
        svg.texts(((NODES[r][0], NODES[r][1] + 4, r) for r in range(4)), class_="svg-label", text_anchor="middle"),
        svg.arrows(edges, offset=4, class_="stroke-warn", stroke_width=1.6),
    ]


def _readouts(t):
    first = t.first_stuck
    outcome = {"hang": "a hang: nothing can complete", "watchdog": "killed by the watchdog, though it would finish",
               "completed": "every collective completes"}[t.report.status]
    return (
        Readout("blocked_ranks", "Ranks blocked when the watchdog fires", f"{len(t.blocked_ranks)} of 4", len(t.blocked_ranks)),
        Readout("detected_after_s", "Error after the fault",
                "never: no watchdog error" if t.detected_after_s is None else fmt.duration(t.detected_after_s), t.detected_after_s),
        Readout("first_stuck_call", "First stuck call", "none" if first is None else
                f"{OPS[first.call.op]} on rank {first.rank} ({first.call.label})", "none" if first is None else first.call.op),
        Readout("outcome", "Outcome", outcome, t.report.status),
        Readout("longest_wait_s", "Longest wait inside one collective", fmt.duration(t.longest_wait_s), t.longest_wait_s),
    )


def _alt(t, waits, culprits, end):
    who = "; ".join(f"rank {w} waits on rank {m}" for w, m in sorted(set(waits))) or "no rank waits"
    fired = ("the watchdog never fires" if t.watchdog_at_s is None else
             f"the watchdog fires {fmt.duration(t.detected_after_s)} after the fault, on rank {t.first_stuck.rank}")
    at = ("" if t.fault_s is None else f" The fault is on {_ranks(culprits)} (red dot), {fmt.duration(t.fault_s)} into "
          f"a run whose clock is drawn on top, {fmt.duration(end - t.fault_s)} of it after the fault.")
    return (f"Timeline of four ranks for {t.scenario.title.lower()} with a {fmt.duration(t.timeout_s)} timeout: "
            f"{len(t.blocked_ranks)} ranks blocked, {who}; {fired}.{at}")


def _dump(t, end):
    if t.watchdog_at_s is None:
        return html.join(html.heading("No watchdog error, so nothing is dumped"), html.paragraph(
            f"Every collective completed; the longest wait inside one was {fmt.duration(t.longest_wait_s)}. A slow rank or a "
            "long stall never shows up as a hang: find it in per-rank step times (Figure 25)."))
    rows = []
    for rank in range(4):
        last = t.last_call_at(rank, end)
        if rank in t.dead_at_s:
            rows.append((rank, "-", "-", "no dump: the process is gone", "-", "-"))
        else:
            rows.append((rank, reliability.GROUP_NAMES[last.call.group], fmt.count(last.group_seq),
                         f"{OPS[last.call.op]}: {last.call.label}", f"{fmt.count(last.numel_in)} → {fmt.count(last.numel_out)}",
                         last.state_at(end)))
    lines = ["$ grep -h 'Watchdog caught' rank*.log",
             "# each blocked rank prints one line when its own timer runs out (unless the launcher kills it first)"]
    pending = sorted((r for r in t.records if r.rank in t.blocked_ranks and r.entered_s <= end and
                      (r.started_s is None or r.started_s > end)), key=lambda r: (r.entered_s, r.rank))
    for r in pending:
        lines.append(f"[Rank {r.rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={r.group_seq}, "
                     f"OpType={r.call.op.upper()}, NumelIn={r.numel_in}, NumelOut={r.numel_out}, "
                     f"Timeout(ms)={round(t.timeout_s * 1000)}) ran for {round(t.timeout_s * 1000)} milliseconds before timing out.")
    silent = [r for r in range(4) if r not in t.blocked_ranks]
    if silent:
        lines.append(f"# no line from {_ranks(silent)}: inside no collective (dead, or busy in its own code): "
                     "check that the process exists, then dump its Python stack (py-spy dump --pid ...)")
    same_seq = {}
    for r in pending:
        same_seq.setdefault((reliability.GROUP_NAMES[r.call.group], r.group_seq), {}).setdefault(
            f"{r.call.op.upper()} of {fmt.count(r.numel_in)}", []).append(r.rank)
    for (group, seq), kinds in same_seq.items():
        if len(kinds) > 1:
            lines.append(f"# {group} #{seq}: " + "; ".join(f"{_ranks(ranks)} in {kind}" for kind, ranks in kinds.items())
                         + ": same group and SeqNum, different call: the odd one out took another path")
    return html.join(
        html.heading(f"What a flight-recorder dump would hold at the watchdog ({fmt.duration(t.detected_after_s)} after the fault)"),
        html.table(("rank", "group", "SeqNum", "newest collective", "elements in → out", "state"), rows,
                   label="Flight-recorder dump, one row per rank"),
        html.heading("What to grep for"), html.code("\n".join(lines), label="log lines"))
