"""`manage.py runs`: the command line for scripts and operators."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from runs.models import AuditEntry, Run, RunEvent

pytestmark = pytest.mark.django_db(transaction=True)


def runs(*args):
    out = StringIO()
    call_command("runs", *args, stdout=out)
    return out.getvalue()


def nothing_written():
    return Run.objects.count() == 0 and RunEvent.objects.count() == 0


@pytest.mark.parametrize("args,message", [
    (["launch", "no-such-agent"], "unknown agent 'no-such-agent'"),
    (["launch", "ticker", "--input", "{not json"], "--input: not valid JSON"),
    (["launch", "ticker", "--input", "[1, 2]"], "inputs must be a JSON object"),
    (["launch", "ticker", "--input", '{"steps": "many"}'], "'many' is not of type 'integer'"),
    (["launch", "ticker", "--input", '{"steps": 0}'], "0 is less than the minimum of 1"),
    (["launch", "ticker", "--user", "nobody"], "no user named 'nobody'"),
    # the hostile classes (runs/untrusted.py), each refused before the engine or a query
    (["launch", "ticker", "--input", '{"steps": 3, "n": "a\\u0000"}'], "NUL character"),
    (["launch", "ticker", "--input", '{"n": "\\ud800"}'], "lone surrogate"),
    (["launch", "ticker", "--input", '{"steps": Infinity}'], "not a JSON number"),
    (["launch", "ticker", "--input", '{"steps": 1e999}'], "out of range"),
    (["launch", "ticker", "--input", "[" * 100_000 + "]" * 100_000], "nested too deeply"),
    (["launch", "ticker", "--user", "bob\udcff"], "lone surrogate"),  # argv's surrogateescape
    (["show", "0123456789\x00"], "NUL character"),
])
def test_bad_launches_are_refused_and_write_nothing(args, message):
    with pytest.raises(CommandError, match=message):
        runs(*args)
    assert nothing_written()


@pytest.mark.parametrize("sub", ["show", "watch", "execute", "pause", "resume", "cancel"])
def test_an_unknown_run_id_is_a_clear_error(sub):
    with pytest.raises(CommandError, match="no run with id"):
        runs(sub, "0123456789abcdef")


def test_launch_execute_show_and_list_in_json():
    launched = json.loads(runs("launch", "ticker", "--input", '{"steps": 3, "delay": 0}', "--json"))
    assert launched["status"] == "queued" and launched["agent"] == "ticker"
    runs("execute", launched["id"])
    shown = json.loads(runs("show", launched["id"], "--json"))
    assert shown["status"] == "succeeded" and shown["output"] == {"ticks": 3}
    assert shown["inputs"] == {"steps": 3, "delay": 0}
    listed = json.loads(runs("list", "--json"))
    assert [r["id"] for r in listed] == [launched["id"]]
    seqs = list(RunEvent.objects.filter(run_id=launched["id"]).values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


def test_watch_exits_non_zero_unless_the_run_succeeded():
    failed = json.loads(runs("launch", "shout", "--json"))
    Run.objects.filter(pk=failed["id"]).update(status="failed")
    with pytest.raises(SystemExit) as exit_info:
        runs("watch", failed["id"])
    assert exit_info.value.code == 1
    ok = json.loads(runs("launch", "ticker", "--input", '{"steps": 1, "delay": 0}', "--json"))
    runs("execute", ok["id"])
    assert "#" in runs("watch", ok["id"])  # prints the events, exits 0


def test_operator_subcommands_record_audit_entries():
    run = json.loads(runs("launch", "ticker", "--input", '{"steps": 2, "delay": 0}', "--json"))
    runs("pause", run["id"], "--reason", "maintenance")
    assert Run.objects.get(pk=run["id"]).status == "paused"
    with pytest.raises(CommandError, match="cannot pause a run that is paused"):
        runs("pause", run["id"])
    runs("resume", run["id"], "--reason", "done")
    runs("execute", run["id"])
    runs("rollback", run["id"], "--checkpoint", "1", "--reason", "again")
    assert Run.objects.get(pk=run["id"]).branch == 2
    runs("execute", run["id"])
    assert Run.objects.get(pk=run["id"]).status == "succeeded"
    actions = list(AuditEntry.objects.filter(run_id=run["id"]).order_by("created_at")
                   .values_list("action", "actor", "reason"))
    assert actions == [("pause", "cli", "maintenance"), ("resume", "cli", "done"),
                       ("rollback", "cli", "again")]
    with pytest.raises(CommandError, match="cannot resolve an effect"):
        runs("resolve", run["id"], "--effect", "0", "--as", "done")
