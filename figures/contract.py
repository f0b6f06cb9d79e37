"""The figure contract: what a figure module declares and what its ``render`` returns.

A figure module (``figures/figNN_slug.py``) defines

    NUMBER = 15                      # its place in the article
    TITLE = "..."                    # one line
    CAPTION = "..."                  # what it shows: one or two sentences
    NOTE = "..."                     # optional: how to read it, what it assumes (under "How to read it")
    TRIES = (("Sixteen stages", {"P": 16}), ...)  # optional: states worth a look, one click each
    CONTROLS = (Slider(...), Select(...), Toggle(...), Button(...))
    PRIMARY = ("P", "m")             # optional: the one or two controls a reader moves most
    GROUPS = (("Model", ("layers", ...)), ...)  # optional: the other controls under headings
    FOLDS = ("Pin the plan",)        # optional: groups folded on their own on a phone
    READOUTS_FIRST = True            # optional: readouts under the drawing, before a long html block
    def render(state, narrow=False) -> View: ...  # pure: the same state always gives the same view

``narrow`` (optional parameter): the figure is shown in a column narrower than
``NARROW_MAX_PX`` (a phone). The figure then lays itself out for it: panels stacked in
one column, no drawing wider than ``NARROW_DRAWING_PX`` at its smallest label size,
the element that carries its point marked ``svg.KEY`` (figure-checklist.md). On a
narrow screen the page keeps the ``PRIMARY`` controls (default: the first) in a bar
that stays in view while the figure is, and folds the rest behind one tap.

``short`` (optional parameter, ``render(state, narrow=False, short=False)``): the screen is
short but not narrow (``SHORT_MAX_PX`` tall or less: a phone on its side), where the page
also keeps the controls in a bar. The figure then lays itself out as wide as its wide
drawing and no taller than ``SHORT_DRAWING_PX`` under that bar. The page asks for it once
Python runs (until then, and without JavaScript, the wide drawing is shown).

and, where one control's valid range depends on others, optionally

    def constrain(state) -> state: ...  # snaps a state into range (a rank below the world size)
    def limits(state) -> {key: value}:  # each such slider's highest value in this state

``state`` is a plain dict ``{control key: value}`` that always passes
``validate_state``. The same ``render`` runs at build time in CPython (baked into the
HTML) and in the browser on every control move, so it must be pure and fast, and it
must not compute costs itself: every number comes from ``models/``.

This module is deliberately free of DOM code so both sides can import it.
"""
import math
from dataclasses import dataclass, field
from functools import cached_property
from html import escape


# Below this column width (CSS px, the page's ``(max-width: 40rem)`` breakpoint) figures
# are rendered with ``narrow=True``; playbook.css and playbook.js use the same query.
NARROW_MAX_PX = 640
# A narrow drawing's ``min-width`` (svg.document) is at most this: the drawing column of a
# 360 px phone is 323 px wide, so it never scrolls sideways.
NARROW_DRAWING_PX = 320
# At or under this height (the page's ``(max-height: 32rem)``), a screen wider than
# NARROW_MAX_PX is short (a phone on its side): figures that lay themselves out for it are
# rendered ``short=True``, no taller than SHORT_DRAWING_PX drawn at their min-width, so they
# fit under a one-row bar (~62 px) on a phone 360-390 px tall.
SHORT_MAX_PX = 512
SHORT_DRAWING_PX = 296


