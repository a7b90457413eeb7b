"""Forms built from JSON Schema: an agent's input schema (launch) and the schema of a
question a run asks (wait_for_input).

Only the shape of the form comes from here; the engine validates again with the
full schema and its errors (InputValidationError.field) are put next to the field.
"""

from __future__ import annotations

import json

from django import forms
from django.conf import settings

from runs.web.untrusted import UntrustedInputError, parse_json

MAX_TEXT_INPUT = 200
VALUE_FIELD = "value"


class JSONTextField(forms.CharField):
    """Arrays, objects and untyped values: typed as JSON text, parsed and checked by
    runs/web/untrusted.py (size, depth, NUL, lone surrogates, non-finite numbers)."""

    widget = forms.Textarea
    wrong_kind = "expected a JSON {kind}"

    def __init__(self, *, expected: str | None = None, max_bytes: int | None = None, **kwargs):
        self.expected = expected
        self.max_bytes = max_bytes
        super().__init__(**kwargs)

    def widget_attrs(self, widget):
        return {**super().widget_attrs(widget), "data-json": "true"}

    def prepare_value(self, value):
        if isinstance(value, (dict, list)):
            return json.dumps(value, indent=2, ensure_ascii=False)
        return value

    def to_python(self, value):
        value = super().to_python(value)
        if value in self.empty_values:
            return None
        try:
            parsed = parse_json(value, max_bytes=self.max_bytes
                                or settings.AGENTOPS["MAX_INPUT_BYTES"])
        except UntrustedInputError as exc:
            raise forms.ValidationError(self.message(str(exc))) from None
        kinds = {"array": list, "object": dict}
        if self.expected in kinds and not isinstance(parsed, kinds[self.expected]):
            raise forms.ValidationError(self.wrong_kind.format(kind=self.expected))
        return parsed

    def message(self, problem: str) -> str:
        return problem

    def validate(self, value):
        if value is None and self.required:  # {} and [] are values, not "empty"
            raise forms.ValidationError(self.error_messages["required"], code="required")


def _label(name: str, prop: dict) -> str:
    return prop.get("title") or name.replace("_", " ").capitalize()


def field_for(name: str, prop: dict, required: bool) -> forms.Field:
    """One form field for one schema property."""
    kind = prop.get("type")
    if isinstance(kind, list):  # ["string", "null"] and the like: the first real type
        kind = next((k for k in kind if k != "null"), None)
    common = {"label": _label(name, prop), "help_text": prop.get("description", ""),
              "required": required}
    if "default" in prop:
        common["initial"] = prop["default"]
    if "enum" in prop:
        choices = [(json.dumps(v), str(v)) for v in prop["enum"]]
        if not required:
            choices = [("", "—")] + choices
        if "default" in prop:
            common["initial"] = json.dumps(prop["default"])
        return forms.TypedChoiceField(choices=choices, coerce=json.loads, empty_value=None,
                                      **common)
    if kind == "boolean":
        return forms.BooleanField(**{**common, "required": False})
    if kind == "integer":
        return forms.IntegerField(min_value=prop.get("minimum"), max_value=prop.get("maximum"),
                                  **common)
    if kind == "number":
        step = "any"
        field = forms.FloatField(min_value=prop.get("minimum"), max_value=prop.get("maximum"),
                                 **common)
        field.widget.attrs["step"] = step
        return field
    if kind == "string":
        max_length = prop.get("maxLength")
        textarea = prop.get("format") == "textarea" or (max_length or 0) > MAX_TEXT_INPUT
        field = forms.CharField(max_length=max_length, min_length=prop.get("minLength"),
                                strip=False, widget=forms.Textarea if textarea else None,
                                **common)
        if textarea:
            field.widget.attrs["rows"] = 4
        return field
    field = JSONTextField(expected=kind, **common)
    field.widget.attrs.update(rows=4, spellcheck="false", **{"class": "mono"})
    return field


class SchemaForm(forms.Form):
    """A form whose fields come from a JSON Schema.

    An object schema with properties gives one field per property and `inputs()`
    is a dict; any other schema gives a single field named "value"."""

    def __init__(self, schema: dict | None, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.schema = schema or {}
        self.is_object = self.schema.get("type", "object") == "object" and bool(
            self.schema.get("properties"))
        if self.is_object:
            required = set(self.schema.get("required", []))
            for name, prop in self.schema["properties"].items():
                prop = prop if isinstance(prop, dict) else {}
                self.fields[name] = field_for(name, prop, name in required and "default" not in prop)
        elif self.schema.get("type") == "object":
            field = JSONTextField(expected="object", label="Answer (JSON object)", required=True)
            field.widget.attrs.update(rows=4, spellcheck="false", **{"class": "mono"})
            self.fields[VALUE_FIELD] = field
        else:
            prop = dict(self.schema) or {"type": "string"}
            self.fields[VALUE_FIELD] = field_for(VALUE_FIELD, {**prop, "title": prop.get(
                "title", "Answer")}, True)

    def inputs(self):
        """The cleaned value: a dict of the fields the user filled in (empty optional
        fields are left out so the schema's defaults apply), or the single value."""
        if not self.is_object:
            return self.cleaned_data.get(VALUE_FIELD)
        values = {}
        for name, value in self.cleaned_data.items():
            if value is None or value == "":
                continue
            values[name] = value
        return values

    def add_engine_error(self, field: str, message: str) -> None:
        """Put an engine validation error next to its field, or at the top."""
        top = (field or "").split(".")[0]
        if top in self.fields:
            self.add_error(top, message)
        elif not self.is_object and VALUE_FIELD in self.fields and not top:
            self.add_error(VALUE_FIELD, message)
        else:
            self.add_error(None, f"{field}: {message}" if field else message)


class CancelForm(forms.Form):
    reason = forms.CharField(max_length=500, required=False)
