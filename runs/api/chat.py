"""A chat message to a run over the API: what the run page's message box does, through
the same form (8,000 characters, no NUL, not empty unless it ends the chat) and the same
service (runs/chat/services.py): taken at once by a run waiting for it, queued for its
next wait otherwise. Only the run's owner writes to it, as on the page."""

from __future__ import annotations

from typing import Literal

from ninja import Field, Router, Schema
from ninja.errors import HttpError

from runs import selectors
from runs.api import schemas as s
from runs.api.auth import need
from runs.api.endpoints import WRITE, _check_run_id, run_for
from runs.api.present import run_out
from runs.chat.forms import ChatMessageForm
from runs.chat.models import MAX_MESSAGE_CHARS
from runs.chat.services import ChatRefused, send_message

router = Router()  # mounted by runs/api/api.py


class MessageIn(Schema):
    text: str = Field("", max_length=MAX_MESSAGE_CHARS,
                      description="the message (optional when end is true)")
    end: bool = Field(False, description="end the chat (the page's End chat)")


class MessageOut(Schema):
    id: int
    state: Literal["queued", "delivered"] = Field(
        description="delivered: the run was waiting and took it; queued: it takes it at its "
                    "next wait")
    text: str
    end: bool
    run: s.RunOut


@router.post("/runs/{run_id}/messages", response={200: MessageOut, **WRITE}, tags=["runs"],
             summary="Send a chat message to your run (a chat agent's)")
def send(request, run_id: str, body: MessageIn):
    _check_run_id(run_id)
    run = run_for(request, run_id)
    need(request, "launch")
    if not selectors.owns(request.auth, run):
        raise HttpError(403, "only the run's owner can write to it")
    form = ChatMessageForm({"text": body.text, "end": body.end})
    if not form.is_valid():
        raise HttpError(422, " ".join(e for errors in form.errors.values() for e in errors))
    try:
        message = send_message(run=run, user=request.auth, text=form.cleaned_data["text"],
                               end=form.cleaned_data["end"])
    except ChatRefused as exc:
        raise HttpError(409, str(exc)) from None
    run.refresh_from_db()
    return {"id": message.pk, "state": message.state, "text": message.text, "end": message.end,
            "run": run_out(run)}
