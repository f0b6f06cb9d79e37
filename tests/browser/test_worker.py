"""Python off the main thread: the figures' interpreter lives in a Web Worker.

The page's own thread holds no Pyodide; a fast drag never queues renders (latest wins)
and never paints a stale state over a newer one; a worker that cannot start leaves every
figure on its drawing with one line saying so (a worker lost after it started:
test_faults.py); and the site works from a plain static server that sends no special
headers."""
import functools
import http.server
import threading

import pytest

from figures import registry
from figures.contract import encode_state, nearby_states

from tests.browser.drive import assert_shows, read_state, set_control, settle
from tests.browser.harness import PageSession

pytestmark = pytest.mark.browser

FIFTEEN = registry()[15]


def test_the_page_thread_holds_no_pyodide(session):
    page = session.page
    main_thread = page.evaluate("""() => ({
        pyodide: typeof window.pyodide !== 'undefined' || typeof window.loadPyodide !== 'undefined',
        fetched: performance.getEntriesByType('resource').map(e => e.name).filter(n => /pyodide|python_stdlib|playbook\\.[0-9a-f]+\\.zip/.test(n)),
        isolated: window.crossOriginIsolated,
        workers: window.__workers.length,
        pyscript: document.querySelectorAll('script[type="py"], script[src*="pyscript"]').length,
    })""")
    # Pyodide's files are fetched by the worker, not the page (the page only asks the
    # server, with HEAD, that they are there); no cross-origin isolation is needed.
    assert main_thread["pyodide"] is False and main_thread["workers"] == 1 and main_thread["pyscript"] == 0
    assert main_thread["isolated"] is False
    heads = page.evaluate("performance.getEntriesByType('resource').filter(e => /pyodide\\.asm\\.wasm/.test(e.name)).map(e => e.transferSize)")
    assert all(size < 2000 for size in heads), heads  # HEAD answers only: the 9 MB body went to the worker


MONITOR = """anchor => {
  const figure = document.getElementById(anchor);
  if (window.__monitor) window.__monitor.disconnect();  // one watcher, even if an earlier test set one
  const painted = window.__painted = [];
  window.__monitor = new MutationObserver(() => painted.push(figure.dataset.fragment));
  window.__monitor.observe(figure, {attributes: true, attributeFilter: ['data-fragment']});
}"""


def test_a_fast_drag_coalesces_and_never_paints_a_stale_state(session):
    """Forty moves in one burst: the figure asks the worker at most a few times, paints
    the states in the order the reader made them, and ends on the last one."""
    page = session.page
    set_control(page, FIFTEEN, "P", 16)
    page.evaluate(MONITOR, FIFTEEN.anchor)
    made = page.evaluate("""() => {
      const slider = document.querySelector('#fig-15 [data-control=m]');
      const made = [];
      for (let i = 0; i < 40; i++) {
        slider.value = String(64 - i);
        made.push(slider.value);
        slider.dispatchEvent(new Event('input', {bubbles: true}));
      }
      return made;
    }""")
    settle(page, FIFTEEN.anchor)
    painted = page.evaluate("window.__painted")
    final = {**read_state(page, FIFTEEN), "m": int(made[-1])}
    assert painted[-1] == encode_state(FIFTEEN, final)
    # not forty: readings are taken when a call leaves, and of the views the page kept only
    # the first is painted in the input's task, the newest on the next frame
    assert len(painted) <= 4, painted
    order = [int(fragment.split("m=")[1].split(",")[0]) for fragment in painted]
    assert order == sorted(order, reverse=True), order  # never an older state after a newer one
    assert_shows(page, FIFTEEN, final)


def wait_for_views_around(page, figure, count=None, timeout_ms=30_000):
    """Until the worker has sent the page the views one step from the figure's state
    (or ``count`` states on from it, nearest first: it counts a state when it starts on
    it, so the one before is sent)."""
    state = read_state(page, figure)
    count = len(nearby_states(figure, state, 4)) if count is None else count
    page.wait_for_function("([anchor, around, count]) => { const f = document.getElementById(anchor); "
                           "return f.dataset.aheadOf === around && Number(f.dataset.ahead) >= count; }",
                           arg=[figure.anchor, encode_state(figure, state), count], timeout=timeout_ms)


# Set a control's reading (a slider's position, a menu's value) as the reader does, and
# report what the figure shows when the input's own task has ended.
STEP = """([anchor, key, reading]) => {
  const figure = document.getElementById(anchor);
  const control = figure.querySelector(`[data-control=${key}]`);
  control.value = reading;
  control.dispatchEvent(new Event('input', {bubbles: true}));
  return {fragment: figure.dataset.fragment, busy: figure.hasAttribute('data-busy')};
}"""


