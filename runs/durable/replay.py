"""The replay state of one session: what the log already holds, and what replaying it found.

A session builds it from what it loaded and trims it at each checkpoint; every
RunContext of the session reads and updates the same object. Nothing else of the
session is shared with the contexts' replay logic, so the rules of replay are
here alone:

  * a position that is logged returns its record, once, after checking that the
    call is the same one (else the replay is halted: non-determinism);
  * a halted replay stays halted: every later effect raises the same error, even
    when the agent caught the first one;
  * an effect carried over by an upgrade (runs/durable/upgrade.py) waits outside the
    positions; a new call that is the same call (kind, tool, arguments) as one of them
    takes it over: its result, under its own key, at the new call's position. So an
    upgrade never makes a logged effect again, wherever the new code asks for it;
  * a patch marker (ctx.patched) is found at its position; a position the history
    filled with something else, or passed, was recorded by code without the patch;
  * `settling`: after a session that ended mid-step (a crash, a store failure), until
    the first new call: that call may be the one the last session left in flight. A
    cancel (there at the claim, or landing while the step replays towards that call)
    first settles the step: the call, if idempotent, is issued again under its key
    (the target dedups), so the effect log shows every write the outside world may
    hold. No other new effect, and never a non-idempotent one, starts after the cancel.
"""

from __future__ import annotations

from collections.abc import Iterable

from . import records as r
from .errors import DurableError, NonDeterminismError
from .serde import digest, preview

# What a carried effect may stand in for: calls to the world, questions to people and
# child runs. Not now()/random()/sleep (no side effect: a new value is as good) and not
# a patch marker (it says which code ran, not what happened).
CARRIED_KINDS = (r.CALL, r.INPUT, r.SPAWN, r.JOIN)


class ReplayState:
    def __init__(self, effects: Iterable[r.EffectRecord] = (), *, settling: bool = False):
        self.halted: DurableError | None = None
        self.settling = settling
        self.last_position: tuple | None = None  # the last position asked for
        self.load(effects)

    def load(self, effects: Iterable[r.EffectRecord]) -> None:
        """What the log holds after the checkpoint a session resumes from."""
        effects = [e for e in effects if e.step_no > 0]  # resume effects are never replayed
        self._recorded = {e.position: e for e in effects if not e.carried}
        self._carried = [e for e in effects if e.carried and e.kind in CARRIED_KINDS]

    @property
    def replaying(self) -> bool:
        """Logged positions are still ahead: what the agent emits now was already written
        with them."""
        return bool(self._recorded)

    def pending(self) -> int:
        """How many logged positions are still to be replayed."""
        return len(self._recorded)

    def take(self, position: tuple, kind: str, name: str, args, kwargs) -> r.EffectRecord | None:
        """The effect logged at `position` (or a carried one that is the same call, moved
        here), or None when it is new. Raises (and halts on) NonDeterminismError when the
        agent now makes a different call there."""
        self.raise_if_halted()
        self.last_position = position
        recorded = self._recorded.pop(position, None)
        if recorded is None and not self._carried:
            return None  # a new effect: its record's digest is the one taken (Step.new_record)
        attempted = digest(name, args, kwargs)
        if recorded is None:
            return self._take_carried(position, kind, name, attempted)
        if (recorded.kind, recorded.tool, recorded.digest) != (kind, name, attempted):
            raise self.halt(NonDeterminismError(
                position=position, recorded=recorded.describe(),
                attempted={"kind": kind, "tool": name, "args_preview": preview(args, kwargs),
                           "digest": attempted}))
        return recorded

    def _take_carried(self, position, kind: str, name: str, attempted: str):
        found = next((e for e in self._carried
                      if (e.kind, e.tool, e.digest) == (kind, name, attempted)), None)
        if found is None:
            return None
        self._carried.remove(found)
        return found.taken_over_at(position)

    def patch_marker(self, position: tuple, patch_id: str) -> bool | None:
        """A patch marker at `position`: True (recorded there, taken), False (the history
        was recorded without it: something else is there, or the history goes on past
        it), None (nothing recorded here or later: the code runs live)."""
        self.raise_if_halted()
        self.last_position = position
        recorded = self._recorded.get(position)
        if recorded is not None:
            if (recorded.kind, recorded.tool) == (r.PATCH, patch_id):
                del self._recorded[position]
                return True
            return False
        return False if self.goes_on_after(position) else None

    def goes_on_after(self, position: tuple) -> bool:
        """Some logged position after `position` is still to be replayed."""
        return any(p > position for p in self._recorded)

    def left_in_step(self, branch: int, step_no: int) -> list[r.EffectRecord]:
        """The logged effects of a step that its replay did not ask for, in log order."""
        return sorted((e for p, e in self._recorded.items() if p[:2] == (branch, step_no)),
                      key=lambda e: e.position)

    def halt(self, exc: DurableError) -> DurableError:
        """Replay cannot go on: every later effect of this session raises `exc` too."""
        self.halted = exc
        return exc

    def raise_if_halted(self) -> None:
        if self.halted is not None:
            raise self.halted

    def checkpointed(self, step_no: int) -> None:
        """Steps at or before a checkpoint are never replayed again; nor is a carried
        effect of such a step taken over any more (the new code has passed it)."""
        self._recorded = {p: e for p, e in self._recorded.items() if p[1] > step_no}
        self._carried = [e for e in self._carried if e.step_no > step_no]

    def settled(self) -> bool:
        """The settling call (if any) is about to start: settling ends. True if it was on."""
        was, self.settling = self.settling, False
        return was
