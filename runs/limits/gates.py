"""The worker's limit gate: the engine's LimitGate on the deployment's store and rules."""

from runs.durable.limits import LimitGate

from . import config
from .stores import limit_store


def limit_gate() -> LimitGate:
    return LimitGate(limit_store(), config.rule)
