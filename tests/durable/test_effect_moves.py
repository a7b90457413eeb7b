"""An effect's moves (runs/durable/effect.py): each one is allowed from the states its row
of MOVES names, and refused, changing nothing, from every other."""

import dataclasses

import pytest

from runs.durable import effect as e
from runs.durable.effect import MOVES, EffectRecord, InvalidEffectMove

ERROR = {"type": "Boom", "message": "boom", "permanent": False}


def record(state: str = e.INTENT) -> EffectRecord:
    made = EffectRecord(branch=1, step_no=2, seq=3, kind=e.CALL, tool="t", digest="d",
                        key="run:1:2:3", idempotent=False, status=e.INTENT, started_at=5.0)
    if state == e.TO_RETRY:
        made.resolution = e.RETRY
    elif state == e.RETRYING:
        made.status, made.result = e.RETRYING, {"wake_at": 9.0, "first_at": 5.0, "wait": 4.0}
    elif state in (e.DONE, e.ERROR):
        made.status = state
    elif state == e.SUPERSEDED:
        made.superseded = True
    elif state == e.CARRIED:
        made.seq = -1
    return made


MAKE = {
    "done": lambda r: r.done("x", at=10.0),
    "succeed": lambda r: r.succeed("x", at=10.0),
    "fail": lambda r: r.fail(ERROR, at=10.0),
    "retry_at": lambda r: r.retry_at(ERROR, wake_at=20.0, wait=10.0),
    "in_doubt": lambda r: r.in_doubt(ERROR),
    "attempt": lambda r: r.attempt(),
    "retry_start": lambda r: r.retry_start(at=10.0),
    "skip": lambda r: r.skip("x", at=10.0),
    "refuse": lambda r: r.refuse(ERROR, at=10.0),
    "ask_retry": lambda r: r.ask_retry(),
    "resolve": lambda r: r.resolve("x", "done", at=10.0),
    "answer": lambda r: r.answer("x", at=10.0),
    "wake": lambda r: r.wake(at=10.0),
    "give_up": lambda r: r.give_up(ERROR, at=10.0),
    "supersede": lambda r: r.superseding(),
    "carry": lambda r: r.carried_to(4, -1),
    "take_over": lambda r: r.taken_over_at((4, 5, 6)),
}
STATES = (e.INTENT, e.RETRYING, e.DONE, e.ERROR, e.TO_RETRY)
STANDINGS = (e.LIVE, e.SUPERSEDED, e.CARRIED)
POSITION_MOVES = ("supersede", "carry", "take_over")


def test_every_move_of_the_table_is_a_method():
    assert set(MAKE) == set(MOVES)


@pytest.mark.parametrize("move", sorted(MOVES))
def test_a_move_goes_from_the_states_of_its_row_and_nowhere_else(move):
    starts, ends = MOVES[move]
    for state in (STANDINGS if move in POSITION_MOVES else STATES):
        before = record(state)
        kept = dataclasses.replace(before)
        if state in starts:
            moved = MAKE[move](before) or before  # a position move returns its copy
            assert (moved.standing if move in POSITION_MOVES else moved.state) == ends
        else:
            with pytest.raises(InvalidEffectMove):
                MAKE[move](before)
            assert before == kept  # refused: nothing changed


def test_a_position_move_leaves_the_record_it_was_asked_of_as_it_was():
    carried = record(e.CARRIED)
    taken = carried.taken_over_at((1, 7, 0))
    assert (carried.seq, taken.position, taken.moved_from) == (-1, (1, 7, 0), (1, 2, -1))
    assert record().carried_to(4, -2).moved_from == (1, 2, 3)


def test_a_refusal_replays_as_the_gates_error_and_a_failure_as_the_tools():
    refused = record()
    refused.refuse({"type": "ApprovalDeniedError", "message": "no", "gate": "approval"}, at=1.0)
    assert type(refused.failure()).__name__ == "ApprovalDeniedError"
    failed = record()
    failed.fail(ERROR, at=1.0)
    assert failed.replays and type(failed.failure()).__name__ == "ToolFailedError"
    failed.ask_retry()
    assert not failed.replays  # an operator's retry makes it again
