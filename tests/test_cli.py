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

import tests.web.chat_agent  # noqa: F401  (registers echo_chat)
from runs.api import tokens
from runs.chat.models import ChatMessage
from runs.chat.transcript import transcript
from runs.management.commands.runs import Command
from runs.models import AuditEntry, Run, RunEvent
from runs.operator.forms import ReasonForm
from tests.support.processes import ROOT, TREE_DEADLINE, Server, process_env, wait_until

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


def read_line(stream, timeout: float = 60) -> str:  # the first follows Django's start-up
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
        out, _ = watch.communicate(timeout=60)  # it sees the end at its next 0.2 s poll
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


# --- a run that waits for its user: answer, send, and --wait's exit 3 -------------------------
def waiting(agent: str, user: str = "alice") -> Run:
    """A run of `agent` owned by `user`, executed here until it waits for input."""
    run = json.loads(runs("launch", agent, "--user", user, "--json"))
    runs("execute", run["id"])
    run = Run.objects.get(pk=run["id"])
    assert (run.status, run.attention["kind"]) == ("waiting", "input")
    return run


def unchanged(run: Run) -> bool:
    after = Run.objects.get(pk=run.pk)
    return (after.status, after.event_seq) == (run.status, run.event_seq)


@pytest.mark.parametrize("args,message", [
    (['{"name": ""}'], "JSON: name: '' should be non-empty"),  # the question's schema
    (['{"nom": "Ada"}'], "'name' is a required property"),
    (["{not json"], "JSON: not valid JSON"),
    (['{"name": "Ada"}', "--user", "bob"], "only the run's owner can answer it"),
])
def test_answer_refuses_what_the_page_refuses_and_changes_nothing(users, args, message):
    run = waiting("ask")
    with pytest.raises(CommandError, match=message):
        runs("answer", run.pk, *args)
    assert unchanged(run)


def test_answer_goes_on_with_the_run(users):
    run = waiting("ask")
    assert "queued" in runs("answer", run.pk[:8], '{"name": "Ada"}', "--user", "alice")
    runs("execute", run.pk)
    assert Run.objects.get(pk=run.pk).output == {"greeting": "Hello, Ada!"}
    with pytest.raises(CommandError, match="not waiting for input"):
        runs("answer", run.pk, '{"name": "Bo"}')


@pytest.mark.parametrize("args,message", [
    ([], "Type a message first."),
    (["x" * 8001], "at most 8000 characters"),
    (["hi\x00"], "--text contains a NUL character"),
    (["hi", "--user", "bob"], "only the run's owner can write to it"),
])
def test_send_refuses_what_the_message_box_refuses(users, args, message):
    run = waiting("echo_chat")
    with pytest.raises(CommandError, match=message):
        runs("send", run.pk, *args)
    assert unchanged(run) and not ChatMessage.objects.exists()


def test_send_talks_to_a_chat_as_the_message_box_does(users):
    run = waiting("echo_chat")
    err = StringIO()
    call_command("runs", "send", run.pk, "how are you", "--user", "alice", stdout=StringIO(),
                 stderr=err)
    assert "message delivered" in err.getvalue()
    runs("execute", run.pk)
    run.refresh_from_db()
    assert run.status == "waiting"
    said = [m["text"] for m in transcript(run)["messages"] if m["role"] == "assistant"]
    assert said[-1] == "you said: how are you"
    runs("send", run.pk, "--end")
    runs("execute", run.pk)
    assert Run.objects.get(pk=run.pk).status == "succeeded"
    with pytest.raises(CommandError, match="has succeeded: it takes no more messages"):
        runs("send", run.pk, "still there?")


def test_send_queues_for_a_busy_chat_and_refuses_a_run_that_is_no_chat(users):
    busy = json.loads(runs("launch", "echo_chat", "--user", "alice", "--json"))
    err = StringIO()
    call_command("runs", "send", busy["id"], "later", stdout=StringIO(), stderr=err)
    assert "message queued" in err.getvalue()
    assert ChatMessage.objects.get(run_id=busy["id"]).state == ChatMessage.QUEUED
    with pytest.raises(CommandError, match="not a chat"):
        runs("send", waiting("ask").pk, "hello")


