"""Forms of the operator pages. Each action form takes a reason: every operator
action is an audit entry, and the reason is what the next person reads."""

from __future__ import annotations

from django import forms

from runs.durable import registry
from runs.durable.records import STATUSES
from runs.durable.state_patch import path_edit
from runs.web.forms import JSONTextField
from runs.web.untrusted import is_run_id
from runs.worker import stalls

MAX_BULK = 500
MAX_JSON_BYTES = 1024 * 1024

# Only orders an index serves at any size. Sorting 100,000 runs by last activity would
# need an index on updated_at, which every engine commit changes (no HOT updates).
SORTS = {
    "-created": "newest first",
    "created": "oldest first",
}

STALLED_CHOICES = [
    ("", "stalled or not"),
    ("any", "stalled (any reason)"),
    (stalls.LEASE_LOST, "stalled: lease holder gone"),
    (stalls.SILENT, "stalled: no progress"),
    (stalls.UNCLAIMED, "stalled: no worker claims it"),
]


class RunFilterForm(forms.Form):
    q = forms.CharField(required=False, max_length=100, label="Search",
                        widget=forms.TextInput(attrs={"placeholder": "run ID or owner",
                                                      "type": "search"}))
    status = forms.ChoiceField(required=False, choices=[])
    agent = forms.ChoiceField(required=False, choices=[])
    owner = forms.CharField(required=False, max_length=150,
                            widget=forms.TextInput(attrs={"placeholder": "username"}))
    worker = forms.CharField(required=False, max_length=200,
                             widget=forms.TextInput(attrs={"placeholder": "host or host:pid"}))
    attention = forms.BooleanField(required=False, label="needs attention")
    # The stall rule's own kinds (runs/worker/stalls.py), not a second rule of "quiet for N minutes".
    stalled = forms.ChoiceField(required=False, label="stalled", choices=STALLED_CHOICES)
    sort = forms.ChoiceField(required=False, choices=list(SORTS.items()))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["status"].choices = [("", "any status")] + [(s, s.replace("_", " "))
                                                                for s in STATUSES]
        self.fields["agent"].choices = [("", "any agent")] + [(n, n) for n in registry.names()]

    def filters(self) -> dict:
        """The valid filters; invalid ones are dropped (and shown as errors)."""
        if self.is_valid():
            return {k: v for k, v in self.cleaned_data.items() if v not in (None, "", False)}
        return {k: v for k, v in getattr(self, "cleaned_data", {}).items()
                if k not in self.errors and v not in (None, "", False)}


class ReasonForm(forms.Form):
    reason = forms.CharField(max_length=2000, strip=True,
                             widget=forms.TextInput(attrs={"placeholder": "why (required)"}),
                             error_messages={"required": "Give a reason: it goes into the audit trail."})


class RunActionForm(ReasonForm):
    ACTIONS = {
        "pause": "Pause",
        "resume": "Resume",
        "cancel": "Cancel",
        "retry": "Retry from last checkpoint",
        "upgrade": "Continue on the current version",
        "retry_now": "Retry now",
        "give_up": "Give up retrying",
    }
    # What cannot be taken back: the pages set these apart and ask before doing them.
    CONFIRM = {
        "cancel": "Cancel this run? It stops at its next effect boundary and cannot be resumed.",
        "give_up": "Give up retrying? The call fails with a tool error the agent sees.",
    }
    action = forms.ChoiceField(choices=list(ACTIONS.items()))


class RollbackForm(ReasonForm):
    THEN = {
        "pause": "Stay paused on the new branch (resume it when ready)",
        "resume": "Resume: the new branch starts at once",
    }
    checkpoint = forms.IntegerField(min_value=1)
    then = forms.ChoiceField(choices=list(THEN.items()), widget=forms.RadioSelect,
                             label="After the rollback",
                             error_messages={"required": "Choose whether the run resumes or "
                                                         "stays paused after the rollback."})

    CHILDREN = {
        "cancel": "Cancel them (those not ended yet)",
        "keep": "Keep them running (they stay linked; nothing waits for them)",
    }
    # Asked only when the rollback undoes a spawn (docs/children.md); cancel by default.
    children = forms.ChoiceField(choices=list(CHILDREN.items()), widget=forms.RadioSelect,
                                 required=False, label="The child runs its undone spawns "
                                                       "launched")

    def resume(self) -> bool:
        return self.cleaned_data["then"] == "resume"

    def children_choice(self) -> str:
        return self.cleaned_data.get("children") or "cancel"


