"""The numbers the two foundation figures show are the ones models/ computes, and the
published ones."""
import math
import xml.etree.ElementTree as ET
from collections import Counter

import pytest

from figures import fig15_pipeline_schedules as fig15, palette, registry, svg
from models import fmt, hardware, memory, pipeline
from tests.figure_views import SVG, readouts
from tests.test_svg import bars, numbers_drawn

ZERO_7_5B_N64 = {0: "120 GB", 1: "31.4 GB", 2: "16.6 GB", 3: "1.88 GB"}  # ZeRO paper, Fig. 1


@pytest.mark.parametrize("stage", memory.STAGES)
def test_figure_08_shows_the_zero_paper_numbers(stage):
    figure = registry()[8]
    state = figure.validate_state({"params": 7.5e9, "N": 64, "stage": stage, "optimizer": "adam_mixed"})
    shown = readouts(figure.render(state))
    assert shown["per_device_bytes"].text == ZERO_7_5B_N64[stage]
    assert shown["comm_psi"].value == (3.0 if stage == 3 else 2.0)
    assert shown["comm_psi"].text.startswith(f"{shown['comm_psi'].value:g}Ψ")


def test_figure_08_keeps_the_shard_degree_and_the_model_size_in_view_on_a_phone():
    """Issue 34: Figure 08's Plotly chart already fits a phone (its chart is its key); the
    sticky bar there holds the shard degree N and the parameter count, the rest fold away."""
    figure = registry()[8]
    primary, groups = figure.control_layout()
    assert [c.key for c in primary] == ["N", "params"]
    assert sorted(c.key for _, controls in groups for c in controls) == ["gpu", "optimizer", "stage"]
    state = figure.default_state()
    assert figure.render(state, narrow=True).plot == figure.render(state).plot


@pytest.mark.parametrize("state", [{"params": 175e9, "N": 8, "stage": 2, "optimizer": "adam_fp32"},
                                   {"params": 7.5e9, "N": 64, "stage": 3, "gpu": "a100_40gb"},
                                   {"params": 1e12, "N": 1024, "stage": 0}])
def test_figure_08_draws_every_bar_from_the_floor_of_its_log_axis(state):
    """It stacked parts on a log axis, where a part's share of a bar is not its share of the
    bytes (the parameters looked like most of each bar). Now nothing is stacked: each stage
    is its total and its three parts side by side, each from the axis floor to its own size;
    the totals are named under the axis, never beside the HBM line (on an A100 40GB the
    '31.4 GB' label sat under it)."""
    figure = registry()[8]
    state = figure.validate_state({**figure.default_state(), **state})
    view = figure.render(state)
    [bars] = view.plot["data"]
    layout = view.plot["layout"]
    floor = 10 ** layout["yaxis"]["range"][0]
    assert layout["yaxis"]["type"] == "log" and bars["base"] == [floor] * 16
    assert layout["barmode"] == "overlay" and all(not text for text in bars["text"])  # nothing written by a bar
    hbm = hardware.gpu(state["gpu"]).hbm_bytes
    for stage in memory.STAGES:
        states = memory.model_states_for(state["params"], state["N"], stage, state["optimizer"])
        drawn = [(name, base + height) for (label, name, _), base, height, x in
                 zip(bars["customdata"], bars["base"], bars["y"], bars["x"]) if round(x) == stage]
        assert [name for name, _ in drawn] == ["Total", "Parameters", "Gradients", "Optimizer state"]
        assert [top for _, top in drawn] == pytest.approx(
            [states.total_bytes / 1e9, states.params_bytes / 1e9, states.grads_bytes / 1e9, states.optimizer_bytes / 1e9])
        fits = states.total_bytes <= hbm
        assert layout["xaxis"]["ticktext"][stage] == (
            f"{memory.STAGE_LABELS[stage]}<br>{memory.comm_volume_psi(stage):g}Ψ comm<br>{fmt.gigabytes(states.total_bytes)}")
        verdicts = [a for a in layout["annotations"] if a["text"] == "does not<br>fit" and a["x"] == stage]
        assert len(verdicts) == (0 if fits else 1)
        assert all(a["xref"] == "x" and a["yref"] == "paper" and a["y"] == 0 and a["yshift"] < 0  # under the axis
                   and a["font"]["color"] == palette.plot("warn") for a in verdicts)
    # the total is the widest bar, its parts side by side inside it; the chosen stage drawn solid
    widths = bars["width"][:4]
    assert widths[0] > sum(widths[1:]) and [o for o in bars["marker"]["opacity"] if o == 1.0] == [1.0] * 4
    assert layout["xaxis"]["tickangle"] == 0  # upright: plotly tilted crowded names on a phone
    # the key names each colour in a font colour a dark page recolours, the readouts carry them too
    key = {a["text"]: a for a in layout["annotations"]}
    colours = [bars["marker"]["color"][k] for k in range(4)]
    assert [a["font"]["color"] for a in layout["annotations"] if a["text"] == "\u25a0"] == colours
    assert {"total", "parameters", "gradients", "optimizer state"} <= set(key)
    assert {r.key: palette.plot(r.color) for r in view.readouts if r.color and r.key != "fits"} == {
        "params_bytes": colours[1], "grads_bytes": colours[2], "optimizer_bytes": colours[3]}


