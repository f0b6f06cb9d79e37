"""The browser runtime: the only Python that touches the DOM.

One main-thread PyScript interpreter serves every figure on the page. For each
``<figure data-figure>`` it binds the native controls, keeps the figure's state, and on
every ``input`` event re-renders through the figure's pure ``render(state)``. A figure
that raises shows the error inside itself (``data-state="error"``); the others go on.
The URL fragment (``#fig-15:P=8,m=16``) mirrors the last figure a reader touched, and
opening such a link restores that state and scrolls to it.
"""
import gc
import json
import time
import traceback
from collections import OrderedDict, deque

from pyscript import document, window
from pyscript.ffi import create_proxy

from figures import registry
from figures.contract import Slider, Select, Toggle, Button, Number, decode_fragment, encode_state, nearby_states

_live = {}  # figure number -> LiveFigure
_proxies = []  # event listeners must outlive this module's frames
VIEW_CACHE_SIZE = 128  # rendered views kept per figure (render is pure, so a view is reusable)
PRERENDER_LIMIT = 96  # states rendered ahead while the reader is idle, nearest first
IDLE_PERIOD_MS = 50  # the longest idle period a browser grants (requestIdleCallback spec)
REHEARSALS = 4  # idle-time chart redraws that compile plotly's update path (playbook.js)


