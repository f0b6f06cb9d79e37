"""The figures' Python in the browser: one Pyodide interpreter in a Web Worker.

It never touches the page (no ``window``, no ``document``, so the site needs no
cross-origin-isolation headers): ``site/static/playbook.js`` owns the DOM, reads the
controls, and calls the ``Worker`` methods named in ``CALLS`` through the message
channel ``site/static/worker.js`` sets up (``serve``). Each call returns plain data as
JSON text, an *answer*::

    {"number": 15, "errors": {key: message}, "view": {...} | null, "error": text | null}

where ``view`` holds everything a state paints: the validated ``state``, its URL
``fragment``, every control's position and shown text, the ``max`` of each slider whose
range the state narrows (``Figure.slider_limits``), the SVG, the Plotly spec, the
readouts (markup, and per-readout slots so the page rewrites only changed numbers),
note, text alternative and HTML block. ``error`` is set when anything the call did for
that figure raised (its render, its press, a message the worker could not read, a module
that would not import): the page shows it in that figure only, and the others go on.

Because ``render`` is pure, a state's view is rendered once and kept (its JSON text,
up to ``VIEW_CACHE_SIZE`` per figure). While no call is waiting, the worker renders
ahead the states one control change away from where the reader is (first the figure
last touched, then those in view), one state per event-loop turn and only after a
pause in the page's calls (a longer one for the figures the reader is not using), so a
call rarely waits behind a render. A figure that declares ``prepare`` (the planner lab,
whose one state is whole searches) is prepared a PREPARE_SLICE_S slice per turn, then
rendered. During a drag it renders at once the next states along the drag (same
slider: one and two strides on).

Each view rendered ahead is posted to the page with its *readings key*: the control
readings that select exactly that state. The page keeps these views, and when the
controls come to read a key it holds, it paints that view at once, without a call
(and tells the worker, with ``touch``, where the reader now is). Readings that
validation moves to another state (a slider past the last rank) are posted as
*aliases* of that state's key.
"""
import asyncio
import gc
import itertools
import json
import re
import time
import traceback
from collections import OrderedDict

import figures
from figures.contract import Number, Slider, Toggle, decode_fragment, encode_state, nearby_moves, nearby_states

TYPED_SEPARATORS = re.compile(r"[,\s_]")  # what playbook.js strips from a typed field's text in a readings key
VIEW_CACHE_SIZE = 128  # views kept per figure
AHEAD_LIMIT = 256  # states rendered ahead per figure, nearest first
ALIASES_PER_TURN = 32  # readings keys aliased in one turn of the render-ahead loop
# Rendering ahead waits for this long a pause after the page's last call: a render under
# way delays the next call by up to a whole render (measured: a drag's calls waited
# ~8 ms behind Figure 15's renders ahead); a reader's drag sends a call every frame.
QUIET_S = 0.05
# The figures in view other than the one the reader is using wait longer: a reader moves
# one figure's controls every few hundred ms, and each of that figure's calls waited
# behind a neighbour's render ahead (measured: Figure 21's answers, 3 ms of Python,
# arrived 9-14 ms after the call while Figures 20 and 22 rendered ahead).
QUIET_OTHERS_S = 1.5
# A state whose figure prepares it (``Figure.prepare``: the planner lab's searches, up to
# ~130 ms in Pyodide) is prepared in slices of this long, one per event-loop turn.
PREPARE_SLICE_S = 0.004
# With automatic collection off (``serve``), the render-ahead loop collects cycles when it
# runs out of work, and at the latest after this many calls and turns.
COLLECT_EVERY = 20_000


def _dumps(value):
    return json.dumps(value, separators=(",", ":"))


def _state_key(state):
    return tuple(sorted(state.items()))


def failure_answer(number, state, error):
    """The answer to a call that raised for figure ``number`` (a render, a press, a
    message the worker could not read): the page shows ``error`` in that figure only
    ("This figure stopped: ..."), and the other figures go on."""
    print(f"figure {number}: " + "".join(traceback.format_exception(error)))
    message = f"{type(error).__name__}: {error}"
    return _dumps({"number": number, "errors": {}, "view": None, "state": state, "error": message})