@pytest.mark.parametrize("params,N,stage,optimizer", [(7.5e9, 64, 3, "adam_mixed"), (175e9, 8, 1, "adam_fp32"),
                                                      (1e9, 1024, 2, "sgd_momentum"), (70e9, 1, 0, "adam_mixed")])
def test_figure_08_ledger_share_and_traffic_readouts(params, N, stage, optimizer):
    figure = registry()[8]
    shown = readouts(figure.render(figure.validate_state({"params": params, "N": N, "stage": stage, "optimizer": optimizer})))
    per_device = memory.model_states_for(params, N, stage, optimizer).total_bytes
    unsharded = memory.model_states_for(params, N, 0, optimizer).total_bytes  # DDP keeps the whole ledger
    assert shown["ledger_fraction"].value == pytest.approx(per_device / unsharded, rel=1e-12)
    assert shown["ledger_fraction"].text == fmt.percent(per_device / unsharded)
    states = memory.model_states_for(params, N, stage, optimizer)
    assert [shown[f"{part}_bytes"].value for part in ("params", "grads", "optimizer")] == \
        [states.params_bytes, states.grads_bytes, states.optimizer_bytes]
    assert shown["per_device_bytes"].value == per_device
    psi = 3 if stage == 3 else 2
    assert shown["comm_psi"].text == f"{psi}Ψ = {fmt.si_count(psi * params)} elements per device"


@pytest.mark.parametrize("params", [1e9, 7.5e9, 175e9, 1e12])
@pytest.mark.parametrize("N", [1, 64, 1024])
@pytest.mark.parametrize("gpu", ["a100_40gb", "mi300x"])
def test_figure_08_shows_the_zero3_bar_and_the_hbm_line_at_every_size(params, N, gpu):
    """A log axis from below the smallest total (and the HBM) to above the largest: at 1T
    parameters DDP's 16 TB and ZeRO-3's 15.6 GB on 1,024 GPUs are both bars, the HBM line
    between them; on a linear axis ZeRO-3 was under a pixel. Each part's bar too: at least a
    twentieth of the axis."""
    figure = registry()[8]
    view = figure.render(figure.validate_state({"params": params, "N": N, "stage": 3, "gpu": gpu}))
    layout = view.plot["layout"]
    low, high = layout["yaxis"]["range"]
    assert layout["yaxis"]["type"] == "log"
    span = high - low
    totals = [memory.model_states_for(params, N, s).total_bytes / 1e9 for s in memory.STAGES]
    hbm = hardware.gpu(gpu).hbm_bytes / 1e9
    for value in (*totals, hbm):
        assert 0.1 * span <= math.log10(value) - low <= 0.96 * span  # a tenth of the axis or more, none off the top
    for s in memory.STAGES:
        for part in ("params", "grads", "optimizer"):
            size = getattr(memory.model_states_for(params, N, s), f"{part}_bytes") / 1e9
            assert math.log10(size) - low >= 0.05 * span
    [line] = layout["shapes"]
    assert line["y0"] == line["y1"] == hbm and line["yref"] == "y"
    assert f"HBM of one {hardware.gpu(gpu).short_name}: {fmt.gigabytes(hardware.gpu(gpu).hbm_bytes)}" in \
        layout["annotations"][0]["text"] and "log scale" in layout["annotations"][0]["text"]
    decades = layout["yaxis"]["tickvals"]
    assert layout["yaxis"]["ticktext"] == [fmt.data_size(v * 1e9) for v in decades] and len(decades) >= 2


