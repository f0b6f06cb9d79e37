"""Figures 11-14 in headless Chromium: what a reader does with them (every control, the
button, a bar of the chart, a link to a state) and the numbers the page then shows."""
import pytest

from figures import registry
from figures.contract import encode_state
from models import activations, context, hardware, tensor

from tests.browser.drive import (follow_link, assert_shows, move_and_check, other_value, press, read_state, readouts, readouts_state,
                                 set_control, settle)

pytestmark = pytest.mark.browser
FIGURES = (11, 12, 13, 14)


def state_of(page, number):
    figure = registry()[number]
    return figure, figure.validate_state(readouts_state(page, figure))


@pytest.mark.parametrize("number", FIGURES)
def test_every_control_redraws_with_the_models_numbers(session, number):
    figure, state = state_of(session.page, number)
    for control in figure.stateful_controls:
        move_and_check(session.page, figure, state, control.key, other_value(control, state[control.key], figure, state))
        move_and_check(session.page, figure, state, control.key, figure.default_state()[control.key])


def test_figure_11_rows_first_and_new_matrices(session):
    page = session.page
    figure, state = state_of(page, 11)
    for key, value in (("T", 8), ("block", "attention"), ("order", "row_first")):
        shown = move_and_check(page, figure, state, key, value)
    walk = tensor.block_walkthrough("attention", "row_first", 8, state["seed"])
    assert shown["max_abs_error"]["value"] == walk.max_abs_error > 1e-3
    assert shown["collectives_forward"]["value"] == 2
    assert shown["allreduce_bytes"]["value"] == 2 * 4096 * 3 * 8192  # the fused Q/K/V partial sums
    seed = state["seed"]
    press(page, figure, "new_matrices")
    state = read_state(page, figure)
    assert state["seed"] == (seed + 1) % 100
    assert_shows(page, figure, state)
    assert readouts(page, figure.anchor)["max_abs_error"]["value"] == tensor.block_walkthrough(
        "attention", "row_first", 8, state["seed"]).max_abs_error
    set_control(page, figure, "order", "column_row")
    assert readouts(page, figure.anchor)["max_abs_error"]["value"] <= 1e-12


def test_figure_12_crossing_the_node_edge(session):
    page = session.page
    figure, state = state_of(page, 12)
    # 16 GPUs on one NVLink: an HGX A100 board (an H100's NVLink stops at 8, issue 43)
    for key, value in (("gpus", 8), ("T", 16), ("inter", "ib_hdr"), ("gpu", "a100_80gb"), ("gpus", 16)):
        shown = move_and_check(page, figure, state, key, value)
        domain = hardware.scale_up_domain(state["gpu"], state["gpus"])
        assert shown["crosses_node"]["value"] == (1 if state["T"] > domain else 0)
    model = tensor.tp_layer_time(state["micro"], state["seq"], state["hidden"], 16, gpu="a100_80gb", gpus_per_node=16,
                                 inter_link="ib_hdr")
    assert shown["layer_time_s"]["value"] == model.layer_s and shown["speedup"]["value"] == model.speedup


def test_figure_12_a_bar_is_a_button_for_its_degree(session):
    page = session.page
    figure, _ = state_of(page, 12)
    set_control(page, figure, "gpus", 8)
    page.click("#fig-12 [data-set='T=32']")
    settle(page, figure.anchor)
    assert read_state(page, figure)["T"] == 32
    assert_shows(page, figure, read_state(page, figure))
    page.focus("#fig-12 [data-set='T=4']")
    page.keyboard.press("Enter")
    settle(page, figure.anchor)
    assert read_state(page, figure)["T"] == 4


def test_figure_13_sequence_parallelism_saves_memory_not_bandwidth(session):
    page = session.page
    figure, state = state_of(page, 13)
    off = move_and_check(page, figure, state, "sp", False)
    on = move_and_check(page, figure, state, "sp", True)
    assert on["comm_bytes_per_layer"]["value"] == pytest.approx(off["comm_bytes_per_layer"]["value"], rel=1e-12)
    assert on["activation_bytes_per_layer"]["value"] < off["activation_bytes_per_layer"]["value"]
    assert page.locator("#fig-13 svg text", has_text="ReduceScatter").count() == 2
    # a hidden size the heads do not divide: the page moves the heads slider to one that does
    for key, value in (("a", 96), ("h", 25600)):
        move_and_check(page, figure, state, key, value)
    shown = read_state(page, figure)
    assert shown["h"] == 25600 and 25600 % shown["a"] == 0 and shown["a"] % shown["t"] == 0
    assert readouts(page, figure.anchor)["activation_bytes_per_layer"]["value"] == activations.per_layer_bytes(
        shown["s"], shown["b"], shown["h"], shown["a"], tp=shown["t"], sequence_parallel=True,
        recompute=shown["recompute"])


def test_figure_14_ulysses_past_the_kv_heads(session):
    page = session.page
    figure, state = state_of(page, 14)
    for key, value in (("kv_heads", 8), ("C", 16)):
        shown = move_and_check(page, figure, state, key, value)
    assert shown["ulysses_ok"]["value"] == 0
    assert shown["ulysses_bytes_per_device"] == {"text": "not possible: C = 16 > 8 KV heads", "value": None}
    assert page.locator("#fig-14 svg text", has_text="8 KV heads for 16 ranks").count() == 1
    shown = move_and_check(page, figure, state, "layout", "two_chunks")
    assert shown["causal_imbalance"]["value"] == context.causal_work(16, "two_chunks").imbalance == 1.0
    # fewer query heads than KV heads is not a model: the KV slider follows the query heads down
    move_and_check(page, figure, state, "kv_heads", 128)
    move_and_check(page, figure, state, "heads", 16)
    assert read_state(page, figure)["kv_heads"] == 16


def test_a_link_restores_each_figures_state(session):
    page = session.page
    for number, changes in ((11, {"T": 4, "order": "row_first", "seed": 42}), (12, {"T": 32, "hidden": 4096}),
                            (13, {"t": 4, "sp": True, "recompute": "selective"}), (14, {"C": 32, "layout": "two_chunks"})):
        figure = registry()[number]
        state = figure.validate_state({**figure.default_state(), **changes})
        follow_link(page, encode_state(figure, state))
        key, value = next(iter(changes.items()))
        control = figure.control(key)
        position = control.position_text(value) if hasattr(control, "position") else value
        page.wait_for_function(
            f"() => document.querySelector('#{figure.anchor} [data-control={key}]').value === '{position}'")
        settle(page, figure.anchor)
        assert read_state(page, figure) == state
        assert_shows(page, figure, state)


def test_no_errors_after_all_that(session):
    assert session.console_errors == [] and session.page_errors == []
    assert session.blocked == []
