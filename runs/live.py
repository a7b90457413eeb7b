"""Waking viewers up after a commit. The database is the source of truth; this
only tells open pages "there is something after seq N". Without Redis the
channel layer does not cross processes, so pages poll the event table instead.

The wake-up is sent from one event loop per process, kept running in a daemon
thread, and the caller does not wait for it: `async_to_sync(group_send)` made a
new loop and a new Redis connection on every call (40 ms p50 on a loaded
machine, paid by every engine commit); this costs the commit a queue put. A
lost wake-up is harmless: the pages' poll catches it within a poll interval.
"""

import asyncio
import logging
import os
import threading

from django.conf import settings

logger = logging.getLogger("agentops.live")

SEND_TIMEOUT = 2.0     # seconds; a hung Redis must not pile wake-ups up
MAX_PENDING = 1000     # wake-ups in flight before new ones are dropped (polling covers)


def run_group(run_id: str) -> str:
    return f"run.{run_id}"


RUN_LIST_GROUP = "runs.all"

_lock = threading.Lock()
_sender: dict = {"pid": None, "loop": None, "pending": 0, "warned": False}


def _reset_after_fork() -> None:
    # qcluster forks its workers: a child must not inherit a lock held by the parent's
    # sender thread, nor a loop whose thread did not survive the fork.
    global _lock
    _lock = threading.Lock()
    _sender.update(pid=None, loop=None, pending=0)


os.register_at_fork(after_in_child=_reset_after_fork)


def _loop() -> asyncio.AbstractEventLoop:
    """This process's sender loop (a forked worker starts its own)."""
    with _lock:
        if _sender["pid"] != os.getpid():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="agentops-live-notify",
                             daemon=True).start()
            _sender.update(pid=os.getpid(), loop=loop, pending=0)
        return _sender["loop"]


async def _send(layer, run_id: str, message: dict) -> None:
    try:
        await asyncio.wait_for(_send_both(layer, run_id, message), SEND_TIMEOUT)
        _sender["warned"] = False
    except Exception:  # Redis down: live pages degrade to polling, runs go on
        if not _sender["warned"]:
            logger.warning("could not notify viewers of run %s", run_id, exc_info=True)
            _sender["warned"] = True
    finally:
        with _lock:
            _sender["pending"] -= 1


async def _send_both(layer, run_id: str, message: dict) -> None:
    await layer.group_send(run_group(run_id), message)
    await layer.group_send(RUN_LIST_GROUP, message)


def notify_run(run_id: str, seq: int) -> None:
    if not settings.REDIS_URL:
        return
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return
    loop = _loop()
    with _lock:
        if _sender["pending"] >= MAX_PENDING:
            return
        _sender["pending"] += 1
    message = {"type": "run.changed", "run_id": run_id, "seq": seq}
    asyncio.run_coroutine_threadsafe(_send(layer, run_id, message), loop)
