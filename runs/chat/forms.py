from django import forms

from runs.chat.models import MAX_MESSAGE_CHARS


class ChatMessageForm(forms.Form):
    """A message, or the end of the chat (a message is then optional). Django's
    CharField already refuses a NUL character (ProhibitNullCharactersValidator)."""

    text = forms.CharField(max_length=MAX_MESSAGE_CHARS, strip=True, required=False,
                           label="Message")
    end = forms.BooleanField(required=False)

    def clean(self):
        data = super().clean()
        if "text" not in self.errors and not data.get("text") and not data.get("end"):
            self.add_error("text", "Type a message first.")
        return data