class JSONField(JSONTextField):
    """JSON typed by an operator: sentences for messages, up to MAX_JSON_BYTES."""

    wrong_kind = "The state must be a JSON {kind} ({{...}})."

    def __init__(self, *, object_only=False, **kwargs):
        super().__init__(expected="object" if object_only else None, max_bytes=MAX_JSON_BYTES,
                         **kwargs)

    def message(self, problem: str) -> str:
        return f"{problem[:1].upper()}{problem[1:]}."

    def prepare_value(self, value):
        if value is None:  # nothing given (no initial): an empty box, not the text "null"
            return ""
        return value if isinstance(value, str) else super().prepare_value(value)


class ResolveForm(ReasonForm):
    RESOLUTIONS = {
        "done": "It happened: use this result",
        "retry": "Retry it (same idempotency key)",
        "skip": "Skip it: the call returns this result",
    }
    seq = forms.IntegerField(min_value=0, widget=forms.HiddenInput)
    resolution = forms.ChoiceField(choices=list(RESOLUTIONS.items()), widget=forms.RadioSelect)
    result = JSONField(required=False, label="Result (JSON)",
                       widget=forms.Textarea(attrs={"rows": 3, "placeholder": "null"}))


class EditStateForm(ReasonForm):
    """One edit of the state at a path (a JSON Pointer), or a JSON Patch (RFC 6902):
    never the whole document. `patch()` is the edit as a patch; whether it fits the
    state is checked against the state (runs/durable/state_patch.py)."""

    OPS = {"replace": "Replace the value at the path",
           "add": "Add it at the path (a new key, or into an array; /- appends)",
           "remove": "Remove the value at the path"}
    checkpoint = forms.IntegerField(min_value=1, widget=forms.HiddenInput)
    op = forms.ChoiceField(choices=list(OPS.items()), initial="replace", widget=forms.RadioSelect,
                           label="Edit")
    path = forms.CharField(required=False, strip=False, max_length=2000, label="Path",
                           widget=forms.TextInput(attrs={"placeholder": "/pages/0/title",
                                                         "spellcheck": "false",
                                                         "class": "mono"}))
    value = JSONField(required=False, label="New value (JSON)",
                      widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false",
                                                   "class": "mono"}))
    json_patch = JSONField(required=False, label="Or a JSON Patch (RFC 6902)",
                           widget=forms.Textarea(attrs={
                               "rows": 4, "spellcheck": "false", "class": "mono",
                               "placeholder": '[{"op": "replace", "path": "/a", "value": 1}]'}))

    def clean_path(self):
        path = self.cleaned_data["path"]
        if path and not path.startswith("/"):
            raise forms.ValidationError('A path starts with "/" (a JSON Pointer, e.g. '
                                        '/pages/0/title); empty is the whole state.')
        return path

    def clean_json_patch(self):
        patch = self.cleaned_data["json_patch"]
        if patch is not None and (not isinstance(patch, list) or not patch):
            raise forms.ValidationError("A JSON Patch is a non-empty list of operations.")
        return patch

    def clean(self):
        data = super().clean()
        if (data.get("json_patch") is None and data.get("op") != "remove"
                and not (self.data.get(self.add_prefix("value")) or "").strip()
                and "value" not in self.errors):
            self.add_error("value", "Give the new value (JSON: null, 3, \"text\", {...}).")
        return data

    def patch(self) -> list[dict]:
        data = self.cleaned_data
        if data["json_patch"] is not None:
            return data["json_patch"]
        return path_edit(data["op"], data["path"], data["value"])

    def confirmed(self, previewed: str) -> bool:
        """Confirm was pressed on the preview of this very edit."""
        return "confirm" in self.data and self.data.get("previewed") == previewed

class BulkActionForm(ReasonForm):
    ACTIONS = {"pause": "Pause", "resume": "Resume", "cancel": "Cancel",
               "retry_now": "Retry now (runs waiting to retry)",
               "give_up": "Give up retrying"}
    # asked in the browser before the form is sent (static/js/confirm.js)
    CONFIRM = {
        "cancel": "Cancel the selected runs? They stop at their next effect boundary and "
                  "cannot be resumed.",
        "give_up": "Give up retrying on the selected runs? Their calls fail with a tool error "
                   "the agent sees.",
    }
    action = forms.ChoiceField(choices=list(ACTIONS.items()))
    run = forms.MultipleChoiceField(error_messages={"required": "Select at least one run."})

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        run_ids = self.data.getlist("run") if hasattr(self.data, "getlist") else []
        self.fields["run"].choices = [(run_id, run_id) for run_id in run_ids[:MAX_BULK]]

    def clean_run(self):
        ids = self.cleaned_data["run"]
        if len(ids) > MAX_BULK:
            raise forms.ValidationError(f"At most {MAX_BULK} runs at once.")
        if not all(is_run_id(run_id) for run_id in ids):
            raise forms.ValidationError("Run ids are 1-32 letters, digits, '-' or '_'.")
        return ids
