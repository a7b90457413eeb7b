"""Waking viewers up after a commit. The database is the source of truth; this
only tells open pages "there is something after seq N". Neutral ground: the services
and the worker send wake-ups, the live layer (runs/live/) receives them, and neither
side imports the other for it. Without Redis the
channel layer does not cross processes, so pages poll the event table instead.

The wake-ups leave from one event loop per process, kept in a daemon thread, and
the committing caller does not wait for them: `async_to_sync(group_send)` made a
new loop and a new Redis connection on every call (40 ms p50 on a loaded
machine, paid by every engine commit); this costs it a dict update. Wake-ups
for one run that pile up while Redis is slow are merged into one (the highest
seq), so a burst or an outage costs at most one message per run. A lost wake-up
is harmless: the pages' poll catches it within a poll interval.
"""

import asyncio
import logging
import os
import threading

from django.conf import settings

logger = logging.getLogger("agentops.live")

SEND_TIMEOUT = 2.0     # seconds; a hung Redis must not hold the queue for long


def run_group(run_id: str) -> str:
    return f"run.{run_id}"


RUN_LIST_GROUP = "runs.all"

_lock = threading.Lock()
_sender: dict = {"pid": None, "loop": None, "queue": None, "pending": {}, "warned": False}


def _reset_after_fork() -> None:
    # the worker tree forks its workers: a child must not inherit a lock held by the parent's
    # sender thread, nor a loop whose thread did not survive the fork.
    global _lock
    _lock = threading.Lock()
    _sender.update(pid=None, loop=None, queue=None, pending={})


os.register_at_fork(after_in_child=_reset_after_fork)


def _start_sender(layer) -> None:
    loop = asyncio.new_event_loop()
    queue: asyncio.Queue = asyncio.Queue()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(_drain(layer, queue))

    threading.Thread(target=run, name="agentops-live-notify", daemon=True).start()
    _sender.update(pid=os.getpid(), loop=loop, queue=queue, pending={})


async def _drain(layer, queue: asyncio.Queue) -> None:
    while True:
        run_id = await queue.get()
        with _lock:
            seq = _sender["pending"].pop(run_id, 0)
        message = {"type": "run.changed", "run_id": run_id, "seq": seq}
        try:
            await asyncio.wait_for(_send_both(layer, run_id, message), SEND_TIMEOUT)
            _sender["warned"] = False
        except Exception:  # Redis down: live pages degrade to polling, runs go on
            if not _sender["warned"]:
                logger.warning("could not notify viewers of run %s", run_id, exc_info=True)
                _sender["warned"] = True


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
    with _lock:
        if _sender["pid"] != os.getpid():
            _start_sender(layer)
        pending = _sender["pending"]
        queued = run_id in pending
        pending[run_id] = max(pending.get(run_id, 0), seq)
        loop, queue = _sender["loop"], _sender["queue"]
    if not queued:
        loop.call_soon_threadsafe(queue.put_nowait, run_id)
