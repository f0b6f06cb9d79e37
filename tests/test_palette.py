"""One visual language (issue 33): the palette keeps its own rules, and every figure keeps to
the palette. docs/PALETTE.md explains each rule and its threshold.

The palette's rules, in both themes: any two keys differ (CIEDE2000); keys drawn in the same
figure differ more, also to a simulated dichromat; only the "bad" keys are red; every colour
stands out from the page; text drawn on a colour reads.

The figures' rules, checked on every figure's views (the default state, each control at each
of its values, and random states, rendered in CPython): every colour class or colour variable
is a palette key; every readout swatch is drawn in that view; a swatch's label speaks of its
key's meaning; no two swatches of one view share a colour; colour words in the text (captions,
drawings, notes, the prose around a figure) name colours the figure draws.
"""
import functools
import itertools
import random
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from figures import palette, registry
from tests.colour_science import ciede2000, delta_e, lab, lch

ROOT = Path(__file__).resolve().parents[1]
SVG = "{http://www.w3.org/2000/svg}"
THEMES = ("light", "dark")
FIGURES = sorted(registry().values(), key=lambda f: f.number)

# Thresholds, in CIEDE2000 units (docs/PALETTE.md: why these).
ANY_TWO_KEYS = 9.0  # every pair of keys, in each theme
DRAWN_TOGETHER = 13.0  # two keys drawn in one view
DICHROMAT = {"protanopia": 5.0, "deuteranopia": 5.0, "tritanopia": 4.0}  # two keys of one view, simulated
STANDS_OUT = 15.0  # a colour against the paper and the figure panel
HATCH_STANDS_OUT = 5.0  # waiting's grey may sit close to the page: its hatch lines must not
TEXT_CONTRAST = 4.5  # WCAG 2.x AA for text, on every colour and chunk tint
RED_HUES, RED_CHROMA = ((350.0, 360.0), (0.0, 55.0)), 20.0  # CIELAB hue band and chroma of "reddish"

COLOUR_CLASS = re.compile(r"^(fill|stroke|bg|on)-(.+)$")
COLOUR_VARIABLE = re.compile(r"var\(--c-([a-z0-9_]+)\)")
HEX = re.compile(r"#[0-9a-fA-F]{6}\b")
# Words a reader uses for a colour; a figure's text may use one only for a colour it draws.
COLOUR_WORDS = ("red", "crimson", "vermillion", "orange", "yellow", "khaki", "sand", "olive", "lime", "green",
                "mint", "teal", "turquoise", "cyan", "blue", "sky", "indigo", "violet", "purple", "lavender",
                "lilac", "plum", "pink", "magenta", "mauve", "brown", "tan", "taupe", "ochre", "peach", "apricot",
                "slate", "grey", "gray", "black", "white", "hatched")
NEUTRAL_WORDS = {"grey", "gray"}  # the page's own greys (svg-neutral-*, svg-lane ...) may be called grey


def _value(colour, theme):
    return getattr(colour, theme)


def _reddish(hex_colour):
    _, chroma, hue = lch(hex_colour)
    return chroma >= RED_CHROMA and any(low <= hue < high for low, high in RED_HUES)


# ---- the palette by itself -------------------------------------------------------------------

def test_the_colour_science_reproduces_published_values():
    """CIEDE2000 against Sharma, Wu & Dalal (2005) Table 1 (pairs 1, 7, 17, 25, 34), and
    sRGB red and white in CIELAB (D65)."""
    pairs = [((50, 2.6772, -79.7751), (50, 0, -82.7485), 2.0425), ((50, 0, 0), (50, -1, 2), 2.3669),
             ((50, 2.5, 0), (73, 25, -18), 27.1492), ((60.2574, -34.0099, 36.2677), (60.4626, -34.1751, 39.4387), 1.2644),
             ((22.7233, 20.0904, -46.6940), (23.0331, 14.9730, -42.5619), 2.0373)]
    for lab1, lab2, expected in pairs:
        assert ciede2000(lab1, lab2) == pytest.approx(expected, abs=5e-5)
        assert ciede2000(lab2, lab1) == pytest.approx(expected, abs=5e-5)
    assert lab("#ff0000") == pytest.approx((53.24, 80.09, 67.20), abs=0.01)
    assert lab("#ffffff") == pytest.approx((100, 0, 0), abs=0.01)
    assert lab("#808080", "deuteranopia") == pytest.approx(lab("#808080"), abs=0.01)  # greys stay grey


