"""A reader's shortcuts around every figure, in headless Chromium: a try sets its state
(controls, drawing, readouts and URL all move there), Reset brings the default back and
is disabled there, both work from the keyboard, and the contents mark the section being
read while the reader scrolls. One page load for the module."""
import pytest

from figures import registry
from figures.contract import encode_state

from tests.browser.drive import SETTLE_TIMEOUT_MS, assert_shows, read_state, readouts, set_control, settle

pytestmark = pytest.mark.browser


def painted(page, figure, fragment):
    """Wait until ``figure`` shows the state ``fragment`` names, and has painted everything."""
    page.wait_for_function("([anchor, fragment]) => document.getElementById(anchor).dataset.fragment === fragment",
                           arg=[figure.anchor, fragment], timeout=SETTLE_TIMEOUT_MS)
    settle(page, figure.anchor)


def buttons(page, figure):
    """(Reset's aria-disabled, [each try's aria-current]) as the page shows them."""
    return page.evaluate("""anchor => {
      const f = document.getElementById(anchor);
      return [f.querySelector('[data-role=reset]').getAttribute('aria-disabled'),
              [...f.querySelectorAll('[data-role=try]')].map(a => a.getAttribute('aria-current'))];
    }""", figure.anchor)


def test_every_live_figure_has_its_tries_and_a_reset_disabled_at_its_default(session):
    page = session.page
    for number, figure in sorted(registry().items()):
        shown = page.eval_on_selector_all(f"#{figure.anchor} [data-role=try]", "links => links.map(a => [a.textContent, a.dataset.fragment])")
        assert [tuple(s) for s in shown] == list(figure.try_links()), number
        if read_state(page, figure) == figure.default_state():
            assert buttons(page, figure) == ["true", [None] * len(figure.tries)], number


def test_two_moves_in_one_frame_leave_the_figure_busy_until_the_second_is_painted(session):
    """The second of two inputs in one frame, its view kept, is painted on the next frame:
    until then the figure says it is busy (a test's settle, like a reader, waits for it)."""
    page, figure = session.page, registry()[15]
    page.evaluate(f"document.getElementById('{figure.anchor}').scrollIntoView()")
    page.wait_for_function("a => { const f = document.getElementById(a); return f.dataset.aheadOf === a && Number(f.dataset.ahead) >= 8; }",
                           arg=figure.anchor, timeout=30_000)
    page.wait_for_timeout(300)  # the views ahead have reached the page
    busy = page.evaluate("""a => { const slider = document.querySelector('#' + a + ' [data-control=P]');
      for (const value of ['5', '6']) { slider.value = value; slider.dispatchEvent(new Event('input', {bubbles: true})); }
      return document.getElementById(a).hasAttribute('data-busy'); }""", figure.anchor)
    assert busy
    painted(page, figure, encode_state(figure, {**figure.default_state(), "P": 6}))
    assert_shows(page, figure, {**figure.default_state(), "P": 6})
    page.click(f"#{figure.anchor} [data-role=reset]")
    painted(page, figure, figure.anchor)


@pytest.mark.parametrize("number", [15, 8, 18, 21])
def test_a_try_sets_the_figure_and_the_url_and_reset_brings_the_default_back(session, number):
    """Figure 15's sliders, Figure 08's chart, Figure 18's switches and the lab's typed fields."""
    page, figure = session.page, registry()[number]
    page.evaluate(f"document.getElementById('{figure.anchor}').scrollIntoView()")
    for index, (label, fragment) in enumerate(figure.try_links()[:2]):
        state = figure.validate_state(figure.tries[index][1])
        before = readouts(page, figure.anchor)
        page.click(f"#{figure.anchor} [data-role=try] >> nth={index}")
        painted(page, figure, fragment)
        assert read_state(page, figure) == state, label  # the controls moved there
        assert_shows(page, figure, state)  # and the drawing and the numbers
        assert readouts(page, figure.anchor) != before, label
        assert page.evaluate("location.hash") == "#" + fragment
        marks = [None] * len(figure.tries)
        marks[index] = "true"
        assert buttons(page, figure) == ["false", marks]
    page.click(f"#{figure.anchor} [data-role=reset]")
    painted(page, figure, figure.anchor)
    assert read_state(page, figure) == figure.default_state()
    assert_shows(page, figure, figure.default_state())
    assert page.evaluate("location.hash") == "#" + figure.anchor
    assert buttons(page, figure) == ["true", [None] * len(figure.tries)]


