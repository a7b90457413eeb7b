"""HTTP plumbing shared by the built-in tools: one httpx client per process, and the
line between errors worth retrying and errors that are not.

The engine's retry policy (``Retry``) retries what a tool says is transient, so
the tools only have to say which is which:

- a connection that could not be made (refused, connect timeout) is a
  ``TransientToolError`` whose request never reached the target: safe to retry
  even for a tool that is not idempotent;
- other transport errors (a read timeout, a dropped connection), 408, 409, 425,
  429 and 5xx are ``TransientHTTPError``; ``Retry-After`` is passed on, so the
  policy waits at least as long as the server asked (up to a day);
- any other 4xx is the request's own fault (a 404 page, a 422 key reuse): raised
  as ``PermanentHTTPError`` (a ``PermanentToolError``), logged at once, not retried.

httpx is imported where a request is made, not with the module: every process imports
the built-in agents at its start (the worker tree's main before it forks), and httpx
brings 137 modules and 8.6 MiB where its command-line client's packages are installed
(click, rich, pygments), 3.7 MiB where not; a process whose runs call no HTTP tool
never pays it (tests/test_startup_imports.py).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from email.utils import parsedate_to_datetime
from http.cookiejar import CookieJar
from typing import TYPE_CHECKING

from django.conf import settings

from runs.durable import PermanentToolError, Retry, TransientToolError
from runs.observability.tracing import downstream_headers

if TYPE_CHECKING:
    import httpx

TIMEOUT_SECONDS, CONNECT_TIMEOUT_SECONDS = 30.0, 5.0
# Transient errors are retried for an hour (AGENTOPS_TOOL_RETRY_FOR): 0.1 s after the
# first failure, then 0.2, 0.4, 0.8 s in the worker thread (a flaky page costs 0.1 s);
# from 1.6 s on each wait is a durable timer that frees the worker, doubling up to
# 30 s (AGENTOPS_TOOL_RETRY_MAX_INTERVAL), so an outage of the target costs no slot.
HTTP_RETRY = Retry(initial_interval=0.1, backoff_coefficient=2.0,
                   maximum_interval=settings.AGENTOPS["TOOL_RETRY_MAX_INTERVAL"],
                   maximum_attempts=None,
                   maximum_elapsed=settings.AGENTOPS["TOOL_RETRY_FOR_SECONDS"])
TRANSIENT_4XX = frozenset({408, 409, 425, 429})
# A 429 says the request was turned away before it was acted on.
NOT_ACTED_ON = frozenset({429})
USER_AGENT = "agentops-builtin-agents/1"

_clients: dict[int, httpx.Client] = {}
_lock = threading.Lock()


class TransientHTTPError(TransientToolError):
    """A response worth retrying (503, 409 in progress, 429 ...)."""

    def __init__(self, status: int, url: str, detail: str = "", *,
                 retry_after: float | None = None):
        self.status = status
        self.url = url
        super().__init__(_message(status, url, detail), retry_after=retry_after,
                         reached_target=status not in NOT_ACTED_ON)


class PermanentHTTPError(PermanentToolError):
    """A 4xx that retrying cannot fix (404, 422 ...): logged at once, never retried."""

    def __init__(self, status: int, url: str, detail: str = ""):
        self.status = status
        self.url = url
        super().__init__(_message(status, url, detail))


def is_transient(status: int) -> bool:
    return status >= 500 or status in TRANSIENT_4XX


def sandbox_url() -> str:
    return settings.AGENTOPS["SANDBOX_URL"].rstrip("/")


class NoCookies(CookieJar):
    """A cookie jar that keeps nothing: a response's cookies are not even read."""

    def extract_cookies(self, response, request):
        """Nothing is kept, so nothing is parsed (a response's headers, every request)."""

    def set_cookie(self, cookie):
        """Nothing is kept."""


def client() -> httpx.Client:
    """The process's client (keep-alive connections). A forked worker gets its own.

    It keeps no cookies: the client serves the runs of every user in the process, so
    a cookie one run's site set would go out with another run's requests."""
    import httpx

    pid = os.getpid()
    with _lock:
        if pid not in _clients:
            _clients[pid] = httpx.Client(
                timeout=httpx.Timeout(TIMEOUT_SECONDS, connect=CONNECT_TIMEOUT_SECONDS),
                headers={"User-Agent": USER_AGENT},
                cookies=NoCookies())
        return _clients[pid]


def request(method: str, url: str, *, idempotency_key: str | None = None,
            headers: dict | None = None, **kwargs) -> httpx.Response:
    """Send a request; return a 2xx/3xx response or raise a transient or permanent error.

    ``idempotency_key`` goes out as the ``Idempotency-Key`` header, so the target
    can recognise a repeat of the same call (a replay after a crash), with the
    effect's ``traceparent`` when tracing is on, so the target's spans join the run's
    trace (docs/observability.md).
    """
    headers = dict(headers or {})
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
        headers.update(downstream_headers())
    with transport_errors(url):
        response = client().request(method, url, headers=headers, **kwargs)
    check(response)
    return response


@contextlib.contextmanager
def transport_errors(url: str):
    """httpx's transport errors as the engine's: a connection never made did not reach
    the target (safe to send again); any other error came after the request was sent,
    perhaps acted on, with no answer, so a non-idempotent call is in doubt. Raised as
    httpx's own, the engine takes an error for the tool's word that the call failed."""
    import httpx

    try:
        yield
    except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
        raise TransientToolError(f"cannot connect to {url}: {exc}",
                                 reached_target=False) from exc
    except httpx.TransportError as exc:
        raise TransientToolError(f"{type(exc).__name__} from {url}: {exc}") from exc


def check(response: httpx.Response) -> None:
    status = response.status_code
    if status < 400:
        return
    url = str(response.request.url)
    detail = _detail(response)
    if is_transient(status):
        raise TransientHTTPError(status, url, detail, retry_after=retry_after(response))
    raise PermanentHTTPError(status, url, detail)


def retry_after(response: httpx.Response) -> float | None:
    """The Retry-After header in seconds (a number or an HTTP date), else None."""
    value = response.headers.get("Retry-After", "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _message(status: int, url: str, detail: str) -> str:
    import httpx

    reason = httpx.codes.get_reason_phrase(status)  # "" for a status it does not know
    head = f"HTTP {status} {reason}".rstrip()
    return f"{head} from {url}" + (f": {detail}" if detail else "")


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
