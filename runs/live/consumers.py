"""Live pages over websockets. The database is the source of truth; the channel
layer only says "run X has something after seq N".

Run page, ws/runs/<id>/ (the owner, or an operator)::

    client → {"type": "hello", "after": N, "stalled": K}   send me every event after N, then
                                                  live ones; K: the kind of stall the page
                                                  shows (null or absent: none)
             {"type": "resume", "after": N}    same; the client saw a gap and asks again
             {"type": "ping"}                  answered with {"type": "pong"}
    server → {"type": "welcome", "run": id, "after": N, "head": H}   (H: the last seq this
                                                  process knew of, 0 if it has not looked yet)
             {"type": "events", "events": [{"seq", "kind", "data", "at", "text"}, ...]}
             {"type": "stall", "stall": {"kind", "since", "why"} | null}   the run stalled,
                                                  or moved again (runs/worker/stalls.py)
             {"type": "error", "code": ..., "error": ...}   the connection stays usable

Events are sent in seq order, each exactly once per hello: a consumer keeps a cursor
(the last seq it sent) and only ever sends what follows it.

Run list, ws/runs/::

    client → {"type": "watch", "runs": {id: seq, ...}, "newest": id,
              "stalled": {id: kind, ...}}       (optional: the rows shown as stalled)
    server → {"type": "watching", "runs": [id, ...]}    the ones it follows (the user's own)
             {"type": "runs", "runs": [summary, ...]}   rows that moved past the seq given
             {"type": "new_runs", "newest": id}         the user launched a run elsewhere
                                                        (checked once a second)
             {"type": "stalls", "runs": {id: stall | null}}   rows whose stall changed

Wake-ups come two ways, and either alone is enough. One `LiveHub` per Daphne
process follows every run that a socket here watches. It joins the group
`run.<id>` of each of them with one channel of its own, so the worker's
`notify_run` costs Redis one message per commit per process, not one per viewer.
And it polls the heads (`Run.event_seq`) of all of them, once per
LIVE_POLL_SECONDS and in one query, so a missed or impossible wake-up (no Redis:
the in-memory layer does not cross processes; Redis down or restarted) costs at
most one poll interval. The hub also keeps the last events of each followed run,
so N viewers of a run cost one query per change, not N. A stall is the absence of
events, so no wake-up announces it: the same poll reads what the stall rule needs
and each feed says when its run's stall changed.
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
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.layers import get_channel_layer
from channels.utils import await_many_dispatch
from django.conf import settings
from django.db import connections

from runs import selectors
from runs.live import access as live_access
from runs.live import shutdown as live_shutdown
from runs.live.notify import run_group
from runs.web import untrusted
from runs.worker.db import DATABASE_FAULTS

try:
    from redis.exceptions import TimeoutError as RedisTimeout
except ImportError:  # pragma: no cover - no Redis client installed
    RedisTimeout = TimeoutError
from runs.web.views.present import event_message

logger = logging.getLogger("agentops.live")

TAIL = 1000             # events a feed keeps in memory
BATCH = selectors.EVENT_BATCH
MAX_FRAME = 64 * 1024   # bytes a client message may have
MAX_ERRORS = 20         # protocol errors before the server closes the socket
MAX_WATCH = 100         # runs one list socket may follow
NEW_RUNS_EVERY = 1.0    # seconds between checks for runs launched elsewhere
REJOIN_EVERY = 5.0      # seconds between attempts to rejoin groups after a layer failure
RESYNC_EVERY = 600.0    # seconds between re-joins of every group (they expire in Redis)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_PROTOCOL = 4400
CLOSE_TRY_AGAIN_LATER = 4013  # 1013 in the application range (runs/live/shutdown.py): the
                              # database stayed away; the page reconnects with backoff
DATABASE_RETRY_SECONDS = 30.0  # how long a socket's request waits out a database fault


def poll_seconds() -> float:
    return float(settings.AGENTOPS["LIVE_POLL_SECONDS"])


# --- the per-process hub ------------------------------------------------------------------
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
        if _stall_key(stall) == _stall_key(self.stall):
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


def _stall_key(stall) -> str | None:
    if stall is UNKNOWN:
        return "unknown"
    return stall["kind"] if stall else None


def _shown_stall(value, field: str) -> dict | None:
    """The stall a page says it shows, as the hub's feeds hold one (only the kind counts)."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 40:
        raise ProtocolError("bad_field", f'"{field}" must be the kind of stall shown, or null')
    return {"kind": value}


