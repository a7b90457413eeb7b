"""Which limits a worker applies: the settings' AGENTOPS["LIMITS"], the admin's rows
winning, and the built-in model tool naming "llm"."""

import pytest
from django.core.exceptions import ValidationError

from builtin_agents.tools.llm import chat_completion
from runs.budgets.gates import worker_gates
from runs.durable.policies.limits import LimitGate, LimitRule
from runs.limits import config
from runs.limits.models import Limit
from runs.limits.stores import OrmLimitStore, RedisLimitStore, limit_store

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_rules():
    config.forget()
    yield
    config.forget()


@pytest.fixture
def settings_limits(settings):
    settings.AGENTOPS = {**settings.AGENTOPS,
                         "LIMITS": {"llm": {"requests": 60, "per": 60},
                                    "search": {"concurrency": 2}}}


def test_the_built_in_model_tool_counts_against_llm_and_no_limit_is_configured_by_default():
    assert chat_completion.limit == "llm"
    assert config.rule("llm") is None  # so it behaves as it always did
    assert isinstance(worker_gates()[-1], LimitGate)  # last: after budgets and approvals


def test_the_settings_define_limits(settings_limits):
    assert config.rule("llm") == LimitRule("llm", requests=60, per=60.0)
    assert config.rule("llm").describe() == "60 requests a minute"
    assert config.rule("search").concurrency == 2


def test_a_row_in_the_admin_wins_and_a_disabled_row_turns_a_limit_off(settings_limits):
    Limit.objects.create(name="llm", requests=10, per_seconds=2)
    Limit.objects.create(name="search", concurrency=5, enabled=False)
    Limit.objects.create(name="crm", requests=5)
    rules = config.rules()
    assert rules["llm"].describe() == "10 requests per 2 s"
    assert "search" not in rules
    assert rules["crm"].describe() == "5 requests a minute"


def test_the_admin_refuses_a_limit_that_cannot_be_applied():
    with pytest.raises(ValidationError, match="say requests"):
        Limit(name="llm").full_clean()


def test_redis_keeps_the_state_when_configured_else_the_database(settings):
    settings.REDIS_URL = ""
    assert isinstance(limit_store(), OrmLimitStore)
    settings.REDIS_URL = "redis://127.0.0.1:6379/0"
    store = limit_store()
    assert isinstance(store, RedisLimitStore)
    assert settings.DATABASES["default"]["NAME"] in store.key("llm")


def test_with_the_database_away_the_rules_last_read_still_apply(settings_limits, monkeypatch):
    from django.db import DatabaseError

    Limit.objects.create(name="llm", requests=10, per_seconds=2)
    assert config.rule("llm").requests == 10
    config.forget()

    def away(*args, **kwargs):
        raise DatabaseError("the server closed the connection")

    monkeypatch.setattr(Limit.objects, "all", away)
    assert config.rule("llm").requests == 10  # not the settings' 60, and no error
