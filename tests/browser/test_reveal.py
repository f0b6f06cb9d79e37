"""The held article: after its first chapters the page arrives hidden (build.py
HOLD_SCRIPT, playbook.css) and playbook.js shows it a few blocks per task, taking each
figure's controls out of their template as it goes. These checks are what a reader
notices: the whole article is there once the figures are live, in many short steps; a
link into held text lands on its target; without JavaScript, or if playbook.js never
runs, every chapter still shows."""
import contextlib
import re

import build
from figures import registry
from tests.browser.harness import PageSession

# Recorded from the first script on the page: what was held (and what the page said of
# Python) at DOMContentLoaded, how many tasks (one MutationObserver delivery per task)
# marked blocks shown, and, for each held chapter, how many tasks of our own (a
# MessageChannel ping-pong while the page loads) had run when the parser reached it.
RECORD = """
window.__reveal = {deliveries: 0, tick: 0, chapterTicks: []};
const ticker = new MessageChannel();
ticker.port1.onmessage = () => {
  window.__reveal.tick += 1;
  if (document.readyState === 'loading') ticker.port2.postMessage(0);
};
ticker.port2.postMessage(0);
new MutationObserver(records => records.forEach(r => r.addedNodes.forEach(node => {
  if (node.nodeType === 1 && node.matches('section.chapter[data-held]')) window.__reveal.chapterTicks.push(window.__reveal.tick);
}))).observe(document, {childList: true, subtree: true});
new MutationObserver(records => {
  if (records.some(r => r.attributeName === 'data-shown')) window.__reveal.deliveries += 1;
}).observe(document, {attributes: true, subtree: true, attributeFilter: ['data-shown']});
document.addEventListener('DOMContentLoaded', () => {
  const held = [...document.querySelectorAll('.chapter[data-held] > *')];
  window.__reveal.atLoad = {
    flag: document.documentElement.hasAttribute('data-hold'),
    held: held.length,
    laidOut: held.filter(block => block.getClientRects().length).length,
    fields: document.querySelectorAll('.chapter[data-held] [data-control]').length,
    firstChapterShown: document.querySelector('.chapter:not([data-held]) p').getClientRects().length > 0,
    python: document.documentElement.dataset.python,
  };
});
"""

EVERY_BLOCK_LAID_OUT = "[...document.querySelectorAll('.chapter > *')].every(b => b.getClientRects().length > 0)"


def in_view(page, selector):
    return page.evaluate(f"""(() => {{ const r = document.querySelector({selector!r}).getBoundingClientRect();
        return r.top >= -2 && r.top < innerHeight && r.height > 0; }})()""")


