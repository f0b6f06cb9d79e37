"""Figures 18-20 in headless Chromium: a reader switches strategies, describes a model,
steps and plays the seven panels, clicks one, and follows links; every number shown is
what models/ computes."""
import pytest

from figures import registry
from models import ladder, step_timeline, tour
from tests.browser.drive import follow_link, assert_shows, move_and_check, read_state, readouts, readouts_state, set_control, settle

pytestmark = pytest.mark.browser


def _state(page, number):
    figure = registry()[number]
    return figure, figure.validate_state(readouts_state(page, figure))


def test_fig18_switching_strategies_moves_the_exposed_time(session):
    page = session.page
    figure, state = _state(page, 18)
    for key, value in (("cp", True), ("ep", True), ("tp", False), ("pp", False), ("fsdp", True), ("dp", False),
                       ("params", 7_500_000_000), ("gpus", 64), ("link", "ib_hdr"), ("dp", True)):
        shown = move_and_check(page, figure, state, key, value)
        enabled = frozenset(axis for axis in step_timeline.AXES if state[axis])
        per_axis = {k for k in shown if k.startswith("exposed_") and k != "exposed_comm_s"}
        assert per_axis == {f"exposed_{axis}_s" for axis in enabled}
        step = step_timeline.step_timeline(state["params"], state["gpus"], enabled, global_batch=state["batch"],
                                           link=state["link"])
        assert shown["exposed_comm_s"]["value"] == step.exposed_comm_s
        assert shown["step_time_s"]["value"] == step.step_time_s
        assert shown["global_batch_tokens"]["value"] == state["batch"] * 2048  # no toggle changes the work
    assert page.locator("#fig-18 svg path.stroke-exposed").count() >= 1
    for key, value in (("params", 145_600_000_000), ("gpus", 1536), ("link", "ib_ndr"), ("fsdp", False),
                       ("cp", False), ("ep", False), ("tp", True), ("pp", True)):
        move_and_check(page, figure, state, key, value)
    assert state == figure.default_state()


def test_fig18_a_toggle_keeps_the_tokens_per_step_and_says_what_does_not_fit(session):
    """Context parallelism on: the same tokens per step, so the step grows (it fell 41% when
    DP's halving halved the batch), drawn on the default layout's axis with its end dashed.
    DP alone: a red 'does not fit' in the drawing and the memory readout."""
    page = session.page
    figure, state = _state(page, 18)
    default = readouts(page, "fig-18")
    assert page.locator("#fig-18 svg path.svg-dash").count() == 0
    shown = move_and_check(page, figure, state, "cp", True)
    assert shown["global_batch_tokens"] == default["global_batch_tokens"]
    assert shown["step_time_s"]["value"] > default["step_time_s"]["value"]
    assert shown["exposed_comm_s"]["value"] > default["exposed_comm_s"]["value"]
    assert shown["reference_step_s"]["value"] == default["step_time_s"]["value"]
    assert page.locator("#fig-18 svg path.svg-dash").count() == 1
    move_and_check(page, figure, state, "cp", False)
    for key, value in (("tp", False), ("pp", False)):
        shown = move_and_check(page, figure, state, key, value)
    assert shown["memory_per_gpu_bytes"]["text"].endswith("does not fit") and shown["replica_sequences"]["value"] == 2
    assert "Does not fit" in page.text_content("#fig-18 [data-role=view] svg")
    for key, value in (("tp", True), ("pp", True)):
        move_and_check(page, figure, state, key, value)
    assert "Does not fit" not in page.text_content("#fig-18 [data-role=view] svg")


