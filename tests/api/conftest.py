"""Fixtures of the API tests: tokens of each scope, clients for each kind of caller."""

from __future__ import annotations

import pytest
from django.test import Client

import tests.workload_agents  # noqa: F401  (registers ticker, ask, steps...)
from runs.api import tokens
from tests.web.conftest import browser, browser_context, client_for  # noqa: F401


@pytest.fixture
def make_token(users):
    def make(name: str, *scopes: str, days: int = 30) -> str:
        return tokens.create(users[name], name=f"{name}-{'-'.join(scopes)}", scopes=scopes,
                             days=days, max_days=365)[1]
    return make


@pytest.fixture
def bearer(make_token):
    """bearer("alice", "read", "launch"): a test client sending a fresh token of alice's."""
    def make(name: str, *scopes: str) -> Client:
        return Client(HTTP_AUTHORIZATION=f"Bearer {make_token(name, *scopes)}")
    return make
