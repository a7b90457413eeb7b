"""How the built-in HTTP plumbing tells the retry policy what happened: status codes,
Retry-After, and connections that were never made."""

import threading
import time
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from builtin_agents.tools import http
from builtin_agents.tools.llm import LLM_RETRY
from runs.durable import (
    AgentRegistry,
    Outcome,
    PermanentToolError,
    Retry,
    TransientToolError,
    WorkerConfig,
    agent,
    control,
    execute_run,
    tool,
)
from runs.durable.retry import RETRY_AFTER_LIMIT
from runs.storage import database_store
from tests.support.processes import free_port


def response(status, **headers):
    return httpx.Response(status, headers=headers, request=httpx.Request("POST", "http://s/x"))


@pytest.mark.parametrize("status", [408, 409, 425, 429, 500, 502, 503, 504, 507, 599])
def test_408_409_425_429_and_every_5xx_are_transient(status):
    with pytest.raises(http.TransientHTTPError) as caught:
        http.check(response(status))
    assert caught.value.status == status
    assert caught.value.reached_target == (status != 429)  # a 429 turned the request away


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 422])
def test_any_other_4xx_is_permanent(status):
    with pytest.raises(PermanentToolError):
        http.check(response(status))


def test_a_cookie_one_run_was_given_is_not_sent_with_the_next_request():
    """One client serves every run of a worker process: it must not carry a site's
    cookie from one run's request to another's."""
    seen = []

    class Site(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.append(self.headers.get("Cookie"))
            self.send_response(200)
            self.send_header("Set-Cookie", "session=run-a; Path=/")
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            """Quiet: the test reads what arrived, not the log."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/page"
        assert http.request("GET", url, idempotency_key="run-a:1:1:0").text == "ok"
        assert http.request("GET", url, idempotency_key="run-b:1:1:0").text == "ok"
    finally:
        server.shutdown()
        server.server_close()
    assert seen == [None, None]


def test_the_message_names_the_status():
    with pytest.raises(http.TransientHTTPError, match=r"^HTTP 503 Service Unavailable from "):
        http.check(response(503))


def test_retry_after_in_seconds_or_as_an_http_date_is_passed_on():
    with pytest.raises(http.TransientHTTPError) as seconds:
        http.check(response(429, **{"Retry-After": "120"}))
    assert seconds.value.retry_after == 120
    later = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=90), usegmt=True)
    with pytest.raises(http.TransientHTTPError) as date:
        http.check(response(503, **{"Retry-After": later}))
    assert 85 <= date.value.retry_after <= 90
    for junk in ("soon", ""):
        with pytest.raises(http.TransientHTTPError) as none:
            http.check(response(503, **{"Retry-After": junk}))
        assert none.value.retry_after is None


def test_a_refused_connection_is_transient_and_never_reached_the_target():
    with pytest.raises(TransientToolError) as caught:
        http.request("POST", f"http://127.0.0.1:{free_port()}/x", json={})
    assert caught.value.reached_target is False
    assert "cannot connect" in str(caught.value)


def test_the_built_in_tools_retry_for_an_hour_with_waits_up_to_30_s():
    for policy in (http.HTTP_RETRY, LLM_RETRY):
        assert policy.maximum_attempts is None
        assert policy.maximum_elapsed == 3600 and policy.maximum_interval == 30


FOREVER = Retry(maximum_attempts=None, maximum_elapsed=None)  # "retry for ever" (docs/retries.md)
REG = AgentRegistry()


@tool(idempotent=True, name="hostile.fetch", retry=FOREVER)
def fetch_from_hostile_server(*, idempotency_key):
    return http.request("GET", "http://hostile.test/x", idempotency_key=idempotency_key).json()


@agent("hostile", registry=REG)
def hostile(ctx, inputs):
    return ctx.call(fetch_from_hostile_server)


@pytest.mark.django_db
@pytest.mark.parametrize("said", ["99999999999", "1e400", "Fri, 31 Dec 9999 23:59:59 GMT"])
def test_a_hostile_retry_after_parks_the_run_for_a_day_at_most(monkeypatch, said):
    # Before: a wake time past the year 9999 failed the store's write, and the run was
    # left as a crash: over and over, to the crash-loop guard.
    server = httpx.MockTransport(lambda request: httpx.Response(503, headers={"Retry-After": said}))
    monkeypatch.setattr(http, "client", lambda: httpx.Client(transport=server))
    store = database_store()
    run_id = control.launch(store, agent="hostile", inputs={}, registry=REG).id
    before = time.time()
    assert execute_run(store, run_id, WorkerConfig(owner="w:1"), registry=REG) == Outcome.WAITING
    run = store.load(run_id).run
    assert (run.status, run.crash_count, run.attention["kind"]) == ("waiting", 0, "retry")
    assert before + RETRY_AFTER_LIMIT <= run.wake_at <= time.time() + RETRY_AFTER_LIMIT
