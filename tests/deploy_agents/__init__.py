"""One agent, `deployer`, in three deploys of its code (tests/crash/test_deploys.py): each
module is what a worker tree of that deploy loads (AGENTOPS_AGENT_MODULES)."""
