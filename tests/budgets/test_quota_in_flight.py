"""A quota shared by runs counts every run's calls in flight before a call is made, in
the database (runs/budgets/quotas.py): overshot by at most one call in total, however
many runs, threads, processes and worker trees share it; a dead worker's calls in
flight stop counting with its lease."""

import threading
import time

import pytest
from django.utils import timezone

import tests.budgets.quota_agents  # noqa: F401  (registers "quota_spender")
from runs import services
from runs.budgets import quotas
from runs.budgets import services as budget_services
from runs.budgets.models import Budget, QuotaReservation
from runs.durable import execute_run
from runs.durable.policies import budget as b
from runs.durable.session import Outcome
from runs.models import Effect, Run
from runs.storage import database_store
from runs.worker.config import worker_config
from tests.durable import budget_agents
from tests.support.processes import TREE_DEADLINE, wait_until
from tests.web.conftest import drive

pytestmark = pytest.mark.django_db(transaction=True)
CALL = budget_agents.PROMPT + budget_agents.COMPLETION  # tokens
TOOL = budget_agents.model.name
QUOTA = 5000


@pytest.fixture(autouse=True)
def _fresh():
    budget_agents.reset()


def quota(users, tokens=QUOTA) -> Budget:
    return Budget.objects.create(scope="user", user=users["alice"], period="day", tokens=tokens)


def claimed(users, owner="alice") -> Run:
    """A run of `owner` that a worker holds (a live lease, its epoch)."""
    run = services.run_launch(user=users[owner], agent="quota_spender", inputs={})
    assert database_store().claim(run.pk, "w", 30.0, time.time()) is not None
    return Run.objects.get(pk=run.pk)


def ask(run: Run, key: str) -> b.Verdict:
    ids = quotas.quota_ids(owner_id=run.owner_id, agent=run.agent)
    return quotas.admit(ids, run_id=run.pk, epoch=run.epoch, key=key, tool=TOOL,
                        owner_id=run.owner_id, agent=run.agent).verdict


def ends(run: Run, key: str, seq: int, tokens: int = CALL) -> None:
    """The call `key` returned: its usage logged (the ledger), then no longer in flight."""
    Effect.objects.create(run=run, branch=1, step_no=1, seq=seq, kind="call", tool=TOOL,
                          digest="d", key=key, status="done", finished_at=timezone.now(),
                          usage={"model": "m", "prompt_tokens": tokens, "completion_tokens": 0,
                                 "cost": 0.0})
    quotas.release(key)


# --- the rule, in the database ---------------------------------------------------------------
def test_other_runs_calls_in_flight_count_before_a_call_is_made(users):
    quota(users, tokens=2500)
    a, b_, c = (claimed(users) for _ in range(3))
    assert ask(a, "a1").what == b.GO  # nothing in flight: the first call goes alone
    waiting = ask(b_, "b1")  # its cost may be anything: nothing goes beside it
    assert (waiting.what, waiting.in_flight) == (b.WAIT, 1)
    ends(a, "a1", 1)
    assert ask(b_, "b1").what == b.GO
    assert ask(c, "c1").what == b.WAIT  # 1,000 spent + 1,000 in flight + 1,000 > 2,500
    ends(b_, "b1", 2)
    assert ask(c, "c1").what == b.GO  # alone: the one call that may cross the limit
    ends(c, "c1", 3)
    over = ask(a, "a2")
    assert (over.what, over.spent, over.limit) == (b.REACHED, 3000, 2500)
    assert not QuotaReservation.objects.exists()


def test_far_from_the_limit_calls_of_several_runs_go_together(users):
    quota(users, tokens=100_000)
    a, b_, c = (claimed(users) for _ in range(3))
    assert ask(a, "a1").what == b.GO
    ends(a, "a1", 1)  # now its tool's calls have an estimate
    assert [ask(run, f"{run.pk}:2").what for run in (a, b_, c)] == [b.GO] * 3
    assert QuotaReservation.objects.count() == 3


def test_a_dead_workers_call_stops_counting_when_its_lease_runs_out_or_its_run_is_claimed(users):
    quota(users)
    a, b_ = claimed(users), claimed(users)
    assert ask(a, "a1").what == b.GO
    assert ask(b_, "b1").what == b.WAIT
    # a's worker dies in its call: the reservation counts until a's lease runs out...
    Run.objects.filter(pk=a.pk).update(lease_expires_at=timezone.now())
    assert ask(b_, "b1").what == b.GO
    assert list(QuotaReservation.objects.values_list("key", flat=True)) == ["b1"]
    # ... or, with a lease still live, until another worker claims the run (a new epoch)
    c = claimed(users)
    assert ask(c, "c1").what == b.WAIT
    Run.objects.filter(pk=b_.pk).update(epoch=b_.epoch + 1)
    assert ask(c, "c1").what == b.GO


def test_a_call_asking_again_is_not_in_its_own_way(users):
    quota(users)
    a = claimed(users)
    assert ask(a, "a1").what == b.GO
    assert ask(a, "a1").what == b.GO  # after a retry wait: the same call, one reservation
    assert QuotaReservation.objects.count() == 1


# --- concurrent runs through the engine --------------------------------------------------------
def spent_by_alice() -> int:
    return sum((r.usage or {}).get("prompt_tokens", 0) + (r.usage or {}).get("completion_tokens", 0)
               for r in Run.objects.filter(owner__username="alice"))


