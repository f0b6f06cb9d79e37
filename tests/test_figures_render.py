"""Every registered figure renders its default state and random valid states in CPython:
SVG parses as XML, Plotly specs are accepted by plotly-python, readouts are finite."""
import math
import random
import re
import xml.etree.ElementTree as ET

import plotly.graph_objects as go
import pytest

import build
from figures import registry
from figures.contract import Number, Play, Slider, decode_fragment, encode_state, nearby_states

FIGURES = sorted(registry().values(), key=lambda f: f.number)
NOT_A_NUMBER = re.compile(r"\b(nan|inf|infinity)\b", re.IGNORECASE)


def random_state(figure, rng):
    state = {}
    for control in figure.stateful_controls:
        state[control.key] = rng.choice(control.values)
    return figure.validate_state(state)


def check_view(figure, view):
    assert view.svg or view.plot, f"figure {figure.number} rendered nothing"
    if view.svg:
        root = ET.fromstring(view.svg)
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
        assert view.svg.isascii(), "non-ASCII text must be a character reference (svg._escape)"
        assert "nan" not in view.svg.lower().replace("nano", "")
    if view.plot:
        go.Figure(view.plot)  # raises on any property plotly.js would not understand
        # the vendored bundle draws only these; any other trace would stay blank in the page
        assert {trace.get("type", "scatter") for trace in view.plot["data"]} <= set(build.PLOTLY_TRACES)
    assert view.readouts, "a figure must report its key numbers"
    assert len(view.alt) >= 40 and "nan" not in view.alt.lower().replace("nano", ""), "a figure must describe its drawing (View.alt)"
    for readout in view.readouts:
        # whole words: a link named "infinity_fabric_mi300x" is not an infinity
        assert readout.text and not NOT_A_NUMBER.search(readout.text), readout.text
        if isinstance(readout.value, str):
            assert readout.value and readout.value.isascii()
        elif readout.value is not None:
            assert math.isfinite(readout.value)


def test_registry_has_the_foundation_figures():
    assert {8, 15} <= set(registry())


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f.anchor)
def test_default_state_renders(figure):
    check_view(figure, figure.render(figure.default_state()))


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f.anchor)
def test_fifty_random_states_render(figure):
    rng = random.Random(figure.number)
    for _ in range(50):
        check_view(figure, figure.render(random_state(figure, rng)))


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f.anchor)
def test_state_round_trips_through_the_url(figure):
    rng = random.Random(1000 + figure.number)
    for _ in range(20):
        state = random_state(figure, rng)
        number, values = decode_fragment("#" + encode_state(figure, state))
        assert number == figure.number
        paused = {c.key: False for c in figure.stateful_controls if isinstance(c, Play)}  # links never auto-play
        assert figure.validate_state(values) == {**state, **paused}


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f.anchor)
def test_messy_url_values_fall_back_to_valid_states(figure):
    junk = {c.key: v for c in figure.stateful_controls for v in ("", "abc", "1e400", "-5", "NaN")}
    state = figure.validate_state({**junk, "no-such-control": "1"})
    assert set(state) == {c.key for c in figure.stateful_controls}
    check_view(figure, figure.render(state))


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f"fig{f.number:02d}")
def test_nearby_states_are_single_control_changes_nearest_first(figure):
    state = figure.default_state()
    nearby = nearby_states(figure, state, 10_000)
    if figure.constrain is not None:  # a change may snap other controls: distinct valid states, then
        assert len({tuple(sorted(s.items())) for s in nearby}) == len(nearby) and state not in nearby
        assert all(figure.validate_state(s) == s for s in nearby)
        return
    expected_count = sum(len(c.values) - 1 for c in figure.stateful_controls)
    assert len(nearby) == expected_count == len({tuple(sorted(s.items())) for s in nearby})
    distance = []
    for s in nearby:
        [changed] = [c for c in figure.stateful_controls if s[c.key] != state[c.key]]
        assert figure.validate_state(s) == s
        distance.append((isinstance(changed, Number),
                         abs(changed.values.index(s[changed.key]) - changed.values.index(state[changed.key]))))
    # one step along every control before two steps along any; a typed field's values last
    assert distance == sorted(distance)
    assert nearby_states(figure, state, 5) == nearby[:5]


def test_slider_values_are_what_coerce_produces():
    for figure in FIGURES:
        for control in figure.stateful_controls:
            if isinstance(control, Slider):
                assert control.values[0] == control.min and control.values[-1] == control.max
                assert all(control.coerce(v) == v for v in control.values)


def test_a_readout_keeps_its_slot_only_while_its_number_alone_changes():
    """The runtime rewrites just the number of a readout in the same slot (playbookPaint);
    anything else it shows differently makes it rebuild the list."""
    from figures.contract import Readout
    shown = Readout("bubble", "GPipe bubble", "27.3%", 0.273, "#4c78a8")
    assert shown.same_slot(Readout("bubble", "GPipe bubble", "12.0%", 0.12, "#4c78a8"))
    for other in (Readout("stashes", "GPipe bubble", "12.0%", 0.12, "#4c78a8"),
                  Readout("bubble", "1F1B bubble", "12.0%", 0.12, "#4c78a8"),
                  Readout("bubble", "GPipe bubble", "12.0%", 0.12),
                  Readout("bubble", "GPipe bubble", "not defined here", None, "#4c78a8")):
        assert not shown.same_slot(other) and not other.same_slot(shown)


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f.anchor)
def test_every_sliders_range_ends_where_its_constraints_do(figure):
    """No dead stretch at the end of a slider (figure-checklist item 11): in any state, the
    input's max (``Figure.slider_limits``, else the slider's own end) is the highest value
    that, set on that slider alone, stays set, or the highest that stays set and moves no
    other slider (issue 43: a figure may stop a slider before it would silently move another;
    Figure 17's CP stops at 8 beside TP 8, DP 8 and PP 8 rather than take DP from 8 to 1).
    Figure 17's rank slider in a world of 512 ends at 511, not 4,095; Figure 01's at the last
    rank of the nodes drawn."""
    rng = random.Random(2000 + figure.number)
    for state in [figure.default_state()] + [random_state(figure, rng) for _ in range(12)]:
        limits = figure.slider_limits(state)
        for control in figure.stateful_controls:
            if not isinstance(control, Slider):
                continue
            sliders = [c.key for c in figure.stateful_controls if isinstance(c, Slider) and c.key != control.key]
            moved = {v: figure.validate_state({**state, control.key: v}) for v in control.values}
            kept = [v for v in control.values if moved[v][control.key] == v]
            alone = [v for v in kept if all(moved[v][k] == state[k] for k in sliders)]
            shown_max = limits.get(control.key, control.position_text(control.values[-1]))
            assert shown_max in (control.position_text(kept[-1]), control.position_text(alone[-1])), (control.key, state)
