"""The shared drawing helpers draw exactly what they are given."""
import re
import xml.etree.ElementTree as ET

import pytest

from figures import svg


def bars(path_markup):
    """(lane, start, end) of every bar of a ``svg.lanes`` path, which must hold nothing
    but ``M start lane.5 h length`` segments."""
    d = ET.fromstring(path_markup).get("d")
    segments = re.findall(r"M(-?[\d.]+) (\d+)\.5h([\d.]+)", d)
    assert "".join(f"M{start} {lane}.5h{length}" for start, lane, length in segments) == d, d
    assert all(float(length) > 0 and float(start).is_integer() and float(length).is_integer()
               for start, _, length in segments)
    return sorted((int(lane), int(float(start)), int(float(start) + float(length))) for start, lane, length in segments)


def test_lanes_draws_one_bar_per_start():
    rows = [(0, 12, (0, 24, 60)), (1, 6, (42, 36, 30)), (2, 3, ()), (3, 4, (8,))]
    drawn = bars(svg.lanes(rows, x=10, y=20, x_scale=0.5, lane_height=8))
    assert drawn == [(0, 0, 12), (0, 24, 36), (0, 60, 72), (1, 30, 36), (1, 36, 42), (1, 42, 48), (3, 8, 12)]
    assert svg.lanes([], x=0, y=0, x_scale=1, lane_height=1).count('d="M0 0"') == 1


def test_lanes_writes_each_bar_as_one_absolute_segment():
    """One string format writes a whole row: every bar is ``M start lane.5 h length``,
    in the order given, whatever the spacing."""
    def d(rows):
        return ET.fromstring(svg.lanes(rows, x=0, y=0, x_scale=1, lane_height=1)).get("d")

    assert d([(2, 12, (0, 30, 60, 90))]) == "M0 2.5h12M30 2.5h12M60 2.5h12M90 2.5h12"
    assert d([(0, 5, (0, 5)), (1, 5, [40, 3])]) == "M0 0.5h5M5 0.5h5M40 1.5h5M3 1.5h5"
    assert d([(0, 1.5, (0.25,))]) == "M0.25 0.5h1.5"


def test_lanes_maps_units_to_pixels_in_its_transform():
    path = ET.fromstring(svg.lanes([(0, 1, (0,))], x=112, y=20.5, x_scale=0.25, lane_height=16))
    assert path.get("transform") == "translate(112 20.5) scale(0.25 16)"
    assert path.get("stroke-width") == "0.9"


def numbers_drawn(path_markup, height=6.0):
    """Decode a ``svg.numerals`` path back into (x, y, number) triples."""
    d = ET.fromstring(path_markup).get("d")
    glyphs = {svg._numeral_path(n, height): n for n in range(1000)}
    decoded = []
    for x, y, rest in re.findall(r"M(-?[\d.]+) (-?[\d.]+)([^M]*)", d):
        decoded.append((float(x), float(y), glyphs[rest]))
    return decoded


def test_numerals_are_distinct_and_decode_back():
    assert len({svg._numeral_path(n, 6.0) for n in range(1000)}) == 1000
    rows = [((10.0, 33.3), 20.5, (1, 64)), (iter([0.0]), 4.0, range(907, 908))]
    assert numbers_drawn(svg.numerals(rows, class_="op-label")) == [(10.0, 20.5, 1), (33.3, 20.5, 64), (0.0, 4.0, 907)]


def pen_positions(relative_path):
    """Every point a path of relative m/l commands visits (coordinate pairs repeat the
    command before them, and a minus sign may stand in for a separator)."""
    numbers = [float(n) for n in re.findall(r"-?[\d.]+", relative_path)]
    assert re.fullmatch(r"([ml][-\d. ]+)+", relative_path)
    x = y = 0.0
    points = []
    for dx, dy in zip(numbers[0::2], numbers[1::2]):
        x, y = x + dx, y + dy
        points.append((x, y))
    return points


def test_numeral_paths_hold_small_integers_at_the_default_height():
    assert svg._numeral_path(1, 6.0) == "m-1-2l1-1 0 6m-1 0l2 0"
    assert all(re.fullmatch(r"[-\d ml]+", svg._numeral_path(n, 6.0)) for n in range(1000) if "7" not in str(n))