class LiveHub:
    """Follows the runs this process's sockets watch. One per event loop."""

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


async def through_database_faults(call):
    """`await call()`, again after a database fault (a terminated connection, a
    restart) until DATABASE_RETRY_SECONDS have passed. Each try gets a sound
    connection: Channels drops an unusable one around every database call."""
    delay, deadline = 0.1, time.monotonic() + DATABASE_RETRY_SECONDS
    while True:
        try:
            return await call()
        except DATABASE_FAULTS as exc:
            if time.monotonic() + delay > deadline:
                raise
            logger.warning("live socket: database unavailable (%s); trying again", exc)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)


# --- the shared socket behaviour --------------------------------------------------------------
class ProtocolError(Exception):
    def __init__(self, code: str, message: str):
        self.code = code
        super().__init__(message)


class LiveConsumer(AsyncWebsocketConsumer):
    """Authentication, JSON framing, errors that keep the socket usable, and a pump
    task that sends whatever the subclass says is due when it is woken."""

    wants_events = False

    async def __call__(self, scope, receive, send):
        """AsyncConsumer.__call__ without a channel of its own: the hub listens to the
        channel layer for every socket of the process."""
        self.scope = scope
        self.base_send = send
        self.gone = asyncio.Event()  # set when this socket's application ends
        self.open = False
        self.restarting = False
        try:
            with contextlib.suppress(StopConsumer):
                await await_many_dispatch([receive], self.dispatch)
        except asyncio.CancelledError:
            if self.open:  # Daphne is stopping (SIGTERM) and cancels every application
                await live_shutdown.close_cleanly(self, receive)
            raise
        finally:
            self.gone.set()

    async def connect(self):
        self.errors = 0
        self.pump_task = None
        self.wake = asyncio.Event()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        if not await through_database_faults(lambda: self.allowed(user)):
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.accept()
        self.open = True
        if live_shutdown.stopping():
            await self.close_for_restart()
            return
        live_shutdown.opened(self)  # a stopping Daphne closes it with 4012
        # logout, a password change, ... close the socket (runs/live/access.py)
        self.user_id = user.pk
        self.session_key = getattr(self.scope.get("session"), "session_key", None)
        live_access.watcher().add(self)
        await self.started()
        self.pump_task = asyncio.ensure_future(self._pump())

    async def disconnect(self, code):
        if getattr(self, "pump_task", None) is not None:
            self.pump_task.cancel()
            live_access.watcher().remove(self)
        self.open = False
        live_shutdown.closed(self)
        self.stopped()

    async def may_view(self, user) -> bool:
        """Whether `user` may have this socket: checked at connect and again whenever
        the user's access changes."""
        return True

    async def receive(self, text_data=None, bytes_data=None):
        try:
            if text_data is None:
                raise ProtocolError("bad_frame", "binary frames are not supported; send JSON text")
            message = _parse_message(text_data)
            if not isinstance(message, dict) or not isinstance(message.get("type"), str):
                raise ProtocolError("bad_message", 'a message is a JSON object with a "type"')
            handler = self.handlers().get(message["type"])
            if handler is None:
                known = ", ".join(sorted(self.handlers()))
                raise ProtocolError("unknown_type",
                                    f"unknown message type {message['type'][:40]!r}; "
                                    f"expected one of: {known}")
            await through_database_faults(lambda: handler(message))
        except DATABASE_FAULTS:
            await self.close(code=CLOSE_TRY_AGAIN_LATER)  # the page reconnects and asks again
        except ProtocolError as exc:
            self.errors += 1
            await self.send_json({"type": "error", "code": exc.code, "error": str(exc)})
            if self.errors >= MAX_ERRORS:
                await self.close(code=CLOSE_PROTOCOL)

    async def close_for_restart(self) -> None:
        """This process is stopping: nothing more is sent, the page reconnects."""
        if self.restarting:
            return
        self.restarting = True
        if self.pump_task is not None:
            self.pump_task.cancel()
        await self.close(code=live_shutdown.CLOSE_SERVICE_RESTART)

    async def send_json(self, content: dict) -> None:
        await self.send(text_data=json.dumps(content, ensure_ascii=False))

    async def ping(self, message):
        await self.send_json({"type": "pong"})

    def feed_advanced(self, feed: Feed) -> None:
        self.wake.set()

    async def _pump(self):
        try:
            while True:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), timeout=self.pump_timeout())
                self.wake.clear()
                try:
                    await self.pump()
                except DATABASE_FAULTS as exc:
                    # The cursor moved only past what was sent: the next try goes on
                    # from there, so the socket stays open and nothing is skipped.
                    logger.warning("live socket: database unavailable (%s); trying again", exc)
                    await asyncio.sleep(poll_seconds())
                    self.wake.set()
        except asyncio.CancelledError:
            pass
        except Exception:
            logger.warning("live socket failed; closing it so the client reconnects",
                           exc_info=True)
            await self.close(code=1011)

    def pump_timeout(self) -> float:
        return poll_seconds()

    # subclasses define:
    async def allowed(self, user) -> bool: ...
    async def started(self) -> None: ...
    def stopped(self) -> None: ...
    def handlers(self) -> dict: ...
    async def pump(self) -> None: ...


