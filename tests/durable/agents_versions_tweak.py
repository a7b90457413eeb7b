"""The writer of tests/durable/agents_versions.py, version "1" still, in another module:
a code change nobody bumped the version for (its fingerprint differs)."""

from runs.durable import AgentRegistry, agent

from .agents_versions import Writer

REG_TWEAKED = AgentRegistry()


@agent("writer", version="1", registry=REG_TWEAKED)
class WriterTweaked(Writer):
    def before_post(self, ctx, unit):
        ctx.log("tweaked")
