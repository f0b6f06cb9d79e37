"""Figures 04-07: the starred readouts equal the models' values, the defaults reproduce the
article's numbers, and the drawings show what the issue asks for."""
import re
import xml.etree.ElementTree as ET

import pytest

from figures import registry
from tests.figure_views import sweep_states
from models import ddp, hardware, memory, overlap, sampler
from tests.figure_views import SVG, inside, overlap as boxes_overlap, paths, readouts, rectangles, render, text_boxes, texts, values


# --- Figure 04 --------------------------------------------------------------------------------

@pytest.mark.parametrize("changes", [{}, {"variant": "no_rank_offset", "dp": 2}, {"variant": "epoch_not_set", "epochs": 4},
                                     {"dp": 1024, "dataset": 16, "micro": 64, "accum": 64}, {"dp": 64, "variant": "no_rank_offset"}])
def test_04_readouts_are_the_models(changes):
    state, rendered = render(4, **changes)
    audit = sampler.sampler_audit(state["dataset"], state["dp"], state["epochs"], variant=state["variant"])
    got = values(rendered)
    assert got["global_batch"] == sampler.global_batch_samples(state["micro"], state["accum"], state["dp"])
    assert got["unique_fraction"] == audit.unique_fraction
    assert got["duplicated_samples"] == audit.duplicated_samples
    assert got["repeated_epochs"] == audit.repeated_epochs and got["draws"] == audit.draws
    assert got["steps_per_epoch"] == sampler.steps_per_epoch(state["dataset"], state["micro"], state["accum"], state["dp"])


def test_04_default_is_the_article_example_and_a_clean_sampler():
    assert values(render(4, micro=4, accum=8, dp=64)[1])["global_batch"] == 2048  # 4 x 8 x 64, the article's example
    got = values(render(4)[1])
    assert (got["unique_fraction"], got["duplicated_samples"], got["repeated_epochs"]) == (1.0, 0, 0)


def test_04_the_default_dataset_is_many_steps_long_and_a_step_larger_than_it_says_so():
    """The defaults drew a 256-sample step from a 64-sample dataset: four epochs in one step.
    Now 16 samples a step from 128, eight steps an epoch; a step past the dataset is flagged."""
    _, default = render(4)
    got = values(default)
    assert got["global_batch"] == 16 and got["steps_per_epoch"] == 8
    assert "an epoch of 128 samples takes 8 steps" in texts(default) and not default.note
    _, big = render(4, micro=4, accum=8, dp=64)
    assert values(big)["steps_per_epoch"] == 1 / 16 and "16 epochs" in readouts(big)["steps_per_epoch"].text
    assert "one step = 16 epochs of 128 samples" in texts(big) and "spans 16 epochs" in big.note
    assert sampler.steps_per_epoch(100, 2, 3, 8) == 13 / 6  # ceil(100 / 8) per rank, 6 a step


def test_04_two_ranks_without_a_rank_offset_draw_half_the_data_twice():
    _, rendered = render(4, variant="no_rank_offset", dp=2)
    assert values(rendered)["unique_fraction"] == 0.5
    # every drawn cell of the strips is red and numbered 2; half of each strip is empty
    assert len(paths(rendered, "stroke-warn")) == 1 and len(paths(rendered, "svg-empty")) == 1
    assert "epoch 0: 64/128 drawn" in texts(rendered)


def test_04_dashboard_is_identical_for_every_sampler():
    dashboards = set()
    for variant in sampler.VARIANTS:
        lines = texts(render(4, variant=variant)[1])
        start = lines.index("The dashboard")
        dashboards.add(tuple(lines[start + 3:start + 7]))
    assert len(dashboards) == 1


