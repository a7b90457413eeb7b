"""The state editor: browse the latest checkpoint's state by path, edit one path (or
post a JSON Patch), see the diff, confirm. Only the edit is posted, never the
document, so a state of any size the run may hold can be edited; a post too large
for the server (DATA_UPLOAD_MAX_MEMORY_SIZE) comes back as this form with an error."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import filesizeformat
from django.views.decorators.http import require_http_methods

from runs import services
from runs.durable import DurableError
from runs.durable.errors import StaleEditError, StatePatchError
from runs.durable.state_patch import apply_patch, check_fresh
from runs.models import Run
from runs.operator import selectors, state_editor
from runs.operator.forms import EditStateForm
from runs.operator.views import operator_required


@require_http_methods(["GET", "POST"])
@operator_required
def edit_state(request, run_id):
    run = get_object_or_404(Run.objects.select_related("owner"), pk=run_id)
    checkpoint, state = selectors.latest_state(run)
    if request.method == "GET":
        path = request.GET.get("path", "")
        form = EditStateForm(initial=_initial(checkpoint, state, path))
        return _render(request, run, checkpoint, state, form, path)
    form = EditStateForm(request.POST)
    path = request.POST.get("path", "")
    if checkpoint is None or not form.is_valid():
        return _render(request, run, checkpoint, state, form, path, status=400)
    patch = form.patch()
    try:
        check_fresh(run.pk, form.cleaned_data["checkpoint"], checkpoint.number)
    except StaleEditError as exc:  # shown again on the latest state, the edit kept
        form = EditStateForm(initial={**form.cleaned_data, "checkpoint": checkpoint.number})
        return _render(request, run, checkpoint, state, form, path, error=str(exc), status=409)
    try:
        edited = apply_patch(state, patch)
    except StatePatchError as exc:
        form.add_error("json_patch" if form.cleaned_data["json_patch"] else "path", str(exc))
        return _render(request, run, checkpoint, state, form, path, status=400)
    token = state_editor.preview_token(checkpoint.number, patch)
    if not form.confirmed(token):
        notice = (None if "confirm" not in request.POST else
                  "The edit changed after its preview: check this diff, then confirm.")
        return _render(request, run, checkpoint, state, form, path, error=notice,
                       changes=state_editor.changes(state, edited, patch), token=token)
    try:
        done = services.run_patch_state(run_id=run.pk, patch=patch, user=request.user,
                                        reason=form.cleaned_data["reason"],
                                        checkpoint=form.cleaned_data["checkpoint"])
    except DurableError as exc:
        return _render(request, run, checkpoint, state, form, path, error=str(exc), status=409)
    messages.success(request, f"State edited at {', '.join(op['path'] or '/' for op in patch)}: "
                              f"a new checkpoint on branch {done.branch}; the run is paused: "
                              "resume it when ready.")
    return redirect("operator:run", run_id=run.pk)


@operator_required
def too_large(request, run_id):
    """The editor again, after a post over DATA_UPLOAD_MAX_MEMORY_SIZE (its data is
    not read: there is nothing to keep of it)."""
    run = get_object_or_404(Run.objects.select_related("owner"), pk=run_id)
    checkpoint, state = selectors.latest_state(run)
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    sent = request.META.get("CONTENT_LENGTH") or "?"
    error = (f"The edit was too large to send: {_size(sent)}, over the {filesizeformat(limit)} "
             "a form may post. Edit a smaller part of the state: a deeper path, or a JSON "
             "Patch of the values that change. Nothing was changed.")
    form = EditStateForm(initial=_initial(checkpoint, state, ""))
    return _render(request, run, checkpoint, state, form, "", error=error, status=413)


edit_state.too_large = too_large  # the 400 handler's hook (runs/web/views/errors.py)


def _size(content_length: str) -> str:
    return filesizeformat(int(content_length)) if content_length.isdigit() else "unknown size"


def _initial(checkpoint, state, path: str) -> dict:
    initial = {"checkpoint": checkpoint.number if checkpoint else None, "op": "replace",
               "path": path}
    try:
        text, cut = state_editor.shown_text(state_editor.value_at(state, path))
    except LookupError:
        return initial
    if not cut:  # too big to edit whole: edit a deeper path, or send a patch
        initial["value"] = text
    return initial


def _render(request, run, checkpoint, state, form, path, *, changes=None, error=None,
            token=None, status=200):
    context = {"run": run, "form": form, "checkpoint": checkpoint, "error": error,
               "changes": changes, "preview_token": token, "path": path, "ops_section": "runs"}
    if state is not None:
        context.update(_browse(state, path))
    return render(request, "operator/edit_state.html", context, status=status)


def _browse(state, path: str) -> dict:
    try:
        value = state_editor.value_at(state, path)
    except LookupError:
        return {"missing": path}
    children, count = state_editor.children(value, path)
    text, cut = state_editor.shown_text(value)
    return {"children": children, "child_count": count, "crumbs": _crumbs(path),
            "value_text": text, "value_cut": cut, "value_kind": state_editor.kind(value),
            "value_size": len(state_editor.dumps(value).encode())}


def _crumbs(path: str) -> list[tuple[str, str]]:
    """(label, path) of each level from the root down to `path`."""
    parts = path.split("/")[1:] if path else []
    crumbs = [("state", "")]
    for i, part in enumerate(parts):
        crumbs.append((part.replace("~1", "/").replace("~0", "~"), "/" + "/".join(parts[:i + 1])))
    return crumbs
