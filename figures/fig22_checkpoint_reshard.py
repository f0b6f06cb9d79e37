"""Figure 22: one tensor saved by one mesh and loaded by another; gathered against sharded writes
(models.checkpoint)."""
import math
from dataclasses import dataclass
from functools import lru_cache

from figures import palette, svg
from figures.contract import Readout, Select, Slider, Toggle, View, log_stops
from models import checkpoint, fmt, hardware

NUMBER = 22
FILESYSTEM_BYTES_PER_S = 100e9  # the parallel file system's aggregate write bandwidth
TITLE = "Checkpoint geometry and resharding"
CAPTION = (
    "One optimizer tensor as the saving ranks wrote it and as the restarted ranks need it, each line a byte range a "
    "new rank must read; below, the time to save the whole model."
)
NOTE = (
    "Rows run left to right, in one file per writer or one gathered file. Without the layout metadata a restarted "
    "rank can only open the file with its own number and hope. The save time counts bf16 weights, fp32 master weights and Adam's "
    f"two moments, {checkpoint.checkpoint_bytes_per_param()} bytes per parameter (training holds 16: the checkpoint "
    "leaves out the gradients, which the next step recomputes), written by one gathering writer or by every "
    f"rank, on a file system that takes at most {FILESYSTEM_BYTES_PER_S / 1e9:g} GB/s in all."
)
TRIES = (
    ("64 ranks saved", {"src": 64}),
    ("No layout metadata", {"metadata": False}),
    ("A gathered checkpoint", {"mode": "gathered"}),
    ("1T parameters, 64 ranks", {"params": 1_000_000_000_000, "src": 64}),
)

NETWORK = "ib_ndr"  # the gather to rank 0 before a gathered write
TENSOR_COLUMNS = 4096  # an Adam moment of a 4096-wide weight: whole rows are contiguous in every file

CONTROLS = (
    Slider("src", "Ranks that saved", min=1, max=64, step=1, default=8),
    Slider("dst", "Ranks at restart", min=1, max=64, step=1, default=6),
    Slider("rows", "Rows of the tensor", stops=tuple(2 ** k for k in range(11)), default=64),
    Select("mode", "Checkpoint", options=(("sharded", "sharded: every rank writes its slice"),
                                           ("gathered", "gathered: one writer, one full file")), default="sharded"),
    Toggle("metadata", "Save the layout metadata", default=True),
    Slider("params", "Model parameters", stops=log_stops(1e9, 1e12), default=7_500_000_000, format=fmt.si_count),
    Slider("write_GBps", "Write bandwidth per writer", stops=(0.5, 1, 2, 5, 10, 20, 50), default=2, unit="GB/s"),
)
PRIMARY = ("src", "dst")  # the reshard: from how many ranks to how many

WIDTH, LEFT, RIGHT, BAR = 560, 70, 12, 22
WRITERS = tuple(range(1, 16)) + tuple(range(16, 65, 4))  # where the write-time curves are sampled


@dataclass(frozen=True)
class _Layout:
    """Where things go: the wide drawing, or a phone's column (``narrow``)."""
    width: float = WIDTH
    left: float = LEFT  # where the bars start; their names end just before
    right: float = RIGHT
    gap: float = 8  # from a bar's name to the bar
    plot_left: float = LEFT  # the write-time plot's axis (its duration labels before it)
    legend: bool = False  # the curves' names under the plot, not at their ends
    wrap: bool = False  # long lines of text broken to the drawing's width
    new_ranks: str = "new ranks"  # the lower bar's name ("\n": on two lines)


WIDE = _Layout()
NARROW = _Layout(width=320, left=52, right=8, gap=6, plot_left=62, legend=True, wrap=True, new_ranks="new\nranks")
# a phone on its side (render(short=True)): the geometry and the write times side by side,
# each a column laid out as a phone's, in a drawing as wide as a 844 px screen's column
SHORT_COLUMN, SHORT_GAP = 352, 16
SHORT = _Layout(width=SHORT_COLUMN, left=70, right=8, plot_left=62, legend=True, wrap=True, new_ranks="new\nranks")


def _lines(layout, content, size=12.0, bold=False):
    """``content`` as the lines it takes in the drawing: one, or (narrow) as many as its width needs,
    never breaking between a number and its unit ("105 GB")."""
    if not layout.wrap:
        return [content]
    return svg.wrap(content, layout.width, size, bold, keep=svg.with_its_unit)


