"""Driving the built site in Debian's Chromium: shared by the browser tests and bench/.

Give ``page.wait_for_function`` a function (``"() => ..."``), never a bare expression:
Playwright evaluates an expression with ``eval`` inside the page, which the page's
policy (no ``'unsafe-eval'``) refuses."""
import os
import shutil
from pathlib import Path

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


class PageSession:
    """A page plus everything it said: console errors, page errors, off-origin requests."""

    def __init__(self, browser, base_url, routes=None, viewport=None, **context_options):
        self.base_url = base_url
        self.context = browser.new_context(viewport=viewport or {"width": 1280, "height": 900}, **context_options)
        self.console_errors, self.page_errors, self.blocked, self.console = [], [], [], []
        self.context.route("**/*", self._route)
        for pattern, handler in (routes or {}).items():
            self.context.route(pattern, handler)
        self.page = self.context.new_page()
        self.page.add_init_script(
            "window.__cspViolations = []; document.addEventListener('securitypolicyviolation',"
            " e => window.__cspViolations.push(e.violatedDirective + ' ' + e.blockedURI + ' ' + e.sourceFile))")
        # Every Web Worker the page starts, for tests that check or stop it; a test may set
        # window.__onWorkerPost to see each message the page posts to one.
        self.page.add_init_script(
            "window.__workers = []; const PageWorker = window.Worker; window.Worker = function (url, options) {"
            " const worker = new PageWorker(url, options); window.__workers.push(worker);"
            " const post = worker.postMessage.bind(worker);"
            " worker.postMessage = function (message) { if (window.__onWorkerPost) window.__onWorkerPost(message);"
            " return post(message); };"
            " return worker; };")
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
            self.page.wait_for_function("() => document.documentElement.dataset.python === 'ready'", timeout=READY_TIMEOUT_MS)
        except Exception:
            raise AssertionError("Python runtime never became ready. Console:\n" + "\n".join(self.console[-40:]))
        return self.page

    def csp_violations(self):
        """What the page's Content-Security-Policy blocked since it loaded."""
        return self.page.evaluate("window.__cspViolations")

    def close(self):
        self.context.close()
