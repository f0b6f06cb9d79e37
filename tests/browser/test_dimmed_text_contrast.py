"""Issue 43: text a figure dims but that still says something (Figure 02's panels not chosen,
Figure 19's branches not taken) reads at 3:1 or better, measured on the built page with its
real CSS in light and dark: each <text>'s computed fill, times the opacity of it and every
ancestor, blended over the page, against the page. One page load, the worker refused (the
baked drawings are the default states')."""
import pytest

from tests.browser.harness import PageSession

pytestmark = pytest.mark.browser

FIGURES = ("fig-02", "fig-19")
LEAST = 3.0  # WCAG 1.4.11, the floor for informative graphics and large text

CONTRASTS = """(anchors) => {
  const rgb = (text) => (text.match(/[\\d.]+/g) || []).slice(0, 3).map(Number);
  const luminance = ([r, g, b]) => {
    const lin = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4); };
    return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b);
  };
  const opaque = (text) => { const v = text.match(/[\\d.]+/g) || []; return v.length === 3 || (v.length === 4 && +v[3] > 0); };
  const behind = [document.body, document.documentElement].map((n) => getComputedStyle(n).backgroundColor).find(opaque);
  const page = rgb(behind);
  const found = [];
  for (const anchor of anchors) {
    for (const svg of document.querySelectorAll('#' + anchor + ' [data-role=view] svg')) {
      if (!svg.getBoundingClientRect().width) continue;  // the drawing for the other width
      for (const node of svg.querySelectorAll('text')) {
        let alpha = 1;
        for (let n = node; n && n !== svg.parentNode; n = n.parentNode) {
          const style = getComputedStyle(n);
          alpha *= parseFloat(style.opacity) * (n === node ? parseFloat(style.fillOpacity) : 1);
        }
        const fill = rgb(getComputedStyle(node).fill);
        const seen = fill.map((c, i) => alpha * c + (1 - alpha) * page[i]);
        const [hi, lo] = [luminance(seen), luminance(page)].sort((a, b) => b - a);
        found.push([anchor, node.textContent, (hi + 0.05) / (lo + 0.05)]);
      }
    }
  }
  return found;
}"""


@pytest.fixture(scope="module")
def page(browser, base_url):
    session = PageSession(browser, base_url, routes={"**/assets/worker.*.js": lambda route: route.abort()})
    session.page.goto(base_url + "/")
    session.page.wait_for_function("() => document.documentElement.dataset.python === 'failed'", timeout=60_000)
    yield session.page
    session.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("width", [1280, 390])
def test_dimmed_text_in_figures_02_and_19_reads_at_3_to_1(page, scheme, width):
    page.emulate_media(color_scheme=scheme)
    page.set_viewport_size({"width": width, "height": 900})
    measured = page.evaluate(CONTRASTS, list(FIGURES))
    assert {anchor for anchor, _, _ in measured} == set(FIGURES)
    low = [(anchor, text, round(ratio, 2)) for anchor, text, ratio in measured if ratio < LEAST]
    assert not low, f"text under {LEAST}:1 ({scheme}, {width} px): {low[:8]}"
