"""What a reader gets around every figure: a caption of one or two sentences, the rest in
its note, states worth a look as one-click tries (each valid for its figure: a bad one
fails the build), a Reset button, and a contents list that names every figure."""
import html as html_lib
import re

import pytest

import build
from figures import registry
from figures.contract import Button, Figure, Play, Readout, Select, Slider, Toggle, View, check_tries, decode_fragment

ABBREVIATIONS = ("e.g.", "i.e.", "et al.", "vs.", "cf.", "Fig.", "Eq.")


def sentences(text):
    """The sentences of a caption: a full stop, question or exclamation mark followed by a
    space and anything but a lower-case letter ends one (not "1.5 GB", not "et al. 2022")."""
    for abbreviation in ABBREVIATIONS:
        text = text.replace(abbreviation, abbreviation.replace(".", ""))
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[^a-z\s])", text.strip()) if s]


def test_sentences_are_counted_as_a_reader_would():
    assert len(sentences("One. Two.")) == 2
    assert len(sentences("A 1.5 GB buffer, e.g. a layer's weights. Then 120 / 31.4 GB.")) == 2
    assert len(sentences("Table 2 of Korthikanti et al. 2022 gives it. Drag N: the bars stay. Then stop!")) == 3
    assert len(sentences("Is it? Yes.")) == 2


@pytest.mark.parametrize("number", sorted(registry()))
def test_every_caption_is_one_or_two_sentences_and_the_rest_is_its_note(number):
    figure = registry()[number]
    assert 1 <= len(sentences(figure.caption)) <= 2, sentences(figure.caption)
    assert figure.note.strip(), "the caption's second half (how to read it) belongs in NOTE"
    # what to try is a button now, not an instruction in the caption
    assert not re.search(r"\btry\b", figure.caption, re.I), figure.caption


@pytest.mark.parametrize("number", sorted(registry()))
def test_every_figure_offers_valid_tries(number):
    figure = registry()[number]
    assert len(figure.tries) >= 2
    assert check_tries(figure) == []
    for (label, values), (_, fragment) in zip(figure.tries, figure.try_links()):
        state = figure.validate_state(values)
        assert all(state[key] == value for key, value in values.items())
        assert decode_fragment(fragment)[0] == number and figure.validate_state(decode_fragment(fragment)[1]) == state


def _figure(tries, constrain=None):
    controls = (Slider("P", "Stages", min=2, max=16, step=1, default=4), Slider("m", "Microbatches", stops=(1, 2, 4, 8), default=8),
                Select("kind", "Kind", (("a", "A"), (3, "Three"))), Toggle("on", "On"), Play("play", "Play", drives="P"),
                Button("next", "Next"))
    return Figure(number=99, slug="test", title="t", caption="c", controls=controls, constrain=constrain,
                  render=lambda state: View(svg="<svg/>", readouts=(Readout("x", "x", "1", 1),)), tries=tries)


@pytest.mark.parametrize("tries, problem", [
    ((("Sixteen stages", {"P": 16}),), None),
    ((("Sixteen stages", {"stages": 16}),), "'stages', which is not a control of Figure 99 (it has P, m, kind, on, play)"),
    ((("Too many", {"P": 17}),), "P=17, not one of that control's values"),
    ((("Between stops", {"m": 3}),), "m=3, not one of that control's values"),
    ((("As text", {"P": "8"}),), "P='8', not one of that control's values"),
    ((("A float", {"P": 8.0}),), "P=8.0, not one of that control's values"),
    ((("Three as text", {"kind": "3"}),), "kind='3', not one of that control's values"),
    ((("Not a bool", {"on": 1}),), "on=1, not one of that control's values"),
    ((("Press", {"next": True}),), "a button: a try names a state, not an action"),
    ((("Play", {"play": True}),), "a play: a try names a state, not an action"),
    ((("Nothing", {}),), "sets no control"),
    ((("", {"P": 8}),), "a label is one short phrase"),
    ((("The default", {"P": 4}),), "is the default state"),
    ((("Eight", {"P": 8}), ("Eight again", {"P": 8, "m": 8})), "'Eight again' is the same state as try 'Eight'"),
    (("P=8",), "is not a (label, {control key: value}) pair"),
])
def test_a_try_that_names_no_reachable_state_is_reported(tries, problem):
    problems = check_tries(_figure(tries))
    if problem is None:
        assert problems == []
    else:
        assert len(problems) == 1 and problem in problems[0], problems


