"""The subscription form: the URL is checked by addresses.check_url (http(s) only, no
private address written in it unless allowed), the scope "all" only for operators."""

from __future__ import annotations

from django import forms

from .addresses import AddressRefused, check_url
from .models import EVENT_TYPES, Scope, Subscription


class SubscriptionForm(forms.ModelForm):
    url = forms.CharField(max_length=2000, label="Endpoint URL",
                          help_text="http:// or https://; each delivery is a signed POST "
                                    "(Standard Webhooks).",
                          widget=forms.URLInput(attrs={"placeholder": "https://example.com/hooks"}))
    events = forms.MultipleChoiceField(choices=EVENT_TYPES, widget=forms.CheckboxSelectMultiple,
                                       error_messages={"required": "choose at least one event"})
    scope = forms.ChoiceField(choices=Scope.choices, label="Runs")

    class Meta:
        model = Subscription
        fields = ["url", "description", "events", "scope", "active"]

    def __init__(self, *args, may_subscribe_to_all: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.may_subscribe_to_all = may_subscribe_to_all
        if not may_subscribe_to_all:
            self.fields["scope"].choices = [(Scope.MINE, Scope.MINE.label)]
            self.fields["scope"].help_text = "Your own runs."

    def clean_url(self):
        try:
            return check_url(self.cleaned_data.get("url", ""))
        except AddressRefused as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_scope(self):
        scope = self.cleaned_data.get("scope")
        if scope == Scope.ALL and not self.may_subscribe_to_all:
            raise forms.ValidationError("only operators may subscribe to every run")
        return scope

    def values(self) -> dict:
        return {k: self.cleaned_data[k] for k in self.Meta.fields if k in self.cleaned_data}
