"""An adapter agent's call in doubt is answered as any agent's: what an operator enters on
the operator page ("It happened: use this result"), through the API or the CLI is the
tool's result, and the run goes on with it. In-process on the production store (SQLite
or PostgreSQL), and on a real worker tree worker SIGKILLed inside the non-idempotent tool."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from runs import services
from runs.api import tokens
from runs.durable import Outcome, WorkerConfig, control, execute_run
from runs.durable.faults import faults
from runs.models import AuditEntry, Effect, Run
from runs.operator.groups import ensure_operators_group
from sandbox.models import Record
from tests import adapter_agents as agents
from tests.adapters.conftest import Records
from tests.adapters.test_adapters import BUILD, INPUTS, NOTE_42, registry
from tests.durable.agents_for_tests import SimulatedCrash
from tests.support.processes import wait_until
from tests.support.sdks import skip_module_without_sdks

skip_module_without_sdks()
pytestmark = pytest.mark.django_db(transaction=True)
ONE_PROMPT = dict(INPUTS, follow_ups=[])


@pytest.fixture
def ops(client, users):
    """charlie, the operator, logged in."""
    ensure_operators_group()  # a transactional test's flush empties the group's permissions
    client.force_login(users["charlie"])
    return client


def resolve_on_the_page(ops, run: Run, result: str, *, worker_running: bool = False):
    """What an operator does on the run's page: the in-doubt form, posted."""
    page = ops.get(f"/ops/runs/{run.pk}/")
    assert page.status_code == 200
    assert run.attention["key"] in page.content.decode()
    assert "It happened: use this result" in page.content.decode()
    response = ops.post(f"/ops/runs/{run.pk}/resolve/", {
        "seq": run.attention["seq"], "resolution": "done", "reason": "the note is there",
        "result": result})
    assert response.status_code == 302
    assert Effect.objects.get(key=run.attention["key"]).resolution == "done"
    # queued; a live worker may have claimed it already (CI saw it running when read)
    assert Run.objects.get(pk=run.pk).status in (
        ("queued", "running", "succeeded") if worker_running else ("queued",))


def resolve_through_the_api(users, run: Run, result: str):
    token = tokens.create(users["charlie"], name="ops", scopes=("read", "operate"), days=1,
                          max_days=365)[1]
    response = Client(HTTP_AUTHORIZATION=f"Bearer {token}").post(
        f"/api/v1/runs/{run.pk}/effects/{run.attention['seq']}/resolve",
        {"resolution": "done", "result": json.loads(result), "reason": "the note is there"},
        content_type="application/json")
    assert response.status_code == 200, response.content


def resolve_with_the_cli(users, run: Run, result: str):
    call_command("runs", "resolve", run.pk, "--effect", str(run.attention["seq"]), "--as",
                 "done", "--result", result, "--reason", "the note is there", "--user",
                 "charlie", stdout=StringIO())


def writes() -> int:
    return sum(1 for e in agents.JOURNAL.entries if e.get("tool") == "write_note")


def config(owner: str) -> WorkerConfig:
    return WorkerConfig(owner=owner, lease_seconds=30, slice_seconds=60)


