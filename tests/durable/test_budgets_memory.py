"""The budget contract (tests/durable/budget_contract.py) on the in-memory store."""

import pytest

from runs.durable.memory import MemoryStore

from .budget_contract import BudgetContract


class TestBudgetsOnMemoryStore(BudgetContract):
    @pytest.fixture
    def store(self):
        return MemoryStore()
