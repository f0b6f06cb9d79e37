"""The article under a finger (issue 43, points 4-6): a touch phone at 390 x 844, the same
page at 360 x 740 and turned on its side (844 x 390). Every control and chip is a 44 px
target, drawings' text is 12 px or more at 360 px and dimmed text keeps 3:1, a slider keeps
its width whatever its value, tables hold their name column with their caption outside the
scrolling frame, anything that scrolls sideways fades while there is more, Copy buttons sit
above their code, a short screen gets the phone's bar, drawings fit under it, and the
contents open from anywhere. One page load, with a touch screen and a coarse pointer."""
import pytest

from figures import registry
from figures.contract import Slider

from tests.browser.test_phone import BAR_AND_CONTROL, KEY_BOX, open_phone
from tests.browser.test_reader import run_axe

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
SMALL_PHONE = {"width": 360, "height": 740}
ON_ITS_SIDE = {"width": 844, "height": 390}
TARGET_PX = 44  # WCAG 2.5.5
NUMBERS = sorted(registry())

# Every control and chip a finger may need, with its box (a checkbox's target is its label).
SMALL_TARGETS = """(least) => {
  const selector = 'main [data-control], main .try, main button, main summary, main select, main input, '
    + 'nav.toc summary, .toc-menu[open] a, [data-role=toc-button]';
  const small = [];
  for (const node of document.querySelectorAll(selector)) {
    if (!node.checkVisibility()) continue;
    const target = node.type === 'checkbox' && node.labels.length ? node.labels[0] : node;
    const box = target.getBoundingClientRect();
    if (box.width < least - 0.5 || box.height < least - 0.5) {
      const figure = node.closest('figure');
      small.push(`${figure ? figure.id : ''} ${node.tagName.toLowerCase()}.${node.className} ${box.width.toFixed(0)}x${box.height.toFixed(0)}`);
    }
  }
  return small;
}"""

# The drawings' text as drawn: CSS size times the drawing's scale on screen, per figure the smallest.
SMALLEST_DRAWN_TEXT = """() => { const smallest = {};
  for (const node of document.querySelectorAll('figure [data-role=view] > svg text')) {
    if (!node.getClientRects().length || !node.textContent.trim()) continue;
    const size = parseFloat(getComputedStyle(node).fontSize) * node.getScreenCTM().a;
    const id = node.closest('figure').id;
    smallest[id] = Math.min(smallest[id] || Infinity, size);
  }
  return smallest; }"""

# Text in a drawing drawn faded (opacity, fill-opacity, a translucent fill), blended over its
# figure's background: its contrast (WCAG) there. Names on coloured bars are not over the
# figure's background (their ink is chosen for their bar: figures/palette.py).
FADED_TEXT_CONTRAST = """() => {
  const rgb = (text) => text.match(/[\\d.]+/g).map(Number);
  const luminance = (c) => { const [r, g, b] = c.map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
  const found = [];
  for (const figure of document.querySelectorAll('figure[data-figure]')) {
    const ground = rgb(getComputedStyle(figure).backgroundColor);
    for (const node of figure.querySelectorAll('[data-role=view] > svg text:not(.svg-bar-label)')) {
      if (!node.getClientRects().length || !node.textContent.trim()) continue;
      const style = getComputedStyle(node), fill = rgb(style.fill);
      let alpha = parseFloat(style.fillOpacity) * parseFloat(style.opacity) * (fill.length > 3 ? fill[3] : 1);
      for (let n = node.parentElement; n && n.tagName !== 'svg'; n = n.parentElement) alpha *= parseFloat(getComputedStyle(n).opacity);
      if (alpha >= 1 && !node.closest('.svg-dim, .svg-muted, .svg-label-soft')) continue;  // dimmed: faded, muted or soft
      const seen = [0, 1, 2].map(i => fill[i] * alpha + ground[i] * (1 - alpha));
      const [light, dark] = [luminance(seen), luminance(ground)].sort((a, b) => b - a);
      found.push([figure.id, node.textContent.trim().slice(0, 40), (light + 0.05) / (dark + 0.05)]);
    }
  }
  return found; }"""

