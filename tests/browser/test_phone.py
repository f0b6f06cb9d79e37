"""The article on a phone (issue 34): no figure scrolls sideways at 390 or 360 px, each
figure's first control and the element that carries its point (``svg.KEY``) are on
screen together, the controls bar stays in view while its figure is, and turning the
phone (crossing the phone width) draws every figure for its new width. One page load."""
import pytest

from figures import registry, svg
from figures.contract import NARROW_DRAWING_PX

from tests.browser.harness import PageSession
from tests.browser.test_reader import show_every_figure

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
NUMBERS = sorted(registry())

# What sticks out sideways, per figure: its drawing, its HTML block and the figure itself
# (a table may scroll inside its own frame: its first column stays, playbook.css). The
# first read of an off-screen chapter's sizes (content-visibility: auto) can still give its
# layout from before the phone turned (846 px where it is 353): each is read twice.
OVERFLOW = """() => [...document.querySelectorAll('figure[data-figure]')].map(f => {
  const over = (node) => { if (!node) return 0; void (node.scrollWidth + node.clientWidth); return node.scrollWidth - node.clientWidth; };
  return [f.id, over(f.querySelector('[data-role=view]')), over(f.querySelector('[data-role=html]')), over(f)];
})"""

# The union of the visible boxes of a figure's key elements (its chart, for a Plotly figure).
KEY_BOX = """(anchor) => {
  const figure = document.getElementById(anchor);
  const nodes = [...figure.querySelectorAll('.%s')].filter(n => n.getClientRects().length);
  if (!nodes.length) { const chart = figure.querySelector('[data-role=plot]'); if (chart) nodes.push(chart); }
  if (!nodes.length) return null;
  const boxes = nodes.map(n => n.getBoundingClientRect()).filter(b => b.width || b.height);
  return {top: Math.min(...boxes.map(b => b.top)), bottom: Math.max(...boxes.map(b => b.bottom)),
          left: Math.min(...boxes.map(b => b.left)), right: Math.max(...boxes.map(b => b.right))};
}""" % svg.KEY

# Notes each drawing a figure that lays itself out narrow gets while the page is a phone's
# and that is wider than a phone's drawing (an answer rendered for the wide column).
WATCH_WIDE_PAINTS = """() => {
  window.__widePaints = [];
  const phone = matchMedia('(max-width: 40rem)');
  const note = (svg) => { const figure = svg.closest('figure[data-lays-out-narrow]');
    if (figure && phone.matches && parseFloat(svg.style.minWidth) > %d) window.__widePaints.push(figure.id); };
  new MutationObserver((records) => records.forEach((r) => {
    if (r.type === 'attributes' && r.target.tagName === 'svg') note(r.target);
    r.addedNodes.forEach((n) => { if (n.tagName === 'svg') note(n); });
  })).observe(document.querySelector('main'), {subtree: true, childList: true, attributes: true, attributeFilter: ['style']});
}"""

BAR_AND_CONTROL = """(anchor) => {
  const figure = document.getElementById(anchor);
  const bar = figure.querySelector('[data-role=controls]').getBoundingClientRect();
  const control = figure.querySelector('[data-control]').getBoundingClientRect();
  return {bar: {top: bar.top, bottom: bar.bottom}, control: {top: control.top, bottom: control.bottom,
          left: control.left, right: control.right}};
}"""


def open_phone(browser, base_url):
    """A touch phone at 390 px, every figure shown; closed when the generator ends."""
    session = PageSession(browser, base_url, viewport=PHONE, is_mobile=True, has_touch=True)
    page = session.open("/")
    show_every_figure(page)
    yield session
    session.close()


@pytest.fixture(scope="module")
def phone(browser, base_url):
    yield from open_phone(browser, base_url)


def _settled(page):
    page.wait_for_function("() => !document.querySelector('figure[data-busy]')", timeout=30_000)


def _overflowing(page):
    return [(anchor, view, block, figure) for anchor, view, block, figure in page.evaluate(OVERFLOW)
            if max(view, block, figure) > 1]


def _min_width(page, anchor):
    return page.evaluate("""(anchor) => { const svg = [...document.querySelectorAll('#' + anchor + ' [data-role=view] > svg')]
      .find(s => getComputedStyle(s).display !== 'none'); return svg ? parseFloat(svg.style.minWidth) : 0; }""", anchor)


def test_no_figure_scrolls_sideways_at_390_or_360_px(phone):
    page = phone.page
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    assert not _overflowing(page), _overflowing(page)
    page.set_viewport_size({"width": 360, "height": 780})
    try:
        _settled(page)
        page.wait_for_timeout(300)  # plotly resizes its charts 100 ms after the window
        assert page.evaluate("document.documentElement.scrollWidth") <= 360
        assert not _overflowing(page), _overflowing(page)
    finally:
        page.set_viewport_size(PHONE)


