"""The Deploys page's form: choose runs (all of a group waiting for one code, or those
ticked), see the preview, then confirm with a reason (each upgrade is audited)."""

from __future__ import annotations

from django import forms

from runs.deploys.services import MAX_RUNS
from runs.operator.forms import ReasonForm
from runs.web.untrusted import is_run_id


class RunIdsField(forms.Field):
    """Run ids from ticked boxes or the preview's hidden inputs."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value) -> list[str]:
        ids = list(dict.fromkeys(value or []))
        if len(ids) > MAX_RUNS:
            raise forms.ValidationError(f"At most {MAX_RUNS} runs at once: choose fewer, "
                                        "or upgrade a group a batch at a time.")
        if not all(isinstance(run_id, str) and is_run_id(run_id) for run_id in ids):
            raise forms.ValidationError("Run ids are 1-32 letters, digits, '-' or '_'.")
        return ids


class UpgradeForm(ReasonForm):
    STEPS = {"preview": "Preview the upgrade", "upgrade": "Upgrade these runs"}
    do = forms.ChoiceField(choices=list(STEPS.items()))
    run = RunIdsField(required=False)
    group = forms.ChoiceField(required=False, choices=[],
                              error_messages={"invalid_choice": "No run of that code waits any "
                                                                "more: the list below is fresh."})

    def __init__(self, *args, groups=(), **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["group"].choices = [("", "")] + [(key, key) for key in groups]
        self.fields["reason"].required = False  # a preview needs none; clean() asks for it

    def clean(self):
        data = super().clean()
        if data.get("do") == "upgrade" and not data.get("reason"):
            self.add_error("reason", "Give a reason: it goes into the audit trail of each run.")
        if data.get("do") == "upgrade" and not data.get("run") and "run" not in self.errors:
            self.add_error("run", "Preview the runs to upgrade first.")
        if data.get("do") == "preview" and not data.get("run") and not data.get("group") \
                and not self.errors:
            self.add_error(None, "Choose runs: tick some, or preview a whole group.")
        return data

    @property
    def confirming(self) -> bool:
        return self.cleaned_data.get("do") == "upgrade"
