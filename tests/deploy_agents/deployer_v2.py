"""Deploy 2: a compatible change (the same calls in the same order), version bumped."""

from runs.durable import agent

from .common import DeployerBase


@agent("deployer", version="2")
class Deployer(DeployerBase):
    """Writes a unit per step, and says so in its log."""

    def before_write(self, ctx, i):
        ctx.log(f"writing unit {i}")
