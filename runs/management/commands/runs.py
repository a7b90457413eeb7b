"""`manage.py runs SUBCOMMAND`: launch, inspect and operate durable runs from a shell."""

import json
import sys
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from runs import services, untrusted
from runs.config import worker_config
from runs.durable import DurableError, Outcome, execute_run
from runs.durable.records import FINAL_STATUSES, SUCCEEDED
from runs.models import Run, RunEvent


class Command(BaseCommand):
    help = "Launch, inspect and operate durable runs."

    def add_arguments(self, parser):
        parser.add_argument("--json", action="store_true", help="machine-readable output")
        sub = parser.add_subparsers(dest="subcommand", required=True)
        # --json is accepted after the subcommand too
        add_parser = sub.add_parser

        def add_with_json(name, **kwargs):
            p = add_parser(name, **kwargs)
            p.add_argument("--json", action="store_true", help="machine-readable output")
            return p

        sub.add_parser = add_with_json
        p = sub.add_parser("launch", help="launch a run of AGENT")
        p.add_argument("agent")
        p.add_argument("--input", default="{}", help="the inputs, a JSON object")
        p.add_argument("--user", default=None, help="the owner's username")
        p.add_argument("--wait", action="store_true", help="wait until the run ends")
        p.add_argument("--timeout", type=float, default=3600)
        p = sub.add_parser("list", help="list runs, newest first")
        p.add_argument("--status", default=None)
        p.add_argument("--limit", type=int, default=20)
        for name in ("show", "watch", "execute"):
            p = sub.add_parser(name)
            p.add_argument("run_id")
            if name == "watch":
                p.add_argument("--timeout", type=float, default=3600)
        for name in ("pause", "resume", "cancel"):
            p = sub.add_parser(name)
            p.add_argument("run_id")
            p.add_argument("--reason", default="")
            p.add_argument("--user", default=None)
            if name == "resume":
                p.add_argument("--upgrade", action="store_true",
                               help="continue on the agent's current version (new branch)")
        p = sub.add_parser("rollback")
        p.add_argument("run_id")
        p.add_argument("--checkpoint", type=int, required=True)
        p.add_argument("--reason", default="")
        p.add_argument("--user", default=None)
        p.add_argument("--preview", action="store_true", help="only show what would be undone")
        p = sub.add_parser("resolve", help="answer an in-doubt effect")
        p.add_argument("run_id")
        p.add_argument("--effect", type=int, required=True, help="the effect's seq in its step")
        p.add_argument("--as", dest="resolution", choices=["done", "retry", "skip"], required=True)
        p.add_argument("--result", default="null", help="JSON result (for done/skip)")
        p.add_argument("--reason", default="")
        p.add_argument("--user", default=None)
        sub.add_parser("sweep", help="enqueue every run that is due now")
        p = sub.add_parser("prune", help="apply the checkpoint retention policy (runs/retention.py)")
        p.add_argument("--dry-run", action="store_true", help="only say what would be dropped")

    def handle(self, *args, **opts):
        self.as_json = opts["json"]
        try:
            for name, value in opts.items():  # argv may carry lone surrogates (surrogateescape)
                if isinstance(value, str):
                    untrusted.check_text(value, f"--{name.replace('_', '-')}")
        except untrusted.UntrustedInputError as exc:
            raise CommandError(str(exc)) from None
        try:
            return getattr(self, f"do_{opts['subcommand']}")(opts)
        except DurableError as exc:
            raise CommandError(str(exc)) from None

    # --- subcommands -------------------------------------------------------------
    def do_launch(self, opts):
        inputs = _json_arg(opts["input"], "--input")
        run = services.run_launch(user=_user(opts["user"]), agent=opts["agent"], inputs=inputs)
        self._print_run(run)
        if opts["wait"]:
            return self._follow(run.id, opts["timeout"], quiet=True)

    def do_list(self, opts):
        runs = Run.objects.select_related("owner").order_by("-created_at")
        if opts["status"]:
            runs = runs.filter(status=opts["status"])
        runs = list(runs[: opts["limit"]])
        if self.as_json:
            self.stdout.write(json.dumps([_run_dict(r) for r in runs], indent=2))
            return
        for run in runs:
            self.stdout.write(f"{run.id}  {run.agent:<12} {run.status:<16} step {run.step_no:<6} "
                              f"{run.progress_percent:5.1f}%  {run.owner or '-'}")

    def do_show(self, opts):
        self._print_run(_get(opts["run_id"]), full=True)

    def do_watch(self, opts):
        return self._follow(_get(opts["run_id"]).id, opts["timeout"], quiet=False)

    def do_execute(self, opts):
        run = _get(opts["run_id"])
        outcome = Outcome.YIELDED
        config = worker_config()
        config.slice_seconds = 1e9
        while outcome in (Outcome.YIELDED, Outcome.NOT_CLAIMED):
            outcome = execute_run(services.store(), run.id, config)
            if outcome == Outcome.NOT_CLAIMED:
                raise CommandError(f"run {run.id} is not runnable now ({_get(run.id).status}, "
                                   "or another worker holds it)")
        self._print_run(_get(run.id))

    def do_pause(self, opts):
        self._print_run(services.run_pause(run_id=_get(opts["run_id"]).id, user=_actor(opts),
                                           reason=opts["reason"]))

    def do_resume(self, opts):
        self._print_run(services.run_resume(run_id=_get(opts["run_id"]).id, user=_actor(opts),
                                            reason=opts["reason"], upgrade=opts["upgrade"]))

    def do_cancel(self, opts):
        self._print_run(services.run_cancel(run_id=_get(opts["run_id"]).id, user=_actor(opts),
                                            reason=opts["reason"]))

    def do_rollback(self, opts):
        run_id = _get(opts["run_id"]).id
        if opts["preview"]:
            self.stdout.write(json.dumps(services.run_rollback_preview(
                run_id=run_id, checkpoint=opts["checkpoint"]), indent=2))
            return
        self._print_run(services.run_rollback(run_id=run_id, checkpoint=opts["checkpoint"],
                                              user=_actor(opts), reason=opts["reason"]))

    def do_resolve(self, opts):
        result = _json_arg(opts["result"], "--result")
        self._print_run(services.run_resolve_effect(
            run_id=_get(opts["run_id"]).id, seq=opts["effect"], resolution=opts["resolution"],
            result=result, user=_actor(opts), reason=opts["reason"]))

    def do_sweep(self, opts):
        from runs.sweep import sweep

        self.stdout.write(f"enqueued {sweep()} run(s)")

    def do_prune(self, opts):
        from runs.retention import prune

        report = prune(dry_run=opts["dry_run"])
        if self.as_json:
            self.stdout.write(json.dumps({"dry_run": report.dry_run, "runs": report.runs,
                                          "checkpoints": report.checkpoints,
                                          "bytes": report.bytes, "per_run": report.per_run}))
        else:
            self.stdout.write(str(report))

    # --- output ----------------------------------------------------------------------
    def _print_run(self, run, full=False):
        run.refresh_from_db()
        if self.as_json:
            self.stdout.write(json.dumps(_run_dict(run, full=full), indent=2))
            return
        self.stdout.write(f"run {run.id}  {run.agent} v{run.agent_version}  {run.status}  "
                          f"step {run.step_no}  branch {run.branch}")
        if full:
            for name in ("inputs", "output", "error", "attention"):
                value = getattr(run, name)
                if value:
                    self.stdout.write(f"  {name}: {json.dumps(value)[:2000]}")

    def _follow(self, run_id, timeout, quiet):
        seen, deadline = 0, time.monotonic() + timeout
        while True:
            events = list(RunEvent.objects.filter(run_id=run_id, seq__gt=seen).order_by("seq"))
            for event in events:
                seen = event.seq
                if not quiet:
                    line = event.as_message() if self.as_json else f"#{event.seq} {event.kind} {json.dumps(event.data)}"
                    self.stdout.write(json.dumps(line) if self.as_json else line)
            run = Run.objects.get(pk=run_id)
            if run.status in FINAL_STATUSES or run.status == "needs_attention":
                if quiet:
                    self._print_run(run, full=True)
                if run.status != SUCCEEDED:
                    sys.exit(1)
                return
            if time.monotonic() > deadline:
                raise CommandError(f"run {run_id} still {run.status} after {timeout} s")
            time.sleep(0.2)


def _json_arg(text, name):
    try:
        return untrusted.parse_json(text, max_bytes=settings.AGENTOPS["MAX_INPUT_BYTES"])
    except untrusted.UntrustedInputError as exc:
        raise CommandError(f"{name}: {exc}") from None


def _get(run_id) -> Run:
    matches = list(Run.objects.filter(pk__startswith=run_id)[:2]) if len(run_id) >= 6 else []
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
            "created_at": run.created_at.isoformat()}
    if full:
        data.update(inputs=run.inputs, output=run.output, error=run.error,
                    attention=run.attention, epoch=run.epoch)
    return data
