"""Figures 11-14: the readouts are the models' numbers, the defaults reproduce the article's and
the papers' numbers, and the drawings show what the readouts say."""
import re
import xml.etree.ElementTree as ET

import pytest

from figures import registry, svg
from models import activations, context, fmt, hardware, tensor
from tests.figure_views import (SVG, inside, overlap as boxes_overlap, paths, rectangles, shapes, subpaths, text_boxes,
                                texts, values, view)
from tests.published_cases import published_cases

GiB = 2**30


# ---- Figure 11 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("T,block,order,seed", [(2, "mlp", "column_row", 1), (8, "attention", "column_row", 5),
                                                (4, "mlp", "row_first", 9), (8, "attention", "row_first", 0),
                                                (1, "mlp", "row_first", 2)])
def test_figure_11_readouts_are_the_models(T, block, order, seed):
    shown = values(view(11, T=T, block=block, order=order, seed=seed))
    walk = tensor.block_walkthrough(block, order, T, seed)
    collectives = tensor.block_collectives(block, order, 1, 4096, 8192, T)
    assert shown["collectives_forward"] == walk.collectives_forward == len(collectives)
    assert shown["max_abs_error"] == walk.max_abs_error
    allreduce = [c for c in collectives if c.kind == "AllReduce"]
    assert shown["allreduce_bytes"] == (allreduce[0].message_bytes if allreduce else 0.0)
    assert shown["allreduce_sent_bytes"] == (allreduce[0].wire_bytes_per_rank if allreduce else 0.0)
    if order == "row_first" and T > 1:  # the note's "n times wider" is the model's AllReduce over the block output
        [gather] = [c for c in collectives if c.kind == "AllGather"]
        note = view(11, T=T, block=block, order=order, seed=seed).note
        assert f"a tensor {allreduce[0].message_bytes / gather.message_bytes:g} times wider" in note
        assert f"{len(collectives)} collectives, not 1" in note


def test_figure_11_default_is_the_articles_allreduce():
    v = view(11)
    shown = values(v)
    assert shown["collectives_forward"] == 1 and shown["max_abs_error"] <= 1e-12
    assert shown["allreduce_bytes"] == 2 * 1 * 4096 * 8192  # b·s·h in bf16: "67 MB"
    assert {r.key: r.text for r in v.readouts}["allreduce_bytes"] == "67.1 MB"
    assert values(view(11, T=8))["allreduce_sent_bytes"] == 2 * 7 / 8 * 2 * 4096 * 8192  # "about 117 MB"
    assert "b = 1, s = 4,096, h = 8,192, bf16" in [r.label for r in v.readouts if r.key == "allreduce_bytes"][0]


@pytest.mark.parametrize("T", [1, 2, 4, 8])
@pytest.mark.parametrize("order", tensor.ORDERS)
def test_figure_11_draws_each_rank_its_own_colour_and_each_collective(T, order):
    v = view(11, T=T, order=order)
    ranks = {c for p in ET.fromstring(v.svg).iter(SVG + "path") for c in (p.get("class") or "").split()
             if c.startswith("stroke-rank")}
    assert ranks == {f"stroke-rank{r}" for r in range(T)}
    walk = tensor.block_walkthrough("mlp", order, T, 1)
    assert shapes(v, "fill-comm") == walk.collectives_forward  # one band per collective
    right = walk.max_abs_error <= 1e-12
    assert shapes(v, "svg-ink-fill") == (1 if right else 0) and shapes(v, "fill-warn") == (0 if right else 1)
    assert right == (order == "column_row" or T == 1)
    cells = sum(len(row) for step in walk.steps for panel in step.panels for piece in panel.pieces for row in piece)
    heat = sum(len(re.findall("h1", p.get("d"))) for p in ET.fromstring(v.svg).iter(SVG + "path")
               if (p.get("class") or "").startswith("stroke-"))
    assert heat == cells  # every entry of every matrix is drawn, once


