"""The adapters' tests' world: the records API in memory, a clock to move past leases."""

import time

import httpx
import pytest

from runs.durable.faults import faults
from tests import adapter_agents as agents


class Records:
    """The sandbox's records API as the tools see it: one record per idempotency key."""

    def __init__(self):
        self.by_key: dict[str, dict] = {}

    def post(self, url, *, json, headers, timeout):
        record = self.by_key.setdefault(headers["Idempotency-Key"],
                                        {"id": f"rec-{len(self.by_key) + 1}", **json})
        return httpx.Response(201, json=record, request=httpx.Request("POST", url))


class Clock:
    def __init__(self):
        self.offset = 0.0

    def time(self):
        return REAL_TIME() + self.offset


REAL_TIME = time.time


@pytest.fixture
def world(monkeypatch):
    records = Records()
    monkeypatch.setattr(agents, "POST", records.post)
    monkeypatch.setattr(faults, "directory", "")
    agents.JOURNAL.entries.clear()
    clock = Clock()
    monkeypatch.setattr(time, "time", clock.time)
    faults.disarm()
    yield type("World", (), {"records": records, "clock": clock})
    faults.disarm()