def test_04_draws_at_most_16_ranks_and_says_so():
    _, rendered = render(4, dp=1024, accum=64)
    assert "not drawn: 1008 more ranks and 48 more steps" in texts(rendered)
    assert "ranks 16 to 1023 in grey" in texts(rendered)
    grid = [p for p in ET.fromstring(rendered.svg).iter(f"{SVG}path") if (p.get("class") or "").startswith("fill-")]
    assert sum(p.get("d").count("z") for p in grid) == 16 * 16  # a 16 x 16 grid of microbatches
    assert "epoch 1: 128/128 drawn, same order as epoch 0" in texts(render(4, variant="epoch_not_set")[1])


# --- Figure 05 --------------------------------------------------------------------------------

def _step(state):
    return ddp.uniform_step(state["params"], state["layers"], state["backward_ms"] / 1e3, ranks=64,
                            alpha_s=state["alpha_us"] * 1e-6, bandwidth_bytes_per_s=state["bw_GBps"] * 1e9,
                            bucket_cap_mb=state["bucket_mb"])


@pytest.mark.parametrize("changes", [{}, {"bucket_mb": 1}, {"bucket_mb": 1024}, {"layers": 1024, "params": 125_000_000},
                                     {"bw_GBps": 450, "alpha_us": 1, "backward_ms": 50}])
def test_05_readouts_are_the_models(changes):
    state, rendered = render(5, **changes)
    step = _step(state)
    got = values(rendered)
    assert got["buckets"] == len(step.bucket_layers)
    assert got["exposed_comm_s"] == step.exposed_comm_s
    assert got["step_comm_s"] == step.total_comm_s
    assert got["overlap_fraction"] == step.overlap_fraction
    assert got["latency_s"] == step.latency_total_s and got["backward_s"] == step.backward_end_s


def test_05_default_is_pytorchs_25_mib_and_the_sweet_spot_is_in_between():
    state, rendered = render(5)
    assert state["bucket_mb"] == 25 and values(rendered)["buckets"] == 86  # 1 MiB bucket, then 25 MiB (2 layers each)
    exposed = {cap: values(render(5, bucket_mb=cap)[1])["exposed_comm_s"] for cap in (1, 25, 1024)}
    assert exposed[25] < exposed[1] / 10 and exposed[25] < exposed[1024] / 10


def test_05_draws_one_bar_per_bucket_on_each_lane_and_marks_the_tail():
    for cap in (1, 25, 1024):
        state, rendered = render(5, bucket_mb=cap)
        step = _step(state)
        comm = sum(p.get("d").count("M") for p in paths(rendered, "stroke-comm"))
        compute = sum(p.get("d").count("M") for p in paths(rendered, "stroke-backward"))
        latency = sum(p.get("d").count("M") for p in paths(rendered, "stroke-idle"))
        assert comm == compute == latency == len(step.bucket_layers)
        tail = [t for t in texts(rendered) if t.startswith("exposed tail")]
        assert tail and len(paths(rendered, "fill-exposed")) == 1


def test_04_and_05_mark_their_point_for_a_phone_and_keep_its_controls_in_view():
    """Issue 34: Figures 04 and 05 already fit a phone; their drawings now mark the element that
    carries the point (svg.KEY): the step's grid of microbatches, one column per drawn rank; the
    backward pass's end and, where there is one, the exposed tail after it."""
    from figures import registry, svg

    for changes in ({}, {"dp": 1024, "accum": 64}, {"dp": 2}):
        state, rendered = render(4, **changes)
        columns = paths(rendered, svg.KEY)
        assert len(columns) == min(state["dp"], 16) and all(p.get("d").count("z") == min(state["accum"], 16) for p in columns)
        assert registry()[4].render(state, narrow=True).svg == rendered.svg  # compact already: one drawing for both
    for changes in ({"bucket_mb": 1}, {"bucket_mb": 25}, {"bucket_mb": 1024}, {"bw_GBps": 1000, "backward_ms": 10000}):
        _, rendered = render(5, **changes)
        assert len(paths(rendered, f"svg-ink {svg.KEY}")) == 1
        assert len(paths(rendered, f"fill-exposed {svg.KEY}")) == (values(rendered)["exposed_comm_s"] > 0)
    assert (registry()[4].primary, registry()[5].primary) == (("dp", "variant"), ("bucket_mb", "bw_GBps"))


