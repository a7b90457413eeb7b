"""SDK agents made durable, on real worker trees SIGKILLed at random instants (ten
kills per adapter; ADAPTER_CRASH_KILLS sets another number): every run ends with the
answer of the same agent run plainly by its SDK, no tool ran again once its result was
logged (nor under another key), no logged model response was asked for again, and every
note reached the records API once."""

import asyncio
import os
import random
import signal
import time

import pytest

from runs import services
from runs.models import Effect, Run
from tests import adapter_agents as agents
from tests.crash.helpers import (
    assert_consistent,
    assert_outside_world_clean,
    holder_pid,
    wait_final,
)
from tests.support.sdks import skip_module_without_sdks

skip_module_without_sdks()
pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

# Each kill ends its tree, and the fresh one imports the SDK before it forks: 3-4 CPU-s a
# kill for the OpenAI Agents SDK, on CI's CPU-bound cores (.ci/run sets fewer).
KILLS = int(os.environ.get("ADAPTER_CRASH_KILLS", "10"))
PLAIN = {"test_pydantic": (agents.build_pydantic, agents.plain_pydantic),
         "test_openai": (agents.build_openai, agents.plain_openai)}


def inputs(n: int) -> dict:
    # A prompt of its own per run: its model responses (hashes of the conversation) are
    # its own, so the journal tells whose they are.
    return {"prompt": f"Boat {n}: how many pages mention it?",
            "follow_ups": [f"Harbour {n} then?", f"Old city {n}?"], "delay": 0.15}


@pytest.mark.timeout(900)  # up to six minutes of kills, then the runs' recovery
@pytest.mark.parametrize("name", list(PLAIN))
def test_sigkill_an_sdk_agents_worker_at_random_instants(name, server, start_cluster, tmp_path,
                                                         monkeypatch):
    journal = tmp_path / "journal.jsonl"
    sandbox = f"{server.url}/sandbox"
    # The main process imports the SDKs before it forks (tests/adapter_agents.py): seconds.
    cluster = start_cluster(workers=2, ready_timeout=180, AGENTOPS_SANDBOX_URL=sandbox,
                            AGENTOPS_LEASE_SECONDS=2,
                            AGENTOPS_TEST_JOURNAL=journal,
                            AGENTOPS_AGENT_MODULES="tests.workload_agents,tests.adapter_agents",
                            AGENTOPS_TEST_SDKS=agents.sdks_of(name))
    rng = random.Random(int(os.environ.get("CRASH_SEED", "19")))
    run_ids, kills = [], 0
    # Each kill waits for a run to be running on a live worker again: every kill ends the
    # tree, and the fresh one imports the SDKs before it forks (ready_timeout above).
    deadline = time.monotonic() + 360
    while kills < KILLS and time.monotonic() < deadline:
        for looped in Run.objects.filter(pk__in=run_ids, status="needs_attention",
                                         attention__kind="crash_loop"):
            # three of our kills in one step: the crash-loop guard stopped it; go on
            services.run_resume(run_id=looped.id, user="test-operator", reason="our kills")
        running = list(Run.objects.filter(pk__in=run_ids, status="running"))
        if len(run_ids) - sum(r.is_final for r in Run.objects.filter(pk__in=run_ids)) < 4:
            run_ids.append(services.run_launch(user=None, agent=name,
                                               inputs=inputs(len(run_ids))).id)
            continue
        time.sleep(rng.uniform(0.2, 0.7))
        pid = holder_pid(rng.choice(running).id) if running else None
        if pid in cluster.worker_pids():
            os.kill(pid, signal.SIGKILL)
            kills += 1
    assert kills == KILLS, f"only {kills} kills in the time allowed"
    # the runs' model and tool calls left after the last kill, on a fresh tree that
    # imports the SDKs before it forks, as above
    runs = wait_final(run_ids, timeout=180)

    # The same agents, plainly by their SDK, in this process against the same sandbox.
    monkeypatch.setenv("AGENTOPS_SANDBOX_URL", sandbox)
    monkeypatch.delenv("AGENTOPS_TEST_JOURNAL", raising=False)
    build, plain = PLAIN[name]
    for n, run_id in enumerate(run_ids):
        run = runs[run_id]
        assert run.status == "succeeded", (run.status, run.error, run.attention)
        assert_consistent(run)
        expected = asyncio.run(plain(build(f"{sandbox}/llm/v1"),
                                     dict(inputs(n), delay=0.0)))
        assert run.output["answer"] == expected
        assert len(run.output["answers"]) == 3
    effects = list(Effect.objects.filter(run_id__in=run_ids, kind="call").values_list(
        "tool", "key", "status", "finished_at", "result"))
    effects = [(t, k, s, f.timestamp() if f else None, res) for t, k, s, f, res in effects]
    agents.check_journal(agents.read_journal(journal), effects)
    notes = assert_outside_world_clean(run_ids)
    assert len(notes) == 3 * len(run_ids)  # every note arrived, once
