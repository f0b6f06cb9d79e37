"""The one place SVG markup is written. Figures compose these helpers; colours come
from CSS classes (``site/static/playbook.css``) so diagrams follow the light/dark theme."""
import math
from html import escape
from functools import lru_cache
from re import compile as _regex
from unicodedata import combining

from models.fmt import decimal  # coordinates: two decimals are sub-pixel

_NEEDS_ESCAPE = _regex("[&<>\"']|[^\\x00-\\x7f]").search


def _escape(text):
    """Text as markup, and ASCII only: other characters become character references
    (U+2014 -> &#8212;). One non-ASCII character would make the whole drawing a
    two-byte-per-character string, which Pyodide hands to JavaScript ~8x slower
    (1.4 ms against 0.2 ms for Figure 15's largest view)."""
    if not _NEEDS_ESCAPE(text):  # most labels ("stage 3", "12"): one regex scan, no copies
        return text
    return escape(text).encode("ascii", "xmlcharrefreplace").decode("ascii")


def _attrs(attributes):
    return _attribute_text(tuple(attributes.items()))


@lru_cache(maxsize=256)
def _attribute_text(items):
    """`` name="value"`` for each (keyword, value) pair. Cached: a figure passes the same
    few classes and styles on every redraw, and each costs ~10 us to write in Pyodide.
    Values are text or numbers (None or False: left out); never True, which the cache
    could not tell from 1."""
    parts = []
    for name, value in items:
        if value is None or value is False:
            continue
        name = name.rstrip("_").replace("_", "-")
        value = decimal(value) if isinstance(value, float) else _escape(str(value))
        parts.append(f' {name}="{value}"')
    return "".join(parts)


LABEL_PX_MIN = 11  # no label on the page is drawn smaller (figure-checklist.md item 6)
# The class of the element that carries a drawing's point (the chosen node, the cliff, the
# bubble): on a phone it must be on screen with the figure's first control (tests/browser/test_phone.py).
KEY = "svg-key"
COMPACT_LABEL = 14.5  # label size in "svg-compact" drawings (playbook.css), narrow enough for a phone


def document(width, height, body, *, label, class_=None, smallest_label=11):
    """A complete, accessible ``<svg>`` scaled by its viewBox: it fills the figure's width
    but is never drawn so small that its ``smallest_label`` (in drawing units) falls below
    11 px (``min-width``); where the column is narrower, the figure scrolls sideways."""
    body = "".join(body)
    role = "group" if ' tabindex="' in body else "img"  # an image may not hold controls (hit_areas)
    if class_ and "svg-compact" in class_.split():
        smallest_label = max(smallest_label, COMPACT_LABEL)
    min_width = decimal(float(width) * LABEL_PX_MIN / smallest_label)
    # its width over its height: on a short screen the page keeps it within the screen's height (playbook.css)
    aspect = f"{float(width) / float(height):.4g}" if height else "100"
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {decimal(float(width))} {decimal(float(height))}"'
        f' role="{role}" style="min-width:{min_width}px;--aspect:{aspect}"{_attrs({"aria-label": label, "class": class_})}>'
        f"<title>{_escape(label)}</title>{body}</svg>"
    )


def _path(data, **attributes):
    """One ``<path>`` from path data this module built from numbers (an empty one when
    there is nothing to draw: ``d`` may not be empty)."""
    return f'<path d="{data or "M0 0"}"{_attrs(attributes)}/>'


def text(x, y, content, **attributes):
    return texts(((x, y, content),), **attributes)


