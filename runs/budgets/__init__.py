"""Budgets, the token and cost ledger, and approvals: the Django side of the engine's
pre-call gates (runs/durable/policies/gates.py). docs/budgets.md, docs/approvals.md."""
