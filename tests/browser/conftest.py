"""Browser fixtures: build the site once, serve it on loopback with the production
server, and drive Debian's Chromium through Playwright. One page load is shared by the
checks in a module; every request to any other origin is blocked and recorded."""
import os
import shutil
import threading
from pathlib import Path

import pytest

import build

BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
READY_TIMEOUT_MS = 90_000


def chromium_path():
    configured = os.environ.get("PLAYBOOK_CHROMIUM")
    if configured:
        return configured
    for candidate in ("/usr/bin/chromium", "/usr/bin/chromium-browser"):
        if Path(candidate).exists():
            return candidate
    return shutil.which("chromium")


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


class PageSession:
    """A page plus everything it said: console errors, page errors, off-origin requests."""

    def __init__(self, browser, base_url, routes=None):
        self.base_url = base_url
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.console_errors, self.page_errors, self.blocked, self.console = [], [], [], []
        self.context.route("**/*", self._route)
        for pattern, handler in (routes or {}).items():
            self.context.route(pattern, handler)
        self.page = self.context.new_page()
        self.page.on("console", self._on_console)
        self.page.on("pageerror", lambda error: self.page_errors.append(str(error)))

    def _route(self, route):
        url = route.request.url
        if url.startswith(self.base_url) or url.startswith(("data:", "blob:")):
            route.fallback()
        else:
            self.blocked.append(url)
            route.abort()

    def _on_console(self, message):
        self.console.append(f"{message.type}: {message.text}")
        if message.type == "error":
            self.console_errors.append(message.text)

    def open(self, path="/"):
        self.page.goto(self.base_url + path)
        try:
            self.page.wait_for_function("document.documentElement.dataset.python === 'ready'", timeout=READY_TIMEOUT_MS)
        except Exception:
            raise AssertionError("Python runtime never became ready. Console:\n" + "\n".join(self.console[-40:]))
        return self.page

    def close(self):
        self.context.close()