def _path_xs(data):
    """Every x a path's data (M m H h L l V v Z, as svg.py writes them) reaches."""
    x, reached = 0.0, [0.0]
    for command, args in re.findall(r"([MmHhVvLlZz])([^MmHhVvLlZz]*)", data):
        numbers = [float(n) for n in re.findall(r"-?\d*\.?\d+", args)]
        if command in "Hh":
            for n in numbers:
                x = n if command == "H" else x + n
                reached.append(x)
        elif command in "MmLl":
            for i in range(0, len(numbers) - 1, 2):
                x = numbers[i] if command in "ML" else x + numbers[i]
                reached.append(x)
    return reached


FIG11_BAR_PX = 191  # Figure 11's bar on a 390 x 844 touch phone: Ranks T, the order, the fold (measured)


@pytest.mark.parametrize("T", [1, 2, 4, 8])
@pytest.mark.parametrize("block", ["mlp", "attention"])
@pytest.mark.parametrize("order", tensor.ORDERS)
def test_figure_11_on_a_phone_wraps_its_matrices_and_words_into_320_units(T, block, order):
    """Issue 34: 480 units wide scrolled sideways on a phone. Narrow, the drawing is 320 units
    (320 px at least): no matrix, title, band or verdict leaves it, the matrices wrap onto more
    lines, every entry is still drawn, and the collectives' band is the key. Issue 43.5: it
    fits under the figure's bar on a 390 x 844 phone in every state (the matrices' cells
    shrink where they would run longer: up to 1651 px tall before, at T = 8 rows first)."""
    figure = registry()[11]
    state = figure.validate_state({**figure.default_state(), "T": T, "block": block, "order": order})
    wide, narrow = figure.render(state), figure.render(state, narrow=True)
    root = ET.fromstring(narrow.svg)
    _, _, width, height = map(float, root.get("viewBox").split())
    assert width == 320 and "min-width:320px" in root.get("style")
    assert FIG11_BAR_PX + height * 353 / 320 <= 844 - 5  # under the bar (tests/browser/test_touch.py measures it)
    heat = lambda v: sorted(len(re.findall("h1", p.get("d"))) for p in ET.fromstring(v.svg).iter(SVG + "path")  # noqa: E731
                            if (p.get("class") or "").startswith("stroke-"))
    assert heat(narrow) == heat(wide)  # the same entries, in the same shades and colours
    for x, y, w, h in rectangles(narrow, "svg-axis"):
        assert 0 <= x and x + w <= width and y + h <= height
    boxes = text_boxes(narrow)
    assert all(inside(box, narrow) for _, box in boxes)
    for v in (wide, narrow):  # partial sums and rank numbers once ran past the right edge (to 498 of 480)
        drawn = ET.fromstring(v.svg)
        right = float(drawn.get("viewBox").split()[2])
        for path in drawn.iter(SVG + "path"):
            assert max(_path_xs(path.get("d"))) <= right + 0.5, path.get("class")
    assert not any(boxes_overlap(a, b) for i, (_, a) in enumerate(boxes) for _, b in boxes[i + 1:])
    for v in (wide, narrow):
        [key] = paths(v, svg.KEY)
        assert "fill-comm" in key.get("class").split()
        assert shapes(v, svg.KEY) == (tensor.block_walkthrough(block, order, T, 1).collectives_forward if T > 1 else 0)
    assert figure.primary == ("T", "order")


def test_figure_11_new_matrices_button_changes_the_numbers():
    figure = registry()[11]
    state = figure.default_state()
    pressed = figure.press("new_matrices", state)
    assert pressed["seed"] == state["seed"] + 1
    assert figure.render(pressed).svg != figure.render(state).svg
    assert figure.press("new_matrices", {**state, "seed": 99})["seed"] == 0


# ---- Figure 12 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes", [{}, {"T": 16}, {"T": 64, "hidden": 2048, "gpus": 72, "gpu": "b200"},
                                     {"T": 2, "seq": 131072, "micro": 4, "inter": "ib_hdr", "gpu": "a100_80gb"}])
