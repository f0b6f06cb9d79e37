"""Issue 43, point 2, for Figures 12, 17, 13, 10 and 02: each figure says only what is true,
says what changed when one control moves another, and keeps what it draws visible."""
import itertools

import pytest

from figures import fig12_tp_tax as fig12, registry
from models import hardware, tensor
from tests.figure_views import inside, overlap, readouts, render, text_boxes, texts, values, view


def _no_text_overlaps(v):
    boxes = text_boxes(v)
    return [(a, b) for (a, box_a), (b, box_b) in itertools.combinations(boxes, 2) if overlap(box_a, box_b)]


def _clean(v):
    """Every label inside the drawing and none on another."""
    assert [t for t, box in text_boxes(v) if not inside(box, v)] == []
    assert _no_text_overlaps(v) == []


# ---- Figure 12: an NVL72 rack is Blackwell; an H100's NVLink domain is a node of 8 ----------------

def test_figure_12s_nvl72_try_is_a_blackwell_rack_on_nvlink_5():
    [(label, changes)] = [(label, changes) for label, changes in fig12.TRIES if "NVL72" in label]
    state, v = render(12, **changes)
    spec = hardware.gpu(state["gpu"])
    assert spec.generation == "blackwell" and spec.scale_up_link == "nvlink5" and state["gpus"] == 72
    assert "every T up to 64 fits in one NVLink 5 domain" in texts(v)
    assert values(v)["nvlink_domain"] == 72 and values(v)["crosses_node"] == 0


@pytest.mark.parametrize("narrow", [False, True])
@pytest.mark.parametrize("gpu", ["h100_sxm", "h200", "mi300x"])
def test_figure_12_never_puts_72_of_a_node_of_8_gpus_on_one_fabric(gpu, narrow):
    """An H100's NVLink 4 joins the 8 GPUs of its node, not 72: the edge stays at 8 and the
    drawing says why, instead of "every T up to 64 fits in one NVLink 4 domain"."""
    figure = registry()[12]
    state = figure.validate_state({**figure.default_state(), "gpus": 72, "gpu": gpu, "T": 16})
    v = figure.render(state, narrow=narrow)
    shown = " ".join(texts(v))
    assert "fits in one" not in shown
    assert "joins at most 8 GPUs" in shown and "Blackwell NVL72" in shown
    assert values(v)["nvlink_domain"] == 8 and values(v)["crosses_node"] == 1
    model = tensor.tp_layer_time(state["micro"], state["seq"], state["hidden"], 16, gpu=gpu, gpus_per_node=8,
                                 inter_link=state["inter"])
    assert values(v)["layer_time_s"] == model.layer_s and model.crosses_node
    _clean(v)


# ---- Figure 17: raising one degree never silently lowers another -----------------------------------

DEGREES_17 = ("tp", "cp", "dp", "pp")


