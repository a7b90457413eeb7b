"""Waking viewers up after a commit. The database is the source of truth; this
only tells open pages "there is something after seq N". Without Redis the
channel layer does not cross processes, so pages poll the event table instead."""

import logging

from asgiref.sync import async_to_sync
from django.conf import settings

logger = logging.getLogger("agentops.live")


def run_group(run_id: str) -> str:
    return f"run.{run_id}"


RUN_LIST_GROUP = "runs.all"


def notify_run(run_id: str, seq: int) -> None:
    if not settings.REDIS_URL:
        return
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    if layer is None:
        return
    message = {"type": "run.changed", "run_id": run_id, "seq": seq}
    try:
        async_to_sync(layer.group_send)(run_group(run_id), message)
        async_to_sync(layer.group_send)(RUN_LIST_GROUP, message)
    except Exception:  # Redis down: live pages degrade to polling, runs go on
        logger.warning("could not notify viewers of run %s", run_id, exc_info=True)
