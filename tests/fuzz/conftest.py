"""Bad input, tried on purpose: helpers shared by the fuzz tests."""

import pytest
from django.test import Client

from runs.models import AuditEntry, Checkpoint, Effect, Run, RunEvent


def snapshot() -> dict:
    """Row counts and the state of every run: what bad input must leave alone."""
    return {
        "counts": [m.objects.count() for m in (Run, RunEvent, Effect, Checkpoint, AuditEntry)],
        "runs": sorted(Run.objects.values_list("id", "status", "event_seq", "epoch")),
    }


@pytest.fixture
def client_for(users):
    def make(name: str, **kwargs) -> Client:
        client = Client(**kwargs)
        client.force_login(users[name])
        return client
    return make
