from django import forms
from django.conf import settings

from runs.api.models import SCOPES

EXPIRY_DAYS = [(7, "7 days"), (30, "30 days"), (90, "90 days"), (365, "1 year")]
SCOPE_HELP = {"read": "read: agents, your runs, their events, checkpoints and effects",
              "launch": "launch: launch runs, cancel and answer your own",
              "operate": "operate: operator actions (if you are an operator)"}


class TokenForm(forms.Form):
    name = forms.CharField(max_length=100, strip=True,
                           widget=forms.TextInput(attrs={"placeholder": "e.g. nightly job"}))
    scopes = forms.MultipleChoiceField(choices=[(s, SCOPE_HELP[s]) for s in SCOPES],
                                       widget=forms.CheckboxSelectMultiple, initial=["read"])
    days = forms.TypedChoiceField(choices=EXPIRY_DAYS, coerce=int, initial=30,
                                  label="Expires after")

    def clean_days(self):
        days = self.cleaned_data["days"]
        if days > settings.AGENTOPS["API_TOKEN_MAX_DAYS"]:
            raise forms.ValidationError(
                f"At most {settings.AGENTOPS['API_TOKEN_MAX_DAYS']} days.")
        return days