# Numerals drawn as strokes on a 4 x 6 grid (x right, y down), one polyline per stroke.
_NUMERAL_STROKES = {
    "0": ((1, 0, 3, 0, 4, 1, 4, 5, 3, 6, 1, 6, 0, 5, 0, 1, 1, 0),),
    "1": ((1, 1, 2, 0, 2, 6), (1, 6, 3, 6)),
    "2": ((0, 1, 1, 0, 3, 0, 4, 1, 4, 2, 0, 6, 4, 6),),
    "3": ((0, 1, 1, 0, 3, 0, 4, 1, 4, 2, 3, 3, 1, 3), (3, 3, 4, 4, 4, 5, 3, 6, 1, 6, 0, 5)),
    "4": ((3, 6, 3, 0, 0, 4, 4, 4),),
    "5": ((4, 0, 0, 0, 0, 3, 3, 3, 4, 4, 4, 5, 3, 6, 0, 6),),
    "6": ((3, 0, 1, 0, 0, 1, 0, 5, 1, 6, 3, 6, 4, 5, 4, 4, 3, 3, 0, 3),),
    "7": ((0, 0, 4, 0, 1.5, 6),),
    "8": ((1, 0, 3, 0, 4, 1, 4, 2, 3, 3, 1, 3, 0, 4, 0, 5, 1, 6, 3, 6, 4, 5, 4, 4, 3, 3), (1, 3, 0, 2, 0, 1, 1, 0)),
    "9": ((4, 3, 1, 3, 0, 2, 0, 1, 1, 0, 3, 0, 4, 1, 4, 5, 3, 6, 1, 6),),
}
_NUMERAL_ADVANCE = 6  # grid units from one digit to the next


@lru_cache(maxsize=None)
def _glyph(digit, height):
    """One digit's strokes as relative path commands: ``(start, body, end)``, where
    ``start`` is the first stroke's first point and ``end`` where the pen stops, both
    from the digit's cell origin, and ``body`` draws every stroke from ``start`` on.
    Ten glyphs per height: a number is then a few moves between them."""
    unit = height / 6
    pen_x = pen_y = None
    body = []
    for stroke in _NUMERAL_STROKES[digit]:
        moves = []
        for point in range(0, len(stroke), 2):
            x, y = stroke[point] * unit, (stroke[point + 1] - 3) * unit
            if pen_x is None:
                start = (x, y)
            else:
                moves += (x - pen_x, y - pen_y)
            pen_x, pen_y = x, y
        body.append(moves)
    # the first stroke's first point is reached by the caller's move; later strokes open with "m"
    text = "l" + _coordinates(body[0]) + "".join(f"m{_coordinates(m[:2])}l{_coordinates(m[2:])}" for m in body[1:])
    return start, text, (pen_x, pen_y)


@lru_cache(maxsize=None)
def _numeral_path(number, height):
    """Relative path commands drawing ``number`` centred on the current point. At the
    default height one grid unit is one pixel, so the commands hold small integers."""
    text = str(int(number))
    unit = height / 6
    left = -(len(text) * _NUMERAL_ADVANCE - 2) / 2 * unit
    pen_x = pen_y = 0.0
    commands = []
    for index, digit in enumerate(text):
        (start_x, start_y), body, (end_x, end_y) = _glyph(digit, height)
        origin = left + index * _NUMERAL_ADVANCE * unit
        commands.append(f"m{_coordinates((origin + start_x - pen_x, start_y - pen_y))}{body}")
        pen_x, pen_y = origin + end_x, end_y
    return "".join(commands)


def _coordinates(values):
    """Path numbers with the fewest separators: a minus sign separates by itself."""
    text = ""
    for value in values:
        number = decimal(value)
        text += number if not text or number.startswith("-") else " " + number
    return text


def numerals(rows, *, height=6.0, **attributes):
    """Whole numbers stroked as ONE ``<path>``; ``rows`` are ``(xs, y, numbers)``: the
    numbers (a range or tuple) centred at those x positions on the line at height y.

    Chromium lays out each SVG ``<text>`` separately (~20 us each), so the hundreds of
    small labels a Gantt chart wants would cost a frame; as strokes they are one node.
    They are decoration: say what they mean in the drawing's ``aria-label`` or caption.
    """
    data = []
    for xs, y, numbers in rows:
        data += map(f"M{{:.1f}} {y:.1f}{{}}".format, xs, _numeral_paths(numbers, height))
    return _path("".join(data), fill="none", stroke_linecap="round", stroke_linejoin="round", **attributes)


@lru_cache(maxsize=64)
def _numeral_paths(numbers, height):
    """``_numeral_path`` of each number, for a row's numbers as one (hashable) sequence,
    e.g. ``range(1, m + 1)``: a Gantt chart numbers every row the same way."""
    return tuple(_numeral_path(number, height) for number in numbers)


