"""Forms of budgets and approvals. Each turns bad input into a message, never a 500."""

from __future__ import annotations

from django import forms
from django.contrib.auth import get_user_model

from runs.durable import control, registry
from runs.durable.errors import InputValidationError

MAX_REASON = 2000


class DecisionForm(forms.Form):
    reason = forms.CharField(max_length=MAX_REASON, required=False, strip=True)


class BudgetForm(forms.Form):
    cost = forms.DecimalField(required=False, min_value=0, max_value=1_000_000_000,
                              decimal_places=6, max_digits=16, label="Budget ($)")
    tokens = forms.IntegerField(required=False, min_value=0, max_value=10 ** 15,
                                label="Token budget")
    reason = forms.CharField(max_length=MAX_REASON, required=False, strip=True)

    def budget(self) -> dict | None:
        data = self.cleaned_data
        budget = {k: (float(data[k]) if k == "cost" else data[k]) for k in ("cost", "tokens")
                  if data.get(k) is not None}
        return budget or None

    def clean(self):
        data = super().clean()
        if not self.errors:
            try:
                control.check_budget(self.budget())
            except InputValidationError as exc:
                raise forms.ValidationError(str(exc)) from None
        return data


class QuotaForm(BudgetForm):
    scope = forms.ChoiceField(choices=[("user", "a user"), ("agent", "an agent")])
    subject = forms.CharField(max_length=150, label="User or agent name")
    period = forms.ChoiceField(choices=[("day", "per day"), ("month", "per month")])
    reason = forms.CharField(max_length=MAX_REASON, strip=True,
                             error_messages={"required": "Give a reason: it goes into the audit trail."})

    def clean(self):
        data = super().clean()
        scope, name = data.get("scope"), data.get("subject")
        if scope == "user" and name:
            user = get_user_model().objects.filter(username=name).first()
            if user is None:
                self.add_error("subject", f"There is no user named {name!r}.")
            data["subject_obj"] = user
        elif scope == "agent" and name:
            if name not in registry.names():
                self.add_error("subject", f"There is no agent named {name!r}.")
            data["subject_obj"] = name
        return data


class LedgerForm(forms.Form):
    group = forms.ChoiceField(required=False, choices=[("run", "per run"), ("user", "per user"),
                                                       ("agent", "per agent"), ("day", "per day")])


class LaunchBudgetForm(forms.Form):
    """The launch page's budget: the agent's default (Agent.default_budget) prefilled;
    both empty: no budget."""

    cost = forms.DecimalField(required=False, min_value=0, max_value=1_000_000_000,
                              decimal_places=6, max_digits=16, label="Budget ($)")
    tokens = forms.IntegerField(required=False, min_value=0, max_value=10 ** 15,
                                label="Token budget")

    @classmethod
    def for_agent(cls, agent_cls, data=None) -> LaunchBudgetForm:
        default = getattr(agent_cls, "default_budget", None) or {}
        return cls(data, prefix="budget", initial=default)

    def launch_budget(self) -> dict | None:
        """None (the agent's default) when the form did not send the fields; {} (no
        budget) when it sent them empty."""
        if not any(self.add_prefix(name) in self.data for name in self.fields):
            return None
        return {k: (float(v) if k == "cost" else v) for k, v in self.cleaned_data.items()
                if v is not None}
