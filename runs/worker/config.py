"""Worker settings for the engine, read from Django settings."""

import os
import socket
import uuid

from django.conf import settings

from runs.durable import WorkerConfig

_PROCESS_TOKEN = uuid.uuid4().hex[:8]
_TOKEN_PID = os.getpid()


def worker_identity() -> str:
    """host:pid:token. The sweep uses host and pid to see that a local owner died."""
    global _PROCESS_TOKEN, _TOKEN_PID
    if os.getpid() != _TOKEN_PID:  # forked: a new process, a new identity
        _PROCESS_TOKEN, _TOKEN_PID = uuid.uuid4().hex[:8], os.getpid()
    return f"{socket.gethostname()}:{os.getpid()}:{_PROCESS_TOKEN}"


def worker_config(slice_seconds: float | None = None) -> WorkerConfig:
    from runs.budgets.gates import worker_gates
    from runs.budgets.prices import price
    from runs.worker.execute import enqueue_run

    conf = settings.AGENTOPS
    return WorkerConfig(owner=worker_identity(), lease_seconds=conf["LEASE_SECONDS"],
                        slice_seconds=slice_seconds or conf["TIME_SLICE_SECONDS"],
                        crash_loop_limit=conf["CRASH_LOOP_LIMIT"],
                        gates=worker_gates(), price=price, launched=enqueue_run)
