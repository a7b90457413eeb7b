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

The sockets' shared behaviour is runs/live/socket.py; the process's hub, which follows
the runs and wakes the sockets, runs/live/hub.py.
"""

from __future__ import annotations

import time

from channels.db import database_sync_to_async

from runs import selectors
from runs.live.hub import BATCH, UNKNOWN, hub, load_events, stall_key
from runs.live.socket import LiveConsumer, ProtocolError, shown_stall
from runs.web import untrusted

MAX_WATCH = 100         # runs one list socket may follow
NEW_RUNS_EVERY = 1.0    # seconds between checks for runs launched elsewhere


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
        shown = shown_stall(message.get("stalled"), "stalled")
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
                stall_key(stall) != stall_key(self.stall_sent):
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
        shown = {run_id: shown_stall(kind, "stalled") for run_id, kind in shown.items()}
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
                    stall_key(stall) != stall_key(self.stalls_sent.get(run_id)):
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
