"""Which code a run belongs to, and which runs a worker's code may claim.

A run records its agent's declared `version` and a fingerprint of the agent's code:
a hash of the agent's name, its declared version and the source of the module that
defines it. A change to that module changes the fingerprint even when nobody bumped
the version, so a deploy never runs a history on code it was not recorded with
without checking first. Tools called through `ctx.call` are not part of it: their
results are in the log, so their code does not decide a replay.

Old and new code run side by side (docs/deploys.md). A worker claims:

  * the runs of its own code (its fingerprints), always;
  * the runs of another code of an agent it has, when no live worker serves that
    code (its workers stopped or died) or when the agent says `upgrade = "replay"` and
    that code's declared version is older than the worker's; unless a replay of the
    run's history on this worker's code already diverged (`version_refused`).

A run of another code is not simply executed: its history is replayed on the new
code first (runs/durable/upgrade.py), and it moves only when the replay is clean.
`Codes` is that rule, in Python (`admits`: the memory store, the runtime) and beside it
in SQL (`admitted_sql`: the database stores); PgStore writes it once more with array
parameters, so that its prepared claim is one statement whatever the sets
(runs/storage/pg.py). The contract's test of which worker claims which run holds them
together on every store.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from . import records as r

PIN, REPLAY = "pin", "replay"
UPGRADES = (PIN, REPLAY)


ENGINE = __name__.rsplit(".", 1)[0]  # runs.durable: the same in every deploy's fingerprint


@functools.cache
def fingerprint(agent_cls: type) -> str:
    """The agent's code identity: 16 hex digits of a hash of its name, its declared
    version and the source of its modules."""
    digest = hashlib.sha256(f"{agent_cls.name}\0{agent_cls.version}\0".encode())
    for module in _modules(agent_cls):
        digest.update(f"{module}\0".encode())
        digest.update(_source(module, agent_cls))
    return digest.hexdigest()[:16]


def _modules(agent_cls: type) -> list[str]:
    """The modules that define the agent and its base classes, but the engine's."""
    names = {cls.__module__ for cls in agent_cls.__mro__}
    return sorted(name for name in names if name != "builtins" and name != ENGINE
                  and not name.startswith(f"{ENGINE}."))


def _source(module_name: str, agent_cls: type) -> bytes:
    """The module's file (the class's own source where the file cannot be read)."""
    path = getattr(sys.modules.get(module_name), "__file__", None)
    if path:
        try:
            with open(path, "rb") as source:
                return source.read()
        except OSError:
            pass
    try:
        return inspect.getsource(agent_cls).encode()
    except (OSError, TypeError):  # built in a shell: the declared version is all there is
        return b""


def code_of(agent_cls: type) -> dict:
    """What a worker advertises of one agent it has loaded (in its heartbeat)."""
    return {"agent": agent_cls.name, "version": str(agent_cls.version),
            "upgrade": getattr(agent_cls, "upgrade", PIN)}


def codes_of(agent_classes: Iterable[type]) -> dict[str, dict]:
    """fingerprint -> code_of, for every agent a worker has."""
    return {fingerprint(cls): code_of(cls) for cls in agent_classes}


def newer(version: str, than: str) -> bool:
    """Whether declared `version` is later than `than`: as numbers where both are
    dotted numbers ("2" > "1.9", "1.10" > "1.9"), else never (a name says no order)."""
    mine, theirs = _numbers(version), _numbers(than)
    return mine is not None and theirs is not None and mine > theirs


def _numbers(version: str) -> tuple[int, ...] | None:
    parts = str(version).strip().lstrip("v").split(".")
    if not all(part.isdigit() for part in parts):
        return None
    return tuple(int(part) for part in parts)


@dataclass(frozen=True)
class Codes:
    """The runs a worker may claim, by the code they belong to.

    own      the fingerprints of the worker's own agents
    agents   the worker's agents, by name
    taken    fingerprints of other codes that live workers serve and this worker may
             not take over: their runs stay with their workers
    """

    own: frozenset[str]
    agents: frozenset[str]
    taken: frozenset[str] = frozenset()

    def admits(self, run: r.RunRecord) -> bool:
        if run.code_fingerprint in self.own:
            return True
        return (run.agent in self.agents and run.code_fingerprint not in self.taken
                and (run.version_refused or "") not in self.own)


def admitted_sql(codes: Codes | None) -> tuple[str, list]:
    """Codes.admits as an SQL condition on the runs table ("AND ..." to append to a
    WHERE), with its parameters; ("", []) for None (every code)."""
    if codes is None:
        return "", []
    if not codes.own:
        return " AND 1 = 0", []  # a worker without agents claims nothing
    own, agents, taken = sorted(codes.own), sorted(codes.agents), sorted(codes.taken)
    foreign = f"agent IN ({_marks(agents)}) AND coalesce(version_refused, '') NOT IN ({_marks(own)})"
    params = [*own, *agents, *own]
    if taken:
        foreign += f" AND code_fingerprint NOT IN ({_marks(taken)})"
        params += taken
    return f" AND (code_fingerprint IN ({_marks(own)}) OR ({foreign}))", params


def _marks(values) -> str:
    return ", ".join(["%s"] * len(values))


def worker_codes(mine: Mapping[str, dict], live: Mapping[str, dict]) -> Codes:
    """A worker's Codes from its own codes and the live workers' (fingerprint -> code_of,
    as heartbeats advertise them). A live code of another worker is taken, unless its
    agent's code here says `upgrade = "replay"` and is of a later declared version."""
    by_agent = {code["agent"]: code for code in mine.values()}
    taken = set()
    for fp, code in live.items():
        if fp in mine:
            continue
        here = by_agent.get(code["agent"])
        if here is None:
            continue  # not an agent of this worker: it never claims its runs anyway
        if here["upgrade"] == REPLAY and newer(here["version"], code["version"]):
            continue
        taken.add(fp)
    return Codes(own=frozenset(mine), agents=frozenset(by_agent), taken=frozenset(taken))