def test_watch_exits_3_with_the_question_when_the_run_waits_for_input(users):
    run = waiting("ask")
    out = StringIO()
    with pytest.raises(SystemExit) as exit_info:
        call_command("runs", "watch", run.pk, "--timeout", "20", stdout=out)
    assert exit_info.value.code == 3
    assert "waits for input: What is your name?" in out.getvalue()
    assert '"required": ["name"]' in out.getvalue()  # the answer's schema
    assert f"runs answer {run.pk} JSON" in out.getvalue()


def test_launch_wait_returns_with_exit_3_when_the_chat_waits_for_its_user(users):
    """A real `runs launch --wait` process: it returns, exit 3 with the question, as soon
    as the run waits for a message, instead of waiting (an hour by default) for its end."""
    wait = subprocess.Popen([sys.executable, "manage.py", "runs", "launch", "echo_chat",
                             "--user", "alice", "--wait", "--timeout", "60"], cwd=ROOT,
                            env=process_env(AGENTOPS_AGENT_MODULES="tests.workload_agents,"
                                                                   "tests.web.chat_agent"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        run_id = read_line(wait.stdout).split()[1]
        runs("execute", run_id)
        out, err = wait.communicate(timeout=60)  # its own --timeout 60 (begun earlier) ends it
    finally:
        wait.kill()
    assert wait.returncode == 3, err
    assert "waiting" in out and "waits for input: message" in out


# --- the same over --url: the CLI through the HTTP API --------------------------------------
CHAT_AGENTS = "tests.workload_agents,tests.web.chat_agent"


@pytest.fixture
def chat_server(transactional_db, tmp_path, start_cluster):
    """A Daphne and a worker that know the test chat agent (echo_chat)."""
    server = Server(tmp_path, AGENTOPS_AGENT_MODULES=CHAT_AGENTS)
    start_cluster(workers=1, AGENTOPS_AGENT_MODULES=CHAT_AGENTS)
    yield server
    server.stop()


def remote(server, token, *args) -> tuple[int, str, str]:
    out, err = StringIO(), StringIO()
    try:
        call_command("runs", "--url", server.url, "--token", token, *args, stdout=out,
                     stderr=err)
        code = 0
    except CommandError as exc:
        code = 1
        err.write(str(exc))
    except SystemExit as exc:
        code = exc.code
    return code, out.getvalue(), err.getvalue()


def launched_id(out: str) -> str:
    return out.split()[1]


def test_answer_send_and_wait_over_the_api(users, chat_server):
    alice = tokens.create(users["alice"], name="t", scopes=["read", "launch"], days=1,
                          max_days=365)[1]
    bob = tokens.create(users["bob"], name="t", scopes=["read", "launch"], days=1,
                        max_days=365)[1]
    code, out, err = remote(chat_server, alice, "launch", "ask", "--wait")
    assert code == 3 and "waits for input: What is your name?" in out, err
    ask = launched_id(out)
    code, _, err = remote(chat_server, alice, "answer", ask, '{"name": 7}')
    assert code == 1 and "is not of type 'string'" in err
    assert remote(chat_server, alice, "answer", ask, '{"name": "Ada"}')[0] == 0
    assert remote(chat_server, alice, "watch", ask, "--from", "1")[0] == 0
    assert Run.objects.get(pk=ask).output == {"greeting": "Hello, Ada!"}

    code, out, err = remote(chat_server, alice, "launch", "echo_chat", "--wait")
    assert code == 3, err
    chat = launched_id(out)
    code, _, err = remote(chat_server, bob, "send", chat, "hi")
    assert code == 1 and "No such run" in err  # another user's run is not there for bob
    code, _, err = remote(chat_server, alice, "send", chat, "")
    assert code == 1 and "Type a message first." in err
    code, out, err = remote(chat_server, alice, "send", chat, "hello again")
    assert code == 0 and "message delivered" in err, err
    code, out, err = remote(chat_server, alice, "watch", chat)
    assert code == 3 and "waits for input: message" in out, (out, err)
    assert remote(chat_server, alice, "send", chat, "--end")[0] == 0
    wait_until(lambda: Run.objects.get(pk=chat).status == "succeeded", TREE_DEADLINE,
               message="the chat to end")
    code, _, err = remote(chat_server, alice, "send", ask, "hello")
    assert code == 1 and "not a chat" in err
