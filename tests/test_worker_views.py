"""The worker's Python, in CPython: readings keys, drag prediction, and the views it
posts ahead to the page (figures/worker.py; the page side: tests/browser/test_worker.py)."""
import asyncio
import gc
import json
import re
import threading
from collections import OrderedDict
from pathlib import Path

import pytest

from figures import fig21_planner_lab, registry
from figures.contract import Number, Slider, Toggle, nearby_states
from figures import worker as worker_module
from figures.worker import CALLS, FigureSession, Worker, serve

FIGURES = sorted(registry().values(), key=lambda f: f.number)


def run_in_own_thread(coroutine):
    """Run ``coroutine`` to its end in an event loop of its own, in its own thread:
    Playwright's sync API may hold a running loop in this one."""
    thread = threading.Thread(target=asyncio.run, args=(coroutine,))
    thread.start()
    thread.join()


def views_posted_for(posted, number):
    """How many views the worker posted ahead for figure ``number``."""
    return sum(1 for m in posted if isinstance(m, str) and f'"type":"view","number":{number},' in m)


def page_key(readings, typed=()):
    """What playbook.js's readingsKey() makes of the controls' readings (``typed``: the keys
    of text fields, keyed without separators)."""
    def text(key):
        value = readings[key]
        if isinstance(value, bool):
            return str(value).lower()
        return re.sub(r"[,\s_]", "", str(value)) if key in typed else str(value)
    return json.dumps([[key, text(key)] for key in sorted(readings)], separators=(",", ":"), ensure_ascii=False)


def page_readings(figure, state):
    """Every control's reading as the page holds it once ``state`` is painted."""
    readings = {}
    for control in figure.stateful_controls:
        value = state[control.key]
        if isinstance(control, Slider):
            position = control.position(value)  # as the input reads it back: String(x) in JavaScript
            readings[control.key] = "%.15g" % position if isinstance(position, float) else str(position)
        elif isinstance(control, Toggle):
            readings[control.key] = bool(value)
        elif isinstance(control, Number):
            readings[control.key] = control.display(value)
        else:
            readings[control.key] = str(value)
    return readings


def test_a_view_carries_the_max_of_each_slider_its_state_narrows():
    """Figure 17: the rank slider's max follows the world (TP x CP x DP x PP), each degree's what
    4,096 GPUs leave it beside the others (issue 43: none pushes another down); the page sets
    each input's max from the answer before its value."""
    worker = Worker(lambda message: None)
    mesh = registry()[17]
    # (dp, rank max, positions of the tp, cp, dp and pp maxima) with TP 8, CP 1, PP 8
    for dp, rank_max, (tp, cp, dp_index, pp) in ((8, "511", "6366"), (2, "127", "6567"), (64, "4095", "3063")):
        state = {**mesh.default_state(), "dp": dp}
        view = json.loads(worker.update(17, json.dumps(page_readings(mesh, state)), "{}", ""))["view"]
        assert view["limits"] == {"tp": tp, "cp": cp, "dp": dp_index, "pp": pp,
                                  "ep": str(mesh.control("ep").stops.index(dp)), "rank": rank_max}
    assert json.loads(worker.update(15, "{}", "{}", ""))["view"]["limits"] == {}  # no constrained slider


def test_a_view_says_which_column_it_was_drawn_for():
    """After a phone turns, answers the worker rendered for the old column can still arrive:
    each view names its layout, and the page asks again for one that is not the page's
    (playbook.js: a wide drawing flashed on a phone, and tests caught it 493 px too wide)."""
    worker = Worker(lambda message: None)
    wide = json.loads(worker.update(3, "{}", "{}", ""))["view"]
    worker.layout("true")
    narrow = json.loads(worker.update(3, "{}", "{}", ""))["view"]
    assert (wide["layout"], narrow["layout"]) == ("wide", "narrow")
    assert 'min-width:320px' in narrow["svg"].replace(" ", "") and 'min-width:320px' not in wide["svg"].replace(" ", "")
    # a figure drawn the same at every width names no column, so its views kept from
    # before a turn are still good (naming one, they were asked for again and again)
    worker.layout("false")
    kept = json.loads(worker.update(21, "{}", "{}", ""))["view"]
    worker.layout("true")
    assert kept["layout"] is None and json.loads(worker.update(21, "{}", "{}", ""))["view"] == kept