def _paragraph(layout, x, y, content, step=15, **attributes):
    """``content`` at baseline ``(x, y)``, wrapped as ``_lines`` does; ``(parts, lines)``."""
    size, bold = svg.label_size(attributes.get("class_"))
    lines = _lines(layout, content, size, bold or attributes.get("font_weight") == "600")
    return [svg.text(x, y + k * step, line, **attributes) for k, line in enumerate(lines)], len(lines)


@lru_cache(maxsize=512)
def _write_time(params, write_gbps, mode, writers):
    link = hardware.link(NETWORK)
    return checkpoint.checkpoint_write_time(
        (params,), checkpoint.checkpoint_bytes_per_param(), checkpoint.ShardLayout(writers), mode=mode,
        per_writer_bytes_per_s=write_gbps * 1e9, filesystem_bytes_per_s=FILESYSTEM_BYTES_PER_S,
        network_bytes_per_s=link.bandwidth_bytes_per_s, alpha_s=link.alpha_s)


@lru_cache(maxsize=16)
def _curves(params, write_gbps):
    """Seconds to save the model by each number of ranks in WRITERS, gathered and sharded."""
    return {mode: tuple(_write_time(params, write_gbps, mode, w).total_s for w in WRITERS) for mode in checkpoint.MODES}


@lru_cache(maxsize=64)
def _plan(rows, saved_files, loaded_files):
    """Each new rank's reads as (old rank, first row, end row): the drawing and the readouts share it."""
    return checkpoint.reshard_row_ranges((rows, TENSOR_COLUMNS), checkpoint.ShardLayout(saved_files),
                                         checkpoint.ShardLayout(loaded_files))


def _bar(layout, y, cuts, rows, label):
    """A bar of ``rows`` rows cut at ``cuts`` (shard bounds), one rank colour per shard, numbered."""
    LEFT, scale = layout.left, (layout.width - layout.left - layout.right) / rows
    groups = {}
    for rank, (a, b) in enumerate(cuts):
        groups.setdefault(palette.rank_key(rank), []).append((LEFT + a * scale, y, (b - a) * scale, BAR))
    parts = [svg.boxes(boxes, class_=f"fill-{key}") for key, boxes in sorted(groups.items())]
    parts.append(svg.boxes(((LEFT + a * scale, y, (b - a) * scale, BAR) for a, b in cuts), fill="none", class_="svg-axis"))
    if len(cuts) == 1:
        parts.append(svg.text(LEFT + rows / 2 * scale, y + BAR / 2 + 4, "one full file", class_="svg-label",
                              text_anchor="middle"))
    elif all(b == a or (b - a) * scale >= 8 * len(str(len(cuts) - 1)) for a, b in cuts):
        for key in range(min(len(cuts), palette.RANK_COLOURS)):  # each shard's number in the ink that reads on its colour
            ranks = range(key, len(cuts), palette.RANK_COLOURS)
            parts.append(svg.numerals(((tuple(LEFT + sum(cuts[r]) / 2 * scale for r in ranks), y + BAR / 2, ranks),),
                                      class_=f"op-label on-{palette.rank_key(key)}"))
    names = label.split("\n")
    for k, name in enumerate(names):
        parts.append(svg.text(LEFT - layout.gap, y + BAR / 2 + 4 + 14 * (k - (len(names) - 1) / 2), name,
                              class_="svg-label-soft", text_anchor="end"))
    return parts


