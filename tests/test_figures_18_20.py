"""Figures 18-20: their star readouts are the models' numbers, and the drawings show them."""
import re
import xml.etree.ElementTree as ET

import pytest

from figures import registry, svg
from figures.contract import Play, encode_state
from models import ladder, step_timeline, tour
from tests.figure_views import SVG, inside, paths, readouts, render, text_boxes
from tests.published_cases import published_cases


def _figure(number):
    return registry()[number]


def _span_lengths(path):
    """Lengths of the bars an svg.spans path draws ("M x0 y H x1" each)."""
    return [float(x1) - float(x0) for x0, x1 in re.findall(r"M([-\d.]+) [-\d.]+H([-\d.]+)", path.get("d"))]


# ---- Figure 18 ------------------------------------------------------------------------

STATES_18 = (
    {},
    {"cp": True, "ep": True},
    {"tp": False, "pp": False, "fsdp": True, "params": 7_500_000_000, "gpus": 64, "link": "roce_400gbe"},
    {"dp": False, "fsdp": True, "tp": True, "pp": False, "params": 1_008_000_000_000, "gpus": 16384, "link": "ib_xdr"},
    {"tp": False, "pp": False, "batch": 2304},
)


@pytest.mark.parametrize("changes", STATES_18)
def test_fig18_readouts_are_the_step_model(changes):
    state, view = render(18, **changes)
    enabled = frozenset(axis for axis in step_timeline.AXES if state[axis])
    step = step_timeline.step_timeline(state["params"], state["gpus"], enabled, global_batch=state["batch"],
                                       link=state["link"])
    shown = readouts(view)
    assert shown["memory_per_gpu_bytes"].value == step.memory.total_bytes
    assert shown["replica_sequences"].value == step.replica_sequences
    assert shown["global_batch_tokens"].value == state["batch"] * 2048
    assert shown["exposed_comm_s"].value == step.exposed_comm_s
    assert shown["hidden_comm_s"].value == step.hidden_comm_s
    assert shown["step_time_s"].value == step.step_time_s
    for axis in step_timeline.AXES:
        key = f"exposed_{axis}_s"
        if axis in enabled:
            assert shown[key].value == step.exposed_s(axis)
        else:
            assert key not in shown  # only enabled strategies have one
    if step.layout.pp > 1:
        assert shown["bubble_s"].value == step.bubble_s
    else:
        assert "bubble_s" not in shown


def test_fig18_default_is_megatrons_published_layout():
    case = published_cases()["megatron2021-table1-145B"]["inputs"]
    state, view = render(18)
    assert state["params"] == case["params_B"] * 1e9 and state["gpus"] == case["gpus"]
    lay = step_timeline.layout(state["gpus"], {"dp", "tp", "pp"})
    assert (lay.tp, lay.pp, lay.data) == (case["tp"], case["pp"], case["dp"])
    assert readouts(view)["layout"].text == "TP 8 x PP 8 x DP 24 on 1536 GPUs"


def test_fig18_draws_a_lane_per_enabled_strategy_and_its_waits_to_scale():
    state, view = render(18, params=1_700_000_000, gpus=512, cp=True)
    step = step_timeline.step_timeline(state["params"], state["gpus"], frozenset({"dp", "tp", "pp", "cp"}))
    default = step_timeline.step_timeline(state["params"], state["gpus"], frozenset({"dp", "tp", "pp"}))
    lanes = [p for p in ET.fromstring(view.svg).iter(f"{SVG}path") if p.get("class") == "svg-lane"]
    assert len(lanes) == 4  # dp, tp, pp, cp; compute has no lane box
    scale = (714 - 6) / max(step.step_time_s, default.step_time_s)
    waits = paths(view, "stroke-exposed")
    drawn = sum(sum(_span_lengths(p)) for p in waits)
    assert drawn == pytest.approx(step.exposed_comm_s * scale, rel=0.02)  # gaps under half a pixel merge
    assert len(paths(view, "stroke-tp")) == 0 and len(paths(view, "stroke-dp")) == 1  # TP never flies hidden


def _texts(view):
    return [t.text for t in ET.fromstring(view.svg).iter(f"{SVG}text")]