def test_a_short_screen_gets_the_short_drawings_of_the_figures_that_have_one():
    """A phone on its side (playbook.js layoutName() "short"): a figure with a short layout
    is rendered for it and says so; one that lays out only narrow is drawn wide there, and
    names the page's screen all the same (the page compares it with its own)."""
    worker = Worker(lambda message: None)
    wide = json.loads(worker.update(20, "{}", "{}", ""))["view"]
    worker.layout('"short"')
    short = json.loads(worker.update(20, "{}", "{}", ""))["view"]
    nine = json.loads(worker.update(9, "{}", "{}", ""))["view"]
    assert (wide["layout"], short["layout"], nine["layout"]) == ("wide", "short", "short")
    assert short["svg"] != wide["svg"] and short["readouts"] == wide["readouts"]
    assert nine["svg"] == registry()[9].render(registry()[9].default_state()).svg


@pytest.mark.parametrize("figure", FIGURES, ids=lambda f: f"fig{f.number:02d}")
def test_a_views_key_is_the_readings_that_select_exactly_its_state(figure):
    worker = Worker(lambda message: None)
    session = FigureSession(figure)
    typed = [figure.validate_state({**figure.default_state(), c.key: c.samples[0]})
             for c in figure.stateful_controls if isinstance(c, Number) and c.samples]  # nearby only after the rest
    for state in [figure.default_state(), *nearby_states(figure, figure.default_state(), 12), *typed]:
        readings = page_readings(figure, state)
        key = session.readings_key(state)
        assert key == page_key(readings, {c.key for c in figure.stateful_controls if isinstance(c, Number)}), figure.number
        answer = json.loads(worker.update(figure.number, json.dumps(readings), "{}", ""))
        assert answer["view"]["state"] == state and answer["view"]["key"] == key and answer["errors"] == {}


def test_a_count_typed_without_separators_is_keyed_as_the_one_shown_with_them():
    planner = registry()[21]
    session = FigureSession(planner)
    state = planner.validate_state({"batch": 1024})
    shown = page_readings(planner, state)
    assert shown["batch"] == "1,024"
    typed = {c.key for c in planner.stateful_controls if isinstance(c, Number)}
    assert session.readings_key(state) == page_key({**shown, "batch": "1024"}, typed) == page_key(shown, typed)


def test_a_typed_number_whose_shown_text_rounds_it_gets_no_key():
    planner = registry()[21]
    session = FigureSession(planner)
    state = {**planner.default_state(), "tokens": 312_345_678_901.5}
    assert planner.validate_state(state) == state
    assert session.readings_key(state) is None  # its field would read "3.12346e+11": ask the worker
    assert session.readings_key(planner.default_state()) is not None


def test_a_drag_renders_the_next_state_along_it_first():
    fifteen = registry()[15]
    worker = Worker(lambda message: None)
    slider = fifteen.control("m")
    values = slider.values
    start = values.index(fifteen.default_state()["m"])
    for index in (start, start + 2):  # a drag skipping one stop per move
        state = {**fifteen.default_state(), "m": values[index]}
        worker.update(15, json.dumps(page_readings(fifteen, state)), "{}", "")
    session = worker.sessions[15]
    ahead = [{**fifteen.default_state(), "m": values[start + stride]} for stride in (4, 6)]  # one and two strides on
    assert session.predicted == [(state, state) for state in ahead]
    for state in ahead:
        view, aliases = session.render_one_ahead()
        view = json.loads(view)
        assert view["state"] == state and view["key"] and aliases == []
    assert session.predicted == []
    view, _ = session.render_one_ahead()  # then the states nearby, nearest first
    assert json.loads(view)["state"] == nearby_states(fifteen, session.center, 1)[0]