def _parse_message(text: str):
    try:
        return untrusted.parse_json(text, max_bytes=MAX_FRAME)
    except untrusted.TooLargeError:
        raise ProtocolError("too_large", f"messages are limited to {MAX_FRAME} bytes") from None
    except untrusted.UntrustedInputError as exc:
        raise ProtocolError("bad_json", f"the message is {exc}"
                            if isinstance(exc, untrusted.NotJSONError) else str(exc)) from None


def _after(message: dict) -> int:
    after = message.get("after", 0)
    if isinstance(after, bool) or not isinstance(after, int) or not 0 <= after < 2**63:
        raise ProtocolError("bad_field", '"after" must be a whole number >= 0 '
                                         "(the last event seq the client has)")
    return after


class RunConsumer(LiveConsumer):
    """One run's events: catch-up from the database, then live ones."""

    wants_events = True

    async def allowed(self, user) -> bool:
        self.run_id = self.scope["url_route"]["kwargs"]["run_id"]
        self.cursor: int | None = None   # the last seq sent; None until the client says hello
        self.generation = 0
        self.from_db = False
        self.welcome_due = False
        self.stall_sent: object = UNKNOWN
        return await self.may_view(user)

    async def may_view(self, user) -> bool:
        return await database_sync_to_async(selectors.run_visible)(user, self.run_id)

    async def started(self):
        self.feed = hub().subscribe(self.run_id, self)

    def stopped(self):
        if getattr(self, "feed", None) is not None:
            hub().unsubscribe(self.run_id, self)

    def handlers(self):
        return {"hello": self.hello, "resume": self.hello, "ping": self.ping}

    async def hello(self, message):
        shown = _shown_stall(message.get("stalled"), "stalled")
        self.cursor = _after(message)
        self.generation += 1
        self.from_db = True        # catch up from the database itself, never only the cache
        self.welcome_due = True
        self.stall_sent = shown
        self.wake.set()

    async def pump(self):
        await self.events_pump()
        stall = self.feed.stall
        if self.cursor is not None and stall is not UNKNOWN and \
                _stall_key(stall) != _stall_key(self.stall_sent):
            self.stall_sent = stall
            await self.send_json({"type": "stall", "stall": stall})

    async def events_pump(self):
        while self.cursor is not None:
            generation = self.generation
            if self.welcome_due:
                self.welcome_due = False
                await self.send_json({"type": "welcome", "run": self.run_id,
                                      "after": self.cursor, "head": self.feed.head})
            batch = None if self.from_db else self.feed.cached_after(self.cursor)
            if batch is None:
                batch = await load_events(self.run_id, self.cursor)
                self.from_db = len(batch) >= BATCH  # more to come: keep reading the table
            if generation != self.generation:
                continue  # a new hello moved the cursor meanwhile
            if not batch:
                return
            await self.send(text_data='{"type":"events","events":['
                            + ",".join(text for _, text in batch) + "]}")
            if generation == self.generation:  # else a hello moved the cursor during the send
                self.cursor = batch[-1][0]


