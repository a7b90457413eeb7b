"""GET /api/v1/runs/{id}/events/stream: the run's events as server-sent events.

Each event's `id:` is its number, so a client that reconnects with Last-Event-ID
(EventSource does by itself) gets exactly the events after it. It follows the run as
the run page's socket does (runs/live/consumers.py): the process's LiveHub
(runs/live/hub.py) wakes it after a commit (Redis) or at its next poll of the heads,
and it reads from the hub's tail of recent events or, to catch up, from the table. A stream is a coroutine, not a
thread: thousands can be open on one Daphne. When the run ends the stream sends
`event: end` and closes; while nothing happens it sends a comment line every
API_SSE_HEARTBEAT_SECONDS so proxies keep it open. A stopping Daphne ends it at once
(the client reconnects to the next one and resumes). A run whose old events retention
deleted (docs/retention.md) is announced first by `event: pruned` with {"before": N}: the
numbers below N that do not come are gone, not lost on the way."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from channels.db import database_sync_to_async
from django.conf import settings
from django.http import Http404, StreamingHttpResponse
from ninja import Header, Query, Router
from ninja.errors import HttpError

from runs import selectors
from runs.api.auth import need
from runs.api.endpoints import READ, _check_run_id
from runs.db_faults import DATABASE_FAULTS
from runs.durable import records as r
from runs.live import shutdown as live_shutdown
from runs.live.hub import BATCH, hub, load_events

router = Router()  # mounted by runs/api/api.py

logger = logging.getLogger("agentops.api")
RECONNECT_MS = 1000  # the `retry:` EventSource waits before it reconnects

STREAM_DOC = {"responses": {"200": {
    "description": "text/event-stream: per event `id: <seq>` and `data: <event JSON>` (the "
                   "fields of EventOut); `event: end` with {status, seq} when the run ends; "
                   "`: keep-alive` comments in between",
    "content": {"text/event-stream": {"schema": {
        "type": "object", "required": ["data", "event"],
        "properties": {"data": {"type": "string", "description": "JSON: an EventOut, or "
                                                                 "{status, seq} for `end`"},
                       "event": {"type": "string", "enum": ["message", "end"]},
                       "id": {"type": "string", "pattern": "^[0-9]+$"},
                       "retry": {"type": "integer"}}}}}}}}


class Watcher:
    """What the hub and a stopping Daphne see of one stream."""

    wants_events = True

    def __init__(self):
        self.wake = asyncio.Event()
        self.gone = asyncio.Event()
        self.closing = False

    def feed_advanced(self, feed) -> None:
        self.wake.set()

    async def close_for_restart(self) -> None:
        self.closing = True
        self.wake.set()


def _last_event_id(header: str | None, after: int) -> int:
    if header is None or header == "":
        return after
    if not header.isascii() or not header.isdigit() or len(header) > 18:
        raise HttpError(400, "Last-Event-ID must be the number of the last event received")
    return int(header)


@router.get("/runs/{run_id}/events/stream", response=READ, tags=["events"],
            openapi_extra=STREAM_DOC,
            summary="Follow the run's events (server-sent events, resumable with Last-Event-ID)")
async def event_stream(request, run_id: str, after: int = Query(0, ge=0, le=2**62),
                       last_event_id: str | None = Header(None, alias="Last-Event-ID",
                                                          max_length=40)):
    _check_run_id(run_id)
    need(request, "read")
    cursor = _last_event_id(last_event_id, after)
    user = request.auth
    run = await database_sync_to_async(selectors.run_get_for_user)(user, run_id)
    response = StreamingHttpResponse(_follow(user, run.pk, cursor),
                                     content_type="text/event-stream; charset=utf-8")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


def frame(seq: int, text: str) -> str:
    return f"id: {seq}\ndata: {text}\n\n"


def ends_run(text: str) -> bool:
    if '"status"' not in text:
        return False
    event = json.loads(text)
    return event.get("kind") == "status" and event["data"].get("status") in r.FINAL_STATUSES


async def _follow(user, run_id: str, cursor: int):
    watcher = Watcher()
    feed = hub().subscribe(run_id, watcher)
    live_shutdown.opened(watcher)
    try:
        yield f"retry: {RECONNECT_MS}\n\n"
        async with contextlib.aclosing(_frames(user, run_id, cursor, feed, watcher)) as frames:
            async for text in frames:
                yield text
    except Http404:  # the user lost access to the run meanwhile
        return
    except DATABASE_FAULTS as exc:  # the client reconnects and resumes after its last id
        logger.warning("event stream of %s: database unavailable (%s); closing", run_id, exc)
    finally:
        hub().unsubscribe(run_id, watcher)
        live_shutdown.closed(watcher)
        watcher.gone.set()


async def _frames(user, run_id: str, cursor: int, feed, watcher: Watcher):
    """The run's events after `cursor`, then `event: end` when it has ended; a comment
    while nothing happens. Stops early when this Daphne stops (watcher.closing)."""
    heartbeat = float(settings.AGENTOPS["API_SSE_HEARTBEAT_SECONDS"])
    read_run = database_sync_to_async(selectors.run_get_for_user)
    check_end, end, from_db = True, None, True
    while not watcher.closing:
        if check_end:  # at the start and after a status event that ended it
            check_end = False
            run = await read_run(user, run_id)
            end = {"status": run.status, "seq": run.event_seq} \
                if run.status in r.FINAL_STATUSES else None
            if run.events_pruned_before > cursor + 1:
                pruned = {"before": run.events_pruned_before}
                yield f"event: pruned\ndata: {json.dumps(pruned)}\n\n"
        batch = None if from_db else feed.cached_after(cursor)
        read_table = batch is None
        if read_table:
            batch = await load_events(run_id, cursor)
            from_db = len(batch) >= BATCH  # more to come: keep reading the table
        if batch:
            yield "".join(frame(seq, text) for seq, text in batch)
            cursor = batch[-1][0]
            check_end = any(ends_run(text) for _, text in batch)
            continue
        # The table read after the run was seen ended has nothing more: its last events
        # may be gone (retention, docs/retention.md), so the cursor need not reach its seq.
        if end is not None and (cursor >= end["seq"] or read_table):
            yield f"event: end\ndata: {json.dumps(end)}\n\n"
            return
        watcher.wake.clear()
        if feed.head > cursor:  # moved while we read: no need to wait
            continue
        try:
            await asyncio.wait_for(watcher.wake.wait(), timeout=heartbeat)
        except TimeoutError:
            yield ": keep-alive\n\n"
