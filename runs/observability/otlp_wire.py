"""A batch of spans as the OTLP/HTTP request body, written straight from the plain values
the exporter process receives (export_process.py), byte for byte what the OTLP
exporter's own encoder makes of the same spans.

Why not that encoder: it builds a protobuf message for every attribute of every span
(KeyValue, AnyValue, ...), about 60 us a span measured, more than everything else the
export costs together. The same bytes are written here field by field (the protobuf wire
format: a key, then a varint, a fixed-width number or a length and the bytes), and an
attribute already seen in the process (a run's id, its tool, an outcome) is taken from a
cache of encoded attributes: a few us a span. `tests/observability/test_export_process.py`
checks the bytes against the exporter's own encoder, attribute type by attribute type.

Field numbers are those of opentelemetry-proto's trace.proto and common.proto; fields are
written in the order the protobuf library writes them (by number), default values left
out as it leaves them out.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence

_FIXED64 = struct.Struct("<Q")
_FIXED32 = struct.Struct("<I")
_DOUBLE = struct.Struct("<d")
_CACHE_LIMIT = 50_000  # encoded attributes kept; beyond it, each is encoded afresh
_key_values: dict = {}

# SpanFlags of trace.proto: whether the parent was remote is known (always), and is.
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64: two's complement in ten bytes
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _key(number: int, wire_type: int) -> bytes:
    return _varint(number << 3 | wire_type)


def _length_delimited(number: int, data: bytes) -> bytes:
    return _key(number, 2) + _varint(len(data)) + data


def _string(number: int, text: str | None) -> bytes:
    return _length_delimited(number, text.encode()) if text else b""


def _any_value(value) -> bytes:
    """AnyValue: a oneof, so a zero or an empty string is written all the same."""
    if value is None:
        return b""
    if isinstance(value, bool):
        return b"\x10" + (b"\x01" if value else b"\x00")
    if isinstance(value, str):
        return _length_delimited(1, value.encode())
    if isinstance(value, int):
        return b"\x18" + _varint(value)
    if isinstance(value, float):
        return b"\x21" + _DOUBLE.pack(value)
    if isinstance(value, bytes):
        return _length_delimited(7, value)
    if isinstance(value, Sequence):
        return _length_delimited(5, b"".join(_length_delimited(1, _any_value(item))
                                              for item in value))
    if isinstance(value, Mapping):
        return _length_delimited(6, b"".join(_length_delimited(1, _key_value(str(k), v))
                                              for k, v in value.items()))
    raise TypeError(f"an attribute of type {type(value).__name__} has no OTLP encoding")


def _key_value(key: str, value) -> bytes:
    return _string(1, key) + _length_delimited(2, _any_value(value))


def _attribute(number: int, key: str, value) -> bytes:
    """One attribute as field `number` of its message, cached when its value can be a
    dict key (True, 1 and 1.0 are equal keys: the type is part of it)."""
    try:
        cache_key = (number, key, type(value), value)
        return _key_values[cache_key]
    except KeyError:
        encoded = _length_delimited(number, _key_value(key, value))
        if len(_key_values) < _CACHE_LIMIT:
            _key_values[cache_key] = encoded
        return encoded
    except TypeError:  # a list: not hashable
        return _length_delimited(number, _key_value(key, value))


def _attributes(number: int, attributes: dict) -> bytes:
    out = []
    for key, value in attributes.items():
        try:
            out.append(_attribute(number, key, value))
        except TypeError:
            pass  # left out, as the exporter's encoder leaves out what it cannot encode
    return b"".join(out)


def _flags(parent_context) -> int:
    return _HAS_IS_REMOTE | (_IS_REMOTE if parent_context and parent_context[2] else 0)


def _span(name, own, parent, kind, start, end, attributes, events, links, code,
          description) -> bytes:
    trace_id, span_id, _remote, _trace_flags, state = own
    out = [b"\x0a\x10", trace_id.to_bytes(16, "big"), b"\x12\x08", span_id.to_bytes(8, "big")]
    if state:
        out.append(_string(3, ",".join(f"{key}={value}" for key, value in state)))
    if parent is not None:
        out += [b"\x22\x08", parent[1].to_bytes(8, "big")]
    out.append(_string(5, name))
    out.append(b"\x30" + _varint(kind + 1))  # the SDK's SpanKind counts from 0, OTLP's from 1
    if start:
        out.append(b"\x39" + _FIXED64.pack(start))
    if end:
        out.append(b"\x41" + _FIXED64.pack(end))
    out.append(_attributes(9, attributes))
    for event_name, event_attributes, timestamp in events:
        event = (b"\x09" + _FIXED64.pack(timestamp) if timestamp else b"") + \
            _string(2, event_name) + _attributes(3, event_attributes)
        out.append(_length_delimited(11, event))
    for link_context, link_attributes in links:
        link = b"\x0a\x10" + link_context[0].to_bytes(16, "big") + \
            b"\x12\x08" + link_context[1].to_bytes(8, "big") + \
            _attributes(4, link_attributes) + b"\x35" + _FIXED32.pack(_flags(link_context))
        out.append(_length_delimited(13, link))
    status = _string(2, description) + (b"\x18" + _varint(code) if code else b"")
    out.append(_length_delimited(15, status))
    out.append(b"\x85\x01" + _FIXED32.pack(_flags(parent)))
    return b"".join(out)


def _scope(values) -> bytes:
    if values is None:
        return b""
    name, version, _schema_url, attributes = values
    return _string(1, name) + _string(2, version) + _attributes(3, attributes or {})


def _first_equal(values: list) -> list[int]:
    """For each value, the index of the first one equal to it: the exporter's encoder
    groups spans by equal resources and scopes, not by the same object."""
    firsts = []
    for index, value in enumerate(values):
        firsts.append(next(i for i in range(index + 1) if values[i] == value))
    return firsts


def export_request(resources: list, scopes: list, rows: list) -> bytes:
    """The ExportTraceServiceRequest of one batch (export_process.encode's values):
    resources, each with its scopes, each with its spans, in the order first seen."""
    resource_of, scope_of = _first_equal(resources), _first_equal(scopes)
    grouped: dict[int, dict[int, list[bytes]]] = {}
    for *span, resource, scope in rows:  # export_process.encode's row
        spans = grouped.setdefault(resource_of[resource], {}).setdefault(scope_of[scope], [])
        spans.append(_length_delimited(2, _span(*span)))
    out = []
    for resource, by_scope in grouped.items():
        attributes, schema_url = resources[resource]
        body = [_length_delimited(1, _attributes(1, attributes))]
        for scope, spans in by_scope.items():
            scope_values = scopes[scope]
            scope_spans = _length_delimited(1, _scope(scope_values)) + b"".join(spans)
            if scope_values is not None:
                scope_spans += _string(3, scope_values[2])
            body.append(_length_delimited(2, scope_spans))
        body.append(_string(3, schema_url))
        out.append(_length_delimited(1, b"".join(body)))
    return b"".join(out)
