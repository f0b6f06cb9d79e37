"""Figures 16 (expert routing) and 17 (device mesh): readouts equal models/ at several states, the
defaults reproduce the article's numbers, and the drawings show what the models say."""
import re
import xml.etree.ElementTree as ET

import pytest

from figures import registry, svg
from models import experts, fmt
from models.mesh import GROUP_AXES, Mesh, axis_crosses_node, group_ranks
from tests.figure_views import SVG, path_data, paths, rank_targets, readouts

FIG16, FIG17 = registry()[16], registry()[17]


def segments(d):
    return [tuple(map(float, m)) for m in re.findall(r"M([\d.]+) ([\d.]+)L([\d.]+) ([\d.]+)", d)]


# ---- Figure 16 ------------------------------------------------------------------------------------------

def model16(state):
    """What models/ says for a Figure 16 state, computed here without the figure."""
    history = experts.expected_collapse(state["step"], state["E"], state["k"], skew=state["skew"], alpha=state["alpha"])
    capacity = None if state["cf"] == "none" else experts.expert_capacity(state["T"], state["E"], state["k"], float(state["cf"]))
    routing = experts.expected_routing(state["T"], history[-1].router_prob, state["k"], capacity)
    a2a = experts.moe_alltoall_bytes(state["k"], 1, state["T"], state["h"], dtype_bytes=2, ep=state["ep"])
    return capacity, routing, a2a


STATES16 = [
    {},
    {"T": 131072, "E": 256, "k": 8, "cf": "1", "skew": 1, "ep": 32, "h": 7168},
    {"T": 512, "E": 8, "k": 1, "cf": "none", "skew": 0.5, "alpha": 0, "step": 20, "ep": 8, "h": 1024},
    {"E": 16, "k": 2, "cf": "1.1", "skew": 0.3, "alpha": 0.001, "step": 12, "ep": 4},
]


@pytest.mark.parametrize("raw", STATES16)
def test_figure_16_readouts_are_the_models_numbers(raw):
    state = FIG16.validate_state(raw)
    capacity, routing, a2a = model16(state)
    shown = readouts(FIG16.render(state))
    same = fmt.portable  # readouts carry 10 significant digits: the same in CPython and Pyodide
    assert shown["capacity_per_expert"].value == capacity
    assert shown["dropped_fraction"].value == same(routing.dropped_fraction)
    assert shown["alltoall_bytes_per_device"].value == a2a.forward_bytes == 2 * a2a.per_direction_bytes
    assert shown["aux_loss"].value == same(routing.balance_loss)
    assert shown["aux_loss"].value == pytest.approx(
        experts.load_balancing_loss(routing.fractions, routing.router_prob, alpha=1.0))
    assert shown["weighted_aux_loss"].value == same(state["alpha"] * same(routing.balance_loss))
    assert shown["alltoall_off_rank_bytes"].value == 2 * a2a.off_rank_bytes_per_direction
    assert shown["busiest_vs_mean"].value == same(routing.busiest_vs_mean)
    assert shown["wasted_capacity"].value == same(routing.wasted_capacity_fraction)


def test_figure_16_default_reproduces_the_article():
    # "E = 64, k = 2, 8,192 tokens, capacity factor 1.25: 320 slots"; "8192 local tokens, h = 4096,
    # top-2 in bf16: about 134 MB per All-to-All" (two of them in the forward pass)
    shown = readouts(FIG16.render(FIG16.default_state()))
    assert shown["capacity_per_expert"].value == 320 and shown["capacity_per_expert"].text == "320 tokens"
    assert shown["alltoall_bytes_per_device"].value == 2 * 2 * 8192 * 4096 * 2 == 268_435_456
    assert fmt.data_size(shown["alltoall_bytes_per_device"].value / 2) == "134 MB"
    assert 1 < shown["aux_loss"].value < 1.1 and 0 < shown["dropped_fraction"].value < 0.05


def _column_dots(view, cls, pitch):
    """Dots per column of a dot path: each vertical dashed segment holds length / pitch dots (the
    dropped ones' path also carries the drawing's key class)."""
    per_x = {}
    for x1, y1, x2, y2 in segments(path_data(view, cls)[0]):
        per_x[x1] = per_x.get(x1, 0) + round(abs(y2 - y1) / pitch)
    return sum(per_x.values())


