"""Browser fixtures: build the site once, serve it on loopback with the production
server, and drive Debian's Chromium through Playwright. One page load is shared by the
checks in a module; every request to any other origin is blocked and recorded."""
import threading

import pytest

import build
from tests.browser.harness import BROWSER_ARGS, PageSession, chromium_path


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    return build.build(tmp_path_factory.mktemp("site") / "dist")


@pytest.fixture(scope="session")
def base_url(site):
    server = build.make_server(site, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    if not executable:
        pytest.fail("No Chromium found: install Debian's chromium or set PLAYBOOK_CHROMIUM=/path/to/chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=BROWSER_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def session(base_url, browser):
    """One page load shared by every check of a test module: the page, open and ready."""
    session = PageSession(browser, base_url)
    session.open("/")
    yield session
    session.close()
