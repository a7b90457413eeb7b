"""HTTP plumbing shared by the built-in tools: one httpx client per process, and the
line between errors worth retrying and errors that are not.

The engine's retry policy (``Retry``) retries any exception a tool raises unless
it is permanent, so the tools only have to say which is which:

- connection errors, timeouts, 408, 409, 425, 429 and 5xx are transient: raised as
  ``TransientHTTPError`` (or httpx's own error) and retried;
- any other 4xx is the request's own fault (a 404 page, a 422 key reuse): raised
  as ``PermanentHTTPError`` (a ``PermanentToolError``), logged at once, not retried.
"""

from __future__ import annotations

import os
import threading

import httpx
from django.conf import settings

from runs.durable import PermanentToolError, Retry

TIMEOUT = httpx.Timeout(30.0, connect=5.0)
# Transient errors are retried 5 times, 0.1 s after the first failure, then 0.2, 0.4,
# 0.8 and 1.6 s: a flaky page costs 0.1 s, a server restart of ~3 s is ridden out.
HTTP_RETRY = Retry(attempts=6, backoff=0.1, max_backoff=2.0)
TRANSIENT_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
USER_AGENT = "agentops-builtin-agents/1"

_clients: dict[int, httpx.Client] = {}
_lock = threading.Lock()


class TransientHTTPError(Exception):
    """A response worth retrying (503, 409 in progress, 429 ...)."""

    permanent = False

    def __init__(self, status: int, url: str, detail: str = ""):
        self.status = status
        self.url = url
        super().__init__(f"HTTP {status} from {url}" + (f": {detail}" if detail else ""))


class PermanentHTTPError(PermanentToolError):
    """A 4xx that retrying cannot fix (404, 422 ...): logged at once, never retried."""

    permanent = True

    def __init__(self, status: int, url: str, detail: str = ""):
        self.status = status
        self.url = url
        super().__init__(f"HTTP {status} from {url}" + (f": {detail}" if detail else ""))


def sandbox_url() -> str:
    return settings.AGENTOPS["SANDBOX_URL"].rstrip("/")


def client() -> httpx.Client:
    """The process's client (keep-alive connections). A forked worker gets its own."""
    pid = os.getpid()
    with _lock:
        if pid not in _clients:
            _clients[pid] = httpx.Client(timeout=TIMEOUT, headers={"User-Agent": USER_AGENT})
        return _clients[pid]


def request(method: str, url: str, *, idempotency_key: str | None = None,
            headers: dict | None = None, **kwargs) -> httpx.Response:
    """Send a request; return a 2xx/3xx response or raise a transient or permanent error.

    ``idempotency_key`` goes out as the ``Idempotency-Key`` header, so the target
    can recognise a repeat of the same call (a replay after a crash).
    """
    headers = dict(headers or {})
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    response = client().request(method, url, headers=headers, **kwargs)
    check(response)
    return response


def check(response: httpx.Response) -> None:
    status = response.status_code
    if status < 400:
        return
    url = str(response.request.url)
    detail = _detail(response)
    if status in TRANSIENT_STATUSES:
        raise TransientHTTPError(status, url, detail)
    raise PermanentHTTPError(status, url, detail)


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return ""
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict):  # OpenAI's {"error": {"message": ...}}
            return str(error.get("message", ""))[:300]
        return str(body.get("detail") or error or "")[:300]
    return ""