class LiveFigure:
    def __init__(self, figure, element):
        self.figure = figure
        self.element = element
        self.inputs = {c.key: element.querySelector(f'[data-control="{c.key}"]') for c in figure.controls}
        self.outputs = {c.key: element.querySelector(f'output[data-for="{c.key}"]') for c in figure.controls}
        self.plot = element.querySelector('[data-role="plot"]')  # None for a figure without a chart
        self.shown_readouts = ()  # the Readouts on the page, once the runtime has painted them
        self.shown_values = {}  # slider key -> the text its <output> shows, once written here
        self.error = element.querySelector('[data-role="error"]')
        self.field_errors = {c.key: element.querySelector(f'[data-role="field-error"][data-for="{c.key}"]')
                             for c in figure.controls if isinstance(c, Number)}
        self.state = figure.validate_state(self.read_controls())
        self.views = OrderedDict()  # state key -> View, most recent last
        self.upcoming = []  # states one control change away, rendered while the reader is idle
        self.idle_proxy = create_proxy(self.render_upcoming)
        _proxies.append(self.idle_proxy)
        self.recent_render_ms = deque([0.0], maxlen=8)
        self.idle_requested = False
        self.planned = 0
        self.rehearsals_left = REHEARSALS if self.plot is not None else 0
        for control in figure.controls:
            node = self.inputs[control.key]
            if isinstance(control, Button):
                self._listen(node, "click", lambda event, key=control.key: self.on_press(key))
            else:
                self._listen(node, "input", lambda event: self.on_input())
                self._listen(node, "change", lambda event: self.remember_in_url())

    def _listen(self, node, event_name, handler):
        proxy = create_proxy(handler)
        _proxies.append(proxy)
        node.addEventListener(event_name, proxy)

    # -- controls <-> state ------------------------------------------------
    def read_controls(self):
        raw = {}
        for control in self.figure.stateful_controls:
            node = self.inputs[control.key]
            if isinstance(control, Slider):
                raw[control.key] = control.from_position(node.value)
            elif isinstance(control, Toggle):
                raw[control.key] = bool(node.checked)
            else:
                raw[control.key] = node.value
        return raw

    def write_controls(self, typed_fields=True):
        """Set every control to the state; ``typed_fields=False`` leaves the text a reader
        is typing alone (a constraint moving another control must not rewrite it)."""
        for control in self.figure.stateful_controls:
            node = self.inputs[control.key]
            value = self.state[control.key]
            if isinstance(control, Number):
                if typed_fields:
                    node.value = control.display(value)
            elif isinstance(control, Slider):
                node.value = str(control.position(value))
            elif isinstance(control, Toggle):
                node.checked = bool(value)
            elif isinstance(control, Select):
                node.value = str(value)
        self.show_values()

    def show_values(self):
        """Each slider's value as text, beside it and for screen readers. Only those that
        changed are written: a rewritten <output> is laid out again even if equal."""
        for control in self.figure.stateful_controls:
            if isinstance(control, Slider):
                text = control.display(self.state[control.key])
                if self.shown_values.get(control.key) == text:
                    continue
                self.shown_values[control.key] = text
                self.outputs[control.key].textContent = text
                self.inputs[control.key].setAttribute("aria-valuetext", text)

    # -- events -------------------------------------------------------------
    def on_input(self):
        state, errors = self.figure.check_state(self.read_controls(), fallback=self.state)
        self.show_field_errors(errors)
        unchanged = state == self.state
        self.state = state
        if self.figure.constrain is not None:  # it may have moved a control (a rank past the world's end)
            self.write_controls(typed_fields=False)
        if unchanged and self.element.dataset.state == "live":
            return  # e.g. a slider dragged within one step: the drawing already shows it
        self.show()
        self.show_values()  # after the drawing: plotly measures text, which lays out anything already changed

    def show_field_errors(self, errors):
        for key, node in self.field_errors.items():
            message = errors.get(key, "")
            if node.textContent != message:
                node.textContent = message
                node.hidden = not message
                self.inputs[key].setAttribute("aria-invalid", "true" if message else "false")

    def on_press(self, key):
        try:
            self.state = self.figure.press(key, self.state)
        except Exception as error:  # a broken button must not break the page
            self.fail(error)
            return
        self.write_controls()
        self.show()
        self.remember_in_url()

    def remember_in_url(self):
        window.history.replaceState(None, "", "#" + encode_state(self.figure, self.state))

    # -- drawing --------------------------------------------------------------
    def show(self):
        try:
            self.paint(self.view_for(self.state))  # which also marks the figure live
        except Exception as error:
            self.fail(error)
            return False
        self.plan_upcoming()
        return True

    def view_for(self, state):
        key = tuple(sorted(state.items()))
        view = self.views.get(key)
        if view is None:
            started = time.perf_counter()
            view = self.figure.render(dict(state))
            self.recent_render_ms.append((time.perf_counter() - started) * 1000)
            self.views[key] = view
            if len(self.views) > VIEW_CACHE_SIZE:
                self.views.popitem(last=False)
        else:
            self.views.move_to_end(key)
        return view

    # While the reader looks at a figure, render the states a single control change can
    # reach, nearest first: one step along each control (where a drag goes next), then two
    # steps, and so on to the ends. A drag, a click on a slider's track or a new option
    # then only has to paint. A state is rendered only while the browser says the idle
    # period outlasts this figure's slowest recent render, so the work does not delay
    # the reader's next input.
    # The list itself is made in the first idle period too (~0.5 ms in Pyodide that the
    # input handler need not spend).
    def plan_upcoming(self):
        self.upcoming = None  # to be listed for self.state when the browser is idle
        self.ask_for_idle_time()

    def ask_for_idle_time(self):
        if self.upcoming != [] and not self.idle_requested:
            self.idle_requested = True
            window.requestIdleCallback(self.idle_proxy)

    def render_upcoming(self, deadline):
        self.idle_requested = False
        if self.upcoming is None:
            limit = PRERENDER_LIMIT if self.figure.render_ahead else 0
            self.upcoming = nearby_states(self.figure, self.state, limit)
            self.upcoming.reverse()  # popped from the end
            self.planned = len(self.upcoming)
        needed_ms = min(max(self.recent_render_ms), IDLE_PERIOD_MS - 5)
        if self.rehearsals_left and self.upcoming and deadline.timeRemaining() > IDLE_PERIOD_MS - 10:
            self.rehearse(self.upcoming[-1])
        while self.upcoming and deadline.timeRemaining() > needed_ms:
            state = self.upcoming.pop()
            if tuple(sorted(state.items())) in self.views:
                continue
            try:
                self.view_for(state)
            except Exception:
                pass  # the reader sees this error only if they actually go there
        self.element.dataset.ahead = str(self.planned - len(self.upcoming))  # states ready ahead
        self.ask_for_idle_time()

    def rehearse(self, state):
        """Draw the chart of a nearby state and back while the reader is idle (see
        playbookRehearse): the first moves then cost what later ones do."""
        try:
            view = self.view_for(state)
        except Exception:
            return  # the loop below drops this state; the next idle period tries another
        if view.plot is not None and window.playbookRehearse(self.plot, json.dumps(view.plot)):
            self.rehearsals_left -= 1
            self.element.dataset.rehearsed = str(REHEARSALS - self.rehearsals_left)

    def paint(self, view):
        plot = None if view.plot is None else json.dumps(view.plot)
        window.playbookPaint(self.element, view.svg, plot, self.readout_changes(view.readouts), view.note, view.alt, view.html or "")
        self.shown_readouts = view.readouts

    def readout_changes(self, readouts):
        """For playbookPaint, as JSON: [index, text, value] of each readout whose number
        changed when the readouts are the ones on the page (same keys, labels, swatches
        and whether they carry a raw value), else the whole list's markup. Re-parsing the list on every move would
        cost ~0.5 ms more in parse and layout."""
        shown = self.shown_readouts
        if len(shown) != len(readouts) or not all(old.same_slot(new) for old, new in zip(shown, readouts)):
            return json.dumps("".join(r.html() for r in readouts))
        return json.dumps([
            (index, new.text, new.data_value)
            for index, (old, new) in enumerate(zip(shown, readouts))
            if (new.text, new.data_value) != (old.text, old.data_value)
        ])

    def fail(self, error):
        self.element.dataset.state = "error"
        self.error.hidden = False
        self.error.textContent = (
            f"This figure hit an error and stopped updating ({type(error).__name__}: {error}). "
            "The other figures are unaffected."
        )
        window.console.warn(f"figure {self.figure.number:02d}: " + "".join(traceback.format_exception(error)))


