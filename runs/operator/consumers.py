"""The operator pages over a websocket, ws/operator/ (operators only: checked when the
socket opens and again on every message and before every notice).

The socket only says *which* of the runs a page shows changed; the page then asks the
server for the affected partials again (the same views its fallback poll uses), so the
server stays the one renderer::

    client → {"type": "watch", "runs": {id: seq, ...}, "all": bool}
                 the runs the page shows and the event seq of each as drawn; "all":
                 the page also depends on runs it does not list (new runs, the
                 attention queue, the workers' held runs)
             {"type": "ping"}                       answered with {"type": "pong"}
    server → {"type": "watching", "runs": [id, ...]}
             {"type": "changed", "runs": [id, ...], "all": bool}
                 rows that moved past the seq given (or whose stall started or
                 ended); "all": some run the page does not list changed

Shown runs are followed by the process's `LiveHub` (runs/live/hub.py), as the user
pages' are: wake-ups from the channel layer, and its poll of their heads when one is
missed. "all" has an `Activity` per process: it listens to the group every commit is
also sent to (`RUN_LIST_GROUP`) and, for the wake-ups that never come (no Redis, Redis
down) and for the workers (whose heartbeats are no commit of a run), reads
`activity_fingerprint` once per ACTIVITY_POLL_SECONDS. "all" notices are sent
at most once per ACTIVITY_EVERY seconds: a busy cluster changes some run all the time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from channels.db import database_sync_to_async
from django.contrib.auth import get_user_model

from runs.live.consumers import MAX_WATCH
from runs.live.hub import UNKNOWN, hub, poll_seconds, stall_key
from runs.live.socket import CLOSE_NOT_FOUND, LiveConsumer, ProtocolError, logger
from runs.operator.selectors import activity_fingerprint
from runs.operator.views import PERMISSION
from runs.wakeups import RUN_LIST_GROUP

ACTIVITY_EVERY = 2.0          # seconds between "all" notices to one socket
ACTIVITY_POLL_SECONDS = 2.0   # seconds between fingerprint reads when no wake-up came


def is_operator(user_id) -> bool:
    """Read afresh (a user object caches its permissions): still active, still an operator."""
    user = get_user_model().objects.filter(pk=user_id, is_active=True).first()
    return user is not None and user.has_perm(PERMISSION)


class Activity:
    """'Some run changed' for this process's operator sockets that asked for "all"."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.subscribers: set = set()
        self.task: asyncio.Task | None = None
        self.wake = asyncio.Event()
        self.ready = asyncio.Event()  # the first fingerprint is read: changes count from here

    def subscribe(self, consumer) -> None:
        self.subscribers.add(consumer)
        if self.task is None or self.task.done():
            self.task = self.loop.create_task(self._run())

    def unsubscribe(self, consumer) -> None:
        self.subscribers.discard(consumer)
        if not self.subscribers and self.task is not None:
            self.task.cancel()
            self.task = None
            self.ready = asyncio.Event()

    def _changed(self) -> None:
        for consumer in list(self.subscribers):
            consumer.activity_changed()

    async def _run(self) -> None:
        from channels.layers import get_channel_layer

        layer, channel, listener = get_channel_layer(), None, None
        read = database_sync_to_async(activity_fingerprint)
        try:
            if layer is not None:
                with contextlib.suppress(Exception):  # no layer: the fingerprint alone
                    channel = await layer.new_channel()
                    await layer.group_add(RUN_LIST_GROUP, channel)
                    listener = self.loop.create_task(self._listen(layer, channel))
            seen = UNKNOWN
            while self.subscribers:
                try:
                    now = await read()
                except Exception:  # the database hiccuped: the next turn reads again
                    logger.warning("operator activity read failed", exc_info=True)
                else:
                    if seen is not UNKNOWN and now != seen:
                        self._changed()
                    seen = now
                    self.ready.set()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.wake.wait(), timeout=ACTIVITY_POLL_SECONDS)
                self.wake.clear()
        finally:
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(Exception):
                    await layer.group_discard(RUN_LIST_GROUP, channel)

    async def _listen(self, layer, channel) -> None:
        while True:
            try:
                message = await layer.receive(channel)
            except asyncio.CancelledError:
                raise
            except Exception:  # Redis away: the fingerprint poll covers it meanwhile
                await asyncio.sleep(ACTIVITY_POLL_SECONDS)
                continue
            if message.get("type") == "run.changed":
                self._changed()  # a commit of a run no page lists: say so (throttled)


_activity: Activity | None = None