# Each figure: its bar's box and position, its drawing's box, the drawing's min-width (the
# width under which its labels would shrink), and how far its view scrolls sideways.
BAR_AND_DRAWING = """() => [...document.querySelectorAll('figure[data-figure]')].map(f => {
  const form = f.querySelector('[data-role=controls]'), view = f.querySelector('[data-role=view]');
  const drawing = [...view.querySelectorAll(':scope > svg, [data-role=plot]')].find(n => n.getClientRects().length);
  const bar = form.getBoundingClientRect(), box = drawing.getBoundingClientRect();
  return {id: f.id, sticky: getComputedStyle(form).position === 'sticky', bar: bar.height, width: box.width,
          height: box.height, minWidth: parseFloat(drawing.style.minWidth) || 0, sideways: view.scrollWidth - view.clientWidth,
          folded: [...f.querySelectorAll('[data-role=more-controls]')].every(d => !d.open),
          short: f.hasAttribute('data-lays-out-short')};
})"""


@pytest.fixture(scope="module")
def finger(browser, base_url):
    """A touch phone at 390 px with every figure shown (test_phone.py's, a load of its own)."""
    yield from open_phone(browser, base_url)


def _resize(page, size):
    page.set_viewport_size(size)
    page.wait_for_function("() => !document.querySelector('figure[data-busy]')", timeout=30_000)
    page.wait_for_timeout(300)  # plotly resizes its charts 100 ms after the window


def test_the_pointer_is_coarse(finger):
    assert finger.page.evaluate("matchMedia('(pointer: coarse)').matches")


@pytest.mark.parametrize("size", [PHONE, SMALL_PHONE, ON_ITS_SIDE], ids=["390", "360", "844x390"])
def test_every_control_and_chip_is_a_44_px_target(finger, size):
    page = finger.page
    _resize(page, size)
    try:
        page.evaluate("document.querySelector('[data-role=toc]').open = true")  # the contents' entries too
        assert page.evaluate(SMALL_TARGETS, TARGET_PX) == []
    finally:
        page.evaluate("document.querySelector('[data-role=toc]').open = false")
        _resize(page, PHONE)


def test_drawn_text_is_12_px_at_360_px_and_faded_text_keeps_3_to_1(finger):
    page = finger.page
    _resize(page, SMALL_PHONE)
    try:
        small = {figure: size for figure, size in page.evaluate(SMALLEST_DRAWN_TEXT).items() if size < 12 - 1e-6}
        assert small == {}, f"text under 12 px at 360 px: {small}"
    finally:
        _resize(page, PHONE)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        faded = page.evaluate(FADED_TEXT_CONTRAST)
        assert faded, "no dimmed text found: the check measures nothing"
        low = [(figure, text, round(ratio, 2)) for figure, text, ratio in faded if ratio < 3]
        assert low == [], f"{scheme}: dimmed text under 3:1: {low[:8]}"
    page.emulate_media(color_scheme="light")


def test_a_slider_keeps_its_width_whatever_its_value(finger):
    """Figures 07, 20 and 23's sliders grew and shrank as their value text did: each value
    label is now as wide as the slider's widest value."""
    page = finger.page
    sliders = [(figure.anchor, control.key, sorted({control.display(v) for v in control.values}, key=len))
               for figure in registry().values() for control in figure.controls if isinstance(control, Slider)]
    changing = page.evaluate("""(sliders) => sliders.map(([anchor, key, texts]) => {
      const input = document.querySelector('#' + anchor + ' [data-control="' + key + '"]');
      const output = input.parentElement.querySelector('output'), before = output.textContent;
      const widths = [texts[0], texts[texts.length - 1]].map(text => { output.textContent = text; return input.getBoundingClientRect().width; });
      output.textContent = before;
      return [anchor, key, widths];
    }).filter(([anchor, key, widths]) => Math.abs(widths[0] - widths[1]) > 0.5)""", sliders)
    assert changing == []


