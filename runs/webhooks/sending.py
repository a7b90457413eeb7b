"""One attempt of a delivery: sign it (Standard Webhooks, with the standardwebhooks
library), POST it, record the attempt and its answer, and say whether it is worth
trying again. The retrying itself is the engine's (agents.py).

Every attempt of a process goes through one HTTP client (making one cost about 50 ms
of CPU: its TLS context), which keeps no cookie: an endpoint's cookies must not reach
another subscriber's. Of the answer, only the first BODY_CLIP characters are read, and
nothing after the timeout: an endpoint that answers without end, or a byte at a time,
holds a worker for twice the timeout at most (a read that began waits its own).
httpx is imported by the first attempt, not with the module (builtin_agents/tools/http.py
says why: what every process would pay at its start)."""

from __future__ import annotations

import json
import os
import threading
import time
from datetime import UTC, datetime
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import F
from django.utils import timezone
from standardwebhooks.webhooks import Webhook

from runs.durable import PermanentToolError, TransientToolError
from runs.worker.db import release_connection

from .addresses import AddressRefused, check_resolved
from .models import Attempt, Delivery, DeliveryStatus

if TYPE_CHECKING:
    import httpx

BODY_CLIP = 2000
USER_AGENT = "agentops-webhooks/1"
_clients: dict[int, httpx.Client] = {}  # by process id: a forked child makes its own
_clients_lock = threading.Lock()


class DeliveryRefused(PermanentToolError):
    """The subscription's URL may not receive webhooks (addresses.py); never retried."""


class EndpointFailed(TransientToolError):
    """No 2xx from the endpoint: tried again under the delivery's retry policy."""


def signed_headers(delivery: Delivery, body: str, now: datetime) -> dict:
    signature = Webhook(delivery.subscription.secret).sign(delivery.msg_id, now, body)
    return {"webhook-id": delivery.msg_id, "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": signature, "content-type": "application/json",
            "user-agent": USER_AGENT}


def attempt(delivery_id: int) -> dict:
    import httpx

    delivery = Delivery.objects.select_related("subscription").get(pk=delivery_id)
    if delivery.status != DeliveryStatus.PENDING:
        return {"status": delivery.status, "already": True}
    Delivery.objects.filter(pk=delivery_id).update(attempts=F("attempts") + 1)
    number = Delivery.objects.values_list("attempts", flat=True).get(pk=delivery_id)
    row = Attempt(delivery_id=delivery_id, number=number, started_at=timezone.now())
    url = delivery.subscription.url
    body = json.dumps(delivery.payload, separators=(",", ":"), sort_keys=True)
    started = time.monotonic()
    try:
        check_resolved(url)
        # a fresh timestamp each attempt: receivers refuse old ones (replay protection)
        headers = signed_headers(delivery, body, datetime.now(UTC))
        # the answer may take the whole timeout: a worker's pooled connection (the reads
        # above took it) goes back to its pool meanwhile
        release_connection()
        status, answer = _post(url, body, headers, settings.WEBHOOKS["TIMEOUT"])
    except AddressRefused as exc:
        _finish(row, started, error=str(exc))
        raise DeliveryRefused(str(exc)) from None
    except (httpx.HTTPError, OSError) as exc:
        _finish(row, started, error=f"{type(exc).__name__}: {exc}")
        raise EndpointFailed(f"{type(exc).__name__}: {exc}") from None
    _finish(row, started, status=status, body=answer.body)
    if 200 <= status < 300:
        Delivery.objects.filter(pk=delivery_id).update(status=DeliveryStatus.DELIVERED,
                                                       finished_at=timezone.now())
        return {"status_code": status, "attempt": number}
    raise EndpointFailed(f"HTTP {status} from the endpoint", retry_after=answer.retry_after)


class _Answer:
    __slots__ = ("body", "retry_after")

    def __init__(self, body: str, retry_after: float | None):
        self.body, self.retry_after = body, retry_after


def _post(url: str, body: str, headers: dict, timeout: float) -> tuple[int, _Answer]:
    """(status, the answer's first BODY_CLIP characters and Retry-After): no read begins
    after `timeout` (each read may wait `timeout` itself), so a trickle cannot stretch it."""
    deadline = time.monotonic() + timeout
    with _client().stream("POST", url, content=body.encode(), headers=headers,
                          timeout=timeout) as response:
        data = bytearray()
        for chunk in response.iter_bytes():
            data += chunk
            if len(data) >= BODY_CLIP * 4 or time.monotonic() > deadline:  # 4: UTF-8's widest
                break
        text = bytes(data).decode(response.encoding or "utf-8", errors="replace")
        return response.status_code, _Answer(text[:BODY_CLIP], _retry_after(response))


def _client() -> httpx.Client:
    import httpx

    pid = os.getpid()
    with _clients_lock:
        client = _clients.get(pid)
        if client is None:
            nothing_kept = CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))
            client = _clients[pid] = httpx.Client(follow_redirects=False,
                                                  cookies=nothing_kept)
        return client


def give_up(delivery_id: int, reason: str) -> None:
    Delivery.objects.filter(pk=delivery_id, status=DeliveryStatus.PENDING).update(
        status=DeliveryStatus.FAILED, finished_at=timezone.now())


def _finish(row: Attempt, started: float, *, status=None, body="", error="") -> None:
    row.duration_ms = (time.monotonic() - started) * 1000
    row.status_code = status
    row.response_body = body[:BODY_CLIP]
    row.error = error[:500]
    row.save()


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after", "").strip()
    try:
        return float(value) if value else None
    except ValueError:
        return None
