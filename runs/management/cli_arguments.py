"""The subcommands of `manage.py runs` and their arguments, with the help that
`runs --help` and `runs NAME --help` print (runs/management/commands/runs.py runs them)."""

from __future__ import annotations

from runs.operator.forms import ResolveForm, RollbackForm

RUN_ID_HELP = "the run's id, or a unique prefix of at least 6 characters"
REASON_HELP = "why (required: it goes into the audit trail, as in the operator pages)"
USER_HELP = "the acting user's username (default: the audit trail says 'cli')"


def subcommand(sub, name, summary, description=None):
    """`summary` shows in `manage.py runs --help`, `description` in `runs NAME --help`."""
    return sub.add_parser(name, help=summary, description=description or summary)


def add_run_subcommands(sub):
    p = subcommand(sub, "launch", "launch a run of AGENT",
                    "Launch a run of AGENT with the given inputs (validated against the "
                    "agent's input schema) and print it; a worker picks it up.")
    p.add_argument("agent", help="the agent's name (the launch page lists them)")
    p.add_argument("--input", default="{}", help="the inputs, a JSON object (default: {})")
    p.add_argument("--user", default=None, help="the owner's username (default: no owner)")
    p.add_argument("--wait", action="store_true",
                   help="wait until the run ends (exit 0 if it succeeded, else 1) or waits "
                        "for input (exit 3, the question printed: `runs answer` or `runs send`)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds --wait waits (3600)")
    p.add_argument("--idempotency-key", default=None,
                   help="with --url: the same key and inputs launch one run, however often")
    p = subcommand(sub, "list", "list runs, newest first")
    p.add_argument("--status", default=None, help="only runs with this status, e.g. running")
    p.add_argument("--limit", type=int, default=20, help="how many runs (20)")
    p = subcommand(sub, "show", "show one run: status, step, lease, inputs, output, error")
    p.add_argument("run_id", help=RUN_ID_HELP)
    p = subcommand(sub, "watch", "print a run's events as they happen, until it ends",
                    "Follow a run's events from now (or from event N with --from) until the "
                    "run ends or needs attention (exit 0 if it succeeded, else 1) or waits for "
                    "input (exit 3, the question printed: `runs answer` or `runs send`).")
    p.add_argument("run_id", help=RUN_ID_HELP)
    p.add_argument("--from", dest="from_seq", type=int, default=None, metavar="N",
                   help="start at event N (1: the whole history) instead of now")
    p.add_argument("--timeout", type=float, default=3600, help="seconds to follow at most (3600)")
    p = subcommand(sub, "execute", "run a run in this process until it ends or waits",
                    "Claim the run and execute it here, without a worker (for scripts and "
                    "debugging); refused while another worker holds it.")
    p.add_argument("run_id", help=RUN_ID_HELP)


CONTROLS = {  # subcommand: (RunActionForm action, help)
    "pause": ("pause", "pause a run at its next effect boundary"),
    "resume": ("resume", "resume a paused run (or retry a failed one from its last checkpoint)"),
    "cancel": ("cancel", "cancel a run at its next effect boundary"),
    "retry-now": ("retry_now", "start a waiting retry's next attempt now"),
    "give-up": ("give_up", "stop retrying: the call fails with a tool error the agent sees"),
}


def add_control_subcommands(sub):
    for name, (_, summary) in CONTROLS.items():
        p = subcommand(sub, name, summary)
        add_control_arguments(p)
        if name == "resume":
            p.add_argument("--upgrade", action="store_true",
                           help="continue on the agent's current version (new branch)")
    p = subcommand(sub, "rollback", "roll a run back to a checkpoint (a new branch)",
                    "Roll the run back to checkpoint K: it continues on a new branch with new "
                    "idempotency keys. --preview only prints what would be undone.")
    add_control_arguments(p)
    p.add_argument("--checkpoint", type=int, required=True, metavar="K",
                   help="the checkpoint's number")
    p.add_argument("--then", choices=["resume", "pause"], default=None,
                   help="after the rollback the run resumes, or stays paused "
                        "(default: paused if it was paused, else it resumes)")
    p.add_argument("--children", choices=list(RollbackForm.CHILDREN), default="cancel",
                   help="the child runs launched by the spawns it undoes: cancel those not "
                        "ended (default), or keep them running (docs/children.md)")
    p.add_argument("--preview", action="store_true",
                   help="only show what would be undone (needs no reason)")
    p = subcommand(sub, "resolve", "answer an in-doubt effect (it happened, retry it, skip it)")
    add_control_arguments(p)
    p.add_argument("--effect", type=int, required=True, help="the effect's seq in its step")
    p.add_argument("--as", dest="resolution", choices=list(ResolveForm.RESOLUTIONS),
                   required=True, help="done: it happened; retry: call again under the same "
                                       "key; skip: the call returns --result")
    p.add_argument("--result", default="null",
                   help="the tool's result, JSON: what the call returned (done) or is to "
                        "return (skip), for every kind of agent")


def add_control_arguments(p):
    p.add_argument("run_id", help=RUN_ID_HELP)
    p.add_argument("--reason", default="", help=REASON_HELP)
    p.add_argument("--user", default=None, help=USER_HELP)


def add_maintenance_subcommands(sub):
    subcommand(sub, "sweep", "expire dead local workers' leases and run the side jobs, now",
                "What a worker tree's duties do every tick, once: expire the leases of this "
                "host's dead worker processes (their runs are then due for any free worker "
                "slot) and run the features' side jobs (due schedules, webhook deliveries).")
    p = subcommand(sub, "prune", "apply the retention policies of checkpoints, events and "
                                 "effects (docs/retention.md)")
    p.add_argument("--dry-run", action="store_true", help="only say what would be dropped")
