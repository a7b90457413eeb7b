"""Fixtures for the built-in agents' tests.

``inproc_sandbox`` serves the sandbox in this process through httpx's WSGI
transport, so the agents' real HTTP tools run without a server: the engine tests
here (replay, versions) drive the agents with the in-memory store. The tests that
need real workers use the shared ``server`` and ``start_cluster`` fixtures.
"""

import os
import threading

import httpx
import pytest

SANDBOX = "http://testserver/sandbox"


def _closing_connections(app):
    """A WSGI app that closes the database connections of worker threads after each
    request (the search tool fetches pages from a thread pool)."""
    from django.db import connections

    def wrapped(environ, start_response):
        try:
            return list(app(environ, start_response))
        finally:
            if threading.current_thread() is not threading.main_thread():
                connections.close_all()

    return wrapped


@pytest.fixture
def inproc_sandbox(transactional_db):
    from django.core.wsgi import get_wsgi_application

    from builtin_agents.tools import http

    client = httpx.Client(transport=httpx.WSGITransport(
        app=_closing_connections(get_wsgi_application())))
    pid = os.getpid()
    saved = http._clients.get(pid)
    http._clients[pid] = client
    yield SANDBOX
    client.close()
    if saved is None:
        http._clients.pop(pid, None)
    else:
        http._clients[pid] = saved
