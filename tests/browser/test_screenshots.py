"""Every figure as a reader sees it, at 1280 px and on a 390 px phone, light and dark,
against stored baselines (issues 33 and 34): a change to a drawing, a colour or the
layout fails here until its baseline is looked at and written again
(``PLAYBOOK_UPDATE_BASELINES=1``). One page load per width; the colour scheme is
switched in place."""
import pytest

from figures import registry

from tests.browser.harness import PageSession, figure_screenshot, screenshot_matches
from tests.browser.test_reader import show_every_figure

pytestmark = pytest.mark.browser

NUMBERS = sorted(registry())
WIDTHS = {"desktop": {"width": 1280, "height": 900}, "phone": {"width": 390, "height": 844}}


@pytest.fixture(scope="module", params=sorted(WIDTHS))
def shown(request, browser, base_url):
    session = PageSession(browser, base_url, viewport=WIDTHS[request.param])
    page = session.open("/")
    show_every_figure(page)
    # the phone's controls bar would follow each slice of a tall figure down (test_phone.py tests
    # it), and the contents button would be shot into every slice (test_touch.py tests it)
    page.add_style_tag(content=".figure .controls { position: static !important; } "
                               ".toc-button { visibility: hidden !important; }")
    yield request.param, page
    session.close()


def _shoot(page, anchor):
    page.evaluate("(a) => document.getElementById(a).scrollIntoView()", anchor)
    page.wait_for_function("(a) => !document.getElementById(a).hasAttribute('data-busy')", arg=anchor, timeout=30_000)
    if page.query_selector(f"#{anchor} [data-role=plot]"):
        page.wait_for_selector(f"#{anchor} .js-plotly-plot .bars", timeout=30_000)
    page.wait_for_timeout(250)
    return figure_screenshot(page, anchor)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_figure_looks_as_it_did(shown, scheme):
    width, page = shown
    page.emulate_media(color_scheme=scheme)
    problems = []
    for number in NUMBERS:
        anchor = f"fig-{number:02d}"
        problem = screenshot_matches(_shoot(page, anchor), f"{width}-{scheme}-{anchor}")
        if problem:
            problems.append(f"{anchor}: {problem}")
    page.emulate_media(color_scheme="light")
    assert not problems, "\n".join(problems)
