"""The storm and what comes after it: set up, launch, inject, drain, audit.

    set up   the chaos database, the sandbox, a fault-free reference run of every
             configuration (in this process, before any worker exists), then Daphne,
             two or more worker trees and the websocket followers;
    storm    launches runs and injects faults at random times from the seed, while
             the operator races them and users answer questions;
    drain    disarms what is left, thaws frozen workers, resumes paused runs and lets
             every run reach a final state, resolving what needs attention;
    audit    the database, the outside world and the followers (tests/chaos/audit.py).
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import time
import traceback
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management import call_command

from runs import services
from runs.models import Run
from tests.chaos import audit as auditing
from tests.chaos import recovery, workload
from tests.chaos.db import db_call, freeze_without_the_write_lock
from tests.chaos.faults import Injector
from tests.chaos.followers import Followers, login
from tests.chaos.operator import Operator, Plan, notifications
from tests.chaos.stack import Stack

FINAL = ("succeeded", "failed", "cancelled")
PASSWORD = "chaos-pass-1"


@dataclass
class Result:
    profile: object
    database: str
    started: float
    timings: dict = field(default_factory=dict)
    plans: dict = field(default_factory=dict)
    references: dict = field(default_factory=dict)
    faults: list = field(default_factory=list)
    unfired: list = field(default_factory=list)
    actions: dict = field(default_factory=dict)
    decisions: list = field(default_factory=list)
    recoveries: list = field(default_factory=list)
    findings: list = field(default_factory=list)
    figures: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)

    def as_json(self) -> dict:
        return {"profile": vars(self.profile), "database": self.database,
                "timings": self.timings, "figures": self.figures, "findings": self.findings,
                "faults": [vars(f) for f in self.faults], "notes": self.notes}


class Harness:
    def __init__(self, profile, workdir: Path, *, postgres, redis, sandbox_port: int):
        self.profile = profile
        self.rng = random.Random(profile.seed)
        self.workdir = workdir
        self.sandbox_port = sandbox_port
        self.stack = Stack(workdir, postgres=postgres, redis=redis, workers=profile.workers,
                           lease_seconds=profile.lease_seconds, time_slice=profile.time_slice)
        self.operator = Operator(self)
        self.followers: Followers | None = None
        self.result = Result(profile, "PostgreSQL" if postgres else "SQLite", time.time())
        self._next_sample = 0.0
        self.hung: list[str] = []

    # --- the whole thing -----------------------------------------------------------------
    def run(self) -> Result:
        try:
            self.set_up()
            self.storm()
            self.drain()
            self.probe_clusters()
            self.audit()
        finally:
            self.tear_down()
        self.result.timings["total"] = round(time.time() - self.result.started, 1)
        return self.result

    def phase(self, name: str, started: float) -> None:
        self.result.timings[name] = round(time.monotonic() - started, 1)
        print(f"chaos: {name} done in {self.result.timings[name]} s", flush=True)

    def set_up(self) -> None:
        started = time.monotonic()
        print(f"chaos: profile {self.profile.name}, seed {self.profile.seed}, "
              f"{self.result.database}, logs in {self.workdir}", flush=True)
        call_command("migrate", verbosity=0, interactive=False)
        users = get_user_model().objects
        self.user = users.create_user("chaos-user", password=PASSWORD)
        operator = users.create_user("chaos-operator", password=PASSWORD)
        operator.groups.add(Group.objects.get(name="Operators"))
        self.stack.start_sandbox(self.sandbox_port)
        self.configs = workload.mix(self.profile.name == "ci", self.profile.scale)
        self.result.references = workload.references(self.configs, self.user)
        print("chaos: fault-free reference runs: " + ", ".join(
            f"{name} {ref['seconds']} s" for name, ref in self.result.references.items()),
            flush=True)
        self.stack.start_web()
        for _ in range(self.profile.clusters):
            self.stack.start_cluster()
        self.followers = Followers(self.stack.web.url,
                                   login(self.stack.web.url, "chaos-user", PASSWORD))
        self.injector = Injector(self)
        self.phase("set up", started)

    def tear_down(self) -> None:
        if getattr(self, "injector", None) is not None:
            self.injector.disarm()
            self.injector.thaw(all_now=True)
        if self.followers is not None:
            self.followers.stop()
        self.stack.stop()

    # --- the storm ---------------------------------------------------------------------------
    def storm(self) -> None:
        p = self.profile
        started = time.monotonic()
        length = p.minutes * 60
        launch_gap = length * 0.75 / p.runs
        fault_gap = length * 0.85 / p.faults
        action_gap = length * 0.85 / max(1.0, p.operator_share * p.runs)
        kinds = self._kind_schedule()
        next_launch = next_fault = 0.0
        next_action = action_gap
        weights = [c.weight for c in self.configs]
        while True:
            now = time.monotonic() - started
            if len(self.operator.plans) < p.runs and now >= next_launch:
                self.launch(self.rng.choices(self.configs, weights)[0])
                next_launch += launch_gap * self.rng.uniform(0.5, 1.5)  # catches up after a
                # slow fault (a PostgreSQL restart blocks this loop for seconds)
            if now >= next_fault and self._struck() < p.faults:
                self.inject(next(kinds))
                next_fault += fault_gap * self.rng.uniform(0.5, 1.5)
            if now >= next_action:
                self.guard("operator", self.operator.act_at_random)
                next_action = now + action_gap * self.rng.uniform(0.5, 1.5)
            self.tick()
            if len(self.operator.plans) >= p.runs and self._struck() >= p.faults:
                break
            if now > length:
                self.result.notes.append(
                    f"the storm reached its time limit ({p.minutes} min) with "
                    f"{len(self.operator.plans)} runs launched and {self._struck()} faults "
                    "struck; the rest of the runs were launched at once")
                while len(self.operator.plans) < p.runs:
                    self.launch(self.rng.choices(self.configs, weights)[0])
                break
            time.sleep(0.1)
        self.phase("storm", started)

    def _kind_schedule(self):
        """Every kind once per round, in a seeded order: all kinds, evenly."""
        def rounds():
            for _ in itertools.count():
                kinds = list(self.profile.kinds)
                self.rng.shuffle(kinds)
                yield from kinds
        return rounds()

    def _struck(self) -> int:
        return len(self.result.faults)

    def launch(self, config) -> None:
        run = db_call(services.run_launch, user=self.user, agent=config.agent,
                      inputs=config.inputs)
        plan = Plan(run.id, config.name, config.rollback, time.time())
        self.operator.plans[run.id] = plan
        if self.rng.random() < self.profile.follow_share:
            plan.followed = True
            self.followers.follow(run.id)

    def inject(self, kind: str) -> None:
        fault = self.guard(f"fault {kind}", self.injector.inject, kind)
        if fault is not None:
            self.result.faults.append(fault)
            print(f"chaos: {len(self.result.faults):4d} {fault.kind:36s} {fault.detail} "
                  f"({len(fault.runs)} runs)", flush=True)

    def tick(self) -> None:
        for fault in self.injector.fired():
            self.result.faults.append(fault)
            print(f"chaos: {len(self.result.faults):4d} {fault.kind:36s} {fault.detail} "
                  f"({len(fault.runs)} runs)", flush=True)
        self.injector.thaw()
        self.hung.extend(self.injector.hung_deploys())
        self.guard("operator", self.operator.tick)
        if time.monotonic() >= self._next_sample:
            self._next_sample = time.monotonic() + 2.0
            load = self.result.figures.setdefault("load", {"max": 0.0, "samples": []})
            load["samples"].append(os.getloadavg()[0])
            load["max"] = max(load["max"], load["samples"][-1])
            if self.stack.postgres is not None:
                self.guard("connection sample", self._sample_connections)
        while len(self.stack.clusters) < self.profile.clusters:
            self.guard("cluster start", self.stack.start_cluster)

    def guard(self, what: str, fn, *args):
        """A harness step that failed is a note in the report, not the end of the storm."""
        try:
            return fn(*args)
        except Exception as exc:
            self.result.notes.append(f"{what} failed: {type(exc).__name__}: {exc}")
            traceback.print_exc()
            return None

    def _sample_connections(self) -> None:
        kinds = self.stack.postgres.connections()
        peak = self.result.figures.setdefault("connections", {"peak": 0, "by_process": {}})
        if sum(kinds.values()) > peak["peak"]:
            peak["peak"], peak["by_process"] = sum(kinds.values()), kinds

    def downstream_notifications(self) -> dict[str, int]:
        return notifications(self.stack.sandbox_url)

    # --- the drain ---------------------------------------------------------------------------
    def drain(self) -> None:
        started = time.monotonic()
        self.result.unfired = self.injector.disarm()
        self.tick()
        self.injector.thaw(all_now=True)
        self.operator.resume_all_paused()
        # Runs still queued behind a backlog are not stuck: wait while they progress, and
        # call the rest stuck only after drain_seconds without any run moving.
        cap = time.monotonic() + 10 * self.profile.drain_seconds
        last_progress, last_heads = time.monotonic(), None
        while time.monotonic() < cap:
            self.tick()
            if self._settled():
                break
            heads = db_call(lambda: sum(Run.objects.filter(pk__in=list(self.operator.plans))
                                        .values_list("event_seq", flat=True)))
            if heads != last_heads:
                last_progress, last_heads = time.monotonic(), heads
            elif time.monotonic() - last_progress > self.profile.drain_seconds:
                break
            time.sleep(0.5)
        heads = db_call(lambda: dict(Run.objects.filter(pk__in=list(self.followers.followers))
                                     .values_list("id", "event_seq")))
        self.followers.wait_caught_up(heads, 30)
        self.phase("drain", started)

    def probe_clusters(self, timeout: float = 30.0) -> None:
        """Each cluster the storm left must still run work alone: the others are frozen
        while a short run is launched. Another cluster taking all the work hid a cluster
        whose workers hung on a poisoned queue."""
        started = time.monotonic()
        probe = next(c for c in self.configs if c.name == "ledger")
        for cluster in list(self.stack.clusters):
            others = [c for c in self.stack.clusters if c is not cluster]
            if not freeze_without_the_write_lock(partial(_signal_all, others, signal.SIGSTOP),
                                                 partial(_signal_all, others, signal.SIGCONT)):
                raise RuntimeError("a frozen process kept SQLite's write lock at every try")
            try:
                run = db_call(services.run_launch, user=self.user, agent=probe.agent,
                              inputs=probe.inputs)
                self.operator.plans[run.id] = Plan(run.id, probe.name, False, time.time())
                deadline = time.monotonic() + timeout
                status = db_call(_status, run.id)
                while time.monotonic() < deadline and status not in FINAL:
                    time.sleep(0.2)
                    status = db_call(_status, run.id)
                if status != "succeeded":
                    self.hung.append(f"cluster pid {cluster.pid} alone did not finish a probe "
                                     f"run in {timeout:.0f} s after the storm (run {run.id} "
                                     f"{status}; processes {cluster.all_pids()})")
            finally:
                _signal_all(others, signal.SIGCONT)
        self.phase("probe", started)

    def _settled(self) -> bool:
        rows = db_call(lambda: list(Run.objects.filter(pk__in=list(self.operator.plans))
                                    .exclude(status__in=FINAL).values_list("id", "status",
                                                                           "attention")))
        hopeless = [r for r in rows if r[1] == "needs_attention" and
                    (r[2] or {}).get("kind") not in ("in_doubt", "crash_loop")]
        return len(rows) == len(hopeless)

    # --- the audit -------------------------------------------------------------------------------
    def audit(self) -> None:
        started = time.monotonic()
        self.stack.stop_clusters()  # the world stands still while it is audited
        plans = self.operator.plans
        data = db_call(auditing.load, list(plans))
        outside = auditing.load_outside(self.stack.sandbox_url)
        followed = {k: v for k, v in self.followers.followers.items()}
        result = auditing.audit(plans, self.result.references, data, outside, followed)
        result.findings.extend(self.operator.unresolvable)
        result.findings.extend(self.hung)
        rows = recovery.recoveries(self.result.faults, data)
        self.result.recoveries = rows
        self.result.findings = result.findings
        self.result.figures = {**self.result.figures, **result.figures,
                               "recovery": recovery.summary(rows)}
        self.result.plans = plans
        self.result.actions = self.operator.actions
        self.result.decisions = self.operator.decisions
        self.phase("audit", started)


def _signal_all(clusters, sig) -> None:
    for cluster in clusters:
        cluster.signal_group(sig)


def _status(run_id: str) -> str:
    return Run.objects.filter(pk=run_id).values_list("status", flat=True).get()