def test_figure_08_says_when_a_stage_does_not_fit():
    figure = registry()[8]
    over = figure.render(figure.validate_state({"params": 1e12, "N": 192, "stage": 1}))
    shown = readouts(over)
    zero1 = memory.model_states_for(1e12, 192, 1).total_bytes
    hbm = hardware.gpu("h100_sxm").hbm_bytes
    assert shown["fits"].value == 0 and shown["fits"].text == f"no: {fmt.gigabytes(zero1 - hbm)} too much"
    assert shown["fits"].color == "warn" and "ZeRO-1 does not fit" in over.note
    assert [a["x"] for a in over.plot["layout"]["annotations"] if a["text"] == "does not<br>fit"] == [0, 1, 2]
    assert f"ZeRO-1<br>2Ψ comm<br>{fmt.gigabytes(zero1)}" in over.plot["layout"]["xaxis"]["ticktext"]
    assert f"ZeRO-1 {fmt.gigabytes(zero1)} (does not fit)" in over.alt and "ZeRO-3 83.3 GB," in over.alt
    # 1T parameters on 192 GPUs under ZeRO-3: 83.3 GB, inside an H100's 80 GiB (85.9 GB), not an A100 40GB's
    fits = figure.render(figure.validate_state({"params": 1e12, "N": 192, "stage": 3}))
    assert readouts(fits)["fits"].value == 1 and readouts(fits)["fits"].color is None and fits.note == ""
    small = figure.render(figure.validate_state({"params": 1e12, "N": 192, "stage": 3, "gpu": "a100_40gb"}))
    assert readouts(small)["fits"].value == 0 and "A100 40GB SXM" in readouts(small)["fits"].label


def test_decimal_keeps_at_most_two_places_without_trailing_zeros():
    assert [fmt.decimal(x) for x in (23 / 3, 7.5, 8.0, 8, 0.004, 10.999)] == ["7.67", "7.5", "8", "8", "0", "11"]
    assert fmt.decimal(2 / 3, places=3) == "0.667"
    assert fmt.decimal(-0.001) == "0" and fmt.decimal(-1.5) == "-1.5"  # svg coordinates use it too


def test_figure_15_writes_fractional_stash_peaks_to_two_places():
    view = registry()[15].render({"P": 6, "m": 30, "v": 3})
    peak = pipeline.simulate("interleaved", 6, 30, 3).peak_stashes
    assert peak == pytest.approx(23 / 3)
    assert {r.key: r.text for r in view.readouts}["stashes_interleaved"] == "7.67"
    assert "peak 7.67 microbatch stashes" in view.svg


def test_figure_08_counts_gpus_in_words():
    [shards] = [c for c in registry()[8].controls if c.key == "N"]
    assert [shards.display(n) for n in (1, 2, 1024)] == ["1 GPU", "2 GPUs", "1024 GPUs"]


@pytest.mark.parametrize("P,m,v", [(8, 8, 1), (8, 64, 2), (4, 8, 2), (16, 32, 4), (2, 1, 1)])
def test_figure_15_reads_out_the_simulation(P, m, v):
    figure = registry()[15]
    shown = readouts(figure.render(figure.validate_state({"P": P, "m": m, "v": v})))
    for name in pipeline.SCHEDULES:
        timeline = pipeline.simulate(name, P, m, v if name == "interleaved" else 1)
        assert shown[f"bubble_{name}"].value == timeline.bubble_ratio
        assert shown[f"stashes_{name}"].value == timeline.peak_stashes


@pytest.mark.parametrize("P,m,v", [(4, 8, 2), (8, 64, 3), (16, 64, 4), (5, 3, 4), (2, 1, 1)])
def test_figure_15_draws_every_simulated_pass(P, m, v):
    """Each schedule's bars, read back from the drawing, are the simulated passes."""
    figure = registry()[15]
    drawing = ET.fromstring(figure.render(figure.validate_state({"P": P, "m": m, "v": v})).svg)
    paths = [path for path in drawing.iter(f"{SVG}path") if path.get("class", "").startswith("op op-")]
    expected = []
    for name in pipeline.SCHEDULES:
        passes = fig15._simulate(name, P, m, v if name == "interleaved" else 1).passes
        for kind, chunk in sorted({(p.kind, p.chunk) for p in passes}):
            assert len({p.duration_s for p in passes if (p.kind, p.chunk) == (kind, chunk)}) == 1  # one bar length per path
            expected.append((f"op op-{kind} op-chunk-{chunk} stroke-{fig15.PASS_COLOUR[kind]}", sorted(
                (p.stage, start, start + p.duration_s) for p in passes if (p.kind, p.chunk) == (kind, chunk) for start in p.starts)))
    assert len(paths) == len(expected)
    for path, (css_class, bars_expected) in zip(paths, expected):
        assert path.get("class") == css_class
        assert bars(ET.tostring(path, encoding="unicode")) == bars_expected
    zero_bubble = fig15._simulate("zb-h1", P, m, 1).passes
    assert sum(len(p.starts) for p in zero_bubble) == P * m * 3  # F, B and W of every microbatch on every stage