def test_fig19_the_lit_path_follows_the_ladder(session):
    page = session.page
    figure, state = _state(page, 19)
    expected = {"params": ("none", "ddp"), "seq": ("context", "cp"), "gpus": ("step_time", "tp"),
                "micro": ("activations", "zero"), "experts": ("experts", "ep"), "gpu": None}
    for key, value in (("params", 1_700_000_000), ("seq", 131072), ("seq", 2048), ("gpus", 4096), ("gpus", 64),
                       ("micro", 16), ("micro", 1), ("experts", 8), ("gpu", "h100_sxm")):
        shown = move_and_check(page, figure, state, key, value)
        r = ladder.climb(state["params"], state["seq"], state["gpu"], state["gpus"], state["experts"], state["micro"])
        assert (shown["first_bottleneck"]["value"], shown["recommended_axis"]["value"]) == (r.first_bottleneck, r.recommended_axis)
        if expected.get(key) and value not in (2048, 64, 1):
            assert (r.first_bottleneck, r.recommended_axis) == expected[key]
    assert page.locator("#fig-19 svg path.svg-lit").count() >= 3


def test_fig20_frames_focus_and_devices(session):
    page = session.page
    figure, state = _state(page, 20)
    for key, value in (("phase", 4), ("focus", "zero"), ("phase", 5), ("devices", 2), ("focus", "pp"), ("phase", 8),
                       ("focus", "all"), ("devices", 4), ("phase", 0)):
        shown = move_and_check(page, figure, state, key, value)
        assert shown["phase_name"]["value"] == tour.FRAMES[state["phase"]].phase
        if state["focus"] != "all":
            pf = tour.panel(state["focus"], state["devices"], state["phase"])
            assert (shown["moving_bytes"]["value"], shown["held_fraction"]["value"]) == (pf.moving_bytes, pf.held_fraction)


def test_fig20_play_steps_the_frames_and_pause_stops_them(session):
    page = session.page
    figure = registry()[20]
    set_control(page, figure, "phase", 0)
    set_control(page, figure, "playing", True)
    try:
        advanced = page.wait_for_function("() => document.querySelector('#fig-20 [data-control=phase]').value !== '0'",
                                          timeout=6_000) is not None
    except Exception:
        advanced = False
    finally:
        set_control(page, figure, "playing", False)
    settle(page, figure.anchor)
    state = read_state(page, figure)
    assert state["playing"] is False
    assert_shows(page, figure, state)
    assert advanced, "pressing play did not advance the phase"
    frozen = page.input_value("#fig-20 [data-control=phase]")
    page.wait_for_timeout(2 * figure.control("playing").interval_ms)
    assert page.input_value("#fig-20 [data-control=phase]") == frozen  # paused means paused


def test_fig20_clicking_a_panel_enlarges_it(session):
    page = session.page
    figure = registry()[20]
    set_control(page, figure, "focus", "all")
    page.click("#fig-20 [data-set='focus=tp']")
    settle(page, figure.anchor)
    assert page.input_value("#fig-20 [data-control=focus]") == "tp"
    assert_shows(page, figure, read_state(page, figure))
    page.focus("#fig-20 [data-set='focus=all']")  # the keyboard reaches the same button
    page.keyboard.press("Enter")
    settle(page, figure.anchor)
    assert page.input_value("#fig-20 [data-control=focus]") == "all"


def test_links_restore_states_of_figures_19_and_20(session):
    page = session.page
    follow_link(page, "fig-19:params=1700000000,seq=131072")
    page.wait_for_function("() => document.querySelector('#fig-19 [data-control=seq]').value === '8'")
    nineteen = registry()[19]
    assert_shows(page, nineteen, {**nineteen.default_state(), "params": 1_700_000_000, "seq": 131072})
    assert readouts(page, "fig-19")["recommended_axis"]["value"] == "cp"
    follow_link(page, "fig-20:phase=3,focus=pp,devices=2")
    page.wait_for_function("() => document.querySelector('#fig-20 [data-control=focus]').value === 'pp'")
    twenty = registry()[20]
    assert_shows(page, twenty, {"phase": 3, "focus": "pp", "devices": 2, "playing": False})


def test_no_errors_after_all_that(session):
    assert session.console_errors == [] and session.page_errors == []
    assert session.blocked == []
