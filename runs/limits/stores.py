"""Where the limits' state lives: Redis when REDIS_URL is set, else the database.

Both keep one small JSON document per limit and change it atomically with the
engine's algorithm (runs/durable/policies/limits.py), so every worker process of every host
sees one count:

  * Redis: an optimistic transaction (WATCH the key, read, decide, MULTI/SET/EXEC;
    another writer in between makes EXEC fail and the change is decided again).
  * the database: the limit's `LimitState` row, locked by an UPDATE before it is read
    (a row lock on PostgreSQL; SQLite's transactions here are IMMEDIATE, one writer).
"""

from __future__ import annotations

import functools
import json
import os
import threading

from django.conf import settings
from django.db import DatabaseError, IntegrityError, transaction
from django.db.models import F

from runs.durable.policies import limits as lim

from .models import LimitState


class OrmLimitStore:
    def update(self, name, change):
        try:
            return self._update(name, change)
        except DatabaseError as exc:
            raise lim.LimitStoreError(f"database: {exc}") from exc

    def _update(self, name, change):
        for _ in range(2):
            with transaction.atomic():
                if LimitState.objects.filter(name=name).update(version=F("version") + 1):
                    row = LimitState.objects.get(name=name)
                    state = row.state or lim.empty_state()
                    result = change(state)
                    LimitState.objects.filter(name=name).update(state=state)
                    return result
            try:  # the first use of this limit: its row, then the locked path above
                with transaction.atomic():
                    LimitState.objects.create(name=name, state=lim.empty_state())
            except IntegrityError:  # another worker made it first
                pass
        raise lim.LimitStoreError(f"the state row of limit {name} could not be made")


REDIS_ATTEMPTS = 50


class RedisLimitStore:
    def __init__(self, url: str, prefix: str):
        self.url = url
        self.prefix = prefix
        self._clients: dict[int, object] = {}
        self._turns: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()

    def key(self, name: str) -> str:
        return f"{self.prefix}:limit:{name}"

    def client(self):
        import redis

        pid = os.getpid()  # a client made before a fork is not the child's to use
        with self._lock:
            if pid not in self._clients:
                self._clients = {pid: redis.Redis.from_url(self.url, socket_timeout=5,
                                                           socket_connect_timeout=5)}
            return self._clients[pid]

    def update(self, name, change):
        import redis

        key = self.key(name)
        # A process's threads (hundreds of runs) take turns here, so that only processes
        # race on the key and an optimistic transaction rarely has to start over.
        with self._turn(name):
            return self._update(redis, key, name, change)

    def _turn(self, name: str) -> threading.Lock:
        with self._lock:  # per process: a lock held at a fork is never released in the child
            return self._turns.setdefault(f"{os.getpid()}:{name}", threading.Lock())

    def _update(self, redis, key, name, change):
        try:
            with self.client().pipeline() as pipe:
                for _ in range(REDIS_ATTEMPTS):
                    try:
                        pipe.watch(key)
                        raw = pipe.get(key)
                        state = json.loads(raw) if raw else lim.empty_state()
                        result = change(state)
                        pipe.multi()
                        pipe.set(key, json.dumps(state))
                        pipe.execute()
                        return result
                    except redis.WatchError:
                        continue
        except redis.RedisError as exc:
            raise lim.LimitStoreError(f"redis: {exc}") from exc
        raise lim.LimitStoreError(f"limit {name}: {REDIS_ATTEMPTS} writers in a row got there first")

    def reset(self, name: str) -> None:
        self.client().delete(self.key(name))


def redis_prefix() -> str:
    """Deployments (and CI's test streams) may share a Redis: the database's name is in
    the key, so two databases never share a limit's state."""
    return f"agentops:{settings.DATABASES['default']['NAME']}"


@functools.lru_cache(maxsize=4)
def _redis_store(url: str, prefix: str) -> RedisLimitStore:
    return RedisLimitStore(url, prefix)


def limit_store():
    """The process's store: one Redis connection pool however many configs are made."""
    if settings.REDIS_URL:
        return _redis_store(settings.REDIS_URL, redis_prefix())
    return OrmLimitStore()