def test_keys_are_meanings_with_one_colour_each():
    """Each key names a meaning in a family, and owns its colour in both themes: no light value
    twice (playbook.js maps light to dark by value), no dark value twice."""
    colours = list(palette.COLOURS.values())
    for theme in THEMES:
        values = [_value(c, theme) for c in colours]
        assert len(set(values)) == len(values), f"two keys share a {theme} colour"
        assert all(re.fullmatch(r"#[0-9a-f]{6}", v) for v in values)
    for c in colours:
        assert c.family in palette.FAMILIES and c.meaning and c.names and c.words, c.key
        assert set(c.names) <= set(COLOUR_WORDS), c.key
    assert palette.dark_map() == {c.light: c.dark for c in colours}


@pytest.mark.parametrize("theme", THEMES)
def test_any_two_keys_differ(theme):
    close = [(a.key, b.key, round(delta_e(_value(a, theme), _value(b, theme)), 1))
             for a, b in itertools.combinations(palette.COLOURS.values(), 2)
             if delta_e(_value(a, theme), _value(b, theme)) < ANY_TWO_KEYS]
    assert not close, f"keys closer than {ANY_TWO_KEYS} CIEDE2000 ({theme}): {close}"


@pytest.mark.parametrize("theme", THEMES)
def test_only_bad_keys_are_red(theme):
    """Red means bad, and nothing else: a reddish hue (CIELAB hue 350-55 degrees at chroma 20 or
    more) only on the "bad" family, and every bad key is red. The chunk tints of the passes too."""
    for c in palette.COLOURS.values():
        assert _reddish(_value(c, theme)) == (c.family == "bad"), f"{c.key} ({theme}: {_value(c, theme)})"
    for key in palette.CHUNKED:
        for chunk in range(1, len(palette.CHUNK_SHARES) + 1):
            assert not _reddish(palette.chunk_colour(key, chunk, THEMES.index(theme)))


@pytest.mark.parametrize("theme", THEMES)
def test_every_colour_stands_out_from_the_page(theme):
    index = THEMES.index(theme)
    for c in palette.COLOURS.values():
        for page in (palette.PAPER[index], palette.PANEL[index]):
            needed = HATCH_STANDS_OUT if c.key == "idle" else STANDS_OUT
            assert delta_e(_value(c, theme), page) >= needed, f"{c.key} ({theme}) on {page}"
    for page in (palette.PAPER[index], palette.PANEL[index]):  # waiting's hatch lines
        assert delta_e(palette.IDLE_HATCH[index], page) >= STANDS_OUT
    assert delta_e(palette.IDLE_HATCH[index], palette.COLOURS["idle"].dark if index else palette.COLOURS["idle"].light) >= 10


def test_the_page_colours_the_palette_measures_against_are_the_stylesheets():
    css = (ROOT / "site/static/playbook.css").read_text()
    light, dark = css.split("@media (prefers-color-scheme: dark)", 1)
    for block, index in ((light, 0), (dark, 1)):
        assert re.search(r"--paper:\s*([#0-9a-f]+)", block).group(1) == palette.PAPER[index]
        assert re.search(r"--panel:\s*([#0-9a-f]+)", block).group(1) == palette.PANEL[index]