def _figure_number(number):
    """A call's figure number as the page sent it: an int when it reads as one."""
    try:
        return int(number)
    except (TypeError, ValueError):
        return None


SCREENS = ("wide", "narrow", "short")  # the page's layoutName() (playbook.js)


def _lays_out(figure):
    """Its view differs with the screen: the page must not paint one drawn for another."""
    return figure.lays_out_narrow or figure.lays_out_short


class FigureSession:
    """One figure's views and its render-ahead list."""

    def __init__(self, figure, layout="wide"):
        self.figure = figure
        self.layout = layout  # rendered for this screen: "wide", "narrow" or "short" (``Worker.layout``)
        self.views = OrderedDict()  # state key -> view JSON
        # the (raw, valid) moves to render ahead, nearest first, an iterator that validates
        # each as it is drawn (Figure 17 has ~600: ~35 ms in Pyodide, too long for one
        # turn); None: to be started; () when spent
        self.upcoming = ()
        self.met = set()  # the states those moves reached so far
        self.ahead = 0  # how many: each sent to the page, or found there
        self.center = None  # the state the upcoming list was planned around
        self.last = None  # the state the reader was last at (to tell a drag's direction)
        self.predicted = []  # the (raw, valid) moves next along the reader's drag, to render first
        self.preparing = None  # (raw, valid, steps): the move being prepared ahead (Figure.prepare)
        self.sent = set()  # state keys whose views the page has been sent
        self.aliased = set()  # unvalidated state keys the page has been sent an alias for

    # -- readings from the page -> state ---------------------------------------
    def values_from_readings(self, readings):
        """Control readings as the page holds them (a slider's position, a select's
        value, a checkbox's state, a field's text) -> values ``check_state`` reads."""
        values = {}
        for key, reading in readings.items():
            try:
                control = self.figure.control(key)
            except KeyError:
                continue
            if isinstance(control, Slider):
                try:
                    values[key] = control.from_position(reading)
                except (TypeError, ValueError):
                    continue
            else:
                values[key] = reading
        return values

    def state_from(self, state_json):
        """The page's last good state (JSON), validated; the default when absent."""
        if not state_json:
            return self.figure.default_state()
        return self.figure.validate_state(json.loads(state_json))

    # -- views ------------------------------------------------------------------
    def view_json(self, state):
        key = _state_key(state)
        cached = self.views.get(key)
        if cached is not None:
            self.views.move_to_end(key)
            return cached
        view = self.figure.render(dict(state), narrow=self.layout == "narrow", short=self.layout == "short")
        cached = _dumps(self.describe(state, view))
        self.views[key] = cached
        if len(self.views) > VIEW_CACHE_SIZE:
            self.views.popitem(last=False)
        return cached

    def control_positions(self, state):
        """Each control as the page shows ``state``: ``[position, text]``, the position
        being what its native element holds (a slider's position, a checkbox's state, a
        field's or a menu's text) and the text what is shown beside a slider."""
        controls = {}
        for control in self.figure.stateful_controls:
            value = state[control.key]
            if isinstance(control, Slider):
                controls[control.key] = [control.position_text(value), control.display(value)]
            elif isinstance(control, Toggle):
                controls[control.key] = [bool(value), ""]
            elif isinstance(control, Number):
                controls[control.key] = [control.display(value), ""]
            else:
                controls[control.key] = [str(value), ""]
        return controls

    def readings_key(self, state, selects=None):
        """The page's key for ``state``: its controls' readings, sorted by control key, as
        JSON (``[["N","16"],["stage","2"]]``); playbook.js builds the same text from the
        controls. None when those readings would not select exactly ``selects`` (by
        default ``state`` itself; not so for a typed number whose shown text rounds it):
        the page must then ask the worker. ``state`` may be unvalidated (a slider dragged
        past the last rank): its key then names the readings that select ``selects``."""
        readings = {key: ("true" if position else "false") if isinstance(position, bool) else position
                    for key, (position, _) in self.control_positions(state).items()}
        again, errors = self.figure.check_state(self.values_from_readings(readings))
        if errors or _state_key(again) != _state_key(selects if selects is not None else state):
            return None
        # a typed count is keyed without its separators, as the page keys what a reader types
        # ("1,024" shown, "1024" typed: the same state)
        typed = {c.key for c in self.figure.stateful_controls if isinstance(c, Number)}
        keyed = {key: TYPED_SEPARATORS.sub("", value) if key in typed else value for key, value in readings.items()}
        return json.dumps(sorted(keyed.items()), separators=(",", ":"), ensure_ascii=False)

    def describe(self, state, view):
        return {
            "state": state,
            "key": self.readings_key(state),
            "fragment": encode_state(self.figure, state),
            "controls": self.control_positions(state),
            "limits": self.figure.slider_limits(state),  # a constrained slider's max in this state
            "svg": view.svg,
            "plot": view.plot,
            "readoutsHtml": "".join(r.html() for r in view.readouts),
            # the slot of each readout: a page showing the same slots rewrites only texts
            "readouts": [[r.key, r.label, r.color, r.data_value is None, r.text, r.data_value] for r in view.readouts],
            "note": view.note,
            "alt": view.alt,
            "html": view.html or "",
            "fieldErrors": view.field_errors,  # an input that cannot be met, shown next to its control
            "hints": self.figure.field_hints(state),  # what an empty field stands for
            # the column a figure that lays itself out narrow was rendered for: an answer for
            # the old width, arriving after a phone turned, is asked again rather than painted
            # (playbook.js); other figures' views fit every width and name none
            "layout": self.layout if _lays_out(self.figure) else None,
        }

    def answer(self, state, errors=None):
        """The answer for ``state``, rendering it if needed; a render error is reported,
        not raised."""
        try:
            view = self.view_json(state)
        except Exception as error:  # a broken figure must not break the page
            return self.failure(state, error)
        self.sent.add(_state_key(state))  # the page keeps answers too
        return f'{{"number":{self.figure.number},"errors":{_dumps(errors or {})},"view":{view},"error":null}}'

    def failure(self, state, error):
        """The answer when the figure raised: the page shows ``error`` in this figure only."""
        return failure_answer(self.figure.number, state, error)

    # -- rendering ahead ----------------------------------------------------------
    def plan_ahead(self, state, raw=None):
        """Render ahead around ``state``: the list itself is made by the render-ahead loop,
        after the answer has left (listing the nearby states costs a few ms in Pyodide).
        If the reader is dragging (the controls' values ``raw``, before validation, are
        one slider move from the state touched before), the next state along the drag is
        rendered first, at once."""
        previous, self.last = self.last, state
        self.predicted = self.moves_along_drag(previous, state, raw)
        if self.center is not None and _state_key(self.center) == _state_key(state):
            return
        self.center = state
        self.upcoming, self.ahead, self.preparing = None, 0, None

    def moves_along_drag(self, previous, state, raw=None):
        """The moves the reader's drag makes next, as ``(raw, valid)`` (``nearby_moves``):
        along the slider that moved from ``previous`` to ``state``, one stride on and then
        two, so the page holds the next view while the one after is drawn. After a jump
        of more than two stops (a click on the track), one stop on comes first, then one
        stride. At the end of its range, the way back. Empty unless exactly one slider
        moved. ``raw``: the values the controls read before validation, when known: a
        slider moved past what the state allows (clamped back, or shrinking another
        degree) is still seen as the one moved, with its stride."""
        if previous is None:
            return []
        sliders = {c.key for c in self.figure.stateful_controls if isinstance(c, Slider)}
        raw = {**state, **{key: value for key, value in (raw or {}).items() if key in sliders}}
        moved = [c for c in self.figure.stateful_controls
                 if previous[c.key] != (raw if c.key in sliders else state)[c.key]]
        if len(moved) != 1 or not isinstance(moved[0], Slider):
            return []
        key, values = moved[0].key, moved[0].values
        if previous[key] not in values or raw[key] not in values:
            return []
        here, before = values.index(raw[key]), values.index(previous[key])
        stride = here - before
        steps = (here + (1 if stride > 0 else -1), here + stride) if abs(stride) > 2 else (here + stride, here + 2 * stride)
        # at the end of its range the drag can only come back, to a state validation may have moved since
        targets = [i for i in steps if 0 <= i < len(values)] or [before]
        return [(ahead, self.figure.validate_state(ahead)) for ahead in ({**state, key: values[i]} for i in targets)]

    @property
    def has_upcoming(self):
        return bool(self.predicted) or self.upcoming != () or self.preparing is not None

    def send(self, state):
        """The view of ``state`` (rendered now if need be) for the page to keep: its JSON,
        or None if the page has it already or it cannot be rendered."""
        key = _state_key(state)
        if key in self.sent and key in self.views:
            return None
        try:
            view = self.view_json(state)
        except Exception:
            return None  # the reader sees this error only if they go there
        self.sent.add(key)
        return view

    def alias(self, raw, valid):
        """``[raw readings key, valid's readings key]`` when the controls reading ``raw``
        select the different state ``valid`` (validation moved it): the page paints
        ``valid``'s view for those readings. None otherwise."""
        raw_key = _state_key(raw)
        if raw_key == _state_key(valid) or raw_key in self.aliased or _state_key(valid) not in self.sent:
            return None
        self.aliased.add(raw_key)
        key, of = self.readings_key(raw, selects=valid), self.readings_key(valid)
        return [key, of] if key and of and key != of else None

    def render_one_ahead(self):
        """One turn of rendering ahead: a move next along a drag, else the nearest move
        not yet sent to the page. Returns ``(view JSON or None, aliases)`` to post; aliases
        (``alias``) name readings that select a state the page holds already.
        ``has_upcoming`` turns False when no move is left."""
        aliases = []
        while self.predicted:
            raw, valid = self.predicted.pop(0)
            view, alias = self.send(valid), self.alias(raw, valid)
            if view is not None or alias:
                return view, [alias] if alias else []
        if self.upcoming is None:
            moves = nearby_moves(self.figure, self.center, AHEAD_LIMIT)  # validated as they are drawn
            if _state_key(self.center) not in self.sent:  # the page's drawing of it is the baked one
                moves = itertools.chain([(self.center, self.center)], moves)
            self.upcoming, self.met, self.ahead = moves, set(), 0
        if self.preparing is not None:
            return self.prepare_more(aliases)
        view = None
        for raw, valid in self.upcoming:  # moves to states the page has cost no render
            if _state_key(valid) not in self.met:
                self.met.add(_state_key(valid))
                self.ahead += 1
            if self.figure.prepare is not None and _state_key(valid) not in self.views:
                self.preparing = (raw, valid, self.figure.prepare(dict(valid)))
                return self.prepare_more(aliases)
            view = self.send(valid)
            alias = self.alias(raw, valid)
            if alias:
                aliases.append(alias)
            if view is not None or len(aliases) >= ALIASES_PER_TURN:
                break
        else:
            self.upcoming = ()
        return view, aliases

    def prepare_more(self, aliases):
        """One slice (PREPARE_SLICE_S) of preparing the move under way; once it is
        prepared, its view (rendered now, cheaply) and alias, as ``render_one_ahead``."""
        raw, valid, steps = self.preparing
        deadline = time.monotonic() + PREPARE_SLICE_S
        try:
            for _ in steps:
                if time.monotonic() >= deadline:
                    return None, aliases
        except Exception:
            pass  # render raises it again, should the reader go there
        self.preparing = None
        view, alias = self.send(valid), self.alias(raw, valid)
        return view, aliases + ([alias] if alias else [])


