"""`manage.py runs replay-check`: runs of the writer made by the real engine on the
database, replayed on the code "on disk" (this process's registry, or a real process
started with another deploy's agents): each run's verdict, the summary, and the exit
status (1 only when a run not ended would not move to that code)."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from django.core.management import CommandError, call_command

from runs.durable import versions
from runs.models import Run
from tests.deploys.conftest import (
    REG,
    REG_V2,
    REG_V3,
    crashed,
    finished,
    handed_off,
    launch,
    waiting_for_v1,
)
from tests.durable.agents_for_tests import WORLD
from tests.support.processes import COMMAND_DEADLINE, ROOT, process_env

pytestmark = pytest.mark.django_db

DIVERGES = ("diverges at step 1, call 1 (tests.audit_unit where the history has "
            "tests.post_unit)")


def check(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("runs", "replay-check", *args, stdout=out, stderr=err)
    except SystemExit as exit_:
        return exit_.code, out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def verdicts(args=()) -> tuple[int, dict]:
    code, out, _ = check(*args, "--json")
    return code, {row["run_id"]: row for row in json.loads(out)["runs"]}


def test_a_compatible_deploy_passes_and_an_incompatible_one_fails(code_on_disk):
    in_flight = [handed_off(launch(), 4), crashed(launch(), 5)]
    ended = finished(launch(n=3))
    calls = dict(WORLD.calls)
    code_on_disk(REG_V2)
    code, out, _ = check()
    assert code == 0, out
    lines = out.splitlines()
    assert lines[-2] == "3 runs checked: 3 replay cleanly"
    assert lines[-1].startswith("PASSED")
    # runs not ended first, newest first; then the ended one
    assert [line.split()[0] for line in lines[:3]] == [in_flight[1], in_flight[0], ended]
    assert "replays cleanly (3 steps, 7 logged effects)" in lines[1]  # handed off in step 4

    code_on_disk(REG_V3)
    code, out, _ = check()
    assert code == 1, out
    assert all(f"DIVERGES: {DIVERGES}" in line for line in out.splitlines()[:3])
    assert f"{ended}  writer v1      succeeded (ended)" in out
    assert out.splitlines()[-2] == "3 runs checked: 0 replay cleanly, 3 diverge (2 in flight, " \
                                   "1 ended)"
    assert out.splitlines()[-1].startswith("FAILED: 2 runs in flight would not move")
    assert dict(WORLD.calls) == calls  # replayed: no tool was called
    assert {run.status for run in Run.objects.all()} == {"queued", "running", "succeeded"}


def test_an_ended_run_that_diverges_does_not_fail_the_check(code_on_disk):
    ended = finished(launch(n=2))
    code_on_disk(REG_V3)
    code, rows = verdicts()
    assert code == 0
    assert (rows[ended]["verdict"], rows[ended]["in_flight"], rows[ended]["message"]) == (
        "diverges", False, DIVERGES)


def test_json_has_each_verdict_and_the_codes(code_on_disk):
    run_id = crashed(launch(), 5)
    code_on_disk(REG_V3)
    code, out, _ = check("--json")
    report = json.loads(out)
    assert code == 1
    assert (report["passed"], report["checked"], report["diverging_in_flight"],
            report["blocking"]) == (False, 1, 1, [run_id])
    [row] = report["runs"]
    assert (row["verdict"], row["clean"], row["status"], row["version"], row["to_version"]) == (
        "diverges", False, "running", "1", "3")
    assert (row["code"], row["to_code"]) == (versions.fingerprint(REG.agents["writer"]),
                                             versions.fingerprint(REG_V3.agents["writer"]))
    assert row["divergence"]["step_no"] == 1 and row["divergence"]["seq"] == 0
    assert row["divergence"]["recorded"]["tool"] == "tests.post_unit"
    assert row["divergence"]["attempted"]["tool"] == "tests.audit_unit"


def test_a_run_of_an_agent_the_code_does_not_have_is_reported_and_fails(code_on_disk,
                                                                         monkeypatch):
    from runs.durable.registry import registry

    run_id = handed_off(launch(), 2)
    monkeypatch.delitem(registry.agents, "writer", raising=False)
    code, out, _ = check("--agent", "writer")
    assert code == 1
    assert f"{run_id}  writer v1      queued" in out
    assert "NO AGENT: this code has no agent 'writer'" in out
    assert "1 of an agent this code does not have" in out.splitlines()[-2]


def test_a_later_version_is_reported_and_never_moved_back(code_on_disk):
    from runs.durable import control
    from runs.storage import database_store

    run_id = control.launch(database_store(), agent="writer", inputs={"n": 2},
                            registry=REG_V3).id
    code_on_disk(REG)
    code, rows = verdicts()
    assert code == 0
    assert rows[run_id]["verdict"] == "later"
    assert rows[run_id]["message"].startswith("version 3 is later than this code's 1")


def test_selection_by_agent_status_and_limit(code_on_disk):
    queued = handed_off(launch(), 2)
    running = crashed(launch(), 3)
    ended = [finished(launch(n=1)) for _ in range(3)]
    code_on_disk(REG_V2)
    assert list(verdicts(["--status", "queued"])[1]) == [queued]
    assert list(verdicts(["--status", "running", "succeeded", "--limit", "2"])[1]) == [
        running, ended[2]]
    assert list(verdicts(["--limit", "3"])[1]) == [running, queued, ended[2]]
    assert verdicts(["--agent", "nobody"])[1] == {}
    with pytest.raises(CommandError):
        check("--limit", "0")
    with pytest.raises(CommandError):
        check("--status", "sleeping")


def test_over_url_it_is_refused_it_checks_the_code_on_disk():
    with pytest.raises(CommandError, match="runs on the server itself"):
        call_command("runs", "--url", "http://127.0.0.1:9", "--token", "x", "replay-check")


@pytest.mark.django_db(transaction=True)
def test_a_real_process_of_the_new_deploy_exits_1_then_0():
    """The command as CI runs it: a process of its own, its agents those of the deploy
    about to ship (AGENTOPS_AGENT_MODULES), on the database of the runs in flight."""
    run_id = crashed(launch(), 4)

    def run(module):
        return subprocess.run([sys.executable, "manage.py", "runs", "replay-check"], cwd=ROOT,
                              env=process_env(AGENTOPS_AGENT_MODULES=module), text=True,
                              capture_output=True, timeout=COMMAND_DEADLINE)

    v3 = run("tests.workload_agents,tests.deploys.served_v3")
    assert v3.returncode == 1, v3.stdout + v3.stderr
    assert f"{run_id}  writer v1      running" in v3.stdout and DIVERGES in v3.stdout
    v2 = run("tests.workload_agents,tests.deploys.served_v2")
    assert v2.returncode == 0, v2.stdout + v2.stderr
    assert "replays cleanly (3 steps, 7 logged effects)" in v2.stdout


def test_a_history_that_cannot_be_read_is_an_error_verdict_not_the_end_of_the_check(
        code_on_disk):
    from runs.durable import upgrade
    from runs.models import Checkpoint
    from runs.storage import database_store

    broken = waiting_for_v1(launch())
    upgrade.upgrade(database_store(), broken, actor="ops", registry=REG_V3)  # branch 2
    Checkpoint.objects.filter(run_id=broken, branch=2).update(blob=b"\x00not a state")
    other = handed_off(launch(), 2)
    code_on_disk(REG_V3)
    code, rows = verdicts()
    assert code == 1
    assert rows[broken]["verdict"] == "error"
    assert rows[broken]["message"].startswith("cannot replay: ")
    assert rows[other]["verdict"] == "diverges"  # the check went on


def test_runs_of_every_kind_replay_cleanly_on_the_code_they_ran(code_on_disk):
    """On the code the runs ran: a class agent that ended, a function agent, and one
    waiting for its user's answer (in flight) all replay cleanly; nothing is called."""
    from runs.durable import control, execute_run
    from runs.durable.registry import registry
    from runs.storage import database_store
    from tests.deploys.conftest import config

    ids = {}
    for agent, inputs in (("ticker", {"steps": 3, "delay": 0}), ("shout", {"text": "hi"}),
                          ("ask", {})):
        run = control.launch(database_store(), agent=agent, inputs=inputs, registry=registry)
        execute_run(database_store(), run.id, config(), registry=registry)
        ids[agent] = run.id
    assert Run.objects.get(pk=ids["ask"]).status == "waiting"
    code, rows = verdicts()
    assert code == 0
    assert {agent: rows[run_id]["verdict"] for agent, run_id in ids.items()} == {
        "ticker": "clean", "shout": "clean", "ask": "clean"}
    assert rows[ids["ask"]]["in_flight"] is True