def test_a_step_to_a_state_sent_ahead_paints_in_the_inputs_own_task(session):
    """No call, no frame wait: the drawing, readouts and link change before the input's
    own task ends; then the worker, told where the reader is, sends the next along the
    drag, so a slow drag paints every step at once."""
    page = session.page
    set_control(page, FIFTEEN, "P", 8)
    settle(page, FIFTEEN.anchor)
    m = FIFTEEN.control("m")
    for step in range(3):
        wait_for_views_around(page, FIFTEEN)
        state = read_state(page, FIFTEEN)
        index = m.values.index(state["m"])
        target = {**state, "m": m.values[index + 1 if index + 1 < len(m.values) else index - 1]}
        shown = page.evaluate(STEP, [FIFTEEN.anchor, "m", str(m.position(target["m"]))])
        assert shown == {"fragment": encode_state(FIFTEEN, target), "busy": False}, step
        assert_shows(page, FIFTEEN, target)


def test_the_planner_labs_next_states_are_searched_ahead_and_painted_at_once(session):
    """Each of Figure 21's states costs whole planner searches (tens of ms in Pyodide).
    The worker searches the states one menu change away ahead, in slices between calls:
    picking one (another model; a pinned ZeRO stage) paints it in the input's own task,
    with the numbers CPython computes."""
    page = session.page
    lab = registry()[21]
    page.evaluate(f"document.getElementById('{lab.anchor}').scrollIntoView()")
    set_control(page, lab, "batch", 1024)  # the reader is at the lab: render ahead from here
    start = read_state(page, lab)
    ahead = nearby_states(lab, start, 64)
    model_change = next(s for s in ahead if s["model"] != start["model"])
    zero_pinned = next(s for s in ahead if s["zero"] != start["zero"])
    for target in (model_change, zero_pinned):
        wait_for_views_around(page, lab, count=ahead.index(target) + 2, timeout_ms=60_000)
        key = next(k for k in target if target[k] != start[k])
        shown = page.evaluate(STEP, [lab.anchor, key, str(target[key])])
        assert shown == {"fragment": encode_state(lab, target), "busy": False}, key
        assert_shows(page, lab, target)
        set_control(page, lab, key, start[key])  # back: painted from the view it came from


def test_the_worker_hears_which_figures_are_on_screen_not_only_near_it(session):
    """The worker renders ahead for the figure last touched first, and keeps the others
    waiting for a pause in its calls, only while the reader is at it: the page tells it
    which figures are on screen as well as which are near (within 1500 px), so that one
    scrolled off screen holds up none (figures/worker.py ``_next_ahead``)."""
    page = session.page
    mesh, timeline = registry()[17], registry()[18]
    page.evaluate("window.__watched = []; window.__onWorkerPost = message => {"
                  " if (message && message.name === 'watch') window.__watched.push(message.args); }")
    last_on_screen = "(() => { const sent = window.__watched[window.__watched.length - 1]; return sent ? JSON.parse(sent[1]) : []; })()"
    try:
        page.evaluate(f"document.getElementById('{mesh.anchor}').scrollIntoView()")
        page.wait_for_function(f"() => {last_on_screen}.includes(17)")
        page.evaluate(f"document.getElementById('{timeline.anchor}').scrollIntoView()")
        page.wait_for_function(f"() => {{ const on = {last_on_screen}; return on.includes(18) && !on.includes(17); }}")
    finally:
        page.evaluate("window.__onWorkerPost = null")


def test_a_drag_past_the_last_rank_paints_each_step_at_once(session):
    """Figure 01 on 16 GPUs: the rank slider reads 16, 17, ... past the last rank, and
    each such reading selects rank 15. The worker sent those readings ahead as aliases of
    rank 15's view, so every step is painted in the input's own task, the slider put
    back on 15, with no call."""
    page = session.page
    one = registry()[1]
    set_control(page, one, "rank", 15)
    state = read_state(page, one)
    assert state["nodes"] * state["gpus"] == 16 and state["rank"] == 15
    steps = len(nearby_states(one, state, 12))
    page.wait_for_function("([anchor, steps]) => Number(document.getElementById(anchor).dataset.ahead) >= steps",
                           arg=[one.anchor, steps], timeout=30_000)
    for position in ("16", "17", "255"):
        shown = page.evaluate(STEP, [one.anchor, "rank", position])
        assert shown == {"fragment": encode_state(one, state), "busy": False}, position
        # put back at once, or (two steps within one frame) on the next frame
        position = page.evaluate("""anchor => new Promise(resolve => requestAnimationFrame(() =>
            resolve(document.querySelector('#' + anchor + ' [data-control=rank]').value)))""", one.anchor)
        assert position == "15"