@dataclass(frozen=True)
class Slider:
    """A range input. Linear from ``min`` to ``max`` in ``step``; or, when ``stops`` is
    given, it walks that tuple of values (use ``log_stops`` for a log-scale slider)."""

    key: str
    label: str
    min: float = 0
    max: float = 1
    step: float = 1
    default: float = 0
    unit: str = ""
    stops: tuple = ()
    format: object = None  # value -> text shown beside the slider; default: the number

    def __post_init__(self):
        if self.stops:
            object.__setattr__(self, "min", self.stops[0])
            object.__setattr__(self, "max", self.stops[-1])
            if self.default not in self.stops:
                raise ValueError(f"{self.key}: default {self.default!r} is not one of its stops")
        elif not self.min <= self.default <= self.max:
            raise ValueError(f"{self.key}: default {self.default!r} outside [{self.min}, {self.max}]")

    def coerce(self, raw):
        """Any value (number or text) to the nearest allowed value; ``ValueError`` if unreadable."""
        value = float(raw)
        if not math.isfinite(value):
            raise ValueError(f"{self.key} must be a finite number, got {raw!r}")
        if self.stops:
            exact = self._stop_of.get(value)
            if exact is not None:
                return exact
            return min(self.stops, key=lambda s: (abs(math.log(s / value)) if s > 0 and value > 0 else abs(s - value)))
        value = min(max(value, self.min), self.max)
        steps = round((value - self.min) / self.step)
        # rounded as a range input steps (in decimal: 12 steps of 0.05 is 0.6, not
        # 0.6000000000000001), so the value the page reads back is this one
        value = round(self.min + steps * self.step, 12)
        return int(round(value)) if _is_whole(self.step) and _is_whole(self.min) else value

    @cached_property
    def _stop_of(self):  # each stop by its float value: a stop read back is found at once
        return {float(stop): stop for stop in self.stops}

    @cached_property
    def values(self):
        """Every value the slider can take, lowest first (computed once: Figure 17's rank
        slider has 4,096)."""
        if self.stops:
            return self.stops
        return tuple(self.coerce(self.min + i * self.step) for i in range(int(round((self.max - self.min) / self.step)) + 1))

    def display(self, value):
        text = self.format(value) if self.format else format_value(value)
        return f"{text} {self.unit}".strip()

    def position(self, value):
        """What the native ``<input type=range>`` holds for ``value`` (an index for stops)."""
        return self.stops.index(value) if self.stops else value

    def position_text(self, value):
        """``position`` as the input's ``value`` reads it: JavaScript's number text
        (``String(x)``), so 1.0 reads "1". Readings keys and markup use this text."""
        position = self.position(value)
        if isinstance(position, float) and position.is_integer() and abs(position) < 1e21:
            return str(int(position))
        return repr(position)

    def highest_at_most(self, value):
        """The largest value the slider can take that is not above ``value`` (its lowest if none is)."""
        if self.stops:
            return max((s for s in self.stops if s <= value), default=self.stops[0])
        if value >= self.max:
            return self.coerce(self.max)
        steps = max(0, math.floor((value - self.min) / self.step + 1e-9))
        return self.coerce(self.min + steps * self.step)

    def from_position(self, position):
        if self.stops:
            index = min(max(int(round(float(position))), 0), len(self.stops) - 1)
            return self.stops[index]
        return self.coerce(position)


@dataclass(frozen=True)
class Select:
    key: str
    label: str
    options: tuple  # ((value, label), ...); values are strings or ints
    default: object = None

    def __post_init__(self):
        if self.default is None:
            object.__setattr__(self, "default", self.options[0][0])
        if self.default not in self.values:
            raise ValueError(f"{self.key}: default {self.default!r} is not an option")

    @cached_property
    def values(self):
        return tuple(value for value, _ in self.options)

    def coerce(self, raw):
        for value in self.values:
            if str(value) == str(raw):
                return value
        raise ValueError(f"{self.key} must be one of {', '.join(map(str, self.values))}, got {raw!r}")


@dataclass(frozen=True)
class Toggle:
    key: str
    label: str
    default: bool = False
    values = (False, True)

    def coerce(self, raw):
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "on", "yes"):
            return True
        if text in ("0", "false", "off", "no"):
            return False
        raise ValueError(f"{self.key} must be on or off, got {raw!r}")


@dataclass(frozen=True)
class Play(Toggle):
    """A play/pause toggle: while on, the page advances the slider ``drives`` by one
    value every ``interval_ms`` (wrapping to its start). It starts off, stays off in
    links (``encode_state`` leaves it out), and a reader who prefers reduced motion
    must press it; ``render`` treats it as a plain boolean."""

    drives: str = ""
    interval_ms: int = 700


