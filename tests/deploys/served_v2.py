"""The writer of deploy v2 (a compatible change) as the agents of a process started from
that deploy: AGENTOPS_AGENT_MODULES=tests.deploys.served_v2. Never imported by the test
process, whose own agents stay as they are."""

from runs.durable import agent
from tests.durable.agents_versions import WriterV2

agent("writer", version="2")(WriterV2)
