"""Figures 23-25: the starred readouts are the model's numbers, the defaults tell the article's story,
and the drawings show what the numbers say (read back from the SVG)."""
import re

import pytest

import xml.etree.ElementTree as ET

from figures import fig23_scaling_efficiency as fig23, registry, svg
from models import hardware, reliability, scaling
from tests.figure_views import SVG, inside, overlap as boxes_overlap, path_data, rectangles, render, shapes, subpaths, text_boxes, texts, values


# ---- Figure 23 -------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes", [{}, {"N": 16384}, {"N": 1, "overlap": 0}, {"N": 64, "per_device_batch": 8, "global_batch": 256,
                                     "b_noise": 65536, "step_ms": 20, "grad_gb": 140, "bw_GBps": 12.5, "overlap": 0.5}])
def test_figure_23_readouts_are_the_models(changes):
    state, v = render(23, **changes)
    (p,) = scaling.scaling_efficiencies(
        [state["N"]], per_device_batch=state["per_device_batch"], global_batch=state["global_batch"], b_noise=state["b_noise"],
        step_s_per_sample=state["step_ms"] / 1000, gradient_bytes=state["grad_gb"] * 1e9,
        alpha_s=hardware.link("ib_ndr").alpha_s, bandwidth_bytes_per_s=state["bw_GBps"] * 1e9, overlap=state["overlap"])
    got = values(v)
    assert got["strong_efficiency"] == pytest.approx(p.strong.efficiency, rel=1e-12)
    assert got["weak_efficiency"] == pytest.approx(p.weak.efficiency, rel=1e-12)
    assert got["sample_efficiency"] == scaling.sample_efficiency(state["per_device_batch"] * state["N"], state["b_noise"])
    assert got["effective_efficiency"] == pytest.approx(p.weak.efficiency * p.sample_efficiency, rel=1e-12)
    assert got["global_batch_weak"] == p.weak_global_batch == state["per_device_batch"] * state["N"]
    assert got["throughput"] == p.throughput_per_s
    assert got["examples_multiplier"] == p.examples_multiplier


def test_figure_23_default_sits_below_the_critical_batch_so_dragging_past_it_is_possible():
    """The default N sat exactly on B = B_noise while the caption said to drag past it."""
    state, v = render(23)
    got = values(v)
    crit = scaling.critical_world_size(state["b_noise"], state["per_device_batch"])
    assert state["N"] == 256 < crit == 1024 and "B = B_noise at N = 1,024" in texts(v)
    assert got["sample_efficiency"] == 0.8 and got["examples_multiplier"] == 1.25
    _, at = render(23, N=1024)  # the line itself: 95% weak scaling, half the progress per sample
    at = values(at)
    assert round(at["weak_efficiency"], 2) == 0.95 and at["sample_efficiency"] == 0.5 and at["examples_multiplier"] == 2


@pytest.mark.parametrize("changes", [{}, {"b_noise": 64, "per_device_batch": 1}, {"global_batch": 65536, "per_device_batch": 64},
                                     {"b_noise": 65536}, {"overlap": 0, "bw_GBps": 5, "grad_gb": 2000}])
def test_figure_23_end_labels_never_collide(changes):
    """Its three end labels stacked where the curves meet (and the lowest sat on the axis's
    "16K"): now at least 15 apart, above the axis, each joined to its curve's end by a line."""
    _, v = render(23, **changes)
    root = ET.fromstring(v.svg)
    ends = sorted(float(t.get("y")) for t in root.iter(f"{SVG}text") if float(t.get("x")) == 584.0)
    assert len(ends) == 4 and all(b - a >= 15 - 1e-9 for a, b in zip(ends, ends[1:]))
    assert fig23.TOP - 12 <= ends[0] and ends[-1] <= fig23.H - fig23.BOTTOM  # inside the plot's height, above the x axis's labels


