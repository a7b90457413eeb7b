"""The metrics, in one place (docs/observability.md lists them with their meaning).

Counted where it happens: worker processes (claims, effects, waits, endings) and
Daphne (launches, operator actions, websocket viewers). With
PROMETHEUS_MULTIPROC_DIR set (bin/serve sets it), every process writes its values
to files there and /metrics adds them up; without it, /metrics shows only the
serving process's own. What the database already knows (runs by status, due runs,
stalls, in-doubt effects, live processes) is read at scrape time (collector.py).
"""

from __future__ import annotations

import os

_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
if _dir:
    # prometheus_client opens its files there when a metric is made: a fresh
    # deployment's directory may not exist yet.
    os.makedirs(_dir, exist_ok=True)

from prometheus_client import Counter, Gauge, Histogram  # noqa: E402

MULTIPROCESS = bool(_dir)

# Latencies from a millisecond (a no-op call on PostgreSQL) to two minutes (a model call).
SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
BYTES = (256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216)

# --- runs -------------------------------------------------------------------------------
LAUNCHES = Counter("agentops_runs_launched", "Runs launched", ["agent"])
SESSIONS = Counter("agentops_run_sessions", "Claims of a run that ended, by how they ended "
                   "(succeeded, failed, yielded, waiting, handed_off, fenced...)",
                   ["agent", "outcome"])
CLAIMS = Counter("agentops_claims", "Runs claimed by a worker; kind=takeover: "
                 "from a dead or lost worker's lease", ["agent", "kind"])
TAKEOVERS = Counter("agentops_lease_takeovers", "Claims that took a run over from a worker "
                    "that died or lost its lease", ["agent"])
CLAIM_SECONDS = Histogram("agentops_claim_seconds", "Time of a claim and the resume's reads",
                          buckets=SECONDS)
ATTENTION = Counter("agentops_attention", "Runs stopped for an operator, by reason",
                    ["agent", "kind"])
OPERATOR_ACTIONS = Counter("agentops_operator_actions", "Operator actions committed",
                           ["action"])

# --- effects ------------------------------------------------------------------------------
EFFECT_SECONDS = Histogram("agentops_effect_seconds", "Tool calls that really happened, every "
                           "attempt included, by outcome (done, error, retrying, in_doubt, fenced, stopped)",
                           ["tool", "outcome"], buckets=SECONDS)
_effect_seconds: dict = {}


def effect_seconds(tool: str, outcome: str):
    """EFFECT_SECONDS's child for these labels. Kept by label: `labels()` takes a lock and
    checks its arguments at every call, a cost on each effect (bench/effect_overhead.py);
    a child stays valid across a fork (multiprocess mode writes to the calling pid's file)."""
    child = _effect_seconds.get((tool, outcome))
    if child is None:
        child = _effect_seconds[tool, outcome] = EFFECT_SECONDS.labels(tool, outcome)
    return child


REPLAYED = Counter("agentops_effects_replayed", "Calls answered from the log on a replay",
                   ["tool"])
RETRIES = Counter("agentops_effect_retries", "Failed attempts that will be tried again",
                  ["tool"])
DURABLE_WAITS = Counter("agentops_durable_waits", "Runs that gave their worker up to wait "
                        "(retry, sleep, input)", ["agent", "kind"])
CHECKPOINT_BYTES = Histogram("agentops_checkpoint_bytes", "Size of each checkpoint written "
                             "(a patch when it is one)", ["agent"], buckets=BYTES)

# --- live pages ------------------------------------------------------------------------------
VIEWERS = Gauge("agentops_websocket_viewers", "Open websockets, by socket",
                ["socket"], multiprocess_mode="livesum")

# --- budgets -----------------------------------------------------------------------------------
# A metered call's usage (runs/durable/policies/metering.py), counted when its outcome is logged:
# a replay returns the logged result and is never counted again, so these add up to the
# ledger's totals (runs/budgets/). kind: input (prompt) or output (completion) tokens.
TOKENS = Counter("agentops_tokens", "Model tokens of logged calls", ["agent", "model", "kind"])
COST = Counter("agentops_cost_usd", "Cost in US dollars of logged model calls, by the price table",
               ["agent", "model"])
