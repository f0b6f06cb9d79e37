"""No label overlaps another or leaves its drawing: every figure, at its default state and
at the ends of every control, measured in Chromium on the built page with its real CSS.

One page load. The figures' worker is not started: each state is rendered here in CPython
(``render`` is pure, and the browser runs the same code), its SVG put in place of the
figure's drawing (a Plotly spec drawn by plotly.js into the figure's chart, themed as the
page themes it), and the box of every ``<text>`` measured with ``getBoundingClientRect``,
in drawing units. Two boxes overlap when they share more than 1 unit across and 15% of
the smaller font's size down (a text's box reaches ~0.16 em above its tallest letter);
a box leaves the drawing when it sticks out by more than 1 unit."""
import pytest

from figures import registry, svg
from figures.contract import Number, Play, Select, Slider, Toggle

from tests.browser.harness import PageSession

pytestmark = pytest.mark.browser

# A problem is (figure, state, the two texts, sorted; or a text and LEAVES).
LEAVES = "<leaves the drawing>"

PHONE_WIDTH = 390
MEASURE = """([anchor, drawings, plot]) => {
  const view = document.querySelector('#' + anchor + ' [data-role=view]');
  const measure = () => {
    const chart = view.querySelector('.js-plotly-plot');
    let root, scale = 1, frame, width, height;
    if (chart) {
      root = chart; frame = chart.getBoundingClientRect(); width = frame.width; height = frame.height;
    } else {
      root = view.querySelector(':scope > svg'); frame = root.getBoundingClientRect();
      width = root.viewBox.baseVal.width; height = root.viewBox.baseVal.height; scale = width / frame.width;
    }
    const texts = [];
    for (const node of root.querySelectorAll('text')) {
      const content = node.textContent.trim();
      const style = getComputedStyle(node);
      const box = node.getBoundingClientRect();
      if (!content || style.display === 'none' || style.visibility === 'hidden' || style.opacity === '0' || !box.width) continue;
      texts.push({text: content, size: parseFloat(style.fontSize), bold: parseInt(style.fontWeight) >= 600,
                  width: chart ? box.width : node.getBBox().width,
                  box: [(box.left - frame.left) * scale, (box.top - frame.top) * scale,
                        (box.right - frame.left) * scale, (box.bottom - frame.top) * scale]});
    }
    return {width: width, height: height, texts: texts};
  };
  if (drawings !== null) {  // every drawing in turn, in one call: ~25 calls in all instead of ~500
    return drawings.map((markup) => { view.querySelector(':scope > svg').outerHTML = markup; return measure(); });
  }
  const chart = view.querySelector('.js-plotly-plot');
  const layout = Object.assign({}, plot.layout, {font: Object.assign({family: getComputedStyle(chart).fontFamily, size: 13}, plot.layout.font || {})});
  return Plotly.react(chart, plot.data, layout, {displayModeBar: false, responsive: true})
    .then(() => Plotly.Plots.resize(chart)).then(measure);
}"""


# After the viewport changes: the chart takes its container's new width (plotly's own
# resize waits 100 ms and a later one cancels it) before any state is drawn and measured.
RESIZED = """async (anchor) => {
  const chart = document.querySelector('#' + anchor + ' .js-plotly-plot');
  await Plotly.Plots.resize(chart);
  const wide = () => chart.querySelector('.main-svg').getBoundingClientRect().width;
  if (Math.abs(wide() - chart.getBoundingClientRect().width) > 1) throw new Error('the chart kept its old width');
}"""


# States a reader reported labels overlapping in (issue 43), measured besides the ends.
REPORTED = {
    8: {"gpu=a100_40gb": {"gpu": "a100_40gb"}, "1T on 192 A100 40GB": {"params": 10**12, "N": 192, "gpu": "a100_40gb"}},
    14: {"C=16": {"C": 16}},
    22: {"1 rank at 50 GB/s": {"src": 1, "write_GBps": 50}},
    23: {"N=16384": {"N": 16384}, "N=512": {"N": 512}},
    25: {"one bad card": {"N": 64, "cv": 0.01, "bad": 0.05}},
}
NARROWEST = 360  # a small phone: charts lay themselves out again there too


def extreme_states(figure):
    """``[(name, state)]``: the default, each control at each end of its range (each option
    of a choice) with the others at their defaults, and every range at its low end, then
    at its high end; validated, each distinct state once."""
    default = figure.default_state()
    named = [("default", default)]
    low, high = dict(default), dict(default)
    for control in figure.stateful_controls:
        if isinstance(control, Play):
            continue
        values = control.values
        ends = values if isinstance(control, (Select, Toggle)) else (values[0], values[-1])
        named += [(f"{control.key}={value}", {**default, control.key: value}) for value in ends]
        if isinstance(control, (Slider, Number)):
            low[control.key], high[control.key] = values[0], values[-1]
    named += [("all-low", low), ("all-high", high)]
    named += [(name, {**default, **changes}) for name, changes in REPORTED.get(figure.number, {}).items()]
    seen, states = set(), []
    for name, state in named:
        state = figure.validate_state(state)
        key = tuple(sorted(state.items()))
        if key not in seen:
            seen.add(key)
            states.append((name, state))
    return states