def test_figure_23_draws_the_strong_curve_dashed_once_a_device_would_hold_less_than_a_sample():
    _, v = render(23, global_batch=16384 * 4)  # never below one sample: no dashed part
    assert not path_data(v, "svg-ink-stroke svg-dash")
    _, v = render(23, global_batch=256)
    assert len(path_data(v, "svg-ink-stroke svg-dash")) == 1 and len(path_data(v, "svg-ink-stroke svg-dot")) == 1
    assert len(path_data(v, "svg-ink-stroke", exact=True)) == 1  # strong scaling, solid, where a device holds a sample
    assert "data parallelism alone cannot split it" in render(23, N=4096, global_batch=256)[1].note


def test_figure_23_marks_the_readers_n_on_every_curve_and_hides_b_noise_off_the_axis():
    _, v = render(23, N=64, per_device_batch=1, b_noise=131072)  # B_noise reached only at N = 131,072
    assert not any(t.startswith("B = B_noise") for t in texts(v)) and "N = 64" in texts(v)
    for css, dots in (("svg-neutral-fill", 2), ("fill-dp", 1), ("svg-ink-fill", 1)):
        assert shapes(v, css) == dots  # one marker dot per curve: strong and sample, weak, training



@pytest.mark.parametrize("changes", [{}, {"b_noise": 64, "per_device_batch": 64}, {"b_noise": 131072, "per_device_batch": 8},
                                     {"b_noise": 64, "per_device_batch": 1}])
def test_figure_23_every_word_stays_inside_the_wide_drawing_and_off_the_axis_name(changes):
    """B_noise's name at N = 1 (b_noise = per-device batch) was centred on the axis and ran
    off the left edge; it is kept inside, under the efficiency axis's name."""
    _, v = render(23, **changes)
    boxes = text_boxes(v)
    assert [t for t, box in boxes if not inside(box, v)] == []
    name = [box for t, box in boxes if t.startswith("B = B_noise")]
    axis = next(box for t, box in boxes if t == "efficiency")
    assert all(not boxes_overlap(box, axis) for box in name)


@pytest.mark.parametrize("changes", [{}, {"b_noise": 64, "per_device_batch": 64, "N": 16384}, {"N": 1, "b_noise": 131072}])
def test_figure_23_on_a_phone_the_plot_takes_the_width_and_the_curves_are_named_under_it(changes):
    """Narrow (issue 34): a 320-unit drawing whose plot spans it (the end labels' 150-unit margin
    gone), the four curves named in a legend below the axis, B_noise's name kept inside the
    drawing even at N = 1, and the reader's N and the knee marked as the drawing's point."""
    state, wide = render(23, **changes)
    narrow = registry()[23].render(state, narrow=True)
    root = ET.fromstring(narrow.svg)
    width, height = map(float, root.get("viewBox").split()[2:])
    assert width == 320
    assert [t for t, box in text_boxes(narrow) if not inside(box, narrow)] == []
    axis_caption = next(box for t, box in text_boxes(narrow) if t.startswith("world size N"))
    legend = {t: box for t, box in text_boxes(narrow) if t in ("strong scaling", "weak scaling", "sample efficiency", "training efficiency")}
    assert len(legend) == 4 and all(box[1] > axis_caption[1] + axis_caption[3] for box in legend.values())
    keyed = [p for p in root.iter(SVG + "path") if svg.KEY in (p.get("class") or "").split()]
    crit = scaling.critical_world_size(state["b_noise"], state["per_device_batch"])
    assert len(keyed) == (2 if crit <= 16384 else 1)  # the line at N, and the B = B_noise line where it is on the axis
    assert float(re.match(r"M([\d.]+) ", keyed[-1].get("d")).group(1)) == pytest.approx(fig23.NARROW.x(state["N"]), abs=0.01)


# ---- Figure 24 -------------------------------------------------------------------------------------

