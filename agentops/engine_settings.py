"""agentops' own settings: the worker tree, the engine (AGENTOPS) and webhook deliveries,
each read from its environment variable with its default (README's table, docs/).
agentops/settings.py imports them."""

import json
import os

from agentops.environment import (
    DB_POOL_RECONNECT_SECONDS,
    DB_TRANSACTION_POOLING,
    IS_POSTGRES,
    LOCAL,
    env_bool,
    env_float,
    env_int,
    env_list,
    env_retention_days,
)

# --- the worker tree (runs/worker/tree.py, docs/workers.md) -------------------
# Worker processes per host: one per core (at least two). Concurrency for I/O comes from
# the runs each process holds in threads (AGENTOPS_RUNS_PER_WORKER), not from processes.
AGENTOPS_WORKERS = env_int("AGENTOPS_WORKERS", max(2, os.cpu_count() or 2))

# --- agentops engine ------------------------------------------------------
AGENTOPS = {
    "LEASE_SECONDS": env_float("AGENTOPS_LEASE_SECONDS", 4.0),
    "TIME_SLICE_SECONDS": env_float("AGENTOPS_TIME_SLICE", 5.0),
    # the slice of a run claimed while no other run waits for a slot (runs/worker/execute.py)
    "UNCONTENDED_SLICE_SECONDS": env_float("AGENTOPS_UNCONTENDED_SLICE", 20.0),
    # the tree's duties (kept by its worker 1) this often (runs/worker/sweep.py)
    "SWEEP_INTERVAL": env_float("AGENTOPS_SWEEP_INTERVAL", 0.5),
    # a worker's free slots look for due runs this often: a launch waits for it
    "CLAIM_POLL_SECONDS": env_float("AGENTOPS_CLAIM_POLL", 0.2),
    # a worker (or the main) stopped (SIGSTOP) this long is damage: the tree ends
    "STOPPED_SECONDS": env_float("AGENTOPS_STOPPED_SECONDS", 0.5),
    # the heartbeat's and the Workers page's name for this host's tree
    "CLUSTER_NAME": os.environ.get("AGENTOPS_CLUSTER_NAME", "agentops"),
    "CRASH_LOOP_LIMIT": env_int("AGENTOPS_CRASH_LOOP_LIMIT", 3),
    "DB_TRANSACTION_POOLING": DB_TRANSACTION_POOLING,
    # Runs one worker process holds at once, each in a thread, so that steps that wait
    # on I/O (model calls, HTTP) overlap (runs/worker/execute.py). They share a pool of
    # WORKER_DB_POOL_SIZE connections per process on PostgreSQL (runs/worker/db.py), so
    # 1,000 runs take ~20 connections. SQLite serialises writers: a small number.
    # The price: one SIGKILL crashes every run of the process at once, which counts
    # towards each run's crash-loop guard. 1 = one run per process, no threads.
    "RUNS_PER_WORKER": env_int("AGENTOPS_RUNS_PER_WORKER", 500 if IS_POSTGRES else 16),
    "WORKER_DB_POOL_SIZE": env_int("AGENTOPS_WORKER_DB_POOL", 10),
    # how long a run's thread waits for a pooled connection before its step fails
    "WORKER_DB_POOL_TIMEOUT": env_float("AGENTOPS_WORKER_DB_POOL_TIMEOUT", 30.0),
    "DB_POOL_RECONNECT_SECONDS": DB_POOL_RECONNECT_SECONDS,
    # how long a stopping tree waits for its workers to hand their runs back, then kills them
    "SHUTDOWN_GRACE_SECONDS": env_float("AGENTOPS_SHUTDOWN_GRACE", 20.0),
    # checkpoint retention: the latest N per branch of ended runs, after a grace period,
    # applied this often by each tree's duties (runs/worker/sweep.py)
    "RETENTION_INTERVAL_SECONDS": env_float("AGENTOPS_RETENTION_INTERVAL", 3600.0),
    "RETENTION_KEEP_PER_BRANCH": env_int("AGENTOPS_RETENTION_KEEP", 3),
    "RETENTION_GRACE_HOURS": env_float("AGENTOPS_RETENTION_GRACE_HOURS", 24.0),
    # event and effect retention (runs/storage/event_retention.py, docs/retention.md):
    # an ended run's events and effects are deleted this many days after it ended, but
    # its status events, its metered effects and those an operator acted on; 30 days,
    # the window of most hosted job and CI services' logs. 0 or "off": kept for ever.
    "EVENT_RETENTION_DAYS": env_retention_days("AGENTOPS_EVENT_RETENTION_DAYS", 30.0),
    # Expire at once the lease of a dead worker process on this host (else: wait
    # for the lease to run out, as for a worker on another host).
    "DETECT_DEAD_LOCAL_WORKERS": env_bool("AGENTOPS_DETECT_DEAD_LOCAL_WORKERS", True),
    # When a queued or running run shows as stalled (runs/worker/stalls.py, docs/stalls.md):
    # queued and unclaimed this long; silent this long (an agent's expected_cadence
    # overrides it). A run whose lease ran out is stalled one lease period later.
    "STALL_UNCLAIMED_SECONDS": env_float("AGENTOPS_STALL_UNCLAIMED", 60.0),
    "EXPECTED_CADENCE_SECONDS": env_float("AGENTOPS_EXPECTED_CADENCE", 300.0),
    "AGENT_MODULES": env_list("AGENTOPS_AGENT_MODULES"),
    "FAULTS_DIR": os.environ.get("AGENTOPS_FAULTS_DIR", ""),
    "LIVE_POLL_SECONDS": env_float("AGENTOPS_LIVE_POLL", 0.5),
    # The operator pages poll this often only while their websocket is down (docs/operator-live.md).
    "OPS_POLL_SECONDS": env_float("AGENTOPS_OPS_POLL", 3.0),
    "MAX_INPUT_BYTES": env_int("AGENTOPS_MAX_INPUT_BYTES", 256 * 1024),
    # the sandbox app's URLs (the outside world of the built-in agents): local mode only,
    # unless asked for; `manage.py sandbox reset|bump-generation` work either way
    "SANDBOX": env_bool("AGENTOPS_SANDBOX", LOCAL),
    "SANDBOX_URL": os.environ.get("AGENTOPS_SANDBOX_URL", "http://127.0.0.1:8000/sandbox"),
    "LLM_BASE_URL": os.environ.get("AGENTOPS_LLM_BASE_URL", ""),
    "LLM_MODEL": os.environ.get("AGENTOPS_LLM_MODEL", "scripted"),
    "LLM_API_KEY": os.environ.get("AGENTOPS_LLM_API_KEY", ""),
    # The built-in HTTP and LLM tools' retry policy (docs/retries.md): transient
    # errors are retried for this long, with waits growing up to the maximum.
    "TOOL_RETRY_FOR_SECONDS": env_float("AGENTOPS_TOOL_RETRY_FOR", 3600.0),
    "TOOL_RETRY_MAX_INTERVAL": env_float("AGENTOPS_TOOL_RETRY_MAX_INTERVAL", 30.0),
    # The HTTP API (docs/api.md): how long an Idempotency-Key holds its run, the event
    # stream's heartbeat (a comment line, so proxies keep the connection), and the
    # longest a token may live.
    "API_IDEMPOTENCY_HOURS": env_float("AGENTOPS_API_IDEMPOTENCY_HOURS", 48.0),
    "API_SSE_HEARTBEAT_SECONDS": env_float("AGENTOPS_API_SSE_HEARTBEAT", 15.0),
    "API_TOKEN_MAX_DAYS": env_int("AGENTOPS_API_TOKEN_MAX_DAYS", 365),
    # Observability (docs/observability.md). /metrics answers a bearer token or an address
    # in the allow-list (IPs or CIDR networks); with neither it does not exist (404).
    "METRICS": env_bool("AGENTOPS_METRICS", True),
    "METRICS_TOKEN": os.environ.get("AGENTOPS_METRICS_TOKEN", ""),
    "METRICS_ALLOW": env_list("AGENTOPS_METRICS_ALLOW"),
    # The price table (docs/budgets.md): dollars per million tokens by model, as JSON
    # {"model": {"prompt": p, "completion": c}}; rows in the admin's price table win.
    # The sandbox's scripted model is priced like a mid-range hosted model.
    "MODEL_PRICES": json.loads(os.environ.get("AGENTOPS_MODEL_PRICES") or "null")
    or {"scripted": {"prompt": 2.5, "completion": 10.0}},
    # Shared limits per tool or provider (docs/limits.md), as JSON {"llm": {"requests": 60,
    # "per": 60, "concurrency": 8, "tokens": 200000}}; rows in the admin's Limits win.
    # None by default: a tool naming a limit that is not configured is not limited.
    "LIMITS": json.loads(os.environ.get("AGENTOPS_LIMITS") or "null") or {},
    # the most a run's owner may set its budget to, in dollars, unless their own quota says
    "OWNER_RUN_BUDGET_LIMIT": env_float("AGENTOPS_OWNER_RUN_BUDGET_LIMIT", 10.0),
}

# --- webhooks (docs/webhooks.md) ----------------------------------------------------------
# Deliveries to a private, loopback or link-local address are refused unless the address is
# in one of these networks (SSRF: a subscriber must not reach the deployment's own network).
# Local mode allows loopback, where the sandbox and a developer's receiver live.
WEBHOOKS = {
    "ALLOWED_NETWORKS": env_list("AGENTOPS_WEBHOOK_ALLOWED_NETWORKS",
                                 "127.0.0.0/8,::1/128" if LOCAL else ""),
    # the retry policy of a delivery (a durable retry: waits over a second free the worker)
    "RETRY_INITIAL": env_float("AGENTOPS_WEBHOOK_RETRY_INITIAL", 5.0),
    "RETRY_MAX_INTERVAL": env_float("AGENTOPS_WEBHOOK_RETRY_MAX_INTERVAL", 3600.0),
    "RETRY_FOR": env_float("AGENTOPS_WEBHOOK_RETRY_FOR", 3 * 86400.0),
    "TIMEOUT": env_float("AGENTOPS_WEBHOOK_TIMEOUT", 10.0),
}
