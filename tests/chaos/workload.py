"""What the storm runs: a mix of agents, each with the output it has without faults.

Reference outputs come from running every configuration once, in this process and
before any fault, against the same sandbox. Outputs are compared after replacing
the run's own id (which agents put into unit names) and the ids the outside world
assigned (note ids): everything else must be equal.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field

from runs import services
from runs.durable import Outcome, execute_run
from runs.models import Run
from runs.storage import database_store
from runs.worker.config import worker_config

ANSWER = {"name": "chaos"}


@dataclass(frozen=True)
class Config:
    name: str
    agent: str
    inputs: dict = field(default_factory=dict)
    weight: int = 1
    # An operator may roll it back: its re-done work is the only difference
    # (migrate is not: its verify step rejects the units a rollback writes again).
    rollback: bool = True


def mix(small: bool, scale: int = 1) -> list[Config]:
    """The configurations and how often each is launched. `small` is the CI profile;
    `scale` lengthens the step-by-step agents, so faults find runs in flight."""
    return [
        Config("steps-notify", "steps", {"steps": 8 * scale, "delay": 0.05, "notify": True}, 4),
        Config("steps", "steps", {"steps": 6 * scale, "delay": 0.1, "notify": False}, 2),
        Config("ledger", "ledger", {"entries": 9 * scale, "notify_every": 3}, 3),
        Config("ticker", "ticker", {"steps": 10 * scale, "delay": 0.1}, 2),
        Config("napper", "napper", {"naps": 3, "seconds": 1.5}, 1),
        Config("ask", "ask", {"question": "Who is there?"}, 1, rollback=False),
        Config("crawl", "crawl", {"pages": 30 if small else 40, "batch": 6, "latency_ms": 0,
                                  "error_rate": 0.05}, 2),
        Config("migrate", "migrate", {"rows": 300, "batch_size": 50, "seed": 7}, 1,
               rollback=False),
        Config("assistant", "assistant", {"site_pages": 60, "search_scan": 30, "chat": False,
                                          "latency_ms": 0}, 1),
    ]


def normalise(output, run_id: str):
    text = json.dumps(output, sort_keys=True).replace(run_id, "<run>")
    text = re.sub(r"(note|id) \d+", r"\1 <id>", text)
    text = re.sub(r'"id": \d+', '"id": "<id>"', text)
    return json.loads(text)


# timeout: a reference run of the mix (the assistant's 60 site pages and model calls at
# most), its timers waited out in this process; it bounds one that never ends
def drive(run_id: str, timeout: float = 120.0) -> Run:
    """Execute a run in this process, answering its questions and waiting out its timers."""
    deadline = time.monotonic() + timeout
    store = database_store()
    while time.monotonic() < deadline:
        outcome = execute_run(store, run_id, worker_config())
        run = Run.objects.get(pk=run_id)
        if run.is_final or run.status == "needs_attention":
            return run
        if outcome == Outcome.WAITING:
            if (run.attention or {}).get("kind") == "input":
                services.run_provide_input(run_id=run_id, value=ANSWER, user="chaos-reference")
            elif run.wake_at is not None:
                time.sleep(max(0.0, run.wake_at.timestamp() - time.time()) + 0.01)
    raise RuntimeError(f"reference run {run_id} did not finish in {timeout} s")


def references(configs: list[Config], user) -> dict[str, dict]:
    """{config name: {"output": normalised output, "run": run id, "seconds": duration}}."""
    found = {}
    for config in configs:
        started = time.monotonic()
        run = services.run_launch(user=user, agent=config.agent, inputs=config.inputs)
        run = drive(run.id)
        if run.status != "succeeded":
            raise RuntimeError(f"the fault-free reference run of {config.name} ended "
                               f"{run.status}: {run.error or run.attention}")
        found[config.name] = {"output": normalise(run.output, run.id), "run": run.id,
                              "seconds": round(time.monotonic() - started, 2)}
    return found