def test_a_redraw_replaces_only_the_parts_of_the_drawing_that_changed(session):
    """Figure 17, one rank on: the group's marks change, its squares' click targets do not.
    The targets are the same elements as before (not parsed again), and the drawing is
    exactly the worker's markup for the new state."""
    page = session.page
    mesh = registry()[17]
    set_control(page, mesh, "rank", 100)
    page.evaluate("document.querySelector('#fig-17 [data-set-strip]').__before = true")
    set_control(page, mesh, "rank", 101)
    state = read_state(page, mesh)
    assert state["rank"] == 101
    same = page.evaluate("""(markup) => {
      const template = document.createElement('template');
      template.innerHTML = markup;
      const drawn = document.querySelector('#fig-17 [data-role=view] > svg');
      return [drawn.isEqualNode(template.content.firstElementChild),
              drawn.querySelector('[data-set-strip]').__before === true];
    }""", mesh.render(state).svg)
    assert same == [True, True]


def test_a_kept_view_never_paints_over_a_newer_state(session):
    """A move to a state the page holds, while the answer to an older move is on its way:
    that answer arrives after and is not painted."""
    page = session.page
    set_control(page, FIFTEEN, "P", 11)  # states no other test visits: none kept yet
    set_control(page, FIFTEEN, "v", 3)
    settle(page, FIFTEEN.anchor)
    wait_for_views_around(page, FIFTEEN)
    page.evaluate(MONITOR, FIFTEEN.anchor)
    state = read_state(page, FIFTEEN)
    m = FIFTEEN.control("m")
    here = m.values.index(state["m"])
    far = m.values[0] if here > len(m.values) // 2 else m.values[-1]  # beyond the states sent ahead
    near = m.values[here - 1] if here > 0 else m.values[here + 1]
    shown = page.evaluate("""([far, near]) => {
      const slider = document.querySelector('#fig-15 [data-control=m]');
      slider.value = far;  // asks the worker
      slider.dispatchEvent(new Event('input', {bubbles: true}));
      const busy = document.getElementById('fig-15').hasAttribute('data-busy');
      slider.value = near;  // kept: painted at once, before the answer for `far` comes
      slider.dispatchEvent(new Event('input', {bubbles: true}));
      return busy;
    }""", [str(m.position(far)), str(m.position(near))])
    assert shown is True
    settle(page, FIFTEEN.anchor)
    final = {**state, "m": near}
    assert page.evaluate("window.__painted") == [encode_state(FIFTEEN, final)]
    assert_shows(page, FIFTEEN, final)


def test_a_long_drag_over_the_heaviest_states_builds_no_lag(session):
    """A drag across Figure 15's largest states, one move every 8 ms (faster than any
    frame): when the reader stops, the figure shows the last state within ~a render."""
    page = session.page
    set_control(page, FIFTEEN, "P", 16)
    set_control(page, FIFTEEN, "v", 4)
    lag = page.evaluate("""() => new Promise(resolve => {
      const slider = document.querySelector('#fig-15 [data-control=m]');
      const figure = document.getElementById('fig-15');
      let i = 0;
      const timer = setInterval(() => {
        slider.value = String(1 + (i * 7) % 64);
        slider.dispatchEvent(new Event('input', {bubbles: true}));
        if (++i < 120) return;
        clearInterval(timer);
        const stopped = performance.now();
        const check = () => figure.hasAttribute('data-busy') ? requestAnimationFrame(check) : resolve(performance.now() - stopped);
        check();
      }, 8);
    })""")
    assert lag < 500, f"{lag:.0f} ms from the last move to its paint"
    assert_shows(page, FIFTEEN, read_state(page, FIFTEEN))


