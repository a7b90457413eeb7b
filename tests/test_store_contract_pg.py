"""The engine's contract suite (tests/durable/contract.py) on PgStore, the store of
PostgreSQL: collected when the suite runs on PostgreSQL (tests/conftest.py)."""

import pytest
from django.db import connection

from runs.storage import database_store
from runs.storage.pg import PgStore
from tests.durable.contract_children import ChildrenContract
from tests.durable.contract_parallel import ParallelContract
from tests.durable.contract_versions import VersionsContract
from tests.support.store_contract import DatabaseStoreContract


@pytest.mark.django_db(transaction=True)
class TestPgStore(ChildrenContract, ParallelContract, VersionsContract, DatabaseStoreContract):
    @pytest.fixture
    def store(self, transactional_db):
        assert connection.vendor == "postgresql"
        store = database_store()
        assert type(store) is PgStore  # what production builds on this database
        return store