def texts(items, **attributes):
    """Many ``<text>`` elements sharing ``attributes``, from ``(x, y, content)`` triples:
    one string format each instead of one ``element`` call each."""
    template = f'<text x="{{:.1f}}" y="{{:.1f}}"{_attrs(attributes)}>{{}}</text>'.format
    return "".join(template(x, y, _escape(str(content))) for x, y, content in items)


def boxes(items, **attributes):
    """Rectangles ``(x, y, width, height)`` as ONE ``<path>`` (style it like a rect)."""
    data = "".join(f"M{x:.2f} {y:.2f}h{w:.2f}v{h:.2f}h{-w:.2f}z" for x, y, w, h in items)
    return _path(data, **attributes)


def segments(items, **attributes):
    """Straight lines ``(x1, y1, x2, y2)`` as ONE ``<path>`` (style it like a line)."""
    data = "".join(f"M{x1:.2f} {y1:.2f}L{x2:.2f} {y2:.2f}" for x1, y1, x2, y2 in items)
    return _path(data, fill="none", **attributes)


def lanes(rows, *, x, y, x_scale, lane_height, fill_ratio=0.9, **attributes):
    """Many bars on horizontal lanes as ONE ``<path>``, the way a Gantt chart needs them.

    ``rows`` are ``(lane, length, starts)``: bars of one ``length`` on lane ``lane``, one
    per start (any sequence). Starts and lengths are in the caller's units (say ticks of a
    clock; ints keep the path short); the path's transform maps them to pixels. Each bar
    is a stroked segment (``M start lane.5 h length``) whose stroke fills ``fill_ratio`` of
    its lane: thousands of bars stay one DOM node. A row is written by ONE string format
    (``"M%s 3.5h12" * len(starts) % starts``), so Python never steps through the bars:
    in Pyodide that is ~2x faster than finding runs of equally spaced bars and writing
    each run once. The markup is ~1.8x longer (the largest Figure 15 view: 15,360 bars,
    183 KB against 97 KB), which costs Chromium ~0.5 ms more to parse and lay out,
    against ~1.2 ms less Python.
    """
    data = "".join([(f"M%s {lane}.5h{length}" * len(starts)) % tuple(starts) for lane, length, starts in rows])
    transform = f"translate({decimal(float(x))} {decimal(float(y))}) scale({x_scale:.6g} {decimal(float(lane_height))})"
    return _path(data, transform=transform, fill="none", stroke_width=fill_ratio, **attributes)


def polygons(items, **attributes):
    """Closed polygons, each a sequence of (x, y) points, as ONE ``<path>`` (style it like a rect)."""
    data = "".join("M" + "L".join(f"{x:.2f} {y:.2f}" for x, y in points) + "z" for points in items)
    return _path(data, **attributes)
def step_area(points, end, *, x, y, x_scale, y_scale, **attributes):
    """A step function ``((x0, v0), (x1, v1), ...)`` (each value holding until the next x, the
    last until ``end``) as ONE filled ``<path>`` rising from the baseline: a memory strip under a
    timeline. Values and x are in the caller's units; the transform maps them to pixels, with
    larger values drawn higher."""
    data = "M%s 0" % (points[0][0],) + "".join(["V%sH%s" % (-v, x1) for (_, v), (x1, _) in zip(points, points[1:])])
    data += "V%sH%sV0Z" % (-points[-1][1], end)
    transform = f"translate({decimal(float(x))} {decimal(float(y))}) scale({x_scale:.6g} {y_scale:.6g})"
    return _path(data, transform=transform, **attributes)
def polyline(points, **attributes):
    """A line through ``points`` ``(x, y)``, in order, as ONE ``<path>`` (a curve on a chart)."""
    data = "M" + "L".join(f"{x:.2f} {y:.2f}" for x, y in points) if points else ""
    return _path(data, fill="none", stroke_linejoin="round", **attributes)


