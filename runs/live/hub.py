"""The per-process hub of the live pages: one `LiveHub` per Daphne process (per event
loop) follows every run that a socket or an event stream here watches, as a `Feed` each.

Wake-ups come two ways, and either alone is enough. The hub joins the group `run.<id>`
of each run it follows with one channel of its own, so the worker's `notify_run`
(runs/wakeups.py) costs Redis one message per commit per process, not one per viewer.
And it polls the heads (`Run.event_seq`) of all of them, once per LIVE_POLL_SECONDS and
in one query, so a missed or impossible wake-up (no Redis: the in-memory layer does not
cross processes; Redis down or restarted) costs at most one poll interval. The hub also
keeps the last events of each followed run, so N viewers of a run cost one query per
change, not N. A stall is the absence of events, so no wake-up announces it: the same
poll reads what the stall rule needs and each feed says when its run's stall changed.

A subscriber (a socket, runs/live/socket.py; an event stream, runs/api/stream.py) has
`wants_events` and `feed_advanced(feed)`: the hub calls it when the feed moved.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from itertools import islice

from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connections

from runs import selectors
from runs.wakeups import run_group
from runs.web.views.present import event_message

try:
    from redis.exceptions import TimeoutError as RedisTimeout
except ImportError:  # pragma: no cover - no Redis client installed
    RedisTimeout = TimeoutError

logger = logging.getLogger("agentops.live")

TAIL = 1000             # events a feed keeps in memory
BATCH = selectors.EVENT_BATCH
REJOIN_EVERY = 5.0      # seconds between attempts to rejoin groups after a layer failure
RESYNC_EVERY = 600.0    # seconds between re-joins of every group (they expire in Redis)


def poll_seconds() -> float:
    return float(settings.AGENTOPS["LIVE_POLL_SECONDS"])


def _load_events(run_id: str, after: int, upto: int | None = None,
                 limit: int = BATCH) -> list[tuple[int, str]]:
    """(seq, JSON text) of events after `after`: encoded once, sent to every viewer."""
    return [(e.seq, json.dumps(event_message(e), ensure_ascii=False))
            for e in selectors.events_after(run_id, after, limit=limit, upto=upto)]


def _load_event_ranges(ranges) -> dict[str, list[tuple[int, str]]]:
    """Events of many runs in one query: {run_id: [(seq, JSON text), ...]}."""
    found: dict[str, list[tuple[int, str]]] = {}
    for event in selectors.events_in_ranges(ranges):
        found.setdefault(event.run_id, []).append(
            (event.seq, json.dumps(event_message(event), ensure_ascii=False)))
    return found


load_events = database_sync_to_async(_load_events)


class Feed:
    """One run, as this process follows it: its head and its last events."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.head = 0          # the highest seq known to be committed
        self.hint = 0          # a wake-up said the head is at least this
        self.tail: deque[tuple[int, str]] = deque(maxlen=TAIL)  # contiguous, ends at head
        self.subscribers: set = set()
        self.stall: dict | None | object = UNKNOWN  # the run's stall at the last poll

    @property
    def wants_events(self) -> bool:
        return any(getattr(s, "wants_events", False) for s in self.subscribers)

    def cached_after(self, after: int) -> list[tuple[int, str]] | None:
        """The events after `after` if the tail holds all of them, else None."""
        if not self.tail:
            return None
        first, last = self.tail[0][0], self.tail[-1][0]
        if after + 1 < first:
            return None
        if after >= last:
            return [] if last >= self.head else None
        return list(islice(self.tail, after + 1 - first, None))

    def missing(self) -> tuple[str, int, int]:
        """The range of events to fetch to reach the hint: (run_id, after, upto)."""
        after = self.tail[-1][0] if self.tail else 0
        return self.run_id, max(after, self.hint - TAIL), self.hint

    def set_stall(self, stall: dict | None) -> None:
        """A poll read the run's stall: wake the sockets if it started, ended or changed
        its kind (not for the text, whose durations grow every second)."""
        if stall_key(stall) == stall_key(self.stall):
            return
        self.stall = stall
        for subscriber in list(self.subscribers):
            subscriber.feed_advanced(self)

    def advance(self, events: list[tuple[int, str]]) -> None:
        """The hub fetched up to the hint: keep the events, move the head, wake the sockets."""
        for seq, text in events:
            if self.tail and seq != self.tail[-1][0] + 1:
                self.tail.clear()  # not contiguous with what we had: start again here
            self.tail.append((seq, text))
        self.head = max(self.head, self.hint)
        for subscriber in list(self.subscribers):
            subscriber.feed_advanced(self)


UNKNOWN = object()  # a feed's stall before its first poll


def stall_key(stall) -> str | None:
    if stall is UNKNOWN:
        return "unknown"
    return stall["kind"] if stall else None