def test_figure_12_readouts_are_the_models(changes):
    state = {**registry()[12].default_state(), **changes}
    shown = values(view(12, **changes))
    model = tensor.tp_layer_time(state["micro"], state["seq"], state["hidden"], state["T"], gpu=state["gpu"],
                                 gpus_per_node=hardware.scale_up_domain(state["gpu"], state["gpus"]),
                                 inter_link=state["inter"])
    assert shown["layer_time_s"] == model.layer_s
    assert shown["tp_comm_fraction"] == model.comm_fraction
    assert shown["crosses_node"] == (1 if state["T"] > state["gpus"] else 0) == int(model.crosses_node)
    assert shown["speedup"] == model.speedup
    assert shown["allreduce_s"] == model.allreduce_s
    assert shown["gemm_efficiency"] == model.gemm_efficiency
    assert (shown["forward_compute_s"], shown["backward_compute_s"]) == (model.forward_compute_s, model.backward_compute_s)


def test_figure_12_default_is_the_articles_worked_example():
    """b=1, s=4096, h=8192 on H100s: ~0.29 ms per AllReduce on NVLink at T=8, ~2.6 ms on NDR at T=16."""
    message = 2 * 4096 * 8192
    assert values(view(12))["allreduce_s"] == pytest.approx(14 * 1.9e-6 + 1.75 * message / 450e9, rel=1e-12)
    assert values(view(12, T=16))["allreduce_s"] == pytest.approx(30 * 4e-6 + 1.875 * message / 50e9, rel=1e-12)
    assert values(view(12, T=16))["layer_time_s"] > 3 * values(view(12))["layer_time_s"]


@pytest.mark.parametrize("gpus", [4, 8, 16, 72])
def test_figure_12_draws_seven_bars_coloured_by_fabric(gpus):
    v = view(12, gpus=gpus)
    hits = [p for p in ET.fromstring(v.svg).iter() if p.get("data-set")]
    assert [p.get("data-set") for p in hits] == [f"T={t}" for t in (1, 2, 4, 8, 16, 32, 64)]
    # svg.hit_areas: tab stops styled by .svg-hit, which shows the keyboard focus
    assert all(p.get("class") == "svg-hit" and p.get("tabindex") == "0" and p.get("aria-label") for p in hits)
    # an H100's NVLink joins at most 8 GPUs: the edge stays at 8 in nodes of 16 or 72 (issue 43)
    outside = sum(1 for t in (1, 2, 4, 8, 16, 32, 64) if t > hardware.scale_up_domain("h100_sxm", gpus))
    assert shapes(v, "fill-inter") == outside and shapes(v, "fill-intra") == 7 - outside
    assert shapes(v, "fill-forward") == shapes(v, "fill-backward") == 7
    assert ("InfiniBand NDR 400 Gb/s >" in texts(v) or "network >" in texts(v)) == (outside > 0)


@pytest.mark.parametrize("changes", [{}, {"gpus": 16}, {"inter": "roce_400gbe"}, {"gpus": 16, "inter": "roce_400gbe"},
                                     {"micro": 16, "seq": 131072, "hidden": 32768, "T": 1}])
def test_figure_12_labels_stay_in_the_drawing(changes):
    """The network's name ran off the right edge with the node edge at T = 16 | 32, and the
    axis of a 200 s layer read "200000 ms" off the left edge: long names give way to
    "network", and ticks of 10 s and more are in seconds."""
    figure = registry()[12]
    state = figure.validate_state({**figure.default_state(), **changes})
    v = view(12, **state)
    boxes = text_boxes(v)
    assert [t for t, box in boxes if not inside(box, v)] == []
    assert not any(t.endswith("000 ms") for t, _ in boxes)