@pytest.mark.parametrize("theme", THEMES)
def test_text_drawn_on_a_colour_reads(theme):
    index = THEMES.index(theme)
    for c in palette.COLOURS.values():
        value = _value(c, theme)
        assert palette.contrast(value, palette.on(value)) >= TEXT_CONTRAST, c.key
    for key in palette.CHUNKED:
        for chunk in range(1, len(palette.CHUNK_SHARES) + 1):
            tint = palette.chunk_colour(key, chunk, index)
            assert palette.contrast(tint, palette.on(tint)) >= TEXT_CONTRAST, (key, chunk)


def test_the_stylesheet_has_every_class_and_the_hatch():
    css = palette.css()
    for key in palette.COLOURS:
        for part in (f"--c-{key}:", f"--on-{key}:", f".fill-{key}{{", f".stroke-{key}{{", f".bg-{key}{{", f".on-{key}{{"):
            assert part in css, part
    # waiting is hatched, in SVG (the page's one pattern) and in HTML swatches
    assert f".fill-idle{{fill:url(#{palette.IDLE_PATTERN})" in css and "repeating-linear-gradient" in css
    defs = ET.fromstring(palette.svg_defs())
    assert [p.get("id") for p in defs.iter(f"{SVG}pattern")] == [palette.IDLE_PATTERN]
    assert css.index(".fill-idle{fill:var(") < css.index(".fill-idle{fill:url(")  # the hatch wins


def test_the_built_page_holds_the_pattern_once_outside_every_figure():
    import build
    page = (ROOT / "site/templates/page.html").read_text()
    assert "{{ palette_defs | safe }}" in page.split("<body>", 1)[1].split("<main", 1)[0]
    assert "palette_defs=palette.svg_defs()" in (ROOT / "build.py").read_text()
    assert build  # the builder imports (the page test builds it whole)


# ---- the figures against the palette ---------------------------------------------------------

def _states(figure):
    """The default state, each control moved to each of its values, and ten random states."""
    default = figure.default_state()
    states = [default]
    for control in figure.stateful_controls:
        states += [figure.validate_state({**default, control.key: value}) for value in control.values]
    rng = random.Random(figure.number)
    for _ in range(10):
        states.append(figure.validate_state({c.key: rng.choice(c.values) for c in figure.stateful_controls}))
    unique = {repr(sorted(s.items())): s for s in states}
    return list(unique.values())


@functools.lru_cache(maxsize=None)
def views(number):
    figure = registry()[number]
    return tuple((state, figure.render(state)) for state in _states(figure))


def _draws(element):
    """Whether a drawing element paints anything: a path with a shape, text with words."""
    tag = element.tag.replace(SVG, "")
    if tag == "path":
        return (element.get("d") or "M0 0") != "M0 0"
    if tag == "text":
        return bool("".join(element.itertext()).strip())
    if tag == "rect":
        return float(element.get("width") or 0) > 0 and float(element.get("height") or 0) > 0
    return tag in ("circle", "line", "polyline", "polygon", "ellipse")


def text_colours(view):
    """The palette keys a drawing writes text in (a <text> with a colour class or variable)."""
    keys = set()
    for element in ET.fromstring(view.svg).iter(f"{SVG}text") if view.svg else ():
        keys |= {m.group(2) for css in (element.get("class") or "").split() for m in [COLOUR_CLASS.match(css)]
                 if m and m.group(1) == "fill"}
        keys |= set(COLOUR_VARIABLE.findall(element.get("style") or ""))
    return keys