def restore_from_url(event=None):
    decoded = decode_fragment(str(window.location.hash or ""))
    if decoded is None or decoded[0] not in _live:
        return
    number, values = decoded
    live = _live[number]
    live.state = live.figure.validate_state(values)
    live.write_controls()
    live.show()
    live.element.scrollIntoView()


def _prerender_when_visible():
    """A figure that scrolls into view starts rendering its nearby states while idle, so
    the reader's first move is already cheap."""

    def on_visible(entries, observer):
        for entry in entries:
            live = _live.get(int(entry.target.dataset.figure))
            if entry.isIntersecting and live is not None and live.upcoming == []:
                live.plan_upcoming()

    proxy = create_proxy(on_visible)
    _proxies.append(proxy)
    observer = window.IntersectionObserver.new(proxy)
    for live in _live.values():
        observer.observe(live.element)


def start():
    """Bind every figure on the page, then mark the page ready."""
    figures = registry()
    for element in document.querySelectorAll("figure[data-figure]"):
        number = int(element.dataset.figure)
        try:
            live = LiveFigure(figures[number], element)
        except Exception as error:
            element.dataset.state = "error"
            window.console.warn(f"figure {number:02d} could not start: {error!r}")
            continue
        _live[number] = live
        if live.state == live.figure.default_state():
            live.element.dataset.state = "live"  # the baked drawing already shows this state
        elif live.show():
            live.show_values()
    proxy = create_proxy(restore_from_url)
    _proxies.append(proxy)
    window.addEventListener("hashchange", proxy)
    _prerender_when_visible()
    restore_from_url()
    # Everything alive now (modules, figures, proxies) lives for the whole visit: move it
    # out of the collector's view so collections during a redraw stay short.
    gc.freeze()
    document.documentElement.dataset.python = "ready"
