"""The contract suite's fixtures for a database store (tests/durable/contract.py): the
events and audit entries read from their tables, and a thread's own connection closed
when it ends. tests/test_store_contract_orm.py and test_store_contract_pg.py subclass it."""

import threading
from concurrent.futures import Future

import pytest
from django.db import connection

from runs.models import AuditEntry, RunEvent
from tests.durable.contract import StoreContract


class DatabaseStoreContract(StoreContract):
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