def test_a_phone_turned_wide_and_back_draws_each_figure_for_its_width(phone):
    page = phone.page
    wide = [n for n, f in registry().items() if f.lays_out_narrow
            and float(f.render(f.default_state()).svg.split("min-width:")[1].split("px")[0]) > NARROW_DRAWING_PX]
    assert wide, "no figure lays itself out for a phone"
    page.set_viewport_size({"width": 1280, "height": 900})
    try:
        _settled(page)
        page.wait_for_function("(a) => parseFloat(document.querySelector('#' + a + ' [data-role=view] > svg').style.minWidth) > %d"
                               % NARROW_DRAWING_PX, arg=f"fig-{wide[0]:02d}", timeout=30_000)
        assert all(_min_width(page, f"fig-{n:02d}") > NARROW_DRAWING_PX for n in wide)
        # from here on, every drawing painted on the phone is noted: one rendered for the
        # wide column before the turn (still in flight) must be asked again, not painted
        page.evaluate(WATCH_WIDE_PAINTS % NARROW_DRAWING_PX)
    finally:
        page.set_viewport_size(PHONE)
    _settled(page)
    page.wait_for_function("(anchors) => anchors.every(a => parseFloat(document.querySelector('#' + a + ' [data-role=view] > svg').style.minWidth) <= %d)"
                           % NARROW_DRAWING_PX, arg=[f"fig-{n:02d}" for n in wide], timeout=30_000)
    assert all(_min_width(page, f"fig-{n:02d}") <= NARROW_DRAWING_PX for n in wide)
    page.wait_for_timeout(300)
    assert not _overflowing(page)
    assert page.evaluate("window.__widePaints") == []
    # the "More controls" folds the wide screen opened are folded again
    assert page.evaluate("[...document.querySelectorAll('[data-role=more-controls]')].every(d => !d.open)")


@pytest.mark.parametrize("number", NUMBERS, ids=[f"fig-{n:02d}" for n in NUMBERS])
def test_the_first_control_and_the_drawings_point_are_on_screen_together(phone, number):
    page, anchor = phone.page, f"fig-{number:02d}"
    height = PHONE["height"]
    page.evaluate("(a) => document.getElementById(a).scrollIntoView()", anchor)
    key = page.evaluate(KEY_BOX, anchor)
    assert key, f"{anchor} marks no element with class {svg.KEY}"
    page.evaluate(f"window.scrollBy(0, {key['bottom'] - (height - 12)})")  # the key element at the screen's foot
    page.wait_for_timeout(50)
    key, shown = page.evaluate(KEY_BOX, anchor), page.evaluate(BAR_AND_CONTROL, anchor)
    control, bar = shown["control"], shown["bar"]
    assert 0 <= control["top"] and control["bottom"] <= height, f"{anchor}: its first control is off screen ({control})"
    assert control["left"] >= 0 and control["right"] <= PHONE["width"] + 1
    assert key["bottom"] <= height and key["top"] >= bar["bottom"] - 1, (
        f"{anchor}: its key element ({key['top']:.0f}-{key['bottom']:.0f} px) does not fit on screen below "
        f"the controls bar (which ends at {bar['bottom']:.0f} px)")
    assert key["left"] >= -1 and key["right"] <= PHONE["width"] + 1, f"{anchor}: its key element is cut off sideways"


def test_the_controls_bar_stays_in_view_while_its_figure_is_and_folds_the_rest(phone):
    page = phone.page
    lab = registry()[21]
    page.evaluate("document.getElementById('fig-21').scrollIntoView()")
    top = page.evaluate("document.querySelector('#fig-21 [data-role=view]').getBoundingClientRect().top")
    page.evaluate(f"window.scrollBy(0, {top + 200})")
    bar = page.evaluate("document.querySelector('#fig-21 [data-role=controls]').getBoundingClientRect().top")
    assert abs(bar) <= 1  # stuck at the top of the screen
    shown = page.evaluate("""() => [...document.querySelectorAll('#fig-21 [data-control]')]
      .filter(n => n.checkVisibility()).map(n => n.dataset.control)""")
    assert shown == list(lab.primary)  # the rest wait behind one tap
    page.click("#fig-21 [data-role=more-controls] > summary")
    assert page.is_visible("#fig-21 [data-control=gpus]")
    page.click("#fig-21 [data-role=more-controls] > summary")
    # the result, its reasoning, follow the presets: no form to scroll past first
    result = page.evaluate("""() => { const f = document.getElementById('fig-21');
      return f.querySelector('[data-role=html]').getBoundingClientRect().top - f.getBoundingClientRect().top; }""")
    assert result < 1400, result


def test_code_keeps_its_lines_and_the_contents_show_a_disclosure_mark(phone):
    page = phone.page
    wraps = page.evaluate("""() => [...document.querySelectorAll('.code-block pre')].map(p => getComputedStyle(p).whiteSpace)""")
    assert wraps and set(wraps) == {"pre"}
    mark = page.evaluate("getComputedStyle(document.querySelector('.toc-title'), '::before').content")
    assert mark not in ("none", "normal", '""')


def test_the_labs_estimate_sits_under_its_drawing_not_under_its_reasoning(phone):
    """Figure 21's readouts (the plan, step time and MFU with their bands, memory) came after
    the reasoning, the fastest plans and both launch blocks: ~3,000 px under the drawing on
    a phone. They now follow the drawing; its long HTML comes after them."""
    page = phone.page
    page.evaluate("() => document.getElementById('fig-21').scrollIntoView()")
    _settled(page)
    boxes = page.evaluate("""() => { const f = document.getElementById('fig-21');
      const box = (s) => { const r = f.querySelector(s).getBoundingClientRect(); return {top: r.top, bottom: r.bottom}; };
      const svg = [...f.querySelectorAll('[data-role=view] > svg')].find(s => getComputedStyle(s).display !== 'none');
      const r = svg.getBoundingClientRect();
      return {drawing: {top: r.top, bottom: r.bottom}, readouts: box('[data-role=readout]'), html: box('[data-role=html]')}; }""")
    assert 0 <= boxes["readouts"]["top"] - boxes["drawing"]["bottom"] <= 40, boxes
    assert boxes["readouts"]["bottom"] <= boxes["html"]["top"], boxes
    assert boxes["readouts"]["bottom"] - boxes["drawing"]["top"] < PHONE["height"], boxes  # drawing and estimate: one screen
