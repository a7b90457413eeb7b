"""`manage.py runs --url --token` against a live Daphne: the CLI through the client.

Each test runs the command once as a process of its own (its exit code, its output as a
user sees it) and its other calls in this process through call_command: the same command
and client against the same live server, without starting Django anew for each call
(tens of seconds each on a loaded machine)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from dataclasses import dataclass

import pytest
from django.core.management import CommandError, call_command

from runs.models import AuditEntry, Run
from tests.support.processes import COMMAND_DEADLINE, ROOT, process_env

pytestmark = [pytest.mark.services, pytest.mark.timeout(600)]


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def cli(server, token, *args, check=True, process=False):
    argv = ["--url", server.url, "--token", token, *args]
    if process:
        result = subprocess.run([sys.executable, "manage.py", "runs", *argv], cwd=ROOT,
                                env=process_env(), capture_output=True, text=True,
                                timeout=COMMAND_DEADLINE)
    else:
        out, err = io.StringIO(), io.StringIO()
        try:
            call_command("runs", *argv, stdout=out, stderr=err)
            code = 0
        except CommandError as exc:  # what manage.py prints as "CommandError: ..." and exits 1
            err.write(f"CommandError: {exc}\n")
            code = 1
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        result = Result(code, out.getvalue(), err.getvalue())
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_launch_wait_list_show_and_operate_remotely(users, server, start_cluster,
                                                    make_token):
    start_cluster(workers=1)
    alice = make_token("alice", "read", "launch")
    out = cli(server, alice, "launch", "--json", "ticker", "--input",
              '{"steps": 3, "delay": 0}', "--wait", "--idempotency-key", "k-1",
              process=True).stdout
    try:  # the run as launched, then as it ended
        first, end = json.JSONDecoder().raw_decode(out.strip())
    except ValueError:
        raise AssertionError(f"not JSON: {out!r}") from None
    assert json.loads(out.strip()[end:])["status"] == "succeeded"
    assert Run.objects.get(pk=first["id"]).status == "succeeded"
    again = json.loads(cli(server, alice, "launch", "--json", "ticker", "--input",
                           '{"steps": 3, "delay": 0}', "--idempotency-key", "k-1").stdout)
    assert again["id"] == first["id"] and Run.objects.count() == 1
    listed = json.loads(cli(server, alice, "list", "--json").stdout)
    assert [r["id"] for r in listed] == [first["id"]]
    watched = cli(server, alice, "watch", first["id"], "--from", "1").stdout.splitlines()
    assert watched[0].startswith("#1 status") and len(watched) == Run.objects.get(
        pk=first["id"]).event_seq

    refused = cli(server, alice, "pause", first["id"], "--reason", "x", check=False)
    assert refused.returncode != 0 and "scope" in refused.stderr
    queued = json.loads(cli(server, alice, "launch", "--json", "ticker", "--input",
                            '{"steps": 500, "delay": 1}').stdout)
    operator = make_token("charlie", "operate", "read")
    no_reason = cli(server, operator, "pause", queued["id"], check=False)
    assert no_reason.returncode != 0 and "reason" in no_reason.stderr.lower()
    cli(server, operator, "pause", queued["id"], "--reason", "maintenance")
    audit = AuditEntry.objects.get(run_id=queued["id"], action="pause")
    assert (audit.actor, audit.reason) == ("charlie", "maintenance")


def test_remote_refusals_are_clear(users, server, make_token):
    token = make_token("alice", "read")
    assert "execute" in cli(server, token, "execute", "abcdef", check=False).stderr
    as_bob = cli(server, token, "pause", "abcdef", "--reason", "r", "--user", "bob", check=False)
    assert as_bob.returncode != 0 and "--user" in as_bob.stderr
    gone = cli(server, token, "show", "0" * 32, check=False)
    assert gone.returncode != 0 and "No such run" in gone.stderr
    bad = cli(server, "aop_wrong", "list", check=False, process=True)
    assert bad.returncode != 0 and "Unauthorized" in bad.stderr