def test_a_drag_past_what_the_state_allows_is_still_followed_and_its_readings_aliased():
    """Figure 01 with 16 GPUs: dragging the rank slider past 15 reads 16, 17, ... which all
    select rank 15. The drag is followed on the readings, and the readings one stride on
    are sent as an alias of the view the page already holds (no call, no render)."""
    one = registry()[1]
    worker = Worker(lambda message: None)
    default = one.default_state()
    last = one.validate_state({**default, "rank": 10_000})
    assert last["rank"] == 15 and default["nodes"] * default["gpus"] == 16
    for rank in (14, 15, 16):
        raw = {**default, "rank": rank}
        answer = json.loads(worker.update(1, json.dumps(page_readings(one, raw)), "{}", ""))
    assert answer["view"]["state"] == last
    session = worker.sessions[1]
    assert session.predicted == [({**default, "rank": 17}, last), ({**default, "rank": 18}, last)]
    view, aliases = session.render_one_ahead()
    assert view is None  # the page has rank 15's view: it was the answer
    assert aliases == [[page_key(page_readings(one, {**default, "rank": 17})), answer["view"]["key"]]]
    view, aliases = session.render_one_ahead()  # each alias in a turn of its own
    assert view is None and aliases == [[page_key(page_readings(one, {**default, "rank": 18})), answer["view"]["key"]]]


def test_a_degree_that_shrinks_another_keeps_the_drag_on_the_slider_moved():
    """Figure 17: raising CP past what 4,096 GPUs hold halves DP. The page's readings then
    differ from the state in two sliders; the drag is CP's, and its next stop is one more
    CP step from the state shown, DP shrunk again."""
    mesh = registry()[17]
    worker = Worker(lambda message: None)
    default = mesh.default_state()
    cps = mesh.control("cp").values
    shown = None
    for cp in cps[3:5]:  # 8, then 16 (DP 8 -> 4)
        readings = page_readings(mesh, {**(shown or default), "cp": cp})
        shown = json.loads(worker.update(17, json.dumps(readings), "{}", ""))["view"]["state"]
    assert (shown["cp"], shown["dp"]) == (16, 4)
    (raw, valid), (raw2, valid2) = worker.sessions[17].predicted
    assert (raw["cp"], raw["dp"]) == (32, 4) and (valid["cp"], valid["dp"]) == (32, 2)
    assert (raw2["cp"], raw2["dp"]) == (64, 4) and (valid2["cp"], valid2["dp"]) == (64, 1)
    view, aliases = worker.sessions[17].render_one_ahead()
    assert json.loads(view)["state"] == valid
    assert aliases == [[page_key(page_readings(mesh, raw)), json.loads(view)["key"]]]


def test_render_ahead_aliases_the_readings_that_select_a_state_already_sent():
    one = registry()[1]
    session = FigureSession(one)
    session.plan_ahead(one.default_state())
    views, aliases = [], []
    while session.has_upcoming:
        view, more = session.render_one_ahead()
        views += [json.loads(view)] if view else []
        aliases += more
        assert len(more) <= 32  # a turn stays short
    keys = {view["key"] for view in views}
    assert views[0]["state"] == one.default_state()
    assert len(views) == session.ahead and session.upcoming == ()
    ranks_past_the_end = {page_key(page_readings(one, {**one.default_state(), "rank": rank})) for rank in range(16, 256)}
    assert ranks_past_the_end <= {key for key, of in aliases}
    assert all(of in keys and key not in keys for key, of in aliases)
    for key, of in aliases[:5]:  # each alias is what the worker answers for those readings
        readings = {k: v for k, v in json.loads(key)}
        state, errors = one.check_state(session.values_from_readings(readings))
        assert errors == {} and session.readings_key(state) == of


def test_after_a_jump_one_stop_on_comes_first_then_one_stride():
    """A click on the track jumps several stops; a drag from there goes on one stop at a
    time, or keeps the stride: both are rendered, the single stop first."""
    fifteen = registry()[15]
    session = FigureSession(fifteen)
    values, default = fifteen.control("m").values, fifteen.default_state()
    start = values.index(default["m"])
    jumped = {**default, "m": values[start - 3]}
    assert [raw for raw, _ in session.moves_along_drag(default, jumped)] == [
        {**default, "m": values[start - 4]}, {**default, "m": values[start - 6]}]


