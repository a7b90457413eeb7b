"""The gate contract (tests/durable/gate_contract.py) on the store production builds for
the database (runs.storage.database_store: OrmStore on SQLite, PgStore on PostgreSQL)
with its approval book (runs/budgets/book.py). CI's two passes run both; the in-memory
store runs it in tests/durable/test_gates_memory.py."""

import pytest
from django.utils import timezone

from runs.budgets.book import OrmApprovalBook
from runs.budgets.models import Approval
from runs.durable.policies import approvals as a
from runs.models import AuditEntry, RunEvent
from runs.storage import database_store
from runs.storage.orm import OrmStore
from runs.storage.pg import PgStore
from tests.conftest import ON_POSTGRESQL
from tests.durable.gate_contract import GateContract


@pytest.mark.django_db(transaction=True)
class TestGatesOnTheDatabaseStore(GateContract):
    @pytest.fixture
    def store(self, transactional_db):
        store = database_store()
        assert type(store) is (PgStore if ON_POSTGRESQL else OrmStore)
        return store

    @pytest.fixture
    def read_events(self, store):
        def read(run_id):
            return [(e.seq, e.kind, e.data)
                    for e in RunEvent.objects.filter(run_id=run_id).order_by("seq")]
        return read

    @pytest.fixture
    def read_audit(self, store):
        def read(run_id):
            return list(AuditEntry.objects.filter(run_id=run_id).order_by("id"))
        return read

    @pytest.fixture
    def book(self):
        return OrmApprovalBook()

    @pytest.fixture
    def decide(self):
        def answer(request_id, approve):
            updated = Approval.objects.filter(pk=request_id, status=a.PENDING).update(
                status=a.APPROVED if approve else a.DENIED, decided_by="charlie",
                decided_at=timezone.now())
            assert updated == 1
        return answer