def test_a_try_and_reset_work_from_the_keyboard(session):
    page, figure = session.page, registry()[15]
    set_control(page, figure, "P", 6)
    state = read_state(page, figure)
    assert buttons(page, figure)[0] == "false"
    # Reset is the tab stop after the last try
    page.focus(f"#{figure.anchor} [data-role=try] >> nth=-1")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.dataset.role") == "reset"
    page.keyboard.press("Enter")
    painted(page, figure, figure.anchor)
    assert read_state(page, figure) == figure.default_state() != state
    # disabled at the default, yet still focused: a key press there does nothing
    assert page.evaluate("document.activeElement.dataset.role") == "reset"
    assert page.get_attribute(f"#{figure.anchor} [data-role=reset]", "aria-disabled") == "true"
    calls = page.evaluate("() => { window.__posts = 0; window.__onWorkerPost = () => { window.__posts += 1; }; return 0; }")
    page.keyboard.press("Space")
    page.wait_for_timeout(200)
    assert page.evaluate("window.__posts") == calls and not page.get_attribute(f"#{figure.anchor}", "data-busy")
    page.evaluate("window.__onWorkerPost = null")
    # a try, reached by Tab and pressed with Enter
    page.focus(f"#{figure.anchor} [data-role=try] >> nth=0")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    label, fragment = figure.try_links()[1]
    painted(page, figure, fragment)
    assert read_state(page, figure) == figure.validate_state(figure.tries[1][1]), label
    assert page.evaluate("location.hash") == "#" + fragment
    page.click(f"#{figure.anchor} [data-role=reset]")
    painted(page, figure, figure.anchor)


def test_the_last_thing_the_reader_did_is_what_the_figure_shows(session):
    """Tries and Reset share the figure's one queue of calls with its controls: two quick
    clicks end on the second; a move after a try starts from the try's state and unmarks it."""
    page, figure = session.page, registry()[15]
    page.click(f"#{figure.anchor} [data-role=try] >> nth=1")
    page.click(f"#{figure.anchor} [data-role=try] >> nth=0")
    label, fragment = figure.try_links()[0]
    painted(page, figure, fragment)
    page.wait_for_timeout(100)  # nothing older arrives late and paints over it
    assert read_state(page, figure) == figure.validate_state(figure.tries[0][1]), label
    set_control(page, figure, "v", 3)
    expected = figure.validate_state({**figure.tries[0][1], "v": 3})
    painted(page, figure, encode_state(figure, expected))
    assert_shows(page, figure, expected)
    assert buttons(page, figure) == ["false", [None] * len(figure.tries)]  # no try is this state
    assert page.evaluate("location.hash") == "#" + encode_state(figure, expected)
    page.click(f"#{figure.anchor} [data-role=reset]")
    page.click(f"#{figure.anchor} [data-role=try] >> nth=1")
    painted(page, figure, figure.try_links()[1][1])
    page.wait_for_timeout(100)
    assert read_state(page, figure) == figure.validate_state(figure.tries[1][1])
    page.click(f"#{figure.anchor} [data-role=reset]")
    painted(page, figure, figure.anchor)


def test_the_contents_mark_the_section_being_read(session):
    page = session.page
    current = "() => [...document.querySelectorAll('nav.toc a[aria-current]')].map(a => a.getAttribute('href'))"
    for anchor in ("vocabulary", "pipeline-parallelism", "planner", "failure-modes", "collectives"):
        page.evaluate(f"document.getElementById('{anchor}').scrollIntoView()")
        page.mouse.wheel(0, 200)  # a little into the section, as a reader scrolls
        page.wait_for_function(f"() => ({current})().join() === '#{anchor}'", timeout=5_000)
    # only the section's own entry: never a figure's, never two
    assert page.evaluate(current) == ["#collectives"]
    assert page.get_attribute("nav.toc a[aria-current]", "aria-current") == "location"
    # the entry stays visible in the sidebar (it scrolls with the reader)
    assert page.evaluate("""() => { const a = document.querySelector('nav.toc a[aria-current]'), nav = a.closest('nav');
      const r = a.getBoundingClientRect(), n = nav.getBoundingClientRect(); return r.top >= n.top && r.bottom <= n.bottom; }""")
    page.click("nav.toc a[href='#fig-17']")
    page.wait_for_function("() => { const r = document.getElementById('fig-17').getBoundingClientRect(); return r.top >= -2 && r.top < 40; }")
    assert page.evaluate("location.hash") == "#fig-17"


def test_without_javascript_the_page_offers_no_buttons_that_would_do_nothing(browser, base_url):
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(base_url + "/")
        assert not page.is_visible("#fig-15 [data-role=actions]")
        assert not page.is_visible("#fig-15 [data-role=reset]")
        page.click("#fig-15 details[data-role=more] summary")  # the note opens without script
        assert page.is_visible("#fig-15 details[data-role=more] p")
        page.click("nav.toc summary")  # the contents, a closed menu until opened, list the figures too
        assert page.is_visible("nav.toc a[href='#fig-15']")
    finally:
        context.close()


def test_no_errors_after_all_that(session):
    assert session.console_errors == [] and session.page_errors == []
    assert session.csp_violations() == []
