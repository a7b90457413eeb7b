"""What a step's context talks to is one protocol (runs/durable/host.py: StepHost), and both
hosts implement all of it the same way: the session that runs steps, and the replay that
writes nothing (runs/durable/verify.py, what a deploy and replay-check replay with)."""

import inspect

import pytest

from runs.durable import WorkerConfig, control
from runs.durable import records as r
from runs.durable.host import StepHost
from runs.durable.memory import MemoryStore
from runs.durable.replay import ReplayState
from runs.durable.session import RunSession
from runs.durable.verify import VerifySession

from .agents_for_tests import REG


def session() -> RunSession:
    store = MemoryStore()
    run = control.launch(store, agent="steps", inputs={"n": 1}, registry=REG)
    return RunSession(store, REG, WorkerConfig("w1"), store.claim(run.id, "w1", 5, 0.0))


def verify_session() -> VerifySession:
    store = MemoryStore()
    run = control.launch(store, agent="steps", inputs={"n": 1}, registry=REG)
    return VerifySession(run, ReplayState(), store, REG)


MEMBERS = sorted({*StepHost.__annotations__,
                  *(name for name, value in vars(StepHost).items()
                    if not name.startswith("_") and (callable(value)
                                                     or isinstance(value, property)))})


@pytest.mark.parametrize("make", [session, verify_session], ids=["RunSession", "VerifySession"])
def test_a_host_has_every_member_of_the_protocol_with_its_parameters(make):
    host = make()
    assert isinstance(host.run, r.RunRecord) and isinstance(host.replay, ReplayState)
    for name in MEMBERS:
        assert hasattr(host, name), f"{type(host).__name__} has no {name}"
        wanted = getattr(StepHost, name, None)
        if callable(wanted):
            expected = list(inspect.signature(wanted).parameters)[1:]  # but self
            assert list(inspect.signature(getattr(host, name)).parameters) == expected, name