@pytest.mark.parametrize("fault, timeout_s, at_s", [
    ("divergent_control_flow", 600, 3600), ("dead_rank", 60, 10), ("slow_rank", 2, 86400), ("slow_rank", 600, 60),
    ("io_stall", 600, 7200), ("io_stall", 3600, 7200), ("wrong_process_group", 1800, 300), ("healthy", 600, 3600),
])
def test_figure_24_readouts_are_the_models(fault, timeout_s, at_s):
    _, v = render(24, fault=fault, timeout_s=timeout_s, at_s=at_s)
    t = reliability.hang_timeline(fault, timeout_s=timeout_s, at_s=at_s)
    got = values(v)
    assert got["blocked_ranks"] == len(t.blocked_ranks)
    assert got["detected_after_s"] == t.detected_after_s
    assert got["first_stuck_call"] == ("none" if t.first_stuck is None else t.first_stuck.call.op)
    assert got["outcome"] == t.report.status
    assert got["longest_wait_s"] == t.longest_wait_s


def test_figure_24_default_divergent_rank_is_the_first_stuck_and_the_dead_rank_costs_one_timeout():
    _, v = render(24)
    got = values(v)
    assert got == {**got, "blocked_ranks": 4, "detected_after_s": 600.0, "first_stuck_call": "allgather"}
    _, dead = render(24, fault="dead_rank", timeout_s=1800)
    assert values(dead)["detected_after_s"] == 1800 and values(dead)["blocked_ranks"] == 3
    assert values(dead)["first_stuck_call"] == "allreduce"


@pytest.mark.parametrize("fault", ["divergent_control_flow", "mismatched_order", "mismatched_shapes", "wrong_process_group", "dead_rank"])
def test_figure_24_draws_one_parked_bar_per_blocked_rank_and_the_watchdog(fault):
    _, v = render(24, fault=fault)
    t = reliability.hang_timeline(fault, timeout_s=600, at_s=3600)
    assert subpaths(path_data(v, "fill-warn svg-faint")[0]) == len(t.blocked_ranks)
    assert "watchdog fires" in texts(v) and "fault" in texts(v)
    arrows = path_data(v, "stroke-warn")  # who waits on whom: one arrow (shaft + head) per pair
    assert sum(d.count("M") for d in arrows if "L" in d) >= 2 * len(set(t.waits_at(t.watchdog_at_s)))
    assert v.html.count("Watchdog caught collective operation timeout") == len(t.blocked_ranks)
    assert v.html.count("<tr>") == 5  # header + one row per rank


def test_figure_24_a_dead_or_busy_rank_is_the_one_missing_from_the_grep():
    _, v = render(24, fault="io_stall")
    assert "[Rank 2]" not in v.html and "no line from rank 2" in v.html
    assert any(t.startswith("inside no collective") for t in texts(v))
    _, dead = render(24, fault="dead_rank")
    assert "no dump: the process is gone" in dead.html and any(t.startswith("gone:") for t in texts(dead))
    assert "A rank that is simply gone: the fault, on rank 2 (red dot), 60 min into the run" in texts(dead)
    _, v = render(24, fault="mismatched_shapes")
    assert "ranks 0, 1, 3 in ALLGATHER of 4,096; rank 2 in ALLGATHER of 4,000" in v.html


def test_figure_24_without_a_watchdog_error_there_is_no_dump_and_no_parked_bar():
    for fault, timeout_s in (("healthy", 600), ("slow_rank", 600), ("io_stall", 3600)):
        _, v = render(24, fault=fault, timeout_s=timeout_s)
        assert "nothing is dumped" in v.html and "watchdog fires" not in texts(v)
        assert subpaths(path_data(v, "fill-warn svg-faint")[0]) == 0
        assert values(v)["detected_after_s"] is None and values(v)["blocked_ranks"] == 0