def problems(drawing):
    """``{(text, other text or LEAVES)}`` of one measured drawing."""
    found, texts = set(), drawing["texts"]
    for i, a in enumerate(texts):
        x0, y0, x1, y1 = a["box"]
        if x0 < -1 or y0 < -1 or x1 > drawing["width"] + 1 or y1 > drawing["height"] + 1:
            found.add((a["text"], LEAVES))
        for b in texts[i + 1:]:
            across = min(x1, b["box"][2]) - max(x0, b["box"][0])
            down = min(y1, b["box"][3]) - max(y0, b["box"][1])
            if across > 1 and down > 0.15 * min(a["size"], b["size"]):
                found.add(tuple(sorted((a["text"], b["text"]))))
    return found


@pytest.fixture(scope="module")
def page(browser, base_url):
    """The built page with every chapter shown and its figures' worker refused: each
    figure keeps the drawing this test puts in place."""
    session = PageSession(browser, base_url, routes={"**/assets/worker.*.js": lambda route: route.abort()})
    session.page.goto(base_url + "/")
    session.page.wait_for_function("() => document.documentElement.dataset.python === 'failed'", timeout=60_000)
    # Each drawing put in place lays out only its figure, not the whole 700 KB page (a third
    # faster); layout containment moves and sizes nothing.
    session.page.add_style_tag(content=".figure [data-role=view] { contain: layout style; }")
    charts = [f.anchor for f in registry().values() if f.render(f.default_state()).plot]
    for anchor in charts:  # plotly.js loads when a chart comes near the viewport
        session.page.evaluate(f"document.getElementById('{anchor}').scrollIntoView()")
        session.page.wait_for_selector(f"#{anchor} .js-plotly-plot .main-svg", timeout=30_000)
    yield session.page
    session.close()


def _measure(page, figure, views):
    """The measured drawing of each of ``views`` (all SVG, or all Plotly) of ``figure``."""
    if views[0].svg is not None:
        return page.evaluate(MEASURE, [figure.anchor, [view.svg for view in views], None])
    return [page.evaluate(MEASURE, [figure.anchor, None, view.plot]) for view in views]


def _problems(page, figure, prefix="", narrow=False):
    states = extreme_states(figure)
    drawings = _measure(page, figure, [figure.render(state, narrow=narrow) for _, state in states])
    return {(figure.number, prefix + name, *pair) for (name, _), drawing in zip(states, drawings) for pair in problems(drawing)}


def test_no_label_overlaps_another_or_leaves_its_drawing(page):
    found = set()
    for _, figure in sorted(registry().items()):
        found |= _problems(page, figure)
    charts = [figure for figure in registry().values() if figure.render(figure.default_state()).plot]
    for width in (PHONE_WIDTH, NARROWEST):
        page.set_viewport_size({"width": width, "height": 844})
        for figure in charts:  # a chart lays itself out anew at a phone's width; a drawing only scales
            page.evaluate(RESIZED, figure.anchor)
            found |= _problems(page, figure, f"{width}px ")
    for _, figure in sorted(registry().items()):  # and a figure that lays itself out for a phone, as it does there
        if figure.lays_out_narrow and not figure.render(figure.default_state()).plot:
            found |= _problems(page, figure, f"{PHONE_WIDTH}px narrow ", narrow=True)
    page.set_viewport_size({"width": 1280, "height": 900})
    assert not found, "labels overlap or leave the drawing:\n" + "\n".join(map(repr, sorted(found)))


def test_the_width_estimate_the_labels_are_placed_by_is_never_short(page):
    """``svg.text_width`` (what ``svg.place_labels`` lays out with) is at least what
    Chromium draws, for every label of every drawing as it first shows, and not far more."""
    short, measured = [], 0
    for number, figure in sorted(registry().items()):
        view = figure.render(figure.default_state())
        if not view.svg:
            continue
        for text in _measure(page, figure, [view])[0]["texts"]:
            estimate = svg.text_width(text["text"], text["size"], text["bold"])
            measured += 1
            if not text["width"] - 0.5 <= estimate <= 1.3 * text["width"] + 3:
                short.append((number, text["text"], text["size"], round(text["width"], 1), round(estimate, 1)))
    assert measured > 500 and not short, short