def test_figure_15_reference_article_numbers():
    figure = registry()[15]
    eight = readouts(figure.render(figure.validate_state({"P": 8, "m": 8, "v": 1})))
    assert eight["bubble_gpipe"].text == "46.7%" and eight["bubble_1f1b"].text == "46.7%"
    sixty_four = readouts(figure.render(figure.validate_state({"P": 8, "m": 64, "v": 1})))
    assert sixty_four["bubble_1f1b"].text == "9.9%"
    assert eight["stashes_1f1b"].value == 8 and eight["stashes_gpipe"].value == 8
    sixteen = readouts(figure.render(figure.validate_state({"P": 4, "m": 16, "v": 1})))
    assert sixteen["stashes_1f1b"].value == 4 and sixteen["stashes_gpipe"].value == 16


def test_figure_15_explains_interleaving_outside_megatrons_rule():
    figure = registry()[15]
    note = lambda **state: figure.render(figure.validate_state(state)).note
    assert note(P=8, m=16, v=2) == "" and note(P=8, m=12, v=1) == ""
    assert "groups of 12 instead of 8" in note(P=8, m=12, v=3)
    assert "fewer microbatches than stages" in note(P=8, m=5, v=2)
    grouped = readouts(figure.render(figure.validate_state({"P": 8, "m": 12, "v": 3})))
    assert grouped["bubble_interleaved"].value == pytest.approx(pipeline.bubble_ratio_formula("interleaved", 8, 12, 3), abs=1e-12)


