"""`manage.py runs`: the command line for scripts and operators."""

import json
import select
import shlex
import subprocess
import sys
import time
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from runs.management.commands.runs import Command
from runs.models import AuditEntry, Run, RunEvent
from runs.operator.forms import ReasonForm
from tests.support.processes import ROOT, process_env

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
    # the hostile classes (runs/web/untrusted.py), each refused before the engine or a query
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


def test_show_names_the_parent_and_the_children_and_rollback_keeps_them():
    parent = json.loads(runs("launch", "fan_out", "--input", json.dumps(
        {"children": 2, "steps": 1, "delay": 0, "child": "ticker"}), "--json"))
    runs("execute", parent["id"])
    shown = json.loads(runs("show", parent["id"], "--json"))
    assert shown["status"] == "waiting" and len(shown["children"]) == 2
    first = shown["children"][0]["id"]
    assert f"parent: {parent['id']}" in runs("show", first)
    runs("rollback", parent["id"], "--checkpoint", "1", "--children", "keep", "--then", "pause",
         "--reason", "redo it")
    assert set(Run.objects.filter(parent_id=parent["id"]).values_list("status", flat=True)) \
        == {"queued"}


def test_watch_exits_non_zero_unless_the_run_succeeded():
    failed = json.loads(runs("launch", "shout", "--json"))
    Run.objects.filter(pk=failed["id"]).update(status="failed")
    with pytest.raises(SystemExit) as exit_info:
        runs("watch", failed["id"])
    assert exit_info.value.code == 1
    ok = json.loads(runs("launch", "ticker", "--input", '{"steps": 1, "delay": 0}', "--json"))
    runs("execute", ok["id"])
    assert "#" in runs("watch", ok["id"], "--from", "1")  # prints the events, exits 0


def test_operator_subcommands_record_audit_entries():
    run = json.loads(runs("launch", "ticker", "--input", '{"steps": 2, "delay": 0}', "--json"))
    runs("pause", run["id"], "--reason", "maintenance")
    assert Run.objects.get(pk=run["id"]).status == "paused"
    with pytest.raises(CommandError, match="cannot pause a run that is paused"):
        runs("pause", run["id"], "--reason", "again")
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
        runs("resolve", run["id"], "--effect", "0", "--as", "done", "--reason", "checked")


def test_every_subcommand_and_option_has_help_text():
    parser = Command().create_parser("manage.py", "runs")
    subparsers = next(a for a in parser._actions if a.dest == "subcommand")
    summaries = {choice.dest: choice.help for choice in subparsers._choices_actions}
    assert set(summaries) == set(subparsers.choices)
    for name, sub in subparsers.choices.items():
        assert summaries[name], f"`runs --help` says nothing about {name}"
        assert sub.description, f"`runs {name} --help` has no description"
        missing = [a.dest for a in sub._actions if not a.help]
        assert not missing, f"`runs {name}` options without help: {missing}"


def paused_ticker() -> str:
    run = json.loads(runs("launch", "ticker", "--input", '{"steps": 2, "delay": 0}', "--json"))
    runs("pause", run["id"], "--reason", "set up")
    return run["id"]


@pytest.mark.parametrize("reason", ["", "   "])
@pytest.mark.parametrize("args", [
    ["pause"], ["resume"], ["cancel"], ["retry-now"], ["give-up"],
    ["rollback", "--checkpoint", "1"], ["resolve", "--effect", "0", "--as", "done"],
])
def test_an_empty_reason_is_refused_as_in_the_ui_and_changes_nothing(args, reason):
    run_id = paused_ticker()
    before = Run.objects.get(pk=run_id)
    audit = AuditEntry.objects.count()
    ui_says = ReasonForm({"reason": reason}).errors["reason"][0]
    with pytest.raises(CommandError, match=f"--reason: {ui_says}"):
        runs(args[0], run_id, *args[1:], "--reason", reason)
    after = Run.objects.get(pk=run_id)
    assert (after.status, after.control, after.branch, after.event_seq) == (
        before.status, before.control, before.branch, before.event_seq)
    assert AuditEntry.objects.count() == audit


def test_resolve_refuses_a_result_that_is_not_json_as_the_ui_does():
    run_id = paused_ticker()
    with pytest.raises(CommandError, match="--result: Not valid JSON"):
        runs("resolve", run_id, "--effect", "0", "--as", "skip", "--result", "{nope",
             "--reason", "checked")


def finished_ticker() -> Run:
    run = json.loads(runs("launch", "ticker", "--input", '{"steps": 3, "delay": 0}', "--json"))
    runs("execute", run["id"])
    return Run.objects.get(pk=run["id"])


def printed_seqs(text: str) -> list[int]:
    return [int(line.split()[0][1:]) for line in text.splitlines() if line.startswith("#")]


def test_watch_starts_from_now_and_from_n_with_from():
    run = finished_ticker()
    assert run.event_seq > 4
    out, err = StringIO(), StringIO()
    call_command("runs", "watch", run.pk, stdout=out, stderr=err)
    assert printed_seqs(out.getvalue()) == []
    assert "has ended (succeeded)" in err.getvalue()
    assert printed_seqs(runs("watch", run.pk, "--from", "3")) == list(range(3, run.event_seq + 1))
    with pytest.raises(CommandError, match="--from must be 1 or more"):
        runs("watch", run.pk, "--from", "0")


def read_line(stream, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
        if ready:
            return stream.readline()
    raise AssertionError(f"no line from the process in {timeout} s")


def test_watch_follows_a_live_run_from_the_moment_it_starts():
    """A real `manage.py runs watch` process: it prints exactly the events written after
    it started following, and exits 0 when the run succeeds."""
    run = json.loads(runs("launch", "ticker", "--input", '{"steps": 3, "delay": 0}', "--json"))
    head = Run.objects.get(pk=run["id"]).event_seq
    watch = subprocess.Popen([sys.executable, "manage.py", "runs", "watch", run["id"]],
                             cwd=ROOT, env=process_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        assert read_line(watch.stderr).strip() == f"following run {run['id']} from event {head + 1}"
        runs("execute", run["id"])
        out, _ = watch.communicate(timeout=60)
    finally:
        watch.kill()
    final = Run.objects.get(pk=run["id"])
    assert watch.returncode == 0 and final.status == "succeeded"
    assert printed_seqs(out) == list(range(head + 1, final.event_seq + 1))


def test_the_readme_examples_are_valid_command_lines():
    parser = Command().create_parser("manage.py", "runs")
    lines = [line.split("#")[0] for line in (ROOT / "README.md").read_text().splitlines()
             if line.startswith("python manage.py runs ")]
    assert len(lines) >= 5, "the README shows the command line"
    for line in lines:
        parser.parse_args(shlex.split(line)[3:])  # argparse exits on an invalid line


def test_rollback_previews_as_json_and_can_leave_the_run_paused():
    run = json.loads(runs("launch", "ticker", "--input", '{"steps": 2, "delay": 0}', "--json"))
    runs("execute", run["id"])
    preview = json.loads(runs("rollback", run["id"], "--checkpoint", "1", "--preview"))
    assert preview["checkpoint"] == 1 and preview["steps_undone"] == 2
    runs("rollback", run["id"], "--checkpoint", "1", "--then", "pause", "--reason", "look first")
    assert (Run.objects.get(pk=run["id"]).status, Run.objects.get(pk=run["id"]).branch) == \
        ("paused", 2)
