"""What a reader does to a figure, and what the page must then show: shared by every
browser test module (each figure issue's tests use these, so they all wait for a move
the same way).

A move is asynchronous in general (the figures' Python may run off the main thread):
``set_control`` returns once the figure has painted the move (``settle``).
"""
import pytest

from figures import registry
from figures.contract import Number, Select, Slider, Toggle, decode_fragment, encode_state

SETTLE_TIMEOUT_MS = 20_000


def settle(page, anchor):
    """Wait until the figure has painted every move made so far: no render is pending
    (``data-busy`` is absent)."""
    page.wait_for_function(
        "anchor => { const f = document.getElementById(anchor); return f && !f.hasAttribute('data-busy'); }",
        arg=anchor, timeout=SETTLE_TIMEOUT_MS)


def _raw_value(text):
    """A readout's data-value as the page holds it: a number, a string, or None."""
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return text


def readouts(page, anchor):
    """``{key: {"text": shown text, "value": data-value as a number, a string or None}}``."""
    shown = page.eval_on_selector_all(
        f"#{anchor} [data-role=readout] [data-key]",
        "nodes => Object.fromEntries(nodes.map(n => [n.dataset.key, {text: n.querySelector('dd').textContent, value: n.dataset.value === undefined ? null : n.dataset.value}]))",
    )
    return {key: {"text": r["text"], "value": _raw_value(r["value"])} for key, r in shown.items()}


def view_fingerprint(page, anchor):
    """The drawing as the browser holds it: SVG markup, or the data Plotly is showing."""
    return page.eval_on_selector(
        f"#{anchor} [data-role=view]",
        "view => { const plot = view.querySelector('.js-plotly-plot');"
        " return plot ? JSON.stringify(plot.data.map(t => [t.x, t.y, t.marker && t.marker.opacity])) : view.innerHTML; }",
    )


def set_control(page, figure, key, value):
    control = figure.control(key)
    selector = f"#{figure.anchor} [data-control='{key}']"
    if isinstance(control, Slider):
        page.fill(selector, control.position_text(value))
    elif isinstance(control, Select):
        page.select_option(selector, str(value))
    elif isinstance(control, Toggle):
        page.set_checked(selector, bool(value))
    elif isinstance(control, Number):
        page.fill(selector, str(value))
    settle(page, figure.anchor)


def read_state(page, figure):
    """The figure's state as its controls hold it, validated."""
    return figure.validate_state(readouts_state(page, figure))


def press(page, figure, key):
    """Click a figure's button and wait for the figure to paint the result."""
    page.click(f"#{figure.anchor} [data-control='{key}']")
    settle(page, figure.anchor)


def expected_readouts(figure, state):
    """The readouts CPython's render gives for ``state``: what the page must show."""
    return {r.key: {"text": r.text, "value": r.value} for r in figure.render(figure.validate_state(state)).readouts}


def assert_sliders_read(page, figure, state):
    """Each slider's <output> and aria-valuetext state its value as the figure writes it."""
    state = figure.validate_state(state)
    for control in figure.stateful_controls:
        if isinstance(control, Slider):
            text = control.display(state[control.key])
            shown = page.text_content(f"#{figure.anchor} output[data-for='{control.key}']")
            assert shown == text, f"{figure.anchor} {control.key}: shows {shown!r}, state says {text!r}"
            assert page.get_attribute(f"#{figure.anchor} [data-control='{control.key}']", "aria-valuetext") == text, control.key


def assert_shows(page, figure, state):
    assert_sliders_read(page, figure, state)
    shown = readouts(page, figure.anchor)
    expected = expected_readouts(figure, state)
    assert shown.keys() == expected.keys()
    for key, want in expected.items():
        assert shown[key]["text"] == want["text"], key
        if isinstance(want["value"], float):
            # Pyodide's libm (musl) and CPython's (glibc) may differ in the last bits of exp,
            # log or erfc: the raw number must agree to far finer than any model is accurate
            assert shown[key]["value"] == pytest.approx(want["value"], rel=1e-9, abs=1e-300), key
        elif want["value"] is not None:
            assert shown[key]["value"] == want["value"], key


def move_and_check(page, figure, state, key, value):
    """Move one control; the drawing or a readout must change (no dead controls), and
    every readout must equal what models/ computes (through the same render, in
    CPython) for the new state."""
    before = (view_fingerprint(page, figure.anchor), readouts(page, figure.anchor))
    old = figure.validate_state(state)
    set_control(page, figure, key, value)
    state.update(figure.validate_state({**state, key: value}))  # a constraint may move other controls too
    if state != old:
        after = (view_fingerprint(page, figure.anchor), readouts(page, figure.anchor))
        assert after != before, f"{figure.anchor}: moving {key} changed neither the drawing nor a readout"
    assert_shows(page, figure, state)
    return readouts(page, figure.anchor)


def other_value(control, current, figure=None, state=None):
    """A valid value for ``control`` different from ``current``: its far end (as far as the
    figure's ``limits`` let a reader move it in ``state``) or next option."""
    if isinstance(control, (Slider, Number)):
        top = control.max
        if isinstance(control, Slider) and figure is not None and figure.limits is not None:
            highest = figure.limits(figure.validate_state(state)).get(control.key)
            top = control.highest_at_most(highest) if highest is not None else top
        return top if current != top else control.min
    if isinstance(control, Select):
        values = control.values
        return values[(values.index(current) + 1) % len(values)]
    return not current


def readouts_state(page, figure):
    """The figure's current state, read back from its controls (raw: not yet validated)."""
    state = {}
    for control in figure.stateful_controls:
        selector = f"#{figure.anchor} [data-control='{control.key}']"
        if isinstance(control, Slider):
            state[control.key] = control.from_position(page.input_value(selector))
        elif isinstance(control, Toggle):
            state[control.key] = page.is_checked(selector)
        else:
            state[control.key] = page.input_value(selector)
    return state




def play_and_pause(page, figure, play):
    """Press a Play toggle: the slider it drives must step on by itself, the figure showing
    each step; pressed again, it stops. Links never carry it."""
    driven = f"#{figure.anchor} [data-control='{play.drives}']"
    start = page.input_value(driven)
    set_control(page, figure, play.key, True)
    page.wait_for_function("([selector, start]) => document.querySelector(selector).value !== start",
                           arg=[driven, start], timeout=5 * play.interval_ms + 10_000)
    set_control(page, figure, play.key, False)
    settle(page, figure.anchor)
    stopped = page.input_value(driven)
    page.wait_for_timeout(2 * play.interval_ms)
    assert page.input_value(driven) == stopped, f"{figure.anchor}: {play.key} off, but {play.drives} still moves"
    state = read_state(page, figure)
    assert_shows(page, figure, state)
    assert f"{play.key}=" not in page.evaluate("location.hash")


def follow_link(page, fragment):
    """Open an in-page link to a figure's state (``fig-15:P=8,m=16``, no ``#``) and wait until
    that figure paints it: its ``data-fragment`` becomes the state's canonical link."""
    number, values = decode_fragment(fragment)
    figure = registry()[number]
    painted = encode_state(figure, figure.validate_state(values))
    page.evaluate("fragment => { location.hash = fragment; }", "#" + fragment)
    page.wait_for_function("([anchor, painted]) => document.getElementById(anchor).dataset.fragment === painted",
                           arg=[figure.anchor, painted], timeout=SETTLE_TIMEOUT_MS)
    settle(page, figure.anchor)
