"""Figures 04-07 in headless Chromium: every control of each moves the drawing and the
numbers (to exactly what models/ computes), and the stories the prose tells play out."""
import pytest

from figures import registry
from figures.contract import encode_state
from models import ddp, hardware, memory, sampler

from tests.browser.drive import follow_link, assert_shows, move_and_check, other_value, read_state, readouts, settle

pytestmark = pytest.mark.browser


def _scroll_to(page, figure):
    page.evaluate(f"document.getElementById('{figure.anchor}').scrollIntoView()")


@pytest.mark.parametrize("number", [4, 5, 6, 7])
def test_every_control_moves_the_figure_to_the_models_numbers(session, number):
    page, figure = session.page, registry()[number]
    _scroll_to(page, figure)
    state = read_state(page, figure)
    for control in figure.stateful_controls:
        move_and_check(page, figure, state, control.key, other_value(control, state[control.key], figure, state))
    for control in figure.stateful_controls:  # and back, so later tests start from the defaults
        move_and_check(page, figure, state, control.key, figure.default_state()[control.key])


def test_figure_04_a_broken_sampler_changes_the_audit_not_the_dashboard(session):
    page, figure = session.page, registry()[4]
    state = read_state(page, figure)
    before = move_and_check(page, figure, state, "dp", 2)
    broken = move_and_check(page, figure, state, "variant", "no_rank_offset")
    assert broken["unique_fraction"]["value"] == 0.5 == sampler.sampler_audit(128, 2, 2, variant="no_rank_offset").unique_fraction
    assert broken["draws"] == before["draws"] and broken["global_batch"] == before["global_batch"]
    repeated = move_and_check(page, figure, state, "variant", "epoch_not_set")
    assert repeated["repeated_epochs"]["value"] == 1 and repeated["duplicated_samples"]["value"] == 0
    for key in ("variant", "dp"):
        move_and_check(page, figure, state, key, figure.default_state()[key])


def test_figure_04_a_step_bigger_than_the_dataset_says_so(session):
    """The default step (16 samples) is an eighth of the toy dataset; the article's example step
    (4 x 8 x 64 = 2,048) is sixteen epochs of it, and the drawing and readout say so in red."""
    page, figure = session.page, registry()[4]
    state = read_state(page, figure)
    assert readouts(page, "fig-04")["steps_per_epoch"]["value"] == 8
    for key, value in (("micro", 4), ("accum", 8), ("dp", 64)):
        shown = move_and_check(page, figure, state, key, value)
    assert shown["global_batch"]["value"] == 2048 and shown["steps_per_epoch"]["value"] == 1 / 16
    assert "one step = 16 epochs of 128 samples" in page.text_content("#fig-04 [data-role=view] svg")
    for key in ("micro", "accum", "dp"):
        move_and_check(page, figure, state, key, figure.default_state()[key])


def test_figure_05_the_bucket_cap_has_a_sweet_spot(session):
    page, figure = session.page, registry()[5]
    state = read_state(page, figure)
    exposed = {}
    for cap in (1, 1024, 25):
        exposed[cap] = move_and_check(page, figure, state, "bucket_mb", cap)["exposed_comm_s"]["value"]
    assert exposed[25] < exposed[1] and exposed[25] < exposed[1024]
    step = ddp.uniform_step(1.3e9, 256, 0.2, ranks=64, alpha_s=5e-6, bandwidth_bytes_per_s=50e9, bucket_cap_mb=1)
    assert exposed[1] == step.exposed_comm_s


def test_figure_06_more_channels_lower_the_overlap_efficiency(session):
    page, figure = session.page, registry()[6]
    state = read_state(page, figure)
    start = readouts(page, figure.anchor)
    assert 0.6 <= start["overlap_efficiency"]["value"] <= 0.9
    more = move_and_check(page, figure, state, "channels", 64)
    assert more["overlap_efficiency"]["value"] < start["overlap_efficiency"]["value"]
    assert more["compute_slowdown"]["value"] > start["compute_slowdown"]["value"] >= 1
    move_and_check(page, figure, state, "channels", 16)


def test_figure_07_n_moves_only_the_aggregate(session):
    page, figure = session.page, registry()[7]
    state = read_state(page, figure)
    small = move_and_check(page, figure, state, "N", 1)
    large = move_and_check(page, figure, state, "N", 4096)
    assert small["per_device_bytes"] == large["per_device_bytes"] and small["fits"]["value"] == 0
    assert large["aggregate_bytes"]["value"] == 4096 * small["aggregate_bytes"]["value"]
    fits = move_and_check(page, figure, state, "gpu", "mi300x")
    hbm = hardware.GPUS["mi300x"].hbm_bytes
    assert fits["fits"]["value"] == 1 and fits["largest_params_that_fit"]["value"] == memory.ddp_memory(7e9, 1, hbm).largest_params_that_fit
    for key in ("gpu", "N"):
        move_and_check(page, figure, state, key, figure.default_state()[key])


def test_a_link_restores_each_figures_state(session):
    page = session.page
    for number, changes in ((4, {"variant": "no_rank_offset", "dp": 16}), (5, {"bucket_mb": 1, "layers": 1024}),
                            (6, {"bw_GBps": 50, "sms": 304}), (7, {"params": 70_000_000_000, "N": 1024})):
        figure = registry()[number]
        state = figure.validate_state({**figure.default_state(), **changes})
        follow_link(page, encode_state(figure, state))
        for key, value in changes.items():
            control = figure.control(key)
            shown = control.position_text(value) if hasattr(control, "position") else str(value)
            page.wait_for_function(f"() => document.querySelector('#{figure.anchor} [data-control={key}]').value === '{shown}'")
        settle(page, figure.anchor)
        assert_shows(page, figure, state)


def test_no_errors_after_all_that_interaction(session):
    assert session.console_errors == [] and session.page_errors == []
    assert session.blocked == []