@dataclass(frozen=True)
class Number:
    """A number the reader types (the planner lab's fields). Unlike a slider it is not
    snapped in silence: text that is not a number, or a value outside [min, max], raises
    ``ValueError`` with a message written for the reader, which ``Figure.check_state``
    returns so the page can show it next to the field (the figure keeps its last good
    value meanwhile). Accepts "1e9", "7B", "70 000", "1,024"; ``integer`` fields must be
    whole. ``samples`` are values the tests and the render-ahead try besides the ends."""

    key: str
    label: str
    min: float = 0
    max: float = 1
    default: float = 0
    unit: str = ""
    integer: bool = False
    samples: tuple = ()
    # the value an empty field stands for (the planner lab's "the preset's own"), shown
    # empty with the figure's ``hints`` as placeholder; None: a field must hold a number.
    # It may lie outside [min, max] (the lab's 0): then only an empty field, or the value
    # itself from a state, reads as it; typed, it is refused like any value out of range
    # (a typed "0 layers" is an error, not the preset), and the message says what an
    # empty field means (``blank_text``)
    blank: float | None = None
    blank_text: str = ""
    # value -> the text shown in the field (it must read back as the same value: coerce);
    # default ``count_text``: "16,384", "300B", "15.6T"
    format: object = None

    _SUFFIXES = {"k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}

    def __post_init__(self):
        if not (self.min <= self.default <= self.max or self.default == self.blank):
            raise ValueError(f"{self.key}: default {self.default!r} outside [{self.min}, {self.max}]")

    def coerce(self, raw):
        if isinstance(raw, bool):
            raise ValueError(f"{self.label}: enter a number")
        if isinstance(raw, (int, float)):
            if self.blank is not None and raw == self.blank:
                return self.blank  # a state's own empty field (typed text never comes as a number)
            value = float(raw)
        else:
            text = str(raw).strip().replace(",", "").replace(" ", "").replace("_", "")
            if not text and self.blank is not None:
                return self.blank
            if not text:
                raise ValueError(f"{self.label}: enter a number")
            scale = self._SUFFIXES.get(text[-1].lower(), 1) if text[-1].isalpha() and text[-2:-1].isdigit() else 1
            try:
                value = float(text[:-1] if scale != 1 else text) * scale
            except ValueError:
                raise ValueError(f"{self.label}: {str(raw).strip()!r} is not a number") from None
        if not math.isfinite(value):
            raise ValueError(f"{self.label}: enter a finite number")
        empty = f" (empty: {self.blank_text})" if self.blank_text else ""
        if value < self.min:
            raise ValueError(f"{self.label}: at least {self._bound(self.min)}{empty}")
        if value > self.max:
            raise ValueError(f"{self.label}: at most {self._bound(self.max)}{empty}")
        if self.integer:
            if not value.is_integer():
                raise ValueError(f"{self.label}: a whole number")
            return int(value)
        return int(value) if value.is_integer() and abs(value) < 2**53 else value

    def _bound(self, value):
        """A bound as a message gives it: "1,024", "1 sequence", "1,000T", "1 Gb/s"."""
        unit = self.unit[:-1] if value == 1 and self.unit.endswith("s") and "/" not in self.unit else self.unit
        return f"{count_text(value)} {unit}".strip()

    @property
    def values(self):
        """Values the tests and the render-ahead may use: the ends, the default, the samples."""
        return tuple(sorted({self.coerce(v) for v in (self.min, self.default, self.max, *self.samples)}))

    def display(self, value):
        """The field's text for ``value``: empty for ``blank``; else ``format`` (by default
        ``count_text``) when it reads back as ``value``, the plain number when it does not."""
        if self.blank is not None and value == self.blank:
            return ""
        text = (self.format or count_text)(value)
        try:
            if self.coerce(text) == value:
                return text
        except ValueError:
            pass
        return format_value(value)


@dataclass(frozen=True)
class Button:
    """A push button. ``press`` is a pure function ``state -> state`` (for example, advance
    an animation step or reset); it lives in the figure module beside ``render``."""

    key: str
    label: str
    press: object = None


@dataclass(frozen=True)
class Readout:
    """One key number. ``value`` is the raw number (for tests and machine readers) in
    SI base units, or for a readout that names something (a collective, a bottleneck) a
    short machine-readable string; ``text`` is what the reader sees. ``color`` is the palette key (``figures.palette``)
    of the series the number describes, shown as a swatch: readouts then double as the
    chart's legend."""

    key: str
    label: str
    text: str
    value: float | str | None = None
    color: str | None = None

    @property
    def data_value(self):
        """The ``data-value`` attribute: the raw number as Python writes it (a string
        as itself), or None."""
        if self.value is None:
            return None
        return self.value if isinstance(self.value, str) else repr(self.value)

    def same_slot(self, other):
        """Shown in the same place with the same label and swatch, and a raw value on
        both or neither: only its number differs."""
        return (self.key, self.label, self.color, self.value is None) == (other.key, other.label, other.color, other.value is None)

    def html(self):
        """The readout's markup: baked by the builder and written by the runtime alike."""
        value = "" if self.data_value is None else f' data-value="{escape(self.data_value)}"'
        swatch = "" if self.color is None else f'<span class="swatch bg-{escape(self.color)}" aria-hidden="true"></span>'
        return (
            f'<div class="readout" data-key="{escape(self.key)}"{value}>'
            f"<dt>{swatch}{escape(self.label)}</dt><dd>{escape(self.text)}</dd></div>"
        )


@dataclass(frozen=True)
class View:
    """What ``render`` returns: an SVG diagram and/or a Plotly figure spec (plain dicts),
    plus readouts. ``note`` is an optional sentence shown under the drawing (e.g. why a
    panel is empty for this state). ``alt`` is the drawing's text alternative: what it
    shows for THIS state, in a sentence or three with its key numbers (screen readers
    read it; every figure must give one). ``html`` is an optional block of markup under
    the drawing (tables, reasoning, code to copy), written only by ``figures/html.py``."""

    svg: str | None = None
    plot: dict | None = None
    readouts: tuple = ()
    note: str = ""
    alt: str = ""
    html: str | None = None
    # ``{control key: message}``: what is wrong with an input that reads fine but cannot
    # be met (the planner lab's "tp=16 does not divide kv_heads=8"), shown once, next to
    # that control as a typing error is (the drawing names the control). A message about
    # several controls the reader set is keyed by all of them, space-separated ("tp
    # kv_heads"): the page shows it by the one the reader touched last (playbook.js)
    field_errors: dict = field(default_factory=dict)

    def summary(self):
        """Plain-text summary of the readouts, shown when a chart cannot be drawn."""
        return "; ".join(f"{r.label}: {r.text}" for r in self.readouts)


@dataclass(frozen=True)
class Figure:
    """A registered figure: the module's declarations gathered in one object."""

    number: int
    slug: str
    title: str
    caption: str
    controls: tuple
    render: object = field(repr=False)
    # The module's optional ``constrain(state) -> state``: where one control's valid range
    # depends on another (a rank below the world size, a degree dividing the GPUs per
    # node), it snaps the state into range; the page then moves the control to match.
    constrain: object = field(default=None, repr=False)
    # The module's optional ``prepare(state)``: a generator doing the heavy part of
    # ``render(state)`` (the planner lab's searches) a slice per step and keeping it for
    # ``render``, so that the worker can render such a state ahead between the reader's
    # calls instead of in one long turn.
    prepare: object = field(default=None, repr=False)
    # The module's optional ``limits(state) -> {slider key: highest value}``: a constrained
    # slider's range in this state, so that no stretch of its track is dead (Figure 17's rank
    # slider ends at the last rank of the world drawn, not at 4,095). It returns the same keys
    # for every state. The page sets each such input's ``max`` from ``slider_limits``.
    limits: object = field(default=None, repr=False)
    # The module's optional ``NOTE``: the rest of what a caption would say (how to read the
    # drawing, what it holds fixed), shown under the caption, folded. Not ``View.note``,
    # which speaks of the state shown.
    note: str = ""
    # The module's optional ``TRIES``: ``((label, {control key: value}), ...)``, states the
    # reader can jump to in one click; each is the default state with those values, and
    # must be one the controls can reach (``check_tries``).
    tries: tuple = ()
    # The module's optional ``PRIMARY``: the keys of the controls kept in view on a phone
    # (at most two; default: the first control). The rest fold behind "More controls".
    primary: tuple = ()
    # The module's optional ``GROUPS``: ``((heading, (control key, ...)), ...)``: the
    # controls other than the primary ones under headings (the planner lab's model,
    # cluster and plan); any control in no group comes after them, under none.
    groups: tuple = ()
    # ``render`` takes ``narrow`` (the module's own render does): its narrow view may differ.
    lays_out_narrow: bool = False
    # ... and ``short``: its view for a short screen wide enough for it (a phone on its side).
    lays_out_short: bool = False
    # The module's optional ``READOUTS_FIRST``: the readouts right under the drawing, before
    # its HTML block and note (the planner lab, whose reasoning and launch blocks run to
    # thousands of pixels on a phone: its estimate and bands must not sit under them).
    readouts_first: bool = False
    # The module's optional ``hints(state) -> {field key: text}``: what an empty typed field
    # (``Number.blank``) stands for in this state, shown in it greyed (the lab's preset values).
    hints: object = field(default=None, repr=False)
    # The module's optional ``FOLDS``: headings of ``GROUPS`` that fold on their own on a
    # phone, before "More controls" (the lab's pins: one short fold, not the 13th to 22nd
    # of 32 fields); a bar with such folds is capped and ends in a Done button.
    folds: tuple = ()

    def field_hints(self, state):
        return dict(self.hints(state)) if self.hints is not None else {}

    @property
    def anchor(self):
        return f"fig-{self.number:02d}"

    def try_links(self):
        """``((label, fragment), ...)``: each try as the URL fragment of its state."""
        return tuple((label, encode_state(self, self.validate_state(values))) for label, values in self.tries)

    def control_layout(self):
        """``(primary controls, [(heading or None, controls), ...])``: how the page sets out
        the controls: the primary ones first (in a bar that stays in view on a phone), then
        the rest in their groups, the ungrouped last. Every control appears once."""
        primary_keys = self.primary or tuple(c.key for c in self.controls[:1])
        primary = tuple(self.control(key) for key in primary_keys)
        placed = set(primary_keys)
        groups = []
        for heading, keys in self.groups:
            controls = tuple(self.control(key) for key in keys if key not in placed)
            placed.update(keys)
            if controls:
                groups.append((heading, controls))
        rest = tuple(c for c in self.controls if c.key not in placed)
        if rest:
            groups.append((None, rest))
        return primary, groups

    def control_folds(self):
        """``(primary controls, [(summary, [(heading or None, controls), ...]), ...])``: the
        folds a phone shows after the primary controls: each group named in ``folds`` on its
        own, then every other group under "More controls"."""
        primary, groups = self.control_layout()
        own = [(heading, [(heading, controls)]) for heading, controls in groups if heading in self.folds]
        rest = [(heading, controls) for heading, controls in groups if heading not in self.folds]
        return primary, own + ([("More controls", rest)] if rest else [])

    @property
    def stateful_controls(self):
        return tuple(c for c in self.controls if not isinstance(c, Button))

    def control(self, key):
        for control in self.controls:
            if control.key == key:
                return control
        raise KeyError(key)

    def default_state(self):
        return {c.key: c.default for c in self.stateful_controls}

    def slider_limits(self, state):
        """``{slider key: the input's max}`` for the sliders ``limits`` narrows in ``state``
        (the position text the range input holds: an index for a slider with stops); empty
        for a figure without ``limits``. Baked into the page and sent with every view."""
        if self.limits is None:
            return {}
        shown = {}
        for key, highest in self.limits(state).items():
            control = self.control(key)
            shown[key] = control.position_text(control.highest_at_most(highest))
        return shown

    def validate_state(self, raw):
        """A complete, valid state from a partial or messy one: unknown keys are dropped,
        unreadable values fall back to the default, numbers snap to the control's grid."""
        return self.check_state(raw)[0]

    def check_state(self, raw, fallback=None):
        """``(state, errors)``: the valid state for ``raw`` as ``validate_state`` makes it,
        except that a value that cannot be read keeps ``fallback``'s value (the last good
        state; the default if none), and ``errors`` maps each such key to a message for
        the reader (shown next to a typed field)."""
        state = dict(fallback) if fallback is not None else self.default_state()
        errors = {}
        for key, value in raw.items():
            try:
                control = self.control(key)
            except KeyError:
                continue
            if isinstance(control, Button):
                continue
            try:
                state[key] = control.coerce(value)
            except (TypeError, ValueError) as error:
                errors[key] = str(error)
        if self.constrain is not None:
            state = self.constrain(dict(state))
        return state, errors

    def press(self, key, state):
        button = self.control(key)
        return self.validate_state(button.press(dict(state)) if button.press else self.default_state())


def check_tries(figure):
    """What is wrong with ``figure.tries`` (messages; empty when nothing is): each try has a
    short label and sets at least one control, each to a value the control can hold
    exactly (a slider's stop, a menu's option: never one snapped to the nearest); the
    figure's constraints keep every value it sets; its link leads back to its state; and
    it shows something other than the default, and other than every other try."""
    problems, seen = [], {}
    default = _state_key(figure.default_state())
    for entry in figure.tries:
        if not (isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[1], dict)):
            problems.append(f"{entry!r} is not a (label, {{control key: value}}) pair")
            continue
        label, values = entry
        name = f"try {label!r}"
        if not isinstance(label, str) or not label.strip() or len(label) > TRY_LABEL_MAX:
            problems.append(f"{name}: a label is one short phrase (1-{TRY_LABEL_MAX} characters)")
        if not values:
            problems.append(f"{name} sets no control")
            continue
        bad = False
        for key, value in values.items():
            try:
                control = figure.control(key)
            except KeyError:
                problems.append(f"{name} sets {key!r}, which is not a control of Figure {figure.number:02d} "
                                f"(it has {', '.join(c.key for c in figure.stateful_controls)})")
                bad = True
                continue
            if isinstance(control, (Button, Play)):
                problems.append(f"{name} sets {key!r}, a {type(control).__name__.lower()}: a try names a state, not an action")
                bad = True
            elif not _holds_exactly(control, value):
                problems.append(f"{name} sets {key}={value!r}, not one of that control's values")
                bad = True
        if bad:
            continue
        state = figure.validate_state(values)
        moved = {key: state[key] for key, value in values.items() if state[key] != value}
        if moved:
            problems.append(f"{name}: the figure's constraints move it to {moved}")
            continue
        decoded = decode_fragment(encode_state(figure, state))
        if decoded is None or figure.validate_state(decoded[1]) != state:
            problems.append(f"{name}: its link does not lead back to its state")
        key = _state_key(state)
        if key == default:
            problems.append(f"{name} is the default state (the Reset button goes there)")
        elif key in seen:
            problems.append(f"{name} is the same state as try {seen[key]!r}")
        seen[key] = label
    return problems


