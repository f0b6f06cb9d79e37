"""The article as a reader gets it: every section, callout, card, formula, reference and
figure in place, in our own words."""
import html as html_lib
import re
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

import build
from models import strategies

ROOT = Path(__file__).resolve().parents[1]
OVERLAP_TOOL = ROOT.parent / "shared" / "tools" / "overlap.py"

SECTIONS = (
    "opening", "vocabulary", "six-axes", "eight-questions", "collectives", "alpha-beta", "data-parallelism",
    "global-batch", "sampler", "ddp-internals", "overlap-is-not-free", "memory-wall", "strong-weak-scaling", "zero",
    "fsdp", "hsdp", "tensor-parallelism", "column-parallel", "row-parallel", "sequence-parallelism",
    "context-parallelism", "ring-attention", "cp-load-balance", "ulysses", "pipeline-parallelism",
    "pipeline-bubble", "one-f-one-b", "interleaved-and-zero-bubble", "stage-balance", "expert-parallelism",
    "moe-routing", "load-balancing", "combining-parallelisms", "rank-to-coordinate", "topology",
    "overlap-by-strategy", "choosing", "planner", "checkpointing", "checkpoint-interval", "scaling-efficiency",
    "critical-batch", "failure-modes", "hangs", "stragglers", "serving", "references",
)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    return (build.build(tmp_path_factory.mktemp("article") / "dist") / "index.html").read_text()


@pytest.fixture(scope="module")
def article(page):
    return page[page.index('<main class="article"'): page.index("</main>")]


def test_every_section_is_rendered_in_order(article):
    positions = [article.find(f'id="{anchor}"') for anchor in SECTIONS]
    missing = [anchor for anchor, at in zip(SECTIONS, positions) if at < 0]
    assert not missing
    assert positions == sorted(positions), "sections out of the reference's order"


def test_table_of_contents_lists_every_top_level_section(page):
    toc = page[page.index('<nav class="toc"'): page.index("</nav>")]
    for anchor in re.findall(r'<h2 id="([^"]+)"', page):
        assert f'href="#{anchor}"' in toc


def test_all_nineteen_callouts(article):
    callouts = re.findall(r'<aside class="callout" data-callout="often-said".*?</aside>', article, flags=re.S)
    assert len(callouts) == 19
    for callout in callouts:
        assert "Often said" in callout and "Actually" in callout


def test_seven_cards_and_the_comparison_table(article):
    assert re.findall(r'data-card="([a-z]+)"', article) == ["dp", "zero", "tp", "sp", "cp", "pp", "ep"]
    for card in strategies.CARDS:
        block = re.search(rf'data-card="{card.key}".*?</section>', article, flags=re.S).group(0)
        assert html_lib.escape(card.limit, quote=False) in block
    table = re.search(r'<table class="comparison".*?</table>', article, flags=re.S).group(0)
    assert table.count("<tr>") == 1 + len(strategies.COMPARISON_ROWS) == 8


def test_every_formula_is_mathml(article):
    maths = re.findall(r"<math\b.*?</math>", article, flags=re.S)
    assert len(maths) >= 150
    assert not any("<merror" in m for m in maths)
    prose = re.sub(r"<(math|code|pre|script|svg)\b.*?</\1>", " ", article, flags=re.S)
    leftover = re.findall(r"\$[^$\n]{1,80}\$|\\(?:frac|sqrt|Psi|alpha|cdot)\b", html_lib.unescape(re.sub(r"<[^>]+>", " ", prose)))
    assert not leftover, leftover[:5]


def test_references_are_well_formed_and_cited(article):
    refs = re.findall(r'<li id="ref-([^"]+)"[^>]*>.*?<a href="([^"]+)"', article, flags=re.S)
    assert len(refs) >= 20
    for key, url in refs:
        parsed = urllib.parse.urlparse(url)
        assert parsed.scheme == "https" and parsed.netloc and " " not in url, (key, url)
    cited = set(re.findall(r'class="cite" href="#ref-([^"]+)"', article))
    required = {"rajbhandari2020", "shoeybi2019", "narayanan2021", "korthikanti2022", "huang2019", "narayanan2019",
                "qi2024", "liu2023", "jacobs2023", "lepikhin2021", "fedus2022", "dao2022", "zhao2023", "llama3",
                "mccandlish2018", "young1974", "daly2006"}
    assert required <= cited, required - cited


def test_every_internal_link_resolves(page):
    """Every in-page link names an element, or a figure's state (``#fig-15:P=8``, the tries):
    a figure on the page and only its controls' keys."""
    from figures import registry
    from figures.contract import decode_fragment

    ids = set(re.findall(r'\bid="([^"]+)"', page))
    targets = set(html_lib.unescape(t) for t in re.findall(r'href="#([^"]+)"', page))
    states = {t for t in targets if ":" in t}
    assert targets and targets - states <= ids, targets - states - ids
    assert states, "no figure links to a state of its own (its tries)"
    for target in states:
        number, values = decode_fragment(target)
        figure = registry()[number]
        assert figure.anchor in ids and values and all(figure.control(key) for key in values), target


def test_each_figure_placed_or_marked_once_in_order(article):
    found = [int(n) for n in re.findall(r'<!--\s*figure (\d\d):|<figure id="fig-\d\d"[^>]*data-figure="(\d\d)"', article) for n in n if n]
    assert found == list(range(1, 26))


def test_at_least_eight_thousand_words_of_prose(article):
    assert build.count_words(article) >= 8000


def test_no_placeholder_text(page):
    text = re.sub(r"<[^>]+>", " ", page)
    assert not re.search(r"\b(TODO|TBD|FIXME|lorem ipsum)\b", text, flags=re.I)


@pytest.mark.skipif(not OVERLAP_TOOL.exists(), reason="shared/tools/overlap.py is not beside this checkout")
def test_prose_is_in_our_own_words():
    result = subprocess.run([sys.executable, str(OVERLAP_TOOL), "site", "--show", "5"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
