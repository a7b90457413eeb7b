"""State encoding: JSON, zstd above a threshold; digests that stay stable; named errors."""

import datetime
import json

import pytest

from runs.durable import serde
from runs.durable.errors import StateNotSerializableError, StateTooLargeError


def test_a_small_state_is_stored_as_plain_json():
    state = {"urls": ["a", "b"], "next": 1, "done": None, "ok": True, "ratio": 0.5}
    blob, codec = serde.encode_state(state)
    assert codec == "json"
    assert json.loads(blob) == state
    assert serde.decode_state(blob, codec) == state


def test_a_state_at_the_threshold_is_not_compressed_and_one_byte_more_is():
    def state_of_size(size):
        raw = serde.dumps({"x": ""})
        return {"x": "a" * (size - len(raw.encode()))}

    at = state_of_size(serde.COMPRESS_ABOVE)
    assert len(serde.dumps(at).encode()) == serde.COMPRESS_ABOVE
    assert serde.encode_state(at)[1] == "json"
    above = state_of_size(serde.COMPRESS_ABOVE + 1)
    blob, codec = serde.encode_state(above)
    assert codec == "json+zstd"
    assert len(blob) < serde.COMPRESS_ABOVE
    assert serde.decode_state(blob, codec) == above


def test_a_large_state_round_trips_through_compression():
    state = {"pages": [{"url": f"https://example.com/{i}", "words": i * 7, "title": "é ü ✓"}
                       for i in range(500)]}
    blob, codec = serde.encode_state(state)
    assert codec == "json+zstd"
    assert len(blob) < len(serde.dumps(state).encode()) / 3
    assert serde.decode_state(blob, codec) == state


def test_an_unknown_codec_is_refused():
    with pytest.raises(ValueError, match="unknown checkpoint codec"):
        serde.decode_state(b"{}", "pickle")


def test_a_state_over_the_limit_is_refused(monkeypatch):
    monkeypatch.setattr(serde, "MAX_STATE_BYTES", 100)
    with pytest.raises(StateTooLargeError) as caught:
        serde.encode_state({"x": "a" * 200})
    assert caught.value.limit == 100 and caught.value.size > 200


def test_digests_are_stable_across_versions_of_the_code():
    # Stored effects are matched by digest on replay: if this value changes, every
    # run recorded before the change fails its replay with a NonDeterminismError.
    assert serde.digest("tests.echo", ("a", {"b": 2, "a": 1}), {"k": [1, 2]}) == (
        "ade425b9e2c8723db92d5a6b9ed1a7bc")
    assert serde.digest("tests.echo", (), {}) == "2e01495dd4a5a4fd6f39c12c2a92397c"


def test_digests_ignore_key_order_and_tell_calls_apart():
    base = serde.digest("t", ({"a": 1, "b": 2},), {"x": 1, "y": 2})
    assert serde.digest("t", ({"b": 2, "a": 1},), {"y": 2, "x": 1}) == base
    assert serde.digest("t", [{"a": 1, "b": 2}], {"x": 1, "y": 2}) == base  # tuple or list
    assert serde.digest("u", ({"a": 1, "b": 2},), {"x": 1, "y": 2}) != base
    assert serde.digest("t", ({"a": 1, "b": 3},), {"x": 1, "y": 2}) != base
    assert serde.digest("t", ({"a": 1, "b": 2},), {"x": 1}) != base
    assert serde.digest("t", ("1",), {}) != serde.digest("t", (1,), {})


@pytest.mark.parametrize("value,path,type_name", [
    ({"a": [1, {"b": {1, 2}}]}, "a[1].b", "set"),
    ({"when": datetime.date(2024, 1, 1)}, "when", "date"),
    ({"ok": 1, "nested": {"deeper": {"obj": object()}}}, "nested.deeper.obj", "object"),
    ([1, 2, b"bytes"], "[2]", "bytes"),
    ({"score": float("nan")}, "score", "NaN float"),
    ({"m": {(1, 2): "tuple key"}}, "m[(1, 2)]", "key of type tuple"),
    (frozenset(), "", "frozenset"),
])
def test_an_unserialisable_value_is_reported_with_its_path(value, path, type_name):
    with pytest.raises(StateNotSerializableError) as caught:
        serde.check_serializable(value)
    assert (caught.value.path, caught.value.value_type) == (path, type_name)
    assert (path or "<root>") in str(caught.value) and type_name in str(caught.value)
    with pytest.raises(StateNotSerializableError) as again:
        serde.encode_state(value)
    assert again.value.path == path


@pytest.mark.parametrize("value,path", [
    ({"name": ["ok", "a\x00b"]}, "name[1]"),
    ({"m": {"k\x00": 1}}, "m['k\\x00']"),
])
def test_a_nul_character_is_refused_by_the_check(value, path):
    # Inputs, results and outputs go to jsonb, which cannot hold U+0000.
    with pytest.raises(StateNotSerializableError) as caught:
        serde.check_serializable(value)
    assert caught.value.path == path and "NUL" in str(caught.value)


def test_a_non_string_key_is_reported_by_the_check():
    with pytest.raises(StateNotSerializableError) as caught:
        serde.check_serializable({"m": {3: "int key"}})
    assert (caught.value.path, caught.value.value_type) == ("m[3]", "key of type int")


def test_a_state_with_an_int_key_is_refused_rather_than_changed():
    # json.dumps would write it as "3": the resumed run would see another state
    with pytest.raises(StateNotSerializableError) as caught:
        serde.encode_state({"counts": [{"a": 1}, {"b": {3: 1}}]})
    assert (caught.value.path, caught.value.value_type) == ("counts[1].b[3]", "key of type int")


def test_the_path_is_prefixed_with_what_is_checked():
    with pytest.raises(StateNotSerializableError) as caught:
        serde.check_serializable({"rows": [{1}]}, "result of fetch")
    assert caught.value.path == "result of fetch.rows[0]"


def test_json_types_pass_the_check():
    serde.check_serializable({"a": [1, 2.5, "s", True, None, {"b": []}], "t": (1, 2)})


def test_previews_are_short_and_readable():
    assert serde.preview(("a", 1), {"k": None}) == "'a', 1, k=None"
    long = serde.preview(("x" * 500,), {})
    assert len(long) == 200 and long.endswith("…")