class LiveHub:
    """Follows the runs this process's sockets and streams watch. One per event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.feeds: dict[str, Feed] = {}
        self.wake = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.stopping: asyncio.Task | None = None  # a cancelled task still cleaning up
        self.last_poll = 0.0
        self.layer = get_channel_layer()
        self.channel: str | None = None
        self.joined: set[str] = set()
        self.groups_dirty = False   # feeds came or went: join or leave their groups
        self.resync_at = 0.0        # when to join every group again
        self.layer_ok = True

    def subscribe(self, run_id: str, subscriber) -> Feed:
        feed = self.feeds.get(run_id)
        if feed is None:
            feed = self.feeds[run_id] = Feed(run_id)
            self.groups_dirty = True
            self.wake.set()  # join its group and learn its head now, not at the next poll
        feed.subscribers.add(subscriber)
        if self.task is None or self.task.done():
            self.task = self.loop.create_task(self._run())
        return feed

    def unsubscribe(self, run_id: str, subscriber) -> None:
        feed = self.feeds.get(run_id)
        if feed is None:
            return
        feed.subscribers.discard(subscriber)
        if not feed.subscribers:
            del self.feeds[run_id]
            self.groups_dirty = True  # leave its group at the next turn
        if not self.feeds and self.task is not None:
            self.task.cancel()  # nobody left to follow: stop polling now
            self.stopping, self.task = self.task, None

    def poke(self, run_id: str, seq: int) -> None:
        """A wake-up from the channel layer: the run has events up to `seq`."""
        feed = self.feeds.get(run_id)
        if feed is not None and seq > feed.head:
            feed.hint = max(feed.hint, seq)
            self.wake.set()

    async def _run(self) -> None:
        # A database thread of its own: the hub's few queries never wait behind the
        # sockets' (sessions, permissions, catch-ups), which share Channels' one thread.
        db_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="live-hub-db")
        self.load_heads = database_sync_to_async(selectors.run_heads, thread_sensitive=False,
                                                 executor=db_thread)
        self.load_ranges = database_sync_to_async(_load_event_ranges, thread_sensitive=False,
                                                  executor=db_thread)
        listener = None
        try:
            if self.layer is not None:
                self.channel = await self.layer.new_channel()
                self.joined = set()
                listener = self.loop.create_task(self._listen())
            while self.feeds:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), timeout=poll_seconds())
                self.wake.clear()
                due = time.monotonic() >= self.resync_at
                if self.layer is not None and (due or (self.groups_dirty and self.layer_ok)):
                    await self._sync_groups(everything=due)
                try:
                    await self._refresh()
                except Exception:  # the database hiccuped: try again at the next poll
                    logger.warning("live hub refresh failed", exc_info=True)
                    await asyncio.sleep(poll_seconds())
        finally:
            if listener is not None:
                listener.cancel()
            for group in list(self.joined):
                with contextlib.suppress(Exception):
                    await self.layer.group_discard(group, self.channel)
            self.joined = set()
            with contextlib.suppress(Exception):  # give the connection back while idle
                await self.loop.run_in_executor(db_thread, connections.close_all)
            db_thread.shutdown(wait=False)

    async def _listen(self) -> None:
        delay = 0.5
        while True:
            try:
                message = await self.layer.receive(self.channel)
            except asyncio.CancelledError:
                raise
            except (TimeoutError, RedisTimeout):  # an idle blocking read hit the socket timeout
                continue
            except Exception:  # Redis down or restarting: poll until it is back
                self._layer_failed("receive")
                await asyncio.sleep(delay)
                delay = min(delay * 2, REJOIN_EVERY)
                continue
            delay = 0.5
            if message.get("type") == "run.changed":
                self.poke(str(message.get("run_id")), int(message.get("seq") or 0))

    async def _sync_groups(self, everything: bool) -> None:
        """Join the groups of the runs followed, leave the others. After a layer failure
        (a restarted Redis forgot every group) and every RESYNC_EVERY, join them all."""
        wanted = {run_group(run_id) for run_id in self.feeds}
        self.groups_dirty = False
        try:
            for group in (wanted if everything else wanted - self.joined):
                await self.layer.group_add(group, self.channel)
                self.joined.add(group)
            for group in self.joined - wanted:
                await self.layer.group_discard(group, self.channel)
                self.joined.discard(group)
        except Exception:
            self.groups_dirty = True
            self._layer_failed("group_add")
            return
        if everything or not self.layer_ok:
            self.resync_at = time.monotonic() + RESYNC_EVERY
        self.layer_ok = True

    def _layer_failed(self, what: str) -> None:
        if self.layer_ok:
            logger.warning("channel layer %s failed; live pages poll until it is back", what,
                           exc_info=True)
        self.layer_ok = False
        self.resync_at = time.monotonic() + REJOIN_EVERY

    async def _refresh(self) -> None:
        now = time.monotonic()
        new = [f for f in self.feeds.values() if f.head == 0]
        if now - self.last_poll >= poll_seconds() or new:
            self.last_poll = now
            heads = await self.load_heads(list(self.feeds))
            for run_id, (head, stall) in heads.items():
                feed = self.feeds.get(run_id)
                if feed is not None:
                    feed.hint = max(feed.hint, head)
                    feed.set_stall(stall)
        moving = [feed for feed in self.feeds.values() if feed.hint > feed.head]
        if not moving:
            return
        ranges = [feed.missing() for feed in moving if feed.wants_events]
        events = await self.load_ranges(ranges) if ranges else {}
        for feed in moving:  # one query for every run that moved, then every socket wakes
            feed.advance(events.get(feed.run_id, []) if feed.wants_events else [])


_hub: LiveHub | None = None


def hub() -> LiveHub:
    global _hub
    loop = asyncio.get_running_loop()
    if _hub is None or _hub.loop is not loop:
        _hub = LiveHub(loop)
    return _hub