TRY_LABEL_MAX = 48


def _holds_exactly(control, value):
    """``value`` is one the control holds as it is, not one it would snap or round."""
    if isinstance(control, Toggle):
        return isinstance(value, bool)
    if isinstance(control, Number):
        try:
            return not isinstance(value, (bool, str)) and control.coerce(value) == value
        except (TypeError, ValueError):
            return False
    return any(type(v) is type(value) and v == value for v in control.values)


def nearby_states(figure, state, limit):
    """The states one control change away from ``state``, nearest first: one step along
    every control, then two steps, and so on to the ends of each range (a typed number's
    values after every other control's); at most ``limit``. What a reader reaches next
    by dragging a slider, clicking its track or picking another option, so the runtime
    renders them ahead while the reader is idle."""
    return [valid for _, valid in nearby_moves(figure, state, limit, aliases=0)]


def nearby_moves(figure, state, limit, aliases=512):
    """``nearby_states`` as the moves that reach them, yielded nearest first as
    ``(raw, valid)``: ``raw`` is ``state`` with one control changed, ``valid`` the state it
    validates to (each validated only when drawn). A move whose state was yielded before
    (a rank slider dragged past the last rank, a degree that shrinks another) is yielded
    too, as an alias, up to ``aliases`` of them: the page can paint those readings from
    the view it already holds. Only the nearest ``limit + aliases`` moves are looked at."""
    ranked, reach = [], limit + aliases  # no control's moves beyond this many steps are listed
    for order, control in enumerate(figure.stateful_controls):
        values = control.values
        if state[control.key] not in values:
            continue
        here = values.index(state[control.key])
        low = max(0, here - reach)
        typed = isinstance(control, Number)  # a reader types any number, seldom one of its values: last
        ranked += [(typed, abs(i - here), order, i < here, control.key, value)
                   for i, value in enumerate(values[low:here + reach + 1], start=low) if i != here]
    ranked.sort(key=lambda entry: entry[:4])
    if figure.constrain is None:
        for _, _, _, _, key, value in ranked[:limit]:
            move = {**state, key: value}
            yield move, move
        return
    seen, distinct = {_state_key(state)}, 0
    for _, _, _, _, key, value in ranked[:reach]:  # validating is the cost: the nearest moves only
        raw = {**state, key: value}
        candidate = figure.validate_state(raw)
        if _state_key(candidate) not in seen:
            seen.add(_state_key(candidate))
            yield raw, candidate
            distinct += 1
            if distinct == limit:
                return
        elif aliases > 0:
            yield raw, candidate
            aliases -= 1


