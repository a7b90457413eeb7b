"""Approval rules: the condition language parses comparisons and nothing else, and a
condition that cannot be evaluated on a call holds (approvals fail closed)."""

import pytest

from runs.durable.errors import InputValidationError
from runs.durable.policies.approvals import ApprovalRule, holds, parse_predicate


@pytest.mark.parametrize("when,arguments,inputs,expected", [
    ("amount > 1000", {"amount": 5000}, {}, True),
    ("amount > 1000", {"amount": 10}, {}, False),
    ("amount > 1000 and to != 'me'", {"amount": 5000, "to": "me"}, {}, False),
    ("0 < amount <= 10", {"amount": 10}, {}, True),
    ("to in ['bob', 'eve']", {"to": "eve"}, {}, True),
    ("not inputs.dry_run", {}, {"dry_run": True}, False),
    ("message['event'] == 'migration.cutover'", {"message": {"event": "migration.cutover"}},
     {}, True),
    ("'approve_notes' in inputs and inputs.approve_notes", {}, {}, False),
    # cannot be evaluated on this call: it needs approval
    ("amount > 1000", {}, {}, True),
    ("amount > 1000", {"amount": "lots"}, {}, True),
    ("inputs.__class__", {}, {}, True),
])
def test_conditions(when, arguments, inputs, expected):
    assert holds(when, arguments, inputs) is expected


@pytest.mark.parametrize("when", ["__import__('os').system('true')", "amount + 1 > 2",
                                  "[x for x in inputs]", "lambda: 1", "amount >", "a" * 501,
                                  "(yield)", "f'{amount}'"])
def test_anything_but_a_comparison_is_refused(when):
    with pytest.raises(InputValidationError):
        parse_predicate(when)


@pytest.mark.parametrize("fields", [
    {"tool": ""}, {"tool": "t", "approvers": "admins"}, {"tool": "t", "approvers": "group:"},
    {"tool": "t", "fallback": "retry"}, {"tool": "t", "timeout": 0},
    {"tool": "t", "when": "open('x')"},
])
def test_a_rule_that_could_not_apply_is_refused(fields):
    with pytest.raises(InputValidationError):
        ApprovalRule(**fields)