@pytest.mark.parametrize("gpus", [4, 8, 16, 72])
def test_figure_12_on_a_phone_lays_the_bars_down_and_keeps_the_node_edge_in_view(gpus):
    """Issue 34: a phone hid the node edge in a sideways scroller. Narrow, each T is a row
    (time across, 320 units wide), the chosen T still outlined and clickable, and the key
    element (svg-key) is the dashed edge with its fabrics' names and the bars either side;
    where every T fits in one node, the chosen bar."""
    figure = registry()[12]
    state = figure.validate_state({**figure.default_state(), "gpus": gpus})
    wide, narrow = figure.render(state), figure.render(state, narrow=True)
    root = ET.fromstring(narrow.svg)
    assert float(root.get("viewBox").split()[2]) == 320
    assert all(inside(box, narrow) for _, box in text_boxes(narrow))
    rows = [p for p in root.iter(SVG + "rect") if p.get("data-set")]
    assert [p.get("data-set") for p in rows] == [f"T={t}" for t in (1, 2, 4, 8, 16, 32, 64)]
    assert all(float(p.get("width")) == 320 for p in rows)  # a row each, one under the other
    assert [float(p.get("y")) for p in rows] == sorted(float(p.get("y")) for p in rows)
    assert shapes(narrow, "fill-forward") == shapes(wide, "fill-forward") == 7
    assert shapes(narrow, "fill-inter") == shapes(wide, "fill-inter")
    [key] = [node for node in root.iter() if "svg-key" in (node.get("class") or "").split()]
    outside = sum(1 for t in (1, 2, 4, 8, 16, 32, 64) if t > hardware.scale_up_domain("h100_sxm", gpus))
    if outside:
        held = [t.text for t in key.iter(SVG + "text")]
        assert held == ["\u2191 NVLink 4", "\u2193 InfiniBand NDR 400 Gb/s"]
        assert sum(subpaths(p.get("d")) for p in key.iter(SVG + "path") if "fill-" in (p.get("class") or "")) == 6
    else:
        assert key.tag == SVG + "path" and "svg-ink-stroke" in key.get("class")  # the chosen bar's outline


# ---- Figure 13 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes", [{}, {"sp": True}, {"sp": True, "recompute": "selective", "t": 4, "s": 8192},
                                     {"recompute": "full", "h": 12288, "a": 96, "b": 1}])
def test_figure_13_readouts_are_the_models(changes):
    state = registry()[13].validate_state({**registry()[13].default_state(), **changes})
    shown = values(view(13, **changes))
    args = (state["s"], state["b"], state["h"], state["a"])
    assert shown["activation_bytes_per_layer"] == activations.per_layer_bytes(
        *args, tp=state["t"], sequence_parallel=state["sp"], recompute=state["recompute"])
    assert shown["comm_bytes_per_layer"] == tensor.tp_forward_bytes_per_rank(
        state["b"], state["s"], state["h"], state["t"], sequence_parallel=state["sp"])
    assert shown["saving_fraction"] == activations.sp_saving_fraction(*args, tp=state["t"], recompute=state["recompute"])
    assert shown["tp_baseline_fraction"] == activations.fraction_of_tp_baseline(
        *args, tp=state["t"], sequence_parallel=state["sp"], recompute=state["recompute"])
    layer = activations.layer_activations(*args, tp=state["t"], sequence_parallel=state["sp"],
                                          recompute=state["recompute"])
    for part in ("outside_tp_bytes", "inside_tp_bytes", "attention_scores_bytes"):  # the three bar parts
        assert shown[part] == getattr(layer, part)
    assert sum(shown[part] for part in ("outside_tp_bytes", "inside_tp_bytes", "attention_scores_bytes")) == \
        pytest.approx(shown["activation_bytes_per_layer"], rel=1e-12)


