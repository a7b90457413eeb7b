"""The gate contract (tests/durable/gate_contract.py) on the in-memory store and book."""

import pytest

from runs.durable.memory import MemoryStore
from runs.durable.policies.approvals import MemoryApprovalBook

from .gate_contract import GateContract


class TestGatesOnMemoryStore(GateContract):
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

    @pytest.fixture
    def book(self):
        return MemoryApprovalBook()

    @pytest.fixture
    def decide(self, book):
        def answer(request_id, approve):
            book.decide(request_id, approve=approve, by="charlie")
        return answer
