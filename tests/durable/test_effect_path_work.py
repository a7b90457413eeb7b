"""What a new call costs the engine besides its commit, counted (issue 32: a durable no-op
effect within 1.5x of a one-row INSERT). A call is digested once, for its record; the
replay digests only a call it must compare with the log."""

import math

import pytest

from runs.durable import Outcome, WorkerConfig, control, execute_run, serde
from runs.durable import records as r
from runs.durable import replay as replay_module
from runs.durable import step as step_module
from runs.durable.memory import MemoryStore
from runs.durable.replay import ReplayState

from .agents_for_tests import REG


@pytest.fixture
def digests(monkeypatch) -> list[str]:
    """The names of the calls digested, in order."""
    seen = []

    def counted(name, args, kwargs):
        seen.append(name)
        return serde.digest(name, args, kwargs)

    monkeypatch.setattr(replay_module, "digest", counted)
    monkeypatch.setattr(step_module, "digest", counted)
    return seen


def test_a_new_call_is_digested_once(digests):
    store = MemoryStore()
    run = control.launch(store, agent="steps", inputs={"n": 3}, registry=REG)
    config = WorkerConfig("w1", slice_seconds=math.inf)
    assert execute_run(store, run.id, config, registry=REG) == Outcome.SUCCEEDED
    assert digests == ["tests.bump"] * 3


def test_a_logged_call_is_still_compared_with_the_log(digests):
    logged = r.EffectRecord(branch=1, step_no=1, seq=0, kind=r.CALL, tool="tests.bump",
                            digest=serde.digest("tests.bump", (1,), {}), key="k",
                            idempotent=False, status=r.DONE, result=1)
    replay = ReplayState([logged])
    assert replay.take((1, 1, 0), r.CALL, "tests.bump", (1,), {}) is logged
    assert digests == ["tests.bump"]
    with pytest.raises(Exception, match="tests.bump"):  # another call at a logged position
        ReplayState([logged]).take((1, 1, 0), r.CALL, "tests.bump", (2,), {})


def test_a_carried_effect_is_still_found_by_its_digest(digests):
    carried = r.EffectRecord(branch=1, step_no=1, seq=-1, kind=r.CALL, tool="tests.bump",
                             digest=serde.digest("tests.bump", (1,), {}), key="k",
                             idempotent=False, status=r.DONE, result=1)
    taken = ReplayState([carried]).take((1, 1, 0), r.CALL, "tests.bump", (1,), {})
    assert taken is not None and taken.position == (1, 1, 0) and taken.result == 1
