"""Figures 09, 10 and 22 in headless Chromium: a reader moves every control, the numbers on the page
are what models/ computes, the constraint on the shard group moves its slider, and a link restores
a state."""
import pytest

from figures import registry
from figures.contract import encode_state
from models import checkpoint, fsdp, hsdp

from tests.browser.drive import follow_link, assert_shows, move_and_check, read_state, readouts

pytestmark = pytest.mark.browser


# What a reader tries, in order: every control of each figure at least once.
READER_MOVES = {
    9: (("prefetch", False), ("units", 128), ("gather_ms", 20), ("compute_ms", 5), ("reshard", False),
        ("prefetch", True), ("units", 2)),
    10: (("shard", 512), ("shard", 1), ("N", 4096), ("gpus", 4), ("shard", 64), ("intra", "nvlink5"),
         ("inter", "ib_xdr"), ("params", 1_000_000_000_000), ("N", 8)),
    22: (("dst", 5), ("src", 64), ("rows", 1024), ("metadata", False), ("mode", "gathered"),
         ("params", 1_000_000_000_000), ("write_GBps", 50), ("mode", "sharded"), ("dst", 64)),
}


@pytest.mark.parametrize("number", sorted(READER_MOVES))
def test_every_control_redraws_with_model_numbers(session, number):
    page, figure = session.page, registry()[number]
    state = read_state(page, figure)
    for key, value in READER_MOVES[number]:
        move_and_check(page, figure, state, key, value)
    assert {c.key for c in figure.stateful_controls} <= {key for key, _ in READER_MOVES[number]}


def test_fig09_readouts_follow_the_prefetch_toggle(session):
    page, figure = session.page, registry()[9]
    state = read_state(page, figure)
    for key, value in (("units", 16), ("compute_ms", 10), ("gather_ms", 5), ("reshard", True), ("prefetch", True)):
        move_and_check(page, figure, state, key, value)
    on = readouts(page, figure.anchor)
    shown = move_and_check(page, figure, state, "prefetch", False)
    assert shown["step_time_s"]["value"] == on["other_step_time_s"]["value"]
    step = fsdp.fsdp_lanes(16, 0.01, 0.005, prefetch=False)
    assert shown["exposed_comm_s"]["value"] == step.exposed_comm_s
    assert shown["peak_unsharded_units"]["value"] == 1 and on["peak_unsharded_units"]["value"] == 2
    # Both timelines stay drawn whichever the readouts describe.
    assert page.locator("#fig-09 svg path.stroke-forward").count() == 2


def test_fig10_a_shard_group_wider_than_the_world_snaps_its_slider(session):
    page, figure = session.page, registry()[10]
    state = read_state(page, figure)
    move_and_check(page, figure, state, "N", 512)
    move_and_check(page, figure, state, "shard", 256)
    shown = move_and_check(page, figure, state, "N", 64)  # 256 GPUs cannot be a group of a 64-GPU world
    assert read_state(page, figure)["shard"] == 64
    assert page.text_content("#fig-10 output[data-for='shard']") == "64 GPUs"
    traffic = hsdp.hsdp_traffic(state["params"], 64, 64, gpus_per_node=state["gpus"])
    assert shown["inter_node_bytes_per_step"]["value"] == traffic.inter_node_bytes


def test_fig22_dropping_the_metadata_breaks_only_a_changed_world(session):
    page, figure = session.page, registry()[22]
    state = read_state(page, figure)
    for key, value in (("mode", "sharded"), ("metadata", True), ("src", 8), ("dst", 6), ("rows", 64)):
        move_and_check(page, figure, state, key, value)
    plan = checkpoint.reshard_reads((64, 4096), 4, checkpoint.ShardLayout(8), checkpoint.ShardLayout(6))
    assert readouts(page, figure.anchor)["reads_total"]["value"] == sum(map(len, plan))
    shown = move_and_check(page, figure, state, "metadata", False)
    assert shown["reload_ok"]["value"] == 0 and shown["reload_ok"]["text"] == "fails"
    assert page.locator("#fig-22 svg path.stroke-warn").count() == 1
    assert "World size changed from 8 to 6" in page.text_content("#fig-22 [data-role=note]")
    shown = move_and_check(page, figure, state, "dst", 8)
    assert shown["reload_ok"]["value"] == 1 and page.locator("#fig-22 svg path.stroke-warn").count() == 0


def test_moves_land_in_the_url_and_a_link_restores_them(session):
    page, figure = session.page, registry()[10]
    state = read_state(page, figure)
    move_and_check(page, figure, state, "N", 1024)
    move_and_check(page, figure, state, "shard", 16)
    assert page.evaluate("location.hash") == "#" + encode_state(figure, state)
    follow_link(page, "fig-22:src=16,dst=12,rows=32,metadata=0")
    page.wait_for_function("() => document.querySelector('#fig-22 [data-control=metadata]').checked === false")
    eleven = registry()[22]
    assert_shows(page, eleven, {**eleven.default_state(), "src": 16, "dst": 12, "rows": 32, "metadata": False})


def test_no_errors_after_all_that_interaction(session):
    assert session.console_errors == [] and session.page_errors == []
    assert session.page.locator(".py-error").count() == 0
    assert session.blocked == []
