"""Helpers the figure tests share: render a figure at a state, read its readouts, and read
its SVG drawing back. (Helpers for svg.py's own path formats live in tests/test_svg.py.)"""
import xml.etree.ElementTree as ET

from figures import registry

SVG = "{http://www.w3.org/2000/svg}"


def render(number, **changes):
    """(state, view) of figure ``number`` at its default state with ``changes`` applied."""
    figure = registry()[number]
    state = figure.validate_state({**figure.default_state(), **changes})
    return state, figure.render(state)


def view(number, **changes):
    """Just the view of ``render(number, **changes)``."""
    return render(number, **changes)[1]


def readouts(view):
    """Readout key -> the Readout itself (text, value, colour)."""
    return {r.key: r for r in view.readouts}


def values(view):
    """Readout key -> its value."""
    return {r.key: r.value for r in view.readouts}


def texts(view):
    """The text of every <text> in the drawing, in document order."""
    return [t.text for t in ET.fromstring(view.svg).iter(SVG + "text")]


def paths(view, css_class, exact=False):
    """The <path> elements whose class list holds every class in ``css_class`` (with
    ``exact``: whose class attribute is ``css_class`` itself)."""
    want = set(css_class.split())
    return [p for p in ET.fromstring(view.svg).iter(SVG + "path")
            if (p.get("class") == css_class if exact else want <= set((p.get("class") or "").split()))]


def path_data(view, css_class, exact=False):
    """The ``d`` of every path ``paths(view, css_class, exact)`` finds."""
    return [p.get("d") for p in paths(view, css_class, exact)]


def subpaths(d):
    """Shapes one path draws: one per M (bar, box or segment); the empty "M0 0" draws none."""
    return 0 if d == "M0 0" else d.count("M")


def shapes(view, css_class):
    """Shapes drawn by all the paths of ``css_class``."""
    return sum(subpaths(d) for d in path_data(view, css_class))


def rank_targets(root, key="rank"):
    """Where a click sets ``key``, per value: ``{value: (x, y, width, height)}`` from a
    drawing's ``data-set="key=N"`` rects and ``data-set-strip="key=first/count"`` strips
    (svg.hit_strips: ``count`` equal cells side by side)."""
    targets = {}
    for rect in root.iter(f"{SVG}rect"):
        x, y, w, h = (float(rect.get(name)) for name in ("x", "y", "width", "height"))
        if (single := rect.get("data-set") or "").startswith(key + "="):
            targets[int(single.split("=")[1])] = (x, y, w, h)
        elif (strip := rect.get("data-set-strip") or "").startswith(key + "="):
            first, count = map(int, strip.split("=")[1].split("/"))
            for i in range(count):
                assert first + i not in targets
                targets[first + i] = (x + i * w / count, y, w / count, h)
    return targets



def text_boxes(view):
    """``[(text, (x, y, width, height))]``: each <text> of the drawing with the box
    ``svg.text_box`` estimates for it (the size its classes give it)."""
    from figures import svg

    root = ET.fromstring(view.svg)
    compact = "svg-compact" in (root.get("class") or "").split()
    found = []
    for node in root.iter(SVG + "text"):
        size, bold = svg.label_size(node.get("class"), compact)
        box = svg.text_box(float(node.get("x")), float(node.get("y")), node.text or "", size,
                           node.get("text-anchor") or "start", bold)
        found.append((node.text, box))
    return found


def rectangles(view, css_class):
    """The rectangles ``svg.boxes`` drew in the paths of ``css_class``, as (x, y, width, height)."""
    import re

    found = []
    for d in path_data(view, css_class):
        for x, y, w, h in re.findall(r"M(-?[\d.]+) (-?[\d.]+)h(-?[\d.]+)v(-?[\d.]+)h-?[\d.]+z", d):
            found.append((float(x), float(y), float(w), float(h)))
    return found


def overlap(a, b):
    """Whether two boxes (x, y, width, height) share any area."""
    return a[0] < b[0] + b[2] and b[0] < a[0] + a[2] and a[1] < b[1] + b[3] and b[1] < a[1] + a[3]


def inside(box, view):
    """Whether a box lies within the drawing's viewBox (give or take the 0.05 units that
    writing x and y to one decimal may move it)."""
    _, _, width, height = map(float, ET.fromstring(view.svg).get("viewBox").split())
    return box[0] >= -0.1 and box[1] >= -0.1 and box[0] + box[2] <= width + 0.1 and box[1] + box[3] <= height + 0.1


def _strokes(path):
    """The straight pieces ``(x1, y1, x2, y2)`` of a path written with absolute M and L only
    (svg.segments, svg.polyline); none for any other path."""
    import re

    d = path.get("d") or ""
    if path.get("transform") or re.search(r"[^MLml\d.\s-]", d) or re.search(r"[ml]", d):
        return []
    pieces, last = [], None
    for command, x, y in re.findall(r"([ML])\s*(-?[\d.]+)[ ,](-?[\d.]+)", d):
        point = (float(x), float(y))
        if command == "L" and last is not None:
            pieces.append((*last, *point))
        last = point
    return pieces


def _crosses(segment, box):
    """Whether a straight segment passes through the inside of ``box`` (x, y, width, height)
    (Liang-Barsky clipping)."""
    x1, y1, x2, y2 = segment
    low, high = 0.0, 1.0
    dx, dy = x2 - x1, y2 - y1
    for p, q in ((-dx, x1 - box[0]), (dx, box[0] + box[2] - x1), (-dy, y1 - box[1]), (dy, box[1] + box[3] - y1)):
        if p == 0:
            if q < 0:
                return False
        else:
            t = q / p
            if p < 0:
                low = max(low, t)
            else:
                high = min(high, t)
            if low > high:
                return False
    return True


