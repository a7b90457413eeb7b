"""A writer checkpointed only at its end (tests/crash/test_deploys.py): what it did since
a takeover is in its log of effects, not in its count of completed steps."""

from runs.durable import agent

from .common import DeployerBase


@agent("unsaved", version="1")
class Unsaved(DeployerBase):
    """Writes a unit per step; no checkpoint before its last step."""

    checkpoint_every = 1000
