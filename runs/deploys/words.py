"""How a run's moves between agent codes read, in one place for the pages, the API and
the CLI: a move ("moved to version 2 at step 12 (replayed 12 steps, 24 logged
effects)"), a run waiting for a worker of its code, a patch marker, an effect carried
over by an upgrade. Plain text only: templates escape it."""

from __future__ import annotations

import json

from runs.durable import records as r
from runs.durable.upgrade import VERSION_WAIT

# A run handed back by a worker whose replay of its history diverged stays queued (or
# waiting, on a timer) with this attention until a worker of its own code claims it.
WAITS_IN = (r.QUEUED, r.WAITING)
CARRIED = "carried over, not asked for again yet"


def version_wait(status: str, attention) -> dict | None:
    """The attention of a run waiting for a worker of its own code, else None."""
    if status in WAITS_IN and isinstance(attention, dict) \
            and attention.get("kind") == VERSION_WAIT:
        return attention
    return None


def plural(count, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def moved_text(data) -> str:
    """The line of a "version" event (runs/durable/events.py version_moved)."""
    data = data if isinstance(data, dict) else {}
    to_version, to_code = data.get("to_version", "?"), str(data.get("to_code") or "")
    if to_version == data.get("from_version") and to_code:
        target = f"version {to_version}'s new code {to_code[:8]}"  # changed, not bumped
    else:
        target = f"version {to_version}"
    text = (f"moved to {target} at step {data.get('step', '?')} (replayed "
            f"{plural(data.get('replayed_steps', 0), 'step')}, "
            f"{plural(data.get('effects', 0), 'logged effect')})")
    if data.get("how") == "operator":
        text += " by an operator's upgrade"
    return text


def effect_name(kind: str, tool: str) -> str:
    """What an effect row names: its tool, or "patch ID" for a ctx.patched marker."""
    return f"patch {tool}" if kind == r.PATCH else tool


def effect_call(seq: int) -> str:
    """Its place in its step: "call 3", or carried over by an upgrade (a negative seq
    until the new code asks for the same call: runs/durable/upgrade.py)."""
    return CARRIED if seq < 0 else f"call {seq + 1}"


def event_line(event) -> str:
    """A RunEvent as `runs watch` prints it: "#N kind {data}", and a move between codes
    as its sentence (scripts parse the JSON of the other kinds)."""
    if event.kind == "version":
        return f"#{event.seq} version {moved_text(event.data)}"
    return f"#{event.seq} {event.kind} {json.dumps(event.data)}"