@pytest.mark.parametrize("model", ["22B", "175B", "530B", "1T"])
def test_figure_13_reproduces_korthikanti_figures_1_and_7(model):
    fig1, fig7 = published_cases()[f"korthikanti-fig1-{model}"], published_cases()[f"korthikanti-fig7-{model}"]
    i = fig1["inputs"]
    config = {"t": i["t"], "s": i["s"], "b": i["b"], "h": i["h"], "a": i["a"]}
    assert registry()[13].validate_state({**registry()[13].default_state(), **config}) == {
        **registry()[13].default_state(), **config}  # every published model is reachable on the sliders
    stack = i["l"] * (activations.interleave_memory_factor(i["p"], i["v"]) if i["v"] > 1 else 1)  # 1F1B: L layers
    baseline = values(view(13, **config))["activation_bytes_per_layer"]
    assert baseline * stack / GiB == pytest.approx(fig1["expected"]["activations_tp_baseline_GiB"], rel=1e-3)
    best = values(view(13, **config, sp=True, recompute="selective"))["activation_bytes_per_layer"]
    assert best * stack / GiB == pytest.approx(fig1["expected"]["activations_sp_selective_GiB"], rel=1e-3)
    pct = fig7["derived"]["formula_pct"]
    for sp, recompute, key in ((True, "none", "sequence_parallel"), (False, "selective", "selective_recompute"),
                               (True, "selective", "seq+selective"), (False, "full", "full_recompute")):
        shown = values(view(13, **config, sp=sp, recompute=recompute))["tp_baseline_fraction"]
        assert 100 * shown == pytest.approx(pct[key], abs=0.06)
        assert 100 * shown == pytest.approx(fig7["expected"][key], rel=0.02)  # the paper's measured bars


def test_figure_13_default_is_the_22b_model_and_sp_keeps_the_bytes_on_the_wire():
    off, on = values(view(13)), values(view(13, sp=True))
    assert off["activation_bytes_per_layer"] * 48 / GiB == 59.25  # Korthikanti Fig. 1, 22B, TP baseline
    assert on["comm_bytes_per_layer"] == pytest.approx(off["comm_bytes_per_layer"], rel=1e-12)
    assert 1 - on["tp_baseline_fraction"] == pytest.approx(on["saving_fraction"], rel=1e-12)


@pytest.mark.parametrize("sp", [False, True])
def test_figure_13_draws_the_collectives_of_each_layout(sp):
    shown = texts(view(13, sp=sp))
    expected = {"AllGather": 2, "ReduceScatter": 2} if sp else {"identity": 2, "AllReduce": 2}
    assert {k: shown.count(k) for k in ("AllGather", "ReduceScatter", "identity", "AllReduce")} == {
        **{"AllGather": 0, "ReduceScatter": 0, "identity": 0, "AllReduce": 0}, **expected}
    assert shown.count("s/t \u00d7 h" if sp else "s \u00d7 h, whole") == 4  # the LayerNorm and dropout regions
    assert shown.count("s \u00d7 h/t") == 2
    assert shapes(view(13, sp=sp, t=1), "fill-comm") == 2  # t = 1: only the two byte bars, no collectives


@pytest.mark.parametrize("sp, t", [(True, 8), (False, 8), (True, 1)])
def test_figure_13_every_word_fits_the_box_it_names(sp, t):
    """"ReduceScatter" was 91 units wide on an 82-unit pill: each collective's name now sits
    inside its pill, each region's name inside its outline, and the strip inside the drawing."""
    v = view(13, sp=sp, t=t)
    pills = rectangles(v, "fill-comm") + rectangles(v, "svg-neutral-fill")
    for name in ("AllGather", "ReduceScatter", "AllReduce", "identity"):
        for text, box in text_boxes(v):
            if text == name:
                middle = box[1] + box[3] / 2
                pill = next(p for p in pills if p[1] <= middle <= p[1] + p[3] and p[0] <= box[0] + box[2] / 2 <= p[0] + p[2])
                assert pill[0] <= box[0] and box[0] + box[2] <= pill[0] + pill[2], (name, box, pill)
    for text, box in text_boxes(v):
        assert inside(box, v), text


