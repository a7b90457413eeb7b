"""A request that meets a database fault gets a 503 that says so, never a 500."""

import pytest
from django.db import InterfaceError, OperationalError

from runs import selectors

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("fault", [
    OperationalError("terminating connection due to administrator command"),
    InterfaceError("connection already closed"),
])
def test_a_page_whose_query_meets_a_fault_is_a_503_that_reloads(alice_client, monkeypatch,
                                                                fault):
    def lost(*args, **kwargs):
        raise fault

    monkeypatch.setattr(selectors, "run_list", lost)
    response = alice_client.get("/")
    assert response.status_code == 503
    assert response["Retry-After"] == "2"
    body = response.content.decode()
    assert "Reconnecting to the database" in body and 'http-equiv="refresh"' in body


def test_a_form_post_is_not_reloaded_but_told_it_may_not_be_saved(alice_client, monkeypatch):
    def lost(*args, **kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr("runs.services.run_launch", lost)
    response = alice_client.post("/launch/ticker/", {"steps": "3", "delay": "0"})
    assert response.status_code == 503
    body = response.content.decode()
    assert "may not have been saved" in body and 'http-equiv="refresh"' not in body


def test_other_database_errors_are_not_hidden(alice_client, monkeypatch):
    from django.db import ProgrammingError

    def bug(*args, **kwargs):
        raise ProgrammingError("column does not exist")

    monkeypatch.setattr(selectors, "run_list", bug)
    with pytest.raises(ProgrammingError):  # the test client re-raises what would be a 500
        alice_client.get("/")
