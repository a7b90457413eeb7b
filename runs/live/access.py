"""Open live sockets follow their user's access, not only the moment they connected.

A session that ends (its row deleted: a logout) closes its sockets. A password change,
a deactivation, a deleted user and a change of groups or permissions make the sockets
of the users concerned check again, with the rule they connected under (`may_view`),
whether their session still gives them that view; if not, they close with
CLOSE_ACCESS_CHANGED. The page then reconnects as after any drop, and the connect
itself refuses it (4401 logged out, 4404 not yours or no longer an operator).

The news reaches the sockets of this process directly, and those of other Daphne
processes over the channel layer's ACCESS_GROUP when there is Redis. A socket is watched
before its access is checked, and its process listens to the group before the socket is
let in (`AccessWatcher.add`): a logout at any moment after the check closes it, even
one made the instant the page shows itself live (it was missed when the page's first
socket was let in before its process had joined the group: the socket stayed open until
the next recheck). A missed message (Redis down) is caught by every socket checking
again each RECHECK_SECONDS.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import sys
import threading
import time
from importlib import import_module

from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib import auth
from django.contrib.auth.models import Group
from django.contrib.sessions.models import Session
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.dispatch import receiver
from django.utils.crypto import constant_time_compare

logger = logging.getLogger("agentops.live")


def _is_receive_timeout(error: BaseException) -> bool:
    """asyncio's timeout, or Redis's socket timeout on an idle read. The redis package is
    looked up, not imported: importing it costs every process a quarter of Django's
    start-up (its own OpenTelemetry metrics included), and an error can only be Redis's
    in a process that already imported it (channels_redis did)."""
    redis_errors = sys.modules.get("redis.exceptions")
    return isinstance(error, TimeoutError) or (
        redis_errors is not None and isinstance(error, redis_errors.TimeoutError))

ACCESS_GROUP = "live.access"
CLOSE_ACCESS_CHANGED = 4403
RECHECK_SECONDS = 60.0
SEND_TIMEOUT = 2.0
LISTEN_TIMEOUT = 2.0  # a socket waits this long at most for its process to join the group
_FAILED = object()

_watchers: dict[asyncio.AbstractEventLoop, AccessWatcher] = {}
_watchers_lock = threading.Lock()


def session_user(session_key: str | None):
    """The active user this session still authenticates, or None. Django's get_user
    without its side effect: it would flush a session whose password hash is stale,
    and a password change in that very session updates the hash a moment later."""
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    user_id, backend = store.get(auth.SESSION_KEY), store.get(auth.BACKEND_SESSION_KEY)
    if user_id is None or backend not in settings.AUTHENTICATION_BACKENDS:
        return None
    user = auth.load_backend(backend).get_user(auth.get_user_model()._meta.pk.to_python(user_id))
    if user is None:  # deleted, or inactive (the backend refuses those)
        return None
    session_hash = store.get(auth.HASH_SESSION_KEY) or ""
    hashes = [user.get_session_auth_hash(), *user.get_session_auth_fallback_hash()]
    return user if any(constant_time_compare(session_hash, h) for h in hashes) else None


class AccessWatcher:
    """The open sockets of one event loop, by user and session."""

    def __init__(self, loop: asyncio.AbstractEventLoop):
        self.loop = loop
        self.sockets: set = set()
        self.task: asyncio.Task | None = None
        self.listening = asyncio.Event()  # set while the task hears other processes

    async def add(self, consumer) -> None:
        """Watch `consumer`; return once news sent from now on by any process reaches
        it, or after LISTEN_TIMEOUT (Redis down: the recheck remains)."""
        self.sockets.add(consumer)
        if self.task is None or self.task.done():
            # the task's own event: a task cancelled before it clears only its own
            self.listening = asyncio.Event()
            self.task = self.loop.create_task(self._run(self.listening))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.listening.wait(), LISTEN_TIMEOUT)

    def remove(self, consumer) -> None:
        self.sockets.discard(consumer)
        if not self.sockets and self.task is not None:
            self.task.cancel()
            self.task = None

    def changed(self, sessions=(), users=(), everyone=False) -> None:
        """`sessions` ended (deleted: their sockets close without a check); `users`'
        access changed: their sockets check again."""
        for consumer in list(self.sockets):
            if consumer.session_key in sessions:
                self.loop.create_task(consumer.close(code=CLOSE_ACCESS_CHANGED))
            elif everyone or consumer.user_id in users:
                self.loop.create_task(recheck(consumer))

    async def _run(self, listening: asyncio.Event) -> None:
        layer, channel = None, None
        if settings.REDIS_URL:
            from channels.layers import get_channel_layer

            layer = get_channel_layer()
        else:
            listening.set()  # no other process to hear from
        recheck_at = time.monotonic() + RECHECK_SECONDS
        try:
            while self.sockets:
                if channel is None and layer is not None:
                    with contextlib.suppress(Exception):  # no Redis: the recheck remains
                        joining = await layer.new_channel()
                        await layer.group_add(ACCESS_GROUP, joining)
                        channel = joining  # in the group: else joined again next time
                        listening.set()
                message = await self._next(layer, channel, recheck_at - time.monotonic())
                if time.monotonic() >= recheck_at:
                    recheck_at = time.monotonic() + RECHECK_SECONDS
                    self.changed(everyone=True)
                if message is _FAILED:
                    channel = None
                    listening.clear()
                elif message is not None:
                    self.changed(message.get("sessions", ()), message.get("users", ()),
                                 bool(message.get("everyone")))
        finally:
            listening.clear()
            if channel is not None:
                with contextlib.suppress(Exception):
                    await layer.group_discard(ACCESS_GROUP, channel)

    async def _next(self, layer, channel, timeout: float):
        """The next message from other processes, or None after `timeout` seconds."""
        timeout = max(0.0, timeout)
        try:
            if channel is None:
                await asyncio.sleep(timeout)
                return None
            return await asyncio.wait_for(layer.receive(channel), timeout)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if _is_receive_timeout(error):  # none came, or an idle read hit the socket timeout
                return None
            # Redis down or restarting: join again once it answers
            logger.warning("access watcher lost the channel layer", exc_info=True)
            await asyncio.sleep(1.0)
            return _FAILED


def watcher() -> AccessWatcher:
    loop = asyncio.get_running_loop()
    with _watchers_lock:
        for old in [w for w in _watchers if w.is_closed()]:
            del _watchers[old]
        if loop not in _watchers:
            _watchers[loop] = AccessWatcher(loop)
        return _watchers[loop]


async def recheck(consumer) -> None:
    user = await database_sync_to_async(session_user)(consumer.session_key)
    if user is None or user.pk != consumer.user_id or not await consumer.may_view(user):
        await consumer.close(code=CLOSE_ACCESS_CHANGED)


def access_changed(sessions=(), users=(), everyone=False) -> None:
    """Tell every socket concerned, here and in other processes, to check again."""
    sessions, users = [s for s in sessions if s], list(users)
    with _watchers_lock:
        watchers = [w for w in _watchers.values() if not w.loop.is_closed()]
    for w in watchers:  # a fresh context: the caller's would tie the recheck to its thread
        w.loop.call_soon_threadsafe(w.changed, sessions, users, everyone,
                                    context=contextvars.Context())
    if settings.REDIS_URL:
        try:
            async_to_sync(_send)({"type": "access.changed", "sessions": sessions,
                                  "users": users, "everyone": everyone})
        except Exception:  # other processes learn it at their next recheck
            logger.warning("could not tell other processes that access changed",
                           exc_info=True)


async def _send(message: dict) -> None:
    from channels.layers import get_channel_layer

    await asyncio.wait_for(get_channel_layer().group_send(ACCESS_GROUP, message), SEND_TIMEOUT)


# --- what changes access ----------------------------------------------------------------
def _after_commit(**kwargs) -> None:
    transaction.on_commit(lambda: access_changed(**kwargs))


@receiver(post_delete, sender=Session)
def _session_ended(sender, instance, **kwargs):
    # A logout flushes (deletes) the session; so do a stale password hash and clearsessions.
    # Not user_logged_out: it is sent before the flush, and a socket closed then would
    # reconnect on the still-valid session.
    access_changed(sessions=[instance.session_key])


@receiver(post_save, sender=settings.AUTH_USER_MODEL)
@receiver(post_delete, sender=settings.AUTH_USER_MODEL)
def _user_changed(sender, instance, **kwargs):
    # password, is_active, is_superuser, ... (a login's last_login too: harmless)
    _after_commit(users=[instance.pk])


@receiver(post_delete, sender=Group)
def _group_deleted(sender, instance, **kwargs):
    _after_commit(everyone=True)


def _memberships_changed(sender, instance, action, reverse, pk_set, **kwargs):
    if not action.startswith("post_"):
        return
    if isinstance(instance, auth.get_user_model()):
        _after_commit(users=[instance.pk])
    elif pk_set is not None and sender is not Group.permissions.through:
        _after_commit(users=list(pk_set))   # a group's (or a permission's) users changed
    else:
        _after_commit(everyone=True)        # a group's permissions: whoever is in it


def connect_signals() -> None:
    user_model = auth.get_user_model()
    for through in (user_model.groups.through, user_model.user_permissions.through,
                    Group.permissions.through):
        m2m_changed.connect(_memberships_changed, sender=through,
                            dispatch_uid=f"live_access.{through._meta.label}")