def test_tables_hold_their_name_column_with_their_caption_outside_the_frame(finger):
    page = finger.page
    page.evaluate("document.querySelector('#fig-21 [data-role=html] .table-wrap').scrollIntoView()")
    held = page.evaluate("""() => { const wrap = document.querySelector('#fig-21 [data-role=html] .table-wrap');
      const header = [...wrap.querySelectorAll('th')].find(th => th.textContent === 'plan');
      wrap.scrollLeft = wrap.scrollWidth;
      const a = wrap.getBoundingClientRect(), b = header.getBoundingClientRect();
      const cell = wrap.querySelector('tbody tr td.name').getBoundingClientRect();
      const scrolled = wrap.scrollLeft;
      wrap.scrollLeft = 0;
      return {scrolled: scrolled, shown: b.left >= a.left - 1 && b.right <= a.right + 1 && cell.left >= a.left - 1}; }""")
    assert held["scrolled"] > 0 and held["shown"], "the lab's plan names scroll out of view"
    # every table's caption is shown outside its scrolling frame, whole; none inside it
    captions = page.evaluate("""() => [...document.querySelectorAll('.table-wrap')].filter(w => w.checkVisibility()).map(wrap => {
      const inside = wrap.querySelector('caption'), shown = wrap.previousElementSibling && wrap.previousElementSibling.matches('.table-caption')
        ? wrap.previousElementSibling : wrap.nextElementSibling;
      const frame = wrap.getBoundingClientRect();
      return [wrap.getAttribute('aria-label').slice(0, 30), inside ? inside.getBoundingClientRect().width : 0,
              shown && shown.matches('.table-caption') ? shown.getBoundingClientRect().right <= frame.right + 1 : !inside,
              shown && shown.matches('.table-caption') ? shown.textContent === inside.textContent : true];
    })""")
    assert len(captions) >= 4
    assert [c for c in captions if c[1] > 1 or not c[2] or not c[3]] == [], captions


def test_what_scrolls_sideways_fades_while_there_is_more(finger):
    page = finger.page
    scrollers = page.evaluate("""() => [...document.querySelectorAll('.table-wrap, .code-block pre, math[display=block], figure [data-role=view]')]
      .filter(n => n.checkVisibility() && n.scrollWidth > n.clientWidth + 1).map((n, i) => { n.scrollLeft = 0; n.dataset.probe = i; return i; })""")
    page.wait_for_function("() => [...document.querySelectorAll('[data-probe]')].every(n => n.dataset.more === 'right')")
    assert len(scrollers) >= 8  # tables, code, equations
    state = """() => [...document.querySelectorAll('[data-probe]')].map(n => [n.dataset.probe, n.dataset.more || '',
      getComputedStyle(n).maskImage !== 'none'])"""
    at_start = page.evaluate(state)
    assert [s for s in at_start if s[1:] != ["right", True]] == []
    page.evaluate("() => document.querySelectorAll('[data-probe]').forEach(n => { n.scrollLeft = n.scrollWidth; })")
    page.wait_for_function("() => [...document.querySelectorAll('[data-probe]')].every(n => n.dataset.more !== 'right')")
    at_end = page.evaluate(state)
    # at the end nothing fades on the right; a table's left is its held column, unfaded
    assert all(more == "left" for _, more, _ in at_end), at_end
    assert page.evaluate("() => [...document.querySelectorAll('.table-wrap[data-probe]')].every(n => getComputedStyle(n).maskImage === 'none')")
    page.evaluate("() => document.querySelectorAll('[data-probe]').forEach(n => { n.scrollLeft = 0; delete n.dataset.probe; })")


def test_copy_buttons_sit_above_their_code(finger):
    overlaps = finger.page.evaluate("""() => [...document.querySelectorAll('.code-block')].filter(b => b.querySelector('button')).map(block => {
      const button = block.querySelector('button').getBoundingClientRect(), code = block.querySelector('pre').getBoundingClientRect();
      return [block.querySelector('button').textContent, button.bottom - code.top];
    })""")
    assert len(overlaps) >= 3 and all(over <= 0 for _, over in overlaps), overlaps


def test_drawings_fit_under_the_bar_on_a_phone(finger):
    """No drawing is taller than the screen under its bar at 390 x 844 (Figures 11, 14 and 20
    were: their phone layouts now fit, tests/test_figure_numbers_11_14.py and
    test_figures_18_20.py sweep their states)."""
    shown = {f["id"]: f for f in finger.page.evaluate(BAR_AND_DRAWING)}
    taller = {anchor: (round(f["bar"]), round(f["height"])) for anchor, f in shown.items()
              if f["bar"] + f["height"] > PHONE["height"] + 0.5}
    assert len(shown) == 25 and taller == {}


