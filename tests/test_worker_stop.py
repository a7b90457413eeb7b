"""A worker's stop (runs/worker/execute.py): it says that its tree is stopping before it
lets any run go, and a database that does not answer holds the stop up for at most
SAY_STOPPING_SECONDS. The whole of it, with real processes: tests/cluster/test_tree.py."""

import threading

import pytest

from runs.worker import execute


@pytest.fixture
def fresh_stop(monkeypatch):
    monkeypatch.setattr(execute, "STOP", threading.Event())
    monkeypatch.setattr(execute, "SAY_STOPPING_SECONDS", 0.2)
    return execute.STOP


def test_the_runs_are_let_go_only_once_the_tree_said_it_is_stopping(fresh_stop):
    said_while_running = []

    def say():
        said_while_running.append(not fresh_stop.is_set())

    execute._stop(say)
    assert said_while_running == [True] and fresh_stop.is_set()


def test_a_word_that_does_not_get_through_holds_up_no_stop(fresh_stop):
    release, finished = threading.Event(), threading.Event()

    def stuck():  # a database that does not answer
        release.wait()
        finished.set()

    execute._stop(stuck)
    try:
        assert fresh_stop.is_set() and not finished.is_set()
    finally:
        release.set()
    finished.wait(10)


def test_a_word_that_fails_is_logged_and_the_stop_goes_on(fresh_stop, caplog):
    def broken():
        raise RuntimeError("a bug")

    execute._stop(broken)
    assert fresh_stop.is_set()
    assert "could not say that the tree is stopping" in caplog.text
