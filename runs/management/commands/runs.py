"""`manage.py runs SUBCOMMAND`: launch, inspect and operate durable runs from a shell."""

import json
import math
import os
import sys
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from runs import services
from runs.budgets import cli as budgets_cli
from runs.chat import cli as chat_cli
from runs.deploys import cli as deploys_cli
from runs.deploys.words import event_line, version_wait
from runs.durable import DurableError, Outcome, execute_run
from runs.durable.records import FINAL_STATUSES, NEEDS_ATTENTION, SUCCEEDED
from runs.management import cli_arguments as arguments
from runs.models import Run, RunEvent
from runs.operator.forms import ResolveForm, RollbackForm, RunActionForm
from runs.operator.selectors import id_prefix_q
from runs.selectors import run_children, with_checkpoints
from runs.web import untrusted
from runs.web.views.retrying import retrying
from runs.worker.config import worker_config
from runs.worker.stalls import mark_stalls


class Command(BaseCommand):
    help = "Launch, inspect and operate durable runs."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        # a remote server through its HTTP API (runs/api/remote.py, docs/api.md)
        parser.add_argument("--url", default=os.environ.get("AGENTOPS_URL", ""),
                            help="drive the server at URL over its API (or AGENTOPS_URL)")
        parser.add_argument("--token", default="", help="an API token for --url "
                                                        "(or AGENTOPS_TOKEN)")
        sub = parser.add_subparsers(dest="subcommand", required=True)
        # --json is accepted after the subcommand too
        add_parser = sub.add_parser

        def add_with_json(name, **kwargs):
            p = add_parser(name, **kwargs)
            p.add_argument("--json", action="store_true", help="machine-readable output")
            return p

        sub.add_parser = add_with_json
        arguments.add_run_subcommands(sub)
        arguments.add_control_subcommands(sub)
        chat_cli.add_subcommands(sub, arguments.subcommand, arguments.RUN_ID_HELP,
                                 arguments.USER_HELP)
        arguments.add_maintenance_subcommands(sub)
        deploys_cli.add_subcommands(sub, arguments.subcommand)
        budgets_cli.add_subcommands(sub, arguments.subcommand, arguments.add_control_arguments)

    def handle(self, *args, **opts):
        self.as_json = opts["json"]
        try:
            for name, value in opts.items():  # argv may carry lone surrogates (surrogateescape)
                if isinstance(value, str):
                    untrusted.check_text(value, f"--{name.replace('_', '-')}")
        except untrusted.UntrustedInputError as exc:
            raise CommandError(str(exc)) from None
        if opts["url"]:
            from runs.api import remote

            return remote.handle(self, opts)
        try:
            return getattr(self, f"do_{opts['subcommand'].replace('-', '_')}")(opts)
        except DurableError as exc:
            raise CommandError(str(exc)) from None

    # --- subcommands -------------------------------------------------------------
    def do_launch(self, opts):
        if opts["idempotency_key"]:
            raise CommandError("--idempotency-key is for launches over --url (the API)")
        inputs = _json_arg(opts["input"], "--input")
        run = services.run_launch(user=_user(opts["user"]), agent=opts["agent"], inputs=inputs)
        self._print_run(run)
        if opts["wait"]:
            return self._follow(run.id, opts["timeout"], quiet=True)

    def do_list(self, opts):
        runs = Run.objects.select_related("owner").order_by("-created_at")
        if opts["status"]:
            runs = runs.filter(status=opts["status"])
        runs = mark_stalls(list(runs[: opts["limit"]]))
        if self.as_json:
            self.stdout.write(json.dumps([_run_dict(r) for r in runs], indent=2))
            return
        for run in runs:
            status = f"{run.status} STALLED" if run.stall else run.status
            self.stdout.write(f"{run.id}  {run.agent:<12} {status:<16} step {run.step_no:<6} "
                              f"{run.progress_percent:5.1f}%  {run.owner or '-'}")

    def do_show(self, opts):
        self._print_run(_get(opts["run_id"]), full=True)

    def do_watch(self, opts):
        run = _get(opts["run_id"])
        if opts["from_seq"] is not None and opts["from_seq"] < 1:
            raise CommandError(f"--from must be 1 or more (events are numbered from 1), "
                               f"not {opts['from_seq']}")
        # Like `tail -f`: what happens from now on; --from N replays from event N.
        after = run.event_seq if opts["from_seq"] is None else opts["from_seq"] - 1
        if opts["from_seq"] is None and _ended(run):
            self.note(f"run {run.id} has ended ({run.status}); --from 1 prints its events")
        else:
            self.note(f"following run {run.id} from event {after + 1}")
        return self._follow(run.id, opts["timeout"], quiet=False, after=after)

    def do_execute(self, opts):
        run = _get(opts["run_id"])
        outcome = Outcome.YIELDED
        config = worker_config()
        config.slice_seconds = math.inf
        while outcome in (Outcome.YIELDED, Outcome.NOT_CLAIMED):
            outcome = execute_run(services.store(), run.id, config)
            if outcome == Outcome.NOT_CLAIMED:
                raise CommandError(f"run {run.id} is not runnable now ({_get(run.id).status}, "
                                   "or another worker holds it)")
        self._print_run(_get(run.id))

    def do_pause(self, opts):
        self._control(services.run_pause, opts)

    def do_resume(self, opts):
        self._control(services.run_resume, opts, upgrade=opts["upgrade"])

    def do_cancel(self, opts):
        self._control(services.run_cancel, opts)

    def do_retry_now(self, opts):
        self._control(services.run_retry_now, opts)

    def do_give_up(self, opts):
        self._control(services.run_give_up, opts)

    def _control(self, service, opts, **extra):
        run_id = _get(opts["run_id"]).id
        action = arguments.CONTROLS[opts["subcommand"]][0]
        data = _valid(RunActionForm({"action": action, "reason": opts["reason"]}))
        self._print_run(service(run_id=run_id, user=_actor(opts), reason=data["reason"], **extra))

    def do_approve(self, opts):
        self._budgets(opts)

    def do_deny(self, opts):
        self._budgets(opts)

    def do_budget(self, opts):
        self._budgets(opts)

    def _budgets(self, opts):  # runs/budgets/cli.py
        run = _get(opts["run_id"])
        reason = _valid(RunActionForm({"action": "resume", "reason": opts["reason"]}))["reason"]
        budgets_cli.handle(self, opts["subcommand"], run, opts, _actor(opts), reason)
        self._print_run(_get(run.id))

    def do_answer(self, opts):  # runs/chat/cli.py
        run = _get(opts["run_id"])
        chat_cli.handle(self, opts["subcommand"], run, opts, _user(opts["user"]), _json_arg)
        self._print_run(_get(run.id))

    do_send = do_answer

    def do_rollback(self, opts):
        run_id = _get(opts["run_id"]).id
        if opts["preview"]:
            self.stdout.write(json.dumps(services.run_rollback_preview(
                run_id=run_id, checkpoint=opts["checkpoint"]), indent=2))
            return
        # Without --then the engine's own default decides (control.stays_paused), as the
        # page's preselected choice does.
        then = opts["then"] or "resume"
        data = _valid(RollbackForm({"checkpoint": opts["checkpoint"], "reason": opts["reason"],
                                    "then": then, "children": opts["children"]}))
        resume = data["then"] == "resume" if opts["then"] else None
        self._print_run(services.run_rollback(run_id=run_id, checkpoint=data["checkpoint"],
                                              user=_actor(opts), reason=data["reason"],
                                              resume=resume, children=data["children"]))

    def do_resolve(self, opts):
        run_id = _get(opts["run_id"]).id
        data = _valid(ResolveForm({"seq": opts["effect"], "resolution": opts["resolution"],
                                   "result": opts["result"], "reason": opts["reason"]}))
        self._print_run(services.run_resolve_effect(
            run_id=run_id, seq=data["seq"], resolution=data["resolution"],
            result=data["result"], user=_actor(opts), reason=data["reason"]))

    def do_sweep(self, opts):
        from runs.worker.sweep import sweep

        self.stdout.write(f"expired {sweep()} lease(s) of dead local workers; side jobs run")

    def do_replay_check(self, opts):  # runs/deploys/cli.py
        deploys_cli.handle(self, opts)

    def do_prune(self, opts):
        from runs.storage.retention import apply

        report, events = apply(dry_run=opts["dry_run"])
        if self.as_json:
            self.stdout.write(json.dumps({"dry_run": report.dry_run, "runs": report.runs,
                                          "checkpoints": report.checkpoints,
                                          "bytes": report.bytes, "per_run": report.per_run,
                                          "events": events.as_dict()}))
        else:
            self.stdout.write(f"checkpoints: {report}\nevents and effects: {events}")

    # --- output ----------------------------------------------------------------------
    def _print_run(self, run, full=False):
        run.refresh_from_db()
        mark_stalls([run])
        if self.as_json:
            self.stdout.write(json.dumps(_run_dict(run, full=full), indent=2))
            return
        self.stdout.write(f"run {run.id}  {run.agent} v{run.agent_version}  {run.status}  "
                          f"step {run.step_no}  branch {run.branch}")
        if run.stall:
            self.stdout.write(f"  STALLED since {run.stall.since.isoformat(timespec='seconds')}: "
                              f"{run.stall.why}")
        waits = version_wait(run.status, run.attention)
        if waits and not run.stall:  # a stalled one says it in its why
            self.stdout.write(f"  WAITING FOR ITS CODE: {waits.get('message', '')}")
        retry = retrying(run.status, run.attention)
        if retry:
            self.stdout.write(f"  {retry.text()} (at "
                              f"{retry.next_attempt_at.isoformat(timespec='seconds')})")
        if full:
            if run.lease_owner and run.lease_expires_at:
                self.stdout.write(f"  lease: {run.lease_owner} until "
                                  f"{run.lease_expires_at.isoformat(timespec='seconds')}")
            for name in ("inputs", "output", "error", "attention"):
                value = getattr(run, name)
                if value:
                    self.stdout.write(f"  {name}: {json.dumps(value)[:2000]}")
            if run.parent_id:
                self.stdout.write(f"  parent: {run.parent_id}")
            for child in _children(run):  # docs/children.md
                self.stdout.write(f"  child: {child.id}  {child.agent}  {child.status}")

    def note(self, text):
        """A line for the person at the terminal, kept out of stdout (and so of --json)."""
        self.stderr.write(text, style_func=str)
        self.stderr.flush()

    def _follow(self, run_id, timeout, quiet, after=0):
        seen, deadline = after, time.monotonic() + timeout
        while True:
            # The run row first: its events up to its event_seq committed with it, so a
            # run seen ended has all its events in the read below.
            run = Run.objects.get(pk=run_id)
            events = with_checkpoints(list(RunEvent.objects.filter(run_id=run_id, seq__gt=seen)
                                           .order_by("seq")))
            for event in events:
                seen = event.seq
                if not quiet:
                    line = event.as_message() if self.as_json else event_line(event)
                    self.stdout.write(json.dumps(line) if self.as_json else line)
            self.stdout.flush()  # a pipe (`runs watch ID | grep ...`) sees each batch at once
            asks = chat_cli.waits_for_input(run.status, run.attention)
            if _ended(run) or asks:
                if quiet:
                    self._print_run(run, full=True)
                if asks:
                    chat_cli.stop_waiting(self, run.id, run.attention, self.as_json)
                if run.status != SUCCEEDED:
                    sys.exit(1)
                return
            if time.monotonic() > deadline:
                raise CommandError(f"run {run_id} still {run.status} after {timeout} s")
            time.sleep(0.2)


