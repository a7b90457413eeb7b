"""The writer of deploy v3 (an incompatible change: an audit call before each post) as
the agents of a process started from that deploy:
AGENTOPS_AGENT_MODULES=tests.deploys.served_v3. Never imported by the test process."""

from runs.durable import agent
from tests.durable.agents_versions import WriterV3

agent("writer", version="3")(WriterV3)