# --- Figure 06 --------------------------------------------------------------------------------

def _resources(state):
    gpu = hardware.GPUS[{108: "a100_80gb", 132: "h100_sxm", 148: "b200", 304: "mi300x"}[state["sms"]]]
    return overlap.three_resource_overlap(state["compute_ms"] / 1e3, state["comm_mb"] * 1e6, state["bw_GBps"] * 1e9,
                                          channels=state["channels"], sm_count=state["sms"], mem_bound=state["mem_bound"],
                                          hbm_bytes_per_s=gpu.hbm_bandwidth_bytes_per_s)


@pytest.mark.parametrize("changes", [{}, {"channels": 64}, {"mem_bound": 0.8, "sms": 108}, {"bw_GBps": 50},
                                     {"sms": 304, "comm_mb": 10000, "compute_ms": 1}])
def test_06_readouts_are_the_models(changes):
    state, rendered = render(6, **changes)
    r = _resources(state)
    got = values(rendered)
    assert got["overlap_efficiency"] == r.overlap_efficiency
    assert got["exposed_comm_s"] == r.exposed_comm_s
    assert got["compute_slowdown"] == r.compute_slowdown >= 1
    assert got["step_time_s"] == r.step_s
    assert got["nominal_step_s"] == r.result.nominal_step_s and got["comm_s"] == r.comm_s


def test_06_default_lands_in_the_articles_60_to_90_percent():
    got = values(render(6)[1])
    assert 0.6 <= got["overlap_efficiency"] <= 0.9
    assert 1.05 <= got["compute_slowdown"] <= 1.15  # the article's 5-15% tax
    assert got["step_time_s"] > got["nominal_step_s"]


def test_06_three_gauges_and_three_timelines():
    _, rendered = render(6)
    lines = texts(rendered)
    assert [t.split(":")[0] for t in lines if t.split(":")[0] in ("Link", "SMs", "HBM bandwidth")] == ["Link", "SMs", "HBM bandwidth"]
    assert "SMs: 16 of 132 held by NCCL channels" in lines
    steps = [t for t in lines if ": step " in t]
    assert len(steps) == 3 and steps[1].endswith("10.9 ms")
    exposed = paths(render(6, bw_GBps=50)[1], "fill-exposed")
    assert len(exposed) == 3 and all(re.search(r"h[1-9]", p.get("d")) for p in exposed)


def test_06_marks_the_profilers_slowed_gemm_and_exposed_allreduce_as_its_point():
    """On a phone (issue 34) the element that carries the point stays in view: here the
    profiler's row, where the GEMM runs slower and the AllReduce shows from under it."""
    from figures import registry, svg
    _, rendered = render(6, bw_GBps=50)
    key = paths(rendered, svg.KEY)
    assert sorted(p.get("class") for p in key) == [f"fill-compute {svg.KEY}", f"fill-exposed {svg.KEY}"]
    [faded] = [p for p in key if "fill-compute" in p.get("class")]
    assert faded.get("fill-opacity") == "0.45"
    [row] = [float(y) for y in re.findall(r"M[\d.]+ ([\d.]+)", faded.get("d"))]
    steps = [t for t in texts(rendered) if ": step " in t]
    assert steps[1].startswith("What the profiler records") and 264 + 76 == row  # the second timeline
    assert registry()[6].primary == ("comm_mb", "channels")


# --- Figure 07 --------------------------------------------------------------------------------

@pytest.mark.parametrize("changes", [{}, {"N": 4096}, {"gpu": "mi300x", "N": 1}, {"optimizer": "adam_fp32", "activations_gb": 50},
                                     {"params": 1_000_000_000_000, "gpu": "b200"}])
