"""Figures 23-25 in headless Chromium: a reader moves every control, picks every fault, draws
another step, and follows a link to a state; the page shows what models/ computes."""

import pytest

from figures import registry
from models import hardware, reliability, scaling

from tests.browser.drive import (follow_link, assert_shows, move_and_check, other_value, press, read_state, readouts, readouts_state,
                                 set_control)

pytestmark = pytest.mark.browser
FIG23, FIG24, FIG25 = (registry()[n] for n in (23, 24, 25))


@pytest.mark.parametrize("figure", [FIG23, FIG24, FIG25], ids=lambda f: f.anchor)
def test_every_control_moves_the_drawing_to_the_models_numbers(session, figure):
    page = session.page
    state = figure.validate_state(readouts_state(page, figure))
    for control in figure.stateful_controls:
        move_and_check(page, figure, state, control.key, other_value(control, state[control.key], figure, state))


def test_figure_23_dragging_n_past_the_critical_batch(session):
    page = session.page
    state = FIG23.validate_state(readouts_state(page, FIG23))
    for key, value in (("per_device_batch", 2), ("b_noise", 2048), ("global_batch", 1024), ("step_ms", 500), ("grad_gb", 14),
                       ("bw_GBps", 50), ("overlap", 0.9), ("N", 256), ("N", 1024), ("N", 16384)):
        shown = move_and_check(page, FIG23, state, key, value)
    (p,) = scaling.scaling_efficiencies([16384], per_device_batch=2, global_batch=1024, b_noise=2048, step_s_per_sample=0.5,
                                        gradient_bytes=14e9, alpha_s=hardware.link("ib_ndr").alpha_s,
                                        bandwidth_bytes_per_s=50e9, overlap=0.9)
    assert shown["weak_efficiency"]["value"] == p.weak.efficiency
    assert shown["effective_efficiency"]["value"] == p.effective_efficiency
    assert shown["sample_efficiency"]["value"] == 1 / 17
    assert page.is_visible("#fig-23 [data-role=note]")  # the strong run is below one sample per device


def test_figure_24_every_fault(session):
    page = session.page
    state = FIG24.validate_state(readouts_state(page, FIG24))
    move_and_check(page, FIG24, state, "timeout_s", 600)
    for fault in [value for value, _ in FIG24.control("fault").options]:
        shown = move_and_check(page, FIG24, state, "fault", fault)
        t = reliability.hang_timeline(fault, timeout_s=600, at_s=state["at_s"])
        assert shown["first_stuck_call"]["value"] == ("none" if t.first_stuck is None else t.first_stuck.call.op)
        assert shown["blocked_ranks"]["value"] == len(t.blocked_ranks)
        dumped = page.text_content("#fig-24 [data-role=html]")
        assert ("Watchdog caught" in dumped) == (t.watchdog_at_s is not None)


def test_figure_24_a_longer_timeout_lets_the_io_stall_recover(session):
    page = session.page
    state = FIG24.validate_state(readouts_state(page, FIG24))
    shown = move_and_check(page, FIG24, state, "fault", "io_stall")
    shown = move_and_check(page, FIG24, state, "timeout_s", 600)
    assert shown["outcome"]["value"] == "watchdog" and shown["detected_after_s"]["value"] == 600
    shown = move_and_check(page, FIG24, state, "timeout_s", 3600)
    assert shown["outcome"]["value"] == "completed" and shown["detected_after_s"]["value"] is None
    assert shown["longest_wait_s"]["value"] == pytest.approx(reliability.IO_STALL_S)


def test_figure_24_the_faults_time_moves_the_run_and_the_dot_marks_the_rank_at_fault(session):
    """Sliding the fault's time redraws the run's clock (not just the title); the red dot sits
    on the rank at fault: rank 3 when it skips a collective, rank 2 when it is stuck in I/O."""
    page = session.page
    state = FIG24.validate_state(readouts_state(page, FIG24))
    run_bar = "() => document.querySelector('#fig-24 svg path.fill-compute').getAttribute('d')"
    move_and_check(page, FIG24, state, "fault", "divergent_control_flow")
    move_and_check(page, FIG24, state, "at_s", 10)
    early = page.evaluate(run_bar)
    move_and_check(page, FIG24, state, "at_s", 86400)
    assert page.evaluate(run_bar) != early
    for fault, rank in (("divergent_control_flow", 3), ("io_stall", 2)):
        move_and_check(page, FIG24, state, "fault", fault)
        title = page.text_content("#fig-24 svg text")
        assert f"on rank {rank} (red dot)" in title
    for key, value in (("fault", "divergent_control_flow"), ("at_s", 3600)):
        move_and_check(page, FIG24, state, key, value)


def test_figure_25_more_ranks_more_tax_and_one_bad_card(session):
    page = session.page
    state = FIG25.validate_state(readouts_state(page, FIG25))
    move_and_check(page, FIG25, state, "cv", 0.03)
    move_and_check(page, FIG25, state, "bad", 0)
    taxes = [move_and_check(page, FIG25, state, "N", n)["tax_fraction"]["value"] for n in (8, 512, 16384)]
    assert taxes == sorted(taxes) and taxes[0] == reliability.straggler_tax(8, 1.0, 0.03)
    move_and_check(page, FIG25, state, "N", 64)
    move_and_check(page, FIG25, state, "cv", 0.01)
    shown = move_and_check(page, FIG25, state, "bad", 0.05)
    assert shown["tax_fraction"]["value"] == 0.05 > shown["healthy_tax"]["value"]


def test_figure_25_drawing_another_step_changes_the_seed_and_the_sample(session):
    page = session.page
    before = read_state(page, FIG25)
    sampled = readouts(page, FIG25.anchor)["sampled_step"]["value"]
    press(page, FIG25, "resample")
    after = read_state(page, FIG25)
    assert after["seed"] == before["seed"] % 20 + 1 and after == {**before, "seed": after["seed"]}
    assert_shows(page, FIG25, after)
    assert readouts(page, FIG25.anchor)["sampled_step"]["value"] != sampled


def test_a_link_restores_a_hang(session):
    page = session.page
    follow_link(page, "fig-24:fault=dead_rank,timeout_s=60,at_s=600")
    page.wait_for_function("() => document.querySelector('#fig-24 [data-control=fault]').value === 'dead_rank'")
    state = {"fault": "dead_rank", "timeout_s": 60, "at_s": 600}
    assert_shows(page, FIG24, state)
    assert readouts(page, FIG24.anchor)["detected_after_s"]["value"] == 60
    set_control(page, FIG24, "fault", "divergent_control_flow")  # leave it as the other tests expect


def test_no_errors(session):
    assert session.console_errors == [] and session.page_errors == [] and session.blocked == []
