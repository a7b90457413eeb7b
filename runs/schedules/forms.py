"""The schedule form. Everything is checked here before anything is saved: the cron
expression (croniter), the interval's range, and the inputs against the agent's own
input schema (the check a launch makes), so a bad schedule is a form error, not a
slot that fails to launch later."""

from __future__ import annotations

from django import forms

from runs.durable import AgentNotFoundError, InputValidationError, registry, validate_inputs
from runs.web.forms import JSONTextField

from .models import Kind, Overlap, Schedule
from .timing import MAX_INTERVAL, MIN_INTERVAL, TimingError, check_cron, check_interval


class ScheduleForm(forms.ModelForm):
    agent = forms.ChoiceField(choices=[])
    inputs = JSONTextField(expected="object", required=False, label="Inputs (JSON object)",
                           help_text="Left out fields take the agent's defaults.")
    kind = forms.ChoiceField(choices=Kind.choices, widget=forms.RadioSelect, label="Timing")
    cron = forms.CharField(required=False, max_length=120, label="Cron expression",
                           help_text="Five fields in UTC: minute hour day month weekday, "
                                     "e.g. */15 * * * * or 0 3 * * 1-5.")
    interval_seconds = forms.IntegerField(required=False, min_value=MIN_INTERVAL,
                                          max_value=MAX_INTERVAL, label="Interval (seconds)")
    overlap = forms.ChoiceField(choices=Overlap.choices, label="When the previous run is still "
                                                              "active")

    class Meta:
        model = Schedule
        fields = ["name", "agent", "inputs", "kind", "cron", "interval_seconds", "overlap",
                  "paused"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["agent"].choices = [(n, n) for n in registry.names()]
        self.fields["inputs"].widget.attrs.update(rows=5, spellcheck="false",
                                                  **{"class": "mono"})
        self.fields["cron"].widget.attrs.update({"class": "mono", "placeholder": "*/5 * * * *"})

    def clean_inputs(self):
        return self.cleaned_data.get("inputs") or {}

    def clean(self):
        data = super().clean()
        kind = data.get("kind")
        if kind == Kind.CRON:
            try:
                data["cron"] = check_cron(data.get("cron", ""))
            except TimingError as exc:
                self.add_error("cron", str(exc))
            data["interval_seconds"] = None
        elif kind == Kind.INTERVAL:
            if "interval_seconds" not in self.errors:
                try:
                    data["interval_seconds"] = check_interval(data.get("interval_seconds"))
                except TimingError as exc:
                    self.add_error("interval_seconds", str(exc))
            data["cron"] = ""
        agent, inputs = data.get("agent"), data.get("inputs")
        if agent and inputs is not None and "inputs" not in self.errors:
            try:
                validate_inputs(type(registry.get(agent)), inputs)
            except AgentNotFoundError:
                self.add_error("agent", "no such agent")
            except InputValidationError as exc:
                where = f" (at {exc.field})" if getattr(exc, "field", "") else ""
                self.add_error("inputs", f"{exc}{where}")
        return data

    def values(self) -> dict:
        return {k: self.cleaned_data[k] for k in self.Meta.fields if k in self.cleaned_data}


class PauseForm(forms.Form):
    paused = forms.TypedChoiceField(choices=[("1", "pause"), ("0", "resume")],
                                    coerce=lambda v: v == "1")
