"""What a reader does with Figures 01-03 in headless Chromium: every control moves the drawing
and the numbers to what models/ computes, dependent controls snap, the step button walks the
algorithm, and a link restores a state."""
import pytest

from figures import registry
from figures.contract import encode_state
from models import collectives, cuts, reliability
from models.mesh import Mesh

from tests.browser.drive import follow_link, assert_shows, move_and_check, press, read_state, readouts, readouts_state

pytestmark = pytest.mark.browser


def _state(page, number):
    figure = registry()[number]
    return figure, figure.validate_state(readouts_state(page, figure))


def _count(page, anchor, selector):
    return page.locator(f"#{anchor} [data-role=view] {selector}").count()


def test_figure_01_follows_a_rank_through_its_groups(session):
    page = session.page
    figure, state = _state(page, 1)
    moves = (("nodes", 32), ("rank", 200), ("gpus", 4), ("tp", 8), ("diverge", True), ("tp", 1), ("rank", 255),
             ("nodes", 1), ("gpus", 2), ("diverge", False), ("gpus", 8), ("nodes", 2), ("tp", 4), ("rank", 13))
    for key, value in moves:
        shown = move_and_check(page, figure, state, key, value)
        mesh = Mesh(dp=state["nodes"] * state["gpus"] // state["tp"], tp=state["tp"], gpus_per_node=state["gpus"])
        assert shown["world_size"]["value"] == mesh.world_size
        assert shown["node"]["value"] == mesh.node(state["rank"])
        assert shown["tp_group_first"]["value"] == mesh.group("tp", state["rank"])[0]
        assert shown["dp_group_size"]["value"] == len(mesh.group("dp", state["rank"]))
        blocked = reliability.skipped_collective(mesh.group("dp", state["rank"]), state["rank"]).blocked
        assert shown["blocked_ranks"]["value"] == (len(blocked) if state["diverge"] else 0)
        assert _count(page, "fig-01", "rect[data-set]") == mesh.world_size  # one clickable cell per GPU
    assert state == figure.default_state()  # back where the prose reads it


def test_figure_01_snaps_tp_and_rank_on_the_page(session):
    page = session.page
    figure, state = _state(page, 1)
    move_and_check(page, figure, state, "gpus", 2)  # tp 4 no longer divides a 2-GPU node, rank 13 is outside
    assert read_state(page, figure)["tp"] == 2 and read_state(page, figure)["rank"] == 3
    move_and_check(page, figure, state, "diverge", True)
    assert readouts(page, "fig-01")["blocked_ranks"]["value"] == 1  # DP group {1, 3}: rank 1 waits
    for key, value in (("diverge", False), ("gpus", 8), ("tp", 4), ("rank", 13)):
        move_and_check(page, figure, state, key, value)


def test_figure_01_the_rank_and_tp_sliders_end_where_the_world_does(session):
    """Two nodes of 8: the rank slider ends at 15 and TP at 8 GPUs; one node of 4: at 3 and 4."""
    page = session.page
    figure, state = _state(page, 1)
    maxes = "() => ['rank', 'tp'].map(key => document.querySelector('#fig-01 [data-control=' + key + ']').max)"
    assert page.evaluate(maxes) == ["15", "3"]
    for key, value in (("nodes", 1), ("gpus", 4)):
        move_and_check(page, figure, state, key, value)
    assert page.evaluate(maxes) == ["3", "2"] and read_state(page, figure)["rank"] == 3
    for key, value in (("gpus", 8), ("nodes", 2), ("tp", 4), ("rank", 13)):
        move_and_check(page, figure, state, key, value)
    assert page.evaluate(maxes) == ["15", "3"]


def test_figure_02_every_cut_every_slider(session):
    page = session.page
    figure, state = _state(page, 2)
    for cut in cuts.CUTS[1:] + cuts.CUTS[:1]:
        shown = move_and_check(page, figure, state, "cut", cut)
        step = cuts.step_cut(cut, state["params"], state["layers"], state["degree"])
        assert shown["model_state_bytes_per_device"]["value"] == step.model_state_bytes
        assert shown["comm_bytes_per_step_per_device"]["value"] == step.comm_bytes
        assert shown["collective"]["value"] == step.collective
        assert page.locator("#fig-02 [data-role=html] tr.chosen td").first.text_content() == cuts.CUT_LABELS[cut]
    for key, value in (("degree", 64), ("params", 1_000_000_000_000), ("layers", 128), ("params", 70_000_000_000),
                       ("layers", 80), ("degree", 2)):
        move_and_check(page, figure, state, key, value)
    move_and_check(page, figure, state, "cut", "pipeline")
    move_and_check(page, figure, state, "degree", 64)
    move_and_check(page, figure, state, "layers", 16)  # a 16-layer pipeline has at most 16 stages
    assert read_state(page, figure)["degree"] == 16
    assert readouts(page, "fig-02")["comm_bytes_per_step_per_device"]["value"] == \
        cuts.step_cut("pipeline", 70e9, 16, 16).comm_bytes


def test_figure_03_steps_through_and_prices_each_collective(session):
    page = session.page
    figure, state = _state(page, 3)
    for key, value in (("op", "reducescatter"), ("algo", "tree"), ("op", "broadcast"), ("step", 14), ("N", 1024),
                       ("size", 1000), ("alpha_us", 100), ("bw_GBps", 1), ("op", "alltoall"), ("algo", "ring"),
                       ("step", 0), ("op", "allreduce"), ("N", 8), ("size", 1_000_000_000), ("alpha_us", 10),
                       ("bw_GBps", 100), ("step", 7)):
        shown = move_and_check(page, figure, state, key, value)
        split = collectives.cost_split(state["op"], state["size"], state["N"], alpha_s=state["alpha_us"] * 1e-6,
                                       bandwidth_bytes_per_s=state["bw_GBps"] * 1e9, algorithm=state["algo"])
        assert shown["time_s"]["value"] == split.time_s
        assert shown["latency_share"]["value"] == split.latency_share
        assert shown["bus_factor"]["value"] == collectives.bus_factor(state["op"], state["N"])
        assert shown["bytes_per_rank"]["value"] == split.link_bytes
    assert state == figure.default_state()
    assert readouts(page, "fig-03")["bandwidth_s"]["text"] == "17.5 ms"  # the nccl-tests example


def test_figure_03_next_step_walks_the_ring_and_wraps(session):
    page = session.page
    figure, state = _state(page, 3)
    for expected in list(range(8, 15)) + [0, 1]:
        press(page, figure, "next")
        state = figure.validate_state({**state, "step": expected})
        assert read_state(page, figure) == state
        assert_shows(page, figure, state)
        phase = "all-gather phase" if expected > 7 else "reduce-scatter phase" if expected else "before the first transfer"
        assert phase in page.text_content("#fig-03 [data-role=view] svg")
    move_and_check(page, figure, state, "algo", "tree")  # step 1 is inside the tree's 6 steps
    move_and_check(page, figure, state, "step", 14)  # the tree AllReduce stops at its sixth step
    assert read_state(page, figure)["step"] == 6
    for key, value in (("algo", "ring"), ("step", 7)):
        move_and_check(page, figure, state, key, value)


def test_figure_03_says_when_its_drawing_is_capped(session):
    """N past 8: the step-through still draws 8 ranks, and says so in the drawing and its text."""
    page = session.page
    figure, state = _state(page, 3)
    move_and_check(page, figure, state, "N", 1024)
    drawing = page.text_content("#fig-03 [data-role=view] svg")
    assert "Capped: drawn on 8 ranks; at N = 1,024 the same algorithm takes 2,046 steps" in drawing
    assert "capped at 8 ranks" in page.text_content("#fig-03 [data-role=alt]")
    move_and_check(page, figure, state, "N", 8)
    assert "Capped" not in page.text_content("#fig-03 [data-role=view] svg")


def test_a_link_restores_each_figure(session):
    page = session.page
    for number, values, (key, shown) in ((3, {"op": "broadcast", "algo": "tree", "step": 2, "N": 16}, ("op", "broadcast")),
                                         (1, {"nodes": 4, "rank": 30, "diverge": True}, ("rank", "30")),
                                         (2, {"cut": "expert", "degree": 32}, ("cut", "expert"))):
        figure = registry()[number]
        state = figure.validate_state({**figure.default_state(), **values})
        follow_link(page, encode_state(figure, state))
        page.wait_for_function("([anchor, key, value]) => document.querySelector(`#${anchor} [data-control=${key}]`).value === value",
                               arg=[figure.anchor, key, shown])
        assert read_state(page, figure) == state
        assert_shows(page, figure, state)


def test_no_errors_after_all_that(session):
    assert session.console_errors == [] and session.page_errors == []
    assert session.page.locator(".py-error").count() == 0
