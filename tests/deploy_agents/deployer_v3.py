"""Deploy 3: an incompatible change: each unit is announced by a record of its own
before it is written, a call the histories of deploys 1 and 2 do not have."""

from runs.durable import agent
from tests.workload_agents import post_record

from .common import DeployerBase


@agent("deployer", version="3")
class Deployer(DeployerBase):
    """Announces each unit, then writes it."""

    def before_write(self, ctx, i):
        ctx.call(post_record, f"{ctx.run_id}-announce-{i}", i)