def assert_held_at_most_one_call_over(run_ids) -> None:
    spent = spent_by_alice()
    assert QUOTA <= spent <= QUOTA + CALL, spent  # at most one call over, in total
    for run in Run.objects.filter(pk__in=run_ids):
        assert run.status == "needs_attention", (run.status, run.attention)
        assert run.attention["message"].startswith("daily user alice budget reached: ")


def assert_each_call_logged_once(run_ids, calls: int) -> None:
    for run in Run.objects.filter(pk__in=run_ids):
        assert run.status == "succeeded"
        logged = Effect.objects.filter(run=run, tool=TOOL, status="done", superseded=False)
        assert logged.count() == run.usage["calls"] == calls
    assert spent_by_alice() == len(run_ids) * calls * CALL


def raise_quota(users) -> None:
    budget_services.set_quota(user=users["charlie"], scope="user", period="day",
                              subject=users["alice"], tokens=1_000_000, reason="more")


def test_concurrent_runs_in_threads_overshoot_a_shared_quota_by_one_call_in_total(users):
    quota(users)
    run_ids = [services.run_launch(user=users["alice"], agent="quota_spender",
                                   inputs={"calls": 6}).pk for _ in range(4)]
    start = threading.Barrier(len(run_ids))

    def worker(run_id):  # a worker of its own: its own gates, store and connection
        try:
            start.wait()
            config = worker_config()
            while execute_run(database_store(), run_id, config) == Outcome.YIELDED:
                pass
        finally:
            database_store().close_thread_resources()

    threads = [threading.Thread(target=worker, args=(run_id,)) for run_id in run_ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)  # six calls of 0.2 s, one at a time at worst, and their commits
    assert not any(thread.is_alive() for thread in threads)
    assert_held_at_most_one_call_over(run_ids)

    raise_quota(users)
    for run_id in run_ids:
        drive(run_id)
    assert_each_call_logged_once(run_ids, calls=6)
    # the calls logged before the hold were replayed, none was made twice
    assert budget_agents.PROVIDER.made == {f"q{n}": len(run_ids) for n in range(6)}


@pytest.mark.services
def test_concurrent_runs_on_two_worker_trees_overshoot_a_shared_quota_by_one_call(
        users, start_cluster):
    quota(users)
    env = {"AGENTOPS_AGENT_MODULES": "tests.workload_agents,tests.budgets.quota_agents",
           "AGENTOPS_RUNS_PER_WORKER": 1}  # four runs on four processes of two trees
    start_cluster(workers=2, name="a", **env)
    start_cluster(workers=2, name="b", **env)
    run_ids = [services.run_launch(user=users["alice"], agent="quota_spender",
                                   inputs={"calls": 6}).pk for _ in range(4)]
    # 60 s: four runs handed to workers of two trees on a loaded machine
    wait_until(lambda: Run.objects.filter(pk__in=run_ids, status="needs_attention").count() == 4,
               60, message="every run held by the quota")
    assert_held_at_most_one_call_over(run_ids)

    raise_quota(users)
    wait_until(lambda: Run.objects.filter(pk__in=run_ids, status="succeeded").count() == 4,
               TREE_DEADLINE, message="every run finished")
    assert_each_call_logged_once(run_ids, calls=6)


# --- a call that waits for other runs' calls -------------------------------------------------
def execute_in_thread(run_id: str) -> tuple[threading.Thread, list]:
    outcome = []

    def work():
        try:
            outcome.append(execute_run(database_store(), run_id, worker_config()))
        finally:
            database_store().close_thread_resources()

    thread = threading.Thread(target=work)
    thread.start()
    return thread, outcome


def test_a_call_waiting_for_another_runs_call_gives_way_to_a_pause(users):
    quota(users)
    assert ask(claimed(users), "elsewhere").what == b.GO  # another worker's call in flight
    run = services.run_launch(user=users["alice"], agent="quota_spender", inputs={"calls": 1})
    thread, outcome = execute_in_thread(run.pk)
    wait_until(lambda: Run.objects.get(pk=run.pk).status == "running", message="claimed")
    services.run_pause(run_id=run.pk, user=users["charlie"], reason="not now")
    thread.join(30)  # the pause is seen at a renewal of the lease, then at the next look
    assert outcome == [Outcome.PAUSED]
    assert not Effect.objects.filter(run_id=run.pk).exists()
    assert not budget_agents.PROVIDER.made


def test_a_wait_past_its_patience_frees_the_worker_on_a_timer(users, monkeypatch):
    from runs.budgets.gates import QuotaGate

    monkeypatch.setattr(QuotaGate, "PATIENCE", 0.0)
    quota(users)
    assert ask(claimed(users), "elsewhere").what == b.GO
    run = services.run_launch(user=users["alice"], agent="quota_spender", inputs={"calls": 1})
    assert execute_run(database_store(), run.pk, worker_config()) == Outcome.WAITING
    held = Run.objects.get(pk=run.pk)
    assert held.attention["message"] == \
        "waiting for 1 call(s) in flight under the daily user alice budget"
    assert held.wake_at is not None and held.lease_owner is None
    assert not budget_agents.PROVIDER.made
