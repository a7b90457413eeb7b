"""The replay state of one session: what the log already holds, and what replaying it found.

A session builds it from what it loaded and trims it at each checkpoint; every
RunContext of the session reads and updates the same object. Nothing else of the
session is shared with the contexts' replay logic, so the rules of replay are
here alone:

  * a position that is logged returns its record, once, after checking that the
    call is the same one (else the replay is halted: non-determinism);
  * a halted replay stays halted: every later effect raises the same error, even
    when the agent caught the first one;
  * `settling`: after a crash, until the first new call: that call may be the one
    the dead worker left in flight. A cancel (there at the claim, or landing while
    the step replays towards that call) first settles the step: the call, if
    idempotent, is issued again under its key (the target dedups), so the effect
    log shows every write the outside world may hold. No other new effect, and never
    a non-idempotent one, starts after the cancel.
"""

from __future__ import annotations

from collections.abc import Iterable

from . import records as r
from .errors import DurableError, NonDeterminismError
from .serde import digest, preview


class ReplayState:
    def __init__(self, effects: Iterable[r.EffectRecord] = (), *, settling: bool = False):
        # Resume effects (step -epoch, on_resume's) are never replayed.
        self._recorded = {e.position: e for e in effects if e.step_no > 0}
        self.halted: DurableError | None = None
        self.settling = settling

    @property
    def replaying(self) -> bool:
        """Logged positions are still ahead: what the agent emits now was already written
        with them."""
        return bool(self._recorded)

    def take(self, position: tuple, kind: str, name: str, args, kwargs) -> r.EffectRecord | None:
        """The effect logged at `position`, or None when it is new. Raises (and halts on)
        NonDeterminismError when the agent now makes a different call there."""
        self.raise_if_halted()
        recorded = self._recorded.pop(position, None)
        if recorded is None:
            return None
        attempted = digest(name, args, kwargs)
        if (recorded.kind, recorded.tool, recorded.digest) != (kind, name, attempted):
            raise self.halt(NonDeterminismError(
                position=position, recorded=recorded.describe(),
                attempted={"kind": kind, "tool": name, "args_preview": preview(args, kwargs),
                           "digest": attempted}))
        return recorded

    def halt(self, exc: DurableError) -> DurableError:
        """Replay cannot go on: every later effect of this session raises `exc` too."""
        self.halted = exc
        return exc

    def raise_if_halted(self) -> None:
        if self.halted is not None:
            raise self.halted

    def checkpointed(self, step_no: int) -> None:
        """Steps at or before a checkpoint are never replayed again."""
        self._recorded = {p: e for p, e in self._recorded.items() if p[1] > step_no}

    def settled(self) -> bool:
        """The settling call (if any) is about to start: settling ends. True if it was on."""
        was, self.settling = self.settling, False
        return was