def test_fig18_a_toggle_keeps_the_batch_and_the_time_axis():
    """Context parallelism on (the issue's case): DP 24 -> 12 used to halve the global batch, and
    the step fell from 2.76 to 1.62 s on the same GPUs while the axis rescaled to fit. Now the
    tokens per step stay, each replica takes twice the sequences, the wait grows, and the
    drawing keeps the default layout's axis, marking where its step ends."""
    _, default = render(18)
    _, context = render(18, cp=True)
    before, after = readouts(default), readouts(context)
    assert after["global_batch_tokens"].value == before["global_batch_tokens"].value == 3072 * 2048
    assert (before["replica_sequences"].value, after["replica_sequences"].value) == (128, 256)
    assert after["step_time_s"].value > before["step_time_s"].value  # the same work, and more of it waits
    assert after["exposed_comm_s"].value > before["exposed_comm_s"].value
    assert after["reference_step_s"].value == before["step_time_s"].value
    # one axis: the longer step fills it; the default's end is a dashed mark at its own time
    span = after["step_time_s"].value
    dashed = [p for p in paths(context, "svg-ink svg-dash")]
    xs = {float(x) for x in re.findall(r"M([\d.]+) ", dashed[0].get("d"))}
    assert len(xs) == 1 and xs.pop() == pytest.approx(6 + 708 * before["step_time_s"].value / span, abs=0.01)
    assert "this step 9.99 s; dashed: the default layout (DP, TP, PP) on the same GPUs and batch, 9.16 s (+9%)" \
        in _texts(context)
    assert not paths(default, "svg-ink svg-dash")  # the default is its own reference
    assert any(t.startswith("Global batch 3,072 sequences") and "the same for every toggle" in t for t in _texts(context))


CAPTION_18 = registry()[18].caption


def test_fig18_says_when_a_layout_does_not_fit():
    """DP alone on the 145.6B model needs 2.3 TB of model state on every 80 GB GPU: the
    drawing, the readouts and the note say so (it read as a plain 120 s step)."""
    _, fits = render(18)
    _, alone = render(18, tp=False, pp=False)
    memory = readouts(alone)["memory_per_gpu_bytes"]
    assert memory.value > 2.3e12 and memory.text.endswith("does not fit") and memory.color == "warn"
    assert readouts(alone)["step_time_s"].text.endswith(", if it fit")
    assert any(t.startswith("Does not fit: 2.68 TB per GPU against 85.9 GB") for t in _texts(alone))
    assert alone.note.startswith("This layout does not fit")
    assert readouts(fits)["memory_per_gpu_bytes"].text == "66.9 GB of 85.9 GB: fits"
    assert not any(t.startswith("Does not fit") for t in _texts(fits))
    assert ("18 bytes per parameter as Megatron-LM counts it (bf16 weights 2 + fp32 main gradients 4 + fp32 master "
            "weights, momentum and variance 12)") in fits.note


def test_fig18_holds_one_microbatch_of_activations_not_the_whole_batch():
    """At 8 GPUs (TP 8, one model copy) the figure held all 3,072 sequences' activations at
    once (80.7 TB); a replica accumulates gradients over microbatches, and the drawing says
    its compute lane sums them where the schedule interleaves them."""
    _, eight = render(18, gpus=8)
    mem = readouts(eight)["memory_per_gpu_bytes"]
    assert mem.value < 1e12 and mem.text == "640 GB of 85.9 GB: does not fit"
    assert readouts(eight)["microbatches"].text == "256 microbatches of 12 sequences"
    assert any("each kind of work summed; each runs its forward, then its backward" in t for t in _texts(eight))
    _, default = render(18)
    assert readouts(default)["microbatches"].text == "128 microbatches of one sequence"
    assert any("each kind of work summed; 1F1B runs them one forward, one backward" in t for t in _texts(default))
    assert "18 bytes per parameter" in CAPTION_18 and "Megatron-LM's layout" not in CAPTION_18


def test_fig18_names_the_data_axis_for_what_it_is():
    assert readouts(render(18, dp=False, fsdp=True, tp=False, pp=False)[1])["layout"].text == "FSDP 1536 on 1536 GPUs"
    assert readouts(render(18, fsdp=True, tp=False, pp=False)[1])["layout"].text == "HSDP 8 x 192 on 1536 GPUs"
    assert readouts(render(18, fsdp=True)[1])["layout"].text == "TP 8 x PP 8 x HSDP 8 x 3 on 1536 GPUs"