@pytest.mark.parametrize("via", ["page", "api", "cli"])
@pytest.mark.parametrize("name", list(BUILD))
def test_an_operators_answer_is_the_result_the_run_goes_on_with(name, via, ops, users,
                                                                monkeypatch):
    monkeypatch.setattr(agents, "POST", Records().post)
    agents.JOURNAL.entries.clear()
    store, reg = services.store(), registry(non_idempotent={"write_note"})
    run_id = control.launch(store, agent=name, inputs=ONE_PROMPT, registry=reg).id

    def die_in_write_note():  # the note was written; its result never logged
        if writes():
            faults.disarm()
            raise SimulatedCrash("in write_note")

    faults.arm("after_effect_before_log", die_in_write_note)
    try:
        with pytest.raises(SimulatedCrash):
            execute_run(store, run_id, config("w1"), registry=reg)
    finally:
        faults.disarm()
    Run.objects.filter(pk=run_id).update(lease_expires_at=timezone.now())  # w1 is gone
    assert execute_run(store, run_id, config("w2"), registry=reg) == Outcome.NEEDS_ATTENTION
    run = Run.objects.get(pk=run_id)
    assert (run.attention["kind"], run.attention["tool"]) == ("in_doubt", "tool.write_note")

    if via == "page":
        resolve_on_the_page(ops, run, json.dumps({"id": 42}))
    elif via == "api":
        resolve_through_the_api(users, run, json.dumps({"id": 42}))
    else:
        resolve_with_the_cli(users, run, json.dumps({"id": 42}))
    assert execute_run(store, run_id, config("w3"), registry=reg) == Outcome.SUCCEEDED
    assert NOTE_42[name] in Run.objects.get(pk=run_id).output["answer"]
    effect = Effect.objects.get(key=run.attention["key"])
    assert (effect.status, effect.resolution, effect.result) == ("done", "done", {"id": 42})
    assert writes() == 1  # the call in doubt was not made again
    assert [(e.action, e.reason) for e in AuditEntry.objects.filter(run_id=run_id)] == [
        ("resolve", "the note is there")]


# --- on a real worker, killed ----------------------------------------------------------------
@pytest.mark.services
@pytest.mark.timeout(400)
@pytest.mark.parametrize("name", ["test_pydantic_notes", "test_openai_notes"])
def test_a_worker_killed_inside_a_non_idempotent_tool_then_resolved_on_the_page(
        name, ops, users, server, start_cluster, faults_dir, tmp_path):
    journal = tmp_path / "journal.jsonl"
    # The main process imports the SDKs before it forks (tests/adapter_agents.py): seconds.
    cluster = start_cluster(workers=1, ready_timeout=180,
                            AGENTOPS_SANDBOX_URL=f"{server.url}/sandbox",
                            AGENTOPS_LEASE_SECONDS=2, AGENTOPS_TEST_JOURNAL=journal,
                            AGENTOPS_AGENT_MODULES="tests.adapter_agents",
                            AGENTOPS_TEST_SDKS=agents.sdks_of(name))
    (faults_dir / "after_effect_before_log").write_text(f"kill@{name}/tool.write_note")
    run = services.run_launch(user=users["alice"], agent=name, inputs=ONE_PROMPT)
    # 60 s: the kill, a new worker forked and the run taken over, on a loaded 2-core machine
    wait_until(lambda: Run.objects.get(pk=run.pk).status == "needs_attention", 60,
               message="in doubt after the kill")
    run.refresh_from_db()
    assert (run.attention["kind"], run.attention["tool"]) == ("in_doubt", "tool.write_note")
    assert list((faults_dir).glob("after_effect_before_log.fired.*"))  # killed in there
    notes = Record.objects.filter(unit__startswith=f"{run.pk}-note-")
    # the note reached the records API before the kill
    assert notes.count() == 1, (agents.read_journal(journal), cluster.output()[-4000:],
                                server.output()[-4000:])

    resolve_on_the_page(ops, run, json.dumps({"id": 42}), worker_running=True)
    wait_until(lambda: Run.objects.get(pk=run.pk).is_final, 30, message="finished")
    done = Run.objects.get(pk=run.pk)
    assert done.status == "succeeded", (done.status, done.error)
    assert NOTE_42[name.removesuffix("_notes")] in done.output["answer"]
    effect = Effect.objects.get(key=run.attention["key"])
    assert (effect.status, effect.resolution, effect.result) == ("done", "done", {"id": 42})
    ran = [e for e in agents.read_journal(journal) if e.get("tool") == "write_note"]
    assert len(ran) == 1 and notes.count() == 1  # never made again
