"""The worker's limit gate: the engine's LimitGate on the deployment's store and rules,
waking held runs through the database (runs/limits/wakes.py)."""

from runs.durable.policies.limits import LimitGate

from . import config
from .stores import limit_store
from .wakes import wake_held_runs


def limit_gate() -> LimitGate:
    return LimitGate(limit_store(), config.rule, wake=wake_held_runs)
