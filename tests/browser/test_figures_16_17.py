"""Figures 16 (expert routing) and 17 (device mesh) in headless Chromium: every control moves the
drawing and the numbers to what models/ computes, the step button runs the collapse, a rank can be
chosen by slider (and by clicking its square), and a link restores a state."""

import pytest

from figures import registry
from figures.contract import encode_state
from models import experts, fmt
from models.mesh import Mesh, group_ranks

from tests.browser.drive import follow_link, assert_shows, move_and_check, press, read_state, readouts, set_control, settle

pytestmark = pytest.mark.browser

FIG16, FIG17 = registry()[16], registry()[17]


def test_both_figures_are_live(session):
    states = session.page.eval_on_selector_all("#fig-16, #fig-17", "fs => fs.map(f => f.dataset.state)")
    assert states == ["live", "live"]


def test_figure_16_every_control_moves_the_numbers_to_the_models(session):
    page = session.page
    state = read_state(page, FIG16)
    moves = (("T", 131072), ("E", 256), ("k", 8), ("cf", "1"), ("skew", 1), ("alpha", 0), ("step", 7),
             ("ep", 256), ("h", 7168), ("cf", "none"), ("E", 8), ("T", 256), ("k", 1), ("cf", "2"), ("skew", 0))
    for key, value in moves:
        shown = move_and_check(page, FIG16, state, key, value)
    history = experts.expected_collapse(state["step"], state["E"], state["k"], skew=state["skew"], alpha=state["alpha"])
    capacity = experts.expert_capacity(state["T"], state["E"], state["k"], 2.0)
    routing = experts.expected_routing(state["T"], history[-1].router_prob, state["k"], capacity)
    assert shown["capacity_per_expert"]["value"] == capacity
    assert shown["dropped_fraction"]["value"] == fmt.portable(routing.dropped_fraction)
    assert shown["aux_loss"]["value"] == fmt.portable(routing.balance_loss)
    assert shown["alltoall_bytes_per_device"]["value"] == experts.moe_alltoall_bytes(
        state["k"], 1, state["T"], state["h"], ep=state["ep"]).forward_bytes
    # E = 8 pulled EP down to 8 (at most one rank per expert): the page moved that slider too
    assert state["ep"] == 8 and read_state(page, FIG16)["ep"] == 8


def test_figure_16_train_button_runs_the_collapse(session):
    page = session.page
    for key, value in (("T", 8192), ("E", 64), ("k", 2), ("cf", "1.25"), ("skew", 0.2), ("alpha", 0), ("step", 0)):
        set_control(page, FIG16, key, value)
    losses = []
    for step in range(1, 6):
        press(page, FIG16, "advance")
        state = read_state(page, FIG16)
        assert state["step"] == step
        assert_shows(page, FIG16, state)
        losses.append(readouts(page, "fig-16")["aux_loss"]["value"])
    assert losses == sorted(losses) and losses[-1] > losses[0]  # without the balancing loss it only grows


def test_figure_16_link_restores_a_collapsed_router(session):
    page = session.page
    follow_link(page, "fig-16:alpha=0,step=20,cf=none")
    page.wait_for_function("() => document.querySelector('#fig-16 [data-control=cf]').value === 'none'")
    settle(page, "fig-16")
    state = FIG16.validate_state({**FIG16.default_state(), "alpha": 0, "step": 20, "cf": "none"})
    assert_shows(page, FIG16, state)
    assert readouts(page, "fig-16")["busiest_vs_mean"]["text"] == "32.00\u00d7"


def test_figure_17_every_control_moves_the_numbers_to_the_models(session):
    page = session.page
    state = read_state(page, FIG17)
    moves = (("rank", 200), ("axis", "dp"), ("order", "dp-tp-cp-pp"), ("tp", 16), ("cp", 2), ("dp", 32),
             ("pp", 4), ("ep", 16), ("axis", "ep"), ("gpus", 72), ("rank", 4000), ("axis", "edp"),
             ("dp", 4096), ("order", "pp-dp-cp-tp"), ("gpus", 4), ("tp", 1), ("axis", "pp"))
    for key, value in moves:
        shown = move_and_check(page, FIG17, state, key, value)
    mesh = Mesh(dp=state["dp"], tp=state["tp"], pp=state["pp"], cp=state["cp"], ep=state["ep"],
                order=state["order"], gpus_per_node=state["gpus"])
    assert mesh.world_size <= 4096 and shown["world_size"]["value"] == mesh.world_size
    assert [shown[f"coord_{a}"]["value"] for a in ("tp", "cp", "dp", "pp")] == [
        mesh.coords(state["rank"])[a] for a in ("tp", "cp", "dp", "pp")]
    assert shown["group_size"]["value"] == len(group_ranks(mesh, state["axis"], state["rank"]))


