"""The contract suite on the in-memory store: the reference semantics."""

import pytest

from runs.durable.memory import MemoryStore

from .contract import StoreContract
from .contract_children import ChildrenContract
from .contract_parallel import ParallelContract
from .contract_versions import VersionsContract


class TestMemoryStore(ChildrenContract, ParallelContract, VersionsContract, StoreContract):
    @pytest.fixture
    def store(self):
        return MemoryStore()

    @pytest.fixture
    def read_events(self, store):
        def read(run_id):
            with store._lock:
                return list(store.events[run_id])
        return read

    @pytest.fixture
    def read_audit(self, store):
        def read(run_id):
            with store._lock:
                return list(store.audit[run_id])
        return read