def _circle_boxes(path):
    """The bounding boxes of the circles svg.circles drew in ``path``."""
    import re

    return [(float(x), float(y) - float(r), 2 * float(r), 2 * float(r))
            for x, y, r in re.findall(r"M(-?[\d.]+) (-?[\d.]+)a([\d.]+) [\d.]+ 0 1 0", path.get("d") or "")]


def marks_through_labels(view, skip=("svg-axis",), inset=1.5):
    """``[(text, class of the line or marker)]``: every label that a drawn line crosses, or a
    marker (a circle) covers, its box taken ``inset`` units in from each side (a line may
    touch a label's edge). Paths of a class in ``skip`` (grid lines) are left out."""
    from figures import svg

    root = ET.fromstring(view.svg)
    compact = "svg-compact" in (root.get("class") or "").split()
    marks = []
    for path in root.iter(SVG + "path"):
        css = path.get("class") or ""
        if set(css.split()) & set(skip):
            continue
        marks += [(css, "line", piece) for piece in _strokes(path)]
        marks += [(css, "circle", box) for box in _circle_boxes(path)]
    found = []
    for node in root.iter(SVG + "text"):
        size, bold = svg.label_size(node.get("class"), compact)
        x, y, w, h = svg.text_box(float(node.get("x")), float(node.get("y")), node.text or "", size,
                                  node.get("text-anchor") or "start", bold)
        box = (x + inset, y + inset, w - 2 * inset, h - 2 * inset)
        for css, kind, mark in marks:
            hit = _crosses(mark, box) if kind == "line" else overlap(mark, box)
            if hit:
                found.append((node.text, css))
    return found


def placed_text_boxes(view):
    """``text_boxes``, each moved by the ``translate(x y)`` of the groups it sits in (a short
    layout sets a column beside another by translating it)."""
    import re

    from figures import svg

    root = ET.fromstring(view.svg)
    compact = "svg-compact" in (root.get("class") or "").split()
    found = []

    def walk(node, dx, dy):
        moved = re.match(r"translate\(([-\d.]+)[ ,]+([-\d.]+)\)$", node.get("transform") or "")
        if moved:
            dx, dy = dx + float(moved.group(1)), dy + float(moved.group(2))
        if node.tag == SVG + "text":
            size, bold = svg.label_size(node.get("class"), compact)
            found.append((node.text, svg.text_box(float(node.get("x")) + dx, float(node.get("y")) + dy, node.text or "",
                                                  size, node.get("text-anchor") or "start", bold)))
        for child in node:
            walk(child, dx, dy)

    walk(root, 0.0, 0.0)
    return found


def short_layout_faults(figure, state):
    """What a short view (a phone on its side) of ``state`` gets wrong, and its height on
    screen at its min-width: ``(px, problems)``. Problems: a text outside the drawing, two
    texts touching that the wide view keeps apart, a min-width wider than the column at
    844 px, or anything the wide view says that the short one does not."""
    import re

    from figures import svg

    short, wide = figure.render(state, short=True), figure.render(state)
    root = ET.fromstring(short.svg)
    width, height = map(float, root.get("viewBox").split()[2:])
    min_width = float(re.search(r"min-width:([\d.]+)px", root.get("style")).group(1))
    problems = []
    if min_width > 730:
        problems.append(f"min-width {min_width}")
    if (short.readouts, short.note, short.alt, short.html) != (wide.readouts, wide.note, wide.alt, wide.html):
        problems.append("says other things than the wide view")
    boxes = placed_text_boxes(short)
    problems += [f"outside: {t}" for t, (x, y, w, h) in boxes if x < -0.5 or x + w > width + 0.5 or y < -0.5 or y + h > height + 0.5]
    # (each box trimmed by half a unit a side: two lines of a paragraph 14 units apart, whose
    # estimated 12 px boxes are 14.6 tall, do not count)
    trim = lambda box: (box[0] + 0.5, box[1] + 0.5, box[2] - 1, box[3] - 1)  # noqa: E731
    wide_boxes = placed_text_boxes(wide)
    kept_apart = {(a, b) for i, (a, box) in enumerate(wide_boxes) for b, other in wide_boxes[i + 1:]
                  if svg.boxes_touch(trim(box), trim(other))}
    problems += [f"touching: {a} / {b}" for i, (a, box) in enumerate(boxes) for b, other in boxes[i + 1:]
                 if svg.boxes_touch(trim(box), trim(other)) and (a, b) not in kept_apart]
    return height * min_width / width, problems


def sweep_states(number, randoms=200):
    """Figure ``number`` and its states worth checking: the default, its tries, every value
    of each control, and ``randoms`` random states (seeded by the number)."""
    import random

    figure = registry()[number]
    base = figure.default_state()
    states = [base] + [figure.validate_state(values) for _, values in figure.tries]
    states += [figure.validate_state({**base, c.key: v}) for c in figure.controls for v in getattr(c, "values", ())]
    pick = random.Random(number)
    states += [figure.validate_state({c.key: pick.choice(c.values) for c in figure.controls if hasattr(c, "values")})
               for _ in range(randoms)]
    return figure, states
