"""Runs held by a shared limit, simulated on a clock the test moves: the limit's own code
(the engine's LimitGate on a real store) decides, and each simulated run comes back
exactly when its timer says (`wake_at`, moved earlier by the gate's wake-ups as the
worker's sweep would find it), makes its call, which lasts `duration`, and asks for
its next one at once. Nothing waits for real time, so what the limit lets through in
each of its windows is the algorithm's doing alone."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from types import SimpleNamespace

from runs.durable.policies.gates import Allow, GateCall
from runs.durable.policies.limits import LimitGate, LimitRule
from runs.durable.registry import tool

T0 = 1_000_000.0


class InWorker(Exception):
    """The gate waits in the run's worker for a slot about to open: the simulation asks
    again then (and goes on with the other runs meanwhile)."""

    def __init__(self, seconds: float):
        self.seconds = seconds


@tool(idempotent=True, limit="llm", name="tests.limits.simulation.model")
def model(prompt: str, *, idempotency_key: str) -> str:
    return prompt


@dataclass
class SimRun:
    id: str
    owner: str
    calls: int
    done: int = 0
    wake_at: float | None = None   # its timer while it waits on the limit
    timer: int = 0                 # which of its timers is the live one

    def key(self) -> str:
        return f"{self.id}:1:{self.done}:0"


@dataclass
class Simulation:
    store: object
    rule: LimitRule
    duration: float = 0.1        # how long a call is in flight
    tokens: int = 0              # what each call used (a model call's usage)
    never_back: frozenset = frozenset()  # runs held once that never come back (cancelled)
    now: float = T0
    runs: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)   # (start, end) of every call made
    wakes: int = 0               # timers moved earlier
    early: int = 0               # runs back on their timers only to be held again
    in_worker: float = 0.0       # seconds runs waited in their workers for a slot
    _events: list = field(default_factory=list)
    _seq: int = 0

    def __post_init__(self):
        self.gate = LimitGate(self.store, {self.rule.name: self.rule}.get,
                              clock=lambda: self.now, wake=self.wake, pause=self._pause)

    @staticmethod
    def _pause(seconds: float) -> None:
        raise InWorker(seconds)

    def launch(self, run_id: str, owner: str, calls: int, at: float) -> None:
        self.runs[run_id] = SimRun(run_id, owner, calls)
        self._at(T0 + at, "ask", run_id)

    def wake(self, limit: str, wakes) -> None:
        """The production waker moves a held run's timer earlier, never later."""
        for wake in wakes:
            run = self.runs.get(wake.run)
            if run is not None and run.wake_at is not None and wake.at < run.wake_at:
                self.wakes += 1
                self._wait(run, wake.at)

    def run_all(self, horizon: float = 3600.0) -> None:
        while self._events:
            at, _, kind, run_id, timer = heapq.heappop(self._events)
            run = self.runs[run_id]
            if kind == "ask" and timer != run.timer:
                continue  # a timer moved earlier since: it fired then
            assert at < T0 + horizon, "the simulation went on for an hour: runs stuck"
            self.now = max(self.now, at)
            if kind == "ask":
                self._ask(run)
            else:
                self._end(run)

    # --- what a run does ---------------------------------------------------------------
    def _ask(self, run: SimRun) -> None:
        was_held, run.wake_at = run.wake_at is not None, None
        try:
            decision = self.gate.check(self._call(run))
        except InWorker as waiting:
            self.in_worker += waiting.seconds
            run.timer += 1
            self._at(self.now + waiting.seconds, "ask", run.id, run.timer)
            return
        if isinstance(decision, Allow):
            self.calls.append((self.now, self.now + self.duration))
            self._at(self.now + self.duration, "end", run.id)
            return
        assert decision.wait and decision.wake_at > self.now - 1e-9, decision
        self.early += was_held
        self._wait(run, decision.wake_at)

    def _wait(self, run: SimRun, at: float) -> None:
        run.wake_at = at
        run.timer += 1
        if run.id not in self.never_back:
            self._at(at, "ask", run.id, run.timer)

    def _end(self, run: SimRun) -> None:
        record = SimpleNamespace(key=run.key(), usage={"prompt_tokens": self.tokens})
        self.gate.ended(model, record, 1)
        run.done += 1
        if run.done < run.calls:
            self._at(self.now, "ask", run.id)

    def _call(self, run: SimRun) -> GateCall:
        record = SimpleNamespace(key=run.key())
        return GateCall(SimpleNamespace(id=run.id, owner=run.owner, epoch=1), model, (), {},
                        record, store=None)

    def _at(self, at: float, kind: str, run_id: str, timer: int | None = None) -> None:
        self._seq += 1
        # at one instant, calls end before runs ask: a slot given back is there to take
        order = 0 if kind == "end" else 1
        heapq.heappush(self._events, (at, order * 1e9 + self._seq, kind, run_id,
                                      self.runs[run_id].timer if timer is None else timer))

    # --- what the provider saw -----------------------------------------------------------
    def per_window(self) -> list[int]:
        """Calls started in each window of the limit (`per` seconds from the first call)
        that ended before the last call started: work waited through every one of them."""
        starts = sorted(start for start, _ in self.calls)
        first, last = starts[0], starts[-1]
        windows = int((last - first) // self.rule.per)
        counts = [0] * windows
        for start in starts:
            index = int((start - first) // self.rule.per)
            if index < windows:
                counts[index] += 1
        return counts

    def busy(self) -> float:
        """How full the concurrency slots were from the first call to the last start."""
        starts = sorted(start for start, _ in self.calls)
        first, last = starts[0], starts[-1]
        used = sum(max(0.0, min(end, last) - max(start, first)) for start, end in self.calls)
        return used / (self.rule.concurrency * (last - first))