def circles(items, **attributes):
    """Circles ``(cx, cy, r)`` as ONE ``<path>`` of two arcs each (markers, graph nodes)."""
    data = "".join(f"M{cx - r:.2f} {cy:.2f}a{r:.2f} {r:.2f} 0 1 0 {2 * r:.2f} 0a{r:.2f} {r:.2f} 0 1 0 {-2 * r:.2f} 0z"
                   for cx, cy, r in items)
    return _path(data, **attributes)


def arrows(items, *, head=7.0, offset=0.0, **attributes):
    """Arrows ``(x1, y1, x2, y2)`` pointing at the second point, shaft and open head as ONE ``<path>``.
    ``offset`` moves each arrow sideways (to its right), so that A->B and B->A stay apart."""
    data = []
    for x1, y1, x2, y2 in items:
        length = ((x2 - x1) ** 2 + (y2 - y1) ** 2) ** 0.5 or 1.0
        ux, uy = (x2 - x1) / length, (y2 - y1) / length
        x1, y1, x2, y2 = x1 - uy * offset, y1 + ux * offset, x2 - uy * offset, y2 + ux * offset
        data.append(f"M{x1:.2f} {y1:.2f}L{x2:.2f} {y2:.2f}" + _arrow_head(x2, y2, x2 - x1, y2 - y1, head))
    return _path("".join(data), fill="none", stroke_linecap="round", stroke_linejoin="round", **attributes)


def _arrow_head(x, y, dx, dy, head):
    """Path commands of an open arrowhead ``head`` long at (x, y), pointing along (dx, dy)."""
    length = (dx * dx + dy * dy) ** 0.5 or 1.0
    ux, uy = dx / length, dy / length
    back_x, back_y = x - ux * head, y - uy * head  # the middle of the head's base
    return (f"M{back_x - uy * head * 0.5:.2f} {back_y + ux * head * 0.5:.2f}L{x:.2f} {y:.2f}"
            f"L{back_x + uy * head * 0.5:.2f} {back_y - ux * head * 0.5:.2f}")


def line_boxes(points, *, step=8.0, pad=1.5):
    """Obstacle boxes along a line through ``points`` (a curve, a cursor), each covering at
    most ``step`` units of it and ``pad`` either side: what ``place_labels`` keeps labels off,
    without the whole bounding box of a long diagonal."""
    found = []
    for (x1, y1), (x2, y2) in zip(points, points[1:]):
        pieces = max(1, math.ceil(math.hypot(x2 - x1, y2 - y1) / step))
        for k in range(pieces):
            ax, ay = x1 + (x2 - x1) * k / pieces, y1 + (y2 - y1) * k / pieces
            bx, by = x1 + (x2 - x1) * (k + 1) / pieces, y1 + (y2 - y1) * (k + 1) / pieces
            found.append((min(ax, bx) - pad, min(ay, by) - pad, abs(bx - ax) + 2 * pad, abs(by - ay) + 2 * pad))
    return found


def end_labels(items, x, *, floor=None, obstacles=(), leaders_from=None, **attributes):
    """Labels ``(y, text)`` at ``x`` (the right ends of a chart's curves), top to bottom, placed
    by ``place_labels``: none touches another or an obstacle, and, if ``floor`` is given, no
    baseline sits below it. With ``leaders_from`` (the x where the curves end), a label moved
    off its curve's end is joined to it by a thin line (class ``svg-axis``), so labels that
    had to move where curves meet still say which is which."""
    items = [Label(x, y, content, moves=("down", "up"), **attributes) for y, content in sorted(items)]
    size, _ = label_size(attributes.get("class_"))
    bottom = 1e9 if floor is None else floor + DESCENT * size
    bounds = (x, -1e9, 1e9, bottom + 1e9)
    drawn = labels(items, bounds, obstacles=obstacles)
    if leaders_from is None:
        return drawn
    moved = [(leaders_from, label.y - 4, px - 3, py - 4)
             for label, (px, py, _, _) in zip(items, place_labels(items, bounds, obstacles=obstacles))
             if abs(py - label.y) > 2]
    return drawn + (segments(moved, class_="svg-axis") if moved else "")
