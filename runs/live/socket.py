"""What every live socket shares: authentication, JSON framing, protocol errors that
keep the socket usable, database faults waited out, a clean close when Daphne stops, and
a pump task that sends whatever the subclass says is due when it is woken (by the hub,
runs/live/hub.py, or its own timer). The sockets themselves: runs/live/consumers.py and
runs/operator/consumers.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

from channels.db import database_sync_to_async
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.utils import await_many_dispatch

from runs.db_faults import DATABASE_FAULTS
from runs.live import access as live_access
from runs.live import shutdown as live_shutdown
from runs.live.hub import Feed, poll_seconds
from runs.web import untrusted

logger = logging.getLogger("agentops.live")

MAX_FRAME = 64 * 1024   # bytes a client message may have
MAX_ERRORS = 20         # protocol errors before the server closes the socket

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
CLOSE_PROTOCOL = 4400
CLOSE_TRY_AGAIN_LATER = 4013  # 1013 in the application range (runs/live/shutdown.py): the
                              # database stayed away; the page reconnects with backoff
DATABASE_RETRY_SECONDS = 30.0  # how long a socket's request waits out a database fault


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
            # watched from its connect on: unwatched however it ended (refused, failed in
            # its connect, cancelled), told of a disconnect or not
            live_access.watcher().remove(self)
            self.gone.set()

    async def connect(self):
        self.errors = 0
        self.pump_task = None
        self.wake = asyncio.Event()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        # A logout, a password change, ... close the socket (runs/live/access.py): watched
        # from here on, in every process, before its session and access are checked.
        self.user_id = user.pk
        self.session_key = getattr(self.scope.get("session"), "session_key", None)
        await live_access.watcher().add(self)
        if not await through_database_faults(lambda: self.still_signed_in(user)):
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
        await self.started()
        self.pump_task = asyncio.ensure_future(self._pump())

    async def disconnect(self, code):
        live_access.watcher().remove(self)
        if getattr(self, "pump_task", None) is not None:
            self.pump_task.cancel()
        self.open = False
        live_shutdown.closed(self)
        self.stopped()

    async def still_signed_in(self, user) -> bool:
        """Whether the session the socket came with still signs `user` in, read again once
        the socket is watched: a logout between the handshake's read of the session and
        then reached no watcher. A user that no session brought (Channels' AuthMiddleware
        always has one; tests set the scope's user) has nothing to read again."""
        if self.session_key is None:
            return True
        current = await database_sync_to_async(live_access.session_user)(self.session_key)
        return current is not None and current.pk == user.pk

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


def shown_stall(value, field: str) -> dict | None:
    """The stall a page says it shows, as the hub's feeds hold one (only the kind counts)."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 40:
        raise ProtocolError("bad_field", f'"{field}" must be the kind of stall shown, or null')
    return {"kind": value}
