"""Driving the built site in Debian's Chromium: shared by the browser tests and bench/.

Give ``page.wait_for_function`` a function (``"() => ..."``), never a bare expression:
Playwright evaluates an expression with ``eval`` inside the page, which the page's
policy (no ``'unsafe-eval'``) refuses."""
import io
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
        # window.__onWorkerPost to see each message the page posts to one (but the
        # heartbeat's pings, every 0.5 s: playbook.js "Faults").
        self.page.add_init_script(
            "window.__workers = []; const PageWorker = window.Worker; window.Worker = function (url, options) {"
            " const worker = new PageWorker(url, options); window.__workers.push(worker);"
            " const post = worker.postMessage.bind(worker);"
            " worker.postMessage = function (message) {"
            " if (window.__onWorkerPost && !(message && message.ping)) window.__onWorkerPost(message);"
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


def figure_screenshot(page, anchor):
    """PNG bytes of a figure as it shows in the viewport, slice by slice down its height,
    stitched. Not an element screenshot: for an element taller than the screen Chromium
    captures beyond the viewport by resizing it for a moment, which the page sees as a
    media-query change (a phone's figures drew themselves wide and back)."""
    from PIL import Image

    # On a whole pixel: text above that moved the figure by a fraction of a pixel (a
    # sentence added to the prose) would otherwise redraw every glyph's edges differently.
    # Room below the page's end, so that the last figures' slices are not scrolled to the
    # page's (fractional) end instead.
    box = page.evaluate("""(a) => { const f = document.getElementById(a), body = document.body.style;
      body.paddingBottom = innerHeight + "px";
      body.paddingTop = "0px";
      const top = f.getBoundingClientRect().top + scrollY;
      body.paddingTop = (Math.ceil(top - 0.01) - top) + "px";
      const r = f.getBoundingClientRect();
      return {top: Math.round(r.top + scrollY), left: r.left, width: Math.floor(r.width), height: Math.floor(r.height)}; }""",
                        anchor)
    screen = page.viewport_size["height"]
    whole = None
    offset = 0
    while offset < box["height"]:
        page.evaluate(f"window.scrollTo(0, {box['top'] + offset})")
        page.wait_for_timeout(60)
        top = page.evaluate("(a) => document.getElementById(a).getBoundingClientRect().top", anchor) + offset
        height = int(min(screen - max(top, 0), box["height"] - offset))
        shot = Image.open(io.BytesIO(page.screenshot(
            clip={"x": box["left"], "y": max(top, 0), "width": box["width"], "height": height}, animations="disabled")))
        if whole is None:
            whole = Image.new("RGB", (shot.width, box["height"]))
        whole.paste(shot.convert("RGB"), (0, offset))
        offset += int(height)
    page.evaluate("() => { document.body.style.paddingTop = document.body.style.paddingBottom = ''; }")
    out = io.BytesIO()
    whole.save(out, format="PNG")
    return out.getvalue()


BASELINES = Path(__file__).with_name("baselines")
# Baselines are stored at half size in 128 colours (100 shots of a long page would be
# ~15 MB at full size; this is ~2 MB): a change a reader would see, a label moved or a
# colour changed, still shows.
BASELINE_SCALE = 0.5


def screenshot_matches(image_bytes, name, *, tolerance=0.005):
    """Compare a screenshot with its stored baseline (``PLAYBOOK_UPDATE_BASELINES=1``
    writes it): None if they match, else what differs. Both are compared at half size;
    the share of pixels that differ clearly, under the best shift of a pixel either way
    (an element at a fractional position lands a pixel off), must stay under ``tolerance``.
    A failing shot is saved beside the baseline as ``NAME.actual.png`` (never committed)."""
    import pytest
    from PIL import Image, ImageChops

    shot = Image.open(io.BytesIO(image_bytes)).convert("RGB")
    shot = shot.resize((max(1, round(shot.width * BASELINE_SCALE)), max(1, round(shot.height * BASELINE_SCALE))),
                       Image.Resampling.BOX)
    baseline = BASELINES / f"{name}.png"
    if os.environ.get("PLAYBOOK_UPDATE_BASELINES") or not baseline.exists():
        BASELINES.mkdir(exist_ok=True)
        shot.quantize(colors=128).save(baseline, optimize=True)  # a third of the bytes; the compare tolerates it
        if not os.environ.get("PLAYBOOK_UPDATE_BASELINES"):
            pytest.fail(f"no baseline for {name}: wrote {baseline}, check it and commit it")
    expected = Image.open(baseline).convert("RGB")
    width, height = shot.size
    if abs(width - expected.size[0]) > 2 or abs(height - expected.size[1]) > 2:
        shot.save(BASELINES / f"{name}.actual.png")
        return f"size {shot.size} against {expected.size} (see {name}.actual.png)"

    def changed_at(dx, dy):
        w, h = min(width, expected.size[0]) - 2, min(height, expected.size[1]) - 2
        a = shot.crop((1 + dx, 1 + dy, 1 + dx + w - 2, 1 + dy + h - 2))
        b = expected.crop((1, 1, 1 + w - 2, 1 + h - 2))
        difference = ImageChops.difference(a, b).convert("L").point(lambda value: 255 if value > 40 else 0)
        return sum(difference.histogram()[255:]) / (w * h)

    changed = min(changed_at(dx, dy) for dx in (-1, 0, 1) for dy in (-1, 0, 1))
    if changed < tolerance:
        return None
    shot.save(BASELINES / f"{name}.actual.png")
    return f"{changed:.1%} of pixels differ (see {name}.actual.png)"
