"""The composer: POST a message to a chat run (the owner only, like answering it)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from runs import selectors
from runs.chat.forms import ChatMessageForm
from runs.chat.services import ChatRefused, send_message
from runs.durable import DurableError
from runs.web.views.panels import render_panels

PANELS = ["conversation", "input", "actions"]


@login_required
@require_POST
def run_chat(request, run_id: str):
    run = selectors.run_get_for_user(request.user, run_id)
    form = ChatMessageForm(request.POST)
    error, status = "", 200
    if run.owner_id != request.user.pk:
        error, status = "Only the run's owner can write to it.", 409
    elif not form.is_valid():
        error, status = " ".join(e for errors in form.errors.values() for e in errors), 422
    else:
        text = form.cleaned_data["text"]
        try:
            send_message(run=run, user=request.user, text=text,
                         end=form.cleaned_data["end"])
        except (ChatRefused, DurableError) as exc:
            error, status = str(exc), 409
    run.refresh_from_db()
    if request.htmx:
        html = render_panels(request, run, PANELS, oob=True,
                             conversation={"error": error} if error else {})
        return HttpResponse(html, status=status)
    if error:
        messages.error(request, error)
    else:
        messages.success(request, "Message sent.")
    return redirect(run)
