"""The limits' stores under test: the database (whatever DATABASE_URL says), and Redis
only when REDIS_URL is set (in CI a skipped test fails, so the Redis case is not even
collected without it), plus the engine's in-memory store."""

import os
import uuid

import pytest

from runs.durable.policies.limits import MemoryLimitStore

# The database's store is used from threads of their own connections (the racing test):
# it needs committed rows, so its cases are transactional; the others touch no database.
BACKENDS = ["memory", pytest.param("database", marks=pytest.mark.django_db(transaction=True))
            ] + (["redis"] if os.environ.get("REDIS_URL") else [])


def make_store(kind, request):
    if kind == "memory":
        return MemoryLimitStore()
    if kind == "database":
        from runs.limits.stores import OrmLimitStore

        return OrmLimitStore()
    from runs.limits.stores import RedisLimitStore

    store = RedisLimitStore(os.environ["REDIS_URL"], f"agentops-test-{uuid.uuid4().hex}")
    request.addfinalizer(lambda: [store.client().delete(k)
                                  for k in store.client().keys(f"{store.prefix}:*")])
    return store


@pytest.fixture(params=BACKENDS)
def limit_store(request):
    return make_store(request.param, request)