def _geometry(layout, state, saved, loaded, verdict):
    """The saved files, the new ranks' shards, and the reads between them (or the failed guess)."""
    rows, LEFT, WIDTH = state["rows"], layout.left, layout.width
    scale = (WIDTH - LEFT - layout.right) / rows
    old_cuts = [checkpoint.shard_bounds(rows, saved.files, i) for i in range(saved.files)]
    new_cuts = [checkpoint.shard_bounds(rows, loaded.files, i) for i in range(loaded.files)]
    head = (f"Saved by {fmt.gpus(state['src']).replace('GPU', 'rank')}: "
            + (f"{saved.files} files, one per rank" if saved.files > 1 else "one full file")
            + (", layout metadata beside them" if state["metadata"] else ", no layout metadata"))
    parts, count = _paragraph(layout, 0, 14, head, class_="svg-label")
    top, strip, bottom = (v + 15 * (count - 1) for v in (30, 56, 136))
    parts += _bar(layout, top, old_cuts, rows, "files")
    parts += _bar(layout, bottom, new_cuts, rows, layout.new_ranks)
    if verdict.loadable:
        ranges, lines = {}, {}
        for rank, reads in enumerate(_plan(rows, saved.files, loaded.files)):
            key, (a, b) = palette.rank_key(rank), new_cuts[rank]
            for _, lo, hi in reads:  # a strip under the files says who reads each range; a line joins them
                ranges.setdefault(key, []).append((LEFT + lo * scale, strip, (hi - lo) * scale, 6))
                lines.setdefault(key, []).append((LEFT + (lo + hi) / 2 * scale, strip + 6, LEFT + (a + b) / 2 * scale, bottom))
        parts += [svg.boxes(boxes, class_=f"fill-{key}") for key, boxes in sorted(ranges.items())]
        parts += [svg.segments(segs, class_=f"stroke-{key} {svg.KEY}", stroke_width=1.5) for key, segs in sorted(lines.items())]
        parts.append(svg.text(LEFT - layout.gap, strip + 7, "read by", class_="svg-label-soft", text_anchor="end"))
    else:  # rank k opens file k and takes it for its own slice; ranks past the last file find none
        guesses = [(LEFT + sum(old_cuts[k]) / 2 * scale, top + BAR, LEFT + sum(new_cuts[k]) / 2 * scale, bottom)
                   for k in range(min(saved.files, loaded.files))]
        parts.append(svg.segments(guesses, class_=f"stroke-warn {svg.KEY}", stroke_width=1.5, stroke_dasharray="4 3"))
        parts.append(svg.boxes(((LEFT + a * scale, bottom, (b - a) * scale, BAR) for a, b in new_cuts[saved.files:]),
                               class_="fill-warn"))
    if not verdict.loadable:
        say = "\u2717 Restart fails: nothing records which rows each file holds"
        # over the dashed guesses: haloed, so no dash runs through its letters
        parts.append(svg.text(WIDTH / 2, (top + bottom + BAR) / 2 + 4, "rank k can only guess: file k?",
                              class_="svg-label svg-halo", style="fill:var(--c-warn)", text_anchor="middle"))
    elif saved.files == 1:
        say = "\u2713 Restart works: each new rank reads its slice of the full file"
    else:
        say = "\u2713 Restart works: " + ("a resharding, each new rank reads the ranges its lines reach"
                                          if verdict.needs_reshard else "each rank reopens its own file")
    verdict_parts, count = _paragraph(layout, 0, bottom + BAR + 20, say, step=16, class_="svg-label", font_weight="600",
                                      style=None if verdict.loadable else "fill:var(--c-warn)")
    return parts + verdict_parts, bottom + BAR + 30 + 16 * (count - 1)


def _write_panel(layout, state, top):
    """Seconds to save the whole model against the number of writing ranks, both modes, log-log."""
    curves = _curves(state["params"], state["write_GBps"])
    decades = range(math.floor(math.log10(min(map(min, curves.values())))),
                    math.ceil(math.log10(max(map(max, curves.values())))) + 1)
    LEFT, total = layout.plot_left, _write_time(state["params"], state["write_GBps"], "sharded", 1).total_bytes
    parts, count = _paragraph(layout, 0, top + 12, f"Saving the whole model, {fmt.si_count(state['params'])} parameters "
                              f"({fmt.gigabytes(total)}: {checkpoint.checkpoint_bytes_per_param()} B each, no gradients)",
                              class_="svg-label")
    # narrow: the curves' names go in a legend under the plot, so the plot takes the whole width
    height, y0 = 110, top + 24 + 15 * (count - 1)
    span = layout.width - LEFT - layout.right - (12 if layout.legend else 120)
    xs = [LEFT + math.log2(w) / 6 * span for w in WRITERS]
    y = lambda seconds: y0 + height - (math.log10(seconds) - decades[0]) / max(len(decades) - 1, 1) * height
    parts += [
        svg.segments([(LEFT, y(10.0 ** d), LEFT + span, y(10.0 ** d)) for d in decades], class_="svg-axis"),
        svg.texts(((LEFT - 8, y(10.0 ** d) + 4, fmt.duration(10.0 ** d)) for d in decades), class_="svg-label-soft",
                  text_anchor="end"),
        svg.texts(((LEFT + k / 6 * span, y0 + height + 16, 2 ** k) for k in range(7)), class_="svg-label-soft",
                  text_anchor="middle"),
        svg.text(LEFT + span, y0 + height + 32, "ranks writing (log scale)", class_="svg-label-soft", text_anchor="end"),
    ]
    here = LEFT + math.log2(state["src"]) / 6 * span
    bottom = y0 + height + 38
    at_src, ends = {}, []
    for mode, dash in (("gathered", "6 4"), ("sharded", None)):
        ys = [y(t) for t in curves[mode]]
        chosen = mode == state["mode"]
        parts.append(svg.segments(list(zip(xs, ys, xs[1:], ys[1:])), style="stroke:var(--ink)",
                                  stroke_width=2.5 if chosen else 1.2, stroke_dasharray=dash))
        at_src[mode] = _write_time(state["params"], state["write_GBps"], mode, state["src"]).total_s
        parts.append(svg.boxes(((here - 3.5, y(at_src[mode]) - 3.5, 7, 7),),
                               class_="svg-ink-fill" if chosen else "svg-neutral-fill"))
        css = "svg-label" if chosen else "svg-label-soft"
        if layout.legend:  # a swatch of the line, then its name
            parts += [svg.segments([(LEFT, bottom + 8, LEFT + 30, bottom + 8)], style="stroke:var(--ink)",
                                   stroke_width=2.5 if chosen else 1.2, stroke_dasharray=dash),
                      svg.text(LEFT + 38, bottom + 12, mode, class_=css)]
            bottom += 18
        else:
            ends.append((ys[-1] + 4, mode))
    if ends:  # where the curves end close together, their names stack apart, joined to their ends
        ticks = [svg.text_box(LEFT + k / 6 * span, y0 + height + 16, str(2 ** k), 11, "middle") for k in range(7)]
        parts.append(svg.end_labels(ends, LEFT + span + 6, leaders_from=LEFT + span, obstacles=ticks, class_="svg-label"))
    # the squares' times, the readout's numbers: one number per state, never the curves' far ends
    ranks = fmt.gpus(state["src"]).replace("GPU", "rank")
    times, count = _paragraph(layout, 0, bottom + 14, f"At {ranks} (the squares): sharded "
                              f"{fmt.duration(at_src['sharded'])}, gathered {fmt.duration(at_src['gathered'])}",
                              class_="svg-label")
    return parts + times, bottom + 20 + 15 * (count - 1)