def test_07_readouts_are_the_models(changes):
    state, rendered = render(7, **changes)
    wall = memory.ddp_memory(state["params"], state["N"], hardware.GPUS[state["gpu"]].hbm_bytes,
                             optimizer=state["optimizer"], activations_bytes=state["activations_gb"] * 1e9)
    got = values(rendered)
    assert got["per_device_bytes"] == wall.per_device_bytes
    assert got["aggregate_bytes"] == wall.aggregate_bytes
    assert got["fits"] == int(wall.fits)
    assert got["largest_params_that_fit"] == wall.largest_params_that_fit
    assert [got[f"{part}_bytes"] for part in ("params", "grads", "optimizer")] == \
        [getattr(wall.states, f"{part}_bytes") for part in ("params", "grads", "optimizer")]
    assert got["activations_bytes"] == wall.activations_bytes == state["activations_gb"] * 1e9


def test_07_default_is_the_articles_7b_that_fits_nowhere():
    got = values(render(7)[1])
    assert got["per_device_bytes"] == 112e9 and got["fits"] == 0  # 16 bytes x 7B > 80 GiB
    assert got["aggregate_bytes"] == 8 * 112e9


def test_07_bars_do_not_move_with_n_and_only_the_job_panel_does():
    bars = {}
    for n in (1, 64, 4096):
        rendered = render(7, N=n)[1]
        bars[n] = tuple(p.get("d") for part in ("params", "grads", "optimizer") for p in paths(rendered, f"fill-{part}"))
        assert len(bars[n]) == 3 and all(d.count("z") == 13 for d in bars[n])  # one bar per N from 1 to 4096
    assert len(set(bars.values())) == 1
    assert any(t.startswith("the job needs 459 TB") for t in texts(render(7, N=4096)[1]))


def test_07_marks_the_chosen_gpus_bar_as_its_point_and_keeps_n_in_view():
    """On a phone (issue 34): the outlined bar of the chosen N is the drawing's point, N the
    control kept in view."""
    from figures import registry, svg
    for n, slot in ((1, 0), (4096, 12)):
        [outline] = rectangles(render(7, N=n)[1], svg.KEY)
        assert abs(outline[0] + outline[2] / 2 - (64 + (slot + 0.5) * (392 - 64) / 13)) < 0.1
    assert registry()[7].primary == ("N", "params")


@pytest.mark.parametrize("changes", [{}, {"compute_ms": 1000}, {"comm_mb": 1}, {"compute_ms": 0.1, "comm_mb": 1},
                                     {"bw_GBps": 10}, {"channels": 64, "mem_bound": 1.0}, {"bw_GBps": 50}])
def test_06_no_label_sits_on_a_fill_or_leaves_the_drawing(changes):
    """The gauges' 'taken / left' labels were haloed over the bars, 'at 80% speed' sat on the
    faded GEMM, the title's top and the time axis' last tick stuck out of the drawing."""
    _, rendered = render(6, **changes)
    boxes = text_boxes(rendered)
    fills = [box for key in ("comm", "forward", "exposed") for box in rectangles(rendered, f"fill-{key}")]
    assert len(fills) >= 9 and not ET.fromstring(rendered.svg).findall(f".//{SVG}text[@class='svg-label-soft svg-halo']")
    assert [(t, f) for t, box in boxes for f in fills if boxes_overlap(box, f)] == []
    assert [t for t, box in boxes if not inside(box, rendered)] == []
    assert not any(boxes_overlap(a, b) for i, (_, a) in enumerate(boxes) for _, b in boxes[i + 1:])
    if changes == {}:
        assert "GEMM at 80%" in texts(rendered)  # the faded stretch is still explained where there is room


@pytest.mark.parametrize("changes", [{}, {"params": 1_000_000_000_000}, {"params": 1_000_000_000, "gpu": "mi300x"},
                                     {"activations_gb": 200, "N": 4096}, {"params": 1_000_000_000_000, "activations_gb": 200}])