def test_figure_24_the_fault_time_moves_the_clock():
    """The fault's time moved only the title; the run's clock above the lanes now shows it: the
    training before the fault against the timeout after it (red), to scale."""
    _, early = render(24, at_s=60)
    _, late = render(24, at_s=86400)
    assert "Divergent control flow: the fault, on rank 3 (red dot), 60 s into the run" in texts(early)
    assert "Divergent control flow: the fault, on rank 3 (red dot), 24 h into the run" in texts(late)
    assert "the run so far: 60 s of training, then 10 min with nothing able to complete until the watchdog fires" \
        in texts(early)
    assert "SeqNum=47," in early.html and "SeqNum=69119," in late.html  # 23 / 34559 healthy steps ran before

    def run_bars(v):  # (training, stuck) widths of the run's clock, in px
        widths = [float(w) for d in path_data(v, "fill-compute") + path_data(v, "fill-warn", exact=True)
                  for w in re.findall(r"M[\d.]+ 24\.00h([\d.]+)", d)]
        return widths
    (train_early, stuck_early), (train_late, stuck_late) = run_bars(early), run_bars(late)
    assert train_early + stuck_early == pytest.approx(train_late + stuck_late) == 484  # the lanes' width
    assert stuck_early == pytest.approx(484 * 600 / 660, abs=0.01)
    assert stuck_late == pytest.approx(484 * 600 / 87000, abs=0.01)


@pytest.mark.parametrize("fault", ["divergent_control_flow", "io_stall", "dead_rank", "mismatched_order",
                                   "wrong_process_group", "slow_rank", "mismatched_shapes"])
def test_figure_24_the_red_dot_always_marks_the_rank_at_fault_where_the_fault_strikes(fault):
    """The dot marked the culprit in "divergent" but the three victims in "I/O stall": it now
    marks the rank at fault (said in the title), on the fault line, for every fault."""
    _, v = render(24, fault=fault)
    [dots] = path_data(v, f"fill-warn {svg.KEY}", exact=True)  # the dots carry the drawing's point
    centres = [(float(x) + 4.5, float(y)) for x, y in re.findall(r"M([\d.]+) ([\d.]+)a4\.50", dots)]
    culprits = reliability.culprits(fault)
    assert [round((y - 82 - 9) / 50) for _, y in centres] == list(culprits) and len(culprits) == 1
    [fault_line] = path_data(v, "svg-ink svg-dash")
    assert {x for x, _ in centres} == {float(fault_line[1:].split(" ")[0])}
    assert f"on rank {culprits[0]} (red dot)" in texts(v)[0]
    assert not any("a4.50" in d for d in path_data(render(24, fault="healthy")[1], "fill-warn"))


@pytest.mark.parametrize("changes", [{}, {"fault": "io_stall"}, {"fault": "dead_rank", "at_s": 10},
                                     {"fault": "io_stall", "timeout_s": 3600}, {"fault": "slow_rank", "timeout_s": 2}])
def test_figure_24_no_line_crosses_the_words_under_the_lanes(changes):
    """The fault and watchdog lines and the cuts in time ran through the lanes' captions."""
    _, v = render(24, **changes)
    root = ET.fromstring(v.svg)
    captions = [(float(t.get("x")), float(t.get("y")), len(t.text)) for t in root.iter(f"{SVG}text")
                if t.get("class", "").startswith("svg-label-soft svg-halo")]
    assert len(captions) == 4
    lines = [tuple(map(float, m)) for d in path_data(v, "svg-ink") + path_data(v, "stroke-warn", exact=True)
             for m in re.findall(r"M([\d.]+) ([\d.]+)L([\d.]+) ([\d.]+)", d)]
    for x, y, n in captions:  # 12 px text: from 10 above its baseline to 3 below, ~7.4 px a character
        for x1, y1, x2, y2 in lines:
            inside_x = min(x1, x2) <= x + 7.4 * n and max(x1, x2) >= x
            assert not (inside_x and min(y1, y2) < y + 3 and max(y1, y2) > y - 10), (x, y, (x1, y1, x2, y2))



