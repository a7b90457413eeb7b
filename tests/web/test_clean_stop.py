"""SIGTERM to Daphne alone with pages open: every live socket is closed with the
service-restart code (the page reconnects to the next server) and Daphne exits without
waiting out a page's reply, though a browser also holds an idle keep-alive HTTP
connection (which stops Daphne's own shutdown step before it reaches the sockets)."""

import asyncio
import logging
import signal

import httpx
import pytest

from runs import services
from runs.live import shutdown
from runs.live.shutdown import CLOSE_NOT_ANSWERED, CLOSE_SERVICE_RESTART
from tests.chaos.followers import login
from tests.support.live_sockets import close_codes
from tests.support.processes import Server

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

# A hang bound: without the shutdown trigger (runs/live/shutdown.py) Daphne does not exit
# at all; a loaded CI machine once needed more than 3 s for a clean stop. That the stop
# waited on no page is what CLOSE_NOT_ANSWERED's absence says.
STOP_DEADLINE = 30.0


def test_sigterm_closes_open_sockets_with_the_restart_code(users, tmp_path):
    run = services.run_launch(user=users["alice"], agent="ticker", inputs={"steps": 3})
    server = Server(tmp_path)
    try:
        session = login(server.url, "alice", "alice-pass-1")
        keep_alive = httpx.Client(base_url=server.url, cookies={"sessionid": session})
        assert keep_alive.get("/").status_code == 200  # its connection stays open, idle
        sockets = {f"/ws/runs/{run.pk}/": {"type": "hello", "after": 0},
                   "/ws/runs/": {"type": "watch", "runs": {run.pk: 0}, "newest": run.pk}}
        codes = close_codes(server.port, f"sessionid={session}", sockets,
                            lambda: server.signal(signal.SIGTERM))
        assert codes == [CLOSE_SERVICE_RESTART, CLOSE_SERVICE_RESTART]
        server.proc.wait(STOP_DEADLINE)  # TimeoutExpired: the stop hangs
        assert CLOSE_NOT_ANSWERED not in server.output(), server.output()[-3000:]
        keep_alive.close()
    finally:
        server.stop()


def test_a_page_that_never_answers_its_close_is_said(monkeypatch, caplog):
    """What the tests above look for: a stop that waits out a page's reply logs it."""
    monkeypatch.setattr(shutdown, "CLOSE_WAIT_SECONDS", 0.01)
    with caplog.at_level(logging.WARNING, logger="agentops.live"):
        asyncio.run(shutdown._wait_for_reply(asyncio.Event().wait()))
    assert CLOSE_NOT_ANSWERED in caplog.text