@pytest.mark.parametrize("sp", [False, True])
def test_figure_13_on_a_phone_runs_each_block_down_a_column_and_keeps_the_strips_in_view(sp):
    """Issue 34: narrow, the drawing is 320 units wide, each block's regions run down a
    column (the two blocks side by side), and the key element (svg-key) holds both strips
    with every region's name, what it holds and the collectives; the byte bars stay below it."""
    figure = registry()[13]
    state = figure.validate_state({**figure.default_state(), "sp": sp})
    wide, narrow = figure.render(state), figure.render(state, narrow=True)
    root = ET.fromstring(narrow.svg)
    assert float(root.get("viewBox").split()[2]) == 320
    assert all(inside(box, narrow) for _, box in text_boxes(narrow))
    [key] = [node for node in root.iter() if "svg-key" in (node.get("class") or "").split()]
    held = [(t.text, float(t.get("x")), float(t.get("y"))) for t in key.iter(SVG + "text")]
    names = ["LayerNorm", "AllGather" if sp else "identity", "attention", "ReduceScatter" if sp else "AllReduce",
             "dropout + add"]
    column = [(x, y) for text, x, y in held if text in names]
    assert [text for text, _, _ in held if text in names][:5] == names  # attention block, top to bottom
    assert len(column) == 9 and len({x for x, _ in column[:5]}) == 1  # down one column...
    assert [y for _, y in column[:5]] == sorted(y for _, y in column[:5])
    assert column[5][0] > column[0][0] + 140 and column[5][1] == column[0][1]  # ...the MLP block beside it
    assert [text for text, _, _ in held].count("s/t \u00d7 h" if sp else "s \u00d7 h, whole") == 4
    bars = [t for t in root.iter(SVG + "text") if t.text == "sent per device in the forward pass"]
    assert bars and float(bars[0].get("y")) > max(y for _, _, y in held)
    assert sorted(texts(narrow)) == sorted(texts(wide))  # the same words, laid out again


def test_figure_13_snaps_heads_and_degree_to_divisors():
    figure = registry()[13]
    state = figure.validate_state({**figure.default_state(), "h": 25600, "a": 96, "t": 32})
    assert 25600 % state["a"] == 0 and state["a"] % state["t"] == 0 and state["a"] in (64, 128)


# ---- Figure 14 ------------------------------------------------------------------------------------

@pytest.mark.parametrize("changes", [{}, {"C": 16}, {"C": 4, "layout": "two_chunks", "s": 1048576},
                                     {"C": 64, "heads": 128, "kv_heads": 128, "h": 16384, "gpus": 72,
                                      "intra": "nvlink5"}])
def test_figure_14_readouts_are_the_models(changes):
    state = registry()[14].validate_state({**registry()[14].default_state(), **changes})
    shown = values(view(14, **changes))
    C, s, h, heads, kv = state["C"], state["s"], state["h"], state["heads"], state["kv_heads"]
    ok = C <= kv
    assert shown["ulysses_ok"] == int(ok) == int(context.ulysses_fits(C, heads, kv))
    assert shown["ring_bytes_per_device"] == context.ring_communication(s, h, C, heads=heads, kv_heads=kv).forward_bytes_per_rank
    if ok:
        assert shown["ulysses_bytes_per_device"] == context.ulysses_communication(
            s, h, heads, C, kv_heads=kv).forward_bytes_per_rank
    else:
        assert shown["ulysses_bytes_per_device"] is None
    assert shown["causal_imbalance"] == context.causal_work(C, state["layout"]).imbalance
    assert shown["rank0_idle_steps"] == context.ring_idle_steps(context.causal_work(C, state["layout"]))[0]
    times = context.context_comm_time(s, h, heads, C, kv_heads=kv, intra_link=state["intra"],
                                      inter_link=state["inter"], gpus_per_node=state["gpus"])
    assert (shown["ring_time_s"], shown["ulysses_time_s"]) == (times.ring_s, times.ulysses_s)


