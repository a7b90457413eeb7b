"""The replay check before a deploy (docs/deploys.md): recorded histories replayed on the
code this process has loaded, with no side effect (runs/durable/verify.py).

Each run gets a verdict:

  clean          its history replays: a worker of this code takes it over where it stands
  diverges       the first place this code departs from its history; a worker of this
                 code hands it back, and it waits for a worker of its own code
  unknown_agent  this code has no agent of that name: the run waits for one that has
  later          it belongs to a later declared version than this code's: never moved back
  error          its history could not be replayed here (the message says why)

The check fails when a run not ended (one that a deploy of this code would have to
take over) would not move: it diverges, its agent is missing, or it cannot be
replayed. An ended run that diverges is reported and does not fail it: nothing will
replay it again (but a rollback, which forks from a checkpoint on the run's code)."""

from __future__ import annotations

from dataclasses import dataclass, field

from runs.deploys import selectors
from runs.deploys.words import plural
from runs.durable import records as r
from runs.durable import upgrade, versions
from runs.durable.errors import AgentNotFoundError
from runs.durable.registry import AgentRegistry
from runs.durable.registry import registry as default_registry
from runs.storage import database_store

CLEAN, DIVERGES, UNKNOWN_AGENT, LATER, ERROR = (
    "clean", "diverges", "unknown_agent", "later", "error")
FAILS = (DIVERGES, UNKNOWN_AGENT, ERROR)  # for a run not ended


@dataclass
class Report:
    rows: list[dict] = field(default_factory=list)

    def count(self, verdict: str, *, in_flight: bool | None = None) -> int:
        return sum(1 for row in self.rows if row["verdict"] == verdict
                   and (in_flight is None or row["in_flight"] == in_flight))

    @property
    def blocking(self) -> list[dict]:
        """The runs in flight that this code would not take over."""
        return [row for row in self.rows if row["in_flight"] and row["verdict"] in FAILS]

    @property
    def passed(self) -> bool:
        return not self.blocking

    def summary(self) -> str:
        """"42 runs checked: 38 replay cleanly, 4 diverge (3 in flight, 1 ended); ..."."""
        text = f"{plural(len(self.rows), 'run')} checked: {self.count(CLEAN)} replay cleanly"
        diverging = self.count(DIVERGES)
        if diverging:
            text += (f", {diverging} diverge ({self.count(DIVERGES, in_flight=True)} in "
                     f"flight, {self.count(DIVERGES, in_flight=False)} ended)")
        for verdict, words in ((UNKNOWN_AGENT, "of an agent this code does not have"),
                               (LATER, "of a later version than this code"),
                               (ERROR, "could not be replayed")):
            if self.count(verdict):
                text += f", {self.count(verdict)} {words}"
        return text

    def as_dict(self) -> dict:
        return {"passed": self.passed, "checked": len(self.rows), "clean": self.count(CLEAN),
                "diverging": self.count(DIVERGES),
                "diverging_in_flight": self.count(DIVERGES, in_flight=True),
                "unknown_agent": self.count(UNKNOWN_AGENT), "later": self.count(LATER),
                "errors": self.count(ERROR), "blocking": [row["run_id"] for row in self.blocking],
                "summary": self.summary(), "runs": self.rows}


def replay_check(*, agent: str = "", statuses=(), limit: int = selectors.REPLAY_CHECK_LIMIT,
                 registry: AgentRegistry = default_registry) -> Report:
    """Replay the selected runs' histories on `registry`'s code (this process's agents)."""
    store = database_store()
    report = Report()
    for run in selectors.replay_candidates(agent=agent, statuses=statuses, limit=limit):
        report.rows.append(check_run(store, run.pk, registry))
    return report


def check_run(store, run_id: str, registry: AgentRegistry) -> dict:
    """One run's verdict on `registry`'s code."""
    run = store.get(run_id)
    row = {"run_id": run.id, "agent": run.agent, "status": run.status,
           "in_flight": run.status not in r.FINAL_STATUSES, "version": run.agent_version,
           "code": run.code_fingerprint, "to_version": None, "to_code": None}
    try:
        agent = registry.get(run.agent)
    except AgentNotFoundError:
        return _verdict(row, UNKNOWN_AGENT, f"this code has no agent {run.agent!r}")
    except Exception as exc:  # noqa: BLE001 - the new code's own failure to build its agent
        return _verdict(row, ERROR, f"the agent cannot be built: {type(exc).__name__}: {exc}")
    row.update(to_version=str(agent.version), to_code=versions.fingerprint(type(agent)))
    if upgrade.later_than(run, agent):
        return _verdict(row, LATER, f"version {run.agent_version} is later than this code's "
                                    f"{agent.version}: a worker of this code never moves it back")
    try:
        verdict = upgrade.verify(store, run, agent, registry)
    except Exception as exc:  # noqa: BLE001 - one history that cannot be read or replayed
        # here is that run's verdict, not the end of the check of all the others
        return _verdict(row, ERROR, f"cannot replay: {type(exc).__name__}: {exc}"[:500])
    row.update(verdict.as_dict())
    if verdict.clean:
        return _verdict(row, CLEAN, f"replays cleanly ({plural(verdict.steps, 'step')}, "
                                    f"{plural(verdict.asked, 'logged effect')})")
    return _verdict(row, DIVERGES, verdict.divergence.describe())


def _verdict(row: dict, verdict: str, message: str) -> dict:
    row.setdefault("divergence", None)
    row.update(verdict=verdict, message=message, clean=verdict == CLEAN)
    return row
