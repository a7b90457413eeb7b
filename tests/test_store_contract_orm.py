"""The engine's contract suite (tests/durable/contract.py) on the ORM store, on
whichever database the suite runs against (SQLite or PostgreSQL)."""

import threading
from concurrent.futures import Future

import pytest
from django.db import connection

from runs.models import AuditEntry, RunEvent
from runs.store import OrmStore
from tests.durable.contract import StoreContract


@pytest.mark.django_db(transaction=True)
class TestOrmStore(StoreContract):
    @pytest.fixture
    def store(self, transactional_db):
        return OrmStore()

    @pytest.fixture
    def read_events(self, store):
        def read(run_id):
            return [(e.seq, e.kind, e.data) for e in RunEvent.objects.filter(run_id=run_id).order_by("seq")]
        return read

    @pytest.fixture
    def read_audit(self, store):
        def read(run_id):
            return list(AuditEntry.objects.filter(run_id=run_id).order_by("id"))
        return read

    def in_thread(self, fn) -> Future:
        future: Future = Future()

        def target():
            try:
                future.set_result(fn())
            except BaseException as exc:  # handed to the test through the future
                future.set_exception(exc)
            finally:
                connection.close()

        threading.Thread(target=target, daemon=True).start()
        return future