def colour_uses(view):
    """(every palette key the view names, the keys its drawing paints with, the CSS colour
    classes it uses that are not palette keys)."""
    named, painted, unknown = set(), set(), set()
    if view.svg:
        for element in ET.fromstring(view.svg).iter():
            paints = set()  # keys this element paints with (fill-, stroke-, a --c- variable); on-: its text's ink
            for css in (element.get("class") or "").split():
                match = COLOUR_CLASS.match(css)
                if not match:
                    continue
                if match.group(2) not in palette.COLOURS:
                    unknown.add(css)
                elif match.group(1) == "on":
                    named.add(match.group(2))
                else:
                    paints.add(match.group(2))
            for key in COLOUR_VARIABLE.findall(element.get("style") or ""):
                (paints if key in palette.COLOURS else unknown).add(key)
            named |= paints
            if paints and _draws(element):
                painted |= paints
    if view.plot:
        by_light = {c.light: c.key for c in palette.COLOURS.values()}
        for value in _plot_colours(view.plot):
            if value.lower() in by_light:
                named.add(by_light[value.lower()])
                painted.add(by_light[value.lower()])
            else:
                unknown.add(value)
    if view.html:
        for classes in re.findall(r'class="([^"]*)"', view.html):
            for css in classes.split():
                match = COLOUR_CLASS.match(css)
                if match:
                    (named.add(match.group(2)) if match.group(2) in palette.COLOURS else unknown.add(css))
    return named, painted, unknown


def _plot_colours(node, key=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _plot_colours(v, k)
    elif isinstance(node, (list, tuple)):
        for v in node:
            yield from _plot_colours(v, key)
    elif isinstance(node, str) and re.search("colou?r$", key, re.I) and HEX.fullmatch(node):
        yield node


def _swatches(view):
    return [r for r in view.readouts if r.color is not None]


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f.anchor)
def test_every_colour_a_figure_names_is_a_palette_key(figure):
    for state, view in views(figure.number):
        _, _, unknown = colour_uses(view)
        assert not unknown, f"Figure {figure.number} at {state}: not palette keys: {sorted(unknown)}"
        for readout in _swatches(view):
            assert readout.color in palette.COLOURS, (figure.number, readout.key, readout.color)


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f.anchor)
def test_every_readout_swatch_is_drawn_in_its_view(figure):
    """A swatch is a legend entry: its colour must be somewhere in the drawing it describes."""
    for state, view in views(figure.number):
        _, painted, _ = colour_uses(view)
        missing = [(r.key, r.color) for r in _swatches(view) if r.color not in painted]
        assert not missing, f"Figure {figure.number} at {state}: swatches not in the drawing: {missing}"


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f.anchor)
def test_no_two_swatches_of_a_view_share_a_colour(figure):
    for state, view in views(figure.number):
        colours = [r.color for r in _swatches(view)]
        assert len(colours) == len(set(colours)), f"Figure {figure.number} at {state}: {colours}"


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f.anchor)
def test_a_swatch_label_speaks_of_its_keys_meaning(figure):
    """Keys by meaning: the readout a swatch labels says what the key means (one of its words,
    in the label, the readout's key or what it reads out), e.g. "backward" for backward,
    "exposed" or "wait" for exposed, "AllReduce" or "sent" for comm."""
    for state, view in views(figure.number):
        for r in _swatches(view):
            said = f"{r.label} {r.key} {r.text}".lower()
            words = palette.COLOURS[r.color].words
            assert any(w in said for w in words), f"Figure {figure.number}: {r.key!r} ({r.label!r}) drawn as {r.color}"


@pytest.mark.parametrize("theme", THEMES)
def test_keys_drawn_together_differ_more_also_to_a_dichromat(theme):
    pairs = {}
    for figure in FIGURES:
        for _, view in views(figure.number):
            _, painted, _ = colour_uses(view)
            for a, b in itertools.combinations(sorted(painted), 2):
                pairs.setdefault((a, b), figure.number)
    assert len(pairs) > 100  # the check sees the figures (all of them draw in palette colours)
    failures = []
    for (a, b), number in pairs.items():
        colour_a, colour_b = _value(palette.COLOURS[a], theme), _value(palette.COLOURS[b], theme)
        if delta_e(colour_a, colour_b) < DRAWN_TOGETHER:
            failures.append((number, a, b, "normal", round(delta_e(colour_a, colour_b), 1)))
        for deficiency, needed in DICHROMAT.items():
            if delta_e(colour_a, colour_b, deficiency) < needed:
                failures.append((number, a, b, deficiency, round(delta_e(colour_a, colour_b, deficiency), 1)))
    assert not failures, failures