def activity() -> Activity:
    global _activity
    loop = asyncio.get_running_loop()
    if _activity is None or _activity.loop is not loop:
        _activity = Activity(loop)
    return _activity


def _watched(message: dict) -> tuple[dict[str, int], bool]:
    runs, everything = message.get("runs", {}), message.get("all", False)
    if (not isinstance(runs, dict) or len(runs) > MAX_WATCH
            or not all(isinstance(k, str) and len(k) <= 64 and isinstance(v, int)
                       and not isinstance(v, bool) and v >= 0 for k, v in runs.items())):
        raise ProtocolError("bad_field", f'"runs" must map up to {MAX_WATCH} run ids to '
                                         "the event seq shown")
    if not isinstance(everything, bool):
        raise ProtocolError("bad_field", '"all" must be true or false')
    return runs, everything


class OperatorConsumer(LiveConsumer):
    """Tells an operator page which of its runs changed; the page re-renders them."""

    async def allowed(self, user) -> bool:
        self.user_id = user.pk
        self.known: dict[str, int] = {}       # run id -> the seq the page shows
        self.stalls_sent: dict[str, object] = {}
        self.everything = False
        self.activity_due = False
        self.activity_sent_at = 0.0
        return await self.still_operator()

    async def still_operator(self) -> bool:
        return await database_sync_to_async(is_operator)(self.user_id)

    async def may_view(self, user) -> bool:
        # runs/live/access.py asks again whenever the user's access changes
        return await database_sync_to_async(is_operator)(user.pk)

    async def started(self):
        pass

    def stopped(self):
        for run_id in list(getattr(self, "known", {})):
            hub().unsubscribe(run_id, self)
        if getattr(self, "everything", False):
            activity().unsubscribe(self)

    def handlers(self):
        return {"watch": self.guarded(self.watch), "ping": self.guarded(self.ping)}

    def guarded(self, handler):
        async def checked(message):
            if not await self.still_operator():
                await self.close(code=CLOSE_NOT_FOUND)  # the page stops: nothing more to see
                return
            await handler(message)
        return checked

    async def watch(self, message):
        runs, everything = _watched(message)
        exist = await database_sync_to_async(self._existing)(list(runs))
        for run_id in set(self.known) - exist:
            hub().unsubscribe(run_id, self)
        self.known = {run_id: runs[run_id] for run_id in exist}
        self.stalls_sent = {run_id: UNKNOWN for run_id in exist}
        for run_id in exist:
            hub().subscribe(run_id, self)
        if everything != self.everything:
            (activity().subscribe if everything else activity().unsubscribe)(self)
        self.everything = everything
        if everything:  # "watching" means: any change from now on is told (the page
            # refreshes once on it to cover the moment between its render and now)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(activity().ready.wait(), timeout=ACTIVITY_POLL_SECONDS)
        await self.send_json({"type": "watching", "runs": sorted(exist)})
        self.wake.set()

    @staticmethod
    def _existing(run_ids) -> set[str]:
        from runs.models import Run

        return set(Run.objects.filter(pk__in=run_ids).values_list("pk", flat=True))

    def feed_advanced(self, feed) -> None:
        self.wake.set()

    def activity_changed(self) -> None:
        self.activity_due = True
        self.wake.set()

    def pump_timeout(self) -> float:
        return min(poll_seconds(), ACTIVITY_EVERY)

    def moved(self) -> list[str]:
        """Shown runs past the seq the page drew, or whose stall started or ended (the
        first stall the hub reads is the one the page drew: it rendered just now)."""
        feeds, moved = hub().feeds, []
        for run_id, seq in self.known.items():
            feed = feeds.get(run_id)
            if feed is None:
                continue
            if feed.stall is not UNKNOWN and self.stalls_sent[run_id] is UNKNOWN:
                self.stalls_sent[run_id] = feed.stall
            stall_moved = (feed.stall is not UNKNOWN
                           and stall_key(feed.stall) != stall_key(self.stalls_sent[run_id]))
            if feed.head > seq or stall_moved:
                self.known[run_id] = max(seq, feed.head)
                self.stalls_sent[run_id] = feed.stall
                moved.append(run_id)
        return moved

    async def pump(self):
        moved = self.moved()
        now = time.monotonic()
        everything = self.activity_due and now - self.activity_sent_at >= ACTIVITY_EVERY
        if not moved and not everything:
            return
        if not await self.still_operator():
            await self.close(code=CLOSE_NOT_FOUND)
            return
        if everything:
            self.activity_due, self.activity_sent_at = False, now
        await self.send_json({"type": "changed", "runs": sorted(moved), "all": everything})