def test_fig18_says_when_the_batch_does_not_split_evenly():
    _, view = render(18, tp=False, pp=False, gpus=16384)
    assert any(t.startswith("3,072 sequences do not split evenly over 16,384 replicas: 13,312 get none") for t in _texts(view))
    assert readouts(view)["replica_sequences"].label == "sequences per replica (the busiest)"


def test_fig18_says_when_gpus_sit_unused():
    _, view = render(18, dp=False, fsdp=False)
    assert "only 64 GPUs of the 1536 hold the model" in view.note


def _no_text_overlaps(view):
    boxes = text_boxes(view)
    return [(a, b) for i, (a, box) in enumerate(boxes) for b, other in boxes[i + 1:] if svg.boxes_touch(box, other)]


@pytest.mark.parametrize("changes", [{}, {"fsdp": True, "cp": True, "ep": True}, {"tp": False, "pp": False, "gpus": 16384}])
def test_fig18_on_a_phone_wraps_its_lanes_and_keeps_the_waits_marked(changes):
    """Issue 34: on a phone the timeline is 320 units wide, its lane names and banner wrapped
    inside it, and the red waits (the figure's point) are marked svg-key in both drawings
    and take the same share of the time axis."""
    state, wide = render(18, **changes)
    narrow = _figure(18).render(state, narrow=True)
    assert ET.fromstring(narrow.svg).get("viewBox").split()[2] == "320"
    assert [t for t, box in text_boxes(narrow) if not inside(box, narrow)] == []
    assert _no_text_overlaps(narrow) == []
    shares = []
    for view, axis in ((wide, 714 - 6), (narrow, 314 - 6)):
        waits = paths(view, "stroke-exposed")
        assert waits and all(svg.KEY in p.get("class").split() for p in waits)
        shares.append(sum(sum(_span_lengths(p)) for p in waits) / axis)
    assert shares[1] == pytest.approx(shares[0], rel=0.1)
    lanes = [p for p in ET.fromstring(narrow.svg).iter(f"{SVG}path") if p.get("class") == "svg-lane"]
    assert len(lanes) == sum(state[axis] for axis in step_timeline.AXES)  # every lane, stacked


# ---- Figure 19 ------------------------------------------------------------------------

STATES_19 = (
    {},
    {"params": 1_700_000_000, "seq": 131072},
    {"params": 1_700_000_000, "gpus": 16384, "micro": 4},
    {"params": 175_000_000_000, "gpus": 1024, "gpu": "h100_sxm"},
    {"params": 39_100_000_000, "experts": 64, "gpus": 1024},
)


@pytest.mark.parametrize("changes", STATES_19)
def test_fig19_readouts_are_the_ladder(changes):
    state, view = render(19, **changes)
    r = ladder.climb(state["params"], state["seq"], state["gpu"], state["gpus"], state["experts"], state["micro"])
    shown = readouts(view)
    assert shown["first_bottleneck"].value == r.first_bottleneck and isinstance(shown["first_bottleneck"].value, str)
    assert shown["recommended_axis"].value == r.recommended_axis
    assert shown["model_state_bytes"].value == r.model_state_bytes == 16 * state["params"]
    assert shown["activation_bytes"].value == r.activation_bytes
    assert shown["hbm_bytes"].value == r.hbm_bytes
    assert shown["per_device_bytes"].value == r.fix.per_device_bytes
    assert shown["batch_tokens"].value == r.check("step_time").value == state["micro"] * state["seq"] * state["gpus"]
    lit = [p for p in ET.fromstring(view.svg).iter(f"{SVG}path") if "svg-lit" in p.get("class", "")]
    failed = next((i for i, c in enumerate(r.checks) if not c.passed), len(r.checks))
    # the start box, every question up to the first that fails, and one fix
    assert len(lit) == 1 + min(failed + 1, len(r.checks)) + (1 if failed < len(r.checks) else 1)


def test_fig19_default_is_the_zero_papers_7_5b_model_and_the_articles_advice():
    _, view = render(19)
    shown = readouts(view)
    assert shown["model_state_bytes"].text == "%d GB" % published_cases()["zero-fig1-7.5B-nd64"]["expected"]["baseline_GB"]
    assert (shown["first_bottleneck"].value, shown["recommended_axis"].value) == ("model_state", "hsdp")


def test_fig19_prints_the_deciding_numbers_on_the_branches():
    _, view = render(19)
    texts = [t.text for t in ET.fromstring(view.svg).iter(f"{SVG}text")]
    assert "120 GB against 85.9 GB on one NVIDIA A100 80GB SXM" in texts
    assert any(t.startswith("groups of 8, 8 replicas") for t in texts)


