"""Whatever decides whether a call may go: the pre-call gates and their dispatch's
decisions (`gates.py`), a run's budget and its ledger (`budget.py`, `metering.py`),
approvals (`approvals.py`) and shared limits per tool or provider (`limits.py`,
`limit_queue.py`). The engine's core asks them through runs/durable/gatekeeper.py; they
import nothing of the core but its records, errors and the registry's Tool.
"""