def _valid(form) -> dict:
    """The operator pages' form decides, so the shell and the pages refuse the same input."""
    if form.is_valid():
        return form.cleaned_data
    raise CommandError("; ".join(f"{_option(field)}{error}"
                                 for field, errors in form.errors.items() for error in errors))


def _option(field: str) -> str:
    if field == "__all__":
        return ""
    return {"seq": "--effect", "resolution": "--as"}.get(field, f"--{field}") + ": "


def _ended(run) -> bool:
    """Where watching stops: the run is over, or nothing moves until an operator acts."""
    return run.status in FINAL_STATUSES or run.status == NEEDS_ATTENTION


def _json_arg(text, name):
    try:
        return untrusted.parse_json(text, max_bytes=settings.AGENTOPS["MAX_INPUT_BYTES"])
    except untrusted.UntrustedInputError as exc:
        raise CommandError(f"{name}: {exc}") from None


def _get(run_id) -> Run:
    matches = list(Run.objects.filter(id_prefix_q(run_id))[:2]) if len(run_id) >= 6 else []
    if len(matches) != 1:
        raise CommandError(f"no run with id {run_id!r}" if not matches else
                           f"run id {run_id!r} is ambiguous")
    return matches[0]


def _user(username):
    if username is None:
        return None
    try:
        return get_user_model().objects.get(username=username)
    except get_user_model().DoesNotExist:
        raise CommandError(f"no user named {username!r}") from None


def _actor(opts):
    return _user(opts["user"]) or "cli"


def _run_dict(run, full=False):
    data = {"id": run.id, "agent": run.agent, "agent_version": run.agent_version,
            "status": run.status, "step_no": run.step_no, "branch": run.branch,
            "progress": [run.progress_done, run.progress_total],
            "owner": run.owner.get_username() if run.owner else None,
            "created_at": run.created_at.isoformat(),
            "stall": run.stall.as_dict() if run.stall else None,
            "code_fingerprint": run.code_fingerprint,
            "version_wait": (version_wait(run.status, run.attention) or {}).get("message")}
    retry = retrying(run.status, run.attention)
    data["retrying"] = retry.text() if retry else None
    if full:
        data.update(inputs=run.inputs, output=run.output, error=run.error,
                    attention=run.attention, epoch=run.epoch, parent_id=run.parent_id,
                    children=[{"id": c.id, "agent": c.agent, "status": c.status}
                              for c in _children(run)])
    return data


def _children(run):
    return run_children(run)[0]
