"""The budget contract (tests/durable/budget_contract.py: a run's budget against its
parallel calls) on the store production builds for the database (OrmStore on SQLite,
PgStore on PostgreSQL); the in-memory store runs it in tests/durable."""

import pytest

from runs.storage import database_store
from tests.durable.budget_contract import BudgetContract


@pytest.mark.django_db(transaction=True)
class TestBudgetsOnTheDatabaseStore(BudgetContract):
    @pytest.fixture
    def store(self, transactional_db):
        return database_store()

    def thread_ended(self, store) -> None:
        store.close_thread_resources()