@pytest.mark.parametrize("changes", [{}, {"fault": "dead_rank"}, {"fault": "healthy"}, {"fault": "slow_rank", "timeout_s": 2},
                                     {"fault": "mismatched_shapes", "at_s": 10}, {"fault": "io_stall", "timeout_s": 3600}])
def test_figure_24_on_a_phone_the_lanes_take_the_width_and_the_graph_goes_under_them(changes):
    """Narrow (issue 34): a 320-unit drawing in one column: the lanes' captions wrapped under each
    lane, the graph of who waits on whom under the time axis, no text outside the drawing or on
    another; the fault line and the culprit's dot (with no fault: the lanes) carry svg-key."""
    state, wide = render(24, **changes)
    narrow = registry()[24].render(state, narrow=True)
    root = ET.fromstring(narrow.svg)
    width, height = map(float, root.get("viewBox").split()[2:])
    assert width == 320 and height > float(ET.fromstring(wide.svg).get("viewBox").split()[3])
    boxes = text_boxes(narrow)
    assert [t for t, box in boxes if not inside(box, narrow)] == []
    assert [(t, u) for i, (t, a) in enumerate(boxes) for u, b in boxes[i + 1:] if boxes_overlap(a, b)] == []
    axis = next(box for t, box in boxes if t.startswith("time from the"))
    graph = next(box for t, box in boxes if t == "who waits on whom")
    assert graph[1] > axis[1] + axis[3]  # stacked, not beside the lanes
    keyed = [p.get("class") for p in root.iter(SVG + "path") if svg.KEY in (p.get("class") or "").split()]
    if state["fault"] == "healthy":
        assert keyed == [f"svg-lane {svg.KEY}"]
    else:
        assert keyed == [f"svg-ink svg-dash {svg.KEY}", f"fill-warn {svg.KEY}"]
        [line] = path_data(narrow, "svg-ink svg-dash")
        [dots] = path_data(narrow, f"fill-warn {svg.KEY}", exact=True)
        assert float(re.match(r"M([\d.]+)", line).group(1)) == pytest.approx(float(re.match(r"M([\d.]+)", dots).group(1)) + 4.5)


# ---- Figure 25 -------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes", [{}, {"N": 8}, {"N": 16384, "cv": 0.2, "seed": 7}, {"N": 64, "cv": 0.01, "bad": 0.05},
                                     {"N": 1, "cv": 0, "bad": 1}])
def test_figure_25_readouts_are_the_models(changes):
    state, v = render(25, **changes)
    got = values(v)
    n, cv, bad = state["N"], state["cv"], state["bad"]
    assert got["expected_max_over_mean"] == reliability.expected_max_normal(n, 1.0, cv)
    assert got["asymptotic_over_mean"] == reliability.expected_max_normal_asymptotic(n, 1.0, cv)
    assert got["tax_fraction"] == max(reliability.straggler_tax(n, 1.0, cv), bad)
    assert got["sampled_step"] == reliability.sample_step(n, 1.0, cv, seed=state["seed"], bad_slowdown=bad).step_s
    assert got["healthy_tax"] == reliability.straggler_tax(n, 1.0, cv)


def test_figure_25_default_is_the_articles_eleven_percent_and_one_bad_card_dominates():
    _, v = render(25)
    assert [r.text for r in v.readouts if r.key == "tax_fraction"] == ["10.9%"]
    assert values(render(25, N=8)[1])["tax_fraction"] == pytest.approx(0.0427, abs=5e-5)
    _, bad = render(25, N=64, cv=0.01, bad=0.05)
    assert values(bad)["tax_fraction"] == 0.05 > values(bad)["healthy_tax"]
    assert "bad card (+5%)" in texts(bad) and "one bad card, +5%" in texts(bad)
    assert not any("bad card" in t for t in texts(v))