@pytest.mark.parametrize("theme", THEMES)
def test_text_written_in_a_colour_reads_on_the_page(theme):
    """A verdict written in a key's colour (Figures 04, 07, 21, 22 write what fails in red)
    contrasts 4.5:1 with the paper and the panel."""
    index = THEMES.index(theme)
    written = {key for figure in FIGURES for _, view in views(figure.number) for key in text_colours(view)}
    assert "warn" in written
    for key in written:
        for page in (palette.PAPER[index], palette.PANEL[index]):
            assert palette.contrast(_value(palette.COLOURS[key], theme), page) >= TEXT_CONTRAST, (key, theme, page)


# ---- colour words ----------------------------------------------------------------------------

def _colour_words(text):
    return {w for w in COLOUR_WORDS if re.search(rf"\b{w}\b", text, re.I)}


def _figure_words(number):
    """The colour words a figure's text may use: the names of the keys it draws in any view,
    and "grey" if it draws the page's neutral greys."""
    allowed = set()
    for _, view in views(number):
        named, painted, _ = colour_uses(view)
        for key in painted | named:
            allowed |= set(palette.COLOURS[key].names)
        if view.svg and re.search(r'class="[^"]*\bsvg-(neutral|lane|axis|ink-stroke)', view.svg):
            allowed |= NEUTRAL_WORDS
    return allowed


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f.anchor)
def test_colour_words_in_a_figure_name_colours_it_draws(figure):
    allowed = _figure_words(figure.number)
    texts = [figure.caption]
    for _, view in views(figure.number):
        texts += [view.note, view.alt] + [r.label for r in view.readouts]
        if view.svg:
            texts += ["".join(t.itertext()) for t in ET.fromstring(view.svg).iter(f"{SVG}text")]
    wrong = {w for text in texts for w in _colour_words(text or "")} - allowed
    assert not wrong, f"Figure {figure.number} speaks of {sorted(wrong)} but draws none (it may say {sorted(allowed)})"


@pytest.mark.parametrize("path", sorted((ROOT / "site/content").glob("*.md")), ids=lambda p: p.name)
def test_colour_words_in_the_prose_name_colours_of_its_figures(path):
    """A chapter's colour words describe the figures it holds or quotes."""
    text = path.read_text()
    numbers = {int(n) for n in re.findall(r":::\{figure\}\s*(\d+)", text)}
    numbers |= {int(n) for n in re.findall(r"\{\{(\d+)\.", text)}
    allowed = set().union(*(_figure_words(n) for n in numbers)) if numbers else set()
    wrong = _colour_words(re.sub(r"`[^`]*`", "", text)) - allowed
    assert not wrong, f"{path.name} speaks of {sorted(wrong)}; its figures {sorted(numbers)} draw {sorted(allowed)}"


# ---- the bugs issue 33 names -----------------------------------------------------------------

def _paths(view, css):
    return [p for p in ET.fromstring(view.svg).iter(f"{SVG}path") if css in (p.get("class") or "").split()]


def test_figure_05_draws_the_backward_pass_as_compute_not_red():
    _, view = views(5)[0]
    assert _paths(view, "stroke-backward") and not _reddish(palette.COLOURS["backward"].light)
    assert {r.key: r.color for r in view.readouts}["backward_s"] == "backward"
    assert palette.COLOURS["backward"].family == "compute" and palette.COLOURS["exposed"].family == "bad"


def test_figure_06_draws_its_gemm_in_the_compute_slate():
    _, view = views(6)[0]
    assert _paths(view, "fill-compute") and not _paths(view, "fill-forward")


@pytest.mark.parametrize("theme", THEMES)
def test_figure_21_compute_and_exposed_dp_are_far_apart(theme):
    from figures import fig21_planner_lab as fig21
    compute, dp = fig21.TIME_COLOURS["compute"], fig21.TIME_COLOURS["dp_comm"]
    assert (compute, dp) == ("compute", "dp")
    assert delta_e(_value(palette.COLOURS[compute], theme), _value(palette.COLOURS[dp], theme)) >= DRAWN_TOGETHER
    assert palette.COLOURS[compute].family == "compute" and palette.COLOURS[dp].family == "axis"
    assert fig21.TIME_COLOURS["recompute"] == "forward" and fig21.TIME_COLOURS["bubble"] == "idle"