def hit_areas(items, **attributes):
    """Clickable rectangles over a drawing, one ``<rect>`` each: ``items`` are
    ``(x, y, width, height, data_set)`` or ``(x, y, width, height, data_set, label)``.
    A click (or Enter) applies ``data_set`` ("rank=5", "rank=5,axis=tp") to the figure's
    state. Items with a label also get ``tabindex="0"``, ``role="button"`` and that
    ``aria-label``: give labels only when they are few (each is a tab stop); the same
    states must be reachable through a normal control anyway. Style them with a class
    (``svg-hit`` is transparent and shows a pointer)."""
    shared = _attrs(attributes)
    parts = []
    for item in items:
        x, y, w, h, data_set = item[:5]
        focus = f' tabindex="0" role="button" aria-label="{_escape(item[5])}"' if len(item) > 5 else ""
        parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" data-set="{_escape(data_set)}"{focus}{shared}/>')
    return "".join(parts)


def hit_strips(cells, key, **attributes):
    """Clickable cells that set the integer ``key``, as few ``<rect>``s as the drawing
    allows: ``cells`` are ``(x, y, width, height, value)``. Cells side by side in one row
    (same y and size, each starting where the one before ends) holding consecutive values
    make one strip, ``data-set-strip="key=first/count"``: a click sets ``key`` to
    ``first`` plus the index of the cell under the pointer (playbook.js). For drawings of
    hundreds of cells (Figure 17's ranks), which as ``hit_areas`` would be hundreds of
    elements to parse and lay out on every redraw. No tab stops: a control must reach
    the same values."""
    shared = _attrs(attributes)
    strips = []  # [x, y, cell width, height, first value, count]
    for x, y, w, h, value in cells:
        last = strips[-1] if strips else None
        if (last and last[1] == y and last[2] == w and last[3] == h and value == last[4] + last[5]
                and abs(last[0] + last[5] * w - x) < 1e-6):
            last[5] += 1
        else:
            strips.append([x, y, w, h, value, 1])
    return "".join(f'<rect x="{x:.1f}" y="{y:.1f}" width="{w * count:.1f}" height="{h:.1f}" '
                   f'data-set-strip="{_escape(key)}={first}/{count}"{shared}/>' for x, y, w, h, first, count in strips)


def group(parts, **attributes):
    """Markup made by this module wrapped in one ``<g>`` (e.g. to mute a whole panel by a class)."""
    return f"<g{_attrs(attributes)}>{''.join(parts)}</g>"


def arcs(items, *, head=5.0, **attributes):
    """Arrows that bow upwards from ``(x1, y)`` to ``(x2, y)`` peaking ``height`` above ``y``
    (items ``(x1, x2, y, height)``), head at the second point, as ONE ``<path>``: links
    between columns that must not run across what lies between them."""
    data = []
    for x1, x2, y, height in items:
        mx, cy = (x1 + x2) / 2, y - 2 * height  # control point: the curve peaks at y - height
        data.append(f"M{x1:.2f} {y:.2f}Q{mx:.2f} {cy:.2f} {x2:.2f} {y:.2f}" + _arrow_head(x2, y, x2 - mx, y - cy, head))
    return _path("".join(data), fill="none", **attributes)
def bows(items, *, bend=0.2, head=5.0, **attributes):
    """Arrows from ``(x1, y1)`` to ``(x2, y2)`` (items ``(x1, y1, x2, y2)``) curving to the left
    of their direction by ``bend`` times their length, head at the second point, as ONE
    ``<path>``: two arrows between the same points in opposite directions, or arrows along
    one line (an All-to-All's pairwise swaps), stay apart instead of drawing one line."""
    data = []
    for x1, y1, x2, y2 in items:
        dx, dy = x2 - x1, y2 - y1
        cx, cy = (x1 + x2) / 2 + 2 * bend * dy, (y1 + y2) / 2 - 2 * bend * dx  # the curve peaks bend x length off
        data.append(f"M{x1:.2f} {y1:.2f}Q{cx:.2f} {cy:.2f} {x2:.2f} {y2:.2f}" + _arrow_head(x2, y2, x2 - cx, y2 - cy, head))
    return _path("".join(data), fill="none", **attributes)
