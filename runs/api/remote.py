"""`manage.py runs --url URL --token TOKEN ...`: the same subcommands, run against a
remote server through agentops.client instead of this machine's database. The token's
user acts (so --user is refused); maintenance subcommands stay on the server."""

from __future__ import annotations

import json
import os
import sys

from django.core.management.base import CommandError

from agentops.client import ApiError, Client
from runs.chat import cli as chat_cli
from runs.deploys.words import event_line

# replay-check replays on the code on disk: the server's is POST /api/v1/replay-check
LOCAL_ONLY = {"execute", "sweep", "prune", "retry-now", "give-up", "replay-check"}


def handle(command, opts) -> None:
    sub = opts["subcommand"]
    if sub in LOCAL_ONLY:
        raise CommandError(f"`runs {sub}` runs on the server itself, not over --url")
    if opts.get("user"):
        raise CommandError("--user: over --url the token's own user acts")
    token = opts.get("token") or os.environ.get("AGENTOPS_TOKEN", "")
    if not token:
        raise CommandError("--token (or AGENTOPS_TOKEN) is needed with --url")
    with Client(opts["url"], token=token) as api:
        try:
            return Remote(command, api).do(sub.replace("-", "_"), opts)
        except ApiError as exc:
            raise CommandError(exc.detail if exc.status else str(exc)) from None


class Remote:
    def __init__(self, command, api: Client):
        self.command, self.api = command, api
        self.as_json = command.as_json

    def do(self, name: str, opts):
        return getattr(self, f"do_{name}")(opts)

    def out(self, text: str) -> None:
        self.command.stdout.write(text)

    def show(self, run, full: bool = False) -> None:
        if self.as_json:
            data = {"id": run.id, "agent": run.agent, "agent_version": run.agent_version,
                    "status": run.status, "step_no": run.step_no, "branch": run.branch,
                    "progress": [run.progress["done"], run.progress["total"]],
                    "owner": run.owner, "created_at": run.created_at.isoformat(),
                    "stall": run.stall}
            if full:
                data.update(inputs=run.inputs, output=run.output, error=run.error,
                            attention=run.attention)
            self.out(json.dumps(data, indent=2))
            return
        self.out(f"run {run.id}  {run.agent} v{run.agent_version}  {run.status}  "
                 f"step {run.step_no}  branch {run.branch}")
        if run.stall:
            self.out(f"  STALLED since {run.stall.get('since')}: {run.stall.get('why')}")
        if full:
            for name in ("inputs", "output", "error", "attention"):
                value = getattr(run, name)
                if value:
                    self.out(f"  {name}: {json.dumps(value)[:2000]}")

    def do_launch(self, opts):
        try:
            inputs = json.loads(opts["input"])
        except ValueError as exc:
            raise CommandError(f"--input: not JSON ({exc})") from None
        run = self.api.launch(opts["agent"], inputs, idempotency_key=opts.get("idempotency_key"))
        self.show(run)
        if opts["wait"]:
            self.follow(run.id, 0, quiet=True)

    def do_list(self, opts):
        page = self.api.runs(status=opts["status"] or "", limit=opts["limit"])
        if self.as_json:
            self.out(json.dumps([{"id": r.id, "agent": r.agent, "status": r.status,
                                  "step_no": r.step_no, "owner": r.owner}
                                 for r in page.runs], indent=2))
            return
        for run in page.runs:
            status = f"{run.status} STALLED" if run.stall else run.status
            self.out(f"{run.id}  {run.agent:<12} {status:<16} step {run.step_no:<6} "
                     f"{run.progress['percent']:5.1f}%  {run.owner or '-'}")

    def do_show(self, opts):
        self.show(self.api.run(opts["run_id"]), full=True)

    def do_watch(self, opts):
        run = self.api.run(opts["run_id"])
        if opts["from_seq"] is not None and opts["from_seq"] < 1:
            raise CommandError("--from must be 1 or more (events are numbered from 1)")
        after = run.event_seq if opts["from_seq"] is None else opts["from_seq"] - 1
        self.command.stderr.write(f"following run {run.id} from event {after + 1}",
                                  style_func=str)
        self.follow(run.id, after, quiet=False)

    def follow(self, run_id: str, after: int, quiet: bool) -> None:
        """Print the run's events until it ends (exit 0 if it succeeded, else 1) or waits
        for input (exit 3, as the local `--wait` does: runs/chat/cli.py)."""
        run = self.api.run(run_id)
        if not (_asks(run) and run.event_seq <= after):
            events = self.api.follow(run_id, after)
            for event in events:
                if not quiet:
                    self.print_event(event)
                # A wait for input is no end: the stream stays open, so ask the run.
                if _input_requested(event) or (_asks(run) and event.seq >= run.event_seq):
                    run = self.api.run(run_id)
                    if _asks(run) and event.seq >= run.event_seq:
                        break
            else:
                return self.ended(run_id, quiet)
            events.close()
        if quiet:
            self.show(run, full=True)
        chat_cli.stop_waiting(self.command, run.id, run.attention, self.as_json)

    def print_event(self, event) -> None:
        self.out(json.dumps({"seq": event.seq, "kind": event.kind, "data": event.data,
                             "at": event.at.isoformat()}) if self.as_json
                 else event_line(event))
        self.command.stdout.flush()

    def ended(self, run_id: str, quiet: bool) -> None:
        end = self.api.last_end
        if quiet:
            self.show(self.api.run(run_id), full=True)
        if end is None or end.status != "succeeded":
            sys.exit(1)

    def do_pause(self, opts):
        self.show(self.api.pause(opts["run_id"], opts["reason"]))

    def do_resume(self, opts):
        self.show(self.api.resume(opts["run_id"], opts["reason"], upgrade=opts["upgrade"]))

    def do_cancel(self, opts):
        self.show(self.api.cancel(opts["run_id"], opts["reason"]))

    def do_rollback(self, opts):
        if opts["preview"]:
            self.out(json.dumps(self.api.rollback_preview(opts["run_id"], opts["checkpoint"]),
                                indent=2))
            return
        self.show(self.api.rollback(opts["run_id"], opts["checkpoint"], opts["reason"],
                                    then=opts["then"], children=opts["children"]))

    def do_resolve(self, opts):
        try:
            result = json.loads(opts["result"])
        except ValueError as exc:
            raise CommandError(f"--result: not JSON ({exc})") from None
        self.show(self.api.resolve(opts["run_id"], opts["effect"], opts["resolution"],
                                   opts["reason"], result=result))

    def do_answer(self, opts):
        try:
            value = json.loads(opts["answer"])
        except ValueError as exc:
            raise CommandError(f"JSON: not JSON ({exc})") from None
        self.show(self.api.answer(opts["run_id"], value))

    def do_send(self, opts):
        message = self.api.send(opts["run_id"], opts["text"], end=opts["end"])
        self.command.note(chat_cli.sent(message.state))
        self.show(message.run)


def _asks(run) -> bool:
    return chat_cli.waits_for_input(run.status, run.attention)


def _input_requested(event) -> bool:
    data = event.data if isinstance(event.data, dict) else {}
    return event.kind == "status" and data.get("status") == "waiting" \
        and data.get("kind") == "input"