def test_figure_15_panel_headers_state_the_simulated_numbers():
    figure = registry()[15]
    drawing = figure.render(figure.validate_state({"P": 8, "m": 8, "v": 2})).svg
    texts = [node.text for node in ET.fromstring(drawing).iter(f"{SVG}text")]
    for name in pipeline.SCHEDULES:
        timeline = pipeline.simulate(name, 8, 8, 2 if name == "interleaved" else 1)
        header = (f"{pipeline.SCHEDULE_LABELS[name]} — bubble {timeline.bubble_ratio * 100:.1f}%, "
                  f"peak {fmt.decimal(timeline.peak_stashes)} microbatch stashes (stage {timeline.worst_stage})")
        assert header in texts
    # At P=8, m=8 a forward pass is ~18.6 px: every GPipe, 1F1B and ZB-H1 op carries its
    # microbatch number (128 + 128 + 192); interleaved forwards (v=2, ~9 px) are too narrow,
    # its 128 backwards (~18.6 px) are labelled.
    labels = [path for path in ET.fromstring(drawing).iter(f"{SVG}path") if "op-label" in path.get("class", "").split()]
    # one path per panel and bar colour: F and B in three panels, W in the zero-bubble one, the
    # interleaved backwards of its two chunks
    assert len(labels) == 2 + 2 + 2 + 3
    numbers = Counter(n for path in labels for _, _, n in numbers_drawn(ET.tostring(path, encoding="unicode")))
    assert numbers == {microbatch: (128 + 128 + 192 + 128) // 8 for microbatch in range(1, 9)}


@pytest.mark.parametrize("P,m,v", [(8, 8, 3), (16, 64, 4), (5, 13, 3), (3, 2, 4), (7, 40, 1)])
def test_figure_15_clock_puts_every_op_on_a_whole_tick(P, m, v):
    for name in pipeline.SCHEDULES:
        timeline = fig15._simulate(name, P, m, v if name == "interleaved" else 1)
        for passes in timeline.passes:
            assert passes.duration_s == int(passes.duration_s)
            assert all(start == int(start) for start in passes.starts)
        reference = pipeline.simulate(name, P, m, v if name == "interleaved" else 1)
        assert timeline.bubble_ratio == pytest.approx(reference.bubble_ratio, rel=1e-12)


@pytest.mark.parametrize("P,m,v", [(8, 8, 2), (4, 64, 4), (16, 3, 1), (2, 1, 1), (16, 64, 4), (5, 2, 1), (11, 47, 4)])
def test_figure_15_time_axis_reads_in_forward_passes(P, m, v):
    """The longest schedule spans the axis, and every tick label sits where its number
    of forward passes falls on that scale."""
    root = ET.fromstring(registry()[15].render({"P": P, "m": m, "v": v}).svg)
    longest = max(pipeline.simulate(n, P, m, v if n == "interleaved" else 1).makespan for n in pipeline.SCHEDULES)
    ticks = [(float(t.get("x")), int(t.text)) for t in root.iter(f"{SVG}text") if t.get("text-anchor") == "middle"]
    assert ticks[0] == (fig15.LEFT, 0) and 5 <= len(ticks) <= fig15.MAX_TICK_LABELS
    step = ticks[1][1]
    assert step in fig15.NICE_TICK_STEPS and [t for _, t in ticks] == list(range(0, len(ticks) * step, step))
    px_per_forward = (fig15.WIDTH - fig15.LEFT - fig15.RIGHT) / longest  # simulate's default: a forward takes 1
    for x, forwards in ticks:
        assert x == pytest.approx(fig15.LEFT + forwards * px_per_forward, abs=0.06)
    assert ticks[-1][1] <= longest


@pytest.mark.parametrize("P", range(2, 17))
def test_figure_15_names_stage_lanes_without_crowding(P):
    """Each panel names its first and last lane and, where the rows are too tight for a
    label on every lane, evenly spaced lanes between them whose labels do not touch."""
    root = ET.fromstring(registry()[15].render({"P": P, "m": 8, "v": 2}).svg)
    labels = [(float(t.get("y")), int(t.text.split()[1])) for t in root.iter(f"{SVG}text")
              if t.text and t.text.startswith("stage ")]
    panels = [labels[i:i + len(labels) // 4] for i in range(0, len(labels), len(labels) // 4)]
    assert len(panels) == 4 and all(len(panel) == len(panels[0]) for panel in panels)
    for panel in panels:
        ys, stages = zip(*panel)
        assert stages[0] == 0 and stages[-1] == P - 1 and list(stages) == sorted(set(stages))
        assert min(b - a for a, b in zip(ys, ys[1:])) >= fig15.LABEL_PITCH_PX - 0.1
        assert len(stages) == P if P <= 9 else 5 <= len(stages) <= fig15.THINNED_STAGE_LABELS


@pytest.mark.parametrize("P,m,v", [(4, 8, 2), (16, 64, 4), (2, 1, 1), (4, 64, 2)])
def test_figure_15_on_a_phone_fits_its_time_axis_and_marks_the_first_bubble(P, m, v):
    """Narrow: the same four panels stacked on a 320-unit clock (no sideways scrolling at 11 px
    labels): each title and its peak on two lines, lanes named "s0", at most 6 ticks, all
    inside the drawing; GPipe's idle lanes (its bubble) carry the drawing's point, as wide."""
    figure = registry()[15]
    state = figure.validate_state({"P": P, "m": m, "v": v})
    wide, narrow = (ET.fromstring(figure.render(state, narrow=n).svg) for n in (False, True))
    width, height = map(float, narrow.get("viewBox").split()[2:])
    assert width == 320 and "min-width:320px" in narrow.get("style")
    assert height / width > 1.5 * float(wide.get("viewBox").split()[3]) / float(wide.get("viewBox").split()[2])
    texts = [t for t in narrow.iter(f"{SVG}text")]
    lines = [t.text for t in texts]
    for name in pipeline.SCHEDULES:
        timeline = pipeline.simulate(name, P, m, v if name == "interleaved" else 1)
        title = f"{pipeline.SCHEDULE_LABELS[name]} — bubble {timeline.bubble_ratio * 100:.1f}%"
        peak = f"peak {fmt.decimal(timeline.peak_stashes)} microbatch stashes (stage {timeline.worst_stage})"
        assert lines[lines.index(title) + 1] == peak  # the title's second line
    lanes = [t.text for t in texts if t.get("text-anchor") == "end" and t.text.startswith("s")]
    assert lanes[0] == "s0" and f"s{P - 1}" in lanes and not any(t.text.startswith("stage ") for t in texts)
    ticks = [t for t in texts if t.get("text-anchor") == "middle"]
    assert 3 <= len(ticks) <= 6 and float(ticks[0].get("x")) == 30
    assert all(float(t.get("x")) + svg.text_width(t.text, 11) / 2 <= 320 for t in ticks)  # none leaves the drawing
    for drawing in (wide, narrow):
        keys = [p for p in drawing.iter(f"{SVG}path") if "svg-key" in p.get("class", "").split()]
        assert len(keys) == 1 and keys[0].get("class") == "fill-idle svg-key"
        assert keys[0].get("d").count("M") == P  # the first panel's P idle lanes, GPipe's