class Worker:
    """What the page calls. Every function takes and returns text (JSON)."""

    def __init__(self, post):
        self.post = post  # sends one message to the page
        self.known = figures.module_names()  # every figure; each imported when first needed
        self.sessions = {}
        self.touched = []  # figure numbers, most recently touched last
        self.watched = []  # figure numbers in view, or within 1500 px of it
        self.on_screen = None  # figure numbers on screen (None: the page has not said)
        self.waiter = None  # what the render-ahead loop awaits while idle
        self.last_report = {}
        self.last_call = 0.0
        self.uncollected = 0  # calls and render-ahead turns since the last collection
        self.screen = "wide"  # the page's screen: "wide", "narrow" (a phone) or "short" (``layout``)
        self.unloadable = {}  # figure number -> why its module could not be imported

    def _session(self, number):
        number = int(number)
        session = self.sessions.get(number)
        if session is None:
            if number in self.unloadable:
                raise self.unloadable[number]
            try:
                figure = figures.load(number)
            except Exception as error:  # one broken module: that figure's error, every time it is asked
                self.unloadable[number] = error
                raise
            session = self.sessions[number] = FigureSession(figure, self.screen)
        return session

    def _contained(self, number, answer, state_json=""):
        """``answer()``, one call's answer for figure ``number``; if it raises (a broken
        figure, a message the worker cannot read), that figure's error answer instead:
        one figure's failure never reaches the page as the worker's."""
        try:
            return answer()
        except Exception as error:
            try:
                state = json.loads(state_json) if state_json else None
            except Exception:
                state = None
            return failure_answer(_figure_number(number), state, error)

    def layout(self, screen_json):
        """The page's screen: "wide", "narrow" (a phone's column) or "short" (a phone on its
        side; ``true``/``false`` also mean narrow/wide). The figures are rendered for it from
        now on. When that changes (a phone turned), every view kept here was drawn for the
        other screen and is dropped, as the page drops its own; each figure that lays itself
        out for a screen starts its render-ahead again."""
        try:
            screen = json.loads(screen_json)
            screen = {True: "narrow", False: "wide"}.get(screen, screen) if isinstance(screen, bool) else screen
            if screen not in SCREENS:
                raise ValueError(f"no such screen: {screen!r}")
        except Exception as error:  # the screen stays as it was; no figure is hurt
            print("layout: " + "".join(traceback.format_exception(error)))
            return ""
        if screen == self.screen:
            return ""
        self.screen = screen
        for number, session in list(self.sessions.items()):
            try:
                if _lays_out(session.figure):
                    fresh = self.sessions[number] = FigureSession(session.figure, screen)
                    fresh.last = session.last
                    if session.center is not None:
                        fresh.plan_ahead(session.center)
                else:
                    session.layout = screen
            except Exception as error:  # that figure starts afresh on its next call; the others are relaid
                print(f"figure {number} (layout): " + "".join(traceback.format_exception(error)))
                self.sessions.pop(number, None)
        self.wake()
        return ""

    def load_next(self):
        """Import one figure not yet imported (while idle after start); False when all are.
        A module that cannot be imported is left for its figure's calls to report."""
        for number in self.known:
            if number not in self.sessions and number not in self.unloadable:
                try:
                    self._session(number)
                except Exception:
                    pass
                return True
        return False

    def _touch(self, session, state, raw=None):
        self.last_call = time.monotonic()
        self.uncollected += 1
        number = session.figure.number
        if number in self.touched:
            self.touched.remove(number)
        self.touched.append(number)
        session.plan_ahead(state, raw)
        self.wake()

    def update(self, number, readings_json, values_json, state_json):
        """The reader moved controls (``readings``: every control's reading) or clicked a
        part of the drawing that sets ``values``; ``state``: the last good state. Anything
        that raises on the way is this figure's error (``_contained``)."""
        def answer():
            session = self._session(number)
            fallback = session.state_from(state_json)
            raw = session.values_from_readings(json.loads(readings_json or "{}"))
            raw.update(json.loads(values_json or "{}"))
            state, errors = session.figure.check_state(raw, fallback=fallback)
            errors = {key: message for key, message in errors.items() if isinstance(session.figure.control(key), Number)}
            self._touch(session, state, raw)
            return session.answer(state, errors)
        return self._contained(number, answer, state_json)

    def press(self, number, key, state_json):
        def answer():
            session = self._session(number)
            state = session.state_from(state_json)
            state = session.figure.press(key, state)
            self._touch(session, state)
            return session.answer(state)
        return self._contained(number, answer, state_json)

    def restore(self, fragment):
        """A link's state (``#fig-15:P=8,m=16``): the answer, or "null" if the fragment
        names no figure on this page."""
        decoded = decode_fragment(str(fragment or ""))
        if decoded is None or decoded[0] not in self.known:
            return "null"

        def answer():
            session = self._session(decoded[0])
            state = session.figure.validate_state(decoded[1])
            self._touch(session, state)
            return session.answer(state)
        return self._contained(decoded[0], answer)

    def touch(self, number, state_json, readings_json=""):
        """The page painted ``state`` from a view it kept (no call was needed) for the
        controls' ``readings``: the reader is there now, so render ahead around it (and
        along the drag, if it is one)."""
        try:
            session = self._session(number)
            raw = session.values_from_readings(json.loads(readings_json or "{}"))
            self._touch(session, session.state_from(state_json), raw)
        except Exception as error:  # only render-ahead is lost; the figure's next call says what broke
            print(f"figure {number} (touch): " + "".join(traceback.format_exception(error)))
        return ""

    def watch(self, numbers_json, on_screen_json=None):
        """The figures now in view (or near it): rendered ahead after the one last touched;
        and those on screen, if the page says: once the last touched is not among them,
        the reader has left it, and the others need not wait for QUIET_OTHERS_S."""
        self.watched = [int(n) for n in json.loads(numbers_json) if int(n) in self.known]
        if on_screen_json is not None:
            self.on_screen = {int(n) for n in json.loads(on_screen_json)}
        for number in list(self.watched):
            try:
                session = self._session(number)
                if session.center is None:
                    session.plan_ahead(session.figure.default_state())
            except Exception:  # a figure that cannot load is not rendered ahead (its calls say why)
                self.watched.remove(number)
        self.wake()

    def rehearsal(self, number, index):
        """The chart of the ``index``-th state near the last one touched (a Plotly spec as
        JSON, or "null"): the page draws it and straight back while the reader is idle,
        so the chart's first real redraws are not its slowest."""
        try:
            session = self._session(number)
            center = session.center or session.figure.default_state()
            nearby = nearby_states(session.figure, center, int(index) + 1)
            if len(nearby) <= int(index):
                return "null"
            view = json.loads(session.view_json(nearby[int(index)]))
        except Exception:  # a rehearsal is only a warm-up: none, rather than an error
            return "null"
        return _dumps(view["plot"])

    def _next_ahead(self):
        """The session to render ahead for next: the figure last touched while the reader
        uses it; once the reader has left it alone for QUIET_OTHERS_S, or scrolled it off
        screen, whichever of it and those in view has the fewest states rendered around
        the reader's (the last touched first on a tie). The figure a reader scrolls to
        next then gets its nearest states first, not after the one left behind has
        rendered all of its own (the planner lab's: minutes of searches). Returns
        (session or None, seconds to wait before another may be due)."""
        last = self.sessions.get(self.touched[-1]) if self.touched else None
        in_use = last is not None and (self.on_screen is None or last.figure.number in self.on_screen)
        wait = self.last_call + QUIET_OTHERS_S - time.monotonic() if in_use else 0.0
        if last and last.has_upcoming and wait > 0:
            return last, 0.0
        due = [session for session in [last] + [self.sessions.get(n) for n in reversed(self.watched)]
               if session and session.has_upcoming]
        if not due:
            return None, 0.0
        if wait > 0:
            return None, wait
        return min(due, key=lambda session: session.ahead), 0.0

    def _dragged(self):
        """The figure last touched, if the state next along the reader's drag is due."""
        if self.touched:
            session = self.sessions.get(self.touched[-1])
            if session is not None and session.predicted:
                return session
        return None

    def wake(self):
        """A call came: the render-ahead loop, if idle, looks again at what to do."""
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def _idle(self, seconds=None):
        """Wait until a call wakes the loop (or ``seconds`` pass). Nothing is cancelled:
        Pyodide's event loop prints a traceback for every cancelled task (pyodide#5782),
        which ``asyncio.wait_for``'s timeout is; the timer just resolves the waiter."""
        loop = asyncio.get_running_loop()
        self.waiter = waiter = loop.create_future()
        if seconds is not None:
            loop.call_later(seconds, lambda: waiter.done() or waiter.set_result(None))
        await waiter

    def collect_if_due(self, idle=False):
        """Collect cycles (automatic collection is off, ``serve``) once the loop is idle
        after any work, or after COLLECT_EVERY calls and turns whatever it is doing.
        True if it collected."""
        if not idle:
            self.uncollected += 1  # this turn
        if not self.uncollected or (not idle and self.uncollected < COLLECT_EVERY):
            return False
        self.uncollected = 0
        gc.collect()
        return True

    async def render_ahead(self):
        """Forever: render one state ahead per event-loop turn while there is one, and
        post its view to the page. The state next along a drag goes at once; the rest
        wait for a pause in the page's calls."""
        while True:
            session = self._dragged()
            quiet = self.last_call + QUIET_S - time.monotonic()
            if session is None and quiet > 0:
                await self._idle(quiet)
                continue
            if session is None:
                session, wait = self._next_ahead()
                if wait > 0:
                    await self._idle(wait)
                    continue
            if session is None:
                if self.load_next() or self.collect_if_due(idle=True):  # idle: import, collect
                    await asyncio.sleep(0)
                    continue
                await self._idle()
                continue
            self.collect_if_due()
            number = session.figure.number
            try:
                view, aliases = session.render_one_ahead()
            except Exception as error:  # this figure renders nothing more ahead; the others go on
                print(f"figure {number} (ahead): " + "".join(traceback.format_exception(error)))
                session.upcoming, session.predicted, session.preparing = (), [], None
                await asyncio.sleep(0)
                continue
            if view is not None:
                self.post(f'{{"type":"view","number":{number},"view":{view}}}')
            if aliases:
                self.post({"type": "aliases", "number": number, "aliases": aliases})
            if not session.has_upcoming or time.monotonic() - self.last_report.get(number, 0) > 0.25:
                self.last_report[number] = time.monotonic()
                around = encode_state(session.figure, session.center) if session.center else ""
                self.post({"type": "ahead", "number": number, "ready": session.ahead, "around": around})
            await asyncio.sleep(0)


CALLS = ("layout", "update", "press", "restore", "touch", "watch", "rehearsal")  # what the page may call


def serve(post):
    """Start serving the page: ``post(text)`` sends the page one message, JSON text
    (``site/static/worker.js`` passes it on). Returns ``dispatch(name, *args)``,
    which answers one of the page's ``CALLS``; reports ready, or raises why not."""
    worker = Worker(lambda message: post(message if isinstance(message, str) else _dumps(message)))

    def dispatch(name, *args):
        if name not in CALLS:
            raise ValueError(f"no call named {name!r}")
        return getattr(worker, name)(*args)

    asyncio.ensure_future(worker.render_ahead())
    # Everything alive now lives for the whole visit: out of the collector's view. And no
    # automatic collections: in Pyodide they paused renders for 10-23 ms each (Python
    # 3.14's old-generation increments), while a full collection after a long visit (17k
    # objects, 23-37 ms) found no garbage at all: what the figures and the planner build
    # holds no cycles and is freed as it is dropped. The render-ahead loop collects when
    # it has nothing left to do (``collect_if_due``).
    gc.freeze()
    gc.disable()
    worker.post({"type": "ready"})
    return dispatch