def test_figure_14_ulysses_beyond_the_kv_heads_is_shown_not_raised():
    v = view(14, C=16)
    shown = {r.key: r.text for r in v.readouts}
    assert shown["ulysses_bytes_per_device"] == "not possible: C = 16 > 8 KV heads" and shown["ulysses_ok"] == "no"
    assert "8 KV heads for 16 ranks" in texts(v) and shapes(v, "fill-warn") == 1
    assert shapes(view(14), "fill-warn") == 0


@pytest.mark.parametrize("C", [1, 2, 8, 64])
@pytest.mark.parametrize("layout", context.LAYOUTS)
def test_figure_14_draws_the_causal_triangle_and_the_ring_schedule(C, layout):
    v = view(14, C=C, layout=layout, kv_heads=8)
    chunks = C * (2 if layout == "two_chunks" else 1)
    triangles = sum(shapes(v, f"fill-rank{r}") for r in range(8))
    # one diagonal triangle per query chunk, one row box per chunk but the first, the Ulysses stripes
    assert triangles == chunks + (chunks - 1) + C + min(C, 8)
    idle = context.ring_idle_steps(context.causal_work(C, layout))
    assert shapes(v, "fill-idle") == sum(1 for n in idle if n)  # contiguous: one idle run per step after the first
    assert values(v)["causal_imbalance"] == pytest.approx(2 - 1 / C if layout == "contiguous" else 1.0)


FIG14_EXTREMES = [{}, {"heads": 8}, {"kv_heads": 1}, {"kv_heads": 128}, {"gpus": 4}, {"gpus": 16}, {"C": 1},
                  {"C": 64, "s": 1048576, "h": 32768, "heads": 128, "kv_heads": 128, "gpus": 72}, {"C": 64, "gpus": 4},
                  {"s": 4096, "h": 1024, "C": 2, "intra": "pcie4_x16"}]


@pytest.mark.parametrize("changes", FIG14_EXTREMES)
def test_figure_14_times_have_a_log_axis_in_seconds_and_the_compute_the_ring_hides_behind(changes):
    """The time bars had no y values, their 1.06 / 1.23 ms labels collided, and nothing showed
    the compute that 'the ring can hide' behind: now a log axis named in seconds, the ring,
    Ulysses and a rank's attention compute for every C, and the chosen C's values placed
    apart by svg.place_labels."""
    state = registry()[14].validate_state({**registry()[14].default_state(), **changes})
    v = view(14, **changes)
    C, s, h = state["C"], state["s"], state["h"]
    compute = context.attention_compute_s(s, h, C)
    ring = context.context_comm_time(s, h, state["heads"], C, kv_heads=state["kv_heads"], intra_link=state["intra"],
                                     inter_link=state["inter"], gpus_per_node=state["gpus"]).ring_s
    shown = values(v)
    assert shown["attention_compute_s"] == compute and shown["ring_hidden"] == int(ring <= compute)
    boxes = text_boxes(v)
    [chart_top] = [box[1] for t, box in boxes if t == "one layer's forward, per rank, by C (log scale)"]
    boxes = [(t, box) for t, box in boxes if box[1] >= chart_top]  # the time chart's labels
    drawn = [t for t, _ in boxes]
    ticks = [(t, box) for t, box in boxes if box[0] + box[2] == pytest.approx(6 + 58 - 6) and t[0].isdigit()]
    assert len(ticks) >= 2 and all(t.endswith(("s", "ms", "\u00b5s", "ns")) for t, _ in ticks)
    # decades evenly spaced: a log axis
    ys = sorted(box[1] for _, box in ticks)
    assert max(ys[i + 1] - ys[i] for i in range(len(ys) - 1)) == pytest.approx(min(ys[i + 1] - ys[i] for i in range(len(ys) - 1)))
    assert f"compute {fmt.duration(compute)}" in drawn
    if ring:
        assert f"ring {fmt.duration(ring)}" in drawn
    assert len(paths(v, "svg-ink svg-dash")) >= 1  # the compute line (and its legend mark)
    assert all(inside(box, v) for _, box in boxes), [t for t, box in boxes if not inside(box, v)]
    assert not any(boxes_overlap(a, b) for i, (_, a) in enumerate(boxes) for _, b in boxes[i + 1:]), \
        [(t, u) for i, (t, a) in enumerate(boxes) for u, b in boxes[i + 1:] if boxes_overlap(a, b)]