@pytest.mark.parametrize("changes", STATES_19 + ({"params": 1_700_000_000},))  # and one where nothing fails
def test_fig19_on_a_phone_lists_the_path_taken_and_marks_the_fix(changes):
    """Issue 34: on a phone the tree is a list, 320 units wide: the questions asked, in order,
    lit; the fix the first no leads to, marked svg-key (as its leaf is in the wide tree);
    the questions not asked listed dimmed in one box."""
    from figures.fig19_decision_tree import QUESTION, _fix_text

    state, wide = render(19, **changes)
    narrow = _figure(19).render(state, narrow=True)
    r = ladder.climb(state["params"], state["seq"], state["gpu"], state["gpus"], state["experts"], state["micro"])
    failed = next((i for i, c in enumerate(r.checks) if not c.passed), len(r.checks))
    assert ET.fromstring(narrow.svg).get("viewBox").split()[2] == "320"
    assert [t for t, box in text_boxes(narrow) if not inside(box, narrow)] == []
    assert _no_text_overlaps(narrow) == []
    for view in (wide, narrow):
        keys = paths(view, f"svg-lane svg-lit {svg.KEY}")
        assert len(keys) == 1
    lit = " ".join(t.text for t in ET.fromstring(narrow.svg).iter(f"{SVG}text") if "svg-off-path" not in t.get("class"))
    dim = " ".join(t.text for t in ET.fromstring(narrow.svg).iter(f"{SVG}text") if "svg-off-path" in t.get("class"))
    for i, check in enumerate(r.checks):
        start = " ".join(QUESTION[check.key].split()[:4])  # a question's start, whichever way it wraps
        assert (start in lit, start in dim) == (i <= failed, i > failed)
    assert _fix_text(r)[0] in lit


# ---- Figure 20 ------------------------------------------------------------------------

@pytest.mark.parametrize("phase,focus,devices", [(0, "all", 4), (4, "zero", 4), (5, "hsdp", 4), (1, "pp", 2), (8, "ep", 2)])
def test_fig20_readouts_are_the_tour(phase, focus, devices):
    _, view = render(20, phase=phase, focus=focus, devices=devices)
    shown = readouts(view)
    frames = {key: tour.panel(key, devices, phase) for key in tour.STRATEGIES}
    assert shown["phase_name"].value == tour.FRAMES[phase].phase
    if focus == "all":
        assert shown["moving_bytes"].value == sum(f.moving_bytes for f in frames.values())
        assert shown["held_fraction"].value == min(f.held_fraction for f in frames.values())
    else:
        assert shown["moving_bytes"].value == frames[focus].moving_bytes
        assert shown["held_fraction"].value == frames[focus].held_fraction == tour.held_fraction(focus, devices)


def test_fig20_panels_are_buttons_that_focus():
    _, view = render(20)
    root = ET.fromstring(view.svg)
    buttons = [r for r in root.iter(f"{SVG}rect") if r.get("data-set")]  # a hit area over each panel
    assert [r.get("data-set") for r in buttons] == [f"focus={key}" for key in tour.STRATEGIES]
    assert all(r.get("role") == "button" and r.get("tabindex") == "0" and r.get("aria-label") for r in buttons)
    assert root.get("role") == "group"  # an image may not hold buttons
    _, view = render(20, focus="tp")
    buttons = [r for r in ET.fromstring(view.svg).iter(f"{SVG}rect") if r.get("data-set")]
    assert [r.get("data-set") for r in buttons] == ["focus=all"]


def test_fig20_pipeline_idles_all_but_one_stage():
    _, view = render(20, focus="pp", phase=2)
    dimmed = [p for p in paths(view, "svg-dim") if "svg-lane" in p.get("class")]
    assert len(re.findall("z", dimmed[0].get("d"))) == 3  # three of four stage boxes wait
    assert len(re.findall("z", paths(view, "svg-active")[0].get("d"))) == 1


def test_fig20_play_drives_the_frame_and_never_enters_a_link():
    figure = _figure(20)
    play = figure.control("playing")
    assert isinstance(play, Play) and play.drives == "phase"
    state = figure.validate_state({**figure.default_state(), "playing": True, "phase": 3})
    assert encode_state(figure, state) == "fig-20:phase=3"
    assert figure.control("phase").values == tuple(range(len(tour.FRAMES)))


