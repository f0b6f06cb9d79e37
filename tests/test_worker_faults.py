"""A failure inside the worker stays in its figure (figures/worker.py): every call the page
makes answers a figure's failure as that figure's error answer, never as an exception
that reaches the page as the worker's (playbook.js once turned all 25 figures static on
one malformed message). The page side: tests/browser/test_faults.py."""
import asyncio
import dataclasses
import json

import figures
from figures import registry
from figures import worker as worker_module
from figures.worker import FigureSession, Worker

from tests.test_worker_views import run_in_own_thread

FIGURES = sorted(registry().values(), key=lambda f: f.number)


def answers_live(worker, number):
    answer = json.loads(worker.update(number, "{}", "{}", ""))
    return answer["error"] is None and answer["view"] is not None


def assert_figure_error(text, number, *words):
    answer = json.loads(text)
    assert answer["number"] == number and answer["view"] is None and answer["errors"] == {}
    assert answer["error"] and all(word in answer["error"] for word in words), answer["error"]
    return answer


def test_a_malformed_update_is_that_figures_error_and_the_others_answer():
    worker = Worker(lambda message: None)
    state = json.dumps(registry()[15].default_state())
    answer = assert_figure_error(worker.update(15, "{not json", "{}", state), 15, "JSONDecodeError")
    assert answer["state"] == registry()[15].default_state()  # the last good state, for the page to keep
    assert_figure_error(worker.update(15, "{}", "[1, 2]", ""), 15)  # values that are not an object
    assert_figure_error(worker.update(15, "{}", "{}", "{broken"), 15)  # nor is the last good state
    assert_figure_error(worker.update("fifteen", "{}", "{}", ""), None, "ValueError")  # no figure: the page knows whose call it was
    assert all(answers_live(worker, figure.number) for figure in FIGURES)
    assert answers_live(worker, 15)  # and 15 itself, asked properly again


def test_a_figure_whose_module_cannot_load_answers_its_error_on_every_call(monkeypatch):
    load = figures.load

    def broken_fifteen(number):
        if number == 15:
            raise ImportError("injected: figure 15 cannot be imported")
        return load(number)
    monkeypatch.setattr(figures, "load", broken_fifteen)
    worker = Worker(lambda message: None)
    assert_figure_error(worker.update(15, "{}", "{}", ""), 15, "ImportError", "injected")
    assert_figure_error(worker.press(15, "play", ""), 15, "injected")
    assert_figure_error(worker.restore("#fig-15:P=8,m=16"), 15, "injected")
    assert worker.touch(15, "", "{}") == "" and worker.rehearsal(15, 0) == "null"
    worker.watch(json.dumps([14, 15, 16]), json.dumps([15]))
    assert worker.watched == [14, 16]  # not rendered ahead: its calls say why
    while worker.load_next():  # the idle import of every module passes over it
        pass
    assert 15 not in worker.sessions and set(worker.sessions) == set(worker.known) - {15}
    assert all(answers_live(worker, figure.number) for figure in FIGURES if figure.number != 15)


def test_a_render_or_a_press_that_raises_is_that_figures_error(monkeypatch):
    fifteen = registry()[15]

    def broken(*args, **kwargs):
        raise RuntimeError("injected fault")
    load = figures.load
    broken_eight = dataclasses.replace(registry()[8], render=broken)
    monkeypatch.setattr(figures, "load", lambda number: broken_eight if number == 8 else load(number))
    worker = Worker(lambda message: None)
    assert_figure_error(worker.update(8, "{}", "{}", ""), 8, "RuntimeError: injected fault")
    assert_figure_error(worker.restore("#fig-08:N=8"), 8, "injected fault")
    assert_figure_error(worker.press(15, "no-such-button", json.dumps(fifteen.default_state())), 15, "KeyError")
    assert worker.rehearsal(8, 0) == "null"
    assert answers_live(worker, 15) and answers_live(worker, 9)


def test_a_layout_message_the_worker_cannot_read_changes_nothing():
    worker = Worker(lambda message: None)
    assert worker.layout("{not json") == "" and worker.screen == "wide"
    assert worker.layout('"sideways"') == "" and worker.screen == "wide"
    assert answers_live(worker, 3)
    assert worker.layout("true") == "" and worker.screen == "narrow"
    assert worker.layout('"short"') == "" and worker.screen == "short"


def test_rendering_ahead_goes_on_when_one_figure_fails_there(monkeypatch):
    """A figure whose render-ahead raises stops rendering ahead; the loop itself (one for all
    25 figures) goes on for the others."""
    posted = []
    worker = Worker(posted.append)
    original = FigureSession.render_one_ahead

    def one_ahead(session):
        if session.figure.number == 15:
            raise RuntimeError("injected fault ahead")
        return original(session)
    monkeypatch.setattr(FigureSession, "render_one_ahead", one_ahead)
    monkeypatch.setattr(worker_module, "QUIET_OTHERS_S", 0.0)

    async def run():
        task = asyncio.ensure_future(worker.render_ahead())
        worker.update(15, "{}", "{}", "")
        worker.watch(json.dumps([4]), json.dumps([4, 15]))
        await asyncio.sleep(0.5)
        task.cancel()

    run_in_own_thread(run())
    assert not worker.sessions[15].has_upcoming  # dropped its plan
    assert any(isinstance(m, str) and '"type":"view","number":4,' in m for m in posted)  # the others went on