def test_figure_17_the_rank_slider_rewrites_the_groups_for_a_screen_reader(session):
    page = session.page
    for key, value in (("tp", 8), ("cp", 1), ("dp", 8), ("pp", 8), ("ep", 1), ("order", "tp-cp-dp-pp"),
                       ("gpus", 8), ("axis", "tp"), ("rank", 77)):
        set_control(page, FIG17, key, value)
    table = page.inner_text("#fig-17 [data-role=html]")
    assert "72\u201379" in table and "69, 77, 85, \u2026, 125 (step 8)" in table
    set_control(page, FIG17, "rank", 300)
    state = read_state(page, FIG17)
    assert_shows(page, FIG17, state)
    mesh = Mesh(tp=8, dp=8, pp=8)
    table = page.inner_text("#fig-17 [data-role=html]")
    for axis in ("tp", "dp", "pp"):
        assert fmt.rank_list(group_ranks(mesh, axis, 300)) in table
    assert fmt.rank_list(group_ranks(mesh, "tp", 300)) in page.text_content("#fig-17 [data-role=alt]")


def test_figure_17_the_rank_slider_ends_at_the_last_rank_of_the_world(session):
    """The rank slider runs to the world's last rank, not to 4,095 (and DP to what 4,096 GPUs
    leave it): its max follows every move, so no stretch of a track is dead."""
    page = session.page
    for key, value in (("tp", 8), ("cp", 1), ("dp", 8), ("pp", 8), ("ep", 1), ("gpus", 8), ("rank", 77)):
        set_control(page, FIG17, key, value)
    rank, dp = page.locator("#fig-17 [data-control=rank]"), page.locator("#fig-17 [data-control=dp]")
    assert (rank.get_attribute("max"), dp.evaluate("input => input.max")) == ("511", "6")  # DP up to 64
    set_control(page, FIG17, "dp", 2)
    assert rank.evaluate("input => input.max") == "127" and read_state(page, FIG17)["rank"] == 77
    rank.focus()
    page.keyboard.press("End")  # the end of the track is the last rank
    settle(page, "fig-17")
    assert read_state(page, FIG17)["rank"] == 127 and readouts(page, "fig-17")["node"]["value"] == 15
    set_control(page, FIG17, "dp", 64)  # a world of 4,096: the track grows back, the rank stays
    assert rank.evaluate("input => input.max") == "4095" and read_state(page, FIG17)["rank"] == 127
    for key, value in (("dp", 8), ("rank", 77)):
        set_control(page, FIG17, key, value)
    assert rank.evaluate("input => input.max") == "511"


def test_figure_17_every_drawn_rank_is_a_target_for_its_own_rank(session):
    page = session.page
    strips = page.eval_on_selector_all("#fig-17 [data-set-strip]", "ts => ts.map(t => t.dataset.setStrip)")
    ranks = []
    for strip in strips:  # "rank=first/count": one rect per run of squares (svg.hit_strips)
        first, count = map(int, strip.removeprefix("rank=").split("/"))
        ranks += range(first, first + count)
    assert sorted(ranks) == list(range(512)) and len(strips) == 64
    assert page.locator("#fig-17 svg rect[data-set]").count() == 0


def test_figure_17_clicking_a_square_chooses_that_rank(session):
    page = session.page
    for rank in (300, 296, 303):  # inside a strip, and its first and last squares
        strip = page.locator("#fig-17 [data-set-strip='rank=296/8']")
        box = strip.bounding_box()
        strip.click(position={"x": (rank - 296 + 0.5) * box["width"] / 8, "y": box["height"] / 2})
        settle(page, "fig-17")
        assert read_state(page, FIG17)["rank"] == rank
        assert readouts(page, "fig-17")["node"]["value"] == rank // 8


def test_figure_17_link_restores_a_state(session):
    page = session.page
    state = FIG17.validate_state({**FIG17.default_state(), "order": "dp-tp-cp-pp", "rank": 13, "axis": "dp"})
    follow_link(page, encode_state(FIG17, state))
    page.wait_for_function("() => document.querySelector('#fig-17 [data-control=order]').value === 'dp-tp-cp-pp'")
    settle(page, "fig-17")
    assert_shows(page, FIG17, state)
    assert "Flagged" in page.text_content("#fig-17 [data-role=note]")


def test_no_errors(session):
    assert session.console_errors == [] and session.page_errors == [] and session.blocked == []