@pytest.mark.parametrize("raw", STATES16)
def test_figure_16_draws_the_expected_tokens_kept_and_dropped(raw):
    state = FIG16.validate_state(raw)
    capacity, routing, _ = model16(state)
    view = FIG16.render(state)
    unit = readouts(view)["unit_tokens"].value
    drawn = min(state["E"], 64)
    assert _column_dots(view, "stroke-ep", 4) == sum(round(n / unit) for n in routing.kept[:drawn])
    assert _column_dots(view, "stroke-warn", 6) == sum(round(n / unit) for n in routing.dropped[:drawn])
    lines = path_data(view, "stroke-capacity", exact=True)
    if capacity is None:
        assert not lines and routing.dropped_fraction == 0
    else:  # one dashed capacity line per drawn expert, all at one height
        capacity_lines = segments(lines[0])
        assert len(capacity_lines) == drawn and len({y for _, y, _, _ in capacity_lines}) == 1
    fans = [segments(d) for d in path_data(view, "stroke-comm", exact=True)]
    ranks_drawn = -(-drawn // (state["E"] // state["ep"]))
    assert [len(f) for f in fans] == [ranks_drawn, ranks_drawn]  # dispatch and combine, one line per EP rank
    assert ("of 256" in view.note) == (state["E"] > 64)


@pytest.mark.parametrize("raw", STATES16 + [{"T": 512, "E": 32, "k": 3, "cf": "1", "skew": 1, "alpha": 0.05, "ep": 32},
                                     {"T": 16384, "k": 5, "cf": "1.5", "skew": 0.5, "alpha": 0, "step": 13, "ep": 2}])
def test_figure_16_on_a_phone_keeps_every_expert_and_its_drops_on_screen(raw):
    """Narrow: 320 units wide (11 px labels, no sideways scrolling), every drawn expert still in one
    row with its capacity line, as many dots kept and dropped as the wide drawing (a dot is the same
    number of tokens), one fan line per EP rank each way; the experts' boxes and their dropped
    tokens, the drawing's key in both drawings, stay short enough for a phone's screen."""
    state = FIG16.validate_state(raw)
    wide, narrow = FIG16.render(state), FIG16.render(state, narrow=True)
    root = ET.fromstring(narrow.svg)
    assert root.get("viewBox").split()[2] == "320" and "min-width:320px" in root.get("style")
    drawn = min(state["E"], 64)
    for cls in ("stroke-ep", "stroke-warn"):
        [path] = paths(narrow, cls)
        pitch = sum(map(float, path.get("stroke-dasharray").split()))
        assert pitch < {"stroke-ep": 4, "stroke-warn": 6}[cls]  # smaller dots than on a wide screen
        assert _column_dots(narrow, cls, pitch) == _column_dots(wide, cls, {"stroke-ep": 4, "stroke-warn": 6}[cls])
    if state["cf"] != "none":
        lines = segments(path_data(narrow, "stroke-capacity", exact=True)[0])
        assert len(lines) == drawn and len({y for _, y, _, _ in lines}) == 1 and max(x for *_, x, _ in lines) <= 320
    fans = [segments(d) for d in path_data(narrow, "stroke-comm", exact=True)]
    assert [len(f) for f in fans] == [-(-drawn // (state["E"] // state["ep"]))] * 2
    for view in (wide, narrow):
        keyed = paths(view, "svg-key")
        assert [p.get("class") for p in keyed] == ["svg-lane svg-key"] + (
            ["stroke-warn svg-key"] if readouts(view)["dropped_fraction"].color else [])
    ys = [y for p in paths(narrow, "svg-key") for y in map(float, re.findall(r"[ML][\d.]+ ([\d.]+)", p.get("d")))]
    boxes = re.findall(r"M[\d.]+ ([\d.]+)h[\d.]+v([\d.]+)", paths(narrow, "svg-key")[0].get("d"))
    ys += [float(y) + float(h) for y, h in boxes]
    assert (max(ys) - min(ys)) * 353 / 320 <= 450  # on a 390 px phone, below its sticky controls


def test_figure_16_collapse_piles_tokens_onto_k_experts_and_the_button_steps():
    state = FIG16.validate_state({"alpha": 0, "skew": 0.3})
    before = readouts(FIG16.render(state))
    for _ in range(20):
        state = FIG16.press("advance", state)
    assert state["step"] == 20 and FIG16.press("advance", state)["step"] == 20  # the slider's end
    after = readouts(FIG16.render(state))
    assert after["aux_loss"].value > 20 * before["aux_loss"].value
    assert after["dropped_fraction"].value > 0.9 and after["busiest_vs_mean"].value > 30


def test_figure_16_constraints_and_no_dead_alpha():
    assert FIG16.validate_state({"E": 4, "k": 8, "ep": 64}) | {} == {**FIG16.default_state(), "E": 4, "k": 4, "ep": 4}
    # alpha moves the weighted loss even before any step
    base = readouts(FIG16.render(FIG16.default_state()))
    moved = readouts(FIG16.render(FIG16.validate_state({"alpha": 0.1})))
    assert moved["weighted_aux_loss"].value == pytest.approx(10 * base["weighted_aux_loss"].value)


# ---- Figure 17 ------------------------------------------------------------------------------------------

STATES17 = [
    {},
    {"order": "dp-tp-cp-pp"},
    {"tp": 4, "cp": 2, "dp": 16, "pp": 4, "ep": 8, "gpus": 72, "rank": 300, "axis": "ep", "order": "cp-dp-tp-pp"},
    {"tp": 8, "cp": 1, "dp": 64, "pp": 8, "ep": 16, "gpus": 8, "rank": 3001, "axis": "edp"},
    {"tp": 1, "cp": 1, "dp": 4096, "pp": 1, "ep": 4096, "gpus": 4, "rank": 4095, "axis": "dp"},
    {"tp": 1, "cp": 2, "dp": 256, "pp": 1, "ep": 512, "gpus": 4, "rank": 301, "axis": "cp", "order": "dp-cp-tp-pp"},
]


def mesh17(state):
    return Mesh(dp=state["dp"], tp=state["tp"], pp=state["pp"], cp=state["cp"], ep=state["ep"],
                order=state["order"], gpus_per_node=state["gpus"])


@pytest.mark.parametrize("raw", STATES17)
def test_figure_17_readouts_are_the_models_numbers(raw):
    state = FIG17.validate_state(raw)
    mesh = mesh17(state)
    view = FIG17.render(state)
    shown = readouts(view)
    coords = mesh.coords(state["rank"])
    for axis in ("tp", "cp", "dp", "pp"):
        assert shown[f"coord_{axis}"].value == coords[axis]
    assert shown["coord_ep"].value == mesh.expert_coords(state["rank"])["ep"]
    assert shown["group_size"].value == len(mesh.group(state["axis"], state["rank"])) == mesh.degree(state["axis"])
    if mesh.world_size <= 512:  # the enumerating model, where it is cheap enough to ask
        assert shown["crosses_node"].value == int(mesh.crosses_node(state["axis"]))
    assert shown["crosses_node"].value == int(axis_crosses_node(mesh, state["axis"]))
    assert shown["world_size"].value == mesh.world_size == state["tp"] * state["cp"] * state["dp"] * state["pp"]
    assert shown["node"].value == mesh.node(state["rank"])
    assert shown["group_nodes"].value == len({mesh.node(r) for r in mesh.group(state["axis"], state["rank"])})
    # every group of the chosen rank is in the table, named in full
    for axis in GROUP_AXES:
        assert fmt.rank_list(group_ranks(mesh, axis, state["rank"])).replace("\u2026", "&#8230;").replace(
            "\u2013", "&#8211;") in view.html
    assert fmt.rank_list(mesh.group(state["axis"], state["rank"])) in view.alt


def test_figure_17_default_is_the_articles_rank_77():
    shown = readouts(FIG17.render(FIG17.default_state()))
    assert [shown[f"coord_{a}"].value for a in ("tp", "cp", "dp", "pp")] == [5, 0, 1, 1]
    assert shown["world_size"].value == 512 and shown["group_size"].value == 8
    assert shown["crosses_node"].value == 0 and shown["node"].value == 9  # ranks 72-79: one node, one TP group


def test_figure_17_flags_tensor_parallel_groups_that_leave_their_node():
    for raw, flagged in (({}, False), ({"order": "dp-tp-cp-pp"}, True), ({"tp": 16}, True), ({"tp": 16, "gpus": 16}, False)):
        view = FIG17.render(FIG17.validate_state(raw))
        assert ("Flagged" in view.note) == flagged, raw


@pytest.mark.parametrize("raw", STATES17)
def test_figure_17_draws_the_group_and_a_target_per_rank(raw):
    state = FIG17.validate_state(raw)
    _check_group_and_targets(state, FIG17.render(state), whole=512, subset=256)


def _check_group_and_targets(state, view, whole, subset):
    """A world of up to ``whole`` ranks drawn whole, a larger one as at most ``subset`` ranks'
    worth of nodes; the chosen group's drawn members filled (the drawing's key, with the chosen
    rank's outline), a target per rank drawn, and links between exactly the drawn neighbours."""
    mesh = mesh17(state)
    root = ET.fromstring(view.svg)
    targets = rank_targets(root)
    ranks = list(targets)
    assert all(0 <= r < mesh.world_size for r in ranks) and state["rank"] in ranks
    colour = {"edp": "dp"}.get(state["axis"], state["axis"])
    [fill] = [p for p in root.iter(f"{SVG}path") if p.get("class") == f"stroke-{colour} svg-key"]
    assert fill.get("stroke-width") != "2.5"
    assert [p.get("class") for p in root.iter() if "svg-key" in (p.get("class") or "").split()] == [
        f"stroke-{colour} svg-key", "svg-ink svg-key"]  # the group filled, then the rank's outline
    size, gap = map(float, fill.get("stroke-dasharray").split())  # a run of squares: one dashed segment
    filled = sum(round((x2 - x1 + gap) / (size + gap)) for x1, _, x2, _ in segments(fill.get("d")))
    group = mesh.group(state["axis"], state["rank"])
    if mesh.world_size <= whole:
        assert sorted(ranks) == list(range(mesh.world_size))
        assert filled == len(group)
        hits = [r for r in root.iter(f"{SVG}rect") if r.get("data-set") or r.get("data-set-strip")]
        assert all(r.get("role") == "button" for r in hits) == (mesh.world_size <= 64)
        # a target per square while they are few (tab stops), else a strip per run of squares
        assert len(hits) == mesh.world_size if mesh.world_size <= 64 else len(hits) <= mesh.world_size // 4
    else:  # a readable subset: the nodes of the chosen rank's groups, and the drawing says so
        assert len(ranks) <= subset and filled == len(set(group) & set(ranks))
        assert any(t.text.startswith("Capped: ") for t in root.iter(f"{SVG}text"))
        assert "drawn are the" in view.note or mesh.world_size <= 512
    # links: every pair of group neighbours that are both drawn, and nothing else
    corner = {(round(x, 2), round(y, 2)): r for r, (x, y, _, _) in targets.items()}
    half = (size + gap) / 2 - 1
    at = {(round(x + half, 2), round(y + half, 2)): r for (x, y), r in corner.items()}
    members, linked = set(group), set()
    for d in path_data(view, "stroke-intra", exact=True) + path_data(view, "stroke-inter", exact=True):
        for x1, y1, x2, y2 in segments(d):
            a, b = at[(x1, y1)], at[(x2, y2)]
            if all(r in members for r in range(a, b + 1)):  # along a run of consecutive ranks
                linked |= {(r, r + 1) for r in range(a, b)}
            else:
                linked.add((a, b))
    drawn = set(ranks)
    assert linked == {(a, b) for a, b in zip(group, group[1:]) if a in drawn and b in drawn}


@pytest.mark.parametrize("raw", STATES17 + [{"gpus": 64, "rank": 511, "axis": "pp"}, {"tp": 2, "dp": 4, "pp": 2, "rank": 9}])
def test_figure_17_on_a_phone_draws_the_chosen_node_and_its_group_on_screen(raw):
    """Narrow: 320 units wide (11 px labels, no sideways scrolling); a world of up to 128 ranks
    whole, a larger one (the default's 512, up to 4,096) as the chosen rank's node and its groups'
    nodes, 128 ranks' worth at most, so the chosen rank and its group stay on screen below the
    controls; the legend in one column; the text that names the view and the table unchanged."""
    state = FIG17.validate_state(raw)
    wide, narrow = FIG17.render(state), FIG17.render(state, narrow=True)
    root = ET.fromstring(narrow.svg)
    width, height = map(float, root.get("viewBox").split()[2:])
    assert width == 320 and "min-width:320px" in root.get("style")
    _check_group_and_targets(state, narrow, whole=128, subset=128)
    squares = [(x, y) for x, y, _, _ in rank_targets(root).values()]
    top, bottom = min(y for _, y in squares), max(y for _, y in squares)
    assert (bottom - top) * 353 / 320 <= 450 and max(x for x, _ in squares) < 320  # on a 390 px phone's screen
    legend = [t for t in root.iter(f"{SVG}text") if " groups of " in t.text]
    assert len(legend) == len(GROUP_AXES) and len({t.get("x") for t in legend}) == 1  # one column
    assert all(svg.text_width(t.text, *svg.label_size(t.get("class"))) <= 320 - float(t.get("x"))
               for t in root.iter(f"{SVG}text"))
    assert (narrow.note, narrow.alt, narrow.html) == (wide.note, wide.alt, wide.html)


def test_figure_17_constraints():
    state = FIG17.validate_state({"tp": 64, "cp": 64, "dp": 4096, "pp": 128, "ep": 4096, "rank": 4095})
    assert state["tp"] * state["cp"] * state["dp"] * state["pp"] <= 4096
    assert state["dp"] * state["cp"] % state["ep"] == 0 and state["rank"] < 4096
    small = FIG17.validate_state({"tp": 2, "cp": 1, "dp": 2, "pp": 1, "ep": 64, "rank": 4000})
    assert small["ep"] == 2 and small["rank"] == 3
    assert len(FIG17.control("order").values) == 24


@pytest.mark.parametrize("ranks", [
    [77], [72, 73, 74, 75, 76, 77, 78, 79], list(range(5, 64, 8)), [0, 1, 16, 17, 32, 33, 48, 49],
    [0, 2, 8, 10, 16, 18, 24, 26], [3, 9, 10], list(range(0, 4096, 8)),
])
def test_rank_lists_name_every_rank(ranks):
    assert _expand(fmt.rank_list(ranks)) == ranks


def _expand(text):
    """Read fmt.rank_list's text back into ranks."""
    def run(part):
        part = part.strip("() ")
        if "\u2013" in part:
            a, b = map(int, part.split("\u2013"))
            return list(range(a, b + 1))
        if "\u2026" in part:
            head, tail = part.split("\u2026")
            first = [int(x) for x in head.strip(", ").split(",")]
            last = int(tail.split("(")[0].strip(" ,"))
            return list(range(first[0], last + 1, first[1] - first[0]))
        return [int(x) for x in part.split(",")]
    runs_match = re.match(r"(.*), \u2026, (.*) \((\d+) runs, step (\d+)\)$", text)
    if runs_match:
        firsts = re.findall(r"\([^)]*\)|[^,]+\u2013[^,]+", runs_match.group(1))
        shape = run(firsts[0])
        count, step = int(runs_match.group(3)), int(runs_match.group(4))
        return [s + i * step for i in range(count) for s in shape]
    if "\u2026" in text:
        return run(text)
    return [r for part in re.findall(r"\([^)]*\)|[^,]+", text) for r in run(part)]


def test_figure_17_a_capped_drawing_says_so_in_the_drawing_and_its_text():
    """Past 512 ranks the grid draws only the nodes that hold the chosen rank's groups: the
    drawing's own words, its label and its text alternative say it is capped."""
    state = FIG17.validate_state({**FIG17.default_state(), "dp": 64, "rank": 3000, "gpus": 72})
    v = FIG17.render(state)
    root = ET.fromstring(v.svg)
    words = [t.text for t in root.iter(f"{SVG}text")]
    assert "Capped: 3 of the 57 nodes drawn, rank 3000's and its groups' (the table lists every member)" in words
    assert "(capped)" in root.get("aria-label") and "The drawing is capped: it shows 3 of the 57 nodes" in v.alt
    whole = FIG17.render(FIG17.default_state())
    assert not any((t.text or "").startswith("Capped") for t in ET.fromstring(whole.svg).iter(f"{SVG}text"))
    assert "capped" not in whole.alt