def test_numerals_draw_the_glyph_strokes():
    """The 4 x 6 grid glyph of 4, one stroke, centred: ink spans x -2..2, y -3..3."""
    assert pen_positions(svg._numeral_path(4, 6.0)) == [(1.0, 3.0), (1.0, -3.0), (-2.0, 1.0), (2.0, 1.0)]


@pytest.mark.parametrize("number", [0, 8, 64, 208, 999])  # digits whose ink spans the whole cell
def test_numerals_are_centred_on_their_point(number):
    xs, ys = zip(*pen_positions(svg._numeral_path(number, 6.0)))
    assert min(xs) == pytest.approx(-max(xs), abs=0.02)
    assert (min(ys), max(ys)) == pytest.approx((-3.0, 3.0), abs=0.02)


def test_boxes_and_segments_are_one_path_each():
    box = ET.fromstring(svg.boxes([(1, 2, 3, 4), (0.5, 0, 10, 1)], class_="svg-lane"))
    assert box.get("d") == "M1.00 2.00h3.00v4.00h-3.00zM0.50 0.00h10.00v1.00h-10.00z"
    line = ET.fromstring(svg.segments([(0, 0, 5, 0)], class_="svg-axis"))
    assert (line.get("d"), line.get("fill")) == ("M0.00 0.00L5.00 0.00", "none")


def test_texts_escape_their_content_and_share_attributes():
    markup = svg.texts([(1, 2.25, "a<b"), (3, 4, 7)], class_="svg-label", text_anchor="end")
    root = ET.fromstring(f"<g>{markup}</g>")
    assert [(t.get("x"), t.get("y"), t.text, t.get("text-anchor")) for t in root] == [
        ("1.0", "2.2", "a<b", "end"), ("3.0", "4.0", "7", "end")]


def test_drawn_text_is_ascii_markup_that_reads_back_unchanged():
    words = "GPipe — bubble ≥ 5% <of> “Ψ” & 𝛼"
    markup = svg.document(10, 10, [svg.text(0, 0, words), svg.texts([(1, 2, words)])], label=words)
    assert markup.isascii()
    root = ET.fromstring(markup)
    assert root.get("aria-label") == words
    assert [node.text for node in root.iter() if node.tag.endswith(("title", "text"))] == [words, words, words]


def test_hit_strips_merge_side_by_side_cells_of_consecutive_values_only():
    cells = [(0, 0, 10, 10, 0), (10, 0, 10, 10, 1), (20, 0, 10, 10, 2),  # one run
             (34, 0, 10, 10, 3),  # a gap before it
             (44, 0, 10, 10, 5),  # a value skipped
             (0, 12, 10, 10, 6), (10, 12, 10, 10, 7)]  # the next row
    rects = ET.fromstring("<svg>" + svg.hit_strips(cells, "rank", class_="svg-hit") + "</svg>").findall("rect")
    assert [r.get("data-set-strip") for r in rects] == ["rank=0/3", "rank=3/1", "rank=5/1", "rank=6/2"]
    assert [(r.get("x"), r.get("width")) for r in rects] == [("0.0", "30.0"), ("34.0", "10.0"), ("44.0", "10.0"), ("0.0", "20.0")]
    assert all(r.get("class") == "svg-hit" and r.get("tabindex") is None for r in rects)


# --- labels placed by one helper (svg.place_labels) ---------------------------------

from hypothesis import given, settings, strategies as st  # noqa: E402


def _apart(a, b):
    return a[0] + a[2] <= b[0] or b[0] + b[2] <= a[0] or a[1] + a[3] <= b[1] or b[1] + b[3] <= a[1]


def test_text_width_grows_with_size_weight_and_length_and_is_conservative_for_wide_letters():
    assert svg.text_width("1.06 ms", 11) < svg.text_width("1.06 ms", 12) < svg.text_width("1.06 ms", 12, bold=True)
    assert svg.text_width("WWW", 10) >= 3 * 0.98 * 10 and svg.text_width("iii", 10) < svg.text_width("WWW", 10) / 2
    assert svg.text_width("\u4e00", 10) == 10  # an unknown character counts a whole em
    left, top, width, height = svg.text_box(100, 50, "HBM", 12, anchor="end")
    assert left + width == 100 and top < 50 - 0.9 * 12 and top + height > 50 + 0.2 * 12


