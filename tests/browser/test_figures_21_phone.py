"""Figure 21 on a 390×844 phone (issue 43.3): a reader chooses a model, types a GPU count,
pins tp and reads the cost, within one screen of page scrolling and with no scrolling inside
the controls bar; the open bar takes at most about 40% of the screen and ends in Done. One
page load.

On main the GPU count was the 13th of 32 fields in "More controls", the pins ~860 px down
inside a bar of 591 px: ~1.7 screens of page scrolling and ~2 inside the bar."""
import pytest

from figures import registry
from tests.browser.drive import expected_readouts, settle
from tests.browser.harness import PageSession

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
FIGURE = registry()[21]
ANCHOR = FIGURE.anchor

# The controls bar's box (as the screen shows it) and its inner scroll; an element's box.
BOXES = """([anchor, selector]) => { const figure = document.getElementById(anchor);
  const bar = figure.querySelector('[data-role=controls]'), b = bar.getBoundingClientRect();
  const r = figure.querySelector(selector).getBoundingClientRect();
  return {bar: {top: b.top, bottom: b.bottom, scrollTop: bar.scrollTop, stuck: b.top <= 1},
          el: {top: r.top, bottom: r.bottom, height: r.height}, screen: innerHeight}; }"""


@pytest.fixture(scope="module")
def phone(browser, base_url):
    session = PageSession(browser, base_url, viewport=PHONE, is_mobile=True, has_touch=True)
    session.open("/")
    yield session
    session.close()


class Reader:
    """Brings what it needs next into view as a reader would: the page scrolled by the
    least that shows it (under the bar, for what is not in the bar), the bar never scrolled;
    and counts every pixel of page scrolling."""

    def __init__(self, page):
        self.page, self.scrolled = page, 0

    def boxes(self, selector):
        return self.page.evaluate(BOXES, [ANCHOR, selector])

    def reach(self, selector, in_bar):
        for _ in range(4):
            box = self.boxes(selector)
            bar, el, screen = box["bar"], box["el"], box["screen"]
            assert bar["scrollTop"] == 0, f"the bar was scrolled inside to reach {selector}"
            if in_bar:  # inside the bar's visible box, the bar unscrolled
                assert el["top"] >= bar["top"] - 1 and el["bottom"] <= bar["bottom"] + 1, (
                    f"{selector} is not in the bar's visible part without scrolling inside it ({box})")
                top_limit = 0
            else:
                top_limit = bar["bottom"] if bar["stuck"] else 0
            if el["bottom"] > screen:
                delta = el["bottom"] - screen + 4
            elif el["top"] < top_limit:
                delta = el["top"] - top_limit - 4
            else:
                return box
            self.page.evaluate(f"window.scrollBy(0, {delta})")
            self.page.wait_for_timeout(50)
            self.scrolled += abs(delta)
        raise AssertionError(f"{selector} could not be brought into view: {self.boxes(selector)}")


def test_choose_a_model_type_gpus_pin_tp_and_read_the_cost_in_one_screen(phone):
    page = phone.page
    page.evaluate(f"document.getElementById('{ANCHOR}').scrollIntoView()")  # the reader arrives at the figure
    page.wait_for_timeout(100)
    reader = Reader(page)
    field = lambda key: f"[data-control={key}]"

    reader.reach(field("model"), in_bar=True)
    page.select_option(f"#{ANCHOR} {field('model')}", "llama3-70b")
    settle(page, ANCHOR)
    reader.reach(field("gpus"), in_bar=True)  # the GPU count: in view, not behind "More controls"
    page.fill(f"#{ANCHOR} {field('gpus')}", "512")
    settle(page, ANCHOR)
    reader.reach("[data-role=more-controls].control-fold > summary", in_bar=True)
    page.tap(f"#{ANCHOR} [data-role=more-controls].control-fold > summary")
    reader.reach(field("tp"), in_bar=True)
    page.select_option(f"#{ANCHOR} {field('tp')}", "8")
    settle(page, ANCHOR)

    # the cost, read with the pins still open under the bar
    box = reader.reach("[data-key=step_time_s]", in_bar=False)
    state = FIGURE.validate_state({"model": "llama3-70b", "gpus": 512, "tp": 8})
    want = expected_readouts(FIGURE, state)
    assert page.text_content(f"#{ANCHOR} [data-key=step_time_s] dd") == want["step_time_s"]["text"]
    assert page.text_content(f"#{ANCHOR} [data-key=plan] dd") == want["plan"]["text"]
    assert reader.scrolled <= PHONE["height"], f"{reader.scrolled:.0f} px of page scrolling"

    # the open bar: at most ~40% of the screen, ending in Done, which folds it again
    assert box["bar"]["bottom"] - box["bar"]["top"] <= 0.41 * PHONE["height"], box
    done = reader.reach("[data-role=controls-done]", in_bar=True)
    assert done["el"]["height"] >= 44
    page.tap(f"#{ANCHOR} [data-role=controls-done]")
    page.wait_for_function("(a) => ![...document.querySelectorAll('#' + a + ' [data-role=more-controls]')].some(d => d.open)",
                           arg=ANCHOR)
    assert not page.is_visible(f"#{ANCHOR} [data-role=controls-done]")
    assert page.evaluate("(a) => [...document.querySelectorAll('#' + a + ' [data-control]')].filter(n => n.checkVisibility())"
                         ".map(n => n.dataset.control)", ANCHOR) == ["model", "gpus"]
    assert phone.console_errors == [] and phone.page_errors == []