def test_a_wasm_served_with_the_wrong_type_is_reported_at_once(browser, base_url):
    """A host that serves .wasm as octet-stream would hang Pyodide silently; the page
    asks first and says that live figures are unavailable."""
    def wrong_type(route):
        response = route.fetch()
        route.fulfill(response=response, headers={**response.headers, "content-type": "application/octet-stream"})
    session = PageSession(browser, base_url, routes={"**/pyodide.asm.wasm": wrong_type})
    try:
        page = session.page
        page.goto(base_url + "/")
        page.wait_for_function("() => document.documentElement.dataset.python === 'failed'", timeout=20_000)
        assert any("served as application/octet-stream" in line for line in session.console)
        assert page.get_attribute("#fig-15", "data-state") == "static"
    finally:
        session.close()


def test_the_site_works_from_a_plain_static_server(browser, site):
    """No COOP/COEP, no compression, no special types beyond what Python's own
    http.server sends: the worker starts and a move paints."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    session = PageSession(browser, f"http://127.0.0.1:{server.server_address[1]}")
    try:
        page = session.open("/")
        assert page.evaluate("window.crossOriginIsolated") is False
        set_control(page, FIFTEEN, "P", 8)
        assert_shows(page, FIFTEEN, {**FIFTEEN.default_state(), "P": 8})
        assert session.console_errors == [] and session.page_errors == [] and session.blocked == []
    finally:
        session.close()
        server.shutdown()


def test_the_policy_sent_as_a_header_on_every_file_still_lets_the_worker_run(browser, base_url):
    """A host may send the page's Content-Security-Policy as a header on every response:
    the worker's script then carries it too, and Pyodide must still start under it."""
    import build

    def with_policy(route):
        response = route.fetch()
        route.fulfill(response=response, headers={**response.headers, "content-security-policy": build.CONTENT_SECURITY_POLICY})
    session = PageSession(browser, base_url, routes={"**/*": with_policy})
    try:
        page = session.open("/")
        set_control(page, FIFTEEN, "P", 8)
        assert_shows(page, FIFTEEN, {**FIFTEEN.default_state(), "P": 8})
        assert page.evaluate("window.__cspViolations") == []
        assert session.console_errors == [] and session.page_errors == [] and session.blocked == []
    finally:
        session.close()


def test_a_policy_that_forbids_webassembly_is_reported_at_once(browser, base_url):
    """Pyodide waits for ever when its WebAssembly may not compile: the worker checks
    first, and the page says the live figures are unavailable (and why)."""
    import build

    policy = build.CONTENT_SECURITY_POLICY.replace(" 'wasm-unsafe-eval'", "")

    def with_policy(route):
        response = route.fetch()
        route.fulfill(response=response, headers={**response.headers, "content-security-policy": policy})
    session = PageSession(browser, base_url, routes={"**/*": with_policy})
    try:
        page = session.page
        page.goto(base_url + "/")
        page.wait_for_function("() => document.documentElement.dataset.python === 'failed'", timeout=20_000)
        assert any("unavailable" in line and "WebAssembly" in line for line in session.console), session.console[-5:]
        assert page.get_attribute("#fig-15", "data-state") == "static"
    finally:
        session.close()


def test_python_starts_only_once_the_article_is_shown(browser, base_url):
    """Python's start keeps every core busy for seconds; the page shows its held article
    first, so no block waits on it (the worker fetches its files meanwhile)."""
    session = PageSession(browser, base_url)
    session.page.add_init_script("""document.addEventListener('DOMContentLoaded', () => {
      const bar = document.querySelector('[data-role=python-progress]');
      window.__heldWhenPythonStarted = null;
      new MutationObserver(() => {
        if (Number(bar.value) >= 2 && window.__heldWhenPythonStarted === null)
          window.__heldWhenPythonStarted = document.querySelectorAll('.chapter[data-held] > :not([data-shown])').length;
      }).observe(bar, {attributes: true});
    })""")
    try:
        page = session.open("/")
        assert page.evaluate("window.__heldWhenPythonStarted") == 0
    finally:
        session.close()


def test_in_a_hidden_tab_python_starts_at_once(browser, base_url):
    """Nobody is looking at a background tab, so nothing there can stall: the page lets
    Python start without waiting for its article to be shown."""
    session = PageSession(browser, base_url)
    session.page.add_init_script("""
      Object.defineProperty(document, 'hidden', {get: () => true});
      Object.defineProperty(document, 'visibilityState', {get: () => 'hidden'});
      window.__heldAtStart = null;
      window.__onWorkerPost = message => {
        if (message && message.start && window.__heldAtStart === null)
          window.__heldAtStart = document.querySelectorAll('.chapter[data-held] > :not([data-shown])').length;
      };""")
    try:
        page = session.open("/")
        assert page.evaluate("window.__heldAtStart") > 0
    finally:
        session.close()
