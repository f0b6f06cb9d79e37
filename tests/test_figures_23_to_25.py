"""Figures 23-25: the starred readouts are the model's numbers, the defaults tell the article's story,
and the drawings show what the numbers say (read back from the SVG)."""
import pytest

from models import hardware, reliability, scaling
from tests.figure_views import inside, overlap as boxes_overlap, path_data, rectangles, render, shapes, subpaths, text_boxes, texts, values


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


def test_figure_23_default_reads_95_percent_while_training_needs_twice_the_samples():
    _, v = render(23)
    got = values(v)
    assert round(got["weak_efficiency"], 2) == 0.95 and got["sample_efficiency"] == 0.5 and got["examples_multiplier"] == 2
    assert "B = B_noise at N = 1,024" in texts(v)


def test_figure_23_draws_the_strong_curve_dashed_once_a_device_would_hold_less_than_a_sample():
    _, v = render(23, global_batch=16384 * 4)  # never below one sample: no dashed part
    assert not path_data(v, "stroke-comm svg-dash")
    _, v = render(23, global_batch=256)
    assert len(path_data(v, "stroke-comm svg-dash")) == 1 and len(path_data(v, "stroke-comm")) == 2
    assert "data parallelism alone cannot split it" in render(23, N=4096, global_batch=256)[1].note


def test_figure_23_marks_the_readers_n_on_every_curve_and_hides_b_noise_off_the_axis():
    _, v = render(23, N=64, per_device_batch=1, b_noise=131072)  # B_noise reached only at N = 131,072
    assert not any(t.startswith("B = B_noise") for t in texts(v)) and "N = 64" in texts(v)
    for colour in ("comm", "dp", "idle", "warn"):
        assert shapes(v, f"fill-{colour}") == 1  # one marker dot per curve


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
    assert "A rank that is simply gone: fault 60 min into the run; ranks 0, 1, 3 stop first (red dot)" in texts(dead)
    _, v = render(24, fault="mismatched_shapes")
    assert "ranks 0, 1, 3 in ALLGATHER of 4,096; rank 2 in ALLGATHER of 4,000" in v.html


def test_figure_24_without_a_watchdog_error_there_is_no_dump_and_no_parked_bar():
    for fault, timeout_s in (("healthy", 600), ("slow_rank", 600), ("io_stall", 3600)):
        _, v = render(24, fault=fault, timeout_s=timeout_s)
        assert "nothing is dumped" in v.html and "watchdog fires" not in texts(v)
        assert subpaths(path_data(v, "fill-warn svg-faint")[0]) == 0
        assert values(v)["detected_after_s"] is None and values(v)["blocked_ranks"] == 0


def test_figure_24_the_fault_time_moves_the_clock():
    _, early = render(24, at_s=60)
    _, late = render(24, at_s=86400)
    assert "Divergent control flow: fault 60 s into the run; rank 3 stops first (red dot)" in texts(early)
    assert "Divergent control flow: fault 24 h into the run; rank 3 stops first (red dot)" in texts(late)
    assert "SeqNum=47," in early.html and "SeqNum=69119," in late.html  # 23 / 34559 healthy steps ran before


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
    (bars,) = path_data(v, "fill-forward")
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
    bars = rectangles(view, "fill-forward")
    assert bars and [(t, bar) for t, box in boxes for bar in bars if boxes_overlap(box, bar)] == []
    assert "slowest this step" in [t for t, _ in boxes]
    assert [t for t, box in boxes if not inside(box, view)] == []
    assert [(t, u) for i, (t, a) in enumerate(boxes) for u, b in boxes[i + 1:] if boxes_overlap(a, b)] == []