def test_fig20_ledger_and_caption_are_the_toys_model_state():
    from figures import fig20_seven_strategies as fig20
    from models import memory
    adam = memory.OPTIMIZERS["adam_mixed"]  # ZeRO Sec. 3.1: 2 + 2 + 12 bytes a parameter
    assert adam.param_bytes + adam.grad_bytes + adam.optimizer_bytes == tour.STATE_BYTES_PER_PARAM
    assert dict(fig20.LEDGER) == {"params": 2 / 16, "grads": 2 / 16, "optimizer": 12 / 16}
    assert sum(share for _, share in fig20.LEDGER) == 1
    assert "4 layers, width 256 (3.1M parameters, 50 MB of model state)" in fig20.CAPTION
    assert f"a batch of {tour.TOY.tokens:,} tokens" in fig20.CAPTION


def test_fig18_and_fig19_captions_quote_their_default_states():
    _, view18 = render(18)
    assert "(TP 8, PP 8, DP 24)" in registry()[18].caption
    assert readouts(view18)["layout"].text.startswith("TP 8 x PP 8 x DP 24 ")
    _, view19 = render(19)
    assert f"cannot hold its {readouts(view19)['model_state_bytes'].text} of model state" in registry()[19].caption
    assert readouts(view19)["model_state_bytes"].value == 16 * registry()[19].default_state()["params"]
    from figures import fig19_decision_tree as fig19
    assert "16 bytes a parameter" in fig19.QUESTION["model_state"]


@pytest.mark.parametrize("changes", [{"params": 1_000_000_000_000, "experts": 256, "gpus": 256},
                                     {"params": 1_000_000_000_000, "experts": 256, "gpus": 16384, "seq": 131072},
                                     {"params": 1_000_000_000_000, "gpus": 1}, {}])
def test_19_the_lit_fix_stays_inside_its_leaf(changes):
    """'experts over 256 ranks: 474,106 GB a GPU, still too much' ran out of its leaf and the
    drawing: the drawn detail drops ' a GPU' (and 'still') where it must; the readout keeps it."""
    from figures.fig19_decision_tree import LEAF_W, LEAF_X, _fit_leaf

    _, view = render(19, **changes)
    boxes = text_boxes(view)
    assert [t for t, box in boxes if not inside(box, view)] == []
    assert [t for t, box in boxes if box[0] >= LEAF_X and box[0] + box[2] > LEAF_X + LEAF_W] == []
    fix = readouts(view)["fix"].text  # the whole sentence
    drawn = _fit_leaf(fix)
    assert drawn in [t for t, _ in boxes]
    assert drawn in (fix, fix.replace(" a GPU", ""), fix.replace(" a GPU", "").replace(", still too much", ", too much"))


@pytest.mark.parametrize("changes", [{}, {"devices": 2, "phase": 8, "playing": True}, {"focus": "zero", "phase": 4},
                                     {"focus": "ep", "devices": 2}])