@pytest.mark.parametrize("n", [64, 1024, 16384])
def test_figure_25_histogram_holds_every_drawn_rank_and_says_how_many(n, monkeypatch):
    seen = []
    original = reliability.histogram_counts
    monkeypatch.setattr(reliability, "histogram_counts", lambda *args: seen.append(original(*args)) or seen[-1])
    state, v = render(25, N=n, cv=0.05)
    step = reliability.sample_step(n, 1.0, 0.05, seed=state["seed"])
    (counts,) = seen
    assert sum(counts) == len(step.shown_times_s) == min(n, reliability.MAX_SHOWN_RANKS)  # none falls off the axis
    (bars,) = path_data(v, "fill-compute")
    assert subpaths(bars) == sum(1 for c in counts if c)
    assert any(f"{reliability.MAX_SHOWN_RANKS:,} ranks drawn one by one" in t for t in texts(v)) == (n > reliability.MAX_SHOWN_RANKS)


def test_figure_25_prose_names_the_number_of_ranks_drawn_one_by_one():
    from pathlib import Path
    prose = (Path(__file__).resolve().parent.parent / "site" / "content" / "24-failures.md").read_text()
    n = f"{reliability.MAX_SHOWN_RANKS:,}"
    assert f"Past {n} ranks the figure draws {n} of them one by one" in prose


@pytest.mark.parametrize("changes", [{}, {"bad": 0.05, "N": 64}, {"bad": 1, "N": 1}, {"cv": 0, "N": 16384},
                                     {"cv": 0.2, "bad": 0.2}, {"N": 2, "seed": 7}, {"bad": 0.01, "N": 4096, "cv": 0.01}])
def test_25_marker_labels_sit_on_no_bar_nor_on_each_other(changes):
    """'slowest this step' was drawn over the histogram's bars; now every label is placed
    by svg.place_labels clear of the bars, the dots and the other labels."""
    _, view = render(25, **changes)
    boxes = text_boxes(view)
    bars = rectangles(view, "fill-compute")
    assert bars and [(t, bar) for t, box in boxes for bar in bars if boxes_overlap(box, bar)] == []
    assert "slowest this step" in [t for t, _ in boxes]
    assert [t for t, box in boxes if not inside(box, view)] == []
    assert [(t, u) for i, (t, a) in enumerate(boxes) for u, b in boxes[i + 1:] if boxes_overlap(a, b)] == []


@pytest.mark.parametrize("changes", [{}, {"bad": 0.05, "N": 64, "cv": 0.01}, {"bad": 1, "N": 1, "cv": 0}, {"cv": 0.2, "N": 16384}])
def test_figure_25_on_a_phone_the_slowest_rank_and_the_tax_fit_one_column(changes):
    """Narrow (issue 34): a 320-unit drawing, its labels inside it, clear of the bars and of each
    other; the slowest rank's dot and the expected slowest line marked as the drawing's point;
    the tax plot's curves named in a legend under its axis."""
    state, wide = render(25, **changes)
    narrow = registry()[25].render(state, narrow=True)
    root = ET.fromstring(narrow.svg)
    assert float(root.get("viewBox").split()[2]) == 320
    boxes = text_boxes(narrow)
    assert [t for t, box in boxes if not inside(box, narrow)] == []
    assert [(t, u) for i, (t, a) in enumerate(boxes) for u, b in boxes[i + 1:] if boxes_overlap(a, b)] == []
    bars = rectangles(narrow, "fill-compute")
    assert [t for t, box in boxes for bar in bars if boxes_overlap(box, bar)] == []
    keyed = [p.get("class") for p in root.iter(SVG + "path") if svg.KEY in (p.get("class") or "").split()]
    assert keyed == [f"svg-ink {svg.KEY}", f"svg-ink-fill {svg.KEY}"]
    axis = next(box for t, box in boxes if t == "world size N (GPUs, log scale)")
    named = [t for t, box in boxes if box[1] > axis[1] + axis[3]]
    assert named == ["exact", "√(2 ln N) rule"] + ([f"one bad card, +{state['bad']:.0%}"] if state["bad"] else [])


