"""The one place SVG markup is written. Figures compose these helpers; colours come
from CSS classes (``site/static/playbook.css``) so diagrams follow the light/dark theme."""
from html import escape
from itertools import starmap


def _attrs(attributes):
    parts = []
    for name, value in attributes.items():
        if value is None or value is False:
            continue
        name = name.rstrip("_").replace("_", "-")
        parts.append(f' {name}="{escape(_num(value) if isinstance(value, float) else str(value))}"')
    return "".join(parts)


def _num(value):
    """Short, stable number text for coordinates (two decimals are sub-pixel)."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def document(width, height, body, *, label, class_=None):
    """A complete, accessible ``<svg>`` scaled by its viewBox."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_num(float(width))} {_num(float(height))}"'
        f' role="img"{_attrs({"aria-label": label, "class": class_})}>'
        f"<title>{escape(label)}</title>{''.join(body)}</svg>"
    )


def element(tag, content="", **attributes):
    inner = escape(content) if isinstance(content, str) else "".join(content)
    return f"<{tag}{_attrs(attributes)}>{inner}</{tag}>" if inner else f"<{tag}{_attrs(attributes)}/>"


def rect(x, y, width, height, **attributes):
    return element("rect", x=float(x), y=float(y), width=float(width), height=float(height), **attributes)


def line(x1, y1, x2, y2, **attributes):
    return element("line", x1=float(x1), y1=float(y1), x2=float(x2), y2=float(y2), **attributes)


def text(x, y, content, **attributes):
    return element("text", str(content), x=float(x), y=float(y), **attributes)


def group(children, **attributes):
    return element("g", list(children), **attributes)


def lanes(spans, *, x, y, x_scale, lane_height, fill_ratio=0.9, **attributes):
    """Many bars on horizontal lanes as ONE ``<path>``, the way a Gantt chart needs them.

    ``spans`` are integer ``(start, length, lane)`` triples in the caller's own units
    (for example ticks of a clock); the group's transform maps them to pixels. Each bar
    is a stroked segment ``M start lane.5 h length`` whose stroke fills ``fill_ratio`` of
    its lane, so thousands of bars stay one DOM node with a short ``d`` string: that is
    what keeps a live re-render within a frame.
    """
    data = "".join(starmap("M{0} {2}.5h{1}".format, spans))  # C-level loop: spans can number 10^4
    transform = f"translate({_num(float(x))} {_num(float(y))}) scale({x_scale:.6g} {_num(float(lane_height))})"
    return element(
        "path", d=data or "M0 0", transform=transform, fill="none", stroke_width=fill_ratio, **attributes
    )
