"""Forms of the operator pages. Each action form takes a reason: every operator
action is an audit entry, and the reason is what the next person reads."""

from __future__ import annotations

import json

from django import forms

from runs import stalls
from runs.durable import registry
from runs.durable.records import STATUSES

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
    # The stall rule's own kinds (runs/stalls.py), not a second rule of "quiet for N minutes".
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

    def resume(self) -> bool:
        return self.cleaned_data["then"] == "resume"


class JSONField(forms.CharField):
    widget = forms.Textarea

    def __init__(self, *, object_only=False, **kwargs):
        self.object_only = object_only
        super().__init__(**kwargs)

    def to_python(self, value):
        text = super().to_python(value)
        if text in ("", None):
            return None
        if len(text.encode()) > MAX_JSON_BYTES:
            raise forms.ValidationError(f"Too large: at most {MAX_JSON_BYTES} bytes.")
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc.msg} at line {exc.lineno}, "
                                        f"column {exc.colno}.") from None
        if self.object_only and not isinstance(parsed, dict):
            raise forms.ValidationError("The state must be a JSON object ({...}).")
        return parsed

    def validate(self, value):
        if value is None and self.required:  # {} and [] are values, not "empty"
            raise forms.ValidationError(self.error_messages["required"], code="required")

    def prepare_value(self, value):
        if isinstance(value, str):
            return value
        return json.dumps(value, indent=2, ensure_ascii=False)


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
    state = JSONField(object_only=True, widget=forms.Textarea(attrs={"rows": 20, "cols": 80,
                                                                      "spellcheck": "false"}),
                      error_messages={"required": "The state cannot be empty."})


class BulkActionForm(ReasonForm):
    ACTIONS = {"pause": "Pause", "resume": "Resume", "cancel": "Cancel",
               "retry_now": "Retry now (runs waiting to retry)",
               "give_up": "Give up retrying"}
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
        return ids
