"""The one place where the engine asks its gates about a call (runs/durable/policies/gates.py:
what a gate is and what it may answer).

A call meets the host's gates (`WorkerConfig.gates`) at four moments, and at each one
every gate that listens is asked in one pass, in the order configured:

  admit          before a new call, or one made again, writes anything: every gate
                 decides (`check`); the first that does not allow it decides
                 (`policies.gates.decide`), and a Wait is waited out here
  admit_attempt  before another attempt of the call reaches the world after a retry
                 wait: the gates that count every attempt (`every_attempt = True`)
  attempt_failed an attempt failed: `attempt_failed(tool, record, exc)` (a provider's
                 Retry-After)
  attempt_ended  an attempt is over (returned, failed, or left for a durable retry):
                 `ended(tool, record, holder)`, the holder being the claim's epoch (a
                 takeover's attempt is another request); the calls waiting for one in
                 flight then decide again

What the call does with an answer (log a refusal, hold the run) is the call path's
(runs/durable/calls.py); the gates only decide. A gate that meets the worker's database
failing (`WorkerConfig.store_faults`) ends the session as the store's own failure does:
the run is taken back and asks again; any other error out of a gate is its bug and
fails the step.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from . import records as r
from .config import store_faults_end_the_session
from .errors import Held
from .parallel_slots import NotStarted, group_stopped
from .policies.budget import waiters
from .policies.gates import ALLOW, Allow, Decision, GateCall, Hold, Refuse, Wait, decide

if TYPE_CHECKING:  # pragma: no cover
    from .host import StepHost
    from .registry import Tool


class CallGates:
    """The host's gates about one call."""

    def __init__(self, host: StepHost, tool: Tool, record: r.EffectRecord, args, kwargs):
        self.host = host
        self.gates = host.config.gates
        self.tool, self.record = tool, record
        self.args, self.kwargs = args, kwargs

    def admit(self) -> Allow | Refuse:
        """Every gate about a call about to be made (nothing written at its position
        yet): Allow (with every gate's note) or Refuse; a Hold raises Held."""
        if not self.gates:
            return ALLOW
        decision = self._decided(self.gates, new=True)
        if isinstance(decision, Hold):
            raise Held(decision)
        return decision

    def admit_attempt(self) -> None:
        """The gates that count every request reaching the world, about the next attempt
        of a call (the others decided about the call once). A Hold raises Held; nothing
        else stops an attempt of a call already let through."""
        asked = tuple(gate for gate in self.gates if getattr(gate, "every_attempt", False))
        if not asked:
            return
        decision = self._decided(asked, new=False)
        if isinstance(decision, Hold):
            raise Held(decision)

    def attempt_failed(self, exc: BaseException) -> None:
        with store_faults_end_the_session(self.host.config):
            for gate in self.gates:
                hook = getattr(gate, "attempt_failed", None)
                if hook is not None:
                    hook(self.tool, self.record, exc)

    def attempt_ended(self) -> None:
        """Every gate hears of it, even after one failed: a gate left unheard keeps the
        attempt in flight (a slot of a limit, a share of a budget). The first failure is
        raised once all have heard."""
        failed = None
        for gate in self.gates:
            hook = getattr(gate, "ended", None)
            try:
                if hook is not None:
                    with store_faults_end_the_session(self.host.config):
                        hook(self.tool, self.record, self.host.epoch)
            except BaseException as exc:  # noqa: BLE001 - raised below, after the others
                failed = failed or exc
        waiters.wake()  # calls waiting for a call in flight decide again
        if failed is not None:
            raise failed

    def _decided(self, gates, *, new: bool) -> Decision:
        """`decide`, waiting in this thread while a gate answers Wait. A new call (not the
        next attempt of one already started) gives up its wait at an engine stop: its
        parallel group's (NotStarted), or a pause, cancel or shutdown; but a call that a
        cancel let through its effect boundary (one that settles what a dead worker left
        in flight) is still made."""
        since = time.monotonic()
        settling = self.host.control == r.CANCEL
        call = GateCall(self.host.run, self.tool, self.args, self.kwargs, self.record,
                        self.host.store)
        while True:
            mark = waiters.mark()
            with store_faults_end_the_session(self.host.config):
                decision = decide(gates, call)
            if not isinstance(decision, Wait):
                return decision
            if decision.patience is not None and time.monotonic() - since >= decision.patience:
                return decision.as_hold()
            waiters.wait(mark, decision.poll)
            if new:
                if group_stopped():
                    raise NotStarted()
                if not settling:
                    self.host.effect_boundary()
