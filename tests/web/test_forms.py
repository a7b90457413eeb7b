"""SchemaForm: JSON Schema properties to form fields and back."""

from runs.web.forms import SchemaForm


def test_an_object_schema_gives_a_field_per_property():
    schema = {"type": "object", "properties": {"name": {"type": "string", "minLength": 1}},
              "required": ["name"]}
    form = SchemaForm(schema, data={"name": "Ada"})
    assert form.is_valid() and form.inputs() == {"name": "Ada"}
    assert not SchemaForm(schema, data={"name": ""}).is_valid()


def test_empty_optional_fields_are_left_to_the_defaults():
    schema = {"type": "object", "properties": {"n": {"type": "integer", "default": 4},
                                               "s": {"type": "string"}}}
    form = SchemaForm(schema, data={"n": "", "s": ""})
    assert form.is_valid() and form.inputs() == {}


def test_a_scalar_schema_gives_one_value_field():
    form = SchemaForm({"type": "integer", "minimum": 2}, data={"value": "5"})
    assert form.is_valid() and form.inputs() == 5
    assert not SchemaForm({"type": "integer", "minimum": 2}, data={"value": "1"}).is_valid()


def test_no_schema_takes_text():
    form = SchemaForm(None, data={"value": "anything at all"})
    assert form.is_valid() and form.inputs() == "anything at all"


def test_an_object_without_properties_takes_json():
    form = SchemaForm({"type": "object"}, data={"value": '{"a": 1}'})
    assert form.is_valid() and form.inputs() == {"a": 1}
    assert not SchemaForm({"type": "object"}, data={"value": "[1]"}).is_valid()


def test_engine_errors_find_their_field():
    schema = {"type": "object", "properties": {"a": {"type": "object"}}}
    form = SchemaForm(schema, data={"a": '{"b": 1}'})
    assert form.is_valid()
    form.add_engine_error("a.b", "must be a string")
    assert form.errors["a"] == ["must be a string"]
    form.add_engine_error("", "the whole thing is wrong")
    assert form.non_field_errors() == ["the whole thing is wrong"]