@pytest.mark.parametrize("changes", [{"N": 64, "cv": 0.01, "bad": 0.05}, {}, {"N": 8, "cv": 0.2, "bad": 1}, {"cv": 0}])
def test_figure_25_the_waiting_band_ends_at_the_step_drawn(changes):
    """With a bad card the band stopped at +5% (the expected tax's lower bound) while the
    step drawn read +6.35%: the band is the wait of a rank at the mean up to this step's
    slowest rank, the dot marked 'slowest this step'."""
    _, view = render(25, **changes)
    (band,) = rectangles(view, "fill-idle")
    dot = path_data(view, "svg-ink-fill")[0]  # the slowest rank's dot (the tax plot's comes after)
    left, r = (float(v) for v in re.match(r"M(-?[\d.]+) [\d.]+a([\d.]+)", dot).groups())
    assert band[0] + band[2] == pytest.approx(left + r, abs=0.02)


@pytest.mark.parametrize("changes, says", [
    ({}, "At N = 256 strong scaling runs above weak: each GPU computes 4 samples a step, weak scaling's 2, so more "
         "compute hides the same AllReduce."),
    ({"N": 512}, "At N = 512 strong and weak scaling meet: both give each GPU 2 samples a step and the same AllReduce."),
    ({"N": 1024}, "At N = 1,024 strong scaling runs below weak: each GPU computes 1 sample a step, weak scaling's 2, "
                  "so less compute hides the same AllReduce."),
    ({"N": 16384}, "At N = 16,384 strong scaling runs below weak: each GPU computes a fraction of a sample a step, "
                   "weak scaling's 2, so less compute hides the same AllReduce."),
])
def test_figure_23_says_in_the_drawing_why_strong_sits_above_or_below_weak(changes, says):
    """At its default the strong curve sat above the weak one with no word why: the drawing
    says it, and the order it names is the curves' (the readouts') order."""
    for narrow in (False, True):
        state = registry()[23].validate_state({**registry()[23].default_state(), **changes})
        view = registry()[23].render(state, narrow=narrow)
        assert says in " ".join(texts(view))
        assert all(inside(box, view) for _, box in text_boxes(view))
    strong, weak = values(view)["strong_efficiency"], values(view)["weak_efficiency"]
    assert ("above" in says) == (strong > weak + 1e-12) and ("meet" in says) == (abs(strong - weak) < 1e-12)


@pytest.mark.parametrize("narrow", [False, True])
def test_figure_23_the_n_label_sits_clear_of_every_curve_dot_and_line(narrow):
    """At 16K 'N = 16,384' sat where three curves and their dots end; it is placed clear of
    them, here and at every control's ends (wide), and at 16K and the default (narrow)."""
    from tests.browser.test_text_overlaps import extreme_states
    from tests.figure_views import marks_through_labels
    figure = registry()[23]
    states = (extreme_states(figure) if not narrow else
              [("default", figure.default_state()), ("16K", {**figure.default_state(), "N": 16384})])
    found = [(name, hit) for name, state in states
             for hit in marks_through_labels(figure.render(state, narrow=narrow)) if hit[0].startswith("N = ")]
    assert found == []


@pytest.mark.parametrize("narrow", [False, True])
def test_figure_25_no_marker_line_runs_through_a_label(narrow):
    """'slowest this step' sat across the E[slowest] and rule-of-thumb lines, and
    'E[slowest] = ...' across the rule's dashed line: the lines are obstacles the labels
    are placed around, at the default, every control's ends and the bad-card try."""
    from tests.browser.test_text_overlaps import extreme_states
    from tests.figure_views import marks_through_labels
    figure = registry()[25]
    states = extreme_states(figure) + [("bad", {**figure.default_state(), "N": 64, "cv": 0.01, "bad": 0.05})]
    found = [(name, hit) for name, state in states for hit in marks_through_labels(figure.render(state, narrow=narrow))]
    assert found == []
