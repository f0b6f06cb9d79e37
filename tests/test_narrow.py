"""Every figure on a phone (issue 34), in CPython: its drawing fits a 360 px phone's column
without scrolling sideways, marks the element that carries its point, and says the same
things (readouts, note, tables, text alternative) as on a wide screen; and it names the
controls kept in view there."""
import re

import pytest

from figures import registry, svg
from figures.contract import NARROW_DRAWING_PX, Button, Play
from tests.browser.test_text_overlaps import extreme_states

MIN_WIDTH = re.compile(r'^<svg [^>]*style="min-width:([0-9.]+)px[;"]')
FIGURES = sorted(registry().items())


def _states(figure):
    """The default, each try, and the ends of every control."""
    states = [state for _, state in extreme_states(figure)]
    states += [figure.validate_state(values) for _, values in figure.tries]
    return states


def _min_width(markup):
    found = MIN_WIDTH.match(markup)
    assert found, markup[:200]
    return float(found.group(1))


@pytest.mark.parametrize("number,figure", FIGURES, ids=[f"fig-{n:02d}" for n, _ in FIGURES])
def test_the_drawing_fits_a_phone_and_marks_its_point(number, figure):
    for state in _states(figure):
        view = figure.render(state, narrow=True)
        if view.svg:
            assert _min_width(view.svg) <= NARROW_DRAWING_PX, (
                f"Figure {number:02d} at {state}: its drawing needs {_min_width(view.svg)} px, a phone's column has {NARROW_DRAWING_PX}")
        marked = (view.svg and f'class="{svg.KEY}' in view.svg or f" {svg.KEY}" in (view.svg or "")
                  or svg.KEY in (view.html or "") or view.plot is not None)
        assert marked, f"Figure {number:02d} at {state}: no element carries class {svg.KEY!r} (the drawing's point)"


@pytest.mark.parametrize("number,figure", FIGURES, ids=[f"fig-{n:02d}" for n, _ in FIGURES])
def test_a_phone_is_told_what_a_wide_screen_is_told(number, figure):
    for state in _states(figure):
        wide, narrow = figure.render(state), figure.render(state, narrow=True)
        assert (narrow.readouts, narrow.note, narrow.html) == (wide.readouts, wide.note, wide.html)
        assert narrow.alt == wide.alt
        assert (narrow.plot is None) == (wide.plot is None) and (narrow.svg is None) == (wide.svg is None)


@pytest.mark.parametrize("number,figure", FIGURES, ids=[f"fig-{n:02d}" for n, _ in FIGURES])
def test_it_names_the_one_or_two_controls_kept_in_view_on_a_phone(number, figure):
    assert 1 <= len(figure.primary) <= 2, f"Figure {number:02d}: PRIMARY names {len(figure.primary)} controls"
    for key in figure.primary:
        assert not isinstance(figure.control(key), Button) or len(figure.controls) == 1
    # a Play the caption tells the reader to press is in view, not folded away (issue 43)
    plays = [c.key for c in figure.controls if isinstance(c, Play)]
    if plays and "Play" in figure.caption:
        assert set(plays) & set(figure.primary), f"Figure {number:02d}: its caption says to press Play, which is folded away"
    primary, groups = figure.control_layout()
    laid_out = [c.key for c in primary] + [c.key for _, controls in groups for c in controls]
    assert sorted(laid_out) == sorted(c.key for c in figure.controls) and len(set(laid_out)) == len(laid_out)
