"""What a reader does, in headless Chromium: the page boots Python from its own origin,
every figure goes live, every control changes the drawing and the numbers (to exactly
what models/ computes), the URL carries state, and a broken figure stays contained."""
import io
import json
import zipfile

import pytest

from figures import registry
from figures.contract import Play, encode_state, nearby_states
from models import memory, pipeline

from tests.browser.drive import (follow_link, assert_shows, move_and_check, other_value, play_and_pause, read_state, readouts,
                                 readouts_state, set_control)
from tests.browser.harness import PageSession

pytestmark = pytest.mark.browser


def test_page_boots_clean_from_its_own_origin(session):
    page = session.page
    assert page.evaluate("document.documentElement.dataset.python") == "ready"
    assert page.locator(".py-error").count() == 0
    assert session.blocked == [], f"off-origin requests: {session.blocked}"
    assert session.console_errors == [] and session.page_errors == []


def test_every_figure_is_live(session):
    states = session.page.eval_on_selector_all("figure[data-figure]", "fs => fs.map(f => [f.dataset.figure, f.dataset.state])")
    assert {number for number, _ in states} >= {"08", "15"}
    assert all(state == "live" for _, state in states), states


@pytest.mark.parametrize("number", sorted(registry()))
def test_every_control_of_every_figure_redraws_with_model_numbers(session, number):
    figure = registry()[number]
    page = session.page
    state = figure.validate_state(readouts_state(page, figure))
    for control in figure.stateful_controls:
        if isinstance(control, Play):
            play_and_pause(page, figure, control)
            state = figure.validate_state(readouts_state(page, figure))
            continue
        move_and_check(page, figure, state, control.key, other_value(control, state[control.key], figure, state))
    page.mouse.move(0, 0)  # a pointer left over a chart would keep it from rehearsing (test below)


def test_figure_08_numbers_follow_the_ledger(session):
    page, figure = session.page, registry()[8]
    state = figure.validate_state(readouts_state(page, figure))
    for key, value in (("params", 175_000_000_000), ("N", 8), ("stage", 1), ("optimizer", "adam_fp32"), ("stage", 0), ("N", 1024)):
        shown = move_and_check(page, figure, state, key, value)
    assert shown["per_device_bytes"]["value"] == memory.model_states_for(175e9, 1024, 0, "adam_fp32").total_bytes
    assert shown["comm_psi"]["value"] == memory.comm_volume_psi(0)


def test_figure_08_reproduces_the_zero_paper(session):
    page, figure = session.page, registry()[8]
    for key, value in (("params", 7_500_000_000), ("N", 64), ("optimizer", "adam_mixed")):
        set_control(page, figure, key, value)
    for stage, text in {0: "120 GB", 1: "31.4 GB", 2: "16.6 GB", 3: "1.88 GB"}.items():
        set_control(page, figure, "stage", stage)
        assert readouts(page, figure.anchor)["per_device_bytes"]["text"] == text


def test_figure_15_numbers_follow_the_simulation(session):
    page, figure = session.page, registry()[15]
    state = figure.validate_state(readouts_state(page, figure))
    for key, value in (("P", 8), ("m", 16), ("v", 4), ("m", 64), ("P", 2), ("v", 1)):
        shown = move_and_check(page, figure, state, key, value)
        assert shown["bubble_1f1b"]["value"] == pipeline.simulate("1f1b", state["P"], state["m"]).bubble_ratio
        assert shown["stashes_1f1b"]["value"] == min(state["P"], state["m"])
        assert shown["stashes_gpipe"]["value"] == state["m"]


def test_moving_a_control_puts_the_state_in_the_url(session):
    page, figure = session.page, registry()[15]
    set_control(page, figure, "P", 8)
    set_control(page, figure, "m", 16)
    state = figure.validate_state({**figure.default_state(), "P": 8, "m": 16, "v": 1})
    set_control(page, figure, "v", 1)
    assert page.evaluate("location.hash") == "#" + encode_state(figure, state)


def test_in_page_link_with_state_restores_it(session):
    page, figure = session.page, registry()[8]
    follow_link(page, "fig-08:params=70000000000,N=16,stage=2")
    page.wait_for_function("() => document.querySelector('#fig-08 [data-control=stage]').value === '2'")
    assert_shows(page, figure, {"params": 70_000_000_000, "N": 16, "stage": 2, "optimizer": "adam_mixed"})


def test_a_figure_in_view_renders_its_nearby_states_while_the_reader_is_idle(session):
    page, figure = session.page, registry()[15]
    set_control(page, figure, "P", 6)
    page.evaluate("document.getElementById('fig-15').scrollIntoView()")
    here = figure.validate_state({**read_state(page, figure), "P": 6})
    planned = len(nearby_states(figure, here, 10_000))
    page.wait_for_function("([around, count]) => { const f = document.getElementById('fig-15'); "
                           "return f.dataset.aheadOf === around && Number(f.dataset.ahead) >= count; }",
                           arg=[encode_state(figure, here), min(planned, 96)], timeout=30_000)
    # what was rendered ahead is what the reader then sees: two steps along m, then a jump along P
    for key, value in (("m", figure.validate_state(read_state(page, figure))["m"] + 2), ("P", 16)):
        set_control(page, figure, key, value)
        assert_shows(page, figure, read_state(page, figure))


