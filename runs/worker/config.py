"""Worker settings for the engine, read from Django settings and the features' hooks."""

import os
import socket
import uuid

from django.conf import settings

from runs.db_faults import DATABASE_FAULTS
from runs.durable import WorkerConfig
from runs.hooks import hooks
from runs.storage import database_store
from runs.worker import fleet
from runs.worker.db import ReleasingStore, release_connection

_PROCESS_TOKEN = uuid.uuid4().hex[:8]
_TOKEN_PID = os.getpid()


def worker_identity() -> str:
    """host:pid:token. The sweep uses host and pid to see that a local owner died."""
    global _PROCESS_TOKEN, _TOKEN_PID
    if os.getpid() != _TOKEN_PID:  # forked: a new process, a new identity
        _PROCESS_TOKEN, _TOKEN_PID = uuid.uuid4().hex[:8], os.getpid()
    return f"{socket.gethostname()}:{os.getpid()}:{_PROCESS_TOKEN}"


def worker_config(slice_seconds: float | None = None) -> WorkerConfig:
    """A child run needs no hand-over at its launch (`launched` is None): a free slot of
    any worker finds it at its next poll of the due runs (runs/worker/execute.py)."""
    conf = settings.AGENTOPS
    gates = hooks.gates()  # none registered: the engine's default gates
    return WorkerConfig(owner=worker_identity(), lease_seconds=conf["LEASE_SECONDS"],
                        slice_seconds=slice_seconds or conf["TIME_SLICE_SECONDS"],
                        crash_loop_limit=conf["CRASH_LOOP_LIMIT"], price=hooks.price,
                        codes=fleet.worker_codes(), **({"gates": gates} if gates else {}),
                        # the engine's own threads (a run's parallel calls) close their
                        # connection as they end: Django's are per thread
                        thread_ended=ReleasingStore(database_store()).close_thread_resources,
                        # no run holds a pooled connection while its tool waits
                        before_tool=release_connection,
                        # a gate's or the price table's read on a lost connection
                        store_faults=DATABASE_FAULTS)
