"""`manage.py runs replay-check`: the replay check before a deploy, from a shell or CI
(a subcommand of runs/management/commands/runs.py; runs/deploys/replay_check.py)."""

from __future__ import annotations

import argparse
import json
import sys

from runs.deploys import replay_check as check
from runs.deploys.selectors import REPLAY_CHECK_LIMIT
from runs.durable.records import STATUSES

DESCRIPTION = (
    "Replay recorded histories against the agent code on disk (the agents this process "
    "loads: the installed apps' and AGENTOPS_AGENT_MODULES), with no side effect: no "
    "tool is called and nothing is written. Runs not ended come first, then the newest "
    "ended ones, --limit in all. Each run's verdict is printed (clean, or where it first "
    "diverges), then a summary. Exit status 1 if a run not ended would not move to this "
    "code (it diverges, its agent is missing here, or its history cannot be replayed), "
    "else 0: a run that has ended and diverges is reported but does not fail the check. "
    "Run it in CI with the new code checked out and DATABASE_URL pointing at the "
    "database of the deploy's runs, before the deploy (docs/deploys.md).")


def add_subcommands(sub, subcommand) -> None:
    p = subcommand(sub, "replay-check", "replay histories on the code on disk (before a deploy)",
                   DESCRIPTION)
    p.add_argument("--agent", default="", help="only the runs of this agent")
    p.add_argument("--status", nargs="+", action="extend", default=[], choices=STATUSES,
                   metavar="S", help="only runs with these statuses (any of "
                                     f"{', '.join(STATUSES)})")
    p.add_argument("--limit", type=_positive, default=REPLAY_CHECK_LIMIT,
                   help=f"how many runs at most ({REPLAY_CHECK_LIMIT})")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1, not {value}")
    return value


def handle(command, opts) -> None:
    report = check.replay_check(agent=opts["agent"], statuses=opts["status"],
                                limit=opts["limit"])
    if command.as_json:
        command.stdout.write(json.dumps(report.as_dict(), indent=2))
    else:
        for row in report.rows:
            command.stdout.write(line(row))
        command.stdout.write(report.summary())
        command.stdout.write(verdict_line(report))
    if not report.passed:
        sys.exit(1)


def line(row: dict) -> str:
    word = {check.CLEAN: "ok", check.DIVERGES: "DIVERGES", check.UNKNOWN_AGENT: "NO AGENT",
            check.LATER: "later", check.ERROR: "ERROR"}[row["verdict"]]
    status = row["status"] if row["in_flight"] else f"{row['status']} (ended)"
    return (f"{row['run_id']}  {row['agent']} v{row['version']:<6} {status:<22} "
            f"{word}: {row['message']}")


def verdict_line(report: check.Report) -> str:
    blocking = report.blocking
    if not blocking:
        return "PASSED: no run in flight would be stopped by this code"
    return (f"FAILED: {len(blocking)} run{'s' if len(blocking) != 1 else ''} in flight would "
            "not move to this code: they would wait for a worker of their own code or an "
            "operator's upgrade")