def _state_key(state):
    return tuple(sorted(state.items()))


def log_stops(low, high, mantissas=(1, 1.5, 2, 3, 5, 7.5)):
    """Nice values from ``low`` to ``high`` spaced roughly evenly in log scale."""
    stops = []
    exponent = math.floor(math.log10(low))
    while True:
        for mantissa in mantissas:
            value = float(f"{mantissa}e{exponent}")
            if value > high * (1 + 1e-12):
                return tuple(stops)
            if value >= low * (1 - 1e-12):
                stops.append(int(value) if value.is_integer() else value)
        exponent += 1


def encode_state(figure, state):
    """``state`` as the URL fragment ``fig-15:P=8,m=16`` (only values that differ from the default)."""
    defaults = figure.default_state()
    parts = [f"{c.key}={format_value(state[c.key])}" for c in figure.stateful_controls
             if state[c.key] != defaults[c.key] and not isinstance(c, Play)]
    return figure.anchor + (":" + ",".join(parts) if parts else "")


def decode_fragment(fragment):
    """``"#fig-15:P=8,m=16"`` -> ``(15, {"P": "8", "m": "16"})``; ``None`` if it is not a figure link."""
    fragment = fragment.lstrip("#")
    name, _, rest = fragment.partition(":")
    if not name.startswith("fig-") or not name[4:].isdigit():
        return None
    values = {}
    for part in rest.split(","):
        key, sep, value = part.partition("=")
        if sep and key:
            values[key] = value
    return int(name[4:]), values


_COUNT_SUFFIXES = ((1e12, "T"), (1e9, "B"), (1e6, "M"))


def count_text(value):
    """A typed count as a reader writes it: "16,384", "300B", "15.6T" (Number.coerce reads
    each back). A suffix only where the number is at least a million and exact with at
    most four significant figures; else digits in groups of three."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return format_value(value)
    for scale, suffix in _COUNT_SUFFIXES:
        if abs(value) >= scale:
            mantissa = float(f"{value / scale:.4g}")
            if mantissa * scale == value or float(f"{mantissa}") * scale == float(value):
                return f"{mantissa:g}{suffix}"
            break
    if float(value).is_integer():
        return f"{int(value):,}"
    return format_value(value)


def format_value(value):
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _is_whole(number):
    return float(number).is_integer()