def test_a_label_keeps_its_place_when_free_and_is_moved_inside_the_drawing():
    [(x, y, anchor, box)] = svg.place_labels([svg.Label(10, 20, "free")], (0, 0, 200, 100))
    assert (x, y, anchor) == (10, 20, "start")
    [(x, y, _, box)] = svg.place_labels([svg.Label(195, 5, "sticks out right and above")], (0, 0, 200, 100))
    assert box[0] + box[2] <= 200 and box[1] >= 0 and x < 195 and y > 5


def test_colliding_labels_take_their_alternative_or_stack():
    bars = [(40, 40, 20, 60)]
    first, second = svg.place_labels(
        [svg.Label(50, 35, "1.06 ms", anchor="middle", moves=("up",)),
         svg.Label(52, 35, "1.23 ms", anchor="middle", moves=("up",))], (0, 0, 200, 100), obstacles=bars)
    assert first[:3] == (50, 35, "middle") and second[1] < first[1] and _apart(first[3], second[3])
    [(x, y, anchor, box)] = svg.place_labels(
        [svg.Label(50, 60, "on the bar", alternatives=((62, 60, "start"),))], (0, 0, 200, 100), obstacles=bars)
    assert (x, y, anchor) == (62, 60, "start") and _apart(box, bars[0])


def test_labels_draws_each_at_its_place_with_its_attributes():
    markup = svg.labels([svg.Label(10, 20, "a", class_="svg-label", style="fill:red"), svg.Label(11, 20, "b")],
                        (0, 0, 100, 100))
    assert markup.startswith('<text x="10.0" y="20.0" class="svg-label" style="fill:red">a</text><text x="11.0" y="')
    assert 'y="20.0" class="svg-label-soft">b' not in markup  # b moved off a


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 300), st.floats(12, 200), st.text("0123456789 .msGBTk", min_size=1, max_size=9),
                          st.sampled_from(["start", "middle", "end"])), min_size=1, max_size=8))
def test_placed_labels_never_overlap_nor_leave_a_roomy_drawing(items):
    """Eight short labels anywhere in a 300 x 200 drawing always find room: no two boxes
    touch and none leaves the drawing, however they were asked for."""
    placed = svg.place_labels([svg.Label(x, y, t, anchor=a, moves=("up", "down", "left", "right"))
                               for x, y, t, a in items], (0, 0, 300, 200))
    boxes = [box for *_, box in placed]
    for i, a in enumerate(boxes):
        assert 0 <= a[0] and a[0] + a[2] <= 300 + 1e-6 and 0 <= a[1] and a[1] + a[3] <= 200 + 1e-6
        assert all(_apart(a, b) for b in boxes[i + 1:])


def test_wrap_breaks_at_spaces_within_the_width_and_keeps_what_it_is_told_to():
    text = "communication hidden under compute: 71.9 ms of 9.16 s per step"
    lines = svg.wrap(text, 120, 12)
    assert " ".join(lines) == text and len(lines) > 1
    assert all(svg.text_width(line, 12) <= 120 for line in lines if " " in line)
    kept = svg.wrap(text, 120, 12, keep=svg.with_its_unit)
    assert all(not line.split(" ")[-1][-1:].isdigit() for line in kept[:-1])  # no number ends a line
    even = svg.wrap(text, 200, 12, even=True)
    assert len(even) == len(svg.wrap(text, 200, 12)) and max(map(len, even)) <= max(map(len, svg.wrap(text, 200, 12)))
    assert svg.wrap("one", 1, 12) == ["one"] and svg.wrap("", 100, 12) == [""]


def test_line_boxes_cover_a_line_in_short_pieces_and_nothing_far_from_it():
    """A long diagonal is covered by boxes at most ``step`` long, each hugging the line: a
    label beside the line, inside the diagonal's bounding box, stays free."""
    boxes = svg.line_boxes([(0, 0), (100, 100)], step=8, pad=1.5)
    assert len(boxes) == 18 and all(w <= 8 / 2 ** 0.5 + 3.01 and h <= 8 / 2 ** 0.5 + 3.01 for _, _, w, h in boxes)
    for t in (0, 0.25, 0.5, 1):  # every point of the line is in some box
        assert any(x <= 100 * t <= x + w and y <= 100 * t <= y + h for x, y, w, h in boxes)
    assert not any(svg.boxes_touch(box, (60, 10, 30, 12)) for box in boxes)  # above the diagonal, in its bounding box
    assert svg.line_boxes([(5, 5)]) == []