def test_no_prediction_when_two_controls_changed_and_the_way_back_at_the_end_of_the_range():
    fifteen = registry()[15]
    session = FigureSession(fifteen)
    default = fifteen.default_state()
    m_values, p_values = fifteen.control("m").values, fifteen.control("P").values
    other_m = m_values[(m_values.index(default["m"]) + 1) % len(m_values)]
    other_p = p_values[(p_values.index(default["P"]) + 1) % len(p_values)]
    assert session.moves_along_drag(default, {**default, "m": other_m, "P": other_p}) == []
    at_end = {**default, "m": m_values[-1]}
    back = {**default, "m": m_values[-2]}
    assert session.moves_along_drag(back, at_end) == [(back, back)]
    # two strides on is past the end: one stride only
    assert session.moves_along_drag({**default, "m": m_values[-3]}, back) == [(at_end, at_end)]


def test_at_the_end_of_a_range_the_way_back_is_from_the_state_validation_made():
    """Figure 17: CP dragged to 64 halved DP to 1 on the way. Coming back to CP 32 keeps
    DP at 1, a state not seen before: it is the one rendered ahead."""
    mesh = registry()[17]
    session = FigureSession(mesh)
    before = mesh.validate_state({**mesh.default_state(), "cp": 32})
    at_end = mesh.validate_state({**before, "cp": 64})
    assert (before["dp"], at_end["dp"]) == (2, 1)
    readings = {**before, "cp": 64}  # what the controls read: DP's slider still at 2
    [(raw, valid)] = session.moves_along_drag(before, at_end, readings)
    assert raw == valid == {**at_end, "cp": 32}


def test_the_render_ahead_loop_posts_each_view_once_nearest_first():
    posted = []
    worker = Worker(posted.append)
    four = registry()[4]

    async def run():
        task = asyncio.ensure_future(worker.render_ahead())
        worker.watch("[4]")
        await asyncio.sleep(1.0)
        task.cancel()

    run_in_own_thread(run())
    views = [json.loads(m)["view"] for m in posted if isinstance(m, str)]
    states = [view["state"] for view in views]
    # first the state the page shows (its drawing is the baked one: no view to repaint)
    expected = [four.default_state(), *nearby_states(four, four.default_state(), len(states) - 1)]
    assert len(states) >= 10 and states == expected
    assert all(view["key"] for view in views)
    assert len({json.dumps(s, sort_keys=True) for s in states}) == len(states)  # never twice
    progress = [m for m in posted if isinstance(m, dict)]
    assert progress and progress[-1]["type"] == "ahead" and progress[-1]["number"] == 4


def test_figures_in_view_are_rendered_ahead_only_once_the_reader_leaves_the_one_in_use_alone(monkeypatch):
    """A reader moving Figure 8 with Figure 4 in view: once Figure 8's states around the
    reader are rendered, the worker renders ahead for Figure 4 only after QUIET_OTHERS_S
    without a call, so that none of Figure 8's calls waits behind a render for a figure
    not in use."""
    monkeypatch.setattr(worker_module, "QUIET_OTHERS_S", 0.4)
    monkeypatch.setattr(worker_module, "AHEAD_LIMIT", 2)
    posted = []
    worker = Worker(posted.append)
    ladder = registry()[8]
    numbers = []

    def ahead_for():
        return sorted({json.loads(m)["number"] for m in posted if isinstance(m, str) and '"type":"view"' in m})

    async def run():
        task = asyncio.ensure_future(worker.render_ahead())
        worker.update(8, "{}", "{}", "")
        worker.watch("[4, 8]")
        for stage in (1, 2, 3):  # the reader moves Figure 8 every 0.2 s
            await asyncio.sleep(0.2)
            worker.update(8, json.dumps({"stage": str(stage)}), "{}", json.dumps(ladder.default_state()))
        numbers.append(ahead_for())
        await asyncio.sleep(0.6)  # then reads
        numbers.append(ahead_for())
        task.cancel()

    run_in_own_thread(run())
    assert numbers == [[8], [4, 8]]