def test_a_try_its_figure_would_move_is_reported():
    figure = _figure((("Sixteen stages, all microbatches", {"P": 16, "m": 8}),),
                     constrain=lambda state: {**state, "m": min(state["m"], 16 // state["P"])})
    assert check_tries(figure) == ["try 'Sixteen stages, all microbatches': the figure's constraints move it to {'m': 1}"]


def test_a_bad_try_fails_the_build_naming_the_module(tmp_path, monkeypatch):
    from dataclasses import replace

    import figures

    broken = replace(registry()[15], tries=(("Seventeen stages", {"P": 17}),))
    monkeypatch.setitem(registry(), 15, broken)
    monkeypatch.setattr(figures, "_registry", registry())
    with pytest.raises(build.BuildError, match=r"figures/fig15_pipeline_schedules\.py: TRIES: try 'Seventeen stages' sets P=17"):
        build.build(tmp_path / "dist")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    return (build.build(tmp_path_factory.mktemp("tries") / "dist") / "index.html").read_text()


def _figure_markup(page, number):
    start = page.index(f'<figure id="fig-{number:02d}"')
    return page[start:page.index("</figure>", start)]


@pytest.mark.parametrize("number", sorted(registry()))
def test_each_figure_is_baked_with_its_note_tries_and_a_reset_at_its_default(page, number):
    figure, markup = registry()[number], _figure_markup(page, number)
    caption = re.search(r'<span class="figure-caption">(.*?)</span>', markup, re.S).group(1)
    assert html_lib.unescape(caption) == figure.caption
    note = re.search(r'<details class="figure-more" data-role="more">\s*<summary>How to read it</summary>\s*<p>(.*?)</p>',
                     markup, re.S).group(1)
    assert html_lib.unescape(note) == figure.note
    links = re.findall(r'<a class="try" href="#([^"]+)" data-role="try" data-fragment="([^"]+)">([^<]+)</a>', markup)
    assert [(html_lib.unescape(h), html_lib.unescape(f), html_lib.unescape(t)) for h, f, t in links] == \
        [(fragment, fragment, label) for label, fragment in figure.try_links()]
    reset = re.search(r'<button type="button" class="reset" data-role="reset"([^>]*)>Reset</button>', markup).group(1)
    assert 'aria-disabled="true"' in reset  # the page opens on the default state
    assert f'aria-label="Reset Figure {number:02d} to its default state"' in reset


def test_the_contents_list_every_figure_under_its_section(page):
    toc = page[page.index('<nav class="toc"'): page.index("</nav>")]
    listed = re.findall(r'<a href="#fig-(\d\d)"><span class="toc-figure-number">Fig\. (\d\d)</span> ([^<]+)</a>', toc)
    assert [(int(a), int(b), html_lib.unescape(title)) for a, b, title in listed] == \
        [(n, n, figure.title) for n, figure in sorted(registry().items())]
    # each figure sits under the section whose chapter holds it
    sections = re.findall(r'<li><a href="#([^"]+)">[^<]*</a>\s*(?:<ol class="toc-figures">(.*?)</ol>)?', toc, re.S)
    article = page[page.index('<main class="article"'):]
    for anchor, figures_listed in sections:
        chapter = article[article.index(f'<h2 id="{anchor}"'):]
        chapter = chapter[:chapter.index("</section>")]
        assert re.findall(r'href="#fig-(\d\d)"', figures_listed or "") == re.findall(r'<figure id="fig-(\d\d)"', chapter), anchor