class RunListConsumer(LiveConsumer):
    """Rows of the user's run list: status and progress as they move."""

    async def allowed(self, user) -> bool:
        self.user = user
        self.known: dict[str, int] = {}   # run id -> the event seq the client shows
        self.newest: str | None = None
        self.watching = False
        self.check_new_at = 0.0
        self.stalls_sent: dict[str, object] = {}
        return True

    async def started(self):
        pass

    def stopped(self):
        for run_id in list(getattr(self, "known", {})):
            hub().unsubscribe(run_id, self)

    def handlers(self):
        return {"watch": self.watch, "ping": self.ping}

    def pump_timeout(self) -> float:
        return NEW_RUNS_EVERY

    async def watch(self, message):
        runs = message.get("runs", {})
        newest = message.get("newest")
        if (not isinstance(runs, dict) or len(runs) > MAX_WATCH
                or not all(untrusted.is_run_id(k) and isinstance(v, int)
                           and not isinstance(v, bool) for k, v in runs.items())):
            raise ProtocolError("bad_field", f'"runs" must map up to {MAX_WATCH} run ids to '
                                             "the event seq shown")
        if newest is not None and not untrusted.is_run_id(newest):
            raise ProtocolError("bad_field", '"newest" must be a run id or null')
        shown = message.get("stalled") or {}
        if not isinstance(shown, dict):
            raise ProtocolError("bad_field", '"stalled" must map run ids to the kind of stall shown')
        shown = {run_id: _shown_stall(kind, "stalled") for run_id, kind in shown.items()}
        owned = await database_sync_to_async(self._owned)(list(runs))
        for run_id in set(self.known) - owned:
            hub().unsubscribe(run_id, self)
        self.known = {run_id: runs[run_id] for run_id in owned}
        self.stalls_sent = {run_id: shown.get(run_id) for run_id in owned}
        for run_id in owned:
            hub().subscribe(run_id, self)
        self.newest = newest
        self.watching = True
        self.check_new_at = 0.0
        await self.send_json({"type": "watching", "runs": sorted(owned)})
        self.wake.set()

    async def send_stalls(self, feeds) -> None:
        changed = {}
        for run_id in self.known:
            stall = feeds[run_id].stall if run_id in feeds else UNKNOWN
            if stall is not UNKNOWN and \
                    _stall_key(stall) != _stall_key(self.stalls_sent.get(run_id)):
                changed[run_id] = self.stalls_sent[run_id] = stall
        if changed:
            await self.send_json({"type": "stalls", "runs": changed})

    def _owned(self, run_ids) -> set[str]:
        return set(selectors.run_list(self.user).filter(pk__in=run_ids)
                   .values_list("pk", flat=True))

    async def pump(self):
        if not self.watching:
            return
        feeds = hub().feeds
        moved = [run_id for run_id, seq in self.known.items()
                 if run_id in feeds and feeds[run_id].head > seq]
        if moved:
            rows = await database_sync_to_async(selectors.run_summaries)(self.user, moved)
            for row in rows:
                self.known[row["id"]] = max(self.known.get(row["id"], 0), row["seq"])
                self.stalls_sent[row["id"]] = row["stall"]  # the row drew its stall too
            if rows:
                await self.send_json({"type": "runs", "runs": rows})
        await self.send_stalls(feeds)
        if time.monotonic() >= self.check_new_at:
            self.check_new_at = time.monotonic() + NEW_RUNS_EVERY
            newest = await database_sync_to_async(selectors.newest_run_id)(self.user)
            if newest is not None and newest != self.newest:
                self.newest = newest
                await self.send_json({"type": "new_runs", "newest": newest})
