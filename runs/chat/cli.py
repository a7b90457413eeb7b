"""`manage.py runs answer|send`: answer the question a run waits on and talk to a chat from
a shell, through the services the run page uses; and what `--wait` does when a run waits
for its user (the subcommands of runs/management/commands/runs.py; over --url the same
through the API, runs/api/remote.py).

Without --user the shell acts as "cli", trusted like the other shell controls; with
--user it acts as that user, and the page's rule applies: only the run's owner answers
it or writes to it."""

from __future__ import annotations

import json
import sys

from django.core.management.base import CommandError

from runs import selectors, services
from runs.chat.forms import ChatMessageForm
from runs.chat.services import ChatRefused, send_message
from runs.durable import InputValidationError

SUBCOMMANDS = ("answer", "send")
# `--wait` (launch, watch) returns with it when the run waits for input: a script can
# tell "it asks something" from "it ended" (0 succeeded, 1 otherwise).
WAITS_FOR_INPUT = 3


def add_subcommands(sub, subcommand, run_id_help: str, user_help: str) -> None:
    p = subcommand(sub, "answer", "answer the question a run waits on (wait_for_input)",
                   "Answer the question RUN_ID waits on with JSON, checked against the "
                   "question's schema as the run page's form is (`runs show` prints both); "
                   "the run goes on.")
    p.add_argument("run_id", help=run_id_help)
    p.add_argument("answer", metavar="JSON", help="the answer, as JSON: '{\"ok\": true}'")
    p.add_argument("--user", default=None, help=f"{user_help}; only the run's owner may answer")
    p = subcommand(sub, "send", "send a chat message to a run, as the run page's box does",
                   "Send TEXT to a chat agent's run (the built-in assistant's): a run waiting "
                   "for a message takes it at once, a busy one at its next wait. --end ends "
                   "the chat.")
    p.add_argument("run_id", help=run_id_help)
    p.add_argument("text", nargs="?", default="", metavar="TEXT",
                   help="the message (8,000 characters at most)")
    p.add_argument("--end", action="store_true",
                   help="end the chat (after answering TEXT, if given)")
    p.add_argument("--user", default=None, help=f"{user_help}; only the run's owner may write")


def handle(command, name: str, run, opts, user, parse_json) -> None:
    """`user`: the --user's user or None (the shell, trusted); `parse_json(text, option)`
    parses untrusted JSON as the other subcommands' options are."""
    if user is not None and not selectors.owns(user, run):
        raise CommandError(f"--user: only the run's owner can "
                           f"{'answer it' if name == 'answer' else 'write to it'}")
    if name == "answer":
        value = parse_json(opts["answer"], "JSON")
        try:
            services.run_provide_input(run_id=run.pk, value=value, user=user or "cli")
        except InputValidationError as exc:  # where in the answer, as the page's form shows
            raise CommandError(f"JSON: {exc.field + ': ' if exc.field else ''}{exc}") from None
        return
    form = ChatMessageForm({"text": opts["text"], "end": opts["end"]})
    if not form.is_valid():
        raise CommandError(" ".join(e for errors in form.errors.values() for e in errors))
    try:
        message = send_message(run=run, user=user, text=form.cleaned_data["text"],
                               end=form.cleaned_data["end"])
    except ChatRefused as exc:
        raise CommandError(str(exc)) from None
    except InputValidationError as exc:  # the waiting prompt's schema refuses the message
        raise CommandError(f"the run's question refuses the message: {exc}") from None
    command.note(sent(message.state))


def sent(state: str) -> str:
    return "message delivered" if state == "delivered" else \
        "message queued: the run takes it at its next wait"


def waits_for_input(status: str, attention) -> bool:
    return status == "waiting" and (attention or {}).get("kind") == "input"


def stop_waiting(command, run_id: str, attention: dict, as_json: bool) -> None:
    """Print the question (the run itself was printed before) and exit 3."""
    if not as_json:
        command.stdout.write(f"  waits for input: {attention.get('prompt') or '(no prompt)'}")
        if attention.get("schema"):
            command.stdout.write(f"  answer's schema: {json.dumps(attention['schema'])}")
        command.stdout.write(f"  answer with: manage.py runs answer {run_id} JSON  (a chat: "
                             f"manage.py runs send {run_id} TEXT)")
    command.stdout.flush()
    sys.exit(WAITS_FOR_INPUT)
