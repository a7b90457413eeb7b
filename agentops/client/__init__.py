"""A Python client of the agentops HTTP API (/api/v1/, docs/api.md), on httpx.

    from agentops.client import Client

    with Client("https://agentops.example", token="aop_...") as api:
        run = api.launch("crawl", {"start": "/"}, idempotency_key="nightly-2026-12-01")
        for event in api.follow(run.id):
            print(event.seq, event.kind, event.text)

It imports nothing from Django: a machine without the code of the server can use it."""

from agentops.client.client import Client
from agentops.client.errors import (
    ApiError,
    AuthenticationFailed,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    Unavailable,
)
from agentops.client.types import (
    Agent,
    Checkpoint,
    Effect,
    Event,
    EventPage,
    Message,
    Run,
    RunPage,
)

__all__ = ["Agent", "ApiError", "AuthenticationFailed", "Checkpoint", "Client", "Conflict",
           "Effect", "Event", "EventPage", "Forbidden", "InvalidRequest", "Message",
           "NotFound", "Run", "RunPage", "Unavailable"]
