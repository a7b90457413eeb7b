"""One statement on Django's own psycopg connection, the way PgStore sends its commits,
launches and claims (runs/storage/pg.py): server-side bound, prepared when asked, through
one cursor per connection, its first row read back as a dict by column name."""

from __future__ import annotations

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections

ONLY_WHEN_ASKED = 1 << 30  # a prepare_threshold that no statement count reaches


def execute(sql: str, params: list, *, prepare: bool) -> dict | None:
    """Run `sql` on Django's own connection, server-side bound, and prepared if `prepare`;
    its first row, as a dict by column name.

    Django binds client-side and opens its connections with prepared statements
    switched off (prepare_threshold=None, for transaction-mode poolers), which makes
    psycopg ignore even an explicit prepare=True: the statement was parsed and planned
    on every commit, half of its cost (1.4 ms against 0.7 ms, measured). A threshold
    no statement reaches turns preparing on for the statement asked for here, and only
    while it is sent: with a threshold set, psycopg counts every statement of the
    connection towards it, and Django's, their values written into the text, are each
    a new one. It kept the last 100 texts of each connection, the lease keeper's
    renewal of 300 runs among them at 10 KiB each: a worker holding 300 runs grew by
    4 MiB in its first minute (tracemalloc), which tests/cluster/test_tree_memory.py
    counted as the waiting runs'. Unprepared, the statement is sent unnamed, which a
    pooler in transaction mode passes on as it is.
    """
    db = connections[DEFAULT_DB_ALIAS]  # the proxy `connection` looks it up on every use
    db.ensure_connection()
    conn = db.connection
    with db.wrap_database_errors:
        cursor = _kept_cursor(conn)
        if prepare and conn.prepare_threshold is None:
            conn.prepare_threshold = ONLY_WHEN_ASKED
            try:
                cursor.execute(sql, params, prepare=True)
            finally:
                conn.prepare_threshold = None
        else:
            cursor.execute(sql, params, prepare=prepare)
        row = cursor.fetchone()
        return None if row is None else dict(zip(_column_names(sql, cursor), row))


KEPT_CURSOR = "agentops_kept_cursor"  # our own attribute on a psycopg connection


def _kept_cursor(conn: psycopg.Connection) -> psycopg.Cursor:
    """The cursor kept on `conn`, made once per connection: making one per statement
    (its adapters and row maker) was a fifth of the client's work of a commit (113 against
    88 us of CPU, measured).

    Kept on the connection, not per thread: a worker's run threads (hundreds) take
    whichever of its few pooled connections is free, so a cursor per thread was made
    again on most calls, and each thread kept its own, with the last statement's values
    and result, while its run waited on a tool (~5 KiB of Python objects per waiting run,
    tracemalloc, besides libpq's result). A connection is used by one thread at a time
    (the pool's, or a thread's own in Django); the cursor goes with its connection, as
    garbage, when Django or the pool drops it. Not in a dict keyed by connection: the
    cursor refers to its connection, so such a dict would keep every connection alive."""
    cursor = getattr(conn, KEPT_CURSOR, None)
    if cursor is None or cursor.closed:
        cursor = psycopg.Cursor(conn)
        setattr(conn, KEPT_CURSOR, cursor)
    return cursor


_COLUMN_NAMES: dict[str, tuple[str, ...]] = {}  # by statement text: the few shapes recur


def _column_names(sql: str, cursor: psycopg.Cursor) -> tuple[str, ...]:
    """The result's column names of `sql`, read once per statement text: a dict row
    factory reads them from every result (12 of 84 us of CPU per statement, measured)."""
    names = _COLUMN_NAMES.get(sql)
    if names is None:
        if len(_COLUMN_NAMES) >= 1024:  # many shapes (large parallel groups): start over
            _COLUMN_NAMES.clear()
        names = _COLUMN_NAMES[sql] = tuple(column.name for column in cursor.description)
    return names