def test_a_phone_on_its_side_gets_the_phones_bar_and_every_drawing_fits_under_it(finger):
    """At 844 x 390 the page was laid out as for a desktop: folds open, no bar, up to 546 px of
    controls on a 390 px screen. Now each figure has the phone's bar, its other controls
    folded, and a drawing no taller than the screen under the bar (18 figures by a short
    layout of their own: Figure 03's wide drawing ran 305 px past the screen, Figure 10's 283);
    no drawing scrolls sideways."""
    page = finger.page
    _resize(page, ON_ITS_SIDE)
    try:
        figures = page.evaluate(BAR_AND_DRAWING)
        assert all(f["sticky"] and f["folded"] for f in figures), [f["id"] for f in figures if not (f["sticky"] and f["folded"])]
        assert max(f["bar"] for f in figures) <= 0.45 * ON_ITS_SIDE["height"], [(f["id"], f["bar"]) for f in figures]
        too_tall = [(f["id"], round(f["bar"]), round(f["height"])) for f in figures
                    if f["bar"] + f["height"] > ON_ITS_SIDE["height"] + 0.5]
        assert len(figures) == 25 and too_tall == []
        assert [f["id"] for f in figures if f["short"]] == [
            "fig-02", "fig-03", "fig-04", "fig-06", "fig-07", "fig-10", "fig-11", "fig-12", "fig-13", "fig-14", "fig-15",
            "fig-16", "fig-17", "fig-19", "fig-20", "fig-22", "fig-23", "fig-25"]
        assert [(f["id"], f["sideways"]) for f in figures if f["sideways"] > 1] == []
        # and the bar stays on screen while its figure scrolls under it (Figure 17, whose
        # controls took the whole screen)
        page.evaluate("document.getElementById('fig-17').scrollIntoView()")
        page.evaluate("window.scrollBy(0, 300)")
        shown = page.evaluate(BAR_AND_CONTROL, "fig-17")
        assert abs(shown["bar"]["top"]) <= 1 and shown["control"]["bottom"] <= ON_ITS_SIDE["height"]
        assert page.evaluate(KEY_BOX, "fig-17")["top"] < ON_ITS_SIDE["height"]
    finally:
        _resize(page, PHONE)


def test_the_contents_open_from_anywhere_on_a_phone(finger):
    page = finger.page
    page.evaluate("window.scrollTo(0, 0)")
    page.wait_for_function("() => document.querySelector('[data-role=toc-button]').hidden")  # the menu is right there
    page.evaluate("document.getElementById('fig-15').scrollIntoView()")
    page.wait_for_function("() => !document.querySelector('[data-role=toc-button]').hidden")
    before = page.evaluate("document.getElementById('fig-15').getBoundingClientRect().top")
    page.click("[data-role=toc-button]")
    assert page.get_attribute("[data-role=toc-button]", "aria-expanded") == "true"
    panel = page.evaluate("() => { const r = document.querySelector('[data-role=toc]').getBoundingClientRect(); return [r.top, r.bottom]; }")
    assert 0 <= panel[0] < panel[1] <= PHONE["height"], panel  # over the page, on screen
    marked = page.evaluate("""() => { const a = document.querySelector('nav.toc a[aria-current]').getBoundingClientRect(),
      menu = document.querySelector('[data-role=toc]').getBoundingClientRect(); return a.top >= menu.top && a.bottom <= menu.bottom; }""")
    assert marked  # the section being read, in view in the menu
    entry = page.locator("nav.toc a[href='#zero']")
    assert page.evaluate("document.getElementById('fig-15').getBoundingClientRect().top") == before  # nothing moved
    entry.click()
    page.wait_for_function("() => Math.abs(document.getElementById('zero').getBoundingClientRect().top) < 40")
    assert page.evaluate("document.querySelector('[data-role=toc]').open") is False
    assert page.get_attribute("[data-role=toc-button]", "aria-expanded") == "false"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_nothing_on_a_phone_on_its_side(finger, scheme):
    page = finger.page
    _resize(page, ON_ITS_SIDE)
    page.emulate_media(color_scheme=scheme)
    try:
        assert run_axe(page) == []
    finally:
        page.emulate_media(color_scheme="light")
        _resize(page, PHONE)


def test_no_errors_after_all_that(finger):
    assert finger.console_errors == [] and finger.page_errors == []
