"""Records and rows by name: the one place that says which record field is which column.

A RunRecord's and an EffectRecord's fields are the Run's and the Effect's model field
names (but for the run's `owner`, the column `owner_id`, and the effect's `args`, not
stored). Which of them are times or JSON is read from the models, so a field added,
renamed or reordered in a record or a model cannot shift a value into another column:
every conversion here goes by name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from datetime import datetime
from datetime import timezone as dt_timezone
from operator import attrgetter
from typing import Any

from runs.durable import records as r
from runs.durable import serde
from runs.models import Effect, Run

# `args`, `moved_from` and `unwritten` are the engine's own, not stored.
EFFECT_FIELDS = tuple(f.name for f in fields(r.EffectRecord)
                      if f.name not in ("args", "moved_from", "unwritten"))
# What a later write at the same position (the outcome after the intent) rewrites.
EFFECT_OUTCOME = ("status", "result", "error", "attempts", "finished_at", "resolution",
                  "superseded", "worker", "started_at", "epoch", "usage")
RUN_FIELDS = tuple(f.name for f in fields(r.RunRecord) if f.name != "owner")
CHECKPOINT_FIELDS = tuple(f.name for f in fields(r.CheckpointRecord))


def _of_type(model, names, internal_type: str) -> frozenset[str]:
    return frozenset(n for n in names if model._meta.get_field(n).get_internal_type() == internal_type)


EFFECT_TIMES = _of_type(Effect, EFFECT_FIELDS, "DateTimeField")
EFFECT_JSON = _of_type(Effect, EFFECT_FIELDS, "JSONField")
RUN_TIMES = _of_type(Run, RUN_FIELDS, "DateTimeField")
RUN_JSON = _of_type(Run, RUN_FIELDS, "JSONField")

# The PostgreSQL type a parameter is cast to in a typed VALUES list or SET (text for a
# CharField: a cast to varchar(n) would cut a long value short instead of failing).
SQL_TYPES = {"IntegerField": "integer", "BigIntegerField": "bigint", "FloatField": "double precision",
             "CharField": "text", "TextField": "text", "BooleanField": "boolean",
             "JSONField": "jsonb", "DateTimeField": "timestamptz", "BinaryField": "bytea"}


def sql_type(model, name: str) -> str:
    return SQL_TYPES[model._meta.get_field(name).get_internal_type()]


def to_dt(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=dt_timezone.utc)


def to_ts(value: datetime | float | None) -> float | None:
    """POSIX seconds from a stored time: a datetime (an ORM row) or already seconds (a
    statement that extracted the epoch)."""
    if value is None:
        return None
    return value.timestamp() if isinstance(value, datetime) else float(value)


def parse_json(values: Mapping[str, Any], names) -> dict:
    """`values` with the JSON columns among `names`, read as text, parsed."""
    parsed = dict(values)
    for name in names:
        if isinstance(parsed.get(name), str):
            parsed[name] = json.loads(parsed[name])
    return parsed


# --- runs ------------------------------------------------------------------------------------
def run_record(values: Mapping[str, Any]) -> r.RunRecord:
    """A RunRecord from a run's stored values by name (`owner_id` for its owner)."""
    record = {name: values[name] for name in RUN_FIELDS}
    for name in RUN_TIMES:
        record[name] = to_ts(record[name])
    return r.RunRecord(owner=str(values.get("owner_id") or ""), **record)


def run_values(record: r.RunRecord) -> dict:
    """The Run columns of a record, by attribute name, as the model holds them."""
    values = {name: getattr(record, name) for name in RUN_FIELDS}
    for name in RUN_TIMES:
        values[name] = to_dt(values[name])
    values["owner_id"] = int(record.owner) if str(record.owner).isdigit() else None
    return values


# --- effects ---------------------------------------------------------------------------------
def effect_record(values: Mapping[str, Any]) -> r.EffectRecord:
    """An EffectRecord from an effect's stored values by name."""
    record = {name: values[name] for name in EFFECT_FIELDS}
    for name in EFFECT_TIMES:
        record[name] = to_ts(record[name])
    record["started_at"] = record["started_at"] or 0.0  # never started: the record's 0.0
    record["result"] = serde.canonical(record["result"])  # jsonb keeps no key order
    return r.EffectRecord(**record)


_EFFECT_COLUMNS = attrgetter(*EFFECT_FIELDS)
_EFFECT_TIMES_AT = tuple(i for i, name in enumerate(EFFECT_FIELDS) if name in EFFECT_TIMES)
_EFFECT_JSON_AT = tuple(i for i, name in enumerate(EFFECT_FIELDS) if name in EFFECT_JSON)


def _effect_columns(record: r.EffectRecord) -> list:
    """The Effect columns of a record, in EFFECT_FIELDS' order, as the model holds them."""
    values = list(_EFFECT_COLUMNS(record))
    for i in _EFFECT_TIMES_AT:
        values[i] = to_dt(values[i] or None)
    return values


def effect_values(record: r.EffectRecord) -> dict:
    """The Effect columns of a record, by name, as the model holds them."""
    return dict(zip(EFFECT_FIELDS, _effect_columns(record)))


def effect_params(record: r.EffectRecord) -> list:
    """effect_values as a statement's parameters, in EFFECT_FIELDS' order, its JSON as
    text: what an effect's commit sends (runs/storage/pg.py), built without a dict."""
    values = _effect_columns(record)
    for i in _EFFECT_JSON_AT:
        if values[i] is not None:
            values[i] = json.dumps(values[i])
    return values


# --- checkpoints -----------------------------------------------------------------------------
def checkpoint_record(values: Mapping[str, Any]) -> r.CheckpointRecord:
    """A CheckpointRecord from a checkpoint's stored values by name."""
    record = {name: values[name] for name in CHECKPOINT_FIELDS}
    record["blob"] = bytes(record["blob"])
    record["created_at"] = to_ts(record["created_at"]) or 0.0
    return r.CheckpointRecord(**record)


def checkpoint_values(record: r.CheckpointRecord, number: int) -> dict:
    """The Checkpoint columns of a record (numbered `number`), by name."""
    values = {name: getattr(record, name) for name in CHECKPOINT_FIELDS}
    values.update(number=number, size=record.size, created_at=to_dt(record.created_at))
    return values
