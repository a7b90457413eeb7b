"""Open live sockets are closed with 4012 ("service restart") when Daphne stops.

Without this a SIGTERM drops every socket's TCP connection without a close frame
(the page sees 1006, an abnormal closure). Daphne's own shutdown step cancels the
applications, but it stops at the first keep-alive HTTP connection that has no
application at that moment (a KeyError in `kill_all_applications`), so the
sockets are closed here too, in a shutdown trigger of the reactor of our own.
Either way each open socket is sent 4012 and Daphne waits for the page's reply
(the closing handshake), CLOSE_WAIT_SECONDS at most, before it exits.

4012 is RFC 6455's 1012 "service restart" moved to the application range:
Daphne's websocket library lets a server send only 1000 and 3000-4999. The page
(static/js/live.js) reconnects at once, to the next server behind the load
balancer or to this one when it is back, and asks for the events after the last
one it has: nothing is missed.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import weakref

CLOSE_SERVICE_RESTART = 4012
CLOSE_WAIT_SECONDS = 10.0  # a page replies at once; a browser at a load of 14 took over 3 s
# Said when a page's reply did not come within CLOSE_WAIT_SECONDS: the one way this
# shutdown waits longer than the pages make it (the stop tests assert it absent).
CLOSE_NOT_ANSWERED = (f"a live socket did not answer its close (4012) within "
                      f"{CLOSE_WAIT_SECONDS:.0f} s: dropping it")

logger = logging.getLogger("agentops.live")

_open: weakref.WeakSet = weakref.WeakSet()
_installed = {"done": False}
_stopping = {"now": False}


def stopping() -> bool:
    """This process is shutting down: a socket that opens now is closed at once with
    4012 (the listening port stays open for a moment, and a page reconnecting to it
    would otherwise be cut off without a word)."""
    return _stopping["now"]


def opened(consumer) -> None:
    """`consumer` accepted its socket: close it with 4012 if this process stops.
    Its `gone` event is set once the socket is closed."""
    _install_once()
    _open.add(consumer)


def closed(consumer) -> None:
    _open.discard(consumer)


def _install_once() -> None:
    # Only under Daphne, whose Twisted reactor is imported by then; importing it here
    # would install a reactor in a process that has none (a test, a shell).
    reactor = sys.modules.get("twisted.internet.reactor")
    if _installed["done"] or reactor is None:
        return
    _installed["done"] = True
    reactor.addSystemEventTrigger("before", "shutdown", _close_all)


def _close_all():
    from twisted.internet.defer import Deferred

    _stopping["now"] = True
    consumers = list(_open)
    if not consumers:
        return None
    waiting = asyncio.gather(*(_close(c) for c in consumers), return_exceptions=True)
    return Deferred.fromFuture(asyncio.ensure_future(waiting))


async def _close(consumer) -> None:
    await consumer.close_for_restart()
    await _wait_for_reply(consumer.gone.wait())


async def close_cleanly(consumer, receive) -> None:
    """A socket whose application Daphne cancelled: send 4012 (once) and wait for the
    page's reply. Exiting before it arrives resets the connection, and a browser
    may then lose the close frame it was sent and report 1006."""
    await consumer.close_for_restart()
    await _wait_for_reply(_disconnected(receive))


async def _wait_for_reply(reply) -> None:
    try:
        await asyncio.wait_for(reply, CLOSE_WAIT_SECONDS)
    except TimeoutError:
        logger.warning(CLOSE_NOT_ANSWERED)


async def _disconnected(receive) -> None:
    while (await receive())["type"] != "websocket.disconnect":
        pass
