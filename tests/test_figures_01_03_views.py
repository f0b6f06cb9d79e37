"""Figures 01-03 read out what models/ computes, and draw what they claim to draw."""
import re
import xml.etree.ElementTree as ET

import pytest

from figures import registry
from models import collectives, cuts, fmt, reliability
from models.mesh import Mesh
from tests.figure_views import SVG, inside, paths, readouts, rank_targets, rectangles, text_boxes, view
from tests.published_cases import published_cases


def boxes_in(path):
    """How many rectangles an svg.boxes path draws."""
    return path.get("d").count("z")


# --------------------------------------------------------------------------- Figure 01

@pytest.mark.parametrize("state", [
    {},
    {"nodes": 4, "gpus": 8, "tp": 8, "rank": 21},
    {"nodes": 32, "gpus": 8, "tp": 2, "rank": 255, "diverge": True},
    {"nodes": 1, "gpus": 4, "tp": 1, "rank": 3, "diverge": True},
    {"nodes": 8, "gpus": 2, "tp": 2, "rank": 9, "diverge": True},
])
def test_figure_01_reads_out_the_mesh(state):
    v = view(1, **state)
    s = registry()[1].validate_state({**registry()[1].default_state(), **state})
    mesh = Mesh(dp=s["nodes"] * s["gpus"] // s["tp"], tp=s["tp"], gpus_per_node=s["gpus"])
    shown = readouts(v)
    assert shown["world_size"].value == mesh.world_size == s["nodes"] * s["gpus"]
    assert shown["node"].value == mesh.node(s["rank"])
    assert shown["local_rank"].value == s["rank"] % s["gpus"]
    assert shown["tp_group_first"].value == mesh.group("tp", s["rank"])[0] == s["rank"] - s["rank"] % s["tp"]
    assert shown["dp_group_size"].value == len(mesh.group("dp", s["rank"])) == mesh.world_size // s["tp"]
    blocked = reliability.skipped_collective(mesh.group("dp", s["rank"]), s["rank"]).blocked if s["diverge"] else ()
    assert shown["blocked_ranks"].value == len(blocked)
    # the drawing: one numbered cell per rank, the blocked ones filled red and dashed, the followed rank outlined
    [warn] = paths(v, "fill-warn")
    assert boxes_in(warn) == len(blocked)
    assert boxes_in(paths(v, "svg-lane")[0]) == mesh.world_size
    assert boxes_in(paths(v, "svg-focus")[0]) == 1
    hits = re.findall(r'data-set="rank=(\d+)"', v.svg)
    assert [int(r) for r in hits] == list(range(mesh.world_size))
    assert ('tabindex="0"' in v.svg) == (mesh.world_size <= 32)


def test_figure_01_default_is_the_prose_example():
    shown = readouts(view(1))
    assert (shown["world_size"].value, shown["node"].value, shown["local_rank"].value) == (16, 1, 5)
    assert shown["local_rank"].text == "5 (cuda:5)" and shown["blocked_ranks"].value == 0


def test_figure_01_keeps_tp_a_divisor_of_the_node_and_the_rank_inside_the_world():
    figure = registry()[1]
    assert figure.validate_state({"nodes": 1, "gpus": 2, "tp": 8, "rank": 200}) == \
        {"nodes": 1, "gpus": 2, "tp": 2, "rank": 1, "diverge": False}
    for state in (figure.validate_state({"nodes": n, "gpus": g, "tp": t, "rank": 255})
                  for n in (1, 32) for g in (1, 2, 4, 8) for t in (1, 2, 4, 8)):
        assert state["gpus"] % state["tp"] == 0 and state["rank"] == state["nodes"] * state["gpus"] - 1


def test_figure_01_diverging_names_the_waiters_and_the_watchdog():
    v = view(1, diverge=True)
    assert "ranks 1, 5, 9 wait inside it" in v.alt.replace("Ranks", "ranks")
    assert f"after {reliability.DEFAULT_NCCL_TIMEOUT_S:.0f} s" in v.svg
    assert "False on rank 13 only" in v.html
    alone = view(1, nodes=1, gpus=4, tp=4, rank=2, diverge=True)
    assert readouts(alone)["blocked_ranks"].value == 0 and "alone in its DP group" in alone.svg


@pytest.mark.parametrize("state", [{}, {"nodes": 32, "tp": 1, "diverge": True}, {"nodes": 32, "gpus": 1},
                                   {"nodes": 8, "gpus": 8, "tp": 8, "rank": 45}, {"nodes": 16, "gpus": 4, "tp": 2, "diverge": True}])
def test_figure_01_on_a_phone_keeps_every_rank_in_a_narrow_drawing_and_the_grid_on_one_screen(state):
    """Issue 34: at 720 units the drawing scrolled sideways on a phone. Narrow, it is 320 wide,
    every rank's cell (and its click target) lies inside it, the nodes' grid is no taller than
    one screen (NARROW_GRID_H), and the followed rank and its groups are marked svg-key."""
    from figures import fig01_ranks_and_groups as fig01, svg

    figure = registry()[1]
    s = figure.validate_state({**figure.default_state(), **state})
    narrow = figure.render(s, narrow=True)
    assert ET.fromstring(narrow.svg).get("viewBox").split()[2] == "320"
    cells = rank_targets(ET.fromstring(narrow.svg))
    assert sorted(cells) == list(range(s["nodes"] * s["gpus"]))
    assert all(inside(box, narrow) for box in cells.values())
    assert max(y + h for _, y, _, h in cells.values()) - min(y for _, y, _, _ in cells.values()) <= fig01.NARROW_GRID_H
    assert all(inside(box, narrow) for _, box in text_boxes(narrow))
    [focus] = rectangles(narrow, f"svg-focus {svg.KEY}")
    x, y, w, _ = cells[s["rank"]]
    assert (focus[0], focus[1], focus[2]) == pytest.approx((x - 2, y - 2, w + 4), abs=0.1)
    mesh = Mesh(dp=s["nodes"] * s["gpus"] // s["tp"], tp=s["tp"], gpus_per_node=s["gpus"])
    groups = [box for css in ("fill-tp", "fill-dp", "fill-warn") for box in rectangles(narrow, f"{css} {svg.KEY}")]
    assert len(groups) == len(mesh.group("tp", s["rank"])) + len(mesh.group("dp", s["rank"])) - 2  # all but the rank
    assert f"svg-focus {svg.KEY}" in figure.render(s).svg  # marked in the wide drawing too


# --------------------------------------------------------------------------- Figure 02

@pytest.mark.parametrize("state", [
    {},
    {"cut": "zero", "degree": 64, "params": 7_500_000_000},
    {"cut": "tensor", "degree": 8, "params": 70_000_000_000, "layers": 80},
    {"cut": "pipeline", "degree": 16, "params": 175_000_000_000, "layers": 96},
    {"cut": "context", "degree": 32, "params": 1_000_000_000_000, "layers": 128},
    {"cut": "expert", "degree": 64, "params": 1_000_000_000, "layers": 8},
])
def test_figure_02_reads_out_the_cut_model(state):
    v = view(2, **state)
    s = registry()[2].validate_state({**registry()[2].default_state(), **state})
    step = cuts.step_cut(s["cut"], s["params"], s["layers"], s["degree"])
    shown = readouts(v)
    assert shown["model_state_bytes_per_device"].value == step.model_state_bytes
    assert shown["comm_bytes_per_step_per_device"].value == step.comm_bytes
    assert shown["collective"].value == step.collective and step.what in shown["collective"].text
    assert shown["messages_per_step"].value == step.messages
    assert shown["hidden"].value == step.hidden == cuts.hidden_size(s["params"], s["layers"])
    # six panels, the chosen one in full colour and outlined, the other five muted
    groups = ET.fromstring(v.svg).findall(SVG + "g")
    assert len(groups) == 6 and sum(g.get("class") == "svg-muted" for g in groups) == 5
    assert paths(v, f"fill-{ {'data': 'dp', 'zero': 'zero', 'tensor': 'tp', 'pipeline': 'pp', 'context': 'cp', 'expert': 'ep'}[s['cut']]}")
    assert re.findall(r'data-set="cut=(\w+)"', v.svg) == list(cuts.CUTS)
    assert 'class="chosen"' in v.html and v.html.count("<tr") == 7


def test_figure_02_ledger_follows_the_issue():
    psi = 70e9
    for cut, kept in {"data": 16 * psi, "zero": 16 * psi / 8, "tensor": 16 * psi / 8, "pipeline": 16 * psi / 8,
                      "context": 16 * psi}.items():
        assert readouts(view(2, cut=cut, degree=8, params=70_000_000_000))["model_state_bytes_per_device"].value \
            == pytest.approx(kept, rel=1e-12)
    zero = readouts(view(2, cut="zero", degree=64, params=7_500_000_000))["model_state_bytes_per_device"]
    assert zero.text == "1.88 GB" and published_cases()["zero-fig1-7.5B-nd64"]["expected"]["ZeRO3_GB"] == 1.88


def test_figure_02_pipeline_never_has_more_stages_than_layers():
    figure = registry()[2]
    assert figure.validate_state({"cut": "pipeline", "degree": 64, "layers": 24})["degree"] == 16
    assert figure.validate_state({"cut": "data", "degree": 64, "layers": 8})["degree"] == 64
    v = view(2, cut="data", degree=64, layers=8)  # the pipeline panel says why it cannot cut here
    assert "more stages than layers" in v.svg and "more stages than layers" in v.html


@pytest.mark.parametrize("state", [{}, {"cut": "expert", "degree": 64, "layers": 8}, {"cut": "pipeline", "degree": 16, "layers": 16},
                                   {"cut": "zero", "degree": 64, "params": 1_000_000_000_000, "layers": 128}])
def test_figure_02_on_a_phone_sets_the_six_panels_in_two_columns_on_one_screen(state):
    """Issue 34: three 232-unit panels a row scrolled sideways on a phone. Narrow, the six
    panels stand two a row in three rows of a 320-unit drawing short enough for one screen,
    no text leaves its panel, and the chosen panel's outline is svg-key."""
    from figures import svg

    figure = registry()[2]
    s = figure.validate_state({**figure.default_state(), **state})
    wide, narrow = figure.render(s), figure.render(s, narrow=True)
    hits = {r.get("data-set").split("=")[1]: tuple(float(r.get(k)) for k in ("x", "y", "width", "height"))
            for r in ET.fromstring(narrow.svg).iter(f"{SVG}rect") if (r.get("data-set") or "").startswith("cut=")}
    assert list(hits) == list(cuts.CUTS)
    assert len({x for x, _, _, _ in hits.values()}) == 2 and len({y for _, y, _, _ in hits.values()}) == 3
    _, _, width, height = map(float, ET.fromstring(narrow.svg).get("viewBox").split())
    assert width == 320 and all(inside(box, narrow) for box in hits.values()) and height * 353 / width < 694
    for text, (x, y, w, h) in text_boxes(narrow):  # each text inside the panel it belongs to
        assert any(px <= x and x + w <= px + pw and py <= y and y + h <= py + ph for px, py, pw, ph in hits.values()), text
    [outline] = rectangles(narrow, f"svg-focus {svg.KEY}")
    px, py, pw, ph = hits[s["cut"]]
    assert outline == pytest.approx((px + 1, py + 1, pw - 2, ph - 2), abs=0.1)
    assert len({float(r.get("x")) for r in ET.fromstring(wide.svg).iter(f"{SVG}rect") if r.get("data-set")}) == 3
    assert len(rectangles(wide, f"svg-focus {svg.KEY}")) == 1


# --------------------------------------------------------------------------- Figure 03

@pytest.mark.parametrize("state", [
    {},
    {"op": "allgather", "algo": "tree", "N": 1024, "size": 5000, "alpha_us": 2, "bw_GBps": 450},
    {"op": "alltoall", "N": 64, "size": 10_000_000_000, "alpha_us": 100, "bw_GBps": 12.5},
    {"op": "broadcast", "algo": "tree", "N": 2, "size": 1000},
    {"op": "reduce", "N": 16, "step": 3},
])
def test_figure_03_reads_out_the_alpha_beta_model(state):
    v = view(3, **state)
    s = registry()[3].validate_state({**registry()[3].default_state(), **state})
    alpha, beta = s["alpha_us"] * 1e-6, s["bw_GBps"] * 1e9
    shown = readouts(v)
    assert shown["time_s"].value == collectives.time_s(s["op"], s["size"], s["N"], alpha_s=alpha,
                                                       bandwidth_bytes_per_s=beta, algorithm=s["algo"])
    split = collectives.cost_split(s["op"], s["size"], s["N"], alpha_s=alpha, bandwidth_bytes_per_s=beta, algorithm=s["algo"])
    assert shown["latency_share"].value == split.latency_share
    assert shown["latency_s"].value + shown["bandwidth_s"].value == shown["time_s"].value
    assert shown["bus_factor"].value == collectives.bus_factor(s["op"], s["N"])
    assert shown["bytes_per_rank"].value == split.link_bytes
    assert (shown["latency_s"].value, shown["bandwidth_s"].value) == (split.latency_s, split.bandwidth_s)
    assert shown["busbw"].value == split.busbw_bytes_per_s
    if s["algo"] == "ring":
        assert shown["bytes_per_rank"].value == pytest.approx(collectives.volume_bytes_per_rank(s["op"], s["size"], s["N"]))


def test_figure_03_default_reproduces_the_nccl_tests_example():
    example = published_cases()["nccl-busbw-factors"]
    shown = readouts(view(3))
    assert shown["bandwidth_s"].value == pytest.approx(example["expected"]["example_times_s"]["all_reduce"], rel=1e-12)
    assert shown["bandwidth_s"].text == "17.5 ms" and shown["bus_factor"].text == "2(N-1)/N = 1.75"


def test_figure_03_draws_the_simulated_step():
    for op, algo, step in (("allreduce", "ring", 7), ("allreduce", "ring", 14), ("broadcast", "tree", 2),
                           ("alltoall", "ring", 3), ("reducescatter", "tree", 1)):
        v = view(3, op=op, algo=algo, step=step)
        sim = collectives.simulate(op, [[0] * (1 if op == "allgather" else 8)] * 8, algorithm=algo)
        transfers = sim.steps[step - 1].transfers
        [landed] = paths(v, "stroke-comm")
        assert boxes_in(landed) == len(transfers)
        heads = sum(p.get("d").count("M") for p in paths(v, "svg-arrow") if "Q" in p.get("d") or "L" in p.get("d"))
        assert heads >= len({(t.src, t.dst) for t in transfers}) if algo == "tree" else heads >= 2 * len(transfers)
        # stripes: every held chunk is one stripe per rank whose data it holds
        stripes = sum(boxes_in(p) for p in paths(v, "fill-rank0") + [q for k in range(1, 8) for q in paths(v, f"fill-rank{k}")])
        assert stripes == sum(len(src) for row in sim.steps[step - 1].sources for src in row)
    ring = view(3, step=7)
    assert "reduce-scatter phase" in ring.svg and "all-gather phase" in view(3, step=8).svg


def test_figure_03_step_stops_at_the_drawn_algorithms_end_and_says_when_it_draws_fewer_ranks():
    figure = registry()[3]
    assert figure.validate_state({"op": "allreduce", "algo": "tree", "step": 14})["step"] == 6
    assert figure.validate_state({"op": "alltoall", "step": 14, "N": 2})["step"] == 1
    assert figure.press("next", figure.validate_state({"step": 14})) == figure.validate_state({"step": 0})
    assert figure.press("next", figure.default_state())["step"] == 8
    v = view(3, N=64)
    assert "capped at 8 ranks; at N = 64 the same algorithm takes 126 steps" in v.note
    assert "Bruck" in view(3, op="alltoall", algo="tree").note


def _svg_texts(v):
    return [(float(t.get("x")), t.text, t.get("class"), t.get("text-anchor", "start"))
            for t in ET.fromstring(v.svg).iter(f"{SVG}text")]


def test_figure_03_a_capped_drawing_says_so_in_the_drawing_and_its_text():
    """At N = 1,024 the step-through draws 8 ranks: it said "over 8 ranks" and nothing else.
    Its drawing, text alternative and label now say it is capped and what N takes."""
    v = view(3, N=1024)
    texts = [text for _, text, _, _ in _svg_texts(v)]
    assert "Capped: drawn on 8 ranks; at N = 1,024 the same algorithm takes 2,046 steps (priced below)" in texts
    assert "capped at 8 ranks: at N = 1,024 the same algorithm takes 2,046 steps" in v.alt
    assert "capped: N = 1,024 is drawn on 8" in ET.fromstring(v.svg).get("aria-label")
    assert not any("Capped" in text for _, text, _, _ in _svg_texts(view(3, N=8))) and "capped" not in view(3).alt


@pytest.mark.parametrize("changes", [{"step": 0}, {"step": 7}, {"op": "alltoall", "step": 1}, {"N": 1024},
                                     {"op": "reducescatter", "algo": "tree", "step": 1, "N": 512}])
def test_figure_03_no_label_runs_off_the_drawing(changes):
    """At step 0 the title ran past the right edge (its phase appended). A label's width is
    estimated at 0.62 em per character (13 px bold titles, 12 px labels): it must end inside 720."""
    for x, text, css, anchor in _svg_texts(view(3, **changes)):
        width = 0.62 * (13 if "svg-title" in css else 12) * len(text)
        left = x - {"start": 0, "middle": width / 2, "end": width}[anchor]
        assert 0 <= left and left + width <= 720, text


@pytest.mark.parametrize("changes", [{}, {"step": 0}, {"N": 1024, "size": 1_000_000}, {"op": "alltoall", "step": 1},
                                     {"op": "reducescatter", "algo": "tree", "step": 1, "N": 512}])
def test_figure_03_on_a_phone_draws_320_wide_keeps_the_capped_notice_and_marks_the_steps_movement(changes):
    """Issue 34: the 720-unit drawing scrolled sideways on a phone. Narrow, it is 320 wide with
    every text inside it, the "Capped" notice still drawn (wrapped) when N is above 8, and the
    step's data movement (its arrows and landing chunks; before step 1, the data) svg-key."""
    from figures import svg

    figure = registry()[3]
    s = figure.validate_state({**figure.default_state(), **changes})
    narrow = figure.render(s, narrow=True)
    assert ET.fromstring(narrow.svg).get("viewBox").split()[2] == "320"
    boxes = text_boxes(narrow)
    assert all(inside(box, narrow) for _, box in boxes), [t for t, box in boxes if not inside(box, narrow)]
    drawn = " ".join(t for t, _ in boxes)
    assert ("Capped: drawn on 8 ranks; at N =" in drawn) == (s["N"] > 8)
    if s["N"] > 8:  # and how many steps N takes, as the text alternative says
        assert re.search(r"takes ([\d,]+) steps", narrow.alt).group(1) + " steps" in drawn
    keys = [p.get("class") for p in ET.fromstring(narrow.svg).iter(f"{SVG}path") if svg.KEY in (p.get("class") or "")]
    if s["step"]:
        assert "stroke-comm svg-key" in keys and any(k.startswith("svg-arrow") for k in keys)
    else:
        assert keys and all(k.startswith("fill-rank") for k in keys)


def test_figure_03_all_to_all_swaps_bow_apart_instead_of_drawing_one_line():
    """Pairwise exchange step 1: ranks r and 7 - r swap, so every straight arrow lay on one
    diagonal. Each swap is now a curve bowed to the left of its direction: no two meet midway."""
    v = view(3, op="alltoall", step=1)
    curves = re.findall(r"M([\d.]+) ([\d.]+)Q([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+)",
                        "".join(p.get("d") for p in paths(v, "svg-arrow")))
    assert len(curves) == 8
    middles = [((x1 + 2 * cx + x2) / 4, (y1 + 2 * cy + y2) / 4) for x1, y1, cx, cy, x2, y2 in
               (tuple(map(float, c)) for c in curves)]
    assert min(((a[0] - b[0]) ** 2 + (a[1] - b[1]) ** 2) ** 0.5
               for i, a in enumerate(middles) for b in middles[i + 1:]) > 8


def test_durations_and_sizes_read_in_their_units():
    assert [fmt.duration(x) for x in (1.75e-2, 1.4e-4, 2.5e-9, 12.3, 0.0, 999.96e-6)] == \
        ["17.5 ms", "140 \u00b5s", "2.5 ns", "12.3 s", "0 s", "1 ms"]
    assert [fmt.data_size(x) for x in (1e3, 1.75e9, 875e6, 10, 2e10, 0, 999_999)] == \
        ["1 kB", "1.75 GB", "875 MB", "10 B", "20 GB", "0 B", "1 MB"]


# --------------------------------------------------------------------------- drawing helpers they added

def test_hit_areas_write_one_clickable_rect_each_and_tab_stops_only_when_labelled():
    from figures import svg
    markup = "<svg>" + svg.hit_areas([(0, 0, 10, 10, "rank=1"), (10, 0, 10, 10, "rank=2", "follow rank 2")], class_="svg-hit") + "</svg>"
    rects = ET.fromstring(markup).findall("rect")
    assert [r.get("data-set") for r in rects] == ["rank=1", "rank=2"]
    assert [r.get("tabindex") for r in rects] == [None, "0"] and rects[1].get("aria-label") == "follow rank 2"
    assert all(r.get("class") == "svg-hit" for r in rects)


def test_arrows_arcs_and_polylines_are_one_path_each():
    from figures import svg
    arrows = ET.fromstring(svg.arrows([(0, 0, 10, 0), (0, 5, 0, 15)], head=4)).get("d")
    assert arrows.startswith("M0.00 0.00L10.00 0.00M6.00 2.00L10.00 0.00L6.00 -2.00M")  # shaft, then head at the tip
    assert arrows.count("M") == 4
    arcs = ET.fromstring(svg.arcs([(0, 40, 50, 10)], head=4)).get("d")
    assert arcs.startswith("M0.00 50.00Q20.00 30.00 40.00 50.00")  # peaks 10 above y
    bows = ET.fromstring(svg.bows([(0, 0, 40, 0), (40, 0, 0, 0)], bend=0.25, head=4)).get("d")
    assert bows.startswith("M0.00 0.00Q20.00 -20.00 40.00 0.00")  # left of travel: up, peaking 10 (0.25 x 40) off
    assert "M40.00 0.00Q20.00 20.00 0.00 0.00" in bows  # the way back bows the other way
    assert ET.fromstring(svg.polyline([(0, 1), (2, 3)])).get("d") == "M0.00 1.00L2.00 3.00"
    assert svg.group(["<path/>"], class_="svg-muted") == '<g class="svg-muted"><path/></g>'