@pytest.mark.parametrize("changes", FIG14_EXTREMES)
def test_figure_14_on_a_phone_stacks_the_panels_and_keeps_the_time_chart_in_view(changes):
    """Issue 34: narrow, the drawing is 320 units wide, the ring's two panels and Ulysses'
    two sit side by side, long texts wrap, and the time chart is the key element (svg-key):
    the compute line, both schemes' series and the chosen C's values, short enough to fit a
    phone's screen under its controls; its legend follows below it. Issue 43.5: the whole
    drawing fits under the figure's bar on a 390 x 844 phone (851 px tall before: 104-unit
    panels, a shorter chart, a phone's shorter words)."""
    figure = registry()[14]
    state = figure.validate_state({**figure.default_state(), **changes})
    narrow = figure.render(state, narrow=True)
    root = ET.fromstring(narrow.svg)
    assert float(root.get("viewBox").split()[2]) == 320
    assert [t for t, box in text_boxes(narrow) if not inside(box, narrow)] == []
    [key] = [node for node in root.iter() if "svg-key" in (node.get("class") or "").split()]
    drawn = {(p.get("class") or "") for p in key.iter(SVG + "path")}
    assert {"svg-ink svg-dash", "stroke-comm", "stroke-exposed"} <= drawn
    held = [t.text for t in key.iter(SVG + "text")]
    compute = values(figure.render(state))["attention_compute_s"]
    assert f"compute {fmt.duration(compute)}" in held and f"C={state['C']}" in held
    ys = [box[1] for t, box in text_boxes(narrow) if t in held]
    assert (max(ys) - min(ys) + 40) * 353 / 320 <= 450  # on a 390 px phone, below its controls
    legend = [box[1] for t, box in text_boxes(narrow) if t.startswith("ring's sends")]
    assert legend and legend[0] > max(ys)
    outlines = rectangles(narrow, "svg-ink-stroke")[:4]  # score matrix, schedule, Ulysses before and after
    assert [w for _, _, w, _ in outlines] == [104] * 4 and outlines[0][1] == outlines[1][1]
    assert FIG14_BAR_PX + float(root.get("viewBox").split()[3]) * 353 / 320 <= 844 - 5  # under the bar


FIG14_BAR_PX = 171  # Figure 14's bar on a 390 x 844 touch phone: C, the KV heads, the fold (measured 163-171)


def test_figure_14_on_a_phone_fits_under_its_bar_in_every_state():
    figure = registry()[14]
    sliders = [c for c in figure.controls if hasattr(c, "values")]
    tallest = max((float(ET.fromstring(figure.render(figure.validate_state({**figure.default_state(), c.key: v}),
                                                     narrow=True).svg).get("viewBox").split()[3]), c.key, v)
                  for c in sliders for v in c.values)
    assert FIG14_BAR_PX + tallest[0] * 353 / 320 <= 844 - 5, tallest


@pytest.mark.parametrize("narrow", [False, True])
def test_fig14_no_line_runs_through_a_label_of_the_time_chart(narrow):
    """At C = 16 the chosen C's line ran through the network's name and 'no Ulysses past
    C = 8, one KV head each'. Wide, no label is crossed by any line or mark, at the default,
    C = 16 and every control's ends; on a phone, none by the chosen C's line."""
    from tests.browser.test_text_overlaps import extreme_states
    from tests.figure_views import marks_through_labels
    figure = registry()[14]
    states = extreme_states(figure) + [("C=16", {**figure.default_state(), "C": 16})]
    found = [(name, text, css) for name, state in states
             for text, css in marks_through_labels(figure.render(state, narrow=narrow))
             if not narrow or css == "svg-ink"]
    assert found == []