def test_once_the_reader_leaves_a_figure_alone_the_one_in_view_with_fewest_states_ahead_goes_first(monkeypatch):
    """A reader tries the planner lab (Figure 21), whose states ahead are whole searches,
    then scrolls on to Figure 22. Once the lab has been left alone for QUIET_OTHERS_S,
    Figure 22 gets states rendered ahead while the lab still has searches to go: before,
    the figure last touched kept the worker until its last state ahead was rendered."""
    monkeypatch.setattr(worker_module, "QUIET_OTHERS_S", 0.3)
    monkeypatch.setattr(fig21_planner_lab, "_searches", OrderedDict())  # nothing searched yet
    lab = registry()[21]
    # (views posted for Figure 22 so far, whether the lab still had states to go) at each of
    # Figure 22's views: read as they are posted, so a fast machine that finishes the lab's
    # searches soon after cannot hide the order
    seen = []

    def post(message):
        posted.append(message)
        if isinstance(message, str) and '"type":"view","number":22,' in message:
            seen.append((views_posted_for(posted, 22), worker.sessions[21].has_upcoming))

    posted = []
    worker = Worker(post)

    async def run():
        task = asyncio.ensure_future(worker.render_ahead())
        worker.update(21, "{}", "{}", json.dumps(lab.default_state()))
        worker.watch("[21, 22]")
        await asyncio.sleep(1.2)
        task.cancel()

    run_in_own_thread(run())
    assert [busy for count, busy in seen if count <= 3] == [True] * 3, seen[:5]


def test_a_figure_scrolled_off_screen_keeps_no_other_waiting(monkeypatch):
    """The reader leaves the planner lab (Figure 21) for Figure 22: once the page says the
    lab is off screen, Figure 22 is rendered ahead at once, without the pause in calls
    (QUIET_OTHERS_S) the figures in view wait for while the reader uses another."""
    monkeypatch.setattr(worker_module, "QUIET_OTHERS_S", 30.0)
    monkeypatch.setattr(fig21_planner_lab, "_searches", OrderedDict())  # nothing searched yet
    lab = registry()[21]
    counts = {}

    for on_screen in ("[21, 22]", "[22]"):
        posted = []
        worker = Worker(posted.append)

        async def run():
            task = asyncio.ensure_future(worker.render_ahead())
            worker.update(21, "{}", "{}", json.dumps(lab.default_state()))
            worker.watch("[21, 22]", on_screen)
            await asyncio.sleep(0.8)
            counts[on_screen] = views_posted_for(posted, 22)
            task.cancel()

        run_in_own_thread(run())
    assert counts["[21, 22]"] == 0 and counts["[22]"] >= 3, counts


def test_the_planner_lab_is_rendered_ahead_a_slice_per_turn(monkeypatch):
    """Figure 21's states one change away each cost whole searches (tens of ms in CPython,
    over 100 in Pyodide). The worker prepares each a slice per turn (here: one step), so
    a reader's call waits for a slice at most; a call between slices is answered, and the
    views that come out are the answers a call gives."""
    monkeypatch.setattr(worker_module, "PREPARE_SLICE_S", 0.0)
    lab = registry()[21]
    monkeypatch.setattr(fig21_planner_lab, "_searches", OrderedDict())  # nothing searched yet
    session = FigureSession(lab)
    session.answer(lab.default_state())
    session.plan_ahead(lab.default_state())
    turns, views = 0, []
    while len(views) < 4:
        view, _ = session.render_one_ahead()
        turns += 1
        assert session.has_upcoming
        if turns == 3:  # a call in the middle of a preparation
            assert json.loads(session.answer(lab.validate_state({**lab.default_state(), "zero": 3})))["view"]
        if view is not None:
            views.append(view)
    assert turns > 100 + len(views)  # most turns were a step of a search
    state_of = {text: dict(key) for key, text in session.views.items()}
    for view in views:
        assert json.loads(view) == json.loads(FigureSession(lab).answer(state_of[view]))["view"]