def spans(pairs, *, y, height, **attributes):
    """Bars on ONE row, ``pairs`` a flat sequence ``x0, x1, x0, x1, ...`` in pixels, as one
    ``<path>`` of horizontal strokes ``height`` thick (centred on ``y``; butt caps, so a bar
    is exactly x0..x1). Written by one string format for the whole row, like ``lanes``:
    a timeline with thousands of short stretches (Figure 18) stays cheap to build and to
    lay out. Give bars at least ~0.5 px of length or they vanish."""
    count = len(pairs) // 2
    data = (f"M%.1f {decimal(float(y))}H%.1f" * count) % tuple(pairs) if count else ""
    return _path(data, fill="none", stroke_width=decimal(float(height)), **attributes)
_TICK_STEPS = (1, 2, 2.5, 5)


def ticks(low, high, most=6):
    """Round values (1, 2, 2.5 or 5 x 10^k apart) from ``low`` to ``high``, at most ``most``
    of them: where a linear axis puts its labels (each ``<text>`` costs ~20 us of layout)."""
    span = high - low
    if span <= 0 or most < 2:
        return (low,)
    exponent = 10.0 ** _floor_log10(span / (most - 1))
    step = next((m * exponent for m in _TICK_STEPS if span / (m * exponent) <= most - 1), 10 * exponent)
    first = -(-low // step) * step
    return tuple(round(first + i * step, 12) for i in range(int((high - first) / step + 1e-9) + 1))


def _floor_log10(value):
    exponent = 0
    while value >= 10:
        value, exponent = value / 10, exponent + 1
    while value < 1:
        value, exponent = value * 10, exponent - 1
    return exponent


def time_axis(left, right, y, span_s, caption, most=6, *, width=None, compact=False):
    """A time axis for ``span_s`` seconds drawn from ``left`` to ``right`` at height ``y``:
    round ticks (``ticks``) labelled in ms, or in s from 10 s on, and ``caption`` (with
    ``{unit}`` standing for the unit) under its right end. 46 units tall. Given the drawing's
    ``width`` (and ``compact`` for an "svg-compact" one), a tick label that would stick out
    of the drawing is moved in (``place_labels``), as is one that would touch its neighbour."""
    unit, per_s = ("s", 1.0) if span_s >= 10 else ("ms", 1e3)
    scale = (right - left) / span_s
    marks = ticks(0, span_s * per_s, most)
    axis = segments([(left, y, right, y)] + [(left + t / per_s * scale, y, left + t / per_s * scale, y + 4) for t in marks],
                    class_="svg-axis")
    caption = text(right, y + 39, caption.format(unit=unit), class_="svg-label-soft", text_anchor="end")
    if width is None:
        return axis + texts(((left + t / per_s * scale, y + 19, decimal(t, 3)) for t in marks), class_="svg-label-soft",
                            text_anchor="middle") + caption
    marks = [Label(left + t / per_s * scale, y + 19, decimal(t, 3), anchor="middle", moves=()) for t in marks]
    return axis + labels(marks, (0, y, width, 24), compact=compact) + caption


# ---------------------------------------------------------------------------
# Labels that never collide: estimated text boxes, placed by one helper.

# Font size (drawing units) of each label class in playbook.css; "svg-compact" drawings
# draw svg-label and svg-label-soft at COMPACT_LABEL. Bold classes (600) run wider.
LABEL_SIZES = {"svg-title": 13.0, "svg-label": 12.0, "svg-label-soft": 11.0, "svg-bar-label": 11.0}
_BOLD_CLASSES = {"svg-title", "svg-bar-label", "svg-strong"}
# Advance widths in em, rounded up, of DejaVu Sans: what Chromium draws system-ui with on
# Debian, and among the widest sans-serif faces (Helvetica, Segoe UI and Roboto run
# narrower), so an estimate from it is conservative wherever the page is read.
_EM_WIDTHS = {
    0.34: " !',./:;I J[]\\|ijl\u2019\u2018\u00b7",
    0.42: "()\"-frt{}",
    0.54: "*?_`^cs z\u2013\u00b0",
    0.64: "#$0123456789abdeghknopquvxy\u00b5\u03bc\u03c3\u221a\u03c0\u03bb\u03c7\u03b8\u03b1\u03b2\u00e9\u00e8\u00fc\u00f6\u2022",
    0.70: "ABEFKLPRSTVXYZ\u03a3\u0394",
    0.79: "CDGHNOQU\u03a8&",
    0.84: "+<=>~\u00d7\u2212\u2264\u2265\u2192\u2190\u2191\u2193\u2248\u00b1\u221e\u2713\u2717\u25b2\u25bc\u201c\u201d",
    0.99: "mwMW%@\u2014\u2026",
}
_EM_WIDTH = {char: em for em, chars in _EM_WIDTHS.items() for char in chars}
_BOLD_WIDTH = 1.16  # weight 600 against 400, the widest ratio of the common characters
ASCENT, DESCENT = 0.95, 0.27  # em above and below the baseline that a text's box covers


def text_width(content, size, bold=False):
    """A conservative width, in drawing units, of ``content`` set at ``size``: never less
    than Chromium draws it (tests/browser/test_text_overlaps.py measures), a few percent
    more on ordinary text. An unknown character counts as 1 em; a combining mark (the bar
    of f\u0304) as none."""
    em = sum(_EM_WIDTH.get(char, 0.0 if combining(char) else 1.0) for char in str(content))
    return em * size * (_BOLD_WIDTH if bold else 1.0)


def wrap(content, width, size, bold=False, *, keep=None, even=False):
    """``content`` broken at spaces into lines no wider than ``width`` drawing units at
    ``size`` (by ``text_width``; a word wider than that has a line of its own). ``keep``:
    ``keep(before, word)`` true where ``word`` must stay on the line of the word before it
    (``with_its_unit``: "105 GB"). ``even``: the fewest lines, as even in length as they can
    be (no last line of one word). The figures' narrow layouts wrap their texts with it."""
    words = []
    for word in content.split(" "):
        if words and keep is not None and keep(words[-1], word):
            words[-1] += " " + word
        else:
            words.append(word)

    def greedy(limit):
        lines = []
        for word in words:
            if lines and text_width(f"{lines[-1]} {word}", size, bold) <= limit:
                lines[-1] += " " + word
            else:
                lines.append(word)
        return lines

    lines = greedy(width)
    while even and len(lines) > 1 and width > 0:  # narrow the measure while it takes no more lines
        width -= 4
        if len(greedy(width)) > len(lines):
            break
        lines = greedy(width)
    return lines


def with_its_unit(before, word):
    """``wrap``'s ``keep`` for a number and the word after it ("105 GB", "64 ranks")."""
    return before[-1:].isdigit()


def text_box(x, y, content, size, anchor="start", bold=False):
    """The box ``(x, y, width, height)`` a ``<text>`` at baseline ``(x, y)`` covers."""
    width = text_width(content, size, bold)
    left = x - {"start": 0.0, "middle": width / 2, "end": width}[anchor]
    return (left, y - ASCENT * size, width, (ASCENT + DESCENT) * size)


def label_size(class_, compact=False):
    """``(font size, bold)`` of a label drawn with CSS classes ``class_``."""
    names = str(class_ or "").split()
    size = next((LABEL_SIZES[name] for name in names if name in LABEL_SIZES), LABEL_SIZES["svg-label"])
    if compact and ("svg-label" in names or "svg-label-soft" in names):
        size = COMPACT_LABEL
    return size, any(name in _BOLD_CLASSES for name in names)


class Label:
    """A label to place: its preferred baseline point and anchor, then ``alternatives``
    (further ``(x, y, anchor)`` to try in order: a flip to the other side of a marker, a
    slot in the margin), then ``moves``: the directions ("up", "down", "left", "right")
    in which ``place_labels`` may slide it, nearest free place first, to stack it clear
    of the others. ``attributes`` are the ``<text>``'s (``class_``, ``style``...)."""

    __slots__ = ("x", "y", "text", "anchor", "alternatives", "moves", "attributes")

    def __init__(self, x, y, text, *, anchor="start", alternatives=(), moves=("up", "down"), **attributes):
        self.x, self.y, self.text, self.anchor = float(x), float(y), str(text), anchor
        self.alternatives, self.moves = tuple(alternatives), tuple(moves)
        self.attributes = {"class_": "svg-label-soft", **attributes}

    def __repr__(self):
        return f"Label({self.x:g}, {self.y:g}, {self.text!r}, anchor={self.anchor!r})"


_DIRECTIONS = {"up": (0, -1), "down": (0, 1), "left": (-1, 0), "right": (1, 0)}
_SLIDE_STEPS = 48  # how far (in quarter-ems) a label may slide before it gives up
_GAP = 1.0  # drawing units kept between two labels' boxes


def boxes_touch(a, b, gap=0.0):
    """Whether boxes ``(x, y, width, height)`` overlap, or come closer than ``gap``."""
    return _overlaps(a, b, gap)


def _overlaps(a, b, gap=0.0):
    return (a[0] < b[0] + b[2] + gap and b[0] < a[0] + a[2] + gap
            and a[1] < b[1] + b[3] + gap and b[1] < a[1] + a[3] + gap)


def _inside(box, bounds):
    x, y, w, h = bounds
    return box[0] >= x - 1e-9 and box[1] >= y - 1e-9 and box[0] + box[2] <= x + w + 1e-9 and box[1] + box[3] <= y + h + 1e-9


def _clamp(x, y, box, bounds):
    """Slide a baseline point (and its box) so that the box lies inside ``bounds`` (as far
    as it fits)."""
    bx, by, bw, bh = bounds
    dx = max(0.0, bx - box[0]) or min(0.0, bx + bw - box[0] - box[2])
    dy = max(0.0, by - box[1]) or min(0.0, by + bh - box[1] - box[3])
    return x + dx, y + dy, (box[0] + dx, box[1] + dy, box[2], box[3])


def place_labels(labels, bounds, *, obstacles=(), compact=False):
    """Where each label goes: ``[(x, y, anchor, box)]`` in the order given, which is the
    order of priority (earlier labels keep their preferred place).

    ``bounds`` ``(x, y, width, height)`` is the drawing (a height of ``math.inf``: open
    below); ``obstacles`` are boxes ``(x, y, width, height)`` no label may cover (bars,
    marks, text drawn otherwise). Text sizes come from each label's classes (``compact``:
    an "svg-compact" drawing). A label goes to its preferred point, moved inside the
    bounds if it would stick out; if its box would touch a placed label or an obstacle,
    to the first free alternative; else it slides from one of those points along its
    ``moves`` in quarter-em steps, to the nearest free place inside the bounds. Only if none is found does it stay at its
    (bounded) preferred point, overlapping."""
    taken = [tuple(map(float, box)) for box in obstacles]
    placed = []
    for label in labels:
        size, bold = label_size(label.attributes.get("class_"), compact)
        candidates = [(label.x, label.y, label.anchor)] + [(float(x), float(y), a) for x, y, a in label.alternatives]
        boxes = []
        for x, y, anchor in candidates:
            boxes.append(_clamp(x, y, text_box(x, y, label.text, size, anchor, bold), bounds) + (anchor,))
        spot = next((b for b in boxes if not any(_overlaps(b[2], t, _GAP) for t in taken)), None)
        step = size / 4
        for distance in range(1, _SLIDE_STEPS + 1) if spot is None else ():
            for (x, y, box, anchor), move in ((b, m) for b in boxes for m in label.moves):
                dx, dy = _DIRECTIONS[move]
                moved = (box[0] + dx * step * distance, box[1] + dy * step * distance, box[2], box[3])
                if _inside(moved, bounds) and not any(_overlaps(moved, t, _GAP) for t in taken):
                    spot = (x + dx * step * distance, y + dy * step * distance, moved, anchor)
                    break
            if spot:
                break
        spot = spot or boxes[0]
        x, y, box, anchor = spot
        taken.append(box)
        placed.append((x, y, anchor, box))
    return placed


def labels(items, bounds, *, obstacles=(), compact=False):
    """``place_labels`` drawn: one ``<text>`` per label, where it was placed."""
    out = []
    for label, (x, y, anchor, _) in zip(items, place_labels(items, bounds, obstacles=obstacles, compact=compact)):
        out.append(text(x, y, label.text, text_anchor=None if anchor == "start" else anchor, **label.attributes))
    return "".join(out)