def test_a_chart_in_view_rehearses_its_redraw_and_still_shows_its_own_state(session):
    page, figure = session.page, registry()[8]
    page.mouse.move(0, 0)  # a chart under the pointer is not rehearsed (its hover label would drop)
    page.evaluate("document.getElementById('fig-08').scrollIntoView()")
    page.wait_for_function("() => document.getElementById('fig-08').dataset.rehearsed === '4'", timeout=30_000)
    state = read_state(page, figure)
    [bars] = figure.render(state).plot["data"]
    drawn = page.eval_on_selector("#fig-08 .js-plotly-plot", "p => JSON.stringify([p.data[0].y, p.data[0].base, p.data[0].text])")
    assert json.loads(drawn) == [bars["y"], bars["base"], bars["text"]]
    assert_shows(page, figure, state)


def test_no_errors_after_all_that_interaction(session):
    assert session.csp_violations() == []
    assert session.console_errors == [] and session.page_errors == []
    assert session.page.locator(".py-error").count() == 0
    assert session.blocked == []


def broken_archive(site, figure_file):
    """The site's Python archive with one figure whose render always raises."""
    original = next((site / "py").glob("playbook.*.zip")).read_bytes()
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(original)) as source, zipfile.ZipFile(out, "w") as target:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == figure_file:
                data += b"\n\ndef render(state):\n    raise RuntimeError('injected fault')\n"
            target.writestr(item, data)
    return out.getvalue()


def test_url_state_restores_on_load_and_a_broken_figure_stays_contained(browser, base_url, site):
    archive = broken_archive(site, "figures/fig08_zero_ladder.py")
    routes = {"**/py/playbook.*.zip": lambda route: route.fulfill(status=200, body=archive, content_type="application/zip")}
    session = PageSession(browser, base_url, routes=routes)
    try:
        page = session.open("/#fig-15:P=8,m=16")
        fifteen, eight = registry()[15], registry()[8]
        assert page.input_value("#fig-15 [data-control=P]") == "8"
        assert page.input_value("#fig-15 [data-control=m]") == "16"
        assert_shows(page, fifteen, {"P": 8, "m": 16})
        assert page.evaluate("(() => { const r = document.querySelector('#fig-15').getBoundingClientRect(); return r.top < innerHeight && r.bottom > 0; })()")

        set_control(page, eight, "N", 8)
        assert page.get_attribute("#fig-08", "data-state") == "error"
        assert "injected fault" in page.text_content("#fig-08 [data-role=error]")
        assert page.is_visible("#fig-08 [data-role=error]")

        set_control(page, fifteen, "m", 32)
        assert page.get_attribute("#fig-15", "data-state") == "live"
        assert_shows(page, fifteen, {"P": 8, "m": 32})
        assert page.locator(".py-error").count() == 0 and session.page_errors == []
    finally:
        session.close()


def test_page_is_complete_when_python_cannot_start(browser, base_url):
    """With the Python runtime unreachable, every figure still shows its build-time
    drawing (the SVG inline, the Plotly chart drawn from its baked spec when it comes
    into view) and says in one line that live figures are unavailable."""
    session = PageSession(browser, base_url, routes={"**/pyodide.asm.wasm": lambda route: route.abort()})
    try:
        page = session.page
        page.goto(base_url + "/")
        page.wait_for_function("() => document.documentElement.dataset.python === 'failed'", timeout=30_000)
        assert page.is_visible(".python-status-failed")
        statuses = page.eval_on_selector_all(
            "figure[data-figure]", "fs => fs.map(f => [f.dataset.state, f.querySelector('[data-role=status]').textContent,"
            " f.querySelector('[data-role=controls]').inert])")
        assert statuses and all(state == "static" and "unavailable" in text and "\n" not in text and inert
                                for state, text, inert in statuses), statuses
        # tries and Reset could only set a live figure: gone; Copy link stays
        assert page.eval_on_selector_all("[data-role=tries], [data-role=reset]", "ns => ns.length > 25 && ns.every(n => n.hidden)")
        assert page.is_visible("#fig-15 [data-role=copy-link]")
        assert page.locator("#fig-15 [data-role=view] svg path.op-F").count() > 0
        assert_shows(page, registry()[15], registry()[15].default_state())
        page.evaluate("document.getElementById('fig-08').scrollIntoView()")
        page.wait_for_selector("#fig-08 .js-plotly-plot .bars", timeout=30_000)
        bars = page.evaluate("document.querySelector('#fig-08 .js-plotly-plot').data.filter(t => t.type === 'bar').map(t => t.y.length)")
        assert bars == [16]  # one trace: a total and its 3 parts x 4 stages
        # the only error is Pyodide's own, in the worker, about the file we withheld
        assert all("Failed to fetch" in error for error in session.page_errors), session.page_errors
    finally:
        session.close()


def test_without_javascript_charts_read_as_text(browser, base_url):
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(base_url + "/")
        figure = registry()[8]
        summary = figure.render(figure.default_state()).summary()
        assert page.text_content("#fig-08 .plot-fallback").strip() == summary
        assert not page.is_visible("#fig-08 [data-role=controls]")
        # the drawing baked for this width is shown, the phone's beside it is not
        assert page.locator("#fig-15 [data-role=view] > svg").count() == 2
        assert page.is_visible("#fig-15 svg[data-layout=wide]") and page.is_hidden("#fig-15 svg[data-layout=narrow]")
    finally:
        context.close()