def test_the_render_ahead_loop_never_cancels_a_task():
    """Pyodide's event loop prints a traceback for every cancelled task (pyodide#5782), which
    the page's tests see as console errors: waiting out the pause after a call must not
    cancel one (``asyncio.wait_for``'s timeout did)."""
    worker = Worker(lambda message: None)
    cancelled_while_serving = []

    async def run():
        cancelled = []

        def factory(loop, coro, **options):
            task = asyncio.Task(coro, loop=loop, **options)
            task.add_done_callback(lambda done: done.cancelled() and cancelled.append(done))
            return task

        asyncio.get_running_loop().set_task_factory(factory)
        task = asyncio.ensure_future(worker.render_ahead())
        for _ in range(6):  # calls a drag apart, then a pause: the loop waits out QUIET_S each time
            worker.update(4, "{}", "{}", "")
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)
        cancelled_while_serving.extend(cancelled)
        task.cancel()

    run_in_own_thread(run())
    assert worker.sessions[4].ahead > 0  # it did render ahead meanwhile
    assert cancelled_while_serving == []


@pytest.mark.parametrize("figure", [f for f in FIGURES if any(isinstance(c, Slider) and not c.stops and
                                                                 isinstance(c.values[1], float) for c in f.controls)],
                         ids=lambda f: f"fig{f.number:02d}")
def test_a_fractional_sliders_every_value_has_the_key_the_page_reads(figure):
    """A range input steps in decimal and reads back JavaScript's number text: 12 steps
    of 0.05 read "0.6" (not 0.6000000000000001), and 1.0 reads "1". A key written any
    other way matches nothing the page reads, and every later move on the figure misses."""
    session = FigureSession(figure)
    for control in figure.stateful_controls:
        if not isinstance(control, Slider) or control.stops:
            continue
        for value in control.values:
            state = figure.validate_state({**figure.default_state(), control.key: value})
            readings = dict(json.loads(session.readings_key(state) or "[]"))
            assert readings[control.key] == ("%.15g" % value if isinstance(value, float) else str(value)), (control.key, value)


def test_the_worker_collects_when_idle_after_work_and_at_the_latest_every_so_many_turns(monkeypatch):
    collections = []
    monkeypatch.setattr(worker_module.gc, "collect", lambda *args: collections.append(args) or 0)
    monkeypatch.setattr(worker_module, "COLLECT_EVERY", 3)
    worker = Worker(lambda message: None)
    assert not worker.collect_if_due(idle=True) and collections == []  # nothing done since: nothing to collect
    worker.update(4, "{}", "{}", "")
    assert not worker.collect_if_due()  # a render-ahead turn: not yet
    assert worker.collect_if_due(idle=True) and len(collections) == 1  # then idle: collect
    assert not worker.collect_if_due(idle=True)
    assert [worker.collect_if_due() for _ in range(3)] == [False, False, True] and len(collections) == 2


def test_serve_posts_ready_and_dispatches_only_the_pages_calls():
    """What worker.js gets from ``serve``: ready is posted as JSON text, the page's calls
    are answered, and a name outside ``CALLS`` (a method the page must not reach) is
    refused."""
    posted, answers, refusals, collecting = [], [], [], []

    async def session():  # (an exception here would end the thread unseen: results are kept)
        dispatch = serve(posted.append)
        collecting.append(gc.isenabled())
        answers.append(json.loads(dispatch("update", 15, json.dumps({}), "{}", "")))
        try:
            dispatch("load_next")
        except ValueError as error:
            refusals.append(str(error))

    try:
        run_in_own_thread(session())
    finally:
        gc.unfreeze()  # serve freezes what lives for the whole visit
        gc.enable()  # and turns automatic collection off
    [answer] = answers
    assert collecting == [False]  # the render-ahead loop collects (collect_if_due)
    assert refusals == ["no call named 'load_next'"]
    assert posted and all(isinstance(message, str) for message in posted)
    assert json.loads(posted[0]) == {"type": "ready"}
    assert answer["number"] == 15 and answer["view"]["state"] == registry()[15].default_state()
    # every call the page makes is one the worker answers
    page_calls = set(re.findall(r'\bcall\("(\w+)"', (Path(__file__).parents[1] / "site/static/playbook.js").read_text()))
    assert page_calls and page_calls <= set(CALLS) and all(callable(getattr(Worker, name)) for name in CALLS)
