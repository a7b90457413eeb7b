"""Storage: the Django implementations of the engine's store protocol and checkpoint retention.

`database_store()` is how the rest of the project gets a store: PgStore on PostgreSQL
(its frequent writes are single statements), OrmStore on any other database. The
choice is made here, once, when the store is built; no method asks which database
it runs on.
"""

from __future__ import annotations

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections


def database_store(notify=None):
    from runs.storage.orm import OrmStore
    from runs.storage.pg import PgStore

    if _vendor() != "postgresql":
        return OrmStore(notify=notify)
    # Behind a pooler in transaction mode a prepared statement does not outlive its
    # transaction: PgStore sends its statements unprepared (docs/ARCHITECTURE.md).
    return PgStore(notify=notify, prepare=not settings.AGENTOPS["DB_TRANSACTION_POOLING"])


_vendors: dict[str, str] = {}


def _vendor() -> str:
    """The default database's vendor, asked once per engine: asking a thread's connection
    makes the thread a Django wrapper (runs/worker/db.py: a worker's run threads hold none)."""
    engine = connections.settings[DEFAULT_DB_ALIAS]["ENGINE"]
    if engine not in _vendors:
        _vendors[engine] = connections[DEFAULT_DB_ALIAS].vendor
    return _vendors[engine]