def test_figure_13_total_and_attention_scores_do_not_share_a_colour():
    for _, view in views(13):
        shown = {r.key: r.color for r in view.readouts}
        assert shown["activation_bytes_per_layer"] != shown["attention_scores_bytes"]


def test_figure_18_swatches_are_in_its_drawing():
    for state, view in views(18):
        _, painted, _ = colour_uses(view)
        for r in _swatches(view):
            assert r.color in painted, (state, r.key)
        # each lane's strategy hue is drawn beside its name, whether or not it ever flies hidden
        for axis in ("dp", "fsdp", "tp", "pp", "cp", "ep"):
            if state[axis] and any(r.key == f"exposed_{axis}_s" for r in view.readouts):
                from figures.fig18_comm_timeline import COLOUR
                assert COLOUR[axis] in painted


def test_pipeline_passes_take_their_compute_keys():
    """Figure 15's Gantt: every F, B and W bar is stroked in its pass's key, numerals in its ink;
    the lanes behind them (the bubble) are waiting's hatch."""
    state = {"P": 8, "m": 8, "v": 2}
    view = registry()[15].render(registry()[15].validate_state(state))
    for kind, key in (("F", "forward"), ("B", "backward"), ("W", "weight")):
        bars = _paths(view, f"op-{kind}")
        assert bars and all(f"stroke-{key}" in p.get("class").split() for p in bars)
    labels = _paths(view, "op-label")
    assert labels and all(any(c.startswith("on-") for c in p.get("class").split()) for p in labels)
    assert _paths(view, "fill-idle")


def test_figure_timelines_use_compute_waiting_and_bad_by_meaning():
    """The timelines: Figure 18's compute lane (forward, backward, bubble, optimizer), Figure 09's
    compute and waiting, Figure 24's compute, waiting, moving and parked ranks."""
    from figures import fig18_comm_timeline as fig18
    assert fig18.KIND_FILL == {"forward": "forward", "backward": "backward", "bubble": "idle", "optimizer": "optimizer_step"}
    _, view = views(9)[0]
    assert _paths(view, "stroke-forward") and _paths(view, "stroke-backward") and _paths(view, "stroke-exposed")
    _, view = views(24)[0]
    assert _paths(view, "fill-compute") and _paths(view, "fill-idle") and _paths(view, "fill-comm")


# ---- the legend page ---------------------------------------------------------------------------

def test_the_legend_page_lists_every_key_with_its_values_and_figures():
    doc = (ROOT / "docs/PALETTE.md").read_text()
    used = {key: set() for key in palette.COLOURS}
    for figure in FIGURES:
        for _, view in views(figure.number):
            named, painted, _ = colour_uses(view)
            for key in named | painted | {r.color for r in _swatches(view)}:
                used[key].add(figure.number)
    rows = {line.split("|")[1].strip(" `"): line for line in doc.splitlines() if line.startswith("| `")}
    assert set(rows) == set(palette.COLOURS), set(rows) ^ set(palette.COLOURS)
    for key, colour in palette.COLOURS.items():
        row = rows[key]
        assert colour.light in row and colour.dark in row, key
        listed = {int(n) for n in re.findall(r"\b(\d\d)\b", row.split("|")[-2])}
        assert listed == used[key], f"{key}: the table lists Figures {sorted(listed)}, the views use {sorted(used[key])}"
    for name, value in (("ANY_TWO_KEYS", ANY_TWO_KEYS), ("DRAWN_TOGETHER", DRAWN_TOGETHER), ("STANDS_OUT", STANDS_OUT)):
        assert f"{value:g}" in doc, name
