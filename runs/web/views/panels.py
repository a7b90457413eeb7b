"""The run page's server-rendered panels. The page renders them all once; the live
page asks for the ones an event made stale (`run_panels`), swapped out of band."""

from __future__ import annotations

from django.template.loader import render_to_string

from runs import selectors
from runs.budgets.ledger import family_totals
from runs.chat.models import MAX_MESSAGE_CHARS
from runs.chat.selectors import queued_messages
from runs.chat.services import waiting_for_message
from runs.chat.transcript import conversation_key, transcript
from runs.durable import records as r
from runs.web.forms import SchemaForm
from runs.web.views.present import build_timeline, output_rows, pretty_json

PANELS = ("stats", "actions", "input", "effects", "timeline", "output", "budget",
          "conversation", "children")


def waiting_for_input(run) -> bool:
    return run.status == r.WAITING and (run.attention or {}).get("kind") == "input"


def input_form(run, data=None) -> SchemaForm | None:
    if not waiting_for_input(run):
        return None
    return SchemaForm(run.attention.get("schema"), data=data, prefix="answer")


def question_of(run) -> str:
    """Which question a run waits on: its place in the run's log."""
    attention = run.attention or {}
    return f"{run.branch}:{attention.get('step_no')}:{attention.get('seq')}"


def panel_context(run, name: str, *, form=None, error: str = "", live: bool = False) -> dict:
    """`live`: drawn for the page's live refresh (partials.py), not in answer to a form."""
    if name == "stats":
        return {"current_step": selectors.run_current_step(run)}
    if name == "actions":
        return {"can_cancel": run.status not in r.FINAL_STATUSES, "attention": run.attention
                if run.status == r.NEEDS_ATTENTION else None, "action_error": error}
    if name == "conversation":
        return chat_context(run, error=error)
    if name == "input":
        # A chat run takes its answers as messages, in the conversation (runs/chat/).
        chat_wait = waiting_for_input(run) and conversation_key(run) is not None
        return {"waiting_input": waiting_for_input(run) and not chat_wait,
                "question": question_of(run), "live": live,
                "form": form if form is not None else input_form(run),
                "prompt": (run.attention or {}).get("prompt", ""), "input_error": error,
                "waiting": run.attention if run.status == r.WAITING and not chat_wait else None}
    if name == "effects":
        effects, total = selectors.run_effects(run)
        return {"effects": effects, "effects_total": total}
    if name == "timeline":
        checkpoints = selectors.run_checkpoints(run)
        return {"timeline": build_timeline(run, checkpoints, selectors.run_trouble_events(run)),
                "checkpoint_count": len(checkpoints)}
    if name == "output":
        context = {"has_output": run.status == r.SUCCEEDED, "run_error": run.error
                   if run.status in (r.FAILED, r.NEEDS_ATTENTION) else None}
        if context["has_output"]:
            context["output_rows"] = output_rows(run.output)
            context["output_json"], context["output_truncated"] = pretty_json(run.output)
            context["output_is_text"] = isinstance(run.output, str)
        return context
    if name == "budget":  # computed by its template's tag (runs/budgets/templatetags)
        return {}
    if name == "children":  # docs/children.md: the tree around the run, and its costs
        children, total = selectors.run_children(run)
        return {"children": children, "children_total": total,
                "family_costs": family_totals(run) if children else None}
    raise KeyError(name)


def chat_context(run, *, error: str = "") -> dict:
    if conversation_key(run) is None:
        return {"is_chat": False, "conversation": {"messages": [], "step": 0}}
    return {"is_chat": True, "conversation": transcript(run),
            "chat_queued": queued_messages(run), "chat_error": error,
            "chat_waiting": waiting_for_message(run), "chat_max": MAX_MESSAGE_CHARS,
            "chat_ended": run.status in r.FINAL_STATUSES}


def render_panels(request, run, names, *, oob: bool, **extra) -> str:
    html = []
    for name in names:
        context = {"run": run, "oob": oob, **panel_context(run, name, **extra.get(name, {}))}
        html.append(render_to_string(f"runs/panels/{name}.html", context, request=request))
    return "".join(html)


def all_panels_context(run) -> dict:
    context = {}
    for name in PANELS:
        context.update(panel_context(run, name))
    return context
