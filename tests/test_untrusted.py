"""runs/web/untrusted.py: the one parser for untrusted JSON and text."""

import json

import pytest

from runs.web import untrusted
from runs.web.untrusted import (
    MAX_DEPTH,
    BadTextError,
    NonFiniteNumberError,
    NotJSONError,
    TooDeepError,
    TooLargeError,
    parse_json,
)


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


@pytest.mark.parametrize("text,error", [
    ('["\\ud800"]', BadTextError),
    ('{"\\udfff": 1}', BadTextError),
    ('{"a": {"b\\u0000": 1}}', BadTextError),
    ('"a\\u0000"', BadTextError),
    ("[Infinity]", NonFiniteNumberError),
    ('{"x": -Infinity}', NonFiniteNumberError),
    ("NaN", NonFiniteNumberError),
    ("1e999", NonFiniteNumberError),
    ("9" * 5000, NotJSONError),
    ('{"a": [1, 2', NotJSONError),
    (nested(MAX_DEPTH + 1), TooDeepError),
    (nested(100_000), TooDeepError),
    ('{"a":' * 100_000 + "1" + "}" * 100_000, TooDeepError),
    ("[" + "1," * 600_000 + "1]", TooLargeError),
])
def test_each_hostile_class_is_refused_with_its_error(text, error):
    with pytest.raises(error) as refused:
        parse_json(text, max_bytes=1024 * 1024)
    assert str(refused.value)  # a message for the user


def test_what_is_allowed_comes_back_parsed():
    value = {"a": [1, 2.5, -3e10, None, True], "é": "☃ \\n", "deep": json.loads(nested(MAX_DEPTH - 1))}
    assert parse_json(json.dumps(value), max_bytes=10_000) == value


@pytest.mark.parametrize("text,depth", [
    ('["[[[[", "]]]"]', 1),            # brackets inside strings do not count
    ('["\\"[[[", {"a": "\\\\"}]', 2),  # nor after escaped quotes and backslashes
    ('{"a": [{"b": []}]}', 4),
])
def test_depth_is_counted_outside_strings(text, depth):
    assert untrusted._depth(text) == depth
    parse_json(text, max_bytes=1000, max_depth=depth)
    with pytest.raises(TooDeepError):
        parse_json(text, max_bytes=1000, max_depth=depth - 1)


def test_unterminated_strings_are_read_once():
    # A backtracking string pattern is quadratic here (minutes, then the test timeout).
    with pytest.raises(NotJSONError):
        parse_json('"\\' * 400_000, max_bytes=1024 * 1024)


def test_text_checks_and_run_ids():
    assert untrusted.check_text("plain ☃") == "plain ☃"
    for bad in ("a\x00", "\ud800", "x\udfffy"):
        assert not untrusted.is_clean(bad)
        with pytest.raises(BadTextError):
            untrusted.check_text(bad)
    assert untrusted.is_run_id("0123abcdEF_-")
    for bad in ("", "a" * 33, "a\x00", "a/b", "a\n", None, 5):
        assert not untrusted.is_run_id(bad)
