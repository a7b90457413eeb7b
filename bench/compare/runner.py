"""What every scenario shares: the sizes, the log, and `repeat`, which runs one
repetition (agentops, then its peer) at a time and survives a database restart."""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

from bench.compare.stats import Samples

URL = "postgresql://postgres@127.0.0.1:5432/agentops_compare"
ATTEMPTS = 3


@dataclass
class Sizes:
    reps: int
    effects: int           # 1: effects in one run / steps in one DBOS workflow
    runs: int              # 2: small runs through the worker
    run_effects: int
    chat_steps: int        # 3
    big_steps: int         # 4: measured steps (after a short run that is subtracted)
    big_chunks: int
    resume_sizes: list     # 5: effects before the crash (agentops)
    dbos_resume_sizes: list
    active_runs: int       # 6
    window: float
    floor_rows: int

    @classmethod
    def for_mode(cls, quick: bool) -> Sizes:
        if quick:
            return cls(reps=3, effects=1000, runs=200, run_effects=5, chat_steps=200,
                       big_steps=40, big_chunks=1024, resume_sizes=[5_000, 50_000],
                       dbos_resume_sizes=[5_000], active_runs=1000, window=8.0,
                       floor_rows=1000)
        return cls(reps=5, effects=1000, runs=1000, run_effects=5, chat_steps=200,
                   big_steps=100, big_chunks=1024, resume_sizes=[5_000, 50_000, 500_000],
                   dbos_resume_sizes=[5_000], active_runs=1000, window=15.0, floor_rows=2000)


@dataclass
class Bench:
    url: str
    sizes: Sizes
    rows: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    floor: Samples = field(default_factory=Samples)
    on_recover: list = field(default_factory=list)

    def log(self, message: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)

    def repeat(self, name: str, body) -> dict[str, Samples]:
        """Call body(rep) `reps` times; it returns ({key: value}, message). A repetition
        cut short by a database restart (other test suites on this machine restart
        PostgreSQL) is run again whole, so agentops and its peer stay paired."""
        samples: dict[str, Samples] = defaultdict(Samples)
        for rep in range(self.sizes.reps):
            for attempt in range(1, ATTEMPTS + 1):
                try:
                    values, message = body(rep)
                    break
                except Exception as exc:
                    if attempt == ATTEMPTS or not database_outage(exc):
                        raise
                    self.log(f"{name} rep {rep + 1}: the database went away ({exc!s:.100}); "
                             "running the repetition again")
                    self.extra.setdefault("repetitions_run_again", []).append(
                        f"{name} rep {rep + 1}")
                    self.recover()
            for key, value in values.items():
                samples[key].add(value)
            self.log(f"{name} rep {rep + 1}: {message}")
        return samples

    def recover(self) -> None:
        import psycopg
        from django.db import connections

        deadline = time.monotonic() + 120
        while True:
            try:
                with psycopg.connect(self.url, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        connections.close_all()
        for hook in self.on_recover:
            hook()


OUTAGE_WORDS = ("terminating connection", "shutting down", "server closed the connection",
                "connection failed", "connection is closed", "connection refused",
                "the connection is lost", "consuming input failed", "is in recovery")


def database_outage(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) says the database went away."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc).lower()
        if any(word in text for word in OUTAGE_WORDS):
            return True
        exc = exc.__cause__ or exc.__context__
    return False
