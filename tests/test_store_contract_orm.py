"""The engine's contract suite (tests/durable/contract.py) on OrmStore, the store of
every database but PostgreSQL: collected on SQLite (tests/conftest.py)."""

import pytest

from runs.storage.orm import OrmStore
from tests.durable.contract_children import ChildrenContract
from tests.durable.contract_parallel import ParallelContract
from tests.durable.contract_versions import VersionsContract
from tests.support.store_contract import DatabaseStoreContract


@pytest.mark.sqlite  # OrmStore is SQLite's store (PgStore's contract: test_store_contract_pg)
@pytest.mark.django_db(transaction=True)
class TestOrmStore(ChildrenContract, ParallelContract, VersionsContract, DatabaseStoreContract):
    @pytest.fixture
    def store(self, transactional_db):
        return OrmStore()