def test_the_article_is_held_at_first_and_shown_in_many_short_steps(browser, base_url):
    session = PageSession(browser, base_url)
    try:
        session.page.add_init_script(RECORD)
        page = session.open("/")
        at_load = page.evaluate("window.__reveal.atLoad")
        assert at_load["flag"] and at_load["firstChapterShown"]
        assert at_load["held"] > 300 and at_load["laidOut"] == 0, at_load
        assert at_load["fields"] == 0, "controls are stamped from their templates, not parsed as markup"
        # playbook.js (a deferred script) starts in a task after the one where parsing
        # ends, which also lays out the parser's last additions and fires
        # DOMContentLoaded: as the baked page says, Python is not loading yet.
        assert at_load["python"] == "static"
        assert page.evaluate("window.__reveal.deliveries") >= 20  # many tasks, not one
        # The parser yields between held chapters (build.PARSER_YIELD): other tasks run
        # while the last half of the article is parsed, which Chromium otherwise parses
        # in one task (measured: the last 14-16 of 24 chapters).
        ticks = page.evaluate("window.__reveal.chapterTicks")
        assert len(ticks) == page.locator("section.chapter[data-held]").count() > 10
        assert len(set(ticks[len(ticks) // 2:])) >= 3, ticks
        assert page.locator(".chapter[data-held] > :not([data-shown])").count() == 0
        assert page.evaluate(EVERY_BLOCK_LAID_OUT)
        assert page.locator("template[data-role=controls-template]").count() == 0
        assert page.locator("form[data-role=controls]").count() == len(registry())
        assert session.page_errors == [] and session.console_errors == []
    finally:
        session.close()


def test_a_link_into_held_text_lands_on_its_target(browser, base_url, site):
    last_heading = re.findall(r'<h2 id="([^"]+)"', (site / "index.html").read_text())[-3]  # far down, with a screenful below
    session = PageSession(browser, base_url)
    try:
        page = session.open(f"/#{last_heading}")  # ready comes after the whole reveal
        top = page.evaluate(f"document.getElementById({last_heading!r}).getBoundingClientRect().top")
        assert 0 <= top < 40, top  # at the top of the window (scroll-margin-top: 1rem)
    finally:
        session.close()


def test_a_contents_link_followed_while_the_article_is_held_shows_its_target_first(browser, base_url):
    session = PageSession(browser, base_url)
    try:
        # When playbook.js has started (Python "loading") nothing after the first chapters
        # is shown yet: follow the contents' last link then, as a quick reader would.
        session.page.add_init_script("""const started = new MutationObserver(() => {
            if (document.documentElement.dataset.python !== 'loading') return;
            started.disconnect();
            const link = [...document.querySelectorAll('.toc a')].pop();
            const target = document.getElementById(link.hash.slice(1));
            window.__before = target.getClientRects().length;
            link.click();
            window.__after = target.getClientRects().length;
            window.__target = link.hash;
        });
        started.observe(document, {attributes: true, subtree: true, attributeFilter: ['data-python']});""")
        page = session.open("/")
        assert page.evaluate("[window.__before, window.__after]") == [0, 1]
        assert in_view(page, page.evaluate("window.__target"))  # and still there once all is shown
    finally:
        session.close()


@contextlib.contextmanager
def page_without_playbook_js(browser, base_url, **context_options):
    """A fresh page whose playbook.js never runs (blocked, or JavaScript off), loaded."""
    session = PageSession(browser, base_url, routes={"**/assets/playbook.*.js": lambda route: route.abort()},
                          **context_options)
    try:
        if context_options.get("java_script_enabled", True):
            session.page.clock.install()
        session.page.goto(base_url + "/")
        session.page.wait_for_load_state("load")
        yield session.page
    finally:
        session.close()


def test_without_javascript_every_chapter_shows(browser, base_url):
    with page_without_playbook_js(browser, base_url, java_script_enabled=False) as page:
        assert page.evaluate(EVERY_BLOCK_LAID_OUT)
        assert page.is_visible("#fig-25 [data-role=view] svg")


def test_if_playbook_js_never_runs_the_hold_lets_go_by_itself(browser, base_url):
    with page_without_playbook_js(browser, base_url) as page:
        assert not page.is_visible("#fig-25")
        page.clock.run_for(build.HOLD_FALLBACK_MS + 100)
        page.wait_for_function("() => !document.documentElement.hasAttribute('data-hold')")
        assert page.is_visible("#fig-25 [data-role=view] svg")
        assert page.evaluate(EVERY_BLOCK_LAID_OUT)


def test_a_held_page_prints_whole(browser, base_url):
    with page_without_playbook_js(browser, base_url) as page:
        assert not page.is_visible("#fig-25")
        page.emulate_media(media="print")
        assert page.is_visible("#fig-25 [data-role=view] svg")


def test_nothing_on_a_phone_screen_shifts_when_the_figures_go_live(browser, base_url):
    """Chapters skip layout off screen once the page is ready (content-visibility), but a
    chapter on screen then would stay blank for a frame: it turns skippable only once
    the reader has scrolled it away."""
    # Lighthouse's phone; every shift counts (Chromium flags some under touch emulation
    # as following input, though the reader has done nothing)
    session = PageSession(browser, base_url, viewport={"width": 412, "height": 823}, device_scale_factor=1.75,
                          is_mobile=True, has_touch=True)
    try:
        session.page.add_init_script("""window.__shifts = [];
            new PerformanceObserver(list => list.getEntries().forEach(e => window.__shifts.push(e.value)))
              .observe({type: 'layout-shift', buffered: true});""")
        page = session.open("/")
        page.wait_for_timeout(500)
        assert sum(page.evaluate("window.__shifts")) < 0.01, page.evaluate("window.__shifts")
        skippable = "id => document.getElementById(id).closest('.chapter').hasAttribute('data-skippable')"
        assert not page.evaluate(skippable, "opening") and page.evaluate(skippable, "references")
        page.evaluate("document.getElementById('references').scrollIntoView()")
        page.wait_for_function(skippable.replace("id =>", "() =>").replace("(id)", "('opening')"))
    finally:
        session.close()
