"""The figure contract's typed fields, cross-control constraints and error reporting."""
import pytest

from figures.contract import Figure, Number, Slider, View, Readout, nearby_states


def test_a_number_field_reads_what_a_reader_types():
    gpus = Number("gpus", "GPUs", min=1, max=1_000_000, default=1024, integer=True)
    assert [gpus.coerce(t) for t in ("1024", " 2,048 ", "16 384", "1e3", "4k", 8.0)] == [1024, 2048, 16384, 1000, 4000, 8]
    params = Number("params", "Parameters", min=1e6, max=1e13, default=7e9)
    assert params.coerce("7B") == 7_000_000_000 and params.coerce("1.5T") == 1.5e12 and params.coerce("175e9") == 175e9


@pytest.mark.parametrize("text, message", [
    ("", "GPUs: enter a number"), ("abc", "GPUs: 'abc' is not a number"), ("0", "GPUs: at least 1"),
    ("1e30", "GPUs: at most 16,384"), ("2.5", "GPUs: a whole number"), ("nan", "GPUs: enter a finite number"),
    ("inf", "GPUs: enter a finite number"), (True, "GPUs: enter a number"),
])
def test_a_number_field_says_what_is_wrong(text, message):
    gpus = Number("gpus", "GPUs", min=1, max=16384, default=8, integer=True)
    with pytest.raises(ValueError) as error:
        gpus.coerce(text)
    assert str(error.value) == message


def test_a_fields_empty_value_is_read_only_from_an_empty_field_or_a_state():
    """Issue 42: the lab's empty field (0 in the state: the preset) lies outside its range;
    typed, 0 is refused with what an empty field would do, as any value out of range."""
    layers = Number("layers", "Layers", min=1, max=1024, default=0, integer=True, blank=0, blank_text="the preset's value")
    assert layers.coerce("") == 0 and layers.coerce("  ") == 0 and layers.coerce(0) == 0 and layers.display(0) == ""
    for typed in ("0", "-0", "0.0", "-5"):
        with pytest.raises(ValueError) as error:
            layers.coerce(typed)
        assert str(error.value) == "Layers: at least 1 (empty: the preset's value)"
    assert layers.coerce("96") == 96 and 0 in layers.values
    with pytest.raises(ValueError):
        Number("layers", "Layers", min=1, max=1024, default=0)  # a default out of range must be the empty value


def _figure(constrain=None):
    controls = (Slider("nodes", "Nodes", min=1, max=4, default=2), Slider("rank", "Rank", min=0, max=31, default=3),
                Number("gpus", "GPUs per node", min=1, max=8, default=8, integer=True))
    return Figure(number=99, slug="test", title="t", caption="c", controls=controls,
                  render=lambda state: View(svg="<svg/>", readouts=(Readout("x", "x", "1", 1),)), constrain=constrain)


def test_check_state_keeps_the_last_good_value_of_a_bad_field_and_says_why():
    figure = _figure()
    state, errors = figure.check_state({"nodes": "3", "gpus": "lots"}, fallback={"nodes": 1, "rank": 5, "gpus": 4})
    assert state == {"nodes": 3, "rank": 5, "gpus": 4}
    assert errors == {"gpus": "GPUs per node: 'lots' is not a number"}
    assert figure.validate_state({"gpus": "lots"}) == {"nodes": 2, "rank": 3, "gpus": 8}  # URLs: silently the default


def test_constrain_snaps_a_control_whose_range_depends_on_another():
    figure = _figure(constrain=lambda s: {**s, "rank": min(s["rank"], s["nodes"] * s["gpus"] - 1)})
    assert figure.validate_state({"nodes": 1, "gpus": 2, "rank": 30}) == {"nodes": 1, "gpus": 2, "rank": 1}
    nearby = nearby_states(figure, figure.validate_state({"nodes": 1, "gpus": 2, "rank": 1}), 1000)
    keys = [tuple(sorted(s.items())) for s in nearby]
    assert len(keys) == len(set(keys)) and all(figure.validate_state(s) == s for s in nearby)
    assert {"nodes": 1, "gpus": 2, "rank": 1} not in nearby


def test_a_typed_fields_values_come_after_every_other_controls_moves():
    """Rendered ahead, a typed field's values (its ends and samples) are guesses: they
    come after every slider move, nearest first as ever."""
    figure = _figure()  # nodes, rank: sliders; gpus: a typed number
    start = figure.default_state()
    changed = [next(k for k in s if s[k] != start[k]) for s in nearby_states(figure, start, 1000)]
    typed = changed.index("gpus")
    assert typed > 0 and set(changed[typed:]) == {"gpus"} and "rank" in changed[:typed]


def test_palette_gives_each_light_colour_one_dark_twin_and_css_for_every_key():
    from figures import palette
    pairs = {}
    for colour in palette.COLOURS.values():
        assert pairs.setdefault(colour.light, colour.dark) == colour.dark, colour.key
    css = palette.css()
    for key in palette.COLOURS:
        assert f"--c-{key}:" in css and f".fill-{key}{{" in css and f".stroke-{key}{{" in css and f".bg-{key}{{" in css
    assert palette.rank_key(9) == "rank1"


def test_html_blocks_escape_every_text():
    from figures import html
    block = html.join(html.table(["a<b"], [["x & y"]], caption="é"), html.code("--tp 8 <x>", label="args"))
    assert "a&lt;b" in block and "x &amp; y" in block and "&#233;" in block and "&lt;x&gt;" in block
    assert block.isascii() and "data-copy" in block


def test_a_figure_gives_a_constrained_sliders_max_for_each_state():
    """``limits`` (module-level, optional) narrows a slider's range per state; the page gets
    it as the input's max: a position (the stop's index for a slider with stops)."""
    controls = (Slider("nodes", "Nodes", stops=(1, 2, 4, 8), default=2), Slider("tp", "TP", stops=(1, 2, 4, 8), default=2),
                Slider("rank", "Rank", min=0, max=31, default=3))
    figure = Figure(number=99, slug="test", title="t", caption="c", controls=controls, render=lambda state: View(),
                    constrain=lambda s: {**s, "tp": min(s["tp"], s["nodes"]), "rank": min(s["rank"], 4 * s["nodes"] - 1)},
                    limits=lambda s: {"tp": s["nodes"], "rank": 4 * s["nodes"] - 1})
    assert figure.slider_limits({"nodes": 2, "tp": 1, "rank": 0}) == {"tp": "1", "rank": "7"}  # tp stop 2 is index 1
    assert figure.slider_limits({"nodes": 8, "tp": 1, "rank": 0}) == {"tp": "3", "rank": "31"}
    assert _figure().slider_limits(_figure().default_state()) == {}  # no limits: the sliders' own ranges
    stops, linear = controls[0], Slider("f", "f", min=0, max=1, step=0.25, default=0)
    assert [stops.highest_at_most(v) for v in (0.5, 1, 3, 100)] == [1, 1, 2, 8]
    assert [linear.highest_at_most(v) for v in (-1, 0.6, 0.75, 7)] == [0, 0.5, 0.75, 1]
