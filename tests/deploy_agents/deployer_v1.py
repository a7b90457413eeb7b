"""Deploy 1 of the `deployer` agent."""

from runs.durable import agent

from .common import DeployerBase


@agent("deployer", version="1")
class Deployer(DeployerBase):
    """Writes a unit per step."""
