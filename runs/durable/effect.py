"""One effect's record and the moves it may make: the one place where an effect's status
changes.

An effect is what a step asks for at its position (branch, step, seq): a tool call, a
child run launched or waited for, a timer, a question to a person, a recorded
now()/random(), a patch marker. Its record is in one of these states:

  intent     written before a call may reach the world (the write-ahead intent), or a
             call whose outcome nobody knows (in doubt), or a question not answered yet
  retrying   its last attempt failed and the next one waits on a durable timer
  done       it happened: `result` is what every replay returns
  error      it failed for good, or a gate refused it: every replay raises it again
  to retry   an intent or an error an operator said to retry (resolution "retry"):
             made again under its key

and, whatever its state, where it stands: live at its position, superseded (a rollback
or an edit left it behind), or carried over by an upgrade (waiting at a negative seq,
outside the positions a step counts, until new code asks for the same call and takes it
over; runs/durable/upgrade.py, replay.py).

`MOVES` is every legal move, and each move is a method of the record that checks it
against the table before it changes anything: the call path (runs/durable/calls.py,
attempts.py), children, timers and values, the operators' actions and the stores all
move an effect through these methods only.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from .errors import ApprovalDeniedError, CallRefusedError, DurableError, ToolFailedError

# Effect kinds
CALL, NOW, RANDOM, SLEEP, INPUT = "call", "now", "random", "sleep", "input"
# A child run launched (result: its id and agent), and the outcomes of the children a
# step waited for, in the order asked (docs/children.md).
SPAWN, JOIN = "spawn", "join"
# A patch marker (ctx.patched): the code that ran this step knew the patch
# (docs/deploys.md). It takes a position only when recorded.
PATCH = "patch"

# Statuses, as stored
INTENT, DONE, ERROR = "intent", "done", "error"
# A call whose last attempt failed and whose next waits on a durable timer: its
# `error` is the last error, its `result` {"wake_at", "first_at", "wait"}.
RETRYING = "retrying"

# Resolutions: an operator's word on a call (retry, done, skip), a gate's (skip, refused)
RETRY, SKIP, REFUSED = "retry", "skip", "refused"

# The state a move starts from: the status, but for an operator's retry
TO_RETRY = "to retry"
LIVE, SUPERSEDED, CARRIED = "live", "superseded", "carried"
ANY = frozenset({INTENT, RETRYING, DONE, ERROR, TO_RETRY})
MAKING = frozenset({INTENT, RETRYING, TO_RETRY})  # a call being made: its attempts

# move           the states it starts from          the state it ends in
MOVES: dict[str, tuple[frozenset[str], str]] = {
    # a step's: its calls, their attempts and the gates' answers
    "done":        (frozenset({INTENT}),             DONE),      # a value, timer, child
    "succeed":     (MAKING,                          DONE),
    "fail":        (MAKING,                          ERROR),
    "retry_at":    (MAKING,                          RETRYING),
    "in_doubt":    (frozenset({INTENT}),             INTENT),
    "attempt":     (frozenset({RETRYING}),           INTENT),    # the next attempt goes
    "retry_start": (frozenset({TO_RETRY}),           INTENT),    # the operator's retry
    "skip":        (frozenset({INTENT, TO_RETRY}),   DONE),      # a gate's
    "refuse":      (frozenset({INTENT, TO_RETRY}),   ERROR),     # a gate's
    # an operator's
    "ask_retry":   (frozenset({INTENT, ERROR, TO_RETRY}), TO_RETRY),
    "resolve":     (frozenset({INTENT, TO_RETRY}),   DONE),
    "answer":      (frozenset({INTENT}),             DONE),      # a person's input
    "wake":        (frozenset({RETRYING}),           RETRYING),  # retry now
    "give_up":     (frozenset({RETRYING}),           ERROR),
    # where it stands (its status stays as it is)
    "supersede":   (frozenset({LIVE, CARRIED}),      SUPERSEDED),
    "carry":       (frozenset({LIVE, CARRIED}),      CARRIED),
    "take_over":   (frozenset({CARRIED}),            LIVE),
}


class InvalidEffectMove(DurableError):
    """A move the table does not allow: a bug of the engine, never of an agent."""

    def __init__(self, move: str, state: str, key: str):
        self.move, self.state, self.key = move, state, key
        super().__init__(f"effect {key}: cannot {move} an effect that is {state}")


@dataclass
class EffectRecord:
    """A logged call at position (branch, step_no, seq)."""

    branch: int
    step_no: int
    seq: int
    kind: str
    tool: str
    digest: str
    key: str
    idempotent: bool
    status: str
    args_preview: str = ""
    args: Any = None
    result: Any = None
    error: dict | None = None
    attempts: int = 0
    started_at: float = 0.0
    finished_at: float | None = None
    resolution: str = ""
    superseded: bool = False
    worker: str = ""
    epoch: int = 0  # the writer's fencing epoch: audits prove no fenced write landed
    # a metered call's usage: {"model", "prompt_tokens", "completion_tokens", "cost"}
    usage: dict | None = None
    # Not stored: the position the effect had until now. An effect carried over by an
    # upgrade moves, under its own key, to the position where the new code asks for it
    # again; a store writes it by its key.
    moved_from: tuple[int, int, int] | None = None
    # Not stored: made here and carried by no commit yet, so no row holds its position (a
    # claim fences off every older owner's write: runs/storage/pg.py CLAIM_LOAD_SQL), and
    # a store may write it with a plain INSERT, not an upsert. A record read from a store,
    # or copied from one, may have a row: False.
    unwritten: bool = field(default=False, compare=False, repr=False)

    @property
    def position(self) -> tuple[int, int, int]:
        return (self.branch, self.step_no, self.seq)

    @property
    def carried(self) -> bool:
        """Carried over by an upgrade and not asked for again yet: it waits at a
        negative seq, outside the positions a step counts (runs/durable/upgrade.py)."""
        return self.seq < 0

    @property
    def state(self) -> str:
        """Its state in MOVES: the status, or TO_RETRY for an operator's retry."""
        if self.resolution == RETRY and self.status in (INTENT, ERROR):
            return TO_RETRY
        return self.status

    @property
    def standing(self) -> str:
        """Where it stands: LIVE, SUPERSEDED or CARRIED."""
        return SUPERSEDED if self.superseded else CARRIED if self.carried else LIVE

    @property
    def replays(self) -> bool:
        """Its outcome is logged: a replay returns (done) or raises (error) it."""
        return self.status == DONE or (self.status == ERROR and self.resolution != RETRY)

    @property
    def skipped(self) -> bool:
        """A gate (or an operator) said to skip it: it returns `result`, uncalled."""
        return self.status == DONE and self.resolution == SKIP

    def describe(self) -> dict:
        return {"kind": self.kind, "tool": self.tool, "args_preview": self.args_preview,
                "digest": self.digest}

    def failure(self) -> ToolFailedError:
        """The error its logged failure raises in the step, the first time and on every
        replay: a gate's refusal as the gate's error (CallRefusedError, or
        ApprovalDeniedError for an approval), else a ToolFailedError."""
        error = self.error or {}
        if self.resolution == REFUSED:
            refused = ApprovalDeniedError if error.get("type") == "ApprovalDeniedError" else \
                CallRefusedError
            return refused(self.tool, error.get("message", ""), gate=error.get("gate", ""))
        return ToolFailedError(self.tool, error.get("type", "Error"), error.get("message", ""),
                               self.attempts, permanent=bool(error.get("permanent")))

    # --- a step's moves ---------------------------------------------------------------
    def done(self, result, *, at: float, finished: bool = True) -> None:
        """A value, a timer, a child launched or waited for: done as it is recorded
        (a timer's record is done at once, its `result` the wake time, never finished)."""
        self._move("done")
        self.status, self.result = DONE, result
        self.started_at, self.finished_at = at, (at if finished else None)

    def succeed(self, result, *, at: float) -> None:
        """The call returned `result` (what a replay of it returns)."""
        self._move("succeed")
        self.finished_at, self.resolution = at, ""
        self.status, self.result = DONE, result

    def fail(self, error: dict, *, at: float) -> None:
        """The call failed for good, with `error` (error_data)."""
        self._move("fail")
        self.finished_at, self.resolution = at, ""
        self.status, self.result, self.error = ERROR, None, error

    def retry_at(self, error: dict, *, wake_at: float, wait: float = 0.0) -> None:
        """An attempt failed with `error`; the next one is due at `wake_at`: what the log
        says of a call between two attempts."""
        self._move("retry_at")
        self.status, self.finished_at, self.error = RETRYING, None, error
        self.result = {"wake_at": wake_at, "first_at": self.started_at, "wait": wait}

    def in_doubt(self, error: dict) -> None:
        """An attempt that may have reached the target failed: its outcome is unknown,
        the intent stays without one (with the error, for the operator)."""
        self._move("in_doubt")
        self.status, self.resolution, self.error = INTENT, "", error

    def attempt(self) -> None:
        """A non-idempotent call's next attempt after a durable wait: until its outcome is
        logged, it is in doubt again."""
        self._move("attempt")
        self.status, self.error = INTENT, None

    def retry_start(self, *, at: float) -> None:
        """An operator's retry of a non-idempotent call is used up as it starts: if this
        attempt is cut short too, it is in doubt again, never repeated without one."""
        self._move("retry_start")
        self.status, self.resolution, self.error = INTENT, "", None
        self.started_at = at

    def skip(self, result, *, at: float) -> None:
        """A gate said to skip the call: it returns `result`, uncalled."""
        self._move("skip")
        self._decided(SKIP, at)
        self.status, self.result, self.error = DONE, result, None

    def refuse(self, error: dict, *, at: float) -> None:
        """A gate refused the call: `error` is raised in the step, now and on replay."""
        self._move("refuse")
        self._decided(REFUSED, at)
        self.status, self.result, self.error = ERROR, None, error

    def _decided(self, resolution: str, at: float) -> None:
        self.started_at, self.finished_at = self.started_at or at, at
        self.resolution, self.attempts = resolution, 0

    # --- an operator's moves ------------------------------------------------------------
    def ask_retry(self) -> None:
        """Make it again under its key (an in-doubt call, or a failed run's failures)."""
        self._move("ask_retry")
        self.resolution = RETRY

    def resolve(self, result, resolution: str, *, at: float) -> None:
        """An in-doubt call happened (`done`, with `result`) or is skipped (`skip`)."""
        self._move("resolve")
        self.status, self.result, self.resolution, self.finished_at = DONE, result, resolution, at

    def answer(self, value, *, at: float) -> None:
        """A person answered the question (wait_for_input)."""
        self._move("answer")
        self.status, self.result, self.finished_at = DONE, value, at

    def wake(self, *, at: float) -> None:
        """Its next attempt is due now (retry now)."""
        self._move("wake")
        self.result = {**self.result, "wake_at": at}

    def give_up(self, error: dict, *, at: float) -> None:
        """No more attempts: it fails with `error` (not a permanent one)."""
        self._move("give_up")
        self.status, self.error, self.result, self.finished_at = ERROR, error, None, at

    # --- where it stands: copies, the record read stays as it was -----------------------
    def superseding(self) -> EffectRecord:
        """The record superseded by a rollback or an edit: never replayed again."""
        self._move("supersede")
        return dataclasses.replace(self, superseded=True)

    def carried_to(self, branch: int, seq: int) -> EffectRecord:
        """Carried over by an upgrade onto `branch`, waiting at `seq` (< 0) under its own
        key for new code to ask for the same call."""
        self._move("carry")
        return dataclasses.replace(self, branch=branch, seq=seq, superseded=False,
                                   moved_from=self.position)

    def taken_over_at(self, position: tuple[int, int, int]) -> EffectRecord:
        """A carried effect taken over by the same call at `position`: written there with
        the next commit, under its own key."""
        self._move("take_over")
        branch, step_no, seq = position
        return dataclasses.replace(self, branch=branch, step_no=step_no, seq=seq,
                                   moved_from=self.moved_from or self.position)

    def _move(self, move: str) -> None:
        starts, _ = MOVES[move]
        state = self.standing if move in ("supersede", "carry", "take_over") else self.state
        if state not in starts:
            raise InvalidEffectMove(move, state, self.key)


def error_data(exc: BaseException, *, permanent: bool) -> dict:
    """A failure as an effect's `error` keeps it: what a replay raises again."""
    return {"type": type(exc).__name__, "message": str(exc)[:2000], "permanent": permanent}
