"""The offline copy (site/static/sw.js): after one visit the site works with no network,
a server outage shows the cached copy, a newer build is offered once it is whole and never
goes back to an older one, and a page fetched mid-update never joins a build's copy."""
import shutil
import threading

import pytest

import build
from figures import registry
from tests.browser.drive import read_state, set_control
from tests.browser.harness import PageSession

pytestmark = pytest.mark.browser

FIFTEEN = registry()[15]
CACHE_KEYS = "caches.keys().then(k => k.filter(n => n.startsWith('playbook-')))"


class SwappableServer:
    """The site's server, whose directory can be swapped for a new build, and which can be
    made to answer every request with 503 (an outage)."""

    def __init__(self, root):
        self.root = root
        self.outage = False
        owner = self
        server = build.make_server(root, "127.0.0.1", 0)
        partial = server.RequestHandlerClass

        class Swappable(partial.func):
            def __init__(self, *args, **kwargs):
                kwargs["directory"] = str(owner.root)
                super().__init__(*args, **kwargs)

            def send_head(self):
                if owner.outage:
                    self.send_error(503, "Service Unavailable")
                    return None
                return super().send_head()

        server.RequestHandlerClass = Swappable
        self.server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{server.server_address[1]}"


def new_build(site, folder, words):
    """A copy of ``site`` whose page says ``words`` in its footer: a new build, with its
    own service worker and cache name, precompressed as a build is."""
    shutil.copytree(site, folder)
    for stale in ("index.html.br", "index.html.gz"):
        (folder / stale).unlink(missing_ok=True)
    index = folder / "index.html"
    index.write_text(index.read_text().replace("</footer>", f"<p>{words}</p></footer>"))
    build.write_service_worker(folder)
    build.precompress(folder)
    return folder


def wait_for_offline_copy(page):
    page.wait_for_function("() => navigator.serviceWorker.controller !== null", timeout=60_000)
    page.wait_for_function(f"() => {CACHE_KEYS}.then(k => k.length === 1)", timeout=60_000)
    return page.evaluate(CACHE_KEYS)[0]


def footer(page):
    return page.text_content("footer")


@pytest.fixture
def served(site):
    served = SwappableServer(site)
    yield served
    served.server.shutdown()


def test_after_one_visit_the_site_works_offline_and_through_an_outage(browser, served):
    session = PageSession(browser, served.base)
    try:
        page = session.open("/")
        wait_for_offline_copy(page)
        session.context.set_offline(True)
        page.reload()
        page.wait_for_function("() => document.documentElement.dataset.python === 'ready'", timeout=90_000)
        set_control(page, FIFTEEN, "P", 8)
        assert page.get_attribute("#fig-15", "data-state") == "live"
        assert read_state(page, FIFTEEN)["P"] == 8
        session.context.set_offline(False)

        # The server answers 503 to everything: the reader still gets the whole copy, live.
        served.outage = True
        page.goto(served.base + "/")
        assert "Service Unavailable" not in page.content()
        assert page.locator("#fig-15").count() == 1
        page.wait_for_function("() => document.documentElement.dataset.python === 'ready'", timeout=90_000)
        assert page.get_attribute("#fig-15", "data-state") == "live"
    finally:
        session.close()


def test_a_newer_build_is_offered_once_whole_and_an_older_one_never_comes_back(browser, served, site, tmp_path):
    session = PageSession(browser, served.base)
    try:
        page = session.open("/")
        first = wait_for_offline_copy(page)

        # The site is updated. The next load still shows the copy the reader has (whole and
        # of one build) while the newer build is cached in the background; once it is,
        # the page offers it.
        served.root = new_build(site, tmp_path / "second", "second build")
        page.reload()
        assert "second build" not in footer(page)
        note = page.locator('[data-role="update-note"]')
        note.wait_for(state="visible", timeout=60_000)
        page.wait_for_function(f"() => {CACHE_KEYS}.then(k => k.length === 1 && k[0] !== {first!r})", timeout=30_000)
        # The click reloads the page: wait for that load, then for its footer (a check
        # that runs while the new document is still being parsed finds no footer yet).
        with page.expect_navigation():
            note.locator("button").click()
        page.wait_for_function(
            "() => { const f = document.querySelector('footer'); return f !== null && f.textContent.includes('second build'); }")
        assert page.locator('[data-role="update-note"]').is_hidden()

        # Offline half a second after the newer build was shown: it stays the newer one,
        # on this reload and the next.
        page.wait_for_timeout(500)
        session.context.set_offline(True)
        for _ in range(2):
            page.reload()
            assert "second build" in footer(page)
    finally:
        session.close()


def test_a_page_fetched_mid_update_never_joins_a_builds_offline_copy(browser, served, site, tmp_path):
    """The server is caught between two builds: its sw.js lists one build's files, its page
    names a script of another. That service worker gives up; the reader keeps the whole
    older copy."""
    session = PageSession(browser, served.base)
    try:
        page = session.open("/")
        first = wait_for_offline_copy(page)
        torn = new_build(site, tmp_path / "torn", "torn build")
        index = torn / "index.html"
        page_text = index.read_text()
        script = next(part for part in page_text.split('"') if part.startswith("/assets/playbook.") and part.endswith(".js"))
        (torn / script.replace("playbook.", "playbook.f", 1).lstrip("/")).write_bytes((torn / script.lstrip("/")).read_bytes())
        index.write_text(page_text.replace(script, script.replace("playbook.", "playbook.f", 1)))
        for stale in ("index.html.br", "index.html.gz"):
            (torn / stale).unlink()
        served.root = torn
        outcome = page.evaluate("""async () => {
          const registration = await navigator.serviceWorker.getRegistration();
          await registration.update();
          const worker = registration.installing;
          if (!worker) return "no update";
          if (worker.state === "redundant") return "redundant";
          return await new Promise((resolve) => worker.addEventListener("statechange", () => {
            if (["redundant", "activated"].includes(worker.state)) resolve(worker.state);
          }));
        }""")
        assert outcome == "redundant"
        assert page.evaluate(CACHE_KEYS) == [first]
        session.context.set_offline(True)
        page.reload()
        assert "torn build" not in footer(page)
        assert page.locator("#fig-15").count() == 1
    finally:
        session.close()

