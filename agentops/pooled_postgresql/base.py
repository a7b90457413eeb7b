"""PostgreSQL for the web processes' connection pool (AGENTOPS_DB_POOL=1): a connection
is checked as it leaves the pool, and the first dead one found has every idle one
checked at once.

A failover, a database restart or pg_terminate_backend kills every connection of the
pool together. psycopg_pool's own check (what CONN_HEALTH_CHECKS turns on) finds them
one at a time, as it is about to hand each out, and sleeps after each one it finds
dead: 1 s, then 2, 4, 8, up to the pool's timeout. A request that met the pool's dead
connections in a row waited seconds after the database answered again, or got a 503
(seen: a page load of 1.1 s after pg_terminate_backend with two idle connections, and
longer with more). Here the first dead connection costs one `pool.check()` (a round
trip for each idle connection, which ends at once for a dead one) and one new
connection: the same answer as the worker's (runs/worker/db.py,
`_drop_dead_pooled_connections`), reached from Django's side of the pool, which
offers no hook into the pool's check.
"""

from __future__ import annotations

import psycopg
from django.db.backends.postgresql import base


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        connection = super().get_new_connection(conn_params)
        pool = self.pool
        if pool is None:
            return connection
        try:
            pool.check_connection(connection)
        except psycopg.Error:
            # Dead: the pool sees it is broken and replaces it. The others died with it.
            pool.putconn(connection)
            pool.check()
            # Checked just now or new, so a fault here is a fault now: the request's 503.
            connection = super().get_new_connection(conn_params)
            try:
                pool.check_connection(connection)
            except psycopg.Error:
                pool.putconn(connection)
                raise
        return connection