def test_fig20_on_a_phone_stacks_the_panels_two_a_row_and_enlarges_one_to_the_width(changes):
    """Issue 34: on a phone the seven panels go two a row in a 320-unit drawing, the legend
    in the eighth place; an enlarged panel fills the width with its sentences under it, and
    is the element marked svg-key (in the wide drawing too)."""
    from figures.fig20_seven_strategies import COMPACT

    state, wide = render(20, **changes)
    narrow = _figure(20).render(state, narrow=True)
    root = ET.fromstring(narrow.svg)
    width, height = map(float, root.get("viewBox").split()[2:])
    assert width == 320
    panels = [g for g in root.iter(f"{SVG}g") if "panel-button" in g.get("class")]
    keyed = [g for g in panels if svg.KEY in g.get("class").split()]
    assert len(keyed) == 1 and keyed[0] is panels[0]
    assert [g for g in ET.fromstring(wide.svg).iter(f"{SVG}g") if svg.KEY in (g.get("class") or "").split()]
    loose = [(t, box) for t, box in text_boxes(narrow)
             if any(node.text == t for node in root.findall(f"{SVG}text"))]  # outside the panels
    assert loose and [t for t, box in loose if not inside(box, narrow)] == []
    assert [(a, b) for i, (a, box) in enumerate(loose) for b, other in loose[i + 1:] if svg.boxes_touch(box, other)] == []
    for panel in panels:  # inside its own coordinates: every text within the panel, none on another
        texts = []
        for node in panel.iter(f"{SVG}text"):
            size, bold = svg.label_size(node.get("class"))
            texts.append((node.text, svg.text_box(float(node.get("x")), float(node.get("y")), node.text, size,
                                                  node.get("text-anchor") or "start", bold)))
        assert [t for t, (x, _, w, _) in texts if x < 0 or x + w > COMPACT.pw] == []
        assert [(a, b) for i, (a, box) in enumerate(texts) for b, other in texts[i + 1:] if svg.boxes_touch(box, other)] == []
    if state["focus"] == "all":
        assert len(panels) == 7
        offsets = [tuple(map(float, re.match(r"translate\(([\d.]+) ([\d.]+)\)", g.get("transform")).groups()))
                   for g in panels]
        assert sorted({x for x, _ in offsets}) == [2, 2 + COMPACT.pw + 4] and max(y for _, y in offsets) == 3 * (COMPACT.ph + 4)
        assert all(x + COMPACT.pw <= 320 for x, _ in offsets)
        legend = [box for t, box in loose if t in ("forward pass", "idle device")]
        assert len(legend) == 2 and all(box[0] >= 2 + COMPACT.pw for box in legend)  # the eighth place
    else:
        assert len(panels) == 1
        zoom = float(re.search(r"scale\(([\d.]+)\)", panels[0].get("transform")).group(1))
        assert 8 + zoom * COMPACT.pw == pytest.approx(312, abs=0.1)  # the panel fills the width...
        assert min(box[1] for _, box in loose) > zoom * COMPACT.ph  # ...its sentences under it


# Figure 20's bar on a 390 x 844 touch phone (Play, the frame slider with its value under it,
# the fold of the other controls: measured 191 px, tests/browser/test_touch.py) and the scale
# of a 320-unit drawing in its 353 px column.
PHONE_HEIGHT_PX, FIG20_BAR_PX, PHONE_SCALE = 844, 191, 353 / 320


def test_fig20_on_a_phone_every_state_fits_under_the_bar():
    """Issue 43.5: the seven panels (two a row, 4 layers of up to 3 collectives each) were
    1047 px tall under a 191 px bar; every state, all seven or one enlarged, now fits."""
    figure = _figure(20)
    tallest = max(
        (float(ET.fromstring(figure.render(figure.validate_state({**figure.default_state(), "devices": devices,
                                                                     "phase": phase, "focus": focus}), narrow=True).svg)
                             .get("viewBox").split()[3]), devices, phase, focus)
        for devices in (2, 4) for phase in range(len(tour.FRAMES)) for focus in ("all",) + tuple(tour.STRATEGIES))
    assert FIG20_BAR_PX + tallest[0] * PHONE_SCALE <= PHONE_HEIGHT_PX - 8, tallest


def test_fig20_on_a_phone_on_its_side_every_state_fits_under_a_one_row_bar():
    """Issue 43.5 at 844 x 390: the wide drawing (416 units: two rows of 204) ran 88 px past
    the screen under the bar. Short, the four-a-row panels are a phone's height, with the
    short legend in the eighth place; the enlarged one keeps its sentences beside it."""
    from figures.contract import SHORT_DRAWING_PX
    from figures.fig20_seven_strategies import WIDTH

    figure = _figure(20)
    for devices in (2, 4):
        for phase in range(len(tour.FRAMES)):
            for focus in ("all",) + tuple(tour.STRATEGIES):
                state = figure.validate_state({**figure.default_state(), "devices": devices, "phase": phase, "focus": focus})
                short, wide = figure.render(state, short=True), figure.render(state)
                root = ET.fromstring(short.svg)
                width, height = map(float, root.get("viewBox").split()[2:])
                assert width == WIDTH and height <= SHORT_DRAWING_PX, (state, height)
                assert f"min-width:{WIDTH}px" in root.get("style")  # labels at 11 px or more
                assert (short.readouts, short.note, short.alt) == (wide.readouts, wide.note, wide.alt)
                loose = [(t, box) for t, box in text_boxes(short) if any(n.text == t for n in root.findall(f"{SVG}text"))]
                assert [t for t, box in loose if not inside(box, short)] == []
                assert [(a, b) for i, (a, box) in enumerate(loose) for b, o in loose[i + 1:] if svg.boxes_touch(box, o)] == []