@pytest.mark.parametrize("start", [{}, {"cp": 8}, {"tp": 64, "pp": 1}, {"dp": 512, "pp": 1}, {"tp": 1, "cp": 1, "pp": 1}])
def test_figure_17_every_stop_a_degree_slider_reaches_keeps_the_other_degrees(start):
    """Issue 43: at the default (TP 8, DP 8, PP 8) raising CP to 64 dropped DP from 8 to 1 with no
    word. Now each degree's slider stops where the world would pass 4,096 GPUs, and every stop it
    does reach leaves the other degrees as they were."""
    figure = registry()[17]
    state = figure.validate_state({**figure.default_state(), **start})
    limits = figure.limits(state)
    for axis in DEGREES_17:
        control = figure.control(axis)
        reachable = [value for value in control.values if value <= limits[axis]]
        assert reachable[-1] * (state["tp"] * state["cp"] * state["dp"] * state["pp"] // state[axis]) <= 4096
        for value in reachable:
            moved = figure.validate_state({**state, axis: value})
            assert {a: moved[a] for a in DEGREES_17 if a != axis} == {a: state[a] for a in DEGREES_17 if a != axis}
            assert moved[axis] == value
    assert figure.slider_limits(state)["cp"] == figure.control("cp").position_text(
        figure.control("cp").highest_at_most(4096 // (state["tp"] * state["dp"] * state["pp"])))


def test_figure_17_at_the_default_cp_stops_at_8_and_at_the_cap_the_figure_says_why():
    figure = registry()[17]
    assert figure.limits(figure.default_state())["cp"] == 8
    _, v = render(17, cp=8)  # 8 x 8 x 8 x 8 = 4,096 GPUs: every degree's slider is at its top
    assert "lower another first" in v.note
    _, v = render(17)
    assert "lower another first" not in v.note


def test_figure_17_says_when_ep_is_all_of_dp_times_cp():
    _, v = render(17, ep=8)
    assert "EP is 8, all of DP \u00d7 CP" in v.note
    _, v = render(17, ep=4)
    assert "EP is" not in v.note


def test_figure_17_says_when_the_rank_is_the_last_one_a_lower_degree_moves():
    """The rank slider's value is kept inside the world: at the last rank, lowering any
    degree moves it, and the note says so beforehand (no silent clamp: issue 43.2)."""
    figure = registry()[17]
    state = figure.default_state()
    last = state["tp"] * state["cp"] * state["dp"] * state["pp"] - 1
    _, v = render(17, rank=last)
    assert f"Rank {last:,} is the last of the {last + 1:,}" in v.note
    assert figure.validate_state({**state, "rank": last, "dp": state["dp"] // 2})["rank"] < last
    _, v = render(17, rank=0)
    assert "is the last of the" not in v.note


# ---- Figure 13: the heads slider's stops that h rules out are named, never silently snapped ---------

def test_figure_13_at_h_6144_says_why_the_heads_slider_stops_at_128():
    """160 heads do not divide h = 6,144: the slider's range ends at 128 and the figure says why."""
    figure = registry()[13]
    state, v = render(13, h=6144)
    assert figure.limits(state)["a"] == 128
    assert v.note.startswith("Heads must divide h = 6,144, and 160 does not: the heads slider stops at 128.")
    assert readouts(v)["heads_allowed"].text == "8, 16, 32, 64, 96, 128"


@pytest.mark.parametrize("h", [1024, 2048, 4096, 6144, 8192, 12288, 16384, 20480, 25600])
def test_figure_13_names_every_heads_stop_that_h_rules_out(h):
    """Every stop of the heads slider either is itself in this state or is named in the note,
    with the value it gives (a stop in the middle of the range, like 96 at h = 4,096, snaps)."""
    figure = registry()[13]
    state, v = render(13, h=h)
    for a in figure.control("a").values:
        moved = figure.validate_state({**state, "a": a})
        if moved["a"] != a:
            assert str(a) in v.note
            if a < figure.limits(state)["a"]:
                assert f"{a} stop gives {moved['a']}" in v.note
            else:
                assert f"stops at {figure.limits(state)['a']}" in v.note
    if all(h % a == 0 for a in figure.control("a").values):
        assert "Heads must" not in v.note


def test_figure_13_says_where_t_stops_for_few_heads():
    _, v = render(13, h=4096, a=8)
    assert "t must divide the 8 heads: its slider stops at 8." in v.note


# ---- Figure 10: which shard groups fit, seen and said ------------------------------------------------

def _memory_bars(v):
    from tests.figure_views import rectangles

    fit = rectangles(v, "fill-memory")
    over = [b for b in rectangles(v, "fill-warn") if b[2:] != (10.0, 10.0)]  # not the legend's swatch
    return fit, over


@pytest.mark.parametrize("narrow", [False, True])
def test_figure_10_at_1t_parameters_says_does_not_fit_in_the_drawing_and_the_readouts(narrow):
    figure = registry()[10]
    state = figure.validate_state({**figure.default_state(), "params": 1_000_000_000_000})
    v = figure.render(state, narrow=narrow)
    shown = readouts(v)
    assert shown["fits"].value == 0 and "does not fit" in shown["fits"].text and shown["fits"].color == "warn"
    drawn = texts(v)
    assert "2,000 GB (does not fit)" in drawn and "over the HBM line: does not fit" in drawn
    assert "does not fit" in v.alt
    _clean(v)


@pytest.mark.parametrize("params", [7_500_000_000, 70_000_000_000, 1_000_000_000_000])
def test_figure_10s_memory_axis_shows_which_shard_groups_fit(params):
    """On a linear axis to 1T parameters' 16 TB, the two groups that fit (62.5 and 31 GB) were
    under a pixel tall and the HBM line sat on the baseline. On the log axis every bar is
    visible, the groups that fit are the ones under the HBM line, and those over it are red."""
    from figures.fig10_hsdp_mesh import POWERS, REFERENCE_GPU
    from models import memory

    state, v = render(10, params=params)
    fit, over = _memory_bars(v)
    sizes = [s for s in POWERS if s <= state["N"]]
    hbm = hardware.gpu(REFERENCE_GPU).hbm_bytes
    held = {s: memory.hsdp_model_states(params, state["N"], s).total_bytes for s in sizes}
    assert len(fit) == sum(1 for b in held.values() if b <= hbm) and len(over) == len(sizes) - len(fit)
    assert min(b[3] for b in fit + over) >= 4  # every bar visible (linear: 1T's fitting bars were 1 unit, the floor)
    from tests.figure_views import path_data

    [line] = path_data(v, "stroke-capacity")
    hbm_y = float(line.split()[1].split("L")[0])  # "M96.00 300.06L548.00 300.06"
    assert all(b[1] > hbm_y for b in fit) and all(b[1] < hbm_y for b in over)
    if params == 1_000_000_000_000:
        assert len(fit) == 2  # 256 and 512 GPUs a group (the prose's "256 GPUs wide")


# ---- Figure 02: the kept slice is visible, the Expert cut of a dense model is explained ------------

def _kept(v, key):
    from tests.figure_views import rectangles

    return [b for b in rectangles(v, f"fill-{key}") if b[2] > 0 and b[3] > 0]


@pytest.mark.parametrize("narrow", [False, True])
@pytest.mark.parametrize("degree", [8, 64])
def test_figure_02_draws_every_kept_slice_at_least_a_few_units_thick_and_says_so(degree, narrow):
    """Issue 43: at 1/d the ZeRO-3 strip's and the Context panel's slices were hairlines (12/64
    and 20/64 of a unit). Each kept slice is now at least MIN_SLICE thick (where its room
    allows), and the panels drawn so are marked * and named in the note as not to scale."""
    from figures.fig02_six_cuts import MIN_SLICE

    figure = registry()[2]
    state = figure.validate_state({**figure.default_state(), "degree": degree, "cut": "zero"})
    v = figure.render(state, narrow=narrow)
    zero_strip = min(b[3] for b in _kept(v, "zero"))
    context_slices = [b[3] for b in _kept(v, "cp") if b[2] > 100]  # the four token slices (the strip is whole)
    assert zero_strip >= MIN_SLICE and min(context_slices) >= MIN_SLICE
    drawn = texts(v)
    assert any(t.endswith("ways *") for t in drawn) and "Not to scale" in v.note
    assert "ZeRO-3 / FSDP" in v.note.split("Not to scale")[1] and "Context" in v.note.split("Not to scale")[1]
    assert [t for t, box in text_boxes(v) if not inside(box, v)] == []


def test_figure_02_marks_nothing_where_every_slice_is_to_scale():
    _, v = render(2, degree=2)
    assert "Not to scale" not in v.note and not any(t.endswith("*") for t in texts(v))


@pytest.mark.parametrize("narrow", [False, True])
def test_figure_02_says_what_the_expert_cut_means_for_a_dense_model(narrow):
    figure = registry()[2]
    v = figure.render(figure.default_state(), narrow=narrow)
    assert any(t.startswith("Expert (as MoE)") for t in texts(v))
    assert "a dense model has no experts" in v.note and "64 experts" in v.note


def test_figure_02s_words_are_never_faded_with_the_panels_not_chosen():
    """The muted panels faded their words too (soft ink at half opacity: 2.15:1). Only the
    drawing of a cut not chosen is muted; its title and text keep their contrast."""
    import xml.etree.ElementTree as ET

    from tests.figure_views import SVG

    root = ET.fromstring(view(2).svg)
    for group in root.iter(SVG + "g"):
        if "svg-muted" in (group.get("class") or ""):
            assert list(group.iter(SVG + "text")) == []


# ---- Figure 19: the text of the branches not taken keeps its contrast --------------------------------

@pytest.mark.parametrize("narrow", [False, True])
def test_figure_19s_text_off_the_path_is_soft_ink_not_faded(narrow):
    """The unlit questions and fixes were faded to 40% (1.81:1). They still say what each other
    branch would do, so they are drawn in the soft ink at full opacity (as every soft label is);
    their boxes and links carry the dimming."""
    import xml.etree.ElementTree as ET

    from figures.fig19_decision_tree import OFF_PATH
    from tests.figure_views import SVG

    figure = registry()[19]
    v = figure.render(figure.default_state(), narrow=narrow)
    root = ET.fromstring(v.svg)
    off = [t for t in root.iter(SVG + "text") if OFF_PATH in (t.get("class") or "")]
    assert off, "the default lights one branch: the others' text is off the path"
    for node in root.iter():
        classes = (node.get("class") or "").split()
        if node.tag == SVG + "text" or list(node.iter(SVG + "text")):
            assert "svg-dim" not in classes and "svg-muted" not in classes and node.get("opacity") is None
    assert all("svg-label-soft" in t.get("class") for t in off)
