"""This test process's connections as a worker process's: the pool of runs/worker/db.py,
as a worker makes it after its fork, then closed and the settings put back."""

import contextlib

from django.db import connection, connections

from runs.worker import db as worker_db


@contextlib.contextmanager
def worker_pool(monkeypatch, settings, size: int, **agentops):
    settings.AGENTOPS = {**settings.AGENTOPS, "WORKER_DB_POOL_SIZE": size, **agentops}
    db = connections.settings["default"]
    for key in ("OPTIONS", "CONN_MAX_AGE", "CONN_HEALTH_CHECKS"):
        monkeypatch.setitem(db, key, db[key])
    inherited = len(worker_db._inherited)
    # The process-wide state it sets (lending wrappers to threads) ends with the block.
    monkeypatch.setattr(worker_db, "_pooled", dict(worker_db._pooled))
    monkeypatch.setattr(worker_db, "_lendable", dict(worker_db._lendable))
    monkeypatch.setattr(worker_db, "_idle_wrappers", type(worker_db._idle_wrappers)())
    monkeypatch.setattr(worker_db, "_lendable_wrappers", type(worker_db._lendable_wrappers)())
    assert worker_db.use_pool_in_this_process()
    try:
        yield
    finally:
        connection.close()
        connections["default"].close_pool()
        while len(worker_db._inherited) > inherited:  # the connection it set aside
            worker_db._inherited.pop().close()