def render(state, narrow=False, short=False):
    layout = NARROW if narrow else SHORT if short else WIDE
    saved = checkpoint.ShardLayout(state["src"] if state["mode"] == "sharded" else 1)
    loaded = checkpoint.ShardLayout(state["dst"])
    verdict = checkpoint.reload_verdict(checkpoint.ShardLayout(state["src"]), loaded, mode=state["mode"],
                                        has_metadata=state["metadata"])
    geometry, bottom = _geometry(layout, state, saved, loaded, verdict)
    if short:
        panel, height = _write_panel(layout, state, 0)
        panel, height, width = [svg.group(panel, transform=f"translate({SHORT_COLUMN + SHORT_GAP} 0)")], max(bottom, height), \
            2 * SHORT_COLUMN + SHORT_GAP
    else:
        panel, height = _write_panel(layout, state, bottom + 14)
        width = layout.width
    label = (f"A tensor of {state['rows']} rows saved by {state['src']} ranks ({state['mode']}) and reloaded by "
             f"{state['dst']}; write time against the number of writing ranks")
    drawing = svg.document(width, height, geometry + panel, label=label)
    if verdict.loadable:  # one read per overlap of an old and a new shard (whole rows are contiguous)
        plan = _plan(state["rows"], saved.files, loaded.files)
        total, most = sum(map(len, plan)), max(map(len, plan))
    else:
        total = most = 0
    write = _write_time(state["params"], state["write_GBps"], state["mode"], state["src"])
    readouts = (
        Readout("reload_ok", "restart on the new ranks", "works" if verdict.loadable else "fails", 1 if verdict.loadable else 0,
                None if verdict.loadable else "warn"),
        Readout("reads_total", "byte ranges read, all new ranks", str(total) if verdict.loadable else "none: no plan", total),
        Readout("max_reads_per_rank", "most ranges one rank reads", str(most) if verdict.loadable else "none", most),
        Readout("write_time_s", f"time to save ({state['mode']})", fmt.duration(write.total_s), write.total_s),
        Readout("checkpoint_bytes", f"checkpoint size ({checkpoint.checkpoint_bytes_per_param()} B per parameter: "
                "weights and Adam state, no gradients)", fmt.gigabytes(write.total_bytes), write.total_bytes),
        Readout("largest_write_bytes", "largest write by one rank", fmt.gigabytes(write.peak_writer_bytes), write.peak_writer_bytes),
    )
    alt = (f"{label}. {verdict.reason[0].upper() + verdict.reason[1:]}. "
           + (f"The new ranks read {total} byte ranges, at most {most} each. " if verdict.loadable else "The restart fails. ")
           + f"Saving {fmt.gigabytes(write.total_bytes)} {state['mode']} from {state['src']} ranks takes "
           f"{fmt.duration(write.total_s)}.")
    return View(svg=drawing, readouts=readouts, alt=alt, note="" if verdict.loadable else verdict.reason[0].upper() + verdict.reason[1:] + ".")
