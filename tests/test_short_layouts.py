"""A phone on its side (844 x 390, issue 43.5): each figure with a short layout
(``render(state, short=True)``) fits the room its bar leaves there, in every state worth
checking, with its texts inside and apart and the same words as its wide view. Figure 20
has its own test beside its other checks."""
import xml.etree.ElementTree as ET

import pytest

from figures import fig19_decision_tree as fig19
from figures.contract import SHORT_DRAWING_PX
from models import ladder
from tests.figure_views import short_layout_faults, sweep_states

SCREEN_PX = 390
# each figure's bar at 844 x 390 (measured: one row 62 px, two rows 111 px), and what its
# wide drawing needed there before (px on screen)
SHORT = {2: (62, 422), 3: (62, 633), 4: (111, 345), 6: (111, 401), 7: (62, 399), 10: (111, 562), 11: (62, 564), 12: (111, 324), 13: (62, 346), 14: (62, 692), 15: (62, 438), 16: (111, 376), 17: (62, 520), 19: (62, 520), 22: (62, 394), 23: (163, 380), 25: (111, 442)}


@pytest.mark.parametrize("number", sorted(SHORT))
def test_the_short_drawing_fits_under_the_bar_in_every_state(number):
    bar_px, _ = SHORT[number]
    figure, states = sweep_states(number)
    assert figure.lays_out_short
    tallest = 0.0
    for state in states:
        px, problems = short_layout_faults(figure, state)
        assert problems == [], state
        tallest = max(tallest, px)
    assert bar_px + tallest <= SCREEN_PX and tallest <= SHORT_DRAWING_PX, tallest


def test_figure_11s_short_layouts_are_the_largest_cells_that_fit():
    """Figure 11 looks its short layout up (a search would cost each redraw ~20 layouts): each
    entry must be what the search finds, the largest cells that fit, in the most even columns."""
    from figures import fig11_tp_blocks as fig11

    for (block, order, tp), chosen in fig11.SHORT_LAYOUT.items():
        found = None
        for cell in range(fig11.CELL[block], 1, -1):
            height, first = min((fig11._drawing(block, order, tp, 0, fig11.SHORT_WIDTH, cell, fig11.SHORT_SPLIT, first)[2],
                                 first) for first in fig11.SHORT_FIRST_WIDTHS)
            if height <= fig11.SHORT_HEIGHT:
                found = (cell, first)
                break
        assert found == chosen, (block, order, tp)
    assert len(fig11.SHORT_LAYOUT) == 2 * 2 * len(fig11.CONTROLS[0].values)


def test_figure_19s_short_table_answers_each_question_the_ladder_asked():
    """Figure 19's short table writes the answers in: "yes" on each question passed, "no" on the
    first that fails (the lit fix under it names that fix), nothing on the questions not asked."""
    figure, states = sweep_states(19)
    for state in states:
        r = ladder.climb(state["params"], state["seq"], state["gpu"], state["gpus"], state["experts"], state["micro"])
        failed = next((i for i, check in enumerate(r.checks) if not check.passed), len(r.checks))
        texts = [t.text for t in ET.fromstring(figure.render(state, short=True).svg).iter("{http://www.w3.org/2000/svg}text")]
        assert [t for t in texts if t in ("yes", "no")] == ["yes"] * failed + ["no"] * (failed < len(r.checks)), state
        title = fig19._fix_text(r)[0]
        assert (title if failed < len(r.checks) else f"Nothing fails: {title}") in texts, state