def test_07_every_label_fits_the_drawing_and_the_hbm_label_sits_on_no_bar(changes):
    """The job panel's top tick read "000 TB" (1000 TB, cut at the left edge): ticks now
    name PB and the axis leaves room; the HBM line's label sat on the bars."""
    _, rendered = render(7, **changes)
    boxes = text_boxes(rendered)
    assert all(inside(box, rendered) for _, box in boxes), [t for t, box in boxes if not inside(box, rendered)]
    assert not any("000 TB" in t for t, _ in boxes)
    [hbm] = [box for t, box in boxes if t.startswith("HBM of one")]
    bars = [bar for part in ("params", "grads", "optimizer", "activations") for bar in rectangles(rendered, f"fill-{part}")]
    assert len(bars) >= 13 and not any(boxes_overlap(hbm, bar) for bar in bars)
    assert not any(boxes_overlap(a, b) for i, (_, a) in enumerate(boxes) for _, b in boxes[i + 1:])


@pytest.mark.parametrize("optimizer,terms,recipe", [
    ("adam_mixed", "(2 + 2 + 12) bytes", "16 bytes: bf16 weights 2 + bf16 gradients 2 + fp32 master weights, momentum and variance 12"),
    ("adam_fp32", "(4 + 4 + 8) bytes", "16 bytes: fp32 weights 4 + fp32 gradients 4 + fp32 momentum and variance 8"),
    ("sgd_momentum", "(2 + 2 + 8) bytes", "12 bytes: bf16 weights 2 + bf16 gradients 2 + fp32 master weights and momentum 8")])
def test_07_says_which_bytes_per_parameter_it_counts(optimizer, terms, recipe):
    """The planner counts 18 bytes and a checkpoint 14: this figure says it counts ZeRO's 2 + 2 + 12."""
    _, rendered = render(7, optimizer=optimizer)
    shown = readouts(rendered)["bytes_per_param"]
    assert shown.text == recipe and shown.value == memory.OPTIMIZERS[optimizer].bytes_per_param
    assert f"7B parameters \u00d7 {terms}" in texts(rendered)
    assert any(t.startswith(f"7B \u00d7 {terms[:-6]} B + 10 GB activations") for t in texts(render(7, optimizer=optimizer, activations_gb=10)[1]))


# --- shared helpers these figures added -------------------------------------------------------

def test_round_ticks_and_time_axis():
    from figures import svg
    from models import fmt
    assert svg.ticks(0, 10.87, 6) == (0.0, 2.5, 5.0, 7.5, 10.0)
    assert svg.ticks(0, 0.2204, 6) == (0.0, 0.05, 0.1, 0.15, 0.2)
    assert svg.ticks(0, 1, 6) == (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    axis = svg.time_axis(0, 100, 50, 12.0, "{unit} since start")
    assert ">s since start</text>" in axis and ">10</text>" in axis  # 12 s: labelled in seconds
    assert "ms since start" in svg.time_axis(0, 100, 50, 0.2, "{unit} since start")
    assert (fmt.duration(0.0123), fmt.duration(4.5e-5), fmt.duration(1.5), fmt.duration(0)) == ("12.3 ms", "45 \u00b5s", "1.5 s", "0 s")
    assert (fmt.data_size(4.5875e14), fmt.data_size(2.5e7), fmt.data_size(1e12), fmt.data_size(2.5e10)) == ("459 TB", "25 MB", "1 TB", "25 GB")
    assert (fmt.data_size(999.96e12), fmt.data_size(1e15), fmt.data_size(6.5536e16)) == ("1 PB", "1 PB", "65.5 PB")
    assert fmt.count(2048) == "2,048"


def test_figure_04_step_title_stays_inside_the_drawing():
    """At 64 x 64 x 1,024 the title "One step: ... = 4,194,304 samples" ran 54 units past the
    drawing's right edge (clipped): there it drops "One step: " (the next line says it). Its
    next line ("one step = 4096 epochs of the 512 samples") and "not drawn: 16 more steps"
    beside an 8-rank grid ran past it too."""
    figure, states = sweep_states(4)
    for state in states + [figure.validate_state({**figure.default_state(), "micro": 64, "accum": 64, "dp": 1024})]:
        view = figure.render(state)
        assert [t for t, box in text_boxes(view) if not inside(box, view)] == [], state
