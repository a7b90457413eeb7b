"""The assistant end to end on real workers, a worker killed mid-run: the costs every
page shows equal what the sandbox's model reported for the run's calls, priced by the
table, each call once (the killed worker's replay counts nothing again)."""

import csv
import io

import pytest
from django.test import Client

from runs import services
from runs.budgets import ledger
from runs.durable.policies.budget import money
from runs.models import Effect, Run
from tests.agents.helpers import ONE_RUN_PER_WORKER, cluster_env, kill_holder, wait_final
from tests.budgets.test_browser_budgets import assistant_inputs

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]
PROMPT, COMPLETION = 2.5, 10.0  # AGENTOPS["MODEL_PRICES"]["scripted"], dollars per million


def test_the_costs_shown_are_the_models_reported_usage_once(users, server, start_cluster):
    cluster = start_cluster(workers=2, **cluster_env(server, **ONE_RUN_PER_WORKER))
    inputs = assistant_inputs(server, follow_ups=["What about pages on the army and a gift?"])
    run = services.run_launch(user=users["alice"], agent="assistant", inputs=inputs)
    kill_holder(run.pk, cluster, [lambda r: r.step_no >= 3])
    run = wait_final([run.pk])[run.pk]

    # what the model reported, call by call, as its responses were logged
    completions = Effect.objects.filter(run_id=run.pk, tool__endswith="chat_completion",
                                        status="done", superseded=False)
    reported = [e.result["usage"] for e in completions]
    prompt = sum(u["prompt_tokens"] for u in reported)
    completion = sum(u["completion_tokens"] for u in reported)
    cost = (prompt * PROMPT + completion * COMPLETION) / 1_000_000
    assert len(reported) == 8  # 2 questions x (search, calculate, note, answer)
    assert run.output["usage"] == {"prompt_tokens": prompt, "completion_tokens": completion}
    assert run.usage == {"cost": pytest.approx(cost), "prompt_tokens": prompt,
                         "completion_tokens": completion, "calls": len(reported)}
    assert [e.usage["cost"] for e in completions] == pytest.approx(
        [(u["prompt_tokens"] * PROMPT + u["completion_tokens"] * COMPLETION) / 1e6
         for u in reported])

    alice = Client()
    alice.force_login(users["alice"])
    shown = money(cost)
    assert f'id="run-cost" class="mono">{shown}<' in alice.get(f"/runs/{run.pk}/").content.decode()
    assert shown in alice.get("/").content.decode()
    assert shown in alice.get("/costs/").content.decode()
    rows = list(csv.DictReader(io.StringIO(alice.get("/costs.csv?group=run").content.decode())))
    assert [(row["run"], float(row["cost"]), int(row["tokens"])) for row in rows] == [
        (run.pk, pytest.approx(cost, abs=1e-8), prompt + completion)]
    day = ledger.totals(Run.objects.filter(pk=run.pk), "day")
    assert sum(row["cost"] for row in day) == pytest.approx(cost)
