"""The API fuzzed from its own OpenAPI document (schemathesis): every operation, as
each kind of caller, with data that fits the document and data that does not. Every
answer must be documented (status, content type, body schema) and none a 5xx.

In-process over WSGI (the test database, one transaction per test); the event stream
is fuzzed on ended runs only, whose streams end by themselves."""

from __future__ import annotations

import contextlib
import os
from unittest import mock

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from runs import services
from runs.api import tokens
from tests.web.conftest import drive

pytestmark = pytest.mark.django_db

APP = get_wsgi_application()
SCHEMA = schemathesis.openapi.from_wsgi("/api/v1/openapi.json", APP)
OPERATIONS = {op.ok().label: op.ok() for op in SCHEMA.get_all_operations()}
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]
CALLERS = ["anonymous", "alice-session", "charlie-session", "token-read", "token-launch",
           "token-operate"]
STREAM = "GET /api/v1/runs/{run_id}/events/stream"
EXAMPLES = int(os.environ.get("AGENTOPS_FUZZ_EXAMPLES", 25))  # per operation and caller


@contextlib.contextmanager
def keeping_the_test_connection():
    """As Django's test Client does around its requests: a request's end must not close
    the connection that holds the test's transaction. (Not a fixture: the test Client
    used to log in connects them again.)"""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    # The event stream's reads (channels' database_sync_to_async) run in this thread
    # under WSGI, and would close the test's connection too: under Daphne they run in
    # the server's own database thread.
    try:
        with mock.patch("channels.db.close_old_connections", lambda: None):
            yield
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def caller_headers(kind: str, users) -> dict:
    if kind == "anonymous":
        return {}
    if kind.endswith("-session"):
        client = Client()
        client.force_login(users[kind.split("-")[0]])
        client.get("/account/tokens/")  # the csrftoken cookie
        session, csrf = client.cookies["sessionid"].value, client.cookies["csrftoken"].value
        return {"Cookie": f"sessionid={session}; csrftoken={csrf}", "X-CSRFToken": csrf}
    scope = kind.split("-")[1]
    owner = users["charlie" if scope == "operate" else "alice"]
    secret = tokens.create(owner, name=kind, scopes=[scope], days=1, max_days=365)[1]
    return {"Authorization": f"Bearer {secret}"}


def known_runs(users) -> tuple[list[str], list[str]]:
    """Runs the fuzzer may hit besides random ids: (every one, the ended ones)."""
    done = drive(services.run_launch(user=users["alice"], agent="ticker",
                                     inputs={"steps": 3, "delay": 0}).pk)
    waiting = drive(services.run_launch(user=users["alice"], agent="ask", inputs={}).pk)
    paused = services.run_launch(user=users["alice"], agent="ticker", inputs={})
    services.run_pause(run_id=paused.pk, user=users["charlie"], reason="fuzz")
    others = services.run_launch(user=users["bob"], agent="ticker", inputs={})
    cancelled = services.run_launch(user=users["bob"], agent="ticker", inputs={})
    services.run_cancel(run_id=cancelled.pk, user=users["bob"], reason="fuzz")
    ended = [done.pk, cancelled.pk]
    return ended + [waiting.pk, paused.pk, others.pk], ended


@pytest.mark.parametrize("caller", CALLERS)
@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_fuzz(label, caller, users):
    operation = OPERATIONS[label]
    headers = caller_headers(caller, users)
    every, ended = known_runs(users)
    runs = ended if label == STREAM else every
    cases = st.one_of(operation.as_strategy(GenerationMode.POSITIVE),
                      operation.as_strategy(GenerationMode.NEGATIVE))

    @given(case=cases, run=st.sampled_from([None, *runs]))
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    def check(case, run):
        if "run_id" in (case.path_parameters or {}) and run is not None:
            case.path_parameters["run_id"] = run
        if label == STREAM and case.path_parameters.get("run_id") not in ended:
            case.path_parameters["run_id"] = ended[0]  # a live run's stream does not end
        response = case.call(headers=headers)
        case.validate_response(response, checks=CHECKS)

    with keeping_the_test_connection():
        check()
